"""The default profile: kube-scheduler's filters in order, run by everything that judges a node
(the reference scheduler, the extender's filter, explain, what-if).

The framework stops at the first failing filter, in upstream's order: NodeUnschedulable,
NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, InterPodAffinity,
PodTopologySpread. The two inter-pod filters need the whole cluster: pass the
:class:`~schedcache.model.plugins.cycle.Cycle` of the snapshot the decision reads; without one
only the node-local filters run (what a bare ``NodeInfo`` can answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from schedcache.model.nodeinfo import NodeInfo, port_conflicts
from schedcache.model.plugins import (
    imagelocality,
    interpodaffinity,
    noderesources,
    podtopologyspread,
)
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.nodelocal import (
    NODE_NOT_FOUND,
    PORTS_IN_USE,
    TOO_MANY_PODS,
    intolerable_prefer_no_schedule,
    node_refuses,
    term_matches,
)
from schedcache.model.plugins.noderesources import MAX_NODE_SCORE
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


def cycle_for(
    pod: Pod, node_infos: Mapping[str, NodeInfo], anti_holders: Sequence[NodeInfo]
) -> Cycle | None:
    """The cycle to judge ``pod`` in over a snapshot's ``node_infos`` (``anti_holders``: its
    ``have_pods_with_required_anti_affinity_list``), or None when no inter-pod filter can
    refuse it (no rules of its own, no other pod with required anti-affinity): the node-local
    filters then decide alone, with no pass over the cluster per pod (what-if places
    thousands)."""
    if not pod.has_inter_pod_rules and not anti_holders:
        return None
    cycle = Cycle(pod, list(node_infos.values()), anti_holders=anti_holders)
    return cycle if pod.has_inter_pod_rules or cycle.repelling() else None


def feasible(pod: Pod, infos: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes that pass every filter, judged in one cycle."""
    cycle = Cycle(pod, infos)
    return [info for info in infos if filter_pod(pod, info, cycle).fits]


# -- scores -----------------------------------------------------------------------------------

#: The default profile's score plugins and weights (kube-scheduler's v1 defaults).
WEIGHTS: dict[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}
MAX_TOTAL = MAX_NODE_SCORE * sum(WEIGHTS.values())


def _default_normalize(raw: dict[str, int], reverse: bool) -> dict[str, int]:
    """Upstream's ``DefaultNormalizeScore(MaxNodeScore, reverse)``."""
    high = max(raw.values(), default=0)
    if high == 0:
        return dict.fromkeys(raw, MAX_NODE_SCORE if reverse else 0)
    out = {}
    for name, s in raw.items():
        s = MAX_NODE_SCORE * s // high
        out[name] = MAX_NODE_SCORE - s if reverse else s
    return out


def plugin_scores(
    pod: Pod, candidates: Sequence[NodeInfo], cycle: Cycle, strategy: str = "LeastAllocated"
) -> dict[str, dict[str, int]]:
    """Each score plugin's normalised 0-100 score per candidate node (by plugin name)."""
    fit = noderesources.STRATEGIES[strategy]
    live = [info for info in candidates if info.node is not None]
    total_nodes = sum(1 for _ in cycle.nodes())
    out: dict[str, dict[str, int]] = {
        "NodeResourcesFit": {i.name: fit(pod, i) for i in live},
        "NodeResourcesBalancedAllocation": {
            i.name: noderesources.balanced_allocation(pod, i) for i in live
        },
        "ImageLocality": {i.name: imagelocality.score(pod, i, total_nodes) for i in live},
        "TaintToleration": _default_normalize(
            {i.name: intolerable_prefer_no_schedule(pod, i) for i in live}, reverse=True
        ),
        "NodeAffinity": _default_normalize(
            {i.name: preferred_node_affinity(pod, i) for i in live}, reverse=False
        ),
        "InterPodAffinity": interpodaffinity.normalize(
            {i.name: interpodaffinity.score(cycle, i) for i in live}
        ),
    }
    spread = podtopologyspread.scores(cycle, live)
    if spread:
        out["PodTopologySpread"] = spread
    return out


def score_nodes(
    pod: Pod, candidates: Sequence[NodeInfo], cycle: Cycle, strategy: str = "LeastAllocated"
) -> dict[str, int]:
    """The weighted sum of the default profile's scores per candidate (unknown nodes: 0)."""
    totals = {info.name: 0 for info in candidates}
    for plugin, scores in plugin_scores(pod, candidates, cycle, strategy).items():
        weight = WEIGHTS[plugin]
        for name, s in scores.items():
            totals[name] += weight * s
    return totals


def preferred_node_affinity(pod: Pod, info: NodeInfo) -> int:
    """NodeAffinity's raw score: the weights of the preferred terms the node matches."""
    node = info.node
    if node is None or not pod.preferred_node_affinity:
        return 0
    return sum(weight for weight, term in pod.preferred_node_affinity if term_matches(term, node))
