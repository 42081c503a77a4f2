"""PodTopologySpread (pkg/scheduler/framework/plugins/podtopologyspread): the filter.

Only ``DoNotSchedule`` constraints filter. PreFilter counts, per constraint and domain, the
pods in the incoming pod's namespace that its selector matches, over the nodes that carry every
constraint's topology key and pass the constraint's node inclusion policies
(``nodeAffinityPolicy`` Honor: the pod's nodeSelector and required node affinity;
``nodeTaintsPolicy`` Honor: its tolerations of NoSchedule/NoExecute taints). Filter: the
node must carry the key (else unresolvable), and ``count(domain) + selfMatch - min`` must not
pass ``maxSkew``, with ``min`` 0 while fewer than ``minDomains`` domains exist.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.nodelocal import matches_node_affinity, untolerated_taint
from schedcache.model.plugins.podindex import Counts, PodIndex
from schedcache.model.plugins.result import FilterResult
from schedcache.model.podterms import LabelSelector, SpreadConstraint
from schedcache.model.values import Node, Pod

NAME = "PodTopologySpread"
CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
LABEL_NOT_MATCH = "node(s) didn't match pod topology spread constraints (missing required label)"


def hard_constraints(pod: Pod) -> tuple[SpreadConstraint, ...]:
    return tuple(c for c in pod.spread_constraints if c.when_unsatisfiable == "DoNotSchedule")


def counted(pod: Pod, constraint: SpreadConstraint, node: Node) -> bool:
    """The node inclusion policies."""
    if constraint.node_affinity_policy == "Honor" and not matches_node_affinity(pod, node):
        return False
    return constraint.node_taints_policy != "Honor" or untolerated_taint(pod, node) is None


def matching(pod: Pod, constraint: SpreadConstraint, others: list[Pod]) -> int:
    selector = constraint.selector
    if selector is None:
        return 0
    # Terminating pods are not counted (upstream's countPodsMatchSelector skips them).
    return sum(
        1
        for p in others
        if p.namespace == pod.namespace and not p.terminating and selector.matches(p.labels)
    )


class State:
    """Per constraint: domain -> matching pods (domains with none included)."""

    def __init__(self, cycle: Cycle, constraints: tuple[SpreadConstraint, ...]) -> None:
        pod = cycle.pod
        self.constraints = constraints
        self.counts: list[Counter[str]] = [Counter() for _ in constraints]
        self._holders: list[str] = []  # nodes holding pods that some constraint counts
        self._lazy = ""  # the pod's uid when the holders are found from the index when asked
        self._indexed: list[Counts] = []
        keys = [c.topology_key for c in constraints]
        if cycle.index is not None:
            self._from_index(cycle, cycle.index, keys)
            return
        for info, node in cycle.nodes():
            labels = node.labels
            if any(key not in labels for key in keys):
                continue
            others = list(cycle.others(info))
            held = False
            for i, constraint in enumerate(constraints):
                if counted(pod, constraint, node):
                    found = matching(pod, constraint, others)
                    self.counts[i][labels[constraint.topology_key]] += found
                    held = held or found > 0
            if held:
                self._holders.append(info.name)

    def _from_index(self, cycle: Cycle, index: PodIndex, keys: list[str]) -> None:
        """The same counts from the snapshot's index: per domain straight from its totals when
        every node carrying the key is counted (one key, no inclusion policy that can leave a
        node out), else node by node from its per-node counts (no selector matched again)."""
        pod = cycle.pod
        self._indexed = [
            index.selected(
                ("spread", pod.namespace, c.selector),
                partial(_spread_selects, pod.namespace, c.selector),
                c.topology_key,
            )
            for c in self.constraints
        ]
        if len(set(keys)) == 1 and not any(_policy_can_exclude(pod, c) for c in self.constraints):
            values = index.values.get(keys[0], Counter())
            for i, counts in enumerate(self._indexed):
                pairs = index.summed(pod, [counts])
                key = keys[i]
                self.counts[i] = Counter({v: pairs[(key, v)] for v in values})
            self._lazy = pod.uid  # the holders found when asked (claims): the nodes counted
            return
        uid = pod.uid
        for info, node in cycle.nodes():
            labels = node.labels
            if any(key not in labels for key in keys):
                continue
            held = False
            for i, constraint in enumerate(self.constraints):
                if counted(pod, constraint, node):
                    uids = self._indexed[i].per_node.get(info.name, ())
                    found = len(uids) - (uid in uids)
                    self.counts[i][labels[constraint.topology_key]] += found
                    held = held or found > 0
            if held:
                self._holders.append(info.name)

    @property
    def holders(self) -> list[str]:
        """The nodes holding pods that some constraint counts."""
        if self._lazy:
            uid, self._lazy = self._lazy, ""
            self._holders = list(
                dict.fromkeys(
                    name
                    for counts in self._indexed
                    for name, uids in counts.per_node.items()
                    if len(uids) > (uid in uids)
                )
            )
        return self._holders

    def min_match(self, i: int) -> int:
        counts = self.counts[i]
        if len(counts) < self.constraints[i].min_domains or not counts:
            return 0
        return min(counts.values())


def _spread_selects(namespace: str, selector: LabelSelector | None, other: Pod) -> bool:
    """Counted by a constraint of a pod in ``namespace`` (``matching``'s test)."""
    return (
        selector is not None
        and other.namespace == namespace
        and not other.terminating
        and selector.matches(other.labels)
    )


def _policy_can_exclude(pod: Pod, constraint: SpreadConstraint) -> bool:
    """Whether an inclusion policy may leave a node carrying the key out of the counts."""
    honor_affinity = constraint.node_affinity_policy == "Honor" and bool(
        pod.node_selector or pod.required_node_affinity
    )
    return honor_affinity or constraint.node_taints_policy == "Honor"


def state(cycle: Cycle) -> State:
    found = cycle.state.get(NAME)
    if found is None:
        found = cycle.state[NAME] = State(cycle, hard_constraints(cycle.pod))
    assert isinstance(found, State)
    return found


def filter(cycle: Cycle, info: NodeInfo) -> FilterResult | None:
    pod, node = cycle.pod, info.node
    constraints = hard_constraints(pod)
    if node is None or not constraints:
        return None
    s = state(cycle)
    for i, constraint in enumerate(constraints):
        value = node.labels.get(constraint.topology_key)
        if value is None:
            return FilterResult((LABEL_NOT_MATCH,), True)
        selector = constraint.selector
        self_match = 1 if selector is not None and selector.matches(pod.labels) else 0
        skew = s.counts[i][value] + self_match - s.min_match(i)
        if skew > constraint.max_skew:
            return FilterResult((CONSTRAINTS_NOT_MATCH,))
    return None


# -- score (ScheduleAnyway) -----------------------------------------------------------------


def soft_constraints(pod: Pod) -> tuple[SpreadConstraint, ...]:
    return tuple(c for c in pod.spread_constraints if c.when_unsatisfiable == "ScheduleAnyway")


HOSTNAME = "kubernetes.io/hostname"


def scores(cycle: Cycle, infos: list[NodeInfo]) -> dict[str, int]:
    """Normalised 0-100 scores of the candidates ``infos``, as upstream's PreScore, Score and
    NormalizeScore: a candidate lacking a constraint's key is ignored (scores 0); the domains
    are the candidates' (not every node's), each weighing ``log(domains + 2)`` (for the
    hostname: the candidates not ignored); every node carrying all the keys adds its matching
    pods to its domain where the inclusion policies let it (the hostname counts the candidate's
    own pods); raw ``count * weight + maxSkew - 1`` summed and rounded half away from zero;
    then ``100 * (max + min - raw) // max``. Empty when the pod has no ScheduleAnyway
    constraint."""
    pod = cycle.pod
    constraints = soft_constraints(pod)
    if not constraints:
        return {}
    keys = [c.topology_key for c in constraints]
    candidates = [(info, info.node) for info in infos if info.node is not None]
    scored = [(info, n) for info, n in candidates if all(k in n.labels for k in keys)]
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for _, n in scored:
        for i, c in enumerate(constraints):
            if c.topology_key != HOSTNAME:
                counts[i].setdefault(n.labels[c.topology_key], 0)
    weights = [
        math.log((len(scored) if c.topology_key == HOSTNAME else len(counts[i])) + 2)
        for i, c in enumerate(constraints)
    ]
    for info, node in cycle.nodes():
        if any(key not in node.labels for key in keys):
            continue
        for i, c in enumerate(constraints):
            value = node.labels[c.topology_key]
            if value in counts[i] and counted(pod, c, node):
                counts[i][value] += matching(pod, c, list(cycle.others(info)))
    raw: dict[str, int] = {}
    for info, n in scored:
        labels = n.labels
        total = 0.0
        for i, c in enumerate(constraints):
            if c.topology_key == HOSTNAME:
                count = matching(pod, c, list(cycle.others(info)))
            else:
                count = counts[i][labels[c.topology_key]]
            total += count * weights[i] + (c.max_skew - 1)
        raw[info.name] = math.floor(total + 0.5)  # Go's math.Round (total >= 0)
    out = {info.name: 0 for info in infos}
    if not raw:
        return out
    low, high = min(raw.values()), max(raw.values())
    for name, s in raw.items():
        out[name] = 100 if high == 0 else 100 * (high + low - s) // high
    return out
