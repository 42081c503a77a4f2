"""The snapshot's pod index (issue 38: one scheduler with rules at the pace of plain pods):
the inter-pod PreFilter states read from its counts, and the columns' rule masks built on
them, equal the plugins' own passes over every pod, over random clusters, as the snapshot
follows pods placed and removed and nodes relabelled. On every backend (the cluster is read
through a snapshot, as the reference scheduler reads it)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from schedcache import Cache, Snapshot
from schedcache.model.plugins import interpodaffinity, podtopologyspread
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod, score_nodes
from schedcache.model.values import Node, Pod
from schedcache.views.columns import Columns, rules_columnar
from tests.factories import UPSTREAM_NAMESPACE, node_manifest, pod_manifest

APPS = ["web", "db", "cache"]
KEYS = ["kubernetes.io/hostname", "zone"]


def node(i: int, zone: int, tainted: bool = False) -> Node:
    name = f"n{i:02}"
    manifest = node_manifest(
        name, "4", "8Gi", pods="110", labels={"kubernetes.io/hostname": name, "zone": f"z{zone}"}
    )
    if tainted:
        manifest["spec"] = {"taints": [{"key": "t", "value": "", "effect": "NoSchedule"}]}
    return Node.from_k8s(manifest)


def rules(rng: random.Random) -> dict[str, Any]:
    """A random mix of required anti-affinity, affinity and DoNotSchedule spread."""
    out: dict[str, Any] = {"labels": {"app": rng.choice(APPS)}}
    roll = rng.random()
    term = {"labelSelector": {"matchLabels": {"app": rng.choice(APPS)}}, "topologyKey": ""}
    if roll < 0.35:
        term["topologyKey"] = rng.choice(KEYS)
        if rng.random() < 0.3:
            term["namespaces"] = [UPSTREAM_NAMESPACE, "other"]
        required = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        kind = "podAffinity" if rng.random() < 0.2 else "podAntiAffinity"
        out["affinity"] = {kind: required}
    elif roll < 0.7:
        constraint: dict[str, Any] = {
            "maxSkew": rng.choice([1, 2]),
            "topologyKey": rng.choice(KEYS),
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
        }
        if rng.random() < 0.3:
            constraint["nodeTaintsPolicy"] = "Honor"
        out["spread"] = [constraint]
    return out


def a_pod(rng: random.Random, name: str, node_name: str) -> Pod:
    shape = rules(rng)
    spread = shape.pop("spread", None)
    manifest = pod_manifest(name, node_name, "100m", "128Mi", uid=f"uid-{name}", **shape)
    if spread:
        manifest["spec"]["topologySpreadConstraints"] = spread
    if rng.random() < 0.2:
        manifest["metadata"]["namespace"] = "other"
    if rng.random() < 0.1:
        manifest["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return Pod.from_k8s(manifest)


def states(pod: Pod, snap: Snapshot, index: bool) -> tuple[Any, ...]:
    cycle = Cycle(
        pod,
        list(snap.node_infos.values()),
        anti_holders=snap.have_pods_with_required_anti_affinity_list,
        index=snap.pod_index.sync(snap.node_infos) if index else None,
    )
    a = interpodaffinity.state(cycle)
    s = podtopologyspread.state(cycle)
    return (
        counted(a.existing_anti),
        counted(a.affinity),
        counted(a.anti),
        bool(a.affinity),
        [dict(c) for c in s.counts],
        set(s.holders),
        cycle.repelling(),
    )


def counted(counts: Any) -> dict[Any, int]:
    """The pairs with a count (a Counter's or the index's Summed)."""
    return {pair: n for pair, n in counts.items() if n}


def compare(rng: random.Random, cache: Cache, snap: Snapshot, columns: Columns) -> int:
    """Incoming pods judged both ways; returns how many the rule masks judged."""
    cache.update_snapshot(snap)
    # The lists kept per changed node equal the ones found by looking at every node.
    listed = [i.name for i in snap.node_info_list if i.pods_with_affinity]
    assert [i.name for i in snap.have_pods_with_affinity_list] == listed
    listed = [i.name for i in snap.node_info_list if i.pods_with_required_anti_affinity]
    assert [i.name for i in snap.have_pods_with_required_anti_affinity_list] == listed
    masked = 0
    for i in range(15):
        pod = a_pod(rng, f"in{rng.random()}", "")
        assert states(pod, snap, True) == states(pod, snap, False), pod
        if not rules_columnar(pod):
            continue
        columns.refresh(snap)
        cycle = Cycle(pod, list(snap.node_infos.values()))
        fits = [filter_pod(pod, info, cycle).fits for info in columns.infos]
        indexed = Cycle(pod, list(snap.node_infos.values()), index=snap.pod_index)
        assert (columns.fits(pod) & columns.rules(indexed)).tolist() == fits, pod
        feasible = [info for info, ok in zip(columns.infos, fits, strict=True) if ok]
        if feasible and snap.pod_index.scoring == 0:
            rows = np.array([columns.infos.index(i) for i in feasible], dtype=np.int64)
            by_name = dict(
                zip([i.name for i in feasible], columns.totals(pod, rows).tolist(), strict=True)
            )
            assert by_name == score_nodes(pod, feasible, cycle)
        masked += 1
    return masked


@pytest.mark.parametrize("seed", [1, 2])
def test_the_index_gives_the_plugins_counts_as_the_snapshot_follows_the_cache(
    cache: Cache, seed: int
) -> None:
    rng = random.Random(seed)
    nodes = [node(i, i % 3, tainted=i % 7 == 0) for i in range(18)]
    for n in nodes:
        cache.add_node(n)
    placed = []
    for i in range(50):
        pod = a_pod(rng, f"p{i}", rng.choice(nodes).name)
        cache.add_pod(pod)
        placed.append(pod)
    snap, columns = Snapshot(), Columns(percentage=100)
    masked = compare(rng, cache, snap, columns)
    for _ in range(3):  # the snapshot catches up: only the changed nodes are read again
        for pod in rng.sample(placed, 8):
            cache.remove_pod(pod)
            placed.remove(pod)
        for _ in range(10):
            pod = a_pod(rng, f"q{rng.random()}", rng.choice(nodes).name)
            cache.add_pod(pod)
            placed.append(pod)
        old = rng.choice(nodes)
        relabelled = node(int(old.name[1:]), rng.randint(0, 3))
        cache.update_node(old, relabelled)
        nodes[nodes.index(old)] = relabelled
        masked += compare(rng, cache, snap, columns)
    assert masked > 10


def test_the_pod_itself_is_left_out_of_the_counts(cache: Cache) -> None:
    """Judging a pod already in the snapshot (explain, a claim re-checked) counts it nowhere,
    as ``Cycle.others`` leaves it out."""
    rng = random.Random(5)
    for i in range(6):
        cache.add_node(node(i, i % 3))
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
            ]
        }
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    manifest = pod_manifest(
        "self", "n01", "100m", "128Mi", uid="uid-self", labels={"app": "web"}, affinity=anti
    )
    manifest["spec"]["topologySpreadConstraints"] = spread
    pod = Pod.from_k8s(manifest)
    cache.add_pod(pod)
    cache.add_pod(a_pod(rng, "other", "n02"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert states(pod, snap, True) == states(pod, snap, False)
    assert not states(pod, snap, True)[0]  # its own term does not repel it
