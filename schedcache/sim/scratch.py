"""A scratch copy of the cluster at one moment, which a what-if places pods on.

It is the replayed state (:meth:`Cache.at`) held in memory: placing a pod adds what the cache's
own accounting adds (the pod's requests, non-zero requests, host ports and claims, as
``pod_contribution`` lists them) to its node, bumps the generation, and keeps per-node arrays
in step so that the built-in policies score every node of a 1,000-node cluster in one
vectorised pass instead of one Python call per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schedcache.model.nodeinfo import Dump, NodeInfo
from schedcache.model.values import Pod, Resource
from schedcache.views.snapshot import Snapshot, snapshot_of

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = npt.NDArray[np.int64]


class ResourceIndex:
    """Per node, in node-tree order: allocatable and requested CPU, memory, ephemeral
    storage and pod slots, and the non-zero requests kube-scheduler scores on."""

    def __init__(self, infos: list[NodeInfo]) -> None:
        import numpy as np

        self.names = [info.name for info in infos]
        self.position = {name: index for index, name in enumerate(self.names)}

        def column(values: list[int]) -> Ints:
            return np.array(values, dtype=np.int64)

        self.alloc_cpu = column([i.allocatable.milli_cpu for i in infos])
        self.alloc_mem = column([i.allocatable.memory for i in infos])
        self.alloc_eph = column([i.allocatable.ephemeral_storage for i in infos])
        self.alloc_pods = column([i.allocatable.allowed_pod_number for i in infos])
        self.cpu = column([i.requested.milli_cpu for i in infos])
        self.mem = column([i.requested.memory for i in infos])
        self.eph = column([i.requested.ephemeral_storage for i in infos])
        self.pods = column([len(i.pods) for i in infos])
        self.nz_cpu = column([i.non_zero_requested.milli_cpu for i in infos])
        self.nz_mem = column([i.non_zero_requested.memory for i in infos])
        # Per kind of pod (tolerations, selector, affinity): the nodes whose node-only filters
        # let it through (they do not change while pods are placed).
        self.admitting: dict[Any, npt.NDArray[np.bool_]] = {}

    def placed(self, index: int, pod: Pod) -> None:
        """Add ``pod`` to the node at ``index``."""
        requests, non_zero = pod.requests, pod.non_zero_requests
        self.cpu[index] += requests.milli_cpu
        self.mem[index] += requests.memory
        self.eph[index] += requests.ephemeral_storage
        self.pods[index] += 1
        self.nz_cpu[index] += non_zero.milli_cpu
        self.nz_mem[index] += non_zero.memory


@dataclass
class ScratchSnapshot(Snapshot):
    """A :class:`Snapshot` that a what-if changes: :meth:`place` puts a pod on a node."""

    index: ResourceIndex | None = field(default=None, repr=False)

    @classmethod
    def of(cls, state: Dump, *, indexed: bool = True) -> ScratchSnapshot:
        """The state as a scratch snapshot (it takes ``state``'s node infos: pass a copy
        that nothing else holds)."""
        base = snapshot_of(state)
        scratch = cls(**{name: getattr(base, name) for name in base.__dataclass_fields__})
        if indexed:
            scratch.index = ResourceIndex(scratch.node_info_list)
        return scratch

    def place(self, pod: Pod, node: str) -> None:
        """Add ``pod`` to ``node`` as a claim would: no fit check here (the caller decides
        what may be placed; what happened is placed even where it no longer fits)."""
        info = self.node_infos[node]
        placed = pod.with_node(node)
        self.changed.add(node)  # for the columns that follow it (what-if's summaries)
        self.pod_index.mark(node)  # and for the inter-pod rules' counts
        self.generation += 1
        info.generation = self.generation
        info.pods.append(placed)
        info.requested = info.requested.add(_requests_only(pod.requests))
        info.non_zero_requested = Resource(
            info.non_zero_requested.milli_cpu + pod.non_zero_requests.milli_cpu,
            info.non_zero_requested.memory + pod.non_zero_requests.memory,
        )
        info.used_ports.update(pod.host_ports)
        for claim in pod.pvc_claims:
            info.pvc_ref_counts[claim] = info.pvc_ref_counts.get(claim, 0) + 1
            self.used_pvc_set.add(claim)
        if pod.has_affinity and len(info.pods_with_affinity) == 1:
            self.have_pods_with_affinity_list.append(info)
        if pod.has_required_anti_affinity and len(info.pods_with_required_anti_affinity) == 1:
            self.have_pods_with_required_anti_affinity_list.append(info)
        if self.index is not None:
            self.index.placed(self.index.position[node], pod)


def _requests_only(requests: Resource) -> Resource:
    """A pod's requests as a node's sum holds them (no pod count of its own)."""
    return Resource(
        requests.milli_cpu,
        requests.memory,
        requests.ephemeral_storage,
        0,
        {name: amount for name, amount in requests.scalar_resources.items() if amount},
    )
