"""Resource amounts and the small value types of a pod's scheduling terms, as
kube-scheduler's ``framework.Resource`` and its API types hold them.

The lowest part of the model: the manifest reader (:mod:`schedcache.model.reading`) builds
these, and :mod:`schedcache.model.values` (``Pod``, ``Node``) holds them, so neither of those
two modules needs the other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schedcache.model.selectors import label_key_error

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "HostPort",
    "NodeSelectorTerm",
    "Requirement",
    "Resource",
    "Toleration",
    "is_scalar_resource_name",
]

#: Non-zero defaults for containers without a request (pkg/scheduler/util/non_zero.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

HostPort = tuple[str, str, int]  # (ip, protocol, port)
Toleration = tuple[str, str, str, str]  # key, operator ("Exists"/"Equal"), value, effect
Requirement = tuple[str, str, tuple[str, ...]]  # key, operator (In, NotIn, ...), values
NodeSelectorTerm = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]  # expressions, fields


def is_scalar_resource_name(name: str) -> bool:
    """kube-scheduler's ``IsScalarResourceName``: the names kept in ``scalar_resources``.

    Extended resources (domain-qualified, outside ``kubernetes.io/``), ``hugepages-*``,
    ``attachable-volumes-*`` and prefixed native resources (containing ``kubernetes.io/``).
    """
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    return label_key_error("requests." + name) is None


# --------------------------------------------------------------------------------------------
# Resource


@dataclass(frozen=True, slots=True)
class Resource:
    """Integer resource amounts as kube-scheduler's ``framework.Resource`` holds them.

    CPU in millicores, memory and ephemeral storage in bytes, rounded up from quantities.
    """

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar_resources: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (msgpack/JSON friendly); zero amounts are left out. (Hot: every pod
        command encodes two, so each field is tested rather than built and then dropped.)"""
        d: dict[str, Any] = {}
        if self.milli_cpu:
            d["milli_cpu"] = self.milli_cpu
        if self.memory:
            d["memory"] = self.memory
        if self.ephemeral_storage:
            d["ephemeral_storage"] = self.ephemeral_storage
        if self.allowed_pod_number:
            d["allowed_pod_number"] = self.allowed_pod_number
        if self.scalar_resources:
            d["scalar_resources"] = dict(sorted(self.scalar_resources.items()))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Resource:
        """Inverse of :meth:`to_dict`; missing keys are 0. (Hot: a snapshot decodes two per
        pod, so plain positional construction.)"""
        get = d.get
        scalars = get("scalar_resources")
        return cls(
            int(get("milli_cpu", 0)),
            int(get("memory", 0)),
            int(get("ephemeral_storage", 0)),
            int(get("allowed_pod_number", 0)),
            {str(k): int(v) for k, v in scalars.items()} if scalars else {},
        )

    def add(self, other: Resource) -> Resource:
        """Field-wise sum (scalar resources merged)."""
        scalars = dict(self.scalar_resources)
        for name, amount in other.scalar_resources.items():
            scalars[name] = scalars.get(name, 0) + amount
        return Resource(
            self.milli_cpu + other.milli_cpu,
            self.memory + other.memory,
            self.ephemeral_storage + other.ephemeral_storage,
            self.allowed_pod_number + other.allowed_pod_number,
            scalars,
        )

    def sub(self, other: Resource) -> Resource:
        """Field-wise difference; scalar resources that become 0 are dropped."""
        scalars = dict(self.scalar_resources)
        for name, amount in other.scalar_resources.items():
            left = scalars.get(name, 0) - amount
            if left:
                scalars[name] = left
            else:
                scalars.pop(name, None)
        return Resource(
            self.milli_cpu - other.milli_cpu,
            self.memory - other.memory,
            self.ephemeral_storage - other.ephemeral_storage,
            self.allowed_pod_number - other.allowed_pod_number,
            scalars,
        )


# What one node may bring to the cache (lua/_set_node.lua refuses more): every image name and
# allocatable resource is a write to the image index or the node's hash, and one node update
# must not hold Redis for long (10,000 images replaced took 356 ms). A node read from a
# manifest keeps its first MAX_NODE_IMAGES image names, as the kubelet reports at most
# nodeStatusMaxImages (50 by default).
MAX_NODE_IMAGES = 1_000
MAX_NODE_RESOURCES = 1_000
