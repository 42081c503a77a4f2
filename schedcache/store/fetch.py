"""Reading nodes and pods back from Redis.

Node entries come from ``sc_read_nodes``, which reads a node's hash, its pod records and its
images in one atomic call (chunks of nodes per call), so a ``NodeInfo`` never mixes two moments
of the same node. ``dump()``, ``get_node_info()`` and snapshots all build ``NodeInfo`` here.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from schedcache.errors import CorruptRecord
from schedcache.model.aggregates import NodeFields
from schedcache.model.nodeinfo import Dump, ImageStateSummary, NodeInfo, StoredNodeInfo
from schedcache.model.values import Node, Pod
from schedcache.store.fold import PodState
from schedcache.store.reads import Ahead, Read, Reads, run_reads
from schedcache.store.records import (
    PodRecord,
    decode_node,
    parse_pod_record,
    record_generation,
    record_pod,
)
from schedcache.store.responses import as_text
from schedcache.store.store import Store

# Nodes per sc_read_nodes call: bounds how long one call holds Redis (30 pods a node -> 3,000
# pod records per call).
NODES_PER_CALL = 100
T = TypeVar("T")
PODS_PER_PIPELINE = 2000


def fetch_pods(store: Store, uids: Sequence[str]) -> dict[str, PodRecord]:
    """The stored records of ``uids``; uids not in the cache are left out."""
    records: dict[str, PodRecord] = {}
    keys = store.keys
    for start in range(0, len(uids), PODS_PER_PIPELINE):
        chunk = uids[start : start + PODS_PER_PIPELINE]
        pipe = store.client.pipeline(transaction=False)
        for uid in chunk:
            pipe.get(keys.pod(uid))
        for uid, raw in zip(chunk, pipe.execute(), strict=True):
            if raw is not None:
                records[uid] = parse_pod_record(raw, keys.pod(uid))
    return records


def parse_image_summaries(flat: Sequence[Any]) -> dict[str, ImageStateSummary]:
    """``{image: summary}`` from ``[image, size, count, ...]``; images no live node has are left
    out."""
    summaries = {}
    for index in range(0, len(flat), 3):
        image, size, count = flat[index : index + 3]
        if size:
            summaries[image.decode()] = ImageStateSummary(size=int(size), num_nodes=int(count))
    return summaries


def image_names(entry: Sequence[Any]) -> list[str]:
    return sorted(image.decode() for image in entry[3])


PodVersions = dict[bytes, tuple[int, Pod | bytes | PodState]]
"""A node's pods by uid: the generation that placed each, and the pod decoded, still its
stored record, or as a snapshot's fold holds it."""


class PodsNotHeld(Exception):
    """A delta entry names pods placed before the snapshot's generation that the snapshot does
    not hold (it never held the node, e.g. a placeholder that became a live node): the node is
    read whole instead."""


NodeObject = tuple[bytes, Node]
"""A node's stored object and the ``Node`` decoded from it."""


def node_info_from_entry(
    entry: Sequence[Any],
    summaries: Mapping[str, ImageStateSummary],
    known: PodVersions | None = None,
    held: PodVersions | None = None,
    objects: dict[str, NodeObject] | None = None,
) -> NodeInfo | None:
    """A ``NodeInfo`` from one ``sc_read_nodes`` or ``sc_snapshot_delta`` entry; None when the
    node has no entry.

    ``known`` holds the pods a snapshot already has of this node: a full entry's pods are
    reused from it where their placement generation matches, and a delta entry, which sends
    only the pods placed since, takes the others from it (:class:`PodsNotHeld` when one is
    missing). ``held`` is filled with this entry's pods, for the next time; decoding replaces
    their records with the pods. ``objects`` holds the node objects a snapshot has decoded,
    by name: a node whose stored object is unchanged (its pods changed) keeps its ``Node``,
    and a node decoded here is put there.
    """
    name_raw, flat = entry[0], entry[1]
    if not flat:
        return None
    try:
        return _node_info(entry, summaries, known, {} if held is None else held, objects)
    except (CorruptRecord, PodsNotHeld):
        raise
    except (ValueError, UnicodeDecodeError) as error:  # a field another client wrote
        name = name_raw.decode(errors="replace")
        raise CorruptRecord(f"key node:{name}", f"malformed node hash ({error})") from None


def _node_info(
    entry: Sequence[Any],
    summaries: Mapping[str, ImageStateSummary],
    known: PodVersions | None,
    held: PodVersions,
    objects: dict[str, NodeObject] | None,
) -> NodeInfo:
    name_raw, flat, pod_records, _, uids, every = entry
    name = name_raw.decode()
    fields = NodeFields(dict(zip(flat[::2], flat[1::2], strict=True)))
    blob = fields.strings.get("blob")
    node = None
    if fields.exists and blob:
        kept = objects.get(name) if objects is not None else None
        if kept is not None and kept[0] == blob:
            node = kept[1]
        else:
            node = decode_node(blob, name)
            if objects is not None:
                objects[name] = (blob, node)
    # Headers now (a malformed one is refused with the node), blobs when the pods are used.
    gone = set()
    for uid, raw in zip(uids, pod_records, strict=True):
        if not raw:  # listed without a record: what verify() reports; nothing to show
            gone.add(uid)
            continue
        generation = record_generation(raw)
        reused = known.get(uid) if known else None
        held[uid] = reused if reused is not None and reused[0] == generation else (generation, raw)
    if every:  # a delta: the pods not sent are the snapshot's own (a ghost's too)
        for uid in every:
            if uid not in held and uid not in gone:
                pod = known.get(uid) if known else None
                if pod is None:
                    raise PodsNotHeld(name)
                held[uid] = pod
    order = sorted(held, key=lambda uid: held[uid][0])

    def decode() -> list[Pod]:
        pods = []
        for uid in order:
            generation, item = held[uid]
            if isinstance(item, PodState):
                item = item.pod
                held[uid] = (generation, item)
            elif not isinstance(item, Pod):
                item = record_pod(item)
                held[uid] = (generation, item)
            pods.append(item)
        return pods

    info = StoredNodeInfo(
        name=name,
        node=node,
        requested=fields.requested,
        non_zero_requested=fields.non_zero_requested,
        allocatable=fields.allocatable,
        used_ports=fields.used_ports,
        image_states={
            image: summaries[image] for image in image_names(entry) if image in summaries
        },
        pvc_ref_counts=fields.pvc_ref_counts,
        generation=fields.generation,
    )
    info.defer(decode, len(order), fields.integer("aff"), fields.integer("anti"))
    return info


# -- reads without I/O: generators of read-function calls, driven by either transport --------


def node_entries_reads(
    names: Sequence[str],
    since: int | None = None,
    each_chunk: Callable[[list[Sequence[Any]]], None] | None = None,
    points: list[str] | None = None,
) -> Reads[tuple[list[Sequence[Any]], dict[str, ImageStateSummary]]]:
    """Raw ``sc_read_nodes`` entries of ``names`` and the summaries of every image they name;
    with ``since`` (a snapshot's generation), ``sc_read_node_deltas`` entries: only the pods
    placed after it come as records. With ``each_chunk``, each chunk's entries go there as
    they come (none are returned): the sync driver reads the next chunk meanwhile. ``points``
    gets, per chunk of ``NODES_PER_CALL``, the id of the last event its read reflects."""
    entries: list[Sequence[Any]] = []
    summaries: dict[str, ImageStateSummary] = {}
    reads: list[Read] = []
    for start in range(0, len(names), NODES_PER_CALL):
        chunk = tuple(names[start : start + NODES_PER_CALL])
        reads.append(
            ("read_nodes", chunk) if since is None else ("read_node_deltas", (since, *chunk))
        )
    yield Ahead(tuple(reads))
    for read in reads:
        *chunk_entries, images, point = yield read
        summaries.update(parse_image_summaries(images))
        if points is not None:
            points.append(point.decode())
        if each_chunk is None:
            entries += chunk_entries
        else:
            each_chunk(chunk_entries)
    return entries, summaries


def read_node_entries(
    store: Store, names: Sequence[str]
) -> tuple[list[Sequence[Any]], dict[str, ImageStateSummary]]:
    """Raw ``sc_read_nodes`` entries of ``names`` and the summaries of every image they name."""
    return run_reads(store, node_entries_reads(names))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while decoding many pods.

    Decoding creates hundreds of thousands of objects and no cycles; the collector's passes
    over them took 40 % of a full snapshot build (measured in bench/snapshot.py).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def fetch_node_infos(store: Store, names: Iterable[str]) -> dict[str, NodeInfo]:
    """``NodeInfo`` for each of ``names`` that has an entry (live, ghost or placeholder)."""
    return run_reads(store, node_infos_reads(list(names)))


def node_infos_reads(names: Sequence[str]) -> Reads[dict[str, NodeInfo]]:
    entries, summaries = yield from node_entries_reads(names)
    with gc_paused():
        infos = [node_info_from_entry(entry, summaries) for entry in entries]
    return {info.name: info for info in infos if info is not None}


def read_generation(store: Store) -> int:
    """The cache's generation counter (0 for an empty cache)."""
    return int(store.client.get(store.keys.generation) or 0)


def read_dump(store: Store) -> Dump:
    """Every node entry (ghosts included) with its pods, and the assumed set."""
    names = sorted(as_text(name) for name in store.client.smembers(store.keys.nodes))
    return Dump(
        nodes=fetch_node_infos(store, names),
        assumed_pods={as_text(uid) for uid in store.client.smembers(store.keys.assumed)},
        generation=read_generation(store),
    )


def read_stream_length(store: Store) -> int:
    """Events in the cache's stream."""
    return int(store.client.xlen(store.keys.events))
