"""Verify: the live keys against the replayed stream, and the invariants that always hold.

Every difference names the node or pod and the field. Each live read (a chunk of nodes, the
cache-wide keys, a chunk of pod records) is atomic and says which event it reflects (the
stream's last id, read with it); the fold, the same one snapshots and replay use, is moved on
to that event before the read is compared with it, so commands applied meanwhile make no
false difference. The invariants, which need no fold, are :mod:`schedcache.history.invariants`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedcache.store.eviction import SAFE_POLICY
from schedcache.store.fetch import (
    NODES_PER_CALL,
    PODS_PER_PIPELINE,
    node_entries_reads,
    node_info_from_entry,
)
from schedcache.store.reads import run_reads
from schedcache.store.records import PodRecord, parse_pod_record
from schedcache.store.responses import as_text
from schedcache.store.store import Store

if TYPE_CHECKING:
    from schedcache.history.replay import ReplayState

NODE_FIELDS = (
    "node",
    "pods",
    "requested",
    "non_zero_requested",
    "allocatable",
    "used_ports",
    "image_states",
    "pvc_ref_counts",
    "generation",
)
NODE_META = ("exists", "gen", "zone", "blob", "spec", "sd", "rm", "ax")


@dataclass(frozen=True)
class Difference:
    subject: str  # "node n1", "pod <uid>", "cache"
    field: str
    expected: Any  # what the replay (or the invariant) says
    actual: Any  # what the live keys hold

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: expected {self.expected!r}, found {self.actual!r}"


# Rounds of nodes the fold holds that the first list of names missed (created meanwhile).
MAX_NODE_ROUNDS = 5
# Stream entries folded per XRANGE while moving the fold on.
EVENTS_PER_PAGE = 1000


def compare(state: ReplayState, store: Store) -> list[Difference]:
    """The replayed state against the live keys (what ``Cache.dump()`` reads) and the pod
    records, each read compared at the event it reflects (``state`` is moved on there)."""
    out: list[Difference] = []
    names = sorted(as_text(name) for name in store.client.smembers(store.keys.nodes))
    seen: set[str] = set()
    for _ in range(MAX_NODE_ROUNDS):
        for start in range(0, len(names), NODES_PER_CALL):
            chunk = names[start : start + NODES_PER_CALL]
            out += _compare_nodes(state, store, chunk)
            seen.update(chunk)
        names = sorted(set(state.nodes) - seen)
        if not names:
            break
    for name in names:  # still more: in the fold, never found live
        out.append(Difference(f"node {name}", "entry", True, False))
    assumed, generation, point = _cache_keys(store)
    advance(state, store, point)
    if state.assumed_pods != assumed:
        out.append(Difference("cache", "assumed pods", state.assumed_pods, assumed))
    if state.generation != generation:
        out.append(Difference("cache", "generation", state.generation, generation))
    uids = sorted(set(state.pods) | members(store, store.keys.pods))
    for start in range(0, len(uids), PODS_PER_PIPELINE):
        chunk = uids[start : start + PODS_PER_PIPELINE]
        records, point = _pod_records(store, chunk)
        advance(state, store, point)
        out += _compare_pods(state, chunk, records)
    return out


def advance(state: ReplayState, store: Store, point: str) -> None:
    """Fold the events after ``state.last_id`` up to ``point`` (an event id; "": none)."""
    while point and (state.last_id is None or _id(state.last_id) < _id(point)):
        start = f"({state.last_id}" if state.last_id else "-"
        page: Any = store.client.xrange(store.keys.events, start, point, EVENTS_PER_PAGE)
        if not page:
            return
        state.fold_entries(page)


def _id(event: str) -> tuple[int, int]:
    milliseconds, _, sequence = event.partition("-")
    return int(milliseconds), int(sequence or 0)


def _compare_nodes(state: ReplayState, store: Store, names: list[str]) -> list[Difference]:
    points: list[str] = []
    entries, summaries = run_reads(store, node_entries_reads(names, points=points))
    advance(state, store, points[0])
    live = {}
    for entry in entries:
        info = node_info_from_entry(entry, summaries)
        if info is not None:
            live[info.name] = info
    out = []
    for name in names:
        want, have = state.projection(name), live.get(name)
        if want is None or have is None:
            if want is not None or have is not None:
                out.append(Difference(f"node {name}", "entry", want is not None, have is not None))
            continue
        for attribute in NODE_FIELDS:
            expected, actual = getattr(want, attribute), getattr(have, attribute)
            if attribute == "pods":
                expected, actual = [p.uid for p in expected], [p.uid for p in actual]
            if expected != actual:
                out.append(Difference(f"node {name}", attribute, expected, actual))
    return out


# Pipelines read between two looks at the stream before one is read in a transaction.
POINT_ATTEMPTS = 5


def at_one_point(store: Store, reads: Callable[[Any], None]) -> tuple[list[Any], str]:
    """The replies of the reads ``reads`` queues, all at one event, and that event's id: a
    pipeline between two looks at the stream's last event that saw none appended (no
    transaction: a full Redis refuses MULTI), else, while commands flow, a transaction."""
    quiet = at_a_quiet_point(store, reads)
    if quiet is not None:
        return quiet
    with store.server().pipeline(transaction=True) as pipe:
        reads(pipe)
        pipe.xrevrange(store.keys.events, count=1)
        *replies, last = pipe.execute()
    return replies, _last_id(last)


def at_a_quiet_point(store: Store, reads: Callable[[Any], None]) -> tuple[list[Any], str] | None:
    """As :func:`at_one_point`, without the transaction: None when the stream moved during
    each of ``POINT_ATTEMPTS`` pipelines (for reads too wide to hold Redis with)."""
    events = store.keys.events
    for _ in range(POINT_ATTEMPTS):
        pipe = store.server().pipeline(transaction=False)
        pipe.xrevrange(events, count=1)
        reads(pipe)
        pipe.xrevrange(events, count=1)
        first, *replies, last = pipe.execute()
        if _last_id(first) == _last_id(last):
            return replies, _last_id(last)
    return None


def _cache_keys(store: Store) -> tuple[set[str], int, str]:
    """The assumed pods and the generation, with the event they reflect."""
    keys = store.keys

    def reads(pipe: Any) -> None:
        pipe.smembers(keys.assumed)
        pipe.get(keys.generation)

    (assumed, generation), point = at_one_point(store, reads)
    return {as_text(uid) for uid in assumed}, int(generation or 0), point


def _pod_records(store: Store, uids: list[str]) -> tuple[dict[str, PodRecord], str]:
    """The stored records of ``uids`` and the event they reflect."""
    keys = store.keys

    def reads(pipe: Any) -> None:
        for uid in uids:
            pipe.get(keys.pod(uid))

    raws, last = at_one_point(store, reads)
    records = {
        uid: parse_pod_record(raw, keys.pod(uid))
        for uid, raw in zip(uids, raws, strict=True)
        if raw is not None
    }
    return records, last


def _last_id(entries: list[Any]) -> str:
    return entries[0][0].decode() if entries else ""


def _compare_pods(
    state: ReplayState, uids: list[str], records: dict[str, PodRecord]
) -> list[Difference]:
    out = []
    for uid in uids:
        expected_pod, stored = state.pods.get(uid), records.get(uid)
        if expected_pod is None or stored is None:
            if expected_pod is not None or stored is not None:
                out.append(
                    Difference(f"pod {uid}", "record", expected_pod is not None, stored is not None)
                )
            continue
        for label, expected, actual in (
            ("state", expected_pod.state, stored.state),
            ("node", expected_pod.node, stored.node),
            ("binding finished", expected_pod.binding_finished, stored.binding_finished),
            ("deadline", expected_pod.deadline_ms, stored.deadline_ms),
            ("pod", expected_pod.pod, stored.pod),
        ):
            if expected != actual:
                out.append(Difference(f"pod {uid}", label, expected, actual))
    return out


def server_problems(store: Store) -> list[Difference]:
    """What is wrong with the server for this cache: a ``maxmemory-policy`` that can evict its
    keys (``schedcache.store.eviction``; not reported when it cannot be read)."""
    check = store.eviction()
    if check.evicts:
        return [Difference("server", "maxmemory-policy", SAFE_POLICY, check.policy)]
    return []


def lost_keys(store: Store) -> list[Difference]:
    """Cache-wide keys missing while others say they were written: what eviction (or a
    stray DEL) leaves. Every write bumps ``gen`` and appends to the stream together, and
    compaction trims the stream but never deletes it; so a generation without a stream, or
    any of the cache-wide keys every write keeps without a generation, lost keys."""
    keys = store.keys
    kept_by_writes = (
        keys.nodes,
        keys.pods,
        keys.node_generations,
        keys.events,
        keys.tree_zones,
        keys.tree_generation,
        keys.incarnation,
        keys.anti_affine_pods,
        keys.images,
    )
    pipe = store.server().pipeline(transaction=False)
    pipe.get(keys.generation)
    pipe.exists(keys.events)
    pipe.exists(*kept_by_writes)
    generation, stream, written = pipe.execute()
    out = []
    reached = int(generation) if generation is not None and generation.isdigit() else 0
    if reached > 0 and not stream:  # (a corrupt counter is verify's other checks' to report)
        out.append(Difference("cache", "events", f"a stream (generation {reached})", None))
    if generation is None and written:
        out.append(Difference("cache", "gen", "a generation counter", None))
    return out


def members(store: Store, key: str) -> set[str]:
    return {m.decode() for m in store.client.sscan_iter(key, count=1000)}
