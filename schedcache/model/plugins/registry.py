"""The default profile: kube-scheduler's filters in order, run by everything that judges a node
(the reference scheduler, the extender's filter, explain, what-if).

The framework stops at the first failing filter, in upstream's order: NodeUnschedulable,
NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, InterPodAffinity,
PodTopologySpread. The two inter-pod filters need the whole cluster: pass the
:class:`~schedcache.model.plugins.cycle.Cycle` of the snapshot the decision reads; without one
only the node-local filters run (what a bare ``NodeInfo`` can answer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schedcache.model.nodeinfo import NodeInfo, port_conflicts
from schedcache.model.plugins import interpodaffinity, podtopologyspread
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.nodelocal import (
    NODE_NOT_FOUND,
    PORTS_IN_USE,
    TOO_MANY_PODS,
    node_refuses,
)
from schedcache.model.plugins.result import FITS, FilterResult
from schedcache.model.values import Pod

NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"

#: The inter-pod filters, in the default profile's order (after the node-local ones).
INTER_POD_FILTERS: tuple[tuple[str, Callable[[Cycle, NodeInfo], FilterResult | None]], ...] = (
    (interpodaffinity.NAME, interpodaffinity.filter),
    (podtopologyspread.NAME, podtopologyspread.filter),
)


def filter_pod(pod: Pod, info: NodeInfo, cycle: Cycle | None = None) -> FilterResult:
    """Run the default profile's filters on one node; the first failure decides."""
    node = info.node
    if node is None:  # a ghost (its pods remain) or a placeholder: no node to schedule on
        return FilterResult((NODE_NOT_FOUND,), True)
    refused = node_refuses(pod, node)
    if refused is not None:
        return refused
    if pod.node_name and pod.node_name != node.name and cycle is not None:
        return FilterResult((NODE_NAME_MISMATCH,), True)
    if any(port_conflicts(port, info.used_ports) for port in pod.host_ports):
        return FilterResult((PORTS_IN_USE,))
    short = [name for name in info.shortages(pod) if name != "host-ports"]
    if short:
        return FilterResult(
            tuple(TOO_MANY_PODS if n == "pods" else f"Insufficient {n}" for n in short)
        )
    if cycle is not None:
        for _, plugin in INTER_POD_FILTERS:
            result = plugin(cycle, info)
            if result is not None:
                return result
    return FITS


def feasible(pod: Pod, infos: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes that pass every filter, judged in one cycle."""
    cycle = Cycle(pod, infos)
    return [info for info in infos if filter_pod(pod, info, cycle).fits]
