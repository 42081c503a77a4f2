"""Snapshots: upstream's UpdateSnapshot scenarios, image spread, consistency and isolation.

After every step the incrementally updated snapshot must equal one built from scratch, list
its nodes in node-tree order, and agree with ``dump()`` on every live node.
"""

from __future__ import annotations

import contextlib

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from schedcache import Cache, Snapshot
from schedcache.errors import CacheError, NodeNotFound
from tests.factories import make_node, make_pod

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"foo": "bar"}}, "topologyKey": "foo"}
        ]
    }
}


def node(i: int, updated: bool = False, **kwargs):
    cpu, mem = ("2000m", "500m") if updated else ("1000m", "100m")
    return make_node(f"test-node{i}", cpu, mem, **kwargs)


def pod(i: int, updated: bool = False):
    return make_pod(
        f"test-pod{i}",
        f"test-node{i % 10}",
        namespace="test-ns",
        uid=f"test-puid{i}",
        priority=1000 if updated else None,
    )


def affinity_pod(i: int):
    return make_pod(f"p-affinity-{i}", f"test-node{i}", namespace="test-ns", affinity=AFFINITY)


def pvc_pod(i: int):
    return make_pod(
        f"p-pvc-{i}", f"test-node{i % 2}", namespace="test-ns", pvcs=[f"test-pvc{i % 4}"]
    )


def assert_matches_fresh(cache: Cache, snap: Snapshot) -> None:
    fresh = Snapshot()
    cache.update_snapshot(fresh)
    assert snap.generation == fresh.generation == cache.generation()
    assert snap.node_infos == fresh.node_infos
    order = cache.node_tree().list()
    assert [info.name for info in snap.node_info_list] == order
    assert [info.name for info in fresh.node_info_list] == order
    assert all(info is snap.node_infos[info.name] for info in snap.node_info_list)
    for attribute in ("have_pods_with_affinity_list", "have_pods_with_required_anti_affinity_list"):
        got = getattr(snap, attribute)
        assert [i.name for i in got] == [i.name for i in getattr(fresh, attribute)]
        assert all(info is snap.node_infos[info.name] for info in got)
    assert snap.used_pvc_set == fresh.used_pvc_set
    assert snap.num_nodes() == len(snap.node_infos)
    dump = cache.dump()
    live = {name: info for name, info in dump.nodes.items() if info.node is not None}
    assert snap.node_infos == live


def run(cache: Cache, snap: Snapshot, ops: str) -> None:
    """Runs upstream-style ops: add1 rm1 upd1 addPod1 updPod1 rmPod1 addAff0 rmAff0 addPVC0
    rmPVC0 snap."""
    actions = {
        "addPVC": lambda i: cache.add_pod(pvc_pod(i)),
        "rmPVC": lambda i: cache.remove_pod(pvc_pod(i)),
        "addAff": lambda i: cache.add_pod(affinity_pod(i)),
        "rmAff": lambda i: cache.remove_pod(affinity_pod(i)),
        "addPod": lambda i: cache.add_pod(pod(i)),
        "updPod": lambda i: cache.update_pod(pod(i), pod(i, updated=True)),
        "rmPod": lambda i: cache.remove_pod(pod(i)),
        "add": lambda i: cache.add_node(node(i)),
        "upd": lambda i: cache.update_node(node(i), node(i, updated=True)),
        "rm": lambda i: cache.remove_node(f"test-node{i}"),
    }
    for op in ops.split():
        if op == "snap":
            cache.update_snapshot(snap)
            assert_matches_fresh(cache, snap)
            continue
        for prefix, action in actions.items():
            if op.startswith(prefix) and op[len(prefix) :].isdigit():
                action(int(op[len(prefix) :]))
                break
        else:
            raise AssertionError(f"unknown op {op}")


UPSTREAM = {
    "empty cache": ("", [], 0, set()),
    "single node": ("add1", [1], 0, set()),
    "add node, remove it, add it again": ("add1 snap rm1 add1", [1], 0, set()),
    "add and remove in the same cycle, add again": ("add1 snap add2 rm1", [2], 0, set()),
    "snapshot in the middle": ("add0 snap add1 snap add2 snap add3", [0, 1, 2, 3], 0, set()),
    "snapshot in the end": ("add0 add2 add5 add6", [0, 2, 5, 6], 0, set()),
    "update some nodes": ("add0 add1 add5 snap upd1", [0, 1, 5], 0, set()),
    "remove all": ("add0 add2 add5 add6 snap rm0 rm2 rm5 rm6", [], 0, set()),
    "remove some": ("add0 add2 add5 add6 snap rm0 rm6", [2, 5], 0, set()),
    "remove all and add more": ("add2 add5 add6 snap rm2 rm5 rm6 snap add7 add9", [7, 9], 0, set()),
    "update nodes in particular order": ("add8 upd2 upd8 snap add1", [1, 2, 8], 0, set()),
    "add some nodes and some pods": ("add0 add2 add8 snap addPod8 addPod2", [0, 2, 8], 0, set()),
    "updating a pod": ("add0 addPod0 add2 add4 updPod0", [0, 2, 4], 0, set()),
    "add pod before its node": ("add0 addPod1 updPod1 add1", [0, 1], 0, set()),
    "remove node before its pods": (
        "add0 add1 addPod1 addPod11 snap rm1 snap updPod1 updPod11 rmPod1 rmPod11",
        [0],
        0,
        set(),
    ),
    "pods with affinity": ("add0 addAff0 snap add1", [0, 1], 1, set()),
    "pods with PVC": ("add0 addPVC0 snap add1", [0, 1], 0, {"test-pvc0"}),
    "multiple nodes with affinity pods": ("add0 addAff0 snap add1 addAff1 snap", [0, 1], 2, set()),
    "multiple nodes with PVC pods": (
        "add0 addPVC0 snap add1 addPVC1 snap",
        [0, 1],
        0,
        {"test-pvc0", "test-pvc1"},
    ),
    "add then remove affinity pods": ("add0 add1 addAff0 snap rmAff0 snap", [0, 1], 0, set()),
    "add then remove PVC pod": ("add0 addPVC0 snap rmPVC0 addPVC2 snap", [0], 0, {"test-pvc2"}),
    "remove PVC pod and add it again": (
        "add0 addPVC0 snap rmPVC0 addPVC0 snap",
        [0],
        0,
        {"test-pvc0"},
    ),
    "same PVC count, other claims": (
        "add0 add1 addPVC0 addPVC1 snap rmPVC0 rmPVC1 addPVC2 addPVC3 snap",
        [0, 1],
        0,
        {"test-pvc2", "test-pvc3"},
    ),
    "add and remove multiple PVC pods": (
        "add0 add1 addPVC0 addPVC1 addPVC2 snap rmPVC0 rmPVC1 snap addPVC0 snap "
        "addPVC3 addPVC4 addPVC5 snap rmPVC0 rmPVC3 rmPVC4 snap",
        [0, 1],
        0,
        {"test-pvc1", "test-pvc2"},
    ),
}


@pytest.mark.parametrize("case", UPSTREAM, ids=list(UPSTREAM))
def test_update_snapshot_upstream_scenarios(cache, case):
    ops, nodes, affinity_nodes, pvcs = UPSTREAM[case]
    snap = Snapshot()
    run(cache, snap, ops)
    cache.update_snapshot(snap)
    assert_matches_fresh(cache, snap)
    assert set(snap.node_infos) == {f"test-node{i}" for i in nodes}
    assert len(snap.have_pods_with_affinity_list) == affinity_nodes
    assert snap.used_pvc_set == {f"test-ns/{claim}" for claim in pvcs}


ZONE_A = {"topology.kubernetes.io/region": "region-0", "topology.kubernetes.io/zone": "zone-0"}
ZONE_B = {"topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": "zone-1"}


def zoned(i: int):
    return make_node(f"node-{i}", labels=ZONE_A if i < 2 else ZONE_B)


BUG_91601 = {
    "two nodes": ("add0 snap add1", [0, 1]),
    "update the snapshot and add two nodes in different zones": (
        "add2 add3 snap add4 add0",
        [2, 0, 3, 4],
    ),
    "6 nodes, one in a different zone": ("add2 add3 add4 add5 snap add6 add0", [2, 0, 3, 4, 5, 6]),
    "7 nodes, two in a different zone": (
        "add2 snap add3 add4 snap add5 add6 add0 add1",
        [2, 0, 3, 1, 4, 5, 6],
    ),
    "7 nodes, two in a different zone, different zone order": (
        "add2 add1 snap add3 add4 snap add5 add6 add0",
        [2, 1, 3, 0, 4, 5, 6],
    ),
}


@pytest.mark.parametrize("case", BUG_91601, ids=list(BUG_91601))
def test_node_info_list_with_uneven_zones(cache, case):
    """Upstream bug #91601: a cursor-built list duplicated some nodes and dropped others."""
    ops, expected = BUG_91601[case]
    snap = Snapshot()
    for op in ops.split():
        if op == "snap":
            cache.update_snapshot(snap)
        else:
            cache.add_node(zoned(int(op[3:])))
    cache.update_snapshot(snap)
    assert [info.name for info in snap.node_info_list] == [f"node-{i}" for i in expected]
    assert_matches_fresh(cache, snap)


def test_image_spread_is_current_on_every_node(cache):
    mib = 1024 * 1024
    set1 = [(["gcr.io/80:latest", "gcr.io/80:v1"], 80 * mib), (["gcr.io/300:latest"], 300 * mib)]
    set2 = [(["gcr.io/600:latest"], 600 * mib), (["gcr.io/80:latest"], 80 * mib)]
    snap = Snapshot()
    cache.add_node(make_node("n1", images=set1))
    cache.update_snapshot(snap)
    assert snap.get("n1").image_states["gcr.io/80:latest"].num_nodes == 1
    cache.add_node(make_node("n2", images=set2))
    cache.add_node(make_node("n3", images=set1))
    cache.update_snapshot(snap)
    # n1 did not change, but the spread of its images did: it must see it.
    assert snap.get("n1").image_states["gcr.io/80:latest"].num_nodes == 3
    assert snap.get("n1").image_states["gcr.io/300:latest"].num_nodes == 2
    assert (
        snap.get("n2").image_states["gcr.io/80:latest"]
        == snap.get("n1").image_states["gcr.io/80:latest"]
    )
    assert_matches_fresh(cache, snap)
    cache.update_node(None, make_node("n3", images=set2))
    cache.remove_node("n2")
    cache.update_snapshot(snap)
    assert snap.get("n1").image_states["gcr.io/300:latest"].num_nodes == 1
    assert snap.get("n1").image_states["gcr.io/80:latest"].num_nodes == 2
    assert snap.get("n3").image_states["gcr.io/600:latest"].num_nodes == 1
    assert "gcr.io/300:latest" not in snap.get("n3").image_states
    assert_matches_fresh(cache, snap)


def test_ghosts_and_placeholders_never_appear(cache):
    cache.add_node(node(0))
    cache.add_pod(pod(1))  # placeholder test-node1
    cache.add_pod(pod(0))
    cache.remove_node("test-node0")  # ghost
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.node_infos == {}
    with pytest.raises(NodeNotFound, match="nodeinfo not found for node name test-node0"):
        snap.get("test-node0")


def test_unchanged_cache_keeps_generation_and_list(cache):
    cache.add_node(node(0))
    snap = Snapshot()
    cache.update_snapshot(snap)
    listed = snap.node_info_list
    report = cache.update_snapshot(snap)
    assert report.changed_nodes == 0 and not report.list_rebuilt
    assert snap.node_info_list is listed
    other = Snapshot()
    cache.update_snapshot(other)
    assert other.generation == snap.generation


def test_update_fetches_only_changed_nodes(cache):
    with cache.batch() as batch:
        for i in range(50):
            batch.add_node(make_node(f"n{i}"))
    snap = Snapshot()
    assert cache.update_snapshot(snap).changed_nodes == 50
    cache.add_pod(make_pod("p", "n7", "100m", "1Mi"))
    cache.update_node(None, make_node("n9", "2"))
    report = cache.update_snapshot(snap)
    assert report.changed_nodes == 2
    assert not report.list_rebuilt  # membership did not change
    assert snap.get("n7").requested.milli_cpu == 100
    assert_matches_fresh(cache, snap)


def test_inconsistent_snapshot_is_rebuilt_in_the_same_call(cache, caplog):
    for i in range(3):
        cache.add_node(node(i))
    snap = Snapshot()
    cache.update_snapshot(snap)
    del snap.node_infos["test-node1"]  # what a bug (or a careless caller) would leave
    report = cache.update_snapshot(snap)
    assert report.inconsistent
    assert "snapshot state is not consistent" in caplog.text
    assert_matches_fresh(cache, snap)
    snap.node_infos["bogus"] = snap.node_infos["test-node0"]
    assert cache.update_snapshot(snap).inconsistent
    assert_matches_fresh(cache, snap)


def test_snapshots_share_nothing_with_each_other(cache):
    cache.add_node(make_node("n1", images=[(["img"], 10)]))
    cache.add_pod(make_pod("p", "n1", "100m", "1Mi", labels={"app": "web"}, pvcs=["c"]))
    first, second = Snapshot(), Snapshot()
    cache.update_snapshot(first)
    cache.update_snapshot(second)
    info = first.get("n1")
    info.pods[0].labels["app"] = "changed"
    info.pods.clear()
    info.pvc_ref_counts["node_info_cache_test/c"] = 99
    info.image_states.clear()
    info.used_ports.add(("0.0.0.0", "TCP", 1))
    untouched = second.get("n1")
    assert untouched.pods[0].labels == {"app": "web"}
    assert untouched.pvc_ref_counts == {"node_info_cache_test/c": 1}
    assert untouched.image_states["img"].num_nodes == 1
    assert untouched.used_ports == set()
    assert cache.get_node_info("n1").pods[0].labels == {"app": "web"}


def test_far_behind_snapshot_catches_up_in_chunks(cache):
    from schedcache.views import snapshot as snapshot_module

    with cache.batch() as batch:
        for i in range(snapshot_module.INLINE_NODES + 30):
            batch.add_node(make_node(f"n{i}"))
            batch.add_pod(make_pod(f"p{i}", f"n{i}", "10m", "1Mi"))
    snap = Snapshot()
    report = cache.update_snapshot(snap)
    assert report.rounds == 2  # chunked read, then an atomic catch-up
    assert_matches_fresh(cache, snap)


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "upd", "rm", "addPod", "updPod", "rmPod", "addAff", "rmAff", "addPVC", "snap"]
        ),
        st.integers(0, 3),
    ),
    max_size=25,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_random_commands_and_updates_match_a_fresh_snapshot(make_cache, ops):
    cache = make_cache(name=f"hyp-{abs(hash(tuple(ops))) % 10**9}")
    cache.clear()
    snap = Snapshot()
    for op, i in ops:
        # An op illegal in that state (removing an absent node...) is rejected and changes nothing.
        with contextlib.suppress(CacheError):
            run(cache, snap, f"{op}{i}" if op != "snap" else "snap")
    cache.update_snapshot(snap)
    assert_matches_fresh(cache, snap)


def test_an_image_that_leaves_every_node_and_returns_elsewhere(cache):
    """Found in review: the snapshot's image index kept a removed node (KeyError after)."""
    image = [(["img-x"], 10)]
    cache.add_node(make_node("n0", images=image))
    cache.add_node(make_node("n1"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.remove_node("n0")
    cache.update_snapshot(snap)
    cache.update_node(None, make_node("n1", images=image))
    cache.update_snapshot(snap)
    assert_matches_fresh(cache, snap)
    cache.update_node(None, make_node("n1"))
    cache.add_node(make_node("n0", images=image))
    cache.update_snapshot(snap)
    assert_matches_fresh(cache, snap)


def test_a_full_build_decodes_pods_only_when_they_are_used(cache, monkeypatch):
    """Aggregates come from the node hashes; a node's pods are decoded when read, once, and
    then equal what dump() decodes. Affinity lists stay right without decoding (the node
    hash counts such pods)."""
    import schedcache.store.fetch as fetch

    decoded: list[bytes] = []
    real = fetch.record_pod

    def counting(raw: bytes):
        decoded.append(raw)
        return real(raw)

    for i in range(3):
        cache.add_node(node(i))
    for i in range(6):
        cache.add_pod(make_pod(f"p{i}", f"test-node{i % 3}", "10m", "1Mi"))
    cache.add_pod(make_pod("aff", "test-node2", "10m", "1Mi", affinity=AFFINITY))
    dump = cache.dump()
    assert sum(len(info.pods) for info in dump.nodes.values()) == 7  # (dump is lazy too)
    monkeypatch.setattr(fetch, "record_pod", counting)
    snap = Snapshot()
    cache.update_snapshot(snap)
    # Only test-node2's pods: the affinity lists need the one with affinity.
    assert sorted(raw.split(b" ")[1] for raw in decoded) == [b"test-node2"] * 3
    assert [i.name for i in snap.have_pods_with_affinity_list] == ["test-node2"]
    assert snap.have_pods_with_required_anti_affinity_list == []
    first = snap.node_infos["test-node0"]
    assert first.pod_count == 2 and len(decoded) == 3
    assert first.requested == dump.nodes["test-node0"].requested
    assert first.pods == dump.nodes["test-node0"].pods
    assert len(decoded) == 5
    assert first.pods is first.pods and len(decoded) == 5  # decoded once
    for name, info in snap.node_infos.items():
        assert info == dump.nodes[name]


def test_a_corrupt_pod_blob_is_refused_when_the_pods_are_read(cache):
    """A pod record whose header is sound but whose object is not: the node's aggregates are
    still read (they are stored as such); its pods raise CorruptRecord naming the record."""
    from schedcache.errors import CorruptRecord

    cache.add_node(node(1))
    cache.add_pod(make_pod("p1", "test-node1", "10m", "1Mi"))
    key = cache.keys.prefix + "pod:p1"
    raw = cache.client.get(key)
    cache.client.set(key, raw[: raw.index(b"\n") + 1] + b"\xc1not msgpack")
    snap = Snapshot()
    cache.update_snapshot(snap)
    info = snap.node_infos["test-node1"]
    assert info.requested.milli_cpu == 10
    with pytest.raises(CorruptRecord, match="pod record"):
        _ = info.pods


def test_threads_sharing_a_snapshot_decode_each_node_once(cache):
    """Lazily decoded pods: threads reading the same node at once get one list, not a race."""
    from concurrent.futures import ThreadPoolExecutor

    cache.add_node(node(1))
    for i in range(50):
        cache.add_pod(make_pod(f"p{i}", "test-node1", "1m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    info = snap.node_infos["test-node1"]
    with ThreadPoolExecutor(8) as pool:
        lists = list(pool.map(lambda _: info.pods, range(64)))
    assert all(found is lists[0] for found in lists) and len(lists[0]) == 50


def test_a_snapshot_node_pickles_and_copies_before_its_pods_are_read(cache):
    """Lazily decoded pods travel like any NodeInfo (multiprocessing, caches): decoded first."""
    import copy
    import pickle

    cache.add_node(node(1))
    cache.add_pod(make_pod("p1", "test-node1", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    info = snap.node_infos["test-node1"]
    for twin in (pickle.loads(pickle.dumps(info)), copy.copy(info), copy.deepcopy(info)):
        assert twin == info and [p.name for p in twin.pods] == ["p1"]


def test_refresh_nodes_after_a_reset_reads_the_new_pods(cache):
    """A refresh checks no incarnation, so it must not reuse a pod decoded before a reset by
    its placement generation (generations are handed out again after one)."""
    from schedcache.views.snapshot import refresh_nodes

    cache.add_node(make_node("n1"))
    cache.add_pod(make_pod("old-pod", "n1", "100m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert [p.name for p in snap.get("n1").pods] == ["old-pod"]
    cache.clear()
    cache.add_node(make_node("n1"))
    cache.add_pod(make_pod("new-pod", "n1", "100m", "1Mi"))
    refresh_nodes(cache.store, snap, ["n1"])
    assert [p.name for p in snap.get("n1").pods] == ["new-pod"]


def test_a_corrupt_affinity_pod_on_a_new_node_refuses_every_update(cache):
    """The pods the affinity lists need are decoded before the snapshot moves to the new
    generation: a corrupt one is refused by every update, none half-applies it."""
    from schedcache.errors import CorruptRecord

    cache.add_node(node(1))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.add_node(node(2))
    cache.add_pod(make_pod("a", "test-node2", "10m", "1Mi", affinity=AFFINITY))
    key = cache.keys.prefix + "pod:a"
    raw = cache.client.get(key)
    cache.client.set(key, raw[: raw.index(b"\n") + 1] + b"\xc1junk")
    generation = snap.generation
    snap.last_id = None  # caught up from generations: following the stream reads no record
    for _ in range(2):
        with pytest.raises(CorruptRecord, match="pod record"):
            cache.update_snapshot(snap)
        assert snap.generation == generation
