"""One scheduling cycle's view of the cluster: the incoming pod and every node it may look at.

kube-scheduler's PreFilter runs once per pod over the snapshot and the per-node Filter reads
what it left in the cycle state; :class:`Cycle` is that state. Each plugin's pre-filter result
is computed on first use and kept, so judging all nodes costs one pass over the pods that
matter, not one per node. The pod itself (by uid) is never counted among the existing pods:
explaining or re-checking a placed pod judges it as if it were pending.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.podindex import PodIndex
from schedcache.model.values import Node, Pod


@dataclass
class Cycle:
    """``pod`` judged against ``infos`` (a snapshot's node infos, ghosts included)."""

    pod: Pod
    infos: Sequence[NodeInfo]
    state: dict[str, Any] = field(default_factory=dict)
    #: The nodes holding pods with required anti-affinity, when the snapshot lists them
    #: (``have_pods_with_required_anti_affinity_list``); else found by looking at every node.
    anti_holders: Sequence[NodeInfo] | None = None
    #: The snapshot's counts per topology domain, synced with ``infos`` (podindex.py): the
    #: PreFilter states read them instead of passing over every pod.
    index: PodIndex | None = None
    #: The cache's Namespaces' labels (non-empty namespaceSelectors select by them); the
    #: index's when not given.
    namespaces: Mapping[str, Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        if self.namespaces is None and self.index is not None:
            self.namespaces = self.index.namespace_labels

    def holders(self) -> Sequence[NodeInfo]:
        if self.anti_holders is None:
            self.anti_holders = [i for i in self.infos if i.pods_with_required_anti_affinity]
        return self.anti_holders

    def nodes(self) -> Iterator[tuple[NodeInfo, Node]]:
        """Live nodes (ghosts and placeholders have no labels to judge)."""
        for info in self.infos:
            if info.node is not None:
                yield info, info.node

    def repelling(self) -> bool:
        """Whether any other pod has required anti-affinity (existing pods' terms to check)."""
        uid = self.pod.uid
        if self.index is not None:
            return any(len(t.where) > (uid in t.where) for t in self.index.anti.values())
        return any(p.uid != uid for i in self.holders() for p in i.pods_with_required_anti_affinity)

    def others(self, info: NodeInfo) -> Iterator[Pod]:
        """The node's pods other than the incoming one."""
        uid = self.pod.uid
        return (p for p in info.pods if p.uid != uid)
