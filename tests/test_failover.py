"""Failover: the primary that holds a cache is SIGKILLed under load; a replica takes over and
clients carry on by themselves. With ``wait_replicas=1`` a command is acknowledged only once
a replica has it, so no acknowledged command may be lost, and command ids keep every resent
command from being applied twice.

The promoted replica has no replica of its own until the killed server comes back (restarted
here once the failover is seen, as an orchestrator would): commands sent in between are
applied but answered with ``NotReplicated``, which is the honest answer and is counted apart.

Each test starts its own servers (``tests/servers.py``): a 3-primary, 3-replica Redis Cluster,
or a primary, a replica and a Sentinel. Real Redis only: fakeredis has no process to kill.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from schedcache import Cache, connect
from schedcache.errors import NotReplicated
from schedcache.history.retention import retain, run_retention
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store.batch import BatchFailed
from schedcache.store.retry import RetryPolicy
from tests.apis import Blocking
from tests.factories import make_pod
from tests.load import Load, add_nodes, applied_twice
from tests.servers import Cluster, SentinelGroup, Server, wait_until

# Long enough for a failover: node timeout (1 s) + election, or down-after (1 s) + election.
FAILOVER_RETRY = RetryPolicy(attempts=100, within=30.0, max_delay=0.5)


def assert_nothing_lost_or_doubled(cache: Cache, load: Load) -> None:
    assert load.failed == [], "no caller may see another error while a failover completes"
    stored = {pod.uid for pod in cache.list_pods()}
    assert set(load.acknowledged) <= stored, f"lost: {set(load.acknowledged) - stored}"
    # Writes answered NotReplicated are not promised: one the old primary applied while its
    # replica lagged past wait_timeout (a loaded CI machine) dies with it. Whatever became of
    # them, none is applied twice (below) and the cache is consistent.
    assert applied_twice(cache) == []
    assert cache.verify() == []


def test_cluster_failover_of_the_caches_primary_under_load(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, node_timeout=1000).start()
    try:
        cache = Cache(
            connect(cluster.url),
            "failover",
            ttl=1,
            replica="r1",
            retry=FAILOVER_RETRY,
            wait_replicas=1,
        )
        other = Cache(connect(cluster.url), "bystander", replica="r2", retry=FAILOVER_RETRY)
        add_nodes(cache)
        add_nodes(other)
        expiring = make_pod("expiring", "n0", "1m", "1Ki")
        cache.assume_pod(expiring)
        cache.finish_binding(expiring)  # expires 1 s later: after the failover
        worker = ExpiryWorker(cache, interval=0.2)
        worker_thread = threading.Thread(target=worker.run, daemon=True)
        worker_thread.start()

        primary = cluster.primary_of(cache.keys.prefix)
        with Load(cache) as load:
            load.wait_for(200)
            killed_at = time.monotonic()
            primary.kill()
            wait_until(
                lambda: cluster.primary_of(cache.keys.prefix).port != primary.port,
                timeout=30,
                what="a replica takes over the slot",
            )
            primary.start()  # rejoins as the new primary's replica
            load.wait_for(200)
        worker.stop()
        worker_thread.join(timeout=10)

        assert_nothing_lost_or_doubled(cache, load)
        assert not worker_thread.is_alive()
        assert cache.pod_state("expiring") is None, "the worker carried on and expired it"
        assert load.recovery_after(killed_at) < FAILOVER_RETRY.within
        # A cache whose slot is on another primary never noticed.
        other.add_pod(make_pod("after", "n0", "1m", "1Ki"))
        assert other.pod_count() == 1 and other.verify() == []
    finally:
        cluster.stop()


def test_sentinel_failover_under_load(tmp_path: Path) -> None:
    group = SentinelGroup(tmp_path, replicas=1, sentinels=1, down_after=1000).start()
    try:
        cache = Cache(
            connect(group.url), "failover", replica="r1", retry=FAILOVER_RETRY, wait_replicas=1
        )
        add_nodes(cache)
        primary = group.primary()
        with Load(cache) as load:
            load.wait_for(200)
            killed_at = time.monotonic()
            primary.kill()
            wait_until(
                lambda: group.primary().port != primary.port,
                timeout=30,
                what="Sentinel promotes the replica",
            )
            primary.start()  # Sentinel makes it a replica of the new primary
            load.wait_for(200)
        assert_nothing_lost_or_doubled(cache, load)
        assert load.recovery_after(killed_at) < FAILOVER_RETRY.within
    finally:
        group.stop()


def test_without_a_live_replica_wait_reports_the_command_as_not_replicated(
    tmp_path: Path,
) -> None:
    """``wait_replicas`` is a promise: when no replica confirms, the caller is told, and the
    command is applied on the primary (its reply is kept on the error)."""
    group = SentinelGroup(tmp_path, replicas=1, sentinels=1, down_after=60000).start()
    try:
        cache = Cache(connect(group.url), "nowait", replica="r", wait_replicas=1, wait_timeout=0.2)
        add_nodes(cache)
        replica: Server = next(s for s in group.servers if s is not group.primary())
        replica.kill()
        with pytest.raises(NotReplicated, match="only 0 of 1 replicas"):
            cache.add_pod(make_pod("lonely", "n0", "1m", "1Ki"))
        assert cache.pod_state("lonely") == "added"
        with pytest.raises(BatchFailed) as failed, cache.batch() as batch:
            batch.add_pod(make_pod("lonely-2", "n0", "1m", "1Ki"))
        [(refused, error)] = failed.value.failures
        assert [command.subject for command in refused] == [
            "pod node_info_cache_test/lonely-2 (uid lonely-2)"
        ]
        assert isinstance(error, NotReplicated)
        assert cache.pod_state("lonely-2") == "added"
    finally:
        group.stop()


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
def test_the_async_cache_rides_a_failover_under_load(kind: str, tmp_path: Path) -> None:
    """The same load through ``AsyncCache`` (redis.asyncio's Sentinel and Cluster clients):
    the primary is killed, the retry policy carries the commands over, nothing acknowledged
    is lost and nothing is applied twice."""
    group: Cluster | SentinelGroup
    if kind == "cluster":
        group = Cluster(tmp_path, node_timeout=1000).start()
    else:
        group = SentinelGroup(tmp_path, replicas=1, sentinels=1, down_after=1000).start()
    blocking = None
    try:
        check = Cache(connect(group.url), "failover", replica="check", retry=FAILOVER_RETRY)
        add_nodes(check)
        options = {"replica": "r1", "retry": FAILOVER_RETRY, "wait_replicas": 1}
        blocking = Blocking(check, group.url, options)

        def primary() -> Server:
            if isinstance(group, Cluster):
                return group.primary_of(check.keys.prefix)
            return group.primary()

        killed = primary()
        with Load(blocking) as load:  # type: ignore[arg-type]
            load.wait_for(200)
            killed_at = time.monotonic()
            killed.kill()
            wait_until(
                lambda: primary().port != killed.port, timeout=30, what="a replica takes over"
            )
            killed.start()
            load.wait_for(200)
        assert_nothing_lost_or_doubled(check, load)
        assert load.recovery_after(killed_at) < FAILOVER_RETRY.within
    finally:
        if blocking is not None:
            blocking.close_async()
        group.stop()


def test_audit_after_a_manual_failover_follows_the_slot(tmp_path: Path) -> None:
    """A cache that sent nothing since its primary became a replica (``CLUSTER FAILOVER``):
    replay, verify, checkpoint and compact read the slot's primary directly, meet MOVED, ask
    the cluster again and answer, as commands do."""
    cluster = Cluster(tmp_path, node_timeout=1000).start()
    try:
        cache = Cache(connect(cluster.url), "audit", replica="r1", retry=FAILOVER_RETRY)
        add_nodes(cache)
        cache.add_pod(make_pod("p", "n0", "1m", "1Ki"))
        assert cache.verify() == []  # the route to the primary is cached now
        worker = Cache(connect(cluster.url), "audit", replica="retention")
        assert retain(worker.store, 3600).ran  # its route is cached too
        primary = cluster.primary_of(cache.keys.prefix)
        replica = next(
            server
            for server in cluster.servers
            if server.client().info("replication").get("master_port") == primary.port
        )
        replica.client().execute_command("CLUSTER FAILOVER")
        wait_until(
            lambda: cluster.primary_of(cache.keys.prefix).port == replica.port,
            timeout=30,
            what="the replica takes over by a manual failover",
        )
        assert cache.verify() == []
        assert cache.checkpoint() == cache.last_events(1)[0].id
        assert cache.compact() == 3 and len(cache.replay().nodes["n0"].pods) == 1
        # The retention worker's loop asks again after a MOVED round, and goes on.
        cache.add_pod(make_pod("q", "n0", "1m", "1Ki"))
        stop = threading.Event()
        rounds: list[int] = []
        thread = threading.Thread(
            target=lambda: rounds.append(run_retention(worker, 0, 0.1, stop, lease_seconds=0)),
            daemon=True,
        )
        thread.start()
        try:
            wait_until(lambda: cache.stream_length() == 1, timeout=10, what="the worker trims")
        finally:
            stop.set()
            thread.join(timeout=10)
        assert rounds and rounds[0] <= 1  # at most the round that met MOVED failed
    finally:
        cluster.stop()
