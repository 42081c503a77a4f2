"""The end-to-end promise of docs/constraints.md: three reference schedulers racing on one
cache, with pods created before they start, never break a pod's required inter-pod rules, and
place every pod that can be placed exactly once (issue 30's "Done when")."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from schedcache import Cache
from tests.apiserver import FakeApiServer
from tests.factories import node_manifest, pod_manifest
from tests.racing import racing_schedulers

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NODES = [f"n{i:02}" for i in range(12)]
ZONE_OF = {name: f"z{i % 3}" for i, name in enumerate(NODES)}
REPELLING = "n05"  # holds the pod whose anti-affinity keeps app=rep away


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def required(kind: str, key: str, app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pod(name: str, app: str, node: str = "", **spec: Any) -> dict[str, Any]:
    manifest = pod_manifest(name, node, "100m", "64Mi", labels={"app": app}, uid=f"uid-{name}")
    manifest["spec"].update(spec)
    if not node:
        manifest["spec"]["schedulerName"] = "ref"
    else:
        manifest["status"] = {"phase": "Running"}
    return manifest


def workload(server: FakeApiServer) -> int:
    """Creates the cluster and the pending pods; returns how many of them can be placed."""
    for name in NODES:
        labels = {HOST: name, ZONE: ZONE_OF[name]}
        server.create({**node_manifest(name, "16", "64Gi", labels=labels), "kind": "Node"})
    server.create({**pod("anchor", "anchor", "n00"), "kind": "Pod"})
    repeller = pod(
        "repeller", "guard", REPELLING, affinity=required("podAntiAffinity", HOST, "rep")
    )
    server.create({**repeller, "kind": "Pod"})
    pending = []
    pending += [
        pod(f"anti-{i}", "anti", affinity=required("podAntiAffinity", HOST, "anti"))
        for i in range(16)
    ]
    spread = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
    pending += [pod(f"spread-{i}", "spread", topologySpreadConstraints=[spread]) for i in range(9)]
    pending += [
        pod(f"near-{i}", "near", affinity=required("podAffinity", ZONE, "anchor")) for i in range(6)
    ]
    pending += [pod(f"rep-{i}", "rep") for i in range(12)]
    for manifest in pending:
        server.create({**manifest, "kind": "Pod"})
    return 12 + 9 + 6 + 12  # 4 of the anti-affine pods find no node of their own


def violations(placed: dict[str, str]) -> list[str]:
    """Every broken rule among the pods' final places (the API server's bindings)."""
    found = []
    by_app: dict[str, list[str]] = defaultdict(list)
    for name, node in placed.items():
        by_app[name.rsplit("-", 1)[0]].append(node)
    hosts = Counter(by_app["anti"])
    found += [f"{n} holds {c} anti-affine pods" for n, c in hosts.items() if c > 1]
    zones = Counter(ZONE_OF[n] for n in by_app["spread"])
    counts = [zones.get(z, 0) for z in ("z0", "z1", "z2")]
    if max(counts) - min(counts) > 1:
        found.append(f"spread skew {counts}")
    found += [
        f"near pod on {n}, away from the anchor's zone"
        for n in by_app["near"]
        if ZONE_OF[n] != "z0"
    ]
    found += [f"rep pod on {REPELLING}" for n in by_app["rep"] if n == REPELLING]
    return found


def test_three_reference_schedulers_keep_every_inter_pod_rule(
    cache: Cache, make_cache: Callable[..., Cache], api_server: FakeApiServer, tmp_path: Path
) -> None:
    placeable = workload(api_server)
    kubeconfig = str(api_server.kubeconfig(tmp_path / "kubeconfig"))
    with racing_schedulers(make_cache, kubeconfig, 3) as replicas:
        deadline = time.monotonic() + 120
        while sum(r.bound for r in replicas) < placeable and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the 4 that cannot be placed keep being tried: none may land
        while cache.dump().assumed_pods:
            assert time.monotonic() < deadline, "the feed did not confirm every binding"
            time.sleep(0.1)
    objects = api_server.objects("Pod")
    placed = {
        o["metadata"]["name"]: o["spec"]["nodeName"]
        for o in objects
        if o["spec"].get("nodeName") and o["spec"].get("schedulerName") == "ref"
    }
    assert violations(placed) == []
    assert len(placed) == placeable and sum(r.bound for r in replicas) == placeable
    assert sum(1 for n in placed if n.startswith("anti-")) == 12
    assert (
        cache.pod_count() == placeable + 2
    )  # each bound pod in the cache once, with the two running
    assert cache.verify() == []
