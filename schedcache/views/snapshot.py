"""Snapshots: each replica's private copy of the live nodes, fed by the event stream.

A scheduler reads the cluster only through a snapshot taken at the start of each cycle.
``update_snapshot`` follows the stream: one small atomic read (``sc_snapshot_delta`` with no
nodes: the generation, the incarnation, the node tree when its membership changed, the id of
the stream's last event and the namespaces' generation, whose labels are read only when it
moved) sent with the first ``XRANGE`` page of the events since the snapshot's last one (one
round trip: ``FOLLOW_READ``; more pages after it when there are more), folded by the fold
replay uses (``store/fold.py``: one code path for replay, ``verify``, ``at()`` and
snapshots), and only the nodes they touched projected again. Redis's cost is the events' (an
``XRANGE`` of them), the client's follows the events, not the nodes' pods.

The generation counters stay the source of truth for gaps. A snapshot whose last event is no
longer in the stream (compacted away, or a stream of another incarnation), a new one, or one
so far behind that reading the changed nodes costs less (``STREAM_BEHIND_PER_POD``) is caught
up from generations: Redis sends, in one atomic read, what changed since the snapshot's
generation: the nodes (from the generation index, removed ones as tombstones), the image
spreads, and the node tree. Its cost grows with the number of changed nodes, never with the
cluster. A snapshot far behind (a new one, or one more than ``INLINE_NODES`` changes behind)
first reads the changed nodes in chunks, then catches up atomically, so it ends consistent at
one generation (and one point of the stream) without holding Redis long. Either way the
snapshot's fold state is kept equal to what it holds, ghosts and placeholders included, so the
next update can follow the stream again.

Nothing in a snapshot is shared with another snapshot or with the cache's callers: every
``NodeInfo`` is parsed for this snapshot alone (upstream crashed when snapshots shared maps,
#118611). Ghost and placeholder nodes never appear.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedcache.errors import NodeNotFound
from schedcache.model.nodeinfo import Dump, ImageStateSummary, NodeInfo
from schedcache.model.plugins.podindex import PodIndex
from schedcache.store import metrics
from schedcache.store.fetch import (
    NodeObject,
    PodsNotHeld,
    PodVersions,
    gc_paused,
    node_entries_reads,
    node_info_from_entry,
)
from schedcache.store.fold import NodeState, PodState, ReplayState
from schedcache.store.namespaces import parse_namespaces
from schedcache.store.reads import (
    FOLLOW_READ,
    STREAM_PAGE,
    Reads,
    run_reads,
    run_snapshot_reads,
)
from schedcache.store.store import Store
from schedcache.views.nodetree import interleave, parse_tree

log = logging.getLogger(__name__)

# Changed nodes read inside the delta call itself; beyond that they are read in chunks first.
INLINE_NODES = 200
# Chunked catch-up rounds before settling for the last one (only under extreme churn).
MAX_ROUNDS = 5
# Stream entries per XRANGE page.
STREAM_PAGE_SIZE = 1000
# A snapshot more generations behind than this many per pod it holds (plus STREAM_BEHIND_MIN)
# is caught up from generations instead. Measured (bench/snapshot.py --threshold, 1,000 nodes,
# 23,000 pods, events spread over every node): reading every node cost the client 70 ms and
# Redis 18 ms, folding cost 7.3 µs and 0.6 µs per event: even at ~11,000 events, 0.48 a pod.
STREAM_BEHIND_PER_POD = 0.5
STREAM_BEHIND_MIN = 1_000


@dataclass
class Snapshot:
    """A consistent copy of the live nodes at ``generation``, in node-tree order."""

    generation: int = 0
    node_infos: dict[str, NodeInfo] = field(default_factory=dict)
    node_info_list: list[NodeInfo] = field(default_factory=list)
    have_pods_with_affinity_list: list[NodeInfo] = field(default_factory=list)
    have_pods_with_required_anti_affinity_list: list[NodeInfo] = field(default_factory=list)
    used_pvc_set: set[str] = field(default_factory=set)
    image_states: dict[str, ImageStateSummary] = field(default_factory=dict)
    tree_generation: int = -1
    incarnation: str = ""  # the cache's incarnation the generations belong to
    zones: dict[str, list[str]] = field(default_factory=dict)
    image_nodes: dict[str, set[str]] = field(default_factory=dict, repr=False)
    # The id of the last event the snapshot reflects (None: unknown, caught up from
    # generations next), and the fold state at that point: every node entry (ghosts and
    # placeholders too) with its pods. A changed node's delta sends only the pods placed
    # since, the rest are taken from here (they belong to this snapshot alone).
    last_id: str | None = None
    state: ReplayState = field(default_factory=ReplayState, repr=False)
    # The id of the newest event any read of this snapshot reflected ("": none yet). Redis
    # must still hold it: a stream that lacks it but holds an older event lost writes the
    # snapshot saw, so the snapshot is rebuilt, and a claim decided on it refused
    # (lua/_history.lua).
    seen_id: str = ""
    # Per node, its stored object and the Node decoded from it: a node changed by its pods
    # alone keeps its Node (decoding it was a tenth of an update after 10 changed nodes).
    node_objects: dict[str, NodeObject] = field(default_factory=dict, repr=False)
    # Names of the nodes put in or taken out since a reader last emptied it (the snapshot
    # columns, views/columns.py, follow these instead of looking at every node).
    changed: set[str] = field(default_factory=set, repr=False)
    # Counts per topology domain of the pods the inter-pod rules in use select, kept as the
    # snapshot changes (every changed node marked): the rules' PreFilter reads them.
    pod_index: PodIndex = field(default_factory=PodIndex, repr=False)
    # The live nodes holding pods with affinity, with required anti-affinity (kept per changed
    # node: the two lists above are filtered by them, with no look at every node's pods).
    affinity_names: set[str] = field(default_factory=set, repr=False)
    anti_names: set[str] = field(default_factory=set, repr=False)
    node_rank: dict[str, int] = field(default_factory=dict, repr=False)  # in node_info_list

    def num_nodes(self) -> int:
        return len(self.node_info_list)

    def get(self, name: str) -> NodeInfo:
        info = self.node_infos.get(name)
        if info is None:
            raise NodeNotFound(f"nodeinfo not found for node name {name}")
        return info

    def is_pvc_used_by_pods(self, key: str) -> bool:
        """``key`` is ``namespace/claim``."""
        return key in self.used_pvc_set


@dataclass
class SnapshotUpdate:
    """What one ``update_snapshot`` did (for metrics, logs and benchmarks)."""

    changed_nodes: int = 0
    changed_images: int = 0
    rounds: int = 0
    events: int = 0  # folded from the stream (0: caught up from generations)
    fell_back: str = ""  # why the stream was not followed ("": it was, or nothing to follow)
    list_rebuilt: bool = False
    inconsistent: bool = False
    lost_writes: bool = False  # the cache lost writes the snapshot had seen: rebuilt in full
    seconds: float = 0.0


@dataclass
class _Flags:
    membership: bool = False
    affinity: bool = False
    pvc: bool = False
    flipped: list[str] = field(default_factory=list)  # gained or lost pods with affinity


def update_snapshot(store: Store, snap: Snapshot, *, replica_ok: bool = True) -> SnapshotUpdate:
    """Bring ``snap`` to the cache's current generation; see the module docstring. With a
    store that reads snapshots from a replica (``read_from``), from there unless
    ``replica_ok`` is False (a claim's own snapshot: its answer must be current)."""
    with gc_paused():
        if not replica_ok:
            return run_reads(store, update_reads(snap, store.name))
        return run_snapshot_reads(
            store,
            lambda: update_reads(snap, store.name),
            lambda: (snap.incarnation, snap.generation),
        )


def update_reads(snap: Snapshot, cache: str) -> Reads[SnapshotUpdate]:
    """:func:`update_snapshot` without I/O: the reads it needs, for either transport."""
    started = time.perf_counter()
    report = SnapshotUpdate()
    head = yield from _follow(snap, report)
    if head is None:
        if (yield from _history_lost(snap)):
            log.warning(
                "cache %s no longer holds event %s that its snapshot saw (at generation %d): "
                "Redis lost writes (a restart from an older AOF or RDB, a restore, a failover "
                "to a replica behind); rebuilding the snapshot in full",
                cache,
                snap.seen_id,
                snap.generation,
            )
            metrics.SNAPSHOT_INCONSISTENCIES.labels(cache=cache).inc()
            report.lost_writes = report.inconsistent = True
            _reset(snap)
        head = yield from _catch_up(cache, snap, report)
    live, namespaces = head
    if len(snap.node_infos) != live or len(snap.node_info_list) != live:
        # As upstream's self-check, but recovering in the same call instead of failing it.
        log.warning(
            "snapshot state is not consistent: %d nodes in the snapshot map, %d in its list, "
            "%d live nodes in cache %s; rebuilding it in full",
            len(snap.node_infos),
            len(snap.node_info_list),
            live,
            cache,
        )
        metrics.SNAPSHOT_INCONSISTENCIES.labels(cache=cache).inc()
        report.inconsistent = True
        _reset(snap)
        _, namespaces = yield from _catch_up(cache, snap, report)
    yield from _namespaces(snap, namespaces)
    report.seconds = time.perf_counter() - started
    metrics.SNAPSHOT_UPDATE_SECONDS.observe(report.seconds)
    return report


def _namespaces(snap: Snapshot, generation: int) -> Reads[None]:
    """The Namespaces' labels into the snapshot's index, read only when their generation
    (``generation``, the head read's: lua/sync_namespace.lua) is not the one it holds: an
    update while they did not change makes no call for them."""
    index = snap.pod_index
    if generation == index.namespace_generation:
        return
    reply = yield ("read_namespaces", (str(index.namespace_generation),))
    generation, labels = parse_namespaces(reply)
    if labels is not None:
        index.set_namespaces(generation, labels)


def changed_since(store: Store, snap: Snapshot) -> list[str]:
    """Names of the nodes changed since ``snap.generation``, without reading them: the same
    ``sc_snapshot_delta`` call with no node inline, so its cost is the names alone. A replica
    claiming strictly (``expect_generation``) skips them between updates: a claim on one would
    surely conflict."""
    reply = store.read_function("snapshot_delta", snap.generation, snap.tree_generation, 0)
    return [name.decode() for name in reply[2]]


def refresh_nodes(store: Store, snap: Snapshot, names: Sequence[str]) -> SnapshotUpdate:
    """Re-read just ``names`` into ``snap``, in place: a replica whose claim on a node
    conflicted learns that node's state without catching up on the whole cluster (its cost
    follows the nodes asked for). The snapshot is then no longer exact at one generation: these
    nodes are newer than ``snap.generation`` (their image spreads are the snapshot's), until
    the next :func:`update_snapshot`. Its fold state stays at the snapshot's point of the
    stream, so that update projects again every node an event since touched, these among them,
    and the others are as the fold state holds them (no event changed them since). A node gone
    since leaves it."""
    with gc_paused():
        return run_reads(store, refresh_reads(snap, names))


def refresh_reads(snap: Snapshot, names: Sequence[str]) -> Reads[SnapshotUpdate]:
    """:func:`refresh_nodes` without I/O: the reads it needs, for either transport."""
    started = time.perf_counter()
    report = SnapshotUpdate(rounds=1)
    entries, _ = yield from node_entries_reads(names)
    flags = _Flags()
    # No reuse of decoded pods by generation: unlike an update, a refresh does not check the
    # cache's incarnation, and after a reset another pod may hold the same generation.
    decoded: list[Decoded] = []
    _decode_nodes(snap, snap.image_states, decoded, [], entries, reuse=False)
    _commit_nodes(snap, decoded, flags, sync=False)
    _rebuild_lists(snap, flags, report)
    report.changed_nodes = len(entries)
    report.seconds = time.perf_counter() - started
    return report


def _reset(snap: Snapshot) -> None:
    fresh = Snapshot()
    for name in vars(fresh):
        setattr(snap, name, getattr(fresh, name))


def _history_lost(snap: Snapshot) -> Reads[bool]:
    """Whether the stream lost the newest event the snapshot saw: it lacks it, yet holds an
    older one (a stream trimmed past it, or empty, says nothing: generations decide then).
    The same rule as lua/_history.lua, which refuses claims decided on such a snapshot."""
    seen = snap.seen_id
    if not seen:
        return False
    held = yield (STREAM_PAGE, (seen, seen, 1))
    if held:
        return False
    older = yield (STREAM_PAGE, ("-", seen, 1))
    return bool(older)


# What a head read tells an update besides the events: the live node count, and the
# namespaces' generation.
Head = tuple[int, int]


def _catch_up(cache: str, snap: Snapshot, report: SnapshotUpdate) -> Reads[Head]:
    """Apply deltas until one fits inline (then the snapshot is exact at its generation).
    Returns the live node count and the namespaces' generation of the last delta."""
    flags = _Flags()
    live = namespaces = 0
    for _ in range(MAX_ROUNDS):
        report.rounds += 1
        reply = yield (
            "snapshot_delta",
            (snap.generation, snap.tree_generation, INLINE_NODES),
        )
        generation, live, changed, images, tree, entries, incarnation, last, namespaces = reply
        incarnation = incarnation.decode()
        if snap.generation and (
            incarnation != snap.incarnation or int(generation) < snap.generation
        ):
            # The cache lost writes (a restart without persistence, a failover behind its
            # replica, a clear): generations were handed out again, so a delta would miss
            # what changed. Start over from nothing.
            log.warning(
                "snapshot of cache %s is at generation %d of incarnation %r, the cache at %s "
                "of %r: rebuilding it in full",
                cache,
                snap.generation,
                snap.incarnation,
                int(generation),
                incarnation,
            )
            metrics.SNAPSHOT_INCONSISTENCIES.labels(cache=cache).inc()
            report.inconsistent = True
            _reset(snap)
            flags = _Flags()
            continue
        snap.incarnation = incarnation
        inline = len(changed) <= INLINE_NODES
        # Everything this round reads is decoded first, the snapshot untouched: a read or a
        # record that fails leaves it exact at its generation, and the next update catches
        # up from there. Then it changes at once.
        image_changes = _image_changes(images)
        summaries = _with_changes(snap.image_states, image_changes)
        decoded: list[Decoded] = []
        unheld: list[str] = []
        if inline:
            _decode_nodes(snap, summaries, decoded, unheld, entries)
        else:
            # Deltas too (a new snapshot reads whole): what the snapshot holds of a node is
            # still right for the pods placed before its generation. Each chunk is decoded as
            # it comes, while the next one is read.
            names = [name.decode() for name in changed]
            decode_chunk = functools.partial(_decode_nodes, snap, summaries, decoded, unheld)
            yield from node_entries_reads(names, snap.generation or None, decode_chunk)
        if unheld:
            # Nodes new to this snapshot whose older pods the delta did not send: read whole,
            # which is newer than this delta, so one more round ends exact.
            full, _ = yield from node_entries_reads(unheld)
            _decode_nodes(snap, summaries, decoded, [], full)
            inline = False
        report.changed_nodes += len(changed)
        report.changed_images += len(images) // 3
        _apply_images(snap, image_changes)
        _sync_images(snap.state, image_changes)
        _commit_nodes(snap, decoded, flags)
        if tree:
            snap.tree_generation, snap.zones = parse_tree(tree)
            flags.membership = True
        snap.generation = snap.state.generation = int(generation)
        snap.seen_id = last.decode() or snap.seen_id
        # Exact at this point of the stream only when this round's read was one atomic call.
        snap.last_id = snap.state.last_id = last.decode() if inline and last else None
        _rebuild_lists(snap, flags, report)
        flags = _Flags()
        if inline:
            break
    return int(live), int(namespaces)


def _follow(snap: Snapshot, report: SnapshotUpdate) -> Reads[Head | None]:
    """Catch up by folding the events since ``snap.last_id``; returns the live node count
    and the namespaces' generation, or None (``report.fell_back`` says why) when the snapshot
    must be caught up from generations, untouched then."""
    if snap.last_id is None:
        return None
    report.rounds += 1
    head, page = yield (
        FOLLOW_READ,
        ((snap.generation, snap.tree_generation, -1), snap.last_id, STREAM_PAGE_SIZE + 1),
    )
    generation, _, _, _, tree, _, incarnation, last, namespaces = head
    generation, last = int(generation), last.decode()
    behind = generation - snap.generation
    if incarnation.decode() != snap.incarnation or behind < 0 or not last:
        report.fell_back = "another incarnation"
        return None
    if behind > STREAM_BEHIND_MIN + STREAM_BEHIND_PER_POD * len(snap.state.pods):
        report.fell_back = f"{behind} generations behind"
        return None
    state = snap.state
    touched, touched_images = state.track()
    try:
        if not (yield from _fold_pages(snap, last, report, page)):
            _abandon(snap, touched, touched_images)
            return None
        held = snap.node_infos.get
        decoded: list[Decoded] = [
            (name, state.projection(name, held(name)), {}, None) for name in touched
        ]
    except BaseException:
        _abandon(snap, touched, touched_images)
        raise
    changes: dict[str, ImageStateSummary | None] = {}
    for image in touched_images:
        count = state.image_spread.get(image, 0)
        size = state.image_sizes.get(image)
        changes[image] = ImageStateSummary(size, count) if count and size is not None else None
    touched.clear()
    touched_images.clear()
    flags = _Flags()
    _apply_images(snap, changes)
    _commit_nodes(snap, decoded, flags, sync=False)
    if tree:
        snap.tree_generation, snap.zones = parse_tree(tree)
        flags.membership = True
    report.changed_nodes += len(decoded)
    report.changed_images += len(changes)
    snap.generation = state.generation = generation
    snap.last_id = state.last_id = last
    snap.seen_id = last
    _rebuild_lists(snap, flags, report)
    # The head read (limit -1) does not count the live nodes (lua/snapshot_delta.lua): they
    # are the node tree's, which the snapshot holds at the cache's tree generation.
    live = sum(len(nodes) for nodes in snap.zones.values())
    return live, int(namespaces)


def _fold_pages(
    snap: Snapshot,
    last: str,
    report: SnapshotUpdate,
    ahead: Sequence[tuple[bytes, Mapping[bytes, bytes]]] | None = None,
) -> Reads[bool]:
    """Fold the events after ``snap.last_id`` up to ``last`` into the snapshot's fold state,
    a page at a time, the first one ``ahead`` when given (read with the head, up to the
    stream's end then: cut at ``last``); False (``report.fell_back`` says why) when the stream
    cannot give them all. Each page starts at the last event folded: present, the stream is
    the same one and nothing the snapshot lacks was trimmed."""
    first = snap.last_id
    page = ahead
    while first is not None and first != last:
        read_ahead = page is not None
        if page is None:
            page = yield (STREAM_PAGE, (first, last, STREAM_PAGE_SIZE + 1))
        if not page or page[0][0].decode() != first:
            report.fell_back = f"event {first} is no longer in the stream"
            return False
        entries, page = page[1:], None
        if read_ahead:
            # Events written after the head read (between its two commands) are the next
            # update's; an ahead page that does not reach `last` is read on from its end.
            entries = _up_to(entries, last)
            if not entries:
                continue
        elif not entries:  # (ends before `last`: only if the stream was cut after `first`)
            report.fell_back = f"the stream ends before event {last}"
            return False
        snap.state.fold_entries(entries)
        report.events += len(entries)
        first = entries[-1][0].decode()
    return True


def _up_to(
    entries: Sequence[tuple[bytes, Mapping[bytes, bytes]]], last: str
) -> Sequence[tuple[bytes, Mapping[bytes, bytes]]]:
    """``entries`` (in stream order) up to the id ``last``."""
    if not entries or entries[-1][0].decode() == last:
        return entries
    bound = _stream_id(last)
    return [entry for entry in entries if _stream_id(entry[0].decode()) <= bound]


def _stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence)


def _abandon(snap: Snapshot, touched: set[str], touched_images: set[str]) -> None:
    """The fold state may be ahead of what the snapshot holds, in nodes and images that all
    changed since its generation: the snapshot (untouched) is caught up from generations,
    which reads each of them again."""
    snap.last_id = None
    touched.clear()
    touched_images.clear()


# A node entry decoded: its name, its NodeInfo (None: no entry), its pods by uid, the sums of
# its pods' contributions (None: the fold's own).
Decoded = tuple[str, NodeInfo | None, PodVersions, Counter[str] | None]


def _image_changes(flat: Sequence[Any]) -> dict[str, ImageStateSummary | None]:
    """A delta's image spreads: the new summary of each image, None for one no live node has
    any more."""
    changes: dict[str, ImageStateSummary | None] = {}
    for index in range(0, len(flat), 3):
        image_raw, size, count = flat[index : index + 3]
        changes[image_raw.decode()] = (
            ImageStateSummary(size=int(size), num_nodes=int(count)) if size else None
        )
    return changes


def _with_changes(
    states: dict[str, ImageStateSummary], changes: dict[str, ImageStateSummary | None]
) -> dict[str, ImageStateSummary]:
    """``states`` with ``changes`` made, as a copy (``states`` itself when there are none)."""
    if not changes:
        return states
    changed = dict(states)
    for image, summary in changes.items():
        if summary is None:
            changed.pop(image, None)
        else:
            changed[image] = summary
    return changed


def _apply_images(snap: Snapshot, changes: dict[str, ImageStateSummary | None]) -> None:
    """New image spreads, pushed into every snapshot node that has the image."""
    for image, summary in changes.items():
        if summary is not None:
            snap.image_states[image] = summary
            for name in snap.image_nodes.get(image, ()):
                snap.node_infos[name].image_states[image] = summary
        else:  # no live node has it any more: nor does any node of the snapshot
            snap.image_states.pop(image, None)
            for name in snap.image_nodes.pop(image, ()):
                snap.node_infos[name].image_states.pop(image, None)


def _decode_nodes(
    snap: Snapshot,
    summaries: Mapping[str, ImageStateSummary],
    decoded: list[Decoded],
    unheld: list[str],
    entries: Sequence[Sequence[Any]],
    reuse: bool = True,
) -> None:
    """Decode node entries into ``decoded``, the snapshot untouched (but its memo of node
    objects, which holds only what a stored object decodes to); the names of those to read
    whole (:class:`PodsNotHeld`) go to ``unheld``."""
    for entry in entries:
        name = entry[0].decode()
        versions: PodVersions = {}
        known = _known(snap.state, name) if reuse else None
        try:
            info = node_info_from_entry(
                entry,
                summaries,
                known if reuse else None,
                versions,
                snap.node_objects if reuse else None,
            )
        except PodsNotHeld:
            unheld.append(name)
            continue
        if info is not None:
            # The pods the affinity lists need are decoded now, so a corrupt one is refused
            # before the snapshot changes (the rest wait until read).
            _ = info.pods_with_affinity, info.pods_with_required_anti_affinity
        decoded.append((name, info, versions, _totals(entry[1])))


def _known(state: ReplayState, name: str) -> PodVersions | None:
    """The pods the snapshot holds of node ``name``, as a delta entry completes them."""
    entry = state.nodes.get(name)
    if entry is None:
        return None
    pods = state.pods
    return {uid.encode(): (pods[uid].generation, pods[uid]) for uid in entry.pods}


def _totals(flat: Sequence[bytes]) -> Counter[str]:
    """A node hash's sums of its pods' contributions (what the fold keeps as ``totals``)."""
    return Counter(
        {
            key.decode(): int(value)
            for key, value in zip(flat[::2], flat[1::2], strict=True)
            if key in _POD_COUNTS or (key[1:2] == b":" and key[:1] in b"rzpv")
        }
    )


_POD_COUNTS = frozenset({b"aff", b"anti"})


def _sync_state(
    state: ReplayState,
    name: str,
    info: NodeInfo | None,
    versions: PodVersions,
    totals: Counter[str] | None,
) -> None:
    """Make the fold state's entry of node ``name`` what was read of it (its pods moved
    elsewhere are left to their new node's entry)."""
    pods = state.pods
    old = state.nodes.pop(name, None)
    if old is not None:
        for uid in old.pods:
            record = pods.get(uid)
            if record is not None and record.node == name:
                del pods[uid]
    if info is None:
        return
    held = state.nodes[name] = NodeState(
        name, info.node, info.allocatable, {}, info.generation, totals
    )
    items = list(versions.items())
    placed = [generation for _, (generation, _) in items]
    if placed != sorted(placed):  # a delta entry: the new pods came first
        items.sort(key=_PLACED)
    order, new = held.pods, PodState
    for uid_raw, (generation, item) in items:
        uid = uid_raw.decode()
        if isinstance(item, bytes):  # the stored record: header, newline, msgpack
            offset = item.index(b"\n") + 1
            record = new(item, "added", name, generation, False, None, None, None, offset)
        elif isinstance(item, PodState):
            record = item
        else:
            record = new(None, "added", name, generation, False, None, None, item)
        order[uid] = record
        pods[uid] = record


def _placed(item: tuple[bytes, tuple[int, Any]]) -> int:
    return item[1][0]


_PLACED = _placed


def _sync_images(state: ReplayState, changes: Mapping[str, ImageStateSummary | None]) -> None:
    for image, summary in changes.items():
        if summary is None:
            state.image_spread.pop(image, None)
            state.image_sizes.pop(image, None)
        else:
            state.image_spread[image] = summary.num_nodes
            state.image_sizes[image] = summary.size


def _commit_nodes(snap: Snapshot, decoded: list[Decoded], flags: _Flags, sync: bool = True) -> None:
    """Put decoded nodes into the snapshot (in place of what it held of them), and, read from
    Redis (``sync``), into its fold state."""
    for name, info, versions, totals in decoded:
        snap.changed.add(name)
        snap.pod_index.mark(name)
        if sync:
            _sync_state(snap.state, name, info, versions, totals)
        existing = snap.node_infos.get(name)
        same_images = (
            existing is not None
            and info is not None
            and info.node is not None
            and existing.image_states.keys() == info.image_states.keys()
        )
        if existing is not None and not same_images:
            _unindex_images(snap, existing)
        if info is None or info.node is None:  # removed, or only a ghost/placeholder
            flags.membership |= name in snap.affinity_names or name in snap.anti_names
            snap.affinity_names.discard(name)
            snap.anti_names.discard(name)
            snap.node_objects.pop(name, None)
            if existing is not None:
                del snap.node_infos[name]
                flags.membership = True
            continue
        if existing is None:
            snap.node_infos[name] = info
            flags.membership = True
        else:
            flags.affinity |= _with_affinity(existing) != _with_affinity(info)
            flags.pvc |= existing.pvc_ref_counts.keys() != info.pvc_ref_counts.keys()
            # In place, as upstream: the list entries stay the same objects. (Its fields
            # replaced whole: a node read lazily keeps its pods' state in private fields; the
            # decoded one is dropped, so the two never share them.)
            existing.__class__ = info.__class__
            existing.__dict__ = vars(info)
            info = existing
        affinity, anti = _with_affinity(info)
        for names, held in ((snap.affinity_names, affinity), (snap.anti_names, anti)):
            if held != (name in names):
                flags.flipped.append(name)
            if held:
                names.add(name)
            else:
                names.discard(name)
        if not same_images:
            for image in info.image_states:
                snap.image_nodes.setdefault(image, set()).add(name)


def _with_affinity(info: NodeInfo) -> tuple[bool, bool]:
    """Whether ``info`` has pods with affinity, with required anti-affinity: from the counts a
    lazily read node keeps (its pods are not decoded for this)."""
    held = vars(info)
    if "_affinity" in held and held.get("_pods") is None:
        return held["_affinity"] > 0, held["_anti"] > 0
    return bool(info.pods_with_affinity), bool(info.pods_with_required_anti_affinity)


def _unindex_images(snap: Snapshot, info: NodeInfo) -> None:
    for image in info.image_states:
        holders = snap.image_nodes.get(image)
        if holders is not None:
            holders.discard(info.name)
            if not holders:
                del snap.image_nodes[image]


def _rebuild_lists(snap: Snapshot, flags: _Flags, report: SnapshotUpdate) -> None:
    if flags.membership:
        order = interleave(list(snap.zones.values()))
        missing = [name for name in order if name not in snap.node_infos]
        if missing:
            log.warning("nodes in the tree but not in the snapshot: %s", ", ".join(missing[:10]))
        snap.node_info_list = [snap.node_infos[name] for name in order if name in snap.node_infos]
        snap.node_rank = {}  # found again when next needed
        report.list_rebuilt = True
    if flags.membership:
        affinity, anti = snap.affinity_names, snap.anti_names
        snap.have_pods_with_affinity_list = [i for i in snap.node_info_list if i.name in affinity]
        snap.have_pods_with_required_anti_affinity_list = [
            i for i in snap.node_info_list if i.name in anti
        ]
    elif flags.flipped:
        # Only these nodes gained or lost pods with affinity: each put in (at its place in
        # the node list's order) or taken out, with no look at every node.
        if len(snap.node_rank) != len(snap.node_info_list):
            snap.node_rank = {info.name: at for at, info in enumerate(snap.node_info_list)}
        rank = snap.node_rank
        for names, held in (
            (snap.affinity_names, snap.have_pods_with_affinity_list),
            (snap.anti_names, snap.have_pods_with_required_anti_affinity_list),
        ):
            for name in dict.fromkeys(flags.flipped):
                if name not in rank:
                    continue
                at = bisect.bisect_left(held, rank[name], key=lambda i: rank.get(i.name, -1))
                listed = at < len(held) and held[at].name == name
                if name in names and not listed:
                    held.insert(at, snap.node_infos[name])
                elif name not in names and listed:
                    del held[at]
    if flags.membership or flags.pvc:
        snap.used_pvc_set = {key for info in snap.node_info_list for key in info.pvc_ref_counts}


def snapshot_of(state: Dump) -> Snapshot:
    """A snapshot-shaped copy of a replayed state (``Cache.at``), for the filter and score
    code a replica runs: the live nodes (ghosts and placeholders left out), zones in the order
    their first node appears, nodes interleaved across zones as the node tree does. Read-only by
    convention: nothing updates it."""
    snap = Snapshot(generation=state.generation)
    for name, info in state.nodes.items():
        if info.node is None:
            continue
        snap.node_infos[name] = info
        snap.zones.setdefault(info.node.zone_key, []).append(name)
    snap.node_info_list = [snap.node_infos[name] for name in interleave(list(snap.zones.values()))]
    snap.have_pods_with_affinity_list = [i for i in snap.node_info_list if i.pods_with_affinity]
    snap.have_pods_with_required_anti_affinity_list = [
        i for i in snap.node_info_list if i.pods_with_required_anti_affinity
    ]
    snap.used_pvc_set = {key for info in snap.node_info_list for key in info.pvc_ref_counts}
    return snap
