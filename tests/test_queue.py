"""The scheduling queue in the cache (issue 34, item 4): pending pods fed by ``sync_pod``,
popped with a lease by one replica at a time, highest priority first, then oldest; parked when
no node could take them until a cluster change that could help, backing off otherwise; out of
the queue when bound or deleted. On every backend; times are given (``now``) where they
matter, so nothing here sleeps."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.errors import CorruptRecord, FitConflict, ValidationError
from schedcache.model.arrivals import wake_tokens
from schedcache.model.values import Pod
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.library import function_name
from schedcache.store.queued import queue_lengths
from tests.factories import caught_up, keyspace, make_node, make_pod, zone_spread_pod

T0 = 1_700_000_000.0  # a "now" in seconds, far from Redis' clock on purpose
_versions = iter(range(100, 10**9))


def pending(name: str, priority: int = 0, **kwargs: Any) -> Pod:
    manifest_pod = make_pod(name, "", "100m", "100Mi", **kwargs)
    if priority:
        manifest_pod = Pod.from_dict({**manifest_pod.to_dict(), "priority": priority})
    return manifest_pod


def push(cache: Cache, pod: Pod, scheduler: str = "ref") -> Any:
    """What a feeder sends for a pending pod (a fresh resourceVersion each time)."""
    return cache.run(commands.sync_pod_pending(pod, scheduler, str(next(_versions))))


def bind(cache: Cache, pod: Pod, node: str) -> Any:
    """What a feeder sends when it sees the pod bound."""
    command = commands.sync_pod(pod.with_node(node), str(next(_versions)), present=True)
    return cache.run(command)


def queue(cache: Cache, holder: str = "a", **options: Any) -> SchedulingQueue:
    options.setdefault("lease", 10.0)
    return SchedulingQueue(cache, "ref", holder=holder, **options)


def names(popped: list[Any]) -> list[str]:
    return [queued.pod.name for queued in popped]


def test_pods_pop_by_priority_then_arrival_each_once(cache: Cache) -> None:
    for name, priority in [("low1", 0), ("high1", 1000), ("low2", 0), ("neg", -5), ("high2", 1000)]:
        push(cache, pending(name, priority))
    push(cache, pending("other"), scheduler="another-scheduler")
    a = queue(cache)
    assert names(a.pop(2, now=T0)) == ["high1", "high2"]
    assert names(a.pop(10, now=T0)) == ["low1", "low2", "neg"]
    assert a.pop(now=T0) == []  # leased: nobody gets them again while the lease lasts
    assert a.lengths() == {"active": 0, "leased": 5, "backoff": 0, "parked": 0}
    lengths = queue_lengths(cache.client, cache.keys)
    assert {name: sum(states.values()) for name, states in lengths.items()} == {
        "ref": 5,
        "another-scheduler": 1,
    }
    popped = queue(cache, "b").pop(now=T0)  # the other scheduler's pods are not ours
    assert popped == []


def test_a_feeders_repeated_or_updated_pending_pod_is_queued_once_in_its_place(
    cache: Cache,
) -> None:
    first, second = pending("first"), pending("second")
    version = str(next(_versions))
    push(cache, first)
    push(cache, second)
    # A second feeder delivers the same change: dropped; a newer change keeps the pod's place.
    assert cache.run(commands.sync_pod_pending(second, "ref", version))[0] == b"dropped"
    relabelled = pending("first", labels={"tier": "web"})
    assert cache.run(commands.sync_pod_pending(relabelled, "ref", str(next(_versions))))[1] == (
        b"requeue"
    )
    popped = queue(cache).pop(5, now=T0)
    assert names(popped) == ["first", "second"]
    assert popped[0].pod.labels == {"tier": "web"}  # the newest manifest
    # A priority raised while it waits moves it ahead.
    push(cache, pending("third"))
    push(cache, pending("fourth"))
    push(cache, pending("fourth", priority=10))
    assert names(queue(cache).pop(5, now=T0)) == ["fourth", "third"]


def test_a_lapsed_lease_hands_the_pod_to_another_replica(cache: Cache) -> None:
    push(cache, pending("p"))
    a, b = queue(cache, "a"), queue(cache, "b")
    (popped,) = a.pop(now=T0)
    assert b.pop(now=T0 + 9.9) == []
    assert names(b.pop(now=T0 + 10.0)) == ["p"]  # a died: its lease lapsed
    # a comes back late: the pod is b's now, a's give-back is refused and changes nothing.
    assert a.retry(popped.pod, unschedulable=False, now=T0 + 11).outcome == "notheld"
    assert b.lengths()["leased"] == 1


def test_a_pod_given_back_untried_returns_to_its_place_with_no_attempt_counted(
    cache: Cache,
) -> None:
    """The tail of a batch a replica popped and did not attempt (it stopped, or lost Redis):
    back ahead of the pods queued since, at once (not after its lease), attempts unchanged;
    refused and nothing written once it is not this replica's."""
    for name in ("p1", "p2", "p3"):
        push(cache, pending(name))
    a, b = queue(cache, "a"), queue(cache, "b")
    first, second, third = a.pop(3, now=T0)
    assert a.retry(first.pod, unschedulable=False, now=T0).outcome == "backoff"
    push(cache, pending("later"))
    assert a.untried(third.pod).outcome == "active"
    assert a.untried(second.pod).outcome == "active"
    assert a.lengths() == {"active": 3, "leased": 0, "backoff": 1, "parked": 0}
    again = b.pop(3, now=T0 + 0.5)  # within a's lease: given back, not lapsed
    assert names(again) == ["p2", "p3", "later"]
    assert [queued.attempts for queued in again] == [0, 0, 0]

    def queue_state() -> dict[bytes, Any]:  # all but the reply remembered by command id
        return {
            k: v for k, v in keyspace(cache.client, cache.keys.pattern).items() if b":cmd:" not in k
        }

    before = queue_state()
    assert a.untried(again[0].pod).outcome == "notheld"  # b's now
    assert queue_state() == before
    cache.assume_pod(again[0].pod.with_node("n1"), check_fit=False)
    assert bind(cache, again[0].pod, "n1")[1] == b"add"
    assert b.untried(again[0].pod).outcome == "gone"


def test_a_claimed_pod_stays_out_until_bound_and_returns_when_its_claim_is_forgotten(
    cache: Cache,
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache, "a")
    (popped,) = a.pop(now=T0)
    placed = popped.pod.with_node("n1")
    cache.assume_pod(placed, check_fit=True)
    # The lease lapses while the claim lasts (the Binding is slow): renewed, not handed out.
    assert queue(cache, "b").pop(now=T0 + 60) == []
    cache.forget_pod(placed)  # the Binding failed and the replica died before giving it back
    assert names(queue(cache, "b").pop(now=T0 + 120)) == ["p"]


@pytest.mark.parametrize("how", ["bound", "deleted"])
def test_a_bound_or_deleted_pod_leaves_the_queue_whole(cache: Cache, how: str) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    before = keyspace(cache.client, cache.keys.pattern)
    push(cache, pending("p"))
    a = queue(cache)
    (popped,) = a.pop(now=T0)
    if how == "bound":
        cache.assume_pod(popped.pod.with_node("n1"), check_fit=True)
        assert bind(cache, popped.pod, "n1")[1] == b"add"
        assert cache.pod_state(popped.pod) == "added"
    else:
        gone = commands.sync_pod(popped.pod, str(next(_versions)), present=False)
        assert cache.run(gone)[1] == b"dequeue"
    assert a.retry(popped.pod, unschedulable=True, now=T0).outcome == "gone"
    after = keyspace(cache.client, cache.keys.pattern)
    queue_keys = [key for key in after if b"queue" in key and key not in before]
    # Only the arrival counter remains of the queue: the scheduler's entry (its wake cursor,
    # its /metrics series) went with its last pod.
    assert queue_keys == [cache.keys.queue_sequence.encode()]
    assert a.lengths() == {"active": 0, "leased": 0, "backoff": 0, "parked": 0}


def test_an_error_backs_off_doubling_to_the_longest(cache: Cache) -> None:
    push(cache, pending("p"))
    a = queue(cache, backoff=(1.0, 3.0))
    now = T0
    for delay in (1.0, 2.0, 3.0, 3.0):
        (popped,) = a.pop(now=now)
        retry = a.retry(popped.pod, unschedulable=False, now=now)
        assert (retry.outcome, retry.due_ms) == ("backoff", round((now + delay) * 1000))
        assert a.pop(now=now + delay - 0.001) == []
        now += delay
    assert names(a.pop(now=now)) == ["p"]


def test_an_unschedulable_pod_waits_parked_for_an_event_that_could_help(cache: Cache) -> None:
    cache.add_node(make_node("small", "1", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache, backoff=(1.0, 10.0))
    (popped,) = a.pop(now=T0)
    attempt = cache.last_events(1)[0].id  # what the attempt's snapshot saw
    assert a.retry(popped.pod, unschedulable=True, attempt=attempt, now=T0).outcome == "parked"
    # Its back-off is long over, but nothing changed that could help: it stays parked.
    cache.assume_pod(make_pod("other", "small", "100m", "1Mi"))  # PodAssumed helps no one
    assert a.pop(now=T0 + 60) == []
    assert a.lengths()["parked"] == 1
    cache.add_node(make_node("roomy", "4", "8Gi"))  # NodeAdded
    assert names(a.pop(now=T0 + 61)) == ["p"]


def test_a_woken_pod_still_backing_off_waits_for_its_back_off(cache: Cache) -> None:
    push(cache, pending("p"))
    a = queue(cache, backoff=(5.0, 10.0))
    (popped,) = a.pop(now=T0)
    attempt = cache.last_events(1)[0].id if cache.last_events(1) else "0-0"
    a.retry(popped.pod, unschedulable=True, attempt=attempt, now=T0)
    cache.add_node(make_node("roomy", "4", "8Gi"))
    assert a.pop(now=T0 + 1) == []  # woken into back-off: 5 s from its attempt
    assert a.lengths()["backoff"] == 1
    assert names(a.pop(now=T0 + 5)) == ["p"]


def test_a_change_during_the_attempt_sends_the_pod_to_back_off_not_parked(cache: Cache) -> None:
    """Upstream's move request cycle: an event the attempt did not see may have helped."""
    cache.add_node(make_node("small", "1", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache)
    (popped,) = a.pop(now=T0)
    attempt = cache.last_events(1)[0].id
    cache.add_node(make_node("roomy", "4", "8Gi"))  # after the snapshot, before the give-back
    assert a.retry(popped.pod, unschedulable=True, attempt=attempt, now=T0).outcome == "backoff"
    # Without the attempt's point in the stream, it cannot be sure either.
    (popped,) = a.pop(now=T0 + 2)
    assert a.retry(popped.pod, unschedulable=True, now=T0 + 2).outcome == "backoff"


def test_a_parked_pod_returns_after_the_longest_wait_without_any_event(cache: Cache) -> None:
    cache.add_node(make_node("small", "1", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache, parked=300.0)
    (popped,) = a.pop(now=T0)
    a.retry(popped.pod, unschedulable=True, attempt=cache.last_events(1)[0].id, now=T0)
    assert a.pop(now=T0 + 299) == []
    assert names(a.pop(now=T0 + 300)) == ["p"]


def test_a_pending_event_of_a_claimed_pod_leaves_the_claim_alone(cache: Cache) -> None:
    """Sync watches pending pods now: the replica's own status patch (a MODIFIED of the
    still-pending pod) must not undo its claim."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    push(cache, pending("p"))
    (popped,) = queue(cache).pop(now=T0)
    cache.assume_pod(popped.pod.with_node("n1"), check_fit=True)
    generation = cache.generation()
    assert push(cache, pending("p", labels={"patched": "yes"}))[1] == b"none"
    assert cache.pod_state(popped.pod) == "assumed" and cache.generation() == generation
    assert queue(cache, "b").pop(now=T0 + 60) == []


def test_replicas_popping_at_once_never_get_the_same_pod(cache: Cache) -> None:
    batch = cache.batch()
    for i in range(300):
        batch.add(commands.sync_pod_pending(pending(f"p{i}"), "ref", str(next(_versions))))
    batch.execute()
    got: list[list[str]] = [[] for _ in range(4)]

    def pop_all(j: int) -> None:
        q = queue(cache, f"r{j}")
        while popped := q.pop(3):
            got[j].extend(names(popped))

    threads = [threading.Thread(target=pop_all, args=(j,)) for j in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [name for names_ in got for name in names_]
    assert sorted(every) == sorted(f"p{i}" for i in range(300))  # each once, none lost


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (lambda: commands.sync_pod_pending(pending("p"), "Not_A_Name", "5"), "spec.schedulerName"),
        # Not DNS subdomains, as the API server's validation refuses them too.
        (lambda: commands.sync_pod_pending(pending("p"), "a..b", "5"), "spec.schedulerName"),
        (lambda: commands.sync_pod_pending(pending("p"), "a-.b", "5"), "spec.schedulerName"),
        (lambda: commands.sync_pod_pending(pending("p"), "a" * 254, "5"), "spec.schedulerName"),
        (lambda: commands.sync_pod_pending(make_pod("p", "n1"), "ref", "5"), "spec.nodeName"),
        (
            lambda: commands.sync_pod_pending(
                Pod.from_dict({**pending("p").to_dict(), "priority": 2**40}), "ref", "5"
            ),
            "spec.priority",
        ),
        (lambda: commands.queue_pop("ref", "a", 10.0, 0, 300.0, None), "count"),
        (lambda: commands.queue_pop("ref", "has space", 10.0, 1, 300.0, None), "holder"),
        (lambda: commands.queue_pop("ref", "a", 0.0, 1, 300.0, None), "lease"),
        (
            lambda: commands.queue_retry("ref", "a", "u", True, "not-an-id", (1, 10), 300, None),
            "attempt",
        ),
    ],
)
def test_bad_input_is_refused_by_field_and_changes_nothing(
    cache: Cache, command: Any, field: str
) -> None:
    push(cache, pending("q"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError) as refused:
        cache.run(command())
    assert refused.value.field == field
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_corrupt_queued_record_is_stepped_over_and_refuses_its_own_commands(
    cache: Cache,
) -> None:
    push(cache, pending("bad"))
    push(cache, pending("good"))
    cache.client.set(cache.keys.queued(pending("bad").uid), b"garbage")
    # The pop does not stall on it: the member goes, the record stays for an operator.
    assert names(queue(cache).pop(5, now=T0)) == ["good"]
    assert cache.client.get(cache.keys.queued(pending("bad").uid)) == b"garbage"
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CorruptRecord, match="queued"):
        push(cache, pending("bad", labels={"x": "y"}))
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize("field, digits", [(4, "9" * 25), (5, "9" * 400)], ids=["attempts", "due"])
def test_a_parked_record_of_digits_past_int64_is_stepped_over_by_a_whole_pop(
    cache: Cache, field: int, digits: str
) -> None:
    """(Found in review: a parked record's 309-digit due, which the pop ZADDs as its digits,
    failed the pop after its first writes, every head with it.) Leading zeros still read."""
    cache.add_node(make_node("small", "1", "8Gi"))
    push(cache, pending("odd"))
    a = queue(cache, parked=300.0)
    (popped,) = a.pop(now=T0)
    a.retry(popped.pod, unschedulable=True, attempt=cache.last_events(1)[0].id, now=T0)
    key = cache.keys.queued(pending("odd").uid)
    header, blob = cache.client.get(key).split(b"\n", 1)
    words = header.split(b" ")
    words[field] = digits.encode()
    cache.client.set(key, b" ".join(words) + b"\n" + blob)
    push(cache, pending("good"))
    assert names(a.pop(5, now=T0 + 300)) == ["good"]
    assert cache.client.get(key) == b" ".join(words) + b"\n" + blob  # left for an operator
    words[field] = digits[:18].zfill(30).encode()  # 30 digits, 18 past the zeros: read
    cache.client.set(key, b" ".join(words) + b"\n" + blob)
    cache.client.zadd(cache.keys.queue("ref", "parked"), {pending("odd").uid: 0})
    # (read: attempts handed out; a due that far ahead keeps it backing off)
    assert ("odd" in names(a.pop(5, now=T0 + 600))) == (field == 4)


def test_stats_and_metrics_show_the_pending_pods_per_scheduler_and_queue(
    cache: Cache, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    import schedcache.cli.app as cli_module
    from schedcache.cli.app import main
    from schedcache.store.metrics import CacheCollector

    cache.add_node(make_node("n1", "1", "8Gi"))
    for name in ("a", "b", "c"):
        push(cache, pending(name))
    push(cache, pending("x"), scheduler="other")
    a = queue(cache)
    first, second = a.pop(2, now=T0)
    a.retry(first.pod, unschedulable=True, attempt=cache.last_events(1)[0].id, now=T0)
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    stats = CliRunner().invoke(main, ["--cache", cache.name, "stats"], catch_exceptions=False)
    lines = dict(line.split("\t") for line in stats.output.splitlines())
    assert lines["queue ref"] == "3 pending pods (1 active, 1 leased, 0 backoff, 1 parked)"
    assert lines["queue other"] == "1 pending pods (1 active, 0 leased, 0 backoff, 0 parked)"
    (pending_pods,) = [
        m for m in CacheCollector(cache).collect() if m.name.endswith("pending_pods")
    ]
    found = {
        (sample.labels["scheduler"], sample.labels["queue"]): sample.value
        for sample in pending_pods.samples
        if sample.value
    }
    assert found == {
        ("ref", "active"): 1,
        ("ref", "leased"): 1,
        ("ref", "unschedulable"): 1,
        ("other", "active"): 1,
    }
    assert second.pod.name == "b"


@pytest.mark.parametrize(
    ("function", "args", "code"),
    [
        ("queue_pop", ["Bad_Name", "h", "1000", "1", "0"], "BADARG scheduler"),
        # Not DNS subdomains: refused by Redis as by the library (they name queue keys).
        ("queue_pop", ["a..b", "h", "1000", "1", "0"], "BADARG scheduler"),
        ("queue_pop", ["a-.b", "h", "1000", "1", "0"], "BADARG scheduler"),
        ("queue_pop", ["ref-", "h", "1000", "1", "0"], "BADARG scheduler"),
        ("sync_pod", ["7", "queue", "u", "a.", "0", "blob"], "BADARG scheduler"),
        ("queue_pop", ["ref", "h", "0", "1", "0"], "BADARG lease"),
        ("queue_pop", ["ref", "h", "1000", "101", "0"], "BADARG count"),
        ("queue_retry", ["ref", "h", "u", "maybe", "", "1", "1", "1"], "BADARG kind"),
        ("queue_retry", ["ref", "h", "u", "error", "x-y", "1", "1", "1"], "BADARG attempt"),
        ("sync_pod", ["7", "queue", "u", "ref", "1.5", "blob"], "BADARG priority"),
    ],
)
def test_the_lua_functions_refuse_malformed_calls_and_write_nothing(
    cache: Cache, function: str, args: list[str], code: str
) -> None:
    """What a client other than schedcache's (or a bug) could send: refused before any write."""
    push(cache, pending("q"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=code):
        cache.client.fcall(function_name(function), 1, cache.keys.prefix, "r", "", *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


def _place(cache: Cache, name: str, labels: dict[str, str]) -> None:
    cache.add_pod(make_pod(name, "n1", "10m", "10Mi", labels=labels))


def _last_id(cache: Cache) -> str:
    events = cache.last_events(1)
    return events[0].id if events else "0-0"


def test_a_pod_waiting_for_arrivals_is_parked_and_woken_only_by_a_pod_it_selects(
    cache: Cache,
) -> None:
    """Issue 38 item 4: pods with required affinity or DoNotSchedule spread were never parked
    (another pod's arrival, which woke no one, could help them): 9,463 hopeless attempts in
    60 s with 1,500 of them. Now they wait for a pod their selectors select (upstream's
    QueueingHints), told by tokens; the first give-back backs off (the tokens were not yet
    waited for during that attempt), every later one parks."""
    cache.add_node(make_node("n1", "8", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache, backoff=(1.0, 1.0))
    wake = ("app=web",)
    (popped,) = a.pop(now=T0)
    retry = a.retry(popped.pod, unschedulable=True, attempt=_last_id(cache), now=T0, wake=wake)
    assert retry.outcome == "backoff"
    (popped,) = a.pop(now=T0 + 1)
    retry = a.retry(popped.pod, unschedulable=True, attempt=_last_id(cache), now=T0 + 1, wake=wake)
    assert retry.outcome == "parked"
    _place(cache, "other", {"app": "db"})  # selected by nothing it waits for
    _place(cache, "bare", {})
    assert a.pop(now=T0 + 5) == [] and a.lengths()["parked"] == 1
    _place(cache, "anchor", {"app": "web", "tier": "front"})
    assert names(a.pop(now=T0 + 5)) == ["p"]


def test_an_awaited_arrival_during_the_attempt_sends_the_pod_to_back_off(cache: Cache) -> None:
    """The move request cycle for arrivals: a matching pod placed after the attempt's
    snapshot, before the give-back, may have helped."""
    cache.add_node(make_node("n1", "8", "8Gi"))
    push(cache, pending("p"))
    a = queue(cache, backoff=(1.0, 1.0))
    (popped,) = a.pop(now=T0)
    a.retry(popped.pod, unschedulable=True, attempt=_last_id(cache), now=T0, wake=("*",))
    (popped,) = a.pop(now=T0 + 1)
    attempt = _last_id(cache)
    _place(cache, "any", {})  # "*": any arrival, labels or none
    retry = a.retry(popped.pod, unschedulable=True, attempt=attempt, now=T0 + 1, wake=("*",))
    assert retry.outcome == "backoff"


def test_malformed_wake_tokens_are_refused_and_nothing_changes(cache: Cache) -> None:
    push(cache, pending("p"))
    a = queue(cache)
    (popped,) = a.pop(now=T0)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match="wake"):
        a.retry(popped.pod, unschedulable=True, attempt="0-0", now=T0, wake=("no-equals",))
    args = [
        "r",
        "",
        "ref",
        "a",
        popped.pod.uid,
        "unschedulable",
        "0-0",
        "1000",
        "10000",
        "300000",
        str(int(T0 * 1000)),
    ]
    for wake in ["bad", "a=1 " * 17, "=x"]:
        with pytest.raises(redis.ResponseError, match="BADARG wake"):
            cache.client.fcall(function_name("queue_retry"), 1, cache.keys.prefix, *args, wake)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_parked_spread_pod_is_woken_by_a_node_removed(cache: Cache) -> None:
    """Upstream's PodTopologySpread requeues on a node deleted: a zone whose only node is full
    holds the minimum at 0, so a zone-spread pod fits nowhere (1 + 1 - 0 > maxSkew) until that
    node goes. NodeRemoved woke no parked pod: it stayed parked for `parked` seconds (300)."""
    zone = "topology.kubernetes.io/zone"
    for name, z, cpu in [("n1", "z1", "8"), ("n2", "z2", "8"), ("n3", "z3", "10m")]:
        cache.add_node(make_node(name, cpu, "8Gi", labels={zone: z}))
    cache.add_pod(zone_spread_pod("s-0", "n1"))
    cache.add_pod(zone_spread_pod("s-1", "n2"))
    pod = zone_spread_pod("s-2", "")
    push(cache, pod)
    a = queue(cache, backoff=(1.0, 1.0))
    wake = wake_tokens(pod)
    for now in (T0, T0 + 1):
        (popped,) = a.pop(now=now)
        a.retry(popped.pod, unschedulable=True, attempt=_last_id(cache), now=now, wake=wake)
    assert a.lengths()["parked"] == 1
    with pytest.raises(FitConflict):  # unschedulable indeed
        cache.assume_pod(pod.with_node("n1"), check_fit=True, snapshot=caught_up(cache))
    cache.remove_node(make_node("n3", "10m", "8Gi", labels={zone: "z3"}))
    assert names(a.pop(now=T0 + 5)) == ["s-2"]
    cache.assume_pod(pod.with_node("n1"), check_fit=True, snapshot=caught_up(cache))


@pytest.mark.parametrize("batched", [False, True], ids=["single", "sc_batch"])
def test_a_bound_pod_leaves_its_schedulers_entry_to_the_pods_still_queued(
    cache: Cache, batched: bool
) -> None:
    """The scheduler's entry in `queues` stays while any of its pods is queued (active,
    leased, backing off or parked) and goes with the last one bound: counted as the bound
    pod's drop checks the queue's keys (one call), or read again in an sc_batch that checked
    them for an earlier command."""
    a, b, c = pending("a"), pending("b"), pending("c")
    for pod in (a, b, c):
        push(cache, pod)
    leased = queue(cache).pop(2, now=T0)
    assert names(leased) == ["a", "b"]
    assert queue(cache).retry(leased[1].pod, unschedulable=True, now=T0).outcome == "backoff"
    cache.run(commands.add_node(make_node("n1", "8", "8Gi")))

    def bind_all(pods: list[Pod]) -> None:
        made = [commands.sync_pod(p.with_node("n1"), str(next(_versions)), True) for p in pods]
        if batched:
            batch = cache.batch()
            for command in made:
                batch.add(command)
            batch.execute()
        else:
            for command in made:
                assert cache.run(command)[:2] == [b"applied", b"add"]

    bind_all([a])  # b backing off, c active: the entry stays
    assert cache.client.hexists(cache.keys.queues, "ref")
    assert queue(cache).lengths() == {"active": 1, "leased": 0, "backoff": 1, "parked": 0}
    bind_all([b, c])  # the last two (in a batch: the second's keys were checked by the first)
    assert not cache.client.hexists(cache.keys.queues, "ref")
    assert queue(cache).lengths() == {"active": 0, "leased": 0, "backoff": 0, "parked": 0}
    assert cache.client.scard(cache.keys.queued_pods) == 0


def test_a_schedulers_entry_stays_while_any_part_of_its_queue_holds_a_pod(cache: Cache) -> None:
    """A drop counts only the part its pod leaves (issue 40): the scheduler's entry in
    `queues` still stays while another part holds a pod, whether the drop is a single call or
    one of a batch whose drops empty the part, and goes with the very last pod."""
    for name in ("a", "b", "c", "d"):
        push(cache, pending(name))
    a = queue(cache)
    popped = {item.pod.name: item for item in a.pop(3, now=T0)}  # a, b, c leased; d active
    assert a.retry(popped["c"].pod, unschedulable=False, now=T0).outcome == "backoff"
    assert a.lengths() == {"active": 1, "leased": 2, "backoff": 1, "parked": 0}
    batch = cache.batch()  # leased emptied in one call; active and backoff still hold a pod
    for name in ("a", "b"):
        pod = popped[name].pod.with_node("n1")
        batch.add(commands.sync_pod(pod, str(next(_versions)), present=True))
    assert all(result.error is None for result in batch.execute())
    assert a.lengths() == {"active": 1, "leased": 0, "backoff": 1, "parked": 0}
    assert cache.client.hkeys(cache.keys.queues) == [b"ref"]
    bind(cache, pending("d"), "n1")  # active emptied: backoff still holds c
    assert cache.client.hkeys(cache.keys.queues) == [b"ref"]
    bind(cache, popped["c"].pod, "n1")  # the last pod, from backoff
    assert cache.client.hkeys(cache.keys.queues) == []
    assert a.lengths() == {"active": 0, "leased": 0, "backoff": 0, "parked": 0}


def test_a_corrupt_part_of_a_queue_refuses_exactly_the_commands_that_write_it(
    cache: Cache,
) -> None:
    """A push of a new pod writes only `active`, and a drop only its pod's part (issue 40:
    each checked the other three too, four ZCARDs a call): with `parked` corrupt both go
    through, leave it as it was, and keep the scheduler (a part that cannot be counted counts
    as holding pods); a pop, which moves pods between every part, is refused naming it and
    changes nothing."""
    push(cache, pending("a"))
    leased = queue(cache).pop(1, now=T0)[0]
    parked = f"{cache.keys.prefix}queue:ref:parked"
    cache.client.set(parked, "not a zset")
    assert push(cache, pending("b"))[1] == b"queue"
    bind(cache, leased.pod, "n1")  # leased emptied; active holds b
    bind(cache, pending("b"), "n1")  # active emptied; parked cannot be counted
    assert cache.client.get(parked) == b"not a zset"
    assert cache.client.hkeys(cache.keys.queues) == [b"ref"]
    push(cache, pending("c"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CorruptRecord, match="queue:ref:parked"):
        queue(cache).pop(1, now=T0)
    assert keyspace(cache.client, cache.keys.pattern) == before
