"""Writes a call defers to its end (issue 40): `lastevent` and `helped` are written once per
call (emit keeps the ids, end_call writes them), and an sc_batch takes the uids it dropped from
the queue out of `queuedpods` with one SREM. Whatever a batch runs, `lastevent` ends at the
stream's last id and `helped` at its last helpful event's; a command of the batch that reads
them (sc_queue_pop's wake, sc_queue_retry's park and arrival wait) sees the ids of the events
the batch appended before it; a failed command leaves them right; and a batch leaves the
keyspace as the same commands sent one by one do. On every backend."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import redis

from schedcache import Cache, Snapshot
from schedcache.model.values import Pod
from schedcache.store import commands
from schedcache.store.commands import Command
from schedcache.store.library import function_name
from tests.factories import keyspace, make_node, make_pod
from tests.test_snapshot import assert_matches_fresh

T0 = 1_700_000_000.0  # a "now" in seconds, far from Redis' clock on purpose
# The events that could help a parked pod (lua/_helpers.lua, HELPFUL).
HELPFUL = {
    b"NodeAdded",
    b"NodeUpdated",
    b"NodeRemoved",
    b"PodRemoved",
    b"PodUpdated",
    b"PodForgotten",
    b"PodExpired",
}


def pending(name: str) -> Pod:
    return make_pod(name, "", "100m", "100Mi")


def flat(batch: list[Command]) -> list[Any]:
    out: list[Any] = []
    for command in batch:
        out += [command.name, len(command.args), *command.args]
    return out


def send_batch(cache: Cache, batch: list[Command]) -> list[tuple[int, Any]]:
    """One sc_batch of `batch`: per command (1, reply) or (0, error text)."""
    reply = cache.client.fcall(
        function_name("batch"), 1, cache.keys.prefix, cache.replica, "", *flat(batch)
    )
    out = []
    for j in range(0, len(reply), 2):
        value = reply[j + 1]
        out.append((reply[j], value.decode() if reply[j] == 0 else value))
    return out


def send_each(cache: Cache, batch: list[Command]) -> list[tuple[int, Any]]:
    """The same commands, one FCALL each."""
    out: list[tuple[int, Any]] = []
    for command in batch:
        try:
            reply = cache.client.fcall(
                function_name(command.name), 1, cache.keys.prefix, cache.replica, "", *command.args
            )
        except redis.ResponseError as error:
            out.append((0, str(error)))
        else:
            out.append((1, reply))
    return out


def entries(cache: Cache) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return cache.client.xrange(cache.keys.events)


def last_ids(cache: Cache) -> tuple[str, str]:
    """The stream's last id and its last helpful event's id (XREVRANGE)."""
    every = cache.client.xrevrange(cache.keys.events)
    last = every[0][0].decode() if every else ""
    helped = next((i.decode() for i, fields in every if fields[b"type"] in HELPFUL), "")
    return last, helped


def stored(cache: Cache) -> tuple[str, str]:
    last = cache.client.get(cache.keys.last_event)
    helped = cache.client.get(cache.keys.helped)
    return (last.decode() if last else "", helped.decode() if helped else "")


def assert_ids_kept(cache: Cache) -> None:
    assert stored(cache) == last_ids(cache)


def nodes(cache: Cache) -> None:
    cache.add_node(make_node("n1", "1000m", "1Gi"))
    cache.add_node(make_node("n2", "8000m", "8Gi"))


def test_a_batch_of_claims_leaves_lastevent_at_the_stream_last_id(cache: Cache) -> None:
    """Eight claims in one sc_batch (none helpful): `lastevent` is the eighth's id, `helped`
    stays the last node's; then a removal among claims moves `helped` to the removal's."""
    nodes(cache)
    cache.add_pod(make_pod("old", "n2", "100m", "1Mi"))
    before = stored(cache)
    batch = [commands.assume_pod(make_pod(f"c{j}", "n2", "100m", "1Mi")) for j in range(8)]
    replies = send_batch(cache, batch)
    assert [ok for ok, _ in replies] == [1] * 8
    assert len(entries(cache)) == 3 + 8
    assert_ids_kept(cache)
    assert stored(cache)[1] == before[1] and stored(cache)[0] != before[0]
    removal = commands.remove_pod(make_pod("old", "n2", "100m", "1Mi"))
    batch = [commands.assume_pod(make_pod(f"d{j}", "n2", "100m", "1Mi")) for j in range(3)]
    send_batch(cache, [batch[0], removal, batch[1], batch[2]])
    assert_ids_kept(cache)
    last, helped = stored(cache)
    types = [fields[b"type"] for _, fields in entries(cache)[-4:]]
    assert types == [b"PodAssumed", b"PodRemoved", b"PodAssumed", b"PodAssumed"]
    assert helped == entries(cache)[-3][0].decode() != last


def test_a_batch_of_confirmations_leaves_both_ids_and_the_queue_right(cache: Cache) -> None:
    """Queued pods bound (sc_sync_pod's confirmations, each a PodAdded and a drop from the
    queue), an update (helpful) and a plain add in one batch."""
    nodes(cache)
    queued = [pending(f"q{j}") for j in range(5)]
    for j, pod in enumerate(queued):
        cache.run(commands.sync_pod_pending(pod, "ref", str(100 + j)))
    cache.add_pod(make_pod("a", "n2", "100m", "1Mi"))
    assert len(cache.client.smembers(cache.keys.prefix + "queuedpods")) == 5
    batch = [
        commands.sync_pod(pod.with_node("n2"), str(200 + j), True)
        for j, pod in enumerate(queued[:4])
    ]
    batch.insert(
        2,
        commands.update_pod(make_pod("a", "n2", "100m", "1Mi"), make_pod("a", "n2", "200m", "1Mi")),
    )
    batch.append(commands.add_pod(make_pod("b", "n1", "100m", "1Mi")))
    replies = send_batch(cache, batch)
    assert [ok for ok, _ in replies] == [1] * 6
    assert_ids_kept(cache)
    last, helped = stored(cache)
    assert (
        helped != last
        and helped
        == [i.decode() for i, fields in entries(cache) if fields[b"type"] == b"PodUpdated"][-1]
    )
    uid = queued[4].uid.encode()
    assert cache.client.smembers(cache.keys.prefix + "queuedpods") == {uid}


def test_a_snapshot_catches_up_after_a_batch(cache: Cache) -> None:
    """The head read (the plain MGET of `lastevent` and its page, or the function) after a
    batch of claims, adds, a removal and an update: every change reaches the snapshot."""
    nodes(cache)
    for j in range(3):
        cache.add_pod(make_pod(f"p{j}", "n1", "100m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    batch = [commands.assume_pod(make_pod(f"c{j}", "n2", "100m", "1Mi")) for j in range(4)]
    batch += [
        commands.add_pod(make_pod("a", "n2", "100m", "1Mi")),
        commands.remove_pod(make_pod("p0", "n1", "100m", "1Mi")),
        commands.update_pod(
            make_pod("p1", "n1", "100m", "1Mi"), make_pod("p1", "n1", "300m", "1Mi")
        ),
        commands.add_pod(make_pod("b", "n1", "100m", "1Mi")),
    ]
    assert [ok for ok, _ in send_batch(cache, batch)] == [1] * 8
    assert_ids_kept(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 8 and report.fell_back == ""
    assert snap.last_id == stored(cache)[0]
    assert sorted(p.name for p in snap.get("n2").pods) == ["a", "c0", "c1", "c2", "c3"]
    assert sorted(p.name for p in snap.get("n1").pods) == ["b", "p1", "p2"]
    assert_matches_fresh(cache, snap)


def test_a_failed_command_in_a_batch_leaves_lastevent_at_the_last_id(cache: Cache) -> None:
    """Commands that fail (a claim that does not fit, a removal of a pod never added) before,
    between and after commands that appended events: the ids end at the stream's last; a
    batch whose every command fails writes neither."""
    nodes(cache)
    too_big = commands.assume_pod(make_pod("big", "n1", "5000m", "1Mi"), check_fit=True)
    never = commands.remove_pod(make_pod("never", "n1", "100m", "1Mi"))
    batch = [
        too_big,
        commands.add_pod(make_pod("a", "n1", "100m", "1Mi")),
        never,
        commands.remove_pod(make_pod("a", "n1", "100m", "1Mi")),
        commands.assume_pod(make_pod("b", "n2", "100m", "1Mi")),
        too_big,
    ]
    replies = send_batch(cache, batch)
    assert [ok for ok, _ in replies] == [0, 1, 0, 1, 1, 0]
    assert_ids_kept(cache)
    assert entries(cache)[-1][1][b"type"] == b"PodAssumed"
    before = stored(cache)
    assert [ok for ok, _ in send_batch(cache, [too_big, never])] == [0, 0]
    assert stored(cache) == before
    assert_ids_kept(cache)


ID = re.compile(rb"\d+-\d+")


def normal(cache: Cache) -> dict[bytes, Any]:
    """The cache's keyspace without its prefix, each stream id replaced by its place in the
    stream (`E<n>`) and the stream's entries by their fields; the incarnation (a time) and
    the remembered replies (keyed by command ids) left out."""
    ids = {i: b"E%d" % n for n, (i, _) in enumerate(entries(cache))}

    def named(value: Any) -> Any:
        if isinstance(value, bytes):
            return ID.sub(lambda m: ids.get(m.group(0), m.group(0)), value)
        if isinstance(value, dict):
            return {named(k): named(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(named(v) for v in value)
        if isinstance(value, set):
            return {named(v) for v in value}
        return value

    prefix = cache.keys.prefix.encode()
    out = {}
    for key, (kind, value) in keyspace(cache.client, cache.keys.pattern).items():
        name = key[len(prefix) :]
        if name == b"incarnation" or name.startswith(b"cmd:"):
            continue  # a time; the setup's remembered replies, by command id
        if kind == "stream":
            value = [fields for _, fields in value]
        out[name] = (kind, named(value))
    return out


def replies_named(cache: Cache, replies: list[tuple[int, Any]]) -> Any:
    ids = {i.decode(): f"E{n}" for n, (i, _) in enumerate(entries(cache))}

    def named(value: Any) -> Any:
        if isinstance(value, bytes):
            return named(value.decode(errors="replace"))
        if isinstance(value, str):
            return ID.sub(
                lambda m: ids.get(m.group(0).decode(), m.group(0).decode()).encode(), value.encode()
            ).decode()
        if isinstance(value, list):
            return [named(v) for v in value]
        return value

    return [(ok, named(value)) for ok, value in replies]


def queue_setup(cache: Cache) -> str:
    """Two nodes, a pod on n1, four pods queued and popped by holder `a`, q3 parked (no node
    could take it). Returns the stream's last id (the attempt of the batch's retry)."""
    nodes(cache)
    cache.add_pod(make_pod("old", "n1", "100m", "1Mi"))
    for j in range(1, 5):
        cache.run(commands.sync_pod_pending(pending(f"q{j}"), "ref", str(100 + j)))
    popped = cache.run(commands.queue_pop("ref", "a", 600.0, 10, 300.0, T0))
    assert len(popped) > 0
    attempt = last_ids(cache)[0]
    parked = commands.queue_retry("ref", "a", pending("q3").uid, True, attempt, (1, 10), 300, T0)
    assert cache.run(parked)[0] == b"parked"
    return attempt


def queue_batch(attempt: str) -> list[Command]:
    q = {j: pending(f"q{j}") for j in range(1, 6)}
    return [
        commands.sync_pod(q[1].with_node("n2"), "201", True),  # bound: out of the queue
        commands.sync_pod_gone(q[2].uid, "202"),  # dequeued ...
        commands.sync_pod_pending(q[2], "ref", "203"),  # ... and queued again
        commands.sync_pod_pending(q[5], "ref", "204"),  # queued ...
        commands.sync_pod_gone(q[5].uid, "205"),  # ... and dequeued
        commands.assume_pod(make_pod("c1", "n2", "100m", "1Mi")),
        commands.assume_pod(make_pod("c2", "n2", "100m", "1Mi")),
        commands.remove_pod(make_pod("old", "n1", "100m", "1Mi")),  # helpful
        # wakes q3: the removal came after its wake cursor (the batch's own `helped`)
        commands.queue_pop("ref", "b", 600.0, 10, 300.0, T0 + 1),
        # not parked: a helpful event came after its attempt; waits for arrivals from the
        # stream's last id (the removal's)
        commands.queue_retry(
            "ref", "a", q[4].uid, True, attempt, (1, 10), 300, T0 + 2, wake=("app=web",)
        ),
        commands.add_pod(make_pod("d1", "n1", "100m", "1Mi")),
        commands.assume_pod(make_pod("big", "n1", "5000m", "1Mi"), check_fit=True),  # refused
    ]


def test_a_batch_leaves_the_keyspace_the_commands_one_by_one_leave(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """Queue drops (a pod dropped then queued again, one queued then dropped), claims, a
    removal that wakes a parked pod popped in the same batch, a retry that reads `helped` and
    registers an arrival wait, an add and a refused claim: one sc_batch and the same commands
    one at a time leave the same keys (stream ids as places in the stream) and replies."""
    one, each = make_cache(name=cache_name + "-batch"), make_cache(name=cache_name + "-each")
    batched = send_batch(one, queue_batch(queue_setup(one)))
    singly = send_each(each, queue_batch(queue_setup(each)))
    assert [ok for ok, _ in batched] == [1] * 11 + [0]
    assert replies_named(one, batched) == replies_named(each, singly)
    woken = batched[8][1]
    assert pending("q3").uid.encode() in str(woken).encode()
    assert batched[9][1][0] == b"backoff"
    assert normal(one) == normal(each)
    for cache in (one, each):
        assert_ids_kept(cache)
        members = cache.client.smembers(cache.keys.prefix + "queuedpods")
        assert members == {pending(f"q{j}").uid.encode() for j in (2, 3, 4)}
        since = cache.client.hget(cache.keys.prefix + "arrivalsince", "app=web")
        assert since is not None
        removal = [i for i, f in entries(cache) if f[b"type"] == b"PodRemoved"][-1]
        assert since == removal
