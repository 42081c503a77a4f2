"""Fit-checked claims: replicas deciding on stale snapshots never oversubscribe a node."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from schedcache import Cache, Snapshot
from schedcache.errors import FitConflict, ValidationError
from schedcache.store.metrics import FIT_CONFLICTS
from tests.conftest import REAL_REDIS_URL
from tests.factories import keyspace, make_node, make_pod, port

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

ROOT = Path(__file__).resolve().parent.parent


def small_node(name: str = "n1", **kwargs):
    return make_node(name, "1", "1Gi", pods="3", ephemeral="1Gi", **kwargs)


def test_claim_that_fits_is_applied(cache):
    cache.add_node(small_node())
    cache.assume_pod(make_pod("a", "n1", "500m", "512Mi"), check_fit=True)
    assert cache.is_assumed_pod("a")


@pytest.mark.parametrize(
    ("existing", "claim", "reasons"),
    [
        ([("a", "800m", "1Mi")], ("b", "300m", "1Mi"), ("cpu",)),
        ([("a", "100m", "900Mi")], ("b", "100m", "200Mi"), ("memory",)),
        ([("a", "900m", "1000Mi")], ("b", "200m", "100Mi"), ("cpu", "memory")),
        (
            [("a", "1m", "1Mi"), ("b", "1m", "1Mi"), ("c", "1m", "1Mi")],
            ("d", "1m", "1Mi"),
            ("pods",),
        ),
    ],
    ids=["cpu", "memory", "cpu and memory", "pod count"],
)
def test_claim_that_does_not_fit_is_refused_and_changes_nothing(cache, existing, claim, reasons):
    cache.add_node(small_node())
    for name, cpu, mem in existing:
        cache.add_pod(make_pod(name, "n1", cpu, mem))
    before = keyspace(cache.client, cache.keys.pattern)
    name, cpu, mem = claim
    with pytest.raises(FitConflict, match=r"cannot be assumed: node n1 no longer has room") as info:
        cache.assume_pod(make_pod(name, "n1", cpu, mem), check_fit=True)
    assert info.value.node == "n1" and info.value.reasons == reasons
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_ephemeral_storage_and_scalar_resources(cache):
    cache.add_node(small_node(extended={"example.com/gpu": "1"}))
    cache.add_pod(
        make_pod("a", "n1", "1m", "1Mi", ephemeral="900Mi", extended={"example.com/gpu": "1"})
    )
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(
            make_pod("b", "n1", "1m", "1Mi", ephemeral="200Mi", extended={"example.com/gpu": "1"}),
            check_fit=True,
        )
    assert set(info.value.reasons) == {"ephemeral-storage", "example.com/gpu"}


@pytest.mark.parametrize(
    ("used", "wanted", "conflict"),
    [
        (port(80), port(80), True),
        (port(80, "10.0.0.1"), port(80), True),  # 0.0.0.0 against any IP
        (port(80), port(80, "10.0.0.1"), True),
        (port(80, "10.0.0.1"), port(80, "10.0.0.1"), True),
        (port(80, "10.0.0.1"), port(80, "10.0.0.2"), False),
        (port(80), port(80, protocol="UDP"), False),
        (port(80), port(81), False),
        (port(8080, "10.0.0.1"), port(80), False),
        (port(180, "10.0.0.1"), port(80), False),
    ],
    ids=[
        "same",
        "any vs ip",
        "ip vs any",
        "same ip",
        "other ip",
        "other protocol",
        "other port",
        "any vs a port ending alike",
        "any vs a port ending alike 2",
    ],
)
def test_host_ports(cache, used, wanted, conflict):
    cache.add_node(small_node())
    cache.add_pod(make_pod("a", "n1", "1m", "1Mi", ports=[used]))
    claim = make_pod("b", "n1", "1m", "1Mi", ports=[wanted])
    if conflict:
        with pytest.raises(FitConflict) as info:
            cache.assume_pod(claim, check_fit=True)
        assert info.value.reasons[0].startswith("port:")
    else:
        cache.assume_pod(claim, check_fit=True)


def test_a_volume_claim_named_like_a_port_is_no_port(cache):
    """The wildcard host-port check searches the node's field names: only port fields count,
    whatever a claim's name holds."""
    cache.add_node(small_node())
    cache.add_pod(make_pod("a", "n1", "1m", "1Mi", pvcs=["data|TCP|80"]))
    cache.assume_pod(make_pod("b", "n1", "1m", "1Mi", ports=[port(80)]), check_fit=True)


def test_claim_on_a_missing_node_is_refused(cache):
    cache.add_pod(make_pod("a", "placeholder", "1m", "1Mi"))
    for node in ("nowhere", "placeholder"):
        with pytest.raises(FitConflict, match="no longer in the cache") as info:
            cache.assume_pod(make_pod("b", node, "1m", "1Mi"), check_fit=True)
        assert info.value.reasons == ("node-missing",)


def test_strict_claim_refuses_any_change_since_the_snapshot(cache):
    cache.add_node(small_node())
    snap = Snapshot()
    cache.update_snapshot(snap)
    seen = snap.get("n1").generation
    cache.add_pod(make_pod("other", "n1", "1m", "1Mi"))  # another replica got there first
    with pytest.raises(FitConflict, match="changed since the snapshot") as info:
        cache.assume_pod(make_pod("a", "n1", "1m", "1Mi"), expect_generation=seen)
    assert info.value.reasons == ("stale",)
    cache.update_snapshot(snap)
    cache.assume_pod(make_pod("a", "n1", "1m", "1Mi"), expect_generation=snap.get("n1").generation)


def test_both_modes_at_once_is_a_validation_error(cache):
    with pytest.raises(ValidationError, match="not both"):
        cache.assume_pod(make_pod("a", "n1"), check_fit=True, expect_generation=1)


def test_two_replicas_on_one_stale_snapshot(make_cache):
    first, second = make_cache(replica="sched-0"), make_cache(replica="sched-1")
    first.add_node(small_node())
    snapshots = [Snapshot(), Snapshot()]
    for cache, snap in zip((first, second), snapshots, strict=True):
        cache.update_snapshot(snap)
    pods = [make_pod("a", "", "700m", "1Mi"), make_pod("b", "", "700m", "1Mi")]
    for snap, pod in zip(snapshots, pods, strict=True):
        assert snap.get("n1").fits_pod(pod)  # each replica's own view says it fits
    first.assume_pod(pods[0].with_node("n1"), check_fit=True)
    before = FIT_CONFLICTS.labels("cpu")._value.get()
    with pytest.raises(FitConflict):
        second.assume_pod(pods[1].with_node("n1"), check_fit=True)
    assert FIT_CONFLICTS.labels("cpu")._value.get() == before + 1
    assert first.get_node_info("n1").requested.milli_cpu == 700


def test_batched_claims_report_conflicts_per_pod(cache):
    cache.add_node(small_node())
    batch = cache.batch()
    for i in range(3):
        batch.assume_pod(make_pod(f"p{i}", "n1", "400m", "1Mi"), check_fit=True)
    results = batch.execute()
    assert [r.ok for r in results] == [True, True, False]
    assert isinstance(results[2].error, FitConflict)


def test_replica_processes_never_oversubscribe_a_node():
    """Four processes on real Redis claim far more than fits; every node stays within bounds."""
    client = redis.Redis.from_url(REAL_REDIS_URL)
    cache = Cache(client, f"claims-{uuid.uuid4().hex[:8]}")
    try:
        for i in range(4):
            cache.add_node(make_node(f"n{i}", "2", "4Gi", pods="110"))  # 20 pods of 100m each
        command = [sys.executable, str(ROOT / "tests" / "claim_worker.py"), REAL_REDIS_URL]
        processes = [
            subprocess.Popen([*command, cache.name, f"r{k}", "40", "4"], stdout=subprocess.PIPE)
            for k in range(4)
        ]
        outputs = [p.communicate(timeout=120)[0].split() for p in processes]
        assert [p.returncode for p in processes] == [0, 0, 0, 0]
        claimed = sum(int(out[0]) for out in outputs)
        assert claimed == 80  # exactly what fits: 4 nodes x 2 CPU / 100m
        for info in cache.dump().nodes.values():
            assert info.requested.milli_cpu <= info.allocatable.milli_cpu
            assert info.requested.memory <= info.allocatable.memory
            assert len(info.pods) <= info.allocatable.allowed_pod_number
    finally:
        cache.clear()


def test_strict_claim_in_a_batch_sees_changes_earlier_in_the_batch(cache):
    """Found in review: inside sc_batch the node's generation is recorded only at the end."""
    cache.add_node(small_node())
    seen = cache.get_node_info("n1").generation
    batch = cache.batch()
    batch.add_pod(make_pod("x", "n1", "100m", "1Mi"))
    batch.assume_pod(make_pod("y", "n1", "1m", "1Mi"), expect_generation=seen)
    results = batch.execute()
    assert results[0].ok and isinstance(results[1].error, FitConflict)
    # The generation the earlier change gave the node is the current one: that claim holds.
    now = cache.get_node_info("n1").generation
    batch = cache.batch()
    batch.add_pod(make_pod("z", "n1", "100m", "1Mi"))
    batch.assume_pod(make_pod("y", "n1", "1m", "1Mi"), expect_generation=now + 1)
    results = batch.execute()
    assert results[0].ok and results[1].ok, results
    assert cache.get_node_info("n1").generation == now + 2
