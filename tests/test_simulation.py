"""Replica processes scheduling concurrently on real Redis never overcommit a node."""

from __future__ import annotations

import uuid

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli.app import main
from schedcache.sim.simulation import MODES, run_replicas
from tests.conftest import REAL_REDIS_URL


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_replicas_fill_the_cluster_without_overcommit(mode):
    name = f"sim-{uuid.uuid4().hex[:8]}"
    try:
        report = run_replicas(REAL_REDIS_URL, name, replicas=3, nodes=12, pods=500, mode=mode)
        assert report.overcommitted_nodes == []
        assert report.claimed + report.unschedulable == 500
        assert report.unschedulable > 0  # the cluster really filled up
        cache = Cache(redis.Redis.from_url(REAL_REDIS_URL), name)
        assert cache.pod_count() == report.claimed
        replicas = {e.replica for e in cache.events() if e.type == "PodAssumed"}
        assert replicas == {"sched-0", "sched-1", "sched-2"}
    finally:
        Cache(redis.Redis.from_url(REAL_REDIS_URL), name).clear()


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
