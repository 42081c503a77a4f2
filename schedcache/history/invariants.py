"""The invariants ``verify`` checks in the live keys, whatever the history.

Every node's totals equal the sum of its pods' contributions and are never negative, every
pod sits on exactly one node with a record naming it, every assumed pod is in ``pods``, the
generation index holds every node, and ``antipods`` is the nodes' sum.

They are read while commands may flow, so no check compares keys read at different events.
The nodes are read in chunks, each at one event (:func:`at_one_point`) with the records of
every pod placed on them: a pod placed after the chunk's list of pods was made is read on the
next try, and after ``COVER_ATTEMPTS`` tries the pods still unread (placed anew before every
try) are left unchecked with their node's totals. What spans chunks (a pod on no node or on
two, an assumed pod not in ``pods``, ``antipods`` against the sum) is only suspected from
the chunks, then read again at one event, for the suspects alone (``SUSPECTS_PER_POINT`` a
read), before it is reported; ``antipods`` against every node's count is read again only in a
pipeline the stream did not move under. So no transaction holds Redis longer than a chunk
takes (~100 nodes and their pods). What commands kept changing under the reads is left
unchecked, and a warning says how much.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from schedcache.history.verify import (
    NODE_META,
    Difference,
    at_a_quiet_point,
    at_one_point,
    members,
)
from schedcache.store.fetch import NODES_PER_CALL
from schedcache.store.keys import Keys
from schedcache.store.records import PodRecord, parse_pod_record
from schedcache.store.responses import as_text
from schedcache.store.store import Store

log = logging.getLogger(__name__)

# Nodes read at one event with their pods' records: bounds how long a transaction (taken when
# commands keep flowing) holds Redis.
NODES_PER_POINT = NODES_PER_CALL
# Suspected pods read again at one event together (each 3 commands and 2 a node it may be on).
SUSPECTS_PER_POINT = 500
# Reads of one chunk (or of the suspects), each with what the one before found missing, before
# what is still missing is left unchecked.
COVER_ATTEMPTS = 4


@dataclass
class _Found:
    """What the chunks found, each at its own event."""

    placements: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    records: dict[str, PodRecord] = field(default_factory=dict)  # read with a node they sit on
    unread: set[str] = field(default_factory=set)  # placed, their records never read with them
    anti_total: int = 0
    moving: int = 0  # suspects placed anew before every recheck: left unchecked
    antipods_unchecked: bool = False  # no quiet read of every node's count


@dataclass
class _Chunk:
    """A chunk of nodes and the records of their pods, all read at one event."""

    live: dict[str, bool]  # whether each node is in ``nodes``
    hashes: dict[str, dict[bytes, bytes]]
    placed: dict[str, list[tuple[str, int]]]  # each node's pods, with their generations
    indexed: dict[str, Any]  # each node's score in the generation index (None: none)
    records: dict[str, PodRecord]  # of the uids read (a uid without a record is left out)

    def pods(self) -> set[str]:
        return {uid for name, pods in self.placed.items() if self.live[name] for uid, _ in pods}


def invariants(store: Store) -> list[Difference]:
    """The invariants broken in the live keys (empty when all hold; what commands kept
    changing under the reads is left unchecked, and a warning logged says how much)."""
    names = sorted(members(store, store.keys.nodes))
    found, out = _Found(), []
    for start in range(0, len(names), NODES_PER_POINT):
        out += _check_nodes(store, names[start : start + NODES_PER_POINT], found)
    out += _check_pods(store, found)
    out += _check_anti_affine_count(store, names, found)
    if found.unread or found.moving or found.antipods_unchecked:
        log.warning(
            "verify: commands kept flowing under the reads: %d pods placed meanwhile (with "
            "their nodes' totals) and %d moving between nodes left unchecked%s",
            len(found.unread),
            found.moving,
            "; antipods unchecked" if found.antipods_unchecked else "",
        )
    return out


def _check_nodes(store: Store, names: list[str], found: _Found) -> list[Difference]:
    """The checks of each node in ``names`` that its own keys and its pods' records decide;
    adds its placements, the records read and its ``anti`` count to ``found``."""
    pipe = store.server().pipeline(transaction=False)
    for name in names:
        pipe.zrange(store.keys.node_pods(name), 0, -1)
    uids = {as_text(uid) for placed in pipe.execute() for uid in placed}
    for _ in range(COVER_ATTEMPTS):
        chunk = _read_chunk(store, names, uids)
        unread = chunk.pods() - uids
        if not unread:
            break
        uids |= unread
    found.unread |= unread
    found.records.update(chunk.records)
    out = []
    for name in names:
        if chunk.live[name]:
            out += _check_node(name, chunk, found, unread)
    return out


def _read_chunk(store: Store, names: list[str], uids: set[str]) -> _Chunk:
    keys = store.keys
    pods = sorted(uids)

    def reads(pipe: Any) -> None:
        for name in names:  # (SISMEMBER, not SMISMEMBER: no new command in the ACL rules)
            pipe.sismember(keys.nodes, name)
            pipe.hgetall(keys.node(name))
            pipe.zrange(keys.node_pods(name), 0, -1, withscores=True)
            pipe.zscore(keys.node_generations, name)
        for uid in pods:
            pipe.get(keys.pod(uid))

    replies, _ = at_one_point(store, reads)
    nodes, raws = replies[: 4 * len(names)], replies[4 * len(names) :]
    return _Chunk(
        live={name: bool(member) for name, member in zip(names, nodes[0::4], strict=True)},
        hashes=dict(zip(names, nodes[1::4], strict=True)),
        placed={
            name: [(as_text(uid), int(score)) for uid, score in placed]
            for name, placed in zip(names, nodes[2::4], strict=True)
        },
        indexed=dict(zip(names, nodes[3::4], strict=True)),
        records={
            uid: parse_pod_record(raw, keys.pod(uid))
            for uid, raw in zip(pods, raws, strict=True)
            if raw is not None
        },
    )


def _check_node(name: str, chunk: _Chunk, found: _Found, unread: set[str]) -> list[Difference]:
    subject, raw = f"node {name}", chunk.hashes[name]
    if not raw:
        return [Difference(subject, "entry", "a hash for every member of nodes", None)]
    out = []
    fields = {k.decode(): int(v) for k, v in raw.items() if k.decode() not in ("zone", "blob")}
    found.anti_total += fields.get("anti", 0)
    uids = set()
    for uid, generation in chunk.placed[name]:
        uids.add(uid)
        found.placements[uid].append(name)
        record = chunk.records.get(uid)
        if record is not None and record.generation != generation:
            out.append(
                Difference(f"pod {uid}", "placement generation", record.generation, generation)
            )
    if chunk.indexed[name] is None:
        out.append(Difference(subject, "generation index", "an entry", None))
    if fields.get("exists") == 0 and not uids:
        out.append(Difference(subject, "entry", "no empty ghost or placeholder", "empty"))
    aggregates = {k: v for k, v in fields.items() if k not in NODE_META and not k.startswith("a:")}
    # A pod's contribution unknown (``unread``): only the totals' signs can be checked.
    totals = None if uids & unread else _stored_totals(uids, chunk.records)
    named = set(aggregates) | ({k for k, v in totals.items() if v} if totals is not None else set())
    for field_name in sorted(named):
        actual = aggregates.get(field_name, 0)
        if actual < 0:
            out.append(Difference(subject, field_name, ">= 0", actual))
        elif totals is not None and totals.get(field_name, 0) != actual:
            out.append(Difference(subject, field_name, totals.get(field_name, 0), actual))
    return out


def _stored_totals(uids: set[str], records: dict[str, PodRecord]) -> Counter[str]:
    """What the pods' stored contributions add up to, field by field (labels have no total)."""
    totals: Counter[str] = Counter()
    for uid in uids:
        record = records.get(uid)
        if record is not None:
            tokens = record.contribution.split()
            totals.update(
                {
                    tokens[i]: int(tokens[i + 1])
                    for i in range(0, len(tokens), 2)
                    if not tokens[i].startswith("l:")  # labels: no total (aggregates.py)
                }
            )
    return totals


def _check_pods(store: Store, found: _Found) -> list[Difference]:
    """Every pod on exactly one node with a record naming it, every assumed pod in ``pods``:
    what the chunks suggest is broken, read again at one event before it is reported."""
    keys = store.keys
    pods, assumed = members(store, keys.pods), members(store, keys.assumed)
    placed = set(found.placements)
    suspects = (pods - placed) | (placed - pods) | (assumed - pods)
    for uid, where in found.placements.items():
        record = found.records.get(uid)
        if len(where) != 1 or record is None or record.node != where[0]:
            suspects.add(uid)
    suspects -= found.unread
    ordered, out = sorted(suspects), []
    for start in range(0, len(ordered), SUSPECTS_PER_POINT):
        out += _recheck_pods(store, ordered[start : start + SUSPECTS_PER_POINT], found)
    return out


def _recheck_pods(store: Store, uids: list[str], found: _Found) -> list[Difference]:
    """``uids`` at one event: their records, their membership of ``pods`` and ``assumed``, and
    whether they sit on each node the chunks found them on or their records name."""
    keys = store.keys
    nodes = {uid: set(found.placements.get(uid, ())) for uid in uids}
    for _ in range(COVER_ATTEMPTS):
        where = {uid: sorted(nodes[uid]) for uid in uids}
        replies, _ = at_one_point(store, functools.partial(_suspect_reads, keys, where))
        seen, position, moving = [], 0, set()
        for uid in uids:
            raw, in_pods, in_assumed = replies[position : position + 3]
            placed = replies[position + 3 : position + 3 + 2 * len(where[uid])]
            position += 3 + 2 * len(where[uid])
            record = parse_pod_record(raw, keys.pod(uid)) if raw is not None else None
            if record is not None and record.node and record.node not in nodes[uid]:
                nodes[uid].add(record.node)  # read there too, next time
                moving.add(uid)
            # a node's pods count only while the node is in ``nodes`` (ghosts and
            # placeholders are): a pod on a node missing from it is on no node
            on = [
                name
                for name, score, listed in zip(where[uid], placed[0::2], placed[1::2], strict=True)
                if score is not None and listed
            ]
            seen.append((uid, record, bool(in_pods), bool(in_assumed), on))
        if not moving:
            break
    found.moving += len(moving)
    out = []
    for uid, record, in_pods, in_assumed, on in seen:
        if in_assumed and not in_pods:
            out.append(Difference(f"pod {uid}", "assumed", "in the pods set", "missing"))
        if uid in moving:
            continue  # placed anew before every read: left unchecked, as the chunks leave them
        if not in_pods and not on:
            continue
        if not in_pods and not in_assumed:  # (an assumed one is reported above)
            out.append(Difference(f"pod {uid}", "pods set", "a member", "missing"))
        if len(on) != 1:
            out.append(Difference(f"pod {uid}", "nodes", "exactly one", on))
        elif record is None:
            out.append(Difference(f"pod {uid}", "record", "present", None))
        elif record.node != on[0]:
            out.append(Difference(f"pod {uid}", "node", record.node, on[0]))
    return out


def _suspect_reads(keys: Keys, where: dict[str, list[str]], pipe: Any) -> None:
    for uid, names in where.items():
        pipe.get(keys.pod(uid))
        pipe.sismember(keys.pods, uid)
        pipe.sismember(keys.assumed, uid)
        for name in names:
            pipe.zscore(keys.node_pods(name), uid)
            pipe.sismember(keys.nodes, name)


def _anti_affine_reads(keys: Keys, names: list[str], pipe: Any) -> None:
    pipe.smembers(keys.nodes)
    pipe.get(keys.anti_affine_pods)
    for name in names:
        pipe.hget(keys.node(name), "anti")


def _check_anti_affine_count(store: Store, names: list[str], found: _Found) -> list[Difference]:
    """``antipods`` (the count bare claims read; absent on a cache older than it) against the
    nodes' sum: a difference the chunks' sum shows is read again, every node at one event, in
    a pipeline the stream did not move under (no transaction of every node: while commands
    keep flowing it is left unchecked)."""
    keys = store.keys
    stored = store.client.get(keys.anti_affine_pods)
    if stored is None or int(stored) == found.anti_total:
        return []
    listed = set(names)
    for _ in range(COVER_ATTEMPTS):
        ordered = sorted(listed)
        quiet = at_a_quiet_point(store, functools.partial(_anti_affine_reads, keys, ordered))
        if quiet is None:
            break
        members_now, stored, *counts = quiet[0]
        live = {as_text(name) for name in members_now}
        if live <= listed:
            if stored is None:
                return []
            total = sum(
                int(n) for name, n in zip(ordered, counts, strict=True) if name in live and n
            )
            if int(stored) != total:
                return [Difference("cache", "antipods", total, int(stored))]
            return []
        listed |= live
    found.antipods_unchecked = True  # commands kept flowing, or nodes kept appearing
    return []
