"""Counts of pods per topology domain, kept as a snapshot catches up: PreFilter without a pass
over every pod.

kube-scheduler's InterPodAffinity and PodTopologySpread PreFilters walk every pod once per
pod scheduled: O(pods) selector matches a cycle (issue 38's profile: 6.3 spread pods/s at 5,000
nodes against 330 plain ones). :class:`PodIndex` keeps, for each selector in use (a
:class:`Counts`, registered by the first pod that asks, bounded by ``MAX_SELECTORS``), the
matching pods per (topology key, value) of the live nodes, and existing pods' required
anti-affinity terms per topology pair; a snapshot marks the nodes it changes
(:meth:`PodIndex.mark`), and :meth:`PodIndex.sync` takes each changed node's old contribution
out and its new one in. A cycle's PreFilter state is then read from these counts in
O(domains) steps, the same counts the plugins' own passes would give (the plugin tables and
``tests/test_podindex.py`` compare them).

Only live nodes count (ghosts and placeholders have no labels, as in ``Cycle.nodes``); the pod
being judged is left out of every count by uid, as ``Cycle.others`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.podterms import PodAffinityTerm
from schedcache.model.values import Pod

Pair = tuple[str, str]
#: Selectors (Counts) kept at once; beyond, all are dropped and registered again on use.
MAX_SELECTORS = 256
#: Changed pairs a source logs before the log starts again (its readers then read it whole).
MAX_LOG = 100_000


def _add(counter: Counter[Pair], pair: Pair, delta: int) -> None:
    """Counter arithmetic that drops entries at zero (``not counter`` then means none)."""
    value = counter[pair] + delta
    if value:
        counter[pair] = value
    else:
        del counter[pair]


class Source:
    """Counts per topology pair (``pairs``) and the pairs changed, in order (``log``: a
    reader that kept a view of ``pairs`` applies ``log[its position:]``; a new list object
    once ``MAX_LOG`` long)."""

    def __init__(self) -> None:
        self.pairs: Counter[Pair] = Counter()
        self.log: list[Pair] = []

    def change(self, pair: Pair, delta: int) -> None:
        _add(self.pairs, pair, delta)
        if len(self.log) >= MAX_LOG:
            self.log = []
        self.log.append(pair)


class Summed:
    """Several sources' counts read as one, with no copy: a pair's count is the sum of the
    sources' and of ``extra`` (the judged pod's own contributions, negative)."""

    def __init__(self, sources: list[Source], extra: Counter[Pair] | None = None) -> None:
        self.sources = sources
        self.extra = extra or Counter()

    def __getitem__(self, pair: Pair) -> int:
        return sum(s.pairs.get(pair, 0) for s in self.sources) + self.extra.get(pair, 0)

    def items(self) -> list[tuple[Pair, int]]:
        """The pairs with a count other than 0."""
        keys = dict.fromkeys(k for s in self.sources for k in s.pairs)
        return [(k, n) for k in keys if (n := self[k])]

    def __bool__(self) -> bool:
        return any(n > 0 for _, n in self.items())


def _scores_others(pod: Pod) -> bool:
    return bool(pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity or pod.pod_affinity)


class Counts(Source):
    """Pods that ``test`` accepts: per node their uids, per ``key`` of the node's labels the
    total per value (``pairs``), and where each counted uid is."""

    def __init__(self, test: Callable[[Pod], bool], key: str) -> None:
        super().__init__()
        self.test = test
        self.key = key
        self.per_node: dict[str, tuple[str, ...]] = {}
        self.where: dict[str, str] = {}

    def put(self, name: str, labels: Mapping[str, str], pods: Iterable[Pod], sign: int) -> None:
        value = labels.get(self.key)
        if sign < 0:
            uids = self.per_node.pop(name, ())
            for uid in uids:
                self.where.pop(uid, None)
        else:
            uids = tuple(p.uid for p in pods if self.test(p))
            if uids:
                self.per_node[name] = uids
                for uid in uids:
                    self.where[uid] = name
        if uids and value is not None:
            self.change((self.key, value), sign * len(uids))

    def own(self, uid: str, labels_of: Callable[[str], Mapping[str, str]]) -> Counter[Pair]:
        """Pod ``uid``'s contribution to ``pairs``, negated (empty when it is not counted)."""
        name = self.where.get(uid)
        value = None if name is None else labels_of(name).get(self.key)
        return Counter() if value is None else Counter({(self.key, value): -1})


class AntiTerms(Source):
    """Existing pods' required anti-affinity terms of one (owner namespace, term): per
    (the term's key, value) how many pods carry it, and where each carrier is."""

    def __init__(self, namespace: str, term: PodAffinityTerm) -> None:
        super().__init__()
        self.namespace = namespace
        self.term = term
        self.where: dict[str, list[Pair | None]] = {}  # uid -> the pair of each term it carries


class PodIndex:
    """The live nodes' labels and pods as last synced, and the counts above."""

    def __init__(self) -> None:
        self.labels: dict[str, Mapping[str, str]] = {}
        self.pods: dict[str, tuple[Pod, ...]] = {}
        self.values: dict[str, Counter[str]] = {}  # key -> value -> live nodes
        self.members: dict[Pair, dict[str, None]] = {}  # (key, value) -> its live nodes
        self.counts: dict[Hashable, Counts] = {}
        self.anti: dict[tuple[str, PodAffinityTerm], AntiTerms] = {}
        # Pods whose terms InterPodAffinity scores others by (preferred terms, required
        # affinity): while there are none, its score is 0 on every node for a pod without
        # preferred terms of its own.
        self.scoring = 0
        self._dirty: set[str] = set()
        self._whole = True  # every node to read (a new index)
        # The cache's Namespaces' labels and their generation (lua/sync_namespace.lua): the
        # registered counts' tests read them, so a change drops the counts.
        self.namespace_labels: Mapping[str, Mapping[str, str]] = {}
        self.namespace_generation = 0

    def set_namespaces(self, generation: int, labels: Mapping[str, Mapping[str, str]]) -> None:
        """The Namespaces' labels at ``generation``: the counts registered by tests that read
        the older labels are dropped (a term selecting namespaces by labels counts anew)."""
        if generation == self.namespace_generation and labels == self.namespace_labels:
            return
        self.namespace_generation, self.namespace_labels = generation, labels
        self.counts.clear()

    def mark(self, name: str) -> None:
        """The snapshot changed node ``name`` (its pods, its object, or it went away)."""
        self._dirty.add(name)

    def sync(self, infos: Mapping[str, NodeInfo]) -> PodIndex:
        """Catch up with ``infos`` (the snapshot's node infos): the marked nodes only."""
        if self._whole:
            self._whole = False
            self._dirty = set(infos) | set(self.labels)
        if not self._dirty:
            return self
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            self._take_out(name)
            info = infos.get(name)
            if info is not None and info.node is not None:
                self._put_in(name, info.node.labels, tuple(info.pods))
        return self

    def _take_out(self, name: str) -> None:
        labels = self.labels.pop(name, None)
        if labels is None:
            return
        pods = self.pods.pop(name)
        for key, value in labels.items():
            values = self.values[key]
            values[value] -= 1
            if not values[value]:
                del values[value]
            members = self.members[(key, value)]
            del members[name]
            if not members:
                del self.members[(key, value)]
        for counts in self.counts.values():
            counts.put(name, labels, (), -1)
        self._anti(labels, pods, -1)
        self.scoring -= sum(map(_scores_others, pods))

    def _put_in(self, name: str, labels: Mapping[str, str], pods: tuple[Pod, ...]) -> None:
        self.labels[name] = labels
        self.pods[name] = pods
        for key, value in labels.items():
            self.values.setdefault(key, Counter())[value] += 1
            self.members.setdefault((key, value), {})[name] = None
        for counts in self.counts.values():
            counts.put(name, labels, pods, 1)
        self._anti(labels, pods, 1)
        self.scoring += sum(map(_scores_others, pods))

    def _anti(self, labels: Mapping[str, str], pods: tuple[Pod, ...], sign: int) -> None:
        for pod in pods:
            if not pod.has_required_anti_affinity:
                continue
            for term in pod.pod_anti_affinity:
                found = self.anti.get((pod.namespace, term))
                if found is None:
                    found = self.anti[(pod.namespace, term)] = AntiTerms(pod.namespace, term)
                value = labels.get(term.topology_key)
                pair = None if value is None else (term.topology_key, value)
                if pair is not None:
                    found.change(pair, sign)
                if sign > 0:
                    found.where.setdefault(pod.uid, []).append(pair)
                else:
                    found.where.pop(pod.uid, None)
                    if not found.where:
                        del self.anti[(pod.namespace, term)]

    def selected(self, key: Hashable, test: Callable[[Pod], bool], topology_key: str) -> Counts:
        """The counts of the pods ``test`` accepts per value of ``topology_key`` (``key``
        names ``test``: equal keys, equal tests), registered on first use."""
        found = self.counts.get((key, topology_key))
        if found is None:
            if len(self.counts) >= MAX_SELECTORS:
                self.counts.clear()
            found = self.counts[(key, topology_key)] = Counts(test, topology_key)
            for name, labels in self.labels.items():
                found.put(name, labels, self.pods[name], 1)
        return found

    def existing_anti(self, pod: Pod) -> Summed:
        """Per topology pair, existing pods' required anti-affinity terms that match ``pod``
        (InterPodAffinity's existingAntiAffinityCounts), ``pod`` itself left out."""
        sources: list[Source] = []
        own: Counter[Pair] = Counter()
        for terms in self.anti.values():
            if terms.term.matches_pod(
                terms.namespace, pod.namespace, pod.labels, self.namespace_labels
            ):
                sources.append(terms)
                for pair in terms.where.get(pod.uid, ()):
                    if pair is not None:
                        own[pair] -= 1
        return Summed(sources, own)

    def summed(self, pod: Pod, counts: list[Counts]) -> Summed:
        """``counts`` read as one, ``pod`` left out."""
        own: Counter[Pair] = Counter()
        for c in counts:
            own.update(c.own(pod.uid, self.labels.__getitem__))
        return Summed(list(counts), own)
