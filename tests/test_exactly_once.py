"""Exactly-once commands: a retried command (same id) is answered with its first outcome."""

from __future__ import annotations

import uuid
from urllib.parse import urlparse

import pytest
import redis

from schedcache import Cache
from schedcache.errors import PodAlreadyExists
from schedcache.store import commands
from tests.conftest import REAL_REDIS_URL
from tests.factories import keyspace, make_node, make_pod
from tests.tcp_proxy import DroppingProxy


def event_types(cache: Cache) -> list[str]:
    return [event.type for event in cache.events()]


def test_the_same_command_twice_is_applied_once(cache):
    command = commands.add_pod(make_pod("web-0", "n1", "100m", "1Mi"))
    first = cache.run(command)
    assert cache.run(command) == first
    assert event_types(cache) == ["PodAdded"]
    with pytest.raises(PodAlreadyExists):  # a new command (new id) is a new attempt
        cache.add_pod(make_pod("web-0", "n1", "100m", "1Mi"))


def test_replies_of_every_shape_are_remembered(cache):
    cache.add_node(make_node("n1"))
    pod = make_pod("p", "n1", "10m", "1Mi")
    cache.assume_pod(pod)
    seconds, _ = cache.client.time()
    cache.finish_binding(pod, now=seconds - 100)
    cleanup = commands.cleanup_assumed_pods(None, 10)
    assert cache.run(cleanup) == [[b"p"], [], 0]
    assert cache.run(cleanup) == [[b"p"], [], 0]  # a nested list reply, answered again
    node_tree = cache.node_tree()
    assert node_tree.next() == "n1"


def test_a_rejected_command_is_not_remembered(cache):
    command = commands.remove_node("n1")
    before = keyspace(cache.client, cache.keys.pattern)
    for _ in range(2):
        with pytest.raises(KeyError):
            cache.run(command)
    assert keyspace(cache.client, cache.keys.pattern) == before
    cache.add_node(make_node("n1"))
    cache.run(command)  # the same id, now allowed: applied, since nothing was remembered
    assert cache.node_count() == 0


@pytest.fixture
def proxy():
    target = urlparse(REAL_REDIS_URL)
    proxy = DroppingProxy(target.hostname or "127.0.0.1", target.port or 6379)
    yield proxy
    proxy.close()


def proxied_cache(proxy: DroppingProxy, **options) -> Cache:
    client = redis.Redis(port=proxy.port, socket_timeout=5, **options)
    return Cache(client, f"x1-{uuid.uuid4().hex[:8]}", replica="proxied")


def test_lost_reply_is_retried_and_applied_once(proxy):
    cache = proxied_cache(proxy)
    try:
        proxy.drop_reply_after(b"sc_add_pod")
        cache.add_pod(make_pod("web-0", "n1", "100m", "1Mi"))  # no error: the retry is answered
        assert proxy.dropped == 1
        assert event_types(cache) == ["PodAdded"]
        assert cache.pod_count() == 1
    finally:
        cache.clear()


def test_without_a_command_id_the_retry_would_fail(proxy):
    """The control: the same lost reply, retried without an id, hits the applied state."""
    cache = proxied_cache(proxy)
    try:
        pod = make_pod("web-0", "n1", "100m", "1Mi")
        command = commands.add_pod(pod)
        proxy.drop_reply_after(b"sc_add_pod")
        anonymous = commands.Command(command.name, command.subject, command.args, id="")
        with pytest.raises(PodAlreadyExists):
            cache.run(anonymous)
        assert event_types(cache) == ["PodAdded"]
    finally:
        cache.clear()


def test_lost_batch_reply_is_resent_and_applied_once(proxy):
    cache = proxied_cache(proxy)
    try:
        pods = [make_pod(f"p{i}", "n1", "10m", "1Mi") for i in range(50)]
        proxy.drop_reply_after(b"sc_batch")
        batch = cache.batch(chunk_size=10)
        for pod in pods:
            batch.add_pod(pod)
        results = batch.execute()
        assert proxy.dropped == 1
        assert all(result.ok for result in results)
        assert event_types(cache).count("PodAdded") == 50
    finally:
        cache.clear()


# -- a feeder's changes: versioned, sent without an id (commands.VERSIONED) ----------------------


def remembered(cache: Cache) -> set[bytes]:
    """The cache's remembered replies (``cmd:<id>`` keys)."""
    return {key for key in keyspace(cache.client, cache.keys.pattern) if b":cmd:" in key}


def forgetting_remembered(cache: Cache) -> dict[bytes, object]:
    return {
        k: v for k, v in keyspace(cache.client, cache.keys.pattern).items() if b":cmd:" not in k
    }


def feeders_changes() -> list[commands.Command]:
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    return [commands.sync_node(make_node("n1"), "5"), commands.sync_pod(pod, "10", True)]


def test_a_feeders_change_leaves_no_remembered_reply_and_a_resend_writes_nothing(cache):
    """Issue 40: a change versioned by its resourceVersion is sent without its id, so Redis
    encodes and stores no reply for it (~39,000 instructions of a confirmation); a resend (a
    lost reply) is dropped as repeated by the version itself: nothing written, no event."""
    for command in feeders_changes():
        assert cache.run(command)[0] == b"applied"
    assert remembered(cache) == set()
    before, events = forgetting_remembered(cache), event_types(cache)
    for command in feeders_changes()[::-1] + feeders_changes():  # the same changes again
        assert cache.run(command)[:2] == [b"dropped", b"repeated"]
    assert forgetting_remembered(cache) == before and event_types(cache) == events
    assert events == ["NodeAdded", "PodAdded"] and remembered(cache) == set()


def test_a_batch_of_feeders_changes_is_remembered_only_with_another_command(cache):
    batch = cache.batch()
    for command in feeders_changes():
        batch.add(command)
    assert [result.reply[0] for result in batch.execute()] == [b"applied", b"applied"]
    assert remembered(cache) == set()  # versioned only: no id for the call
    batch.add(commands.sync_node(make_node("n2"), "6"))
    batch.add(commands.add_pod(make_pod("web-1", "n2", "100m", "1Mi")))  # not versioned
    assert all(result.ok for result in batch.execute())
    assert len(remembered(cache)) == 1  # the call's id, for add_pod's sake, as before


def test_a_lost_reply_of_a_feeders_batch_is_resent_and_applied_once(proxy):
    """The resend is answered "dropped repeated" (nothing remembered the first outcome), and
    the cache holds each change once: one event each."""
    cache = proxied_cache(proxy)
    try:
        proxy.drop_reply_after(b"sc_batch")
        batch = cache.batch()
        for command in feeders_changes():
            batch.add(command)
        results = batch.execute()
        assert proxy.dropped == 1
        assert [result.reply[:2] for result in results] == [[b"dropped", b"repeated"]] * 2
        assert event_types(cache) == ["NodeAdded", "PodAdded"] and cache.pod_count() == 1
        assert remembered(cache) == set()
    finally:
        cache.clear()
