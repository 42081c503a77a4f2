"""Calls the Python client never sends, which Lua must refuse before any write (found in
review): a contribution naming a field twice (its fit checked amount by amount, added whole);
a pop that removes a stray member or drops a bound pod while the cache's `queues` key has
another type (a write, then WRONGTYPE). And sc_queue_pop's `parked ms`, reserved: the wait of a
parked pod is the one sc_queue_retry gave it. On every backend."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.gang import gang_claim
from schedcache.store.library import function_name
from tests.factories import keyspace, make_node, make_pod

T0 = 1_700_000_000.0


def doubled(args: tuple[Any, ...], contribution: str) -> list[Any]:
    """``args`` with the pod's contribution naming its cpu twice (half the request each)."""
    assert contribution in args
    return [
        "r:cpu 600 r:cpu 600" + contribution.split("r:cpu 1200", 1)[1] if a == contribution else a
        for a in args
    ]


@pytest.mark.parametrize("function", ["assume_pod", "timed_claim", "gang_claim", "add_pod"])
def test_a_contribution_naming_a_field_twice_is_refused_unwritten(
    cache: Cache, function: str
) -> None:
    """Each half of 1200m fits a 1000m node: checked amount by amount the claim passed and the
    node held 1200m (main: accepted). Refused as BADARG naming the field; nothing written."""
    cache.add_node(make_node("n1", "1000m", "1Gi"))
    pod = make_pod("p", "n1", "1200m", "10Mi")
    claim = commands.assume_pod(pod, check_fit=True)
    contribution = claim.args[3]
    assert isinstance(contribution, str) and contribution.startswith("r:cpu 1200")
    if function == "assume_pod":
        args = doubled(claim.args, contribution)
    elif function == "timed_claim":
        args = doubled(commands.timed_claim(claim, 30.0).args, contribution)
    elif function == "gang_claim":
        args = doubled(gang_claim("default/g", [(pod, "", "")]).args, contribution)
    else:
        args = doubled(commands.add_pod(pod).args, contribution)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=r"BADARG contribution \S+ r:cpu twice"):
        cache.client.fcall(function_name(function), 1, cache.keys.prefix, "r", "", *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_nomination_naming_a_field_twice_is_refused_unwritten(cache: Cache) -> None:
    cache.add_node(make_node("n1", "1000m", "1Gi"))
    before = keyspace(cache.client, cache.keys.pattern)
    args = ["u1", "n1", "10", "60000", "r:cpu 600 r:cpu 600", str(int(T0 * 1000)), ""]
    with pytest.raises(redis.ResponseError, match=r"BADARG contribution u1 r:cpu twice"):
        cache.client.fcall(function_name("nominate_pod"), 1, cache.keys.prefix, "r", "", *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize("separator", ["\n", "\t", "\r"])
def test_a_contribution_spaced_by_anything_but_one_space_is_refused_unwritten(
    cache: Cache, separator: str
) -> None:
    """(Found in review: a newline between pairs passed, and ended the pod record's header
    early: the pod's memory read back as the start of its blob, and stayed on the node once
    the pod was removed.) Refused as BADARG contribution, nothing written."""
    cache.add_node(make_node("n1", "1000m", "1Gi"))
    pod = make_pod("p", "n1", "100m", "10Mi")
    args = list(commands.add_pod(pod).args)
    spaced = args[3].replace(" r:", separator + "r:", 1)
    assert spaced != args[3] and spaced.startswith("r:cpu 100")
    args[3] = spaced
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=r"BADARG contribution \S+$"):
        cache.client.fcall(function_name("add_pod"), 1, cache.keys.prefix, "r", "", *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_field_named_twice_is_echoed_by_its_first_64_bytes(cache: Cache) -> None:
    """A refusal names the field, not the megabyte a caller chose to send."""
    cache.add_node(make_node("n1", "1000m", "1Gi"))
    field = "r:" + "x" * 100_000
    args = ["u1", "n1", "10", "60000", f"{field} 1 {field} 1", str(int(T0 * 1000)), ""]
    with pytest.raises(redis.ResponseError) as refused:
        cache.client.fcall(function_name("nominate_pod"), 1, cache.keys.prefix, "r", "", *args)
    assert str(refused.value) == f"BADARG contribution u1 {field[:64]} twice"


def pop_args(now: float) -> list[Any]:
    return list(commands.queue_pop("ref", "a", 10.0, 1, 300.0, now).args)


def test_a_pop_removing_a_stray_checks_queues_before_any_write(cache: Cache) -> None:
    """The scheduler's only member is a stray (no record): its removal empties the queue,
    whose `queues` field then goes. A `queues` of another type: main removed the stray, then
    answered WRONGTYPE; now CORRUPT, nothing written."""
    client, prefix = cache.client, cache.keys.prefix
    client.zadd(prefix + "queue:ref:active", {"000000000000001:ghost": 0})
    client.set(prefix + "queues", "not a hash")
    before = keyspace(client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=r"CORRUPT .*queues is a string, not a hash"):
        client.fcall(function_name("queue_pop"), 1, prefix, "r", "", *pop_args(T0))
    assert keyspace(client, cache.keys.pattern) == before


def test_a_pop_dropping_a_bound_lapsed_pod_checks_queues_before_any_write(cache: Cache) -> None:
    """A lapsed lease of a pod the cache holds bound leaves the queue (its last pod: the
    `queues` field goes too): the same check before the first write."""
    pod = make_pod("p", "", "100m", "10Mi")
    cache.add_node(make_node("n1"))
    cache.run(commands.sync_pod_pending(pod, "ref", "100"))
    assert len(SchedulingQueue(cache, "ref", holder="a", lease=10.0).pop(now=T0)) == 1
    cache.add_pod(pod.with_node("n1"))  # bound meanwhile (sc_add_pod leaves the queue alone)
    client, prefix = cache.client, cache.keys.prefix
    client.delete(prefix + "queues")
    client.set(prefix + "queues", "not a hash")
    before = keyspace(client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=r"CORRUPT .*queues is a string, not a hash"):
        client.fcall(function_name("queue_pop"), 1, prefix, "r", "", *pop_args(T0 + 11))
    assert keyspace(client, cache.keys.pattern) == before


def test_a_pops_parked_argument_is_reserved_the_retrys_wait_counts(cache: Cache) -> None:
    """A pod parked by a give-back for 300 s: a pop asking 0 s neither wakes it earlier nor
    otherwise changes what it answers and writes (the wait is fixed when parked)."""
    pod = make_pod("p", "", "100m", "10Mi")
    cache.run(commands.sync_pod_pending(pod, "ref", "100"))
    queue = SchedulingQueue(cache, "ref", holder="a", lease=10.0, parked=300.0)
    (popped,) = queue.pop(now=T0)
    assert queue.retry(popped.pod, unschedulable=True, attempt="0-0", now=T0).outcome == "parked"
    eager = SchedulingQueue(cache, "ref", holder="a", lease=10.0, parked=0.0)
    assert eager.pop(now=T0 + 1) == []
    assert eager.lengths()["parked"] == 1
    assert [q.pod.name for q in eager.pop(now=T0 + 301)] == ["p"]  # its own wait ended


@pytest.mark.parametrize("seq", [10**15 - 2, 2**53 - 2, 2**63 - 2, -5])
def test_pushes_past_what_the_arrival_counter_holds_exactly_are_refused_unwritten(
    cache: Cache, seq: int
) -> None:
    """(Found in review, present on main: the counter was checked once a call, so a batch's
    second push INCRed past int64 and raised after the first had written; and a seq past 2^53
    came back from INCR as a rounded double. Found in review at stop 59: a seq from 10^15 on
    has 16 digits, and its active member, padded to 15 and ordered as text, jumped ahead of
    older pods; a negative one was stored as a record no pop could read.) Every push of the
    batch is refused CORRUPT, nothing written; a counter short of 10^15 by more than a call
    counts goes on exactly."""
    pods = [make_pod(f"u{i}", "", "10m", "1Mi", uid=f"u{i}") for i in range(2)]
    cache.client.set(cache.keys.prefix + "queueseq", str(seq))
    before = keyspace(cache.client, cache.keys.pattern)
    batch = cache.batch()
    for version, pod in enumerate(pods, start=1):
        batch.add(commands.sync_pod_pending(pod, "default-scheduler", str(version)))
    results = batch.execute()
    assert [type(result.error).__name__ for result in results] == ["CorruptRecord"] * 2
    assert "queueseq" in str(results[0].error)
    assert keyspace(cache.client, cache.keys.pattern) == before
    cache.client.set(cache.keys.prefix + "queueseq", str(10**15 - 10**6 - 2))
    for version, pod in enumerate(pods, start=1):
        assert cache.run(commands.sync_pod_pending(pod, "default-scheduler", str(version)))
    record = cache.client.get(cache.keys.prefix + "queued:u0")
    assert record is not None and str(10**15 - 10**6 - 1).encode() in record.split(b"\n", 1)[0]
    assert cache.client.get(cache.keys.prefix + "queueseq") == str(10**15 - 10**6).encode()
    popped = SchedulingQueue(cache, "default-scheduler", holder="a").pop(count=2, now=T0)
    assert [q.pod.uid for q in popped] == ["u0", "u1"]  # in their order of arrival
