"""The filters that read one node only (NodeUnschedulable, TaintToleration, NodeAffinity,
NodePorts, NodeResourcesFit), and TaintToleration's score input.

The plugins run in kube-scheduler's order and the first that fails decides, as the framework
stops at the first failing filter: NodeUnschedulable, TaintToleration, NodeAffinity (with
the pod's nodeSelector), NodePorts, NodeResourcesFit. Reasons are upstream's words. Failures
that preemption cannot cure (unschedulable, taints, affinity) are *unresolvable*
(``UnschedulableAndUnresolvable`` upstream); ports and resources are not.

Toleration matching is ``v1.Toleration.ToleratesTaint``: an empty effect matches every effect,
an empty key (with ``Exists``) every key, ``Exists`` ignores the value, ``Equal`` compares it.
Only ``NoSchedule`` and ``NoExecute`` taints filter; ``PreferNoSchedule`` counts against the
node's score (:func:`intolerable_prefer_no_schedule`). An unschedulable node acts as the taint
``node.kubernetes.io/unschedulable:NoSchedule``: a pod tolerating it passes.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.result import FilterResult
from schedcache.model.resources import NodeSelectorTerm, Requirement, Toleration
from schedcache.model.values import Node, Pod

Taint = tuple[str, str, str]  # key, value, effect

UNSCHEDULABLE_TAINT: Taint = ("node.kubernetes.io/unschedulable", "", "NoSchedule")
FILTERING_EFFECTS = ("NoSchedule", "NoExecute")

NODE_NOT_FOUND = "node(s) not found"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
PORTS_IN_USE = "node(s) didn't have free ports for the requested pod ports"
TOO_MANY_PODS = "Too many pods"


def node_refuses(pod: Pod, node: Node) -> FilterResult | None:
    """The filters that read only the node object (unschedulable, taints, affinity): their
    verdict does not change as pods come and go. None when they let the pod through."""
    if node.unschedulable and not tolerates_any(pod.tolerations, UNSCHEDULABLE_TAINT):
        return FilterResult((UNSCHEDULABLE,), True)
    taint = untolerated_taint(pod, node)
    if taint is not None:
        key, value, _ = taint
        return FilterResult((f"node(s) had untolerated taint {{{key}: {value}}}",), True)
    if not matches_node_affinity(pod, node):
        return FilterResult((AFFINITY_MISMATCH,), True)
    return None


def _insufficient(resource: str) -> str:
    """NodeResourcesFit's reason for one resource."""
    return TOO_MANY_PODS if resource == "pods" else f"Insufficient {resource}"


# -- taints and tolerations ----------------------------------------------------------------


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``v1.Toleration.ToleratesTaint``."""
    key, operator, value, effect = toleration
    taint_key, taint_value, taint_effect = taint
    if effect and effect != taint_effect:
        return False
    if key and key != taint_key:
        return False
    if operator == "Exists":
        return True
    if operator in ("", "Equal"):
        return value == taint_value
    return False


def tolerates_any(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates(toleration, taint) for toleration in tolerations)


def untolerated_taint(pod: Pod, node: Node) -> Taint | None:
    """The first NoSchedule/NoExecute taint of ``node`` that ``pod`` does not tolerate."""
    for taint in node.taints:
        if taint[2] in FILTERING_EFFECTS and not tolerates_any(pod.tolerations, taint):
            return taint
    return None


def intolerable_prefer_no_schedule(pod: Pod, info: NodeInfo) -> int:
    """TaintToleration's score input: the node's PreferNoSchedule taints the pod does not
    tolerate, counting only tolerations with that effect or none (as upstream)."""
    if info.node is None:
        return 0
    relevant = [t for t in pod.tolerations if t[3] in ("", "PreferNoSchedule")]
    return sum(
        1
        for taint in info.node.taints
        if taint[2] == "PreferNoSchedule" and not tolerates_any(relevant, taint)
    )


# -- node selector and required node affinity ------------------------------------------------


def matches_node_affinity(pod: Pod, node: Node) -> bool:
    """NodeAffinity's filter: the nodeSelector's labels all equal, and one of the required
    terms (if any) matching."""
    labels = node.labels
    if any(labels.get(key) != value for key, value in pod.node_selector.items()):
        return False
    if not pod.required_node_affinity:
        return True
    return any(term_matches(term, node) for term in pod.required_node_affinity)


def term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    """A term matches when all its expressions and fields do; an empty term matches nothing."""
    expressions, fields = term
    if not expressions and not fields:
        return False
    return all(_requirement_matches(r, node.labels) for r in expressions) and all(
        _requirement_matches(r, {"metadata.name": node.name}) for r in fields
    )


def _requirement_matches(requirement: Requirement, labels: dict[str, str]) -> bool:
    key, operator, values = requirement
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False
