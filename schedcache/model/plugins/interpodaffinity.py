"""InterPodAffinity (pkg/scheduler/framework/plugins/interpodaffinity): the filter.

PreFilter counts, per topology pair (key, value), (1) existing pods' required anti-affinity
terms that match the incoming pod, (2) existing pods that match *all* of the incoming pod's
required affinity terms, (3) existing pods matching each of its anti-affinity terms. Filter
then reads the node's own pairs. Upstream's self-match rule: when no pod anywhere matches the
affinity terms and the pod matches all of them itself, it may go anywhere that has the keys
(the first pod of a group). Reasons and codes are upstream's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.podindex import PodIndex, Summed
from schedcache.model.plugins.result import FilterResult
from schedcache.model.podterms import PodAffinityTerm, WeightedTerm
from schedcache.model.values import Pod

NAME = "InterPodAffinity"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

Pair = tuple[str, str]
#: The cache's Namespaces' labels, by name (None: none read; non-empty namespaceSelectors
#: then select nothing beyond their terms' namespaces).
NamespaceLabels = Mapping[str, Mapping[str, str]] | None


def matches_all(
    terms: Sequence[PodAffinityTerm], owner: Pod, other: Pod, ns: NamespaceLabels = None
) -> bool:
    return all(t.matches_pod(owner.namespace, other.namespace, other.labels, ns) for t in terms)


class State:
    """PreFilter's counts (upstream's preFilterState)."""

    def __init__(self, cycle: Cycle) -> None:
        pod = cycle.pod
        # Counters of this pass, or the index's counts read as one (Summed: no copy).
        self.existing_anti: Counter[Pair] | Summed = Counter()
        self.affinity: Counter[Pair] | Summed = Counter()
        self.anti: Counter[Pair] | Summed = Counter()
        affinity, anti = pod.pod_affinity, pod.pod_anti_affinity
        uid = pod.uid
        ns = cycle.namespaces
        if cycle.index is not None:
            self._from_index(pod, cycle.index)
            return
        # Existing pods' terms: only the nodes holding pods with required anti-affinity.
        for info in cycle.holders():
            node = info.node
            if node is None:
                continue
            labels = node.labels
            for other in info.pods_with_required_anti_affinity:
                if other.uid == uid:
                    continue
                for term in other.pod_anti_affinity:
                    if term.topology_key in labels and term.matches_pod(
                        other.namespace, pod.namespace, pod.labels, ns
                    ):
                        self.existing_anti[(term.topology_key, labels[term.topology_key])] += 1
        if not (affinity or anti):
            return
        for info, node in cycle.nodes():
            labels = node.labels
            for other in cycle.others(info):
                if affinity and matches_all(affinity, pod, other, ns):
                    for term in affinity:
                        if term.topology_key in labels:
                            self.affinity[(term.topology_key, labels[term.topology_key])] += 1
                for term in anti:
                    if term.topology_key in labels and term.matches_pod(
                        pod.namespace, other.namespace, other.labels, ns
                    ):
                        self.anti[(term.topology_key, labels[term.topology_key])] += 1

    def _from_index(self, pod: Pod, index: PodIndex) -> None:
        """The same counts, read from the snapshot's index with no copy (O(terms))."""
        self.existing_anti = index.existing_anti(pod)
        affinity, namespace = pod.pod_affinity, pod.namespace
        ns = index.namespace_labels
        all_select = partial(_all_select, affinity, namespace, ns)
        self.affinity = index.summed(
            pod,
            [
                index.selected(("affinity", namespace, affinity), all_select, t.topology_key)
                for t in affinity
            ],
        )
        self.anti = index.summed(
            pod,
            [
                index.selected(
                    ("anti", namespace, t),
                    partial(_term_selects, t, namespace, ns),
                    t.topology_key,
                )
                for t in pod.pod_anti_affinity
            ],
        )


def _all_select(
    terms: Sequence[PodAffinityTerm], owner_namespace: str, ns: NamespaceLabels, other: Pod
) -> bool:
    return all(t.matches_pod(owner_namespace, other.namespace, other.labels, ns) for t in terms)


def _term_selects(
    term: PodAffinityTerm, owner_namespace: str, ns: NamespaceLabels, other: Pod
) -> bool:
    return term.matches_pod(owner_namespace, other.namespace, other.labels, ns)


def state(cycle: Cycle) -> State:
    found = cycle.state.get(NAME)
    if found is None:
        found = cycle.state[NAME] = State(cycle)
    assert isinstance(found, State)
    return found


def satisfies_affinity(
    pod: Pod, s: State, labels: Mapping[str, str], ns: NamespaceLabels = None
) -> bool:
    exist = True
    for term in pod.pod_affinity:
        value = labels.get(term.topology_key)
        if value is None:
            return False  # all topology labels must exist on the node
        if s.affinity[(term.topology_key, value)] <= 0:
            exist = False
    if not exist:
        return not s.affinity and matches_all(pod.pod_affinity, pod, pod, ns)
    return True


def filter(cycle: Cycle, info: NodeInfo) -> FilterResult | None:
    """None when the node passes; else upstream's reason."""
    pod, node = cycle.pod, info.node
    if node is None:
        return None
    if not (pod.pod_affinity or pod.pod_anti_affinity) and not _any_existing_anti(cycle):
        return None
    s = state(cycle)
    labels = node.labels
    if pod.pod_affinity and not satisfies_affinity(pod, s, labels, cycle.namespaces):
        return FilterResult((AFFINITY_RULES,), True)
    for term in pod.pod_anti_affinity:
        value = labels.get(term.topology_key)
        if value is not None and s.anti[(term.topology_key, value)] > 0:
            return FilterResult((ANTI_AFFINITY_RULES,))
    for key, value in labels.items():
        if s.existing_anti[(key, value)] > 0:
            return FilterResult((EXISTING_ANTI_AFFINITY,))
    return None


def _any_existing_anti(cycle: Cycle) -> bool:
    """Whether any pod in the cluster has required anti-affinity (once per cycle)."""
    cached = cycle.state.get(NAME + ".any")
    if cached is None:
        cached = cycle.state[NAME + ".any"] = cycle.repelling()
    return bool(cached)


# -- score ------------------------------------------------------------------------------------

#: Upstream's ``hardPodAffinityWeight`` default: existing pods' *required* affinity toward the
#: incoming pod counts with this weight in the score.
HARD_POD_AFFINITY_WEIGHT = 1


def score_pairs(cycle: Cycle) -> Counter[Pair]:
    """PreScore: per topology pair, the summed weights of preferred terms both ways (and
    existing pods' required affinity at ``HARD_POD_AFFINITY_WEIGHT``)."""
    found = cycle.state.get(NAME + ".score")
    if isinstance(found, Counter):
        return found
    pod, ns = cycle.pod, cycle.namespaces
    pairs: Counter[Pair] = Counter()
    for info, node in cycle.nodes():
        labels = node.labels
        for other in cycle.others(info):
            contributions = _weighted_matches(pod, other, pod.preferred_pod_affinity, 1, ns)
            contributions += _weighted_matches(pod, other, pod.preferred_pod_anti_affinity, -1, ns)
            contributions += _weighted_matches(other, pod, other.preferred_pod_affinity, 1, ns)
            contributions += _weighted_matches(
                other, pod, other.preferred_pod_anti_affinity, -1, ns
            )
            contributions += [
                (term, HARD_POD_AFFINITY_WEIGHT)
                for term in other.pod_affinity
                if term.matches_pod(other.namespace, pod.namespace, pod.labels, ns)
            ]
            for term, weight in contributions:
                value = labels.get(term.topology_key)
                if value is not None:
                    pairs[(term.topology_key, value)] += weight
    cycle.state[NAME + ".score"] = pairs
    return pairs


def _weighted_matches(
    owner: Pod, target: Pod, terms: tuple[WeightedTerm, ...], sign: int, ns: NamespaceLabels
) -> list[tuple[PodAffinityTerm, int]]:
    """``owner``'s weighted terms that match ``target``, with their signed weights."""
    return [
        (w.term, sign * w.weight)
        for w in terms
        if w.term.matches_pod(owner.namespace, target.namespace, target.labels, ns)
    ]


def score(cycle: Cycle, info: NodeInfo) -> int:
    """The node's raw score: the pairs of its labels."""
    node = info.node
    if node is None:
        return 0
    pairs = score_pairs(cycle)
    if not pairs:
        return 0
    return sum(pairs.get(item, 0) for item in node.labels.items())


def normalize(scores: dict[str, int]) -> dict[str, int]:
    """Min-max onto 0-100 (all 0 when every node scores the same), in upstream's float64
    arithmetic: ``int64(100 * (float64(s - min) / float64(max - min)))`` truncates 0.29 * 100
    (28.999...) to 28 where integer division gives 29."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return dict.fromkeys(scores, 0)
    return {name: int(100 * ((s - low) / (high - low))) for name, s in scores.items()}
