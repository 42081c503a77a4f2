"""Snapshot columns (issue 34): the vectorised filter and scores equal the per-node plugin code
over random clusters, follow the snapshot's changed nodes, and sample upstream's share of the
nodes from where the previous pod stopped. On every backend (the cluster is read from the cache
through a snapshot, as the reference scheduler reads it)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import ValidationError
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod, score_nodes
from schedcache.model.values import Node, Pod
from schedcache.views.columns import Columns, columnar, nodes_to_find, tie_rank
from tests.factories import make_node, make_pod, node_manifest, pod_manifest

TAINTS = [
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"},
    {"key": "slow", "value": "", "effect": "PreferNoSchedule"},
]


ANTI: dict[str, Any] = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
        ]
    }
}
PREFERRED: dict[str, Any] = {
    "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 5,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "topologyKey": "zone",
                },
            }
        ]
    }
}


def random_node(rng: random.Random, i: int) -> Node:
    manifest = node_manifest(
        f"n{i:03}",
        rng.choice(["1", "2", "4", "3500m"]),
        rng.choice(["2Gi", "4Gi", "8Gi"]),
        pods=rng.choice(["3", "5", "110"]),
        labels={"zone": f"z{i % 3}", "disk": rng.choice(["ssd", "hdd"])},
        images=[(["app:1"], 300_000_000)] if rng.random() < 0.3 else None,
    )
    spec: dict[str, Any] = {}
    if rng.random() < 0.3:
        spec["taints"] = rng.sample(TAINTS, rng.randint(1, 2))
    if rng.random() < 0.1:
        spec["unschedulable"] = True
    manifest["spec"] = spec
    return Node.from_k8s(manifest)


def random_pod(rng: random.Random, name: str, node: str) -> Pod:
    manifest = pod_manifest(
        name,
        node,
        rng.choice(["100m", "500m", "1", "1500m"]),
        rng.choice(["128Mi", "1Gi", "2Gi"]),
        uid=f"uid-{name}",
    )
    spec = manifest["spec"]
    spec["containers"][0]["image"] = rng.choice(["app:1", "pause"])
    if rng.random() < 0.4:
        spec["tolerations"] = [
            rng.choice([{"key": t["key"], "operator": "Exists"} for t in TAINTS])
        ]
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"disk": rng.choice(["ssd", "hdd"])}
    return Pod.from_k8s(manifest)


def per_node(pod: Pod, snap: Snapshot, infos: list[Any]) -> tuple[list[bool], dict[str, int]]:
    """The plugin code's verdicts per node and the weighted scores of the feasible ones."""
    cycle = Cycle(pod, list(snap.node_infos.values()))
    fits = [filter_pod(pod, info, cycle).fits for info in infos]
    feasible = [info for info, ok in zip(infos, fits, strict=True) if ok]
    return fits, score_nodes(pod, feasible, cycle)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columns_equal_the_per_node_plugins_over_random_clusters(cache: Cache, seed: int) -> None:
    rng = random.Random(seed)
    nodes = [random_node(rng, i) for i in range(40)]
    for node in nodes:
        cache.add_node(node)
    for i in range(60):
        cache.add_pod(random_pod(rng, f"p{i}", rng.choice(nodes).name))
    snap = Snapshot()
    cache.update_snapshot(snap)
    columns = Columns(percentage=100)
    columns.refresh(snap)
    compared = 0
    for i in range(40):
        pod = random_pod(rng, f"in{i}", "")
        assert columnar(pod)
        fits, scores = per_node(pod, snap, columns.infos)
        assert columns.fits(pod).tolist() == fits
        rows = [row for row, ok in enumerate(fits) if ok]
        if rows:
            totals = columns.totals(pod, np.array(rows, dtype=np.int64))
            assert (
                dict(zip([columns.names[r] for r in rows], totals.tolist(), strict=True)) == scores
            )
            best = max(scores.values())
            ranked = {n: 10 * t // best if best else 0 for n, t in scores.items()}
            expected = max(ranked, key=lambda n: (ranked[n], n))
            assert columns.place(pod, snap).node == expected
            compared += 1
    assert compared > 20  # most incoming pods found a node: the scores were compared


def test_columns_follow_the_nodes_the_snapshot_reports_changed(cache: Cache) -> None:
    rng = random.Random(7)
    nodes = [random_node(rng, i) for i in range(20)]
    for node in nodes:
        cache.add_node(node)
    snap = Snapshot()
    cache.update_snapshot(snap)
    columns = Columns(percentage=100)
    columns.refresh(snap)
    for i in range(30):  # pods land, a node is tainted, a node leaves, one joins
        cache.add_pod(random_pod(rng, f"p{i}", rng.choice(nodes[1:]).name))
    tainted = node_manifest("n005", "4", "8Gi")
    tainted["spec"] = {"taints": [TAINTS[0]]}
    cache.update_node(nodes[5], Node.from_k8s(tainted))
    cache.update_snapshot(snap)
    assert snap.changed  # the update reported what it put in
    columns.refresh(snap)
    assert not snap.changed
    fresh = Columns(percentage=100)
    fresh.refresh(snap)
    for name, column in fresh.columns.items():
        assert columns.columns[name].tolist() == column.tolist(), name
    pod = random_pod(rng, "in", "")
    assert columns.fits(pod).tolist() == fresh.fits(pod).tolist()
    assert not columns.fits(pod)[columns.names.index("n005")] or pod.tolerations
    cache.remove_node(nodes[0])
    cache.add_node(random_node(rng, 99))
    cache.update_snapshot(snap)
    columns.refresh(snap)
    assert "n000" not in columns.names and "n099" in columns.names


def test_a_reservation_counts_until_released_then_the_snapshot_answers(cache: Cache) -> None:
    """``reserve`` counts a decided pod on its node for the next ``place`` on the same
    snapshot (the next pod goes elsewhere, a full node refuses it); ``release`` refills the
    rows from the snapshot at its next refresh: a claim that never landed leaves no use, one
    that landed is read from the catch-up."""
    for name in ("a", "b"):
        cache.add_node(make_node(name, "2", "8Gi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    columns = Columns(percentage=100, ties="r")
    pod = make_pod("x", "", "2", "1Gi")
    first = columns.place(pod, snap).node
    columns.reserve(first, pod)
    second = columns.place(make_pod("y", "", "2", "1Gi"), snap).node
    assert second and second != first  # the reserved node is full
    columns.reserve(second, pod)
    assert not columns.place(make_pod("z", "", "1", "1Gi"), snap).node  # both reserved full
    row = columns.names.index(first)
    assert columns.columns["pods"][row] == 1 and columns.columns["cpu"][row] == 2000
    cache.assume_pod(pod.with_node(first), check_fit=True)  # only the first claim landed
    columns.release(snap)
    cache.update_snapshot(snap)
    assert columns.place(make_pod("z", "", "1", "1Gi"), snap).node == second
    fresh = Columns(percentage=100)
    fresh.refresh(snap)
    for name, column in fresh.columns.items():
        assert columns.columns[name].tolist() == column.tolist(), name


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [
        (50, 0, 50),  # under minFeasibleNodesToFind: every node
        (1000, 0, 420),  # 50 % - 1000/125 = 42 %
        (5000, 0, 500),  # 10 %
        (6000, 0, 300),  # 2 %, raised to 5 %
        (1000, 5, 100),  # 50 nodes, raised to 100
        (1000, 100, 1000),
    ],
)
def test_the_sample_is_upstreams_num_feasible_nodes_to_find(
    nodes: int, percentage: int, expected: int
) -> None:
    assert nodes_to_find(nodes, percentage) == expected


@pytest.mark.parametrize("percentage", [-1, 101, 2.5, "10"])
def test_a_percentage_outside_0_to_100_is_refused(percentage: Any) -> None:
    with pytest.raises(ValidationError, match="percentage"):
        Columns(percentage)


def test_each_pod_starts_where_the_last_one_stopped(cache: Cache) -> None:
    for i in range(150):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i:03}", "4", "8Gi")))
    snap = Snapshot()
    cache.update_snapshot(snap)
    columns = Columns()  # adaptive: 150 nodes, 48 % = 72, raised to 100
    pod = Pod.from_k8s(pod_manifest("p", "", "100m", "128Mi", uid="uid-p"))
    first = columns.place(pod, snap)
    assert first.judged == 100 and columns.next_start == 100
    second = columns.place(pod, snap)
    assert second.judged == 100 and columns.next_start == 50  # wrapped around
    # Every node looked at is feasible and scores alike: the greatest name of each sample.
    names = columns.names
    assert first.node == max(names[:100]) and second.node == max(names[100:] + names[:50])


def test_pods_the_columns_cannot_judge_alone_place_as_the_per_node_code(cache: Cache) -> None:
    """Host ports, required anti-affinity, preferred affinity: the per-node path on the
    sample; on a cluster under 100 nodes (every node judged) the node the reference scheduler
    chose before (every node filtered, the extender's 0-10 scores, the greatest name)."""
    from schedcache.extender.service import scores

    rng = random.Random(11)
    nodes = [random_node(rng, i) for i in range(30)]
    for node in nodes:
        cache.add_node(node)
    cache.add_pod(Pod.from_k8s(pod_manifest("db", nodes[4].name, "1", "1Gi", labels={"app": "db"})))
    snap = Snapshot()
    columns = Columns()
    shapes: list[dict[str, Any]] = [
        {"ports": [{"containerPort": 80, "hostPort": 80}]},
        {"affinity": ANTI, "labels": {"app": "web"}},
        {"affinity": PREFERRED},
    ]
    for i in range(12):
        shape = shapes[i % 3]
        manifest = pod_manifest(f"in{i}", "", "500m", "512Mi", uid=f"uid-in{i}", **shape)
        pod = Pod.from_k8s(manifest)
        assert not columnar(pod)
        cache.update_snapshot(snap)
        cycle = Cycle(pod, list(snap.node_infos.values()))
        infos = [info for info in snap.node_info_list if info.node is not None]
        feasible = [(info.name, info) for info in infos if filter_pod(pod, info, cycle).fits]
        placement = columns.place(pod, snap)
        if not feasible:
            assert placement.node == "" and placement.reasons
            continue
        ranked = scores(pod, feasible, cycle)  # type: ignore[arg-type]
        assert placement.node == max(ranked, key=lambda name: (ranked[name], name))
        cache.assume_pod(pod.with_node(placement.node))


def test_each_replica_breaks_ties_in_its_own_stable_order(cache: Cache) -> None:
    """Issue 38: nodes of equal score ranked by a hash of replica and node (upstream picks at
    random among the best), so replicas stop claiming the same node; one replica's order is
    stable. Without ``ties`` the greatest name, as before. Fails before: no ``ties``."""
    for i in range(40):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i:03}", "4", "8Gi")))
    snap = Snapshot()
    cache.update_snapshot(snap)
    pod = Pod.from_k8s(pod_manifest("p", "", "100m", "128Mi", uid="uid-p"))
    names = [f"n{i:03}" for i in range(40)]
    assert Columns(percentage=100).place(pod, snap).node == max(names)
    chosen = {}
    for replica in ("r0", "r1", "r2", "r3"):
        placement = Columns(percentage=100, ties=replica).place(pod, snap)
        want = sorted(names, key=lambda n, r=replica: tie_rank(r, n), reverse=True)
        assert placement.ranked == tuple(want[: len(placement.ranked)])
        assert Columns(percentage=100, ties=replica).place(pod, snap).node == placement.node
        chosen[replica] = placement.node
    assert len(set(chosen.values())) == 4  # four replicas, four first choices
