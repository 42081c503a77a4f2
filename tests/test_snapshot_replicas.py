"""Snapshots read from a replica (``read_from="replica"``): real replication, started here
(a primary with a replica, found by ``ROLE`` or by its Sentinel) and the session's Cluster
(its slot's replica). A snapshot fed from a replica equals one fed from the primary once the
replica caught up; writes still go to the primary; a replica behind the snapshot (its
replication paused with ``CLIENT PAUSE WRITE``, which stops it applying the primary's stream
while it still answers reads) never moves the snapshot back. fakeredis has no replica:
``read_from="replica"`` is refused there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache, Snapshot
from schedcache.cli.app import main
from schedcache.errors import ValidationError
from schedcache.store.connection import connect, embedded_client
from schedcache.views.snapshot import INLINE_NODES
from tests.apis import Blocking
from tests.factories import make_node, make_pod
from tests.servers import SentinelGroup, free_port, running
from tests.test_snapshot import assert_matches_fresh
from tests.test_snapshot_stream import churn, populated


@pytest.fixture(scope="module")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path_factory.mktemp("replicated"), fsync="no")
    with running(group) as started:
        yield started  # type: ignore[misc]


@pytest.fixture(params=["redis", "sentinel", "cluster"])
def primary_url(request: pytest.FixtureRequest) -> str:
    """A replicated primary: by its own URL (replicas found by ``ROLE``), through its
    Sentinel, or the Cluster's."""
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    group: SentinelGroup = request.getfixturevalue("sentinel_group")
    return (
        group.url if request.param == "sentinel" else f"redis://127.0.0.1:{group.primary().port}/0"
    )


@pytest.fixture
def primary(primary_url: str) -> Iterator[redis.Redis]:
    client = connect(primary_url)
    yield client  # type: ignore[misc]
    client.close()


@pytest.fixture(params=["sync", "async"])
def caches(
    primary: redis.Redis, primary_url: str, cache_name: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Cache, Cache]]:
    """(a cache reading the primary, the same cache reading a replica: a Cache, or an
    AsyncCache called through ``tests.apis.Blocking``)."""
    writer = Cache(primary, cache_name, replica="writer")
    reader = Cache(primary, cache_name, replica="reader", read_from="replica")
    blocking = None
    if request.param == "async":
        options = {"replica": "reader", "read_from": "replica"}
        blocking = Blocking(reader, primary_url, options)
    yield writer, blocking or reader  # type: ignore[misc]
    if blocking is not None:
        blocking.close_async()
    for cache in (writer, reader):
        if cache.lease is not None:
            cache.lease.stop(release=False)
    writer.clear()


def caught_up(cache: Cache) -> None:
    """Every replica has what the primary has (``WAIT``)."""
    assert cache.store.server().execute_command("WAIT", 1, 10_000) >= 1


def calls(server: redis.Redis, command: str) -> int:
    return int(server.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_snapshot_fed_from_a_replica_equals_one_fed_from_the_primary(caches):
    writer, reader = caches
    populated(writer)
    caught_up(writer)
    replica = reader.store.replicas.get()
    assert replica is not None
    reads_before = calls(replica, "fcall_ro")
    snap = Snapshot()
    reader.update_snapshot(snap)
    assert calls(replica, "fcall_ro") > reads_before  # the replica answered
    assert_matches_fresh(writer, snap)
    churn(writer)
    caught_up(writer)
    pages_before = calls(replica, "xrange")
    report = reader.update_snapshot(snap)
    assert report.events == 8 and report.fell_back == ""  # followed the replica's stream
    assert calls(replica, "xrange") > pages_before
    assert_matches_fresh(writer, snap)


def test_a_new_snapshot_of_many_nodes_reads_them_in_chunks_from_the_replica(caches):
    """Past ``INLINE_NODES`` changed nodes an update reads them in chunks (ahead, on a thread
    of its own, in the sync store) before its atomic round: all from the replica."""
    writer, reader = caches
    with writer.batch() as batch:
        for n in range(INLINE_NODES + 50):
            batch.add_node(make_node(f"n{n}", cpu="2", mem="2Gi"))
            batch.add_pod(make_pod(f"p{n}", f"n{n}", "100m", "1Mi"))
    caught_up(writer)
    replica = reader.store.replicas.get()
    reads_before = calls(replica, "fcall_ro")
    snap = Snapshot()
    reader.update_snapshot(snap)
    assert calls(replica, "fcall_ro") - reads_before >= 3  # chunks, then the atomic round
    assert_matches_fresh(writer, snap)


def test_writes_of_a_cache_reading_a_replica_go_to_the_primary(caches):
    writer, reader = caches
    replica = reader.store.replicas.get()
    replica.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")  # it sees nothing new
    try:
        reader.add_node(make_node("n0", cpu="2", mem="2Gi"))
        reader.add_pod(make_pod("p0", "n0", "500m", "1Mi"))
        reader.assume_pod(make_pod("p1", "n0", "500m", "1Mi"), check_fit=True)
        # Read back at the primary at once, while the replica has none of it.
        assert sorted(p.uid for p in writer.dump().nodes["n0"].pods) == ["p0", "p1"]
        assert reader.verify() == []
    finally:
        replica.execute_command("CLIENT", "UNPAUSE")


def test_a_lagging_replica_never_moves_a_snapshot_back(caches):
    writer, reader = caches
    populated(writer)
    caught_up(writer)
    replica = reader.store.replicas.get()
    replica.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        writer.add_pod(make_pod("ahead", "n0", "10m", "1Mi"))
        snap = Snapshot()
        writer.update_snapshot(snap)  # from the primary: ahead of the replica
        ahead = snap.generation
        writer.add_pod(make_pod("further", "n1", "10m", "1Mi"))
        asked = calls(replica, "fcall_ro")
        reader.update_snapshot(snap)
        assert calls(replica, "fcall_ro") == asked + 1  # the replica was asked first
        assert snap.generation == writer.generation() > ahead
        assert "further" in {p.uid for p in snap.get("n1").pods}
        assert_matches_fresh(writer, snap)
    finally:
        replica.execute_command("CLIENT", "UNPAUSE")
    caught_up(writer)
    reader.update_snapshot(snap)  # the replica again, caught up
    assert_matches_fresh(writer, snap)


def test_a_replica_that_does_not_answer_leaves_the_snapshot_to_the_primary(primary, cache_name):
    closed = f"redis://127.0.0.1:{free_port()}/0"
    writer = Cache(primary, cache_name)
    reader = Cache(primary, cache_name, read_from=closed)
    try:
        snap = populated(writer)
        writer.add_pod(make_pod("late", "n2", "10m", "1Mi"))
        reader.update_snapshot(snap)
        assert_matches_fresh(writer, snap)
        # It is not tried again at once: an unreachable replica would cost every update a
        # connect timeout.
        assert reader.store.replicas.get() is None
    finally:
        writer.clear()


def test_embedded_refuses_read_from_replica():
    """The embedded fakeredis has no replica: asked for one, a clear error, nothing written."""
    client = embedded_client()
    with pytest.raises(ValidationError) as error:
        Cache(client, "c", read_from="replica")
    assert error.value.field == "read_from" and "embedded" in str(error.value)
    assert client.keys("*") == []
    Cache(client, "c", read_from="primary").update_snapshot(Snapshot())


@pytest.mark.parametrize("value", ["secondary", "", "http://replica:6379", 1])
def test_a_bad_read_from_is_refused(value):
    with pytest.raises(ValidationError) as error:
        Cache(embedded_client(), "c", read_from=value)
    assert error.value.field == "read_from"


def test_cli_read_from_replica_works_on_a_replicated_primary(primary, cache_name, monkeypatch):
    monkeypatch.delenv("SCHEDCACHE_REDIS_URL", raising=False)
    writer = Cache(primary, cache_name)
    try:
        populated(writer)
        url = _url_of(primary)
        monkeypatch.setenv("SCHEDCACHE_READ_FROM", "replica")
        result = CliRunner().invoke(main, ["--redis", url, "--cache", cache_name, "stats"])
        assert result.exit_code == 0, result.output
    finally:
        writer.clear()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--read-from", "secondary"], "--read-from"),
        (["--read-from", "replica"], "embedded fakeredis has no replicas"),
    ],
)
def test_cli_read_from_refusals_are_one_line(args, message, monkeypatch):
    monkeypatch.delenv("SCHEDCACHE_REDIS_URL", raising=False)
    result = CliRunner().invoke(main, [*args, "stats"])
    assert result.exit_code != 0 and message in result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output


def _url_of(client: redis.Redis) -> str:
    """The URL a test's primary client was made from (for the CLI)."""
    if hasattr(client, "nodes_manager"):
        node = client.get_default_node()
        return f"redis+cluster://{node.host}:{node.port}"
    kwargs = client.connection_pool.connection_kwargs
    if "host" not in kwargs:  # Sentinel-managed: its Sentinels
        sentinels = client.connection_pool.sentinel_manager.sentinels
        hosts = ",".join(
            "{host}:{port}".format(**s.connection_pool.connection_kwargs) for s in sentinels
        )
        return f"redis+sentinel://{hosts}/{client.connection_pool.service_name}"
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"
