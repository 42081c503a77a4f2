"""Snapshots: each replica's private copy of the live nodes, caught up from generations.

A scheduler reads the cluster only through a snapshot taken at the start of each cycle.
``update_snapshot`` asks Redis, in one atomic read (``sc_snapshot_delta``), for what changed
since the snapshot's generation: the nodes (from the generation index, removed ones as
tombstones), the image spreads, and the node tree when its membership changed. Its cost grows
with the number of changed nodes, never with the cluster. A snapshot far behind (a new one, or
one more than ``INLINE_NODES`` changes behind) first reads the changed nodes in chunks, then
catches up atomically, so it ends consistent at one generation without holding Redis long.

Nothing in a snapshot is shared with another snapshot or with the cache's callers: every
``NodeInfo`` is parsed for this snapshot alone (upstream crashed when snapshots shared maps,
#118611). Ghost and placeholder nodes never appear.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedcache.errors import NodeNotFound
from schedcache.model.nodeinfo import Dump, ImageStateSummary, NodeInfo
from schedcache.store import metrics
from schedcache.store.fetch import (
    NodeObject,
    PodsNotHeld,
    PodVersions,
    gc_paused,
    node_entries_reads,
    node_info_from_entry,
)
from schedcache.store.reads import Reads, run_reads
from schedcache.store.store import Store
from schedcache.views.nodetree import interleave, parse_tree

log = logging.getLogger(__name__)

# Changed nodes read inside the delta call itself; beyond that they are read in chunks first.
INLINE_NODES = 200
# Chunked catch-up rounds before settling for the last one (only under extreme churn).
MAX_ROUNDS = 5


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
    # Per node, its pods by uid with their placement generation (decoded, or their records
    # until first used): a changed node's delta sends only the pods placed since, the rest are
    # taken from here (they belong to this snapshot alone).
    pod_versions: dict[str, PodVersions] = field(default_factory=dict, repr=False)
    # Per node, its stored object and the Node decoded from it: a node changed by its pods
    # alone keeps its Node (decoding it was a tenth of an update after 10 changed nodes).
    node_objects: dict[str, NodeObject] = field(default_factory=dict, repr=False)

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
    list_rebuilt: bool = False
    inconsistent: bool = False
    seconds: float = 0.0


@dataclass
class _Flags:
    membership: bool = False
    affinity: bool = False
    pvc: bool = False


def update_snapshot(store: Store, snap: Snapshot) -> SnapshotUpdate:
    """Bring ``snap`` to the cache's current generation; see the module docstring."""
    with gc_paused():
        return run_reads(store, update_reads(snap, store.name))


def update_reads(snap: Snapshot, cache: str) -> Reads[SnapshotUpdate]:
    """:func:`update_snapshot` without I/O: the reads it needs, for either transport."""
    started = time.perf_counter()
    report = SnapshotUpdate()
    live = yield from _catch_up(cache, snap, report)
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
        yield from _catch_up(cache, snap, report)
    report.seconds = time.perf_counter() - started
    metrics.SNAPSHOT_UPDATE_SECONDS.observe(report.seconds)
    return report


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
    the next :func:`update_snapshot`, which reads them again. A node gone since leaves it."""
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
    _commit_nodes(snap, decoded, flags)
    _rebuild_lists(snap, flags, report)
    report.changed_nodes = len(entries)
    report.seconds = time.perf_counter() - started
    return report


def _reset(snap: Snapshot) -> None:
    fresh = Snapshot()
    for name in vars(fresh):
        setattr(snap, name, getattr(fresh, name))


def _catch_up(cache: str, snap: Snapshot, report: SnapshotUpdate) -> Reads[int]:
    """Apply deltas until one fits inline (then the snapshot is exact at its generation).
    Returns the live node count of the last delta."""
    flags = _Flags()
    live = 0
    for _ in range(MAX_ROUNDS):
        report.rounds += 1
        reply = yield (
            "snapshot_delta",
            (snap.generation, snap.tree_generation, INLINE_NODES),
        )
        generation, live, changed, images, tree, entries, incarnation = reply
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
        _commit_nodes(snap, decoded, flags)
        if tree:
            snap.tree_generation, snap.zones = parse_tree(tree)
            flags.membership = True
        snap.generation = int(generation)
        _rebuild_lists(snap, flags, report)
        flags = _Flags()
        if inline:
            break
    return int(live)


# A node entry decoded: its name, its NodeInfo (None: no entry), its pods by uid.
Decoded = tuple[str, NodeInfo | None, PodVersions]


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
        known = snap.pod_versions.get(name)
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
        decoded.append((name, info, versions))


def _commit_nodes(snap: Snapshot, decoded: list[Decoded], flags: _Flags) -> None:
    """Put decoded nodes into the snapshot (in place of what it held of them)."""
    for name, info, versions in decoded:
        snap.pod_versions.pop(name, None)
        existing = snap.node_infos.get(name)
        if existing is not None:
            _unindex_images(snap, existing)
        if info is None or info.node is None:  # removed, or only a ghost/placeholder
            snap.node_objects.pop(name, None)
            if existing is not None:
                del snap.node_infos[name]
                flags.membership = True
            continue
        snap.pod_versions[name] = versions
        if existing is None:
            snap.node_infos[name] = info
            flags.membership = True
        else:
            flags.affinity |= bool(existing.pods_with_affinity) != bool(info.pods_with_affinity)
            flags.affinity |= bool(existing.pods_with_required_anti_affinity) != bool(
                info.pods_with_required_anti_affinity
            )
            flags.pvc |= existing.pvc_ref_counts.keys() != info.pvc_ref_counts.keys()
            # In place, as upstream: the list entries stay the same objects. (Cleared first:
            # a node read lazily keeps its pods' state in private fields.)
            existing.__class__ = info.__class__
            vars(existing).clear()
            vars(existing).update(vars(info))
            info = existing
        for image in info.image_states:
            snap.image_nodes.setdefault(image, set()).add(name)


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
        report.list_rebuilt = True
    if flags.membership or flags.affinity:
        snap.have_pods_with_affinity_list = [i for i in snap.node_info_list if i.pods_with_affinity]
        snap.have_pods_with_required_anti_affinity_list = [
            i for i in snap.node_info_list if i.pods_with_required_anti_affinity
        ]
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
