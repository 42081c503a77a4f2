"""Replica leases: the unfinished claims of a replica that died are forgotten; a live
replica's are not."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from schedcache import Cache
from schedcache.ops.expiry import ExpiryWorker
from tests.conftest import REAL_REDIS_URL
from tests.factories import make_node, make_pod

ROOT = Path(__file__).resolve().parent.parent


def claim_four(cache: Cache) -> list:
    cache.add_node(make_node("n1", "4", "1Gi"))
    pods = [make_pod(f"p{i}", "n1", "100m", "1Mi") for i in range(4)]
    for pod in pods:
        cache.assume_pod(pod)
    cache.finish_binding(pods[0])  # bounded by its deadline from now on, not by the lease
    return pods


def forgotten_events(cache: Cache) -> list:
    return [e for e in cache.events() if e.type == "PodForgotten"]


def test_claims_of_a_replica_whose_lease_lapsed_are_forgotten(make_cache):
    replica = make_cache(ttl=600, replica="doomed", lease_ttl=0.3)  # renewed every 0.1 s
    claim_four(replica)
    worker = ExpiryWorker(make_cache(replica="expiry"))
    time.sleep(0.5)
    assert worker.run_once() == [] and worker.forgotten_total == 0  # alive: heartbeating
    replica.lease.stop(release=False)  # the replica dies: no more heartbeats
    time.sleep(0.5)
    worker.run_once()
    assert worker.forgotten_total == 3
    events = forgotten_events(replica)
    assert {e.uid for e in events} == {"p1", "p2", "p3"}
    assert {(e.fields["reason"], e.fields["owner"], e.replica) for e in events} == {
        ("lease-expired", "doomed", "expiry")
    }
    assert replica.is_assumed_pod("p0")  # its binding finished: the deadline decides
    assert replica.get_node_info("n1").requested.milli_cpu == 100


def test_without_a_lease_claims_are_never_forgotten(make_cache):
    replica = make_cache(ttl=600, replica="no-lease", lease_ttl=0)
    claim_four(replica)
    worker = ExpiryWorker(make_cache(replica="expiry"))
    worker.run_once()
    assert worker.forgotten_total == 0 and replica.pod_count() == 4


def test_confirmed_and_forgotten_pods_leave_the_claims(make_cache):
    replica = make_cache(ttl=600, replica="r1")
    pods = claim_four(replica)
    replica.add_pod(pods[1])
    replica.forget_pod(pods[2])
    assert replica.client.smembers(f"{replica.keys.prefix}replicapods:r1") == {b"p3"}
    replica.close(release_lease=True)  # give the claims up at once
    ExpiryWorker(make_cache(replica="expiry")).run_once()
    assert {e.uid for e in forgotten_events(replica) if "reason" in e.fields} == {"p3"}


def test_killed_replica_process_on_real_redis():
    client = redis.Redis.from_url(REAL_REDIS_URL)
    cache = Cache(client, f"lease-{uuid.uuid4().hex[:8]}", ttl=600, replica="expiry")
    try:
        cache.add_node(make_node("n1", "4", "1Gi"))
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "lease_replica.py"), REAL_REDIS_URL, cache.name],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        worker = ExpiryWorker(cache)
        worker.run_once()
        assert worker.forgotten_total == 0  # alive
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        time.sleep(1.5)  # the 1 s lease lapses
        worker.run_once()
        assert worker.forgotten_total == 3
        assert cache.pod_count() == 1 and cache.is_assumed_pod("p0")
    finally:
        cache.clear()


def test_clear_stops_the_heartbeat_and_leaves_no_key(client: redis.Redis, cache_name: str):
    """The heartbeat used to re-create ``replicas`` (no expiry) after clear(): on a shared
    Redis, every test left one behind."""
    cache = Cache(client, cache_name, ttl=600, replica="beating", lease_ttl=0.3)
    claim_four(cache)
    time.sleep(0.25)  # the heartbeat (every 0.1 s) is running
    assert cache.lease is not None and cache.lease.thread is not None
    assert cache.clear() > 0
    time.sleep(0.4)  # several heartbeats' worth
    assert list(client.scan_iter(match=cache.keys.pattern, count=1000)) == []
    assert cache.lease.thread is None


def test_a_closed_lease_never_renews_again(make_cache):
    cache = make_cache(ttl=600, replica="closing", lease_ttl=0.3)
    claim_four(cache)
    cache.close()
    cache.client.delete(cache.lease.key, f"{cache.keys.prefix}replicas")
    time.sleep(0.4)
    assert cache.client.exists(cache.lease.key, f"{cache.keys.prefix}replicas") == 0
