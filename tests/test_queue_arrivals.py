"""The queue's arrival counter and a change's version (stop 59: the counter counted on in Lua
and written once a call; a push's queued record and version in one MSET). Adopted from a
stranger's review of that change: the order of arrivals across pushes, batches, lapsed leases
and ended back-offs; the counter when a later command of a batch fails; a corrupt counter
refused unwritten; a change's version as its last write, so that a change failing partway
is applied again when resent (the review found a confirmation's version folded into its
record's MSET broke that: not made)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.errors import CorruptRecord
from schedcache.model.values import Pod
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.commands import Command
from schedcache.store.library import function_name
from tests.conftest import real_client
from tests.factories import keyspace, make_node, make_pod
from tests.test_deferred_writes_review import acl_user
from tests.test_queue import pending as queue_pending

T0 = 1_700_000_000.0

SEQ_CORRUPTIONS = [
    ("not-int", lambda c, k: c.client.set(k, b"abc")),
    ("float", lambda c, k: c.client.set(k, b"1.5")),
    ("empty", lambda c, k: c.client.set(k, b"")),
    ("leading-zero", lambda c, k: c.client.set(k, b"012")),
    ("negative", lambda c, k: c.client.set(k, b"-5")),
    ("list", lambda c, k: (c.client.delete(k), c.client.rpush(k, b"1"))),
    ("hash", lambda c, k: (c.client.delete(k), c.client.hset(k, "a", "1"))),
    ("past-10^15", lambda c, k: c.client.set(k, str(10**15 - 2).encode())),
]


def pending(name: str, priority: int = 0) -> Pod:
    """test_queue's pending pod, its uid told from its name ("uid-<name>")."""
    return queue_pending(name, priority, uid=f"uid-{name}")


def seq_of(cache: Cache, uid: str) -> int:
    text = cache.client.get(cache.keys.prefix + "queued:" + uid)
    header = text.split(b"\n", 1)[0].split()
    return int(header[3])


def counter(cache: Cache) -> int:
    value = cache.client.get(cache.keys.prefix + "queueseq")
    return int(value) if value is not None else 0


def all_seqs(cache: Cache) -> dict[str, int]:
    out = {}
    for key in cache.client.scan_iter(
        match=cache.keys.prefix.replace("{", "\\{").replace("}", "\\}") + "queued:*"
    ):
        uid = key.decode().rsplit("queued:", 1)[1]
        try:
            out[uid] = seq_of(cache, uid)
        except (IndexError, ValueError):
            continue  # a planted garbage record
    return out


def invariant(cache: Cache) -> None:
    seqs = all_seqs(cache)
    assert len(set(seqs.values())) == len(seqs), f"duplicate seqs {seqs}"
    if seqs:
        assert max(seqs.values()) <= counter(cache), (seqs, counter(cache))


def full_state(cache: Cache) -> dict[bytes, Any]:
    state = keyspace(cache.client, cache.keys.pattern)
    ttls = {k + b" pttl": (cache.client.pttl(k) > 0) for k in state}
    return {**state, **ttls}


def test_one_batch_with_many_pushes_counts_each(cache: Cache) -> None:
    batch = cache.batch()
    for i in range(50):
        batch.add(commands.sync_pod_pending(pending(f"b{i}"), "ref", str(100 + i)))
    batch.execute()
    assert counter(cache) == 50
    assert sorted(all_seqs(cache).values()) == list(range(1, 51))
    q = SchedulingQueue(cache, "ref", holder="a", lease=5.0)
    got = [item.pod.name for item in q.pop(count=50, now=T0)]
    assert got == [f"b{i}" for i in range(50)]


def bad_push(uid: str) -> Command:
    return Command("sync_pod", "bad", ("5", "queue", uid, "ref", "not-a-priority", b"\x80"))


@pytest.mark.parametrize("how", ["badarg", "corrupt-queued", "corrupt-version", "corrupt-pod"])
def test_a_batch_whose_later_command_fails_still_counts_its_pushes(cache: Cache, how: str) -> None:
    prefix = cache.keys.prefix
    if how == "corrupt-queued":
        cache.client.set(prefix + "queued:uid-x", b"garbage")
    elif how == "corrupt-version":
        cache.client.rpush(prefix + "version:pod:uid-x", b"x")
    elif how == "corrupt-pod":
        cache.client.set(prefix + "pod:uid-x", b"garbage\nx")
    batch = cache.batch()
    batch.add(commands.sync_pod_pending(pending("a"), "ref", "10"))
    batch.add(commands.sync_pod_pending(pending("b"), "ref", "10"))
    if how == "badarg":
        batch.add(bad_push("uid-x"))
    else:
        batch.add(commands.sync_pod_pending(pending("x"), "ref", "10"))
    batch.add(commands.sync_pod_pending(pending("c"), "ref", "10"))
    results = batch.execute()
    errors = [r.error for r in results]
    assert errors[0] is None and errors[1] is None and errors[3] is None, errors
    assert errors[2] is not None, errors
    if how.startswith("corrupt"):
        assert isinstance(errors[2], CorruptRecord), errors[2]
        key = {
            "corrupt-queued": "queued:uid-x",
            "corrupt-version": "version:pod:uid-x",
            "corrupt-pod": "pod:uid-x",
        }[how]
        assert key in str(errors[2]), errors[2]
    assert counter(cache) == 3
    invariant(cache)
    # next call continues from 3
    cache.run(commands.sync_pod_pending(pending("d"), "ref", "10"))
    assert seq_of(cache, "uid-d") == 4
    invariant(cache)
    q = SchedulingQueue(cache, "ref", holder="a", lease=5.0)
    assert [i.pod.name for i in q.pop(count=10, now=T0)] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("name,plant", SEQ_CORRUPTIONS, ids=[c[0] for c in SEQ_CORRUPTIONS])
def test_a_corrupt_counter_refuses_pushes_and_pops_unwritten(cache: Cache, name, plant) -> None:
    prefix = cache.keys.prefix
    cache.run(commands.sync_pod_pending(pending("old"), "ref", "10"))
    q = SchedulingQueue(cache, "ref", holder="a", lease=1.0)
    assert [i.pod.name for i in q.pop(now=T0)] == ["old"]
    plant(cache, prefix + "queueseq")
    before = full_state(cache)
    with pytest.raises(CorruptRecord, match=r"queueseq"):
        cache.run(commands.sync_pod_pending(pending("new"), "ref", "11"))
    assert full_state(cache) == before
    # a pop whose lapsed lease would come back
    with pytest.raises(CorruptRecord, match=r"queueseq"):
        q.pop(now=T0 + 10)
    assert full_state(cache) == before
    # in a batch
    batch = cache.batch()
    batch.add(commands.sync_pod_pending(pending("n1"), "ref", "11"))
    batch.add(commands.sync_pod_pending(pending("n2"), "ref", "11"))
    results = batch.execute()
    assert all(isinstance(r.error, CorruptRecord) for r in results), results
    assert full_state(cache) == before


def version(cache: Cache, uid: str) -> tuple[bytes | None, int]:
    key = cache.keys.prefix + "version:pod:" + uid
    return cache.client.get(key), cache.client.pttl(key)


def test_push_then_stale_changes_are_dropped(cache: Cache) -> None:
    pod = pending("p")
    assert cache.run(commands.sync_pod_pending(pod, "ref", "0050"))[1] == b"queue"
    assert version(cache, pod.uid) == (b"50", -1)
    for rv, why in [("50", b"repeated"), ("49", b"stale"), ("0050", b"repeated")]:
        reply = cache.run(commands.sync_pod_pending(pod, "ref", rv))
        assert reply[0] == b"dropped" and reply[1] == why, reply
        reply = cache.run(commands.sync_pod(pod.with_node("n1"), rv, True))
        assert reply[0] == b"dropped" and reply[1] == why, reply
    # requeue (priority change) records its version too
    hi = Pod.from_dict({**pod.to_dict(), "priority": 5})
    assert cache.run(commands.sync_pod_pending(hi, "ref", "60"))[1] == b"requeue"
    assert version(cache, pod.uid) == (b"60", -1)
    # a leased pod whose scheduler changes
    q = SchedulingQueue(cache, "ref", holder="a", lease=5.0)
    q.pop(now=T0)
    assert cache.run(commands.sync_pod_pending(hi, "other", "70"))[1] == b"requeue"
    assert version(cache, pod.uid) == (b"70", -1)
    assert cache.run(commands.sync_pod_pending(hi, "other", "65"))[0] == b"dropped"


def test_one_batch_mixing_pushes_and_pops_with_lapses(cache: Cache) -> None:
    batch = cache.batch()
    batch.add(commands.sync_pod_pending(pending("a"), "ref", "10"))
    batch.add(commands.queue_pop("ref", "h", 1.0, 1, 0.0, T0))  # leases a
    batch.add(commands.sync_pod_pending(pending("b"), "ref", "10"))
    batch.add(
        commands.queue_pop("ref", "h", 1.0, 1, 0.0, T0 + 10)
    )  # a comes back (seq 3), b leased
    batch.add(commands.sync_pod_pending(pending("c"), "ref", "10"))
    results = batch.execute()
    assert all(r.error is None for r in results), results
    assert counter(cache) == 4
    assert (
        seq_of(cache, "uid-a") == 3 and seq_of(cache, "uid-b") == 2 and seq_of(cache, "uid-c") == 4
    )
    q = SchedulingQueue(cache, "ref", holder="x", lease=5.0)
    assert [i.pod.name for i in q.pop(count=3, now=T0 + 20)] == ["a", "c", "b"]  # b lapsed: seq 5
    assert counter(cache) == 5
    invariant(cache)


def test_requeues_count_only_when_they_activate(cache: Cache) -> None:
    a, b = pending("a"), pending("b")
    cache.run(commands.sync_pod_pending(a, "ref", "10"))
    cache.run(commands.sync_pod_pending(b, "ref", "10"))
    assert cache.run(commands.sync_pod_pending(a, "ref", "11"))[1] == b"requeue"  # same priority
    assert counter(cache) == 2 and seq_of(cache, "uid-a") == 1
    hi = Pod.from_dict({**a.to_dict(), "priority": 0})
    lo = Pod.from_dict({**a.to_dict(), "priority": -1})
    assert cache.run(commands.sync_pod_pending(lo, "ref", "12"))[1] == b"requeue"
    assert counter(cache) == 3 and seq_of(cache, "uid-a") == 3
    assert cache.run(commands.sync_pod_pending(hi, "ref", "13"))[1] == b"requeue"
    assert counter(cache) == 4 and seq_of(cache, "uid-a") == 4
    q = SchedulingQueue(cache, "ref", holder="h", lease=5.0)
    assert [i.pod.name for i in q.pop(count=2, now=T0)] == ["b", "a"]
    # leased: a priority change keeps it leased, no arrival
    assert cache.run(commands.sync_pod_pending(lo, "ref", "14"))[1] == b"requeue"
    assert counter(cache) == 4
    # batch: two requeues of one pod and a push
    batch = cache.batch()
    batch.add(commands.sync_pod_pending(pending("c"), "ref", "10"))
    batch.add(
        commands.sync_pod_pending(
            Pod.from_dict({**pending("c").to_dict(), "priority": 3}), "ref", "11"
        )
    )
    batch.add(commands.sync_pod_pending(pending("c"), "ref", "12"))
    assert all(r.error is None for r in batch.execute())
    assert counter(cache) == 7 and seq_of(cache, "uid-c") == 7
    invariant(cache)


@pytest.mark.parametrize("denied", ["srem", "xadd", "sadd"])
def test_a_change_failing_partway_is_applied_again_when_resent(denied: str) -> None:
    """The version is a change's last write: a call failing after it wrote the pod record (a
    user denied SREM / XADD / SADD: a real Redis's ACL, which fakeredis has no way to deny)
    leaves it unwritten, and the feeder's resend applies the change again, healing the queue,
    the event and the `pods` set. (Found in review at stop 59: the version folded into the
    record's MSET was stored first, the resend was dropped as repeated, and a bound pod kept
    its queued record, or no PodAdded was ever written.)"""
    client = real_client()
    cache = Cache(client, "acl-" + uuid.uuid4().hex[:8], ttl=10.0, replica="test")
    prefix = cache.keys.prefix
    try:
        cache.add_node(make_node("n1", "8000m", "8Gi"))
        pod = make_pod("p1", "", "100m", "100Mi", uid="uid-p1")
        if denied == "srem":  # a queued pod bound
            cache.run(commands.sync_pod_pending(pod, "ref", "100"))
        limited = acl_user(cache, denied)
        bind = commands.sync_pod(pod.with_node("n1"), "200", True)
        try:
            with pytest.raises(redis.ResponseError):
                limited.fcall(function_name("sync_pod"), 1, prefix, "test", "", *bind.args)
        finally:
            client.acl_deluser(limited.connection_pool.connection_kwargs["username"])
            limited.close()
        assert cache.run(bind)[0] == b"applied"
        assert not client.exists(prefix + "queued:uid-p1")
        assert not client.sismember(prefix + "queuedpods", "uid-p1")
        assert client.sismember(prefix + "pods", "uid-p1")
        types = [entry[1][b"type"] for entry in client.xrange(prefix + "events")]
        assert types[-1] in (b"PodAdded", b"PodUpdated"), types
    finally:
        cache.clear()


def test_arrival_order_across_pushes_batches_lapses_and_backoffs(cache: Cache) -> None:
    rng = random.Random(7)
    version = iter(range(1000, 10**9))
    activations = 0
    expected_order: dict[int, list[str]] = {0: [], 100: []}  # priority -> uids by arrival
    n = 0
    q = SchedulingQueue(cache, "ref", holder="a", lease=5.0, backoff=(1.0, 1.0))
    now = T0
    leased: list[Pod] = []
    for _ in range(30):
        # single pushes
        for _ in range(rng.randint(0, 2)):
            n += 1
            pr = rng.choice([0, 100])
            pod = pending(f"p{n}", pr)
            assert (
                cache.run(commands.sync_pod_pending(pod, "ref", str(next(version))))[1] == b"queue"
            )
            activations += 1
            expected_order[pr].append(pod.uid)
        # a batch of several pushes
        batch = cache.batch()
        added = []
        for _ in range(rng.randint(0, 5)):
            n += 1
            pr = rng.choice([0, 100])
            pod = pending(f"p{n}", pr)
            batch.add(commands.sync_pod_pending(pod, "ref", str(next(version))))
            added.append((pr, pod.uid))
        if added:
            results = batch.execute()
            assert all(r.error is None for r in results), results
            for pr, uid in added:
                activations += 1
                expected_order[pr].append(uid)
        invariant(cache)
        # pop a few; some given back with an error (back-off), some left to lapse
        now += 2.0
        popped = q.pop(count=rng.randint(1, 3), now=now)
        for item in popped:
            for pr in expected_order:
                if item.pod.uid in expected_order[pr]:
                    # it was the oldest of the highest non-empty priority
                    higher = [u for p2 in expected_order if p2 > pr for u in expected_order[p2]]
                    assert not higher, (item.pod.uid, higher)
                    assert expected_order[pr][0] == item.pod.uid, (expected_order[pr], item.pod.uid)
                    expected_order[pr].remove(item.pod.uid)
            leased.append(item.pod)
        invariant(cache)
        # give back some with an error: back-off 1 s
        still = []
        for pod in leased:
            if rng.random() < 0.3:
                assert q.retry(pod, unschedulable=False, now=now).outcome == "backoff"
            else:
                still.append(pod)
        leased = still
        # everything whose lease lapsed / back-off ended comes back at the next pop; we
        # cannot easily predict their order, so rebuild expectations from stored seqs
        now += 6.0  # every lease (5 s) lapsed and every back-off (1 s) ended
        before = counter(cache)
        lengths = q.lengths()
        to_return = lengths["leased"] + lengths["backoff"]
        popped = q.pop(count=1, now=now)
        activations += to_return
        assert counter(cache) == before + to_return
        leased = []
        for item in popped:
            leased.append(item.pod)
        # rebuild expected order from stored records (seq order within priority)
        seqs = all_seqs(cache)
        expected_order = {0: [], 100: []}
        for uid, _ in sorted(seqs.items(), key=lambda kv: kv[1]):
            rec = cache.client.get(cache.keys.prefix + "queued:" + uid).split(b"\n", 1)[0].split()
            if rec[0] == b"active":
                expected_order[int(rec[2])].append(uid)
        invariant(cache)
    assert counter(cache) == activations
