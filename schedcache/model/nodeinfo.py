"""``NodeInfo``: one node's aggregates as kube-scheduler's framework exposes them.

Built from the node hash, its pods and the image index. Each ``NodeInfo`` owns all of its
containers (lists, sets, dicts): nothing is shared with the cache or another ``NodeInfo``, so a
caller may mutate one freely (upstream crashed when snapshots shared maps, #118611).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from schedcache.model.resources import HostPort
from schedcache.model.values import Node, Pod, Resource


@dataclass(frozen=True)
class ImageStateSummary:
    """An image on a node: its size and on how many live nodes it is."""

    size: int
    num_nodes: int


@dataclass
class NodeInfo:
    """A node with its pods and aggregates; ``node`` is None for a ghost or placeholder."""

    name: str
    node: Node | None = None
    pods: list[Pod] = field(default_factory=list)
    requested: Resource = field(default_factory=Resource)
    non_zero_requested: Resource = field(default_factory=Resource)
    allocatable: Resource = field(default_factory=Resource)
    used_ports: set[HostPort] = field(default_factory=set)
    image_states: dict[str, ImageStateSummary] = field(default_factory=dict)
    pvc_ref_counts: dict[str, int] = field(default_factory=dict)
    generation: int = 0

    @property
    def pod_count(self) -> int:
        """How many pods the node holds (without decoding a lazily read node's pods)."""
        return len(self.pods)

    @property
    def pods_with_affinity(self) -> list[Pod]:
        return [pod for pod in self.pods if pod.has_affinity]

    @property
    def pods_with_required_anti_affinity(self) -> list[Pod]:
        return [pod for pod in self.pods if pod.has_required_anti_affinity]

    @property
    def is_ghost(self) -> bool:
        """No node object: removed while pods remained, or pods arrived before it."""
        return self.node is None

    def fits_pod(self, pod: Pod) -> bool:
        """Whether ``pod`` fits this node's free resources and host ports (NodeResourcesFit and
        NodePorts, as :meth:`shortages` checks them)."""
        return not self.shortages(pod)

    def fits(self, pod: Pod) -> list[str]:
        """Deprecated: returns :meth:`shortages`, so ``not info.fits(pod)`` means it *fits*.
        Use :meth:`fits_pod` (a bool that reads right) or :meth:`shortages` (the list)."""
        warnings.warn(
            "NodeInfo.fits() returns the shortages (an empty list when the pod fits), so "
            "'not info.fits(pod)' means it fits; use info.fits_pod(pod) for a bool or "
            "info.shortages(pod) for the list. fits() will become the bool fits_pod().",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.shortages(pod)

    def shortages(self, pod: Pod) -> list[str]:
        """The resources ``pod`` would overflow on this node, empty when it fits: like
        kube-scheduler's ``noderesources.Fits`` (its ``InsufficientResource`` list), plus
        ``"host-ports"`` for a host port conflict (NodePorts)."""
        short = []
        free = self.allocatable
        used = self.requested
        want = pod.requests
        if used.milli_cpu + want.milli_cpu > free.milli_cpu:
            short.append("cpu")
        if used.memory + want.memory > free.memory:
            short.append("memory")
        if used.ephemeral_storage + want.ephemeral_storage > free.ephemeral_storage:
            short.append("ephemeral-storage")
        if self.pod_count + 1 > free.allowed_pod_number:
            short.append("pods")
        for name, amount in want.scalar_resources.items():
            if used.scalar_resources.get(name, 0) + amount > free.scalar_resources.get(name, 0):
                short.append(name)
        if any(port_conflicts(port, self.used_ports) for port in pod.host_ports):
            short.append("host-ports")
        return short


_DECODING = threading.Lock()


class StoredNodeInfo(NodeInfo):
    """A ``NodeInfo`` read from the cache whose pods are decoded on first use of ``pods``.

    A snapshot needs every node's aggregates (stored as such) but the pods of only the nodes a
    filter looks into, and decoding pods is most of the cost of a full build. The node hash's
    counts of pods with (anti-)affinity answer whether those lists are empty without decoding.
    A pod record the decoding finds corrupt raises :class:`CorruptRecord` then, naming it.
    Equal to a ``NodeInfo`` with the same content, and used the same way.
    """

    def defer(
        self, decode: Callable[[], list[Pod]], count: int, affinity: int, anti_affinity: int
    ) -> None:
        """Leave the pods to ``decode()`` (``count`` of them; ``affinity``/``anti_affinity``
        of them with affinity / required anti-affinity), called at most once."""
        self.__dict__.update(
            _pods=None, _decode=decode, _count=count, _affinity=affinity, _anti=anti_affinity
        )

    @property
    def pods(self) -> list[Pod]:
        pods: list[Pod] | None = self.__dict__.get("_pods")
        if pods is None:
            with _DECODING:  # threads sharing a snapshot decode a node once, into one list
                pods = self.__dict__.get("_pods")
                if pods is None:
                    pods = self.__dict__["_decode"]()
                    self.__dict__["_pods"] = pods
                    self.__dict__.pop("_decode", None)
        return pods

    @pods.setter
    def pods(self, value: list[Pod]) -> None:
        with _DECODING:
            self.__dict__["_pods"] = value
            self.__dict__.pop("_decode", None)

    def __getstate__(self) -> dict[str, object]:
        """Pickled and copied with its pods decoded (the decoder is a closure)."""
        _ = self.pods
        return {key: value for key, value in self.__dict__.items() if key != "_decode"}

    def _pending(self) -> bool:
        return self.__dict__.get("_pods") is None

    @property
    def pod_count(self) -> int:
        return self.__dict__["_count"] if self._pending() else len(self.pods)

    @property
    def pods_with_affinity(self) -> list[Pod]:
        if self._pending() and not self.__dict__["_affinity"]:
            return []
        return super().pods_with_affinity

    @property
    def pods_with_required_anti_affinity(self) -> list[Pod]:
        if self._pending() and not self.__dict__["_anti"]:
            return []
        return super().pods_with_required_anti_affinity

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeInfo):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(NodeInfo))

    __hash__ = None  # type: ignore[assignment]


def port_conflicts(port: HostPort, used: set[HostPort]) -> bool:
    """kube-scheduler's rule: same protocol and port, and same IP or either is 0.0.0.0."""
    ip, protocol, number = port
    for used_ip, used_protocol, used_number in used:
        same_port = used_protocol == protocol and used_number == number
        if same_port and (ip == used_ip or "0.0.0.0" in (ip, used_ip)):
            return True
    return False


@dataclass
class Dump:
    """Everything in a cache, for debugging and audit: ``Cache.dump()`` (the live keys) and
    ``Cache.replay()`` (the state folded from the stream) give the same shape."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    assumed_pods: set[str] = field(default_factory=set)
    generation: int = 0
    # replay(): the last event folded in (None for the live dump); not part of the state
    last_id: str | None = field(default=None, compare=False)
