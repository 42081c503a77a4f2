"""Review of 5c81ee5 (issue 40): a feeder's versioned changes (``commands.VERSIONED``) go
without a command id, so a resend is dropped by the resourceVersion alone. Each test applies a
change, lets other writers act, sends the very same change again, and checks that the second
call wrote nothing: no key, no event, no generation."""

from __future__ import annotations

import threading

import pytest

from schedcache import Cache
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.commands import Command
from tests.factories import keyspace, make_node, make_pod
from tests.test_exactly_once import proxied_cache, proxy  # noqa: F401 (a fixture)

SCHEDULER = "default-scheduler"


def state(cache: Cache) -> tuple[dict[bytes, object], list[str]]:
    return keyspace(cache.client, cache.keys.pattern), [e.type for e in cache.events()]


def resent_writes_nothing(cache: Cache, command: Command, why: bytes = b"repeated") -> None:
    before = state(cache)
    assert cache.run(command)[:2] == [b"dropped", why]
    assert state(cache) == before


def test_a_queued_pod_popped_then_its_queue_change_resent(cache):
    pending = make_pod("web-0", "", "100m", "1Mi")
    change = commands.sync_pod_pending(pending, SCHEDULER, "5")
    assert cache.run(change)[:2] == [b"applied", b"queue"]
    queue = SchedulingQueue(cache, SCHEDULER, holder="r1")
    assert [p.pod.uid for p in queue.pop()] == [pending.uid]
    resent_writes_nothing(cache, change)
    assert queue.pop() == []  # not queued a second time


def test_a_claim_forgotten_then_the_queue_change_and_the_binding_resent(cache):
    cache.add_node(make_node("n1"))
    pending = make_pod("web-0", "", "100m", "1Mi")
    queued = commands.sync_pod_pending(pending, SCHEDULER, "5")
    cache.run(queued)
    queue = SchedulingQueue(cache, SCHEDULER, holder="r1")
    assert len(queue.pop()) == 1
    placed = make_pod("web-0", "n1", "100m", "1Mi")
    cache.assume_pod(placed)
    resent_writes_nothing(cache, queued)  # claimed meanwhile
    cache.forget_pod(placed)
    resent_writes_nothing(cache, queued)  # forgotten meanwhile
    bound = commands.sync_pod(placed, "6", True)
    assert cache.run(bound)[:2] == [b"applied", b"add"]
    resent_writes_nothing(cache, bound)
    resent_writes_nothing(cache, queued, b"stale")


def test_a_pod_removed_by_a_scheduler_is_not_brought_back_by_a_resend(cache):
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    change = commands.sync_pod(pod, "10", True)
    cache.run(change)
    cache.remove_pod(pod)  # not a feeder: its version turns into a tombstone
    resent_writes_nothing(cache, change)
    assert cache.pod_count() == 0


def test_a_delete_then_the_set_before_it_resent(cache):
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    added, deleted = commands.sync_pod(pod, "10", True), commands.sync_pod(pod, "11", False)
    cache.run(added)
    cache.run(deleted)
    before = state(cache)
    assert cache.run(added)[:2] == [b"dropped", b"stale"]
    resent_writes_nothing(cache, deleted)
    assert state(cache) == before and cache.pod_count() == 0


def test_a_node_removed_by_an_operator_is_not_brought_back_by_a_resend(cache):
    change = commands.sync_node(make_node("n1"), "5")
    cache.run(change)
    cache.remove_node("n1")
    resent_writes_nothing(cache, change)
    assert cache.node_count() == 0


def test_a_deleted_node_with_pods_left_as_a_ghost_then_its_delete_resent(cache):
    cache.run(commands.sync_node(make_node("n1"), "5"))
    cache.run(commands.sync_pod(make_pod("web-0", "n1", "100m", "1Mi"), "6", True))
    gone = commands.sync_node_gone("n1", "7")
    assert cache.run(gone)[:2] == [b"applied", b"remove"]
    resent_writes_nothing(cache, gone)


def test_namespace_budget_and_pod_group_resent_write_nothing(cache):
    changes = [
        Command("sync_namespace", "namespace a", ("5", "a", '{"team":"x"}')),
        Command("sync_namespace", "namespace b", ("6", "b", "")),  # a delete never seen
        Command("sync_budget", "pdb a/b", ("7", "a/b", '{"minAvailable":1}')),
        Command("sync_budget", "pdb a/c", ("8", "a/c", "")),
        Command("sync_podgroup", "group a/g", ("9", "set", "a/g", "2", "")),
        Command("sync_podgroup", "group a/h", ("10", "delete", "a/h")),
    ]
    for change in changes:
        assert cache.run(change)[0] == b"applied"
    for change in changes:
        resent_writes_nothing(cache, change)


def test_versions_compare_as_integers_not_text_and_not_as_floats(cache):
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    big = "9007199254740993"  # 2^53 + 1: a Lua number would round it to 2^53
    cache.run(commands.sync_pod(pod, big, True))
    assert cache.run(commands.sync_pod(pod, "9007199254740992", False))[:2] == [
        b"dropped",
        b"stale",
    ]
    assert cache.run(commands.sync_pod(pod, "0" + big, False))[:2] == [b"dropped", b"repeated"]
    assert cache.run(commands.sync_pod(pod, "10000000000000000", False))[:2] == [
        b"applied",
        b"remove",
    ]


def test_a_lost_reply_of_a_mixed_batch_is_answered_with_its_first_outcome(proxy):  # noqa: F811
    cache = proxied_cache(proxy)
    try:
        proxy.drop_reply_after(b"sc_batch")
        batch = cache.batch()
        batch.add(commands.sync_node(make_node("n1"), "5"))
        batch.add(commands.add_pod(make_pod("web-0", "n1", "100m", "1Mi")))
        results = batch.execute()
        assert proxy.dropped == 1
        assert results[0].reply[:2] == [b"applied", b"add"]  # not "dropped repeated"
        assert results[1].ok
        assert [e.type for e in cache.events()] == ["NodeAdded", "PodAdded"]
    finally:
        cache.clear()


def test_two_feeders_sending_the_same_changes_at_once_apply_each_once(make_cache):
    feeders = [make_cache(replica="feeder-a"), make_cache(replica="feeder-b")]
    nodes = [commands.sync_node(make_node(f"n{i}"), str(10 + i)) for i in range(20)]
    pods = [
        commands.sync_pod(make_pod(f"p{i}", f"n{i % 20}", "10m", "1Mi"), str(100 + i), True)
        for i in range(100)
    ]
    outcomes: list[list[bytes]] = []

    def feed(cache: Cache) -> None:
        batch = cache.batch(chunk_size=7)
        for command in nodes + pods:
            batch.add(command)
        outcomes.extend(result.reply[0] for result in batch.execute())

    threads = [threading.Thread(target=feed, args=(cache,)) for cache in feeders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(b"applied") == 120 and outcomes.count(b"dropped") == 120
    events = [e.type for e in feeders[0].events()]
    assert events.count("NodeAdded") == 20 and events.count("PodAdded") == 100
    assert feeders[0].pod_count() == 100


@pytest.mark.parametrize("op", ["set", "queue", "delete"])
def test_a_rejected_versioned_change_writes_nothing(cache, op):
    """A change refused by a malformed argument writes no version: nothing to resend over."""
    args = {"set": ("5", "set", "u1", "n1", b"\xc1", ""), "queue": ("5", "queue", "u1")}
    command = Command("sync_pod", "pod u1", args.get(op, ("x5", "delete", "u1")))
    before = state(cache)
    with pytest.raises(Exception):  # noqa: B017 (any refusal)
        cache.run(command)
    assert state(cache) == before


def test_settling_groups_of_versioned_changes_applied_before_writes_nothing(cache):
    """``CommandBatch.settle`` of groups Redis applied (their reply lost): a versioned-only
    group is answered "dropped repeated", a mixed one with its first outcome; no write."""
    versioned = [commands.sync_node(make_node("n1"), "5"), commands.sync_node(make_node("n2"), "6")]
    mixed = [
        commands.sync_pod(make_pod("web-0", "n1", "10m", "1Mi"), "7", True),
        commands.add_pod(make_pod("web-1", "n2", "10m", "1Mi")),
    ]
    batch = cache.batch(chunk_size=2)
    for command in versioned + mixed:
        batch.add(command)
    first = [result.reply for result in batch.execute()]
    before = state(cache)
    again = [result.reply for result in batch.settle([versioned, mixed])]
    assert state(cache) == before
    assert [reply[:2] for reply in again[:2]] == [[b"dropped", b"repeated"]] * 2
    assert again[2:] == first[2:]
