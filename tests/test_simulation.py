"""Replica processes scheduling concurrently on real Redis never overcommit a node."""

from __future__ import annotations

import multiprocessing
import threading
import uuid

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache, Snapshot
from schedcache.cli.app import main
from schedcache.errors import CacheError
from schedcache.sim.processes import ReplicaProcesses
from schedcache.sim.simulation import MODES, run_replicas
from schedcache.store.connection import ConnectionFailed, NoAnswer
from schedcache.views.snapshot import changed_since, refresh_nodes
from tests.conftest import REAL_REDIS_URL
from tests.factories import make_node, make_pod
from tests.servers import Server, free_port


@pytest.mark.parametrize("refresh_every", [1, 64])
@pytest.mark.parametrize("mode", MODES)
def test_concurrent_replicas_fill_the_cluster_without_overcommit(mode, refresh_every):
    name = f"sim-{uuid.uuid4().hex[:8]}"
    try:
        report = run_replicas(
            REAL_REDIS_URL,
            name,
            replicas=3,
            nodes=12,
            pods=500,
            mode=mode,
            refresh_every=refresh_every,
        )
        assert report.overcommitted_nodes == []
        assert report.claimed + report.unschedulable == 500
        assert report.unschedulable > 0  # the cluster really filled up
        assert report.refresh_every == refresh_every
        assert report.redis_cores is not None and report.redis_cores > 0
        assert report.client_cores > 0 and report.nodes_read_per_claim > 0
        assert report.machine_cores is not None and report.machine_cores >= report.client_cores
        updates = sum(r.snapshot_updates for r in report.replicas)
        if refresh_every == 1:  # before every pod, as kube-scheduler
            assert updates >= report.claimed + report.unschedulable - len(report.replicas)
        elif mode == "fit":  # every 64 pods, and to be sure before calling a pod unschedulable
            assert updates <= 500 // 64 + len(report.replicas) + report.unschedulable
        else:  # also when every node was changed since (12 nodes: often)
            assert updates < report.claimed + report.unschedulable
        cache = Cache(redis.Redis.from_url(REAL_REDIS_URL), name)
        assert cache.pod_count() == report.claimed
        replicas = {e.replica for e in cache.events() if e.type == "PodAssumed"}
        assert replicas == {"sched-0", "sched-1", "sched-2"}
    finally:
        Cache(redis.Redis.from_url(REAL_REDIS_URL), name).clear()


def test_run_replicas_refuses_a_refresh_interval_below_one():
    with pytest.raises(ValueError, match="refresh_every"):
        run_replicas(
            REAL_REDIS_URL, "unused", replicas=1, nodes=1, pods=1, mode="fit", refresh_every=0
        )


def test_refresh_nodes_reads_just_those_nodes_into_the_snapshot():
    cache = Cache(redis.Redis.from_url(REAL_REDIS_URL), f"sim-{uuid.uuid4().hex[:8]}")
    try:
        for i in range(4):
            cache.add_node(make_node(f"n{i}", "4", "8Gi"))
        snap = Snapshot()
        cache.update_snapshot(snap)
        generation, n1, n2 = snap.generation, snap.get("n1"), snap.get("n2")
        cache.add_pod(make_pod("p1", "n1", "1", "1Gi"))
        cache.add_pod(make_pod("p2", "n2", "1", "1Gi"))
        cache.remove_node("n3")

        assert sorted(changed_since(cache.store, snap)) == ["n1", "n2", "n3"]  # names only
        assert snap.generation == generation and snap.get("n1").pods == []
        update = refresh_nodes(cache.store, snap, ["n1", "n3"])

        assert update.changed_nodes == 2
        assert snap.get("n1") is n1  # in place: the list holds the same objects
        assert [p.name for p in n1.pods] == ["p1"] and n1.requested.milli_cpu == 1000
        assert n2.pods == [] and n2.generation < n1.generation  # not asked for: as it was
        assert "n3" not in snap.node_infos
        assert [i.name for i in snap.node_info_list] == ["n0", "n1", "n2"]
        assert snap.generation == generation  # the rest is still at the old generation
        cache.update_snapshot(snap)  # catches up the rest (and n1 again)
        fresh = Snapshot()
        cache.update_snapshot(fresh)
        assert snap.generation == fresh.generation
        assert {name: (i.generation, i.requested) for name, i in snap.node_infos.items()} == {
            name: (i.generation, i.requested) for name, i in fresh.node_infos.items()
        }
    finally:
        cache.clear()


def test_demo_with_redis_runs_replica_processes():
    name = f"sim-{uuid.uuid4().hex[:8]}"
    try:
        result = CliRunner().invoke(
            main,
            ["--redis", REAL_REDIS_URL, "--cache", name, "demo", "--replicas", "2", "--pods", "60"],
        )
        assert result.exit_code == 0, result.output
        assert "2 replica processes, fit claims" in result.output
        assert "overcommitted nodes" in result.output
    finally:
        Cache(redis.Redis.from_url(REAL_REDIS_URL), name).clear()


def test_demo_with_redis_refuses_to_keep_a_cache_it_would_clear():
    result = CliRunner().invoke(
        main, ["--redis", REAL_REDIS_URL, "--cache", "anything", "demo", "--keep"]
    )
    assert result.exit_code == 2 and "--keep" in result.output


def test_demo_with_redis_assumes_with_the_given_ttl():
    name = f"sim-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REAL_REDIS_URL)
    try:
        result = CliRunner().invoke(
            main,
            ["demo", "--redis", REAL_REDIS_URL, "--cache", name, "--pods", "20", "--ttl", "120"],
        )
        assert result.exit_code == 0, result.output
        cache = Cache(client, name)
        seconds, micro = client.time()
        now = seconds + micro / 1e6
        deadlines = [
            score / 1000 - now
            for _, score in client.zrange(cache.keys.deadlines, 0, -1, withscores=True)
        ]
        assert len(deadlines) == cache.pod_count() == 20
        assert all(100 < left <= 120 for left in deadlines), deadlines
    finally:
        Cache(client, name).clear()


def test_a_replica_that_cannot_start_ends_the_run_at_once_with_its_error(tmp_path):
    """Found in review: Redis gone while the replica processes start (here: refusing their
    connections, past maxclients) left the caller at the start barrier for STARTUP_SECONDS (5
    minutes) before `demo` said so. A replica that fails to start now breaks the barrier, and
    the run raises its error at once."""
    server = Server(free_port(), tmp_path / "redis", ["--maxclients", "3"]).start()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            run_replicas(
                f"redis://127.0.0.1:{server.port}/0",
                "sim-refused",
                replicas=4,
                nodes=4,
                pods=40,
                mode="fit",
            )
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        runner.join(timeout=60)  # (5 minutes before)
        assert outcome, "the run still waits for replicas that could not start"
        (error,) = outcome
        assert isinstance(error, ConnectionFailed), repr(error)
        assert "max number of clients" in str(error)
    finally:
        server.kill()


def _raises_no_answer(*, start=None):
    """A replica that fails with an error whose class does not rebuild from its message."""
    raise NoAnswer("redis://127.0.0.1:1/0", 5.0)


def test_a_replicas_error_that_does_not_cross_processes_comes_back_as_its_text():
    """(Found in review of the replica processes: NoAnswer takes other arguments than its
    message, so it does not unpickle; the run raises its text, not "did not read".)"""
    context = multiprocessing.get_context("spawn")
    processes = ReplicaProcesses(context, _raises_no_answer, [()], ["sched-0"])
    with processes, pytest.raises(CacheError, match=r"replica sched-0: NoAnswer: Redis at .* did"):
        processes.wait_for_start(60)
