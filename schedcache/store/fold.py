"""The fold: the event stream into the state it describes, independently of the Lua code.

The fold is plain Python over the events (their payloads carry every pod and node object), so
comparing it with the live keys checks the Lua functions: that is ``verify()``. The result has
the shape of ``Cache.dump()``: every node entry (ghosts and placeholders too) as a
``NodeInfo``, the assumed pods, and the generation.

The same fold feeds snapshots (``views/snapshot.py``): a state started with :meth:`track`
notes the nodes and images each page touches and keeps each node's totals as it goes, so a
snapshot re-projects only those nodes (:meth:`ReplayState.projection`), in time that follows
the events, not the pods of the nodes they name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, cast

from schedcache.errors import CorruptRecord
from schedcache.model.aggregates import Pairs, pod_contribution, port_field, resource_pairs
from schedcache.model.nodeinfo import Dump, ImageStateSummary, NodeInfo, StoredNodeInfo
from schedcache.model.values import Node, Pod, Resource
from schedcache.store.events import Event, decode_entry
from schedcache.store.records import decode_object

POD_REMOVALS = frozenset({"PodRemoved", "PodForgotten", "PodExpired"})
_GENERATION = attrgetter("generation")  # a node's pods in placement order


@dataclass(slots=True)  # one per live pod: slots make them smaller and quicker to build
class PodState:
    blob: bytes | None  # the pod's msgpack, decoded only when asked (most pods come and go)
    state: str  # "assumed" | "added"
    node: str
    generation: int  # placement generation: orders a node's pods
    binding_finished: bool = False
    deadline_ms: int | None = None
    # The event that first put the pod in the cache (kept when it is confirmed or updated;
    # None when unknown, as in an older checkpoint): where the search for its history starts.
    since: str | None = None
    decoded: Pod | None = field(default=None, repr=False)
    # Where the pod's msgpack starts in ``blob``: a snapshot keeps the stored record it read
    # (header, newline, msgpack) rather than a copy of its tail.
    offset: int = 0

    @property
    def pod(self) -> Pod:
        if self.decoded is None:
            self.decoded = decode_object(self._msgpack(), self._subject, Pod.from_dict)
        return self.decoded

    def contribution(self) -> Pairs:
        """What the pod adds to its node, without building the ``Pod`` when it is not yet
        (a snapshot following the stream needs the sums now, the pods perhaps never)."""
        if self.decoded is not None:
            return pod_contribution(self.decoded)
        return decode_object(self._msgpack(), self._subject, data_contribution)

    def _msgpack(self) -> bytes:
        blob = self.blob or b""
        return memoryview(blob)[self.offset :] if self.offset else blob  # type: ignore[return-value]

    def _subject(self) -> str:
        return f"replayed pod placed on node {self.node} at generation {self.generation}"


@dataclass(slots=True)
class NodeState:
    name: str
    node: Node | None = None
    allocatable: Resource = field(default_factory=Resource)  # kept by a ghost, as upstream
    # Its pods' uids in placement order (with their records in a tracked state, so a projection
    # takes them without a look-up each in ``ReplayState.pods``).
    pods: dict[str, PodState | None] = field(default_factory=dict)
    generation: int = 0
    # What the pods add to the node (``pod_contribution`` summed), kept as pods come and go
    # once known (a tracked state); None: summed when projected.
    totals: Counter[str] | None = None


@dataclass
class ReplayState:
    """The state after folding events up to ``last_id``."""

    nodes: dict[str, NodeState] = field(default_factory=dict)
    pods: dict[str, PodState] = field(default_factory=dict)
    image_sizes: dict[str, int] = field(default_factory=dict)
    image_spread: Counter[str] = field(default_factory=Counter)  # live nodes per image
    generation: int = 0
    last_id: str | None = None
    events: int = 0
    # The checkpoint this fold started from (None: the stream's beginning): a checkpoint of
    # this state is refused if the stream was compacted past it (events may be missing).
    base_id: str | None = None
    # Tracking (:meth:`track`): the nodes and images whose projection the events since changed.
    touched: set[str] | None = field(default=None, repr=False)
    touched_images: set[str] | None = field(default=None, repr=False)

    def track(self) -> tuple[set[str], set[str]]:
        """Start noting the nodes and images touched (returned, and emptied by the caller);
        from now on nodes keep their totals as pods come and go."""
        if self.touched is None or self.touched_images is None:
            self.touched, self.touched_images = set(), set()
        return self.touched, self.touched_images

    # -- folding ----------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one decoded event (as :func:`fold` does)."""
        self.fold_entries([(event.id.encode(), event.entry_fields())])

    def fold_entries(self, entries: Sequence[tuple[bytes, Mapping[bytes, bytes]]]) -> None:
        """Fold a page of stream entries as XRANGE returns them, reading only the fields each
        event type needs (decoding every field of every entry first took most of a replay);
        :class:`CorruptRecord` naming the event that is not one schedcache writes."""
        if not entries:
            return
        handlers, top = _HANDLERS, self.generation
        try:
            for entry_id, fields in entries:
                handler = handlers.get(fields.get(b"type", b""))
                if handler is None:
                    kind = fields.get(b"type", b"").decode(errors="replace")
                    raise ValueError(f"unknown type {kind!r}")
                gen = fields.get(b"gen")
                generation = int(gen) if gen else 0
                handler(self, entry_id, fields, generation)
                if generation > top:
                    top = generation
        except CorruptRecord:
            raise
        except (KeyError, ValueError, TypeError) as error:
            reason = f"not an event schedcache writes ({type(error).__name__}: {error})"
            raise CorruptRecord(decode_entry(entry_id, fields).subject, reason) from None
        self.generation, self.last_id = top, entries[-1][0].decode()
        self.events += len(entries)

    def _node_set(self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int) -> None:
        self._set_node(Node.from_dict(decode_entry(entry_id, fields).data), generation)

    def _node_removed(
        self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int
    ) -> None:
        self._remove_node(fields[b"node"].decode(), generation)

    def _pod_assumed(self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int) -> None:
        uid, node = fields[b"uid"].decode(), fields[b"node"].decode()
        self._place(fields.get(b"data"), uid, node, "assumed", generation, entry_id.decode())
        deadline = fields.get(b"deadline")
        if deadline is not None:  # a timed claim: assumed, binding finished, deadline D
            self._binding_finished(entry_id, fields, generation)

    def _binding_finished(
        self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int
    ) -> None:
        record = self.pods[fields[b"uid"].decode()]
        record.binding_finished = True
        deadline = fields.get(b"deadline")
        record.deadline_ms = int(deadline) if deadline else None

    def _pod_added(self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int) -> None:
        uid = fields[b"uid"].decode()
        since: str | None = entry_id.decode()
        if uid in self.pods:  # confirming an assumed pod, maybe elsewhere
            since = self._unplace(uid, int(fields.get(b"fromgen") or generation))
        self._place(fields.get(b"data"), uid, fields[b"node"].decode(), "added", generation, since)

    def _pod_updated(self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int) -> None:
        uid = fields[b"uid"].decode()
        since = self._unplace(uid, generation)
        self._place(fields.get(b"data"), uid, fields[b"node"].decode(), "added", generation, since)

    def _pod_removed(self, entry_id: bytes, fields: Mapping[bytes, bytes], generation: int) -> None:
        self._unplace(fields[b"uid"].decode(), generation)

    def _set_node(self, node: Node, generation: int) -> None:
        entry = self.nodes.setdefault(node.name, NodeState(node.name))
        old = _image_names(entry.node) if entry.node is not None else set()
        new = _image_names(node)
        self._lose_images(old - new)
        for names, size in node.images:
            for name in names:
                if name not in old:
                    self.image_sizes.setdefault(name, size)  # the first size reported wins
        for name in new - old:
            self.image_spread[name] += 1
        entry.node, entry.allocatable, entry.generation = node, stored(node.allocatable), generation
        if self.touched is not None and self.touched_images is not None:
            self.touched.add(node.name)
            self.touched_images.update(new ^ old)

    def _remove_node(self, name: str, generation: int) -> None:
        entry = self.nodes[name]
        if entry.node is not None:
            self._lose_images(_image_names(entry.node))
        entry.node, entry.generation = None, generation
        if not entry.pods:
            del self.nodes[name]
        if self.touched is not None:
            self.touched.add(name)

    def _lose_images(self, names: set[str]) -> None:
        """As the Lua index: an image's size is forgotten with its last live node."""
        if self.touched_images is not None:
            self.touched_images.update(names)
        for name in names:
            self.image_spread[name] -= 1
            if self.image_spread[name] <= 0:
                del self.image_spread[name]
                self.image_sizes.pop(name, None)

    def _place(
        self,
        blob: bytes | None,
        uid: str,
        node: str,
        state: str,
        generation: int,
        since: str | None,
    ) -> None:
        entry = self.nodes.get(node)
        if entry is None:  # (not setdefault: it would build a NodeState per event)
            entry = self.nodes[node] = NodeState(node)
        record = self.pods[uid] = PodState(blob, state, node, generation, False, None, since)
        entry.pods[uid] = None
        entry.generation = generation
        if self.touched is not None:
            entry.pods[uid] = record
            self.touched.add(node)
            if entry.totals is not None:
                _add_contribution(entry.totals, record.contribution(), 1)

    def _unplace(self, uid: str, generation: int) -> str | None:
        """Take the pod off its node; returns when it first came (its ``since``)."""
        record = self.pods.pop(uid)
        entry = self.nodes[record.node]
        del entry.pods[uid]
        entry.generation = generation
        if entry.node is None and not entry.pods:
            del self.nodes[record.node]
        if self.touched is not None:
            self.touched.add(record.node)
            if entry.totals is not None:
                _add_contribution(entry.totals, record.contribution(), -1)
        return record.since

    # -- the dump-shaped view -----------------------------------------------------------

    @property
    def assumed_pods(self) -> set[str]:
        return {uid for uid, record in self.pods.items() if record.state == "assumed"}

    def as_dump(self) -> Dump:
        """This state as ``Cache.dump()`` gives the live one (equal to it when consistent)."""
        return Dump(self.node_infos(), set(self.assumed_pods), self.generation, self.last_id)

    def node_infos(self) -> dict[str, NodeInfo]:
        spread = self.image_spread
        return {name: self._node_info(entry, spread) for name, entry in self.nodes.items()}

    def projection(self, name: str, held: NodeInfo | None = None) -> NodeInfo | None:
        """Node ``name`` as a snapshot holds it (None: no entry), its pods decoded when first
        used; after :meth:`track`, in time that follows the node's changes, not its pods.
        ``held``: what the snapshot holds of it; when its node object is this one, its image
        spreads are taken as they are (the caller keeps them current)."""
        entry = self.nodes.get(name)
        if entry is None:
            return None
        totals = entry.totals
        if totals is None or self.touched is None:
            info = self._node_info(entry, self.image_spread)
            if self.touched is not None:
                entry.totals = _totals(info.pods)
            return info
        # This moment's, in order: a tracked state's nodes hold their records (every pod was
        # placed by it, or by the snapshot that filled it).
        records = cast(list[PodState], list(entry.pods.values()))
        info = StoredNodeInfo.__new__(StoredNodeInfo)
        images = held.image_states if held is not None and held.node is entry.node else None
        vars(info).update(self._fields(entry, totals, images=images))
        info.defer(
            lambda: [record.pod for record in records],
            len(records),
            totals.get("aff", 0),
            totals.get("anti", 0),
        )

        return info

    def _node_info(self, entry: NodeState, spread: Counter[str]) -> NodeInfo:
        records = sorted(map(self.pods.__getitem__, entry.pods), key=_GENERATION)
        pods = [record.pod for record in records]
        return NodeInfo(pods=pods, **self._fields(entry, _totals(pods), spread))

    def _fields(
        self,
        entry: NodeState,
        totals: Counter[str],
        spread: Counter[str] | None = None,
        images: dict[str, ImageStateSummary] | None = None,
    ) -> dict[str, Any]:
        """A ``NodeInfo``'s fields but its pods, from the node and its pods' ``totals``
        (``images``: its image spreads, when known)."""
        spread = self.image_spread if spread is None else spread
        scalars, ports, claims = {}, set(), {}
        for name, amount in totals.items():
            if name[1:2] != ":" or not amount:  # (most are r:cpu, z:cpu ...: one test each)
                continue
            if name[0] == "p":
                if amount > 0:
                    ports.add(_port(name))
            elif name[0] == "v":
                claims[name[2:]] = amount
            elif name.startswith("r:s:"):
                scalars[name[4:]] = amount
        if images is None:
            images = self._images(entry.node, spread)
        get = totals.get  # (not totals[...]: Counter's __missing__ is a Python call)
        cpu, memory = get("r:cpu", 0), get("r:mem", 0)
        return {
            "name": entry.name,
            "node": entry.node,
            "requested": Resource(cpu, memory, get("r:eph", 0), 0, scalars),
            "non_zero_requested": Resource(cpu + get("z:cpu", 0), memory + get("z:mem", 0)),
            "allocatable": entry.allocatable,
            "used_ports": ports,
            "image_states": images,
            "pvc_ref_counts": claims,
            "generation": entry.generation,
        }

    def _images(self, node: Node | None, spread: Counter[str]) -> dict[str, ImageStateSummary]:
        images = {}
        if node is not None:
            sizes = self.image_sizes
            for names, _ in node.images:
                for image in names:
                    images[image] = ImageStateSummary(sizes[image], spread[image])
        return images


Handler = Callable[[ReplayState, bytes, Mapping[bytes, bytes], int], None]
# What each event type does to the state, by its ``type`` field as stored.
_HANDLERS: dict[bytes, Handler] = {
    b"NodeAdded": ReplayState._node_set,
    b"NodeUpdated": ReplayState._node_set,
    b"NodeRemoved": ReplayState._node_removed,
    b"PodAssumed": ReplayState._pod_assumed,
    b"BindingFinished": ReplayState._binding_finished,
    b"PodAdded": ReplayState._pod_added,
    b"PodUpdated": ReplayState._pod_updated,
}
_HANDLERS.update((kind.encode(), ReplayState._pod_removed) for kind in POD_REMOVALS)


def _totals(pods: Iterable[Pod]) -> Counter[str]:
    totals: Counter[str] = Counter()
    add = totals.get
    for pod in pods:  # (Counter.update loops in Python: this is a third of the cost)
        for name, amount in pod_contribution(pod):
            totals[name] = add(name, 0) + amount
    return totals


def _add_contribution(totals: Counter[str], pairs: Pairs, sign: int) -> None:
    add = totals.get
    for name, amount in pairs:
        totals[name] = add(name, 0) + sign * amount


_NONE: Mapping[str, Any] = {}


def data_contribution(data: Mapping[str, Any]) -> Pairs:
    """``pod_contribution(Pod.from_dict(data))`` read straight from a pod's stored dict: a
    third of the cost (building the ``Pod`` is most of decoding one). Their parity is tested
    (tests/test_snapshot_stream.py)."""
    requests = data.get("requests") or _NONE
    non_zero = data.get("non_zero_requests") or _NONE
    cpu, memory = int(requests.get("milli_cpu", 0)), int(requests.get("memory", 0))
    pairs: Pairs = [
        ("r:cpu", cpu),
        ("r:mem", memory),
        ("r:eph", int(requests.get("ephemeral_storage", 0))),
        ("z:cpu", int(non_zero.get("milli_cpu", 0)) - cpu),
        ("z:mem", int(non_zero.get("memory", 0)) - memory),
        ("aff", int(bool(data.get("has_affinity", False)))),
        ("anti", int(bool(data.get("has_required_anti_affinity", False)))),
    ]
    scalars = requests.get("scalar_resources")
    if scalars:
        pairs += [(f"r:s:{name}", int(amount)) for name, amount in scalars.items()]
    ports = data.get("host_ports")
    if ports:
        held = dict.fromkeys((ip, protocol, int(number)) for ip, protocol, number in ports)
        pairs += [(port_field(port), 1) for port in held]
    claims = data.get("pvc_claims")
    if claims:
        pairs += [(f"v:{claim}", count) for claim, count in Counter(claims).items()]
    return [(name, amount) for name, amount in pairs if amount != 0]


def stored(allocatable: Resource) -> Resource:
    """``allocatable`` as the node hash keeps it: the write path leaves zero amounts out
    (``resource_pairs``), so a kubelet's ``hugepages-1Gi: "0"`` is no scalar resource at all,
    which is how kube-scheduler's fit check reads it too (a missing resource is 0)."""
    amounts = dict(resource_pairs(allocatable))
    return Resource(
        amounts.get("cpu", 0),
        amounts.get("mem", 0),
        amounts.get("eph", 0),
        amounts.get("pods", 0),
        {name[2:]: amount for name, amount in amounts.items() if name.startswith("s:")},
    )


def _image_names(node: Node) -> set[str]:
    return {name for names, _ in node.images for name in names}


def _port(field_name: str) -> tuple[str, str, int]:
    ip, protocol, number = field_name[2:].rsplit("|", 2)
    return ip, protocol, int(number)


def fold(
    events: Iterable[Event],
    state: ReplayState | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayState:
    """Fold ``events`` into ``state`` (a fresh one by default); ``progress(n)`` is called
    every 10,000 events."""
    pages = ([(event.id.encode(), event.entry_fields())] for event in events)
    return fold_pages(pages, state, progress)


def fold_pages(
    pages: Iterable[Sequence[tuple[bytes, Mapping[bytes, bytes]]]],
    state: ReplayState | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayState:
    """Fold pages of stream entries (as XRANGE returns them) into ``state`` (a fresh one by
    default); ``progress(n)`` is called every 10,000 events or more."""
    state = state or ReplayState()
    done = 0
    for page in pages:
        state.fold_entries(page)
        done += len(page)
        if progress and done >= 10_000:
            progress(done)
            done = 0
    if progress and done:
        progress(done)
    return state
