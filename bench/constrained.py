"""Replicas scheduling a constrained workload on one cache: violations, conflicts, pods/s.

``bench/replicas.py --constrained`` runs this. Shape ``thirds``: a third of the pods are
anti-affine by hostname within groups of ``GROUP`` (no two of a group on one node), a third
spread by zone in groups (maxSkew 1, DoNotSchedule), a third plain, on nodes in 3 zones.
Shape ``deployments`` (issue 38, "Done when" 2): deployments arriving whole, ``DEPLOYMENT``
pods each, in turn anti-affine by hostname, spread by zone, spread by hostname (maxSkew 1,
DoNotSchedule) and plain, on nodes in 4 zones. Each replica process takes every n-th pod (as
the shared queue deals them) and does
what the reference scheduler does: catch its snapshot up, run the default filters
(InterPodAffinity and PodTopologySpread included) in one cycle, rank the nodes by score, claim
the best with ``check_fit``, the snapshot and the next seven as candidates (the claim re-checks
the rules in Redis and takes the first that passes), and on a conflict decide again on a
fresher snapshot. Nodes of equal score are ranked by name (``ties="name"``: every replica
ranks alike, as the reference scheduler did before issue 38) or, ``ties="replica"``, in an
order of each replica's own (``views.columns.tie_rank``, a hash of the replica and the node, as
the reference scheduler does now: upstream picks at random among the best, and replicas then
stop choosing the same node). At the end, the cache's own pods are checked for
any broken rule (there must be none), and verify() must be clean.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import redis

from schedcache import Cache, Pod, Snapshot
from schedcache.errors import FitConflict
from schedcache.extender.service import scores
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Node
from schedcache.views.columns import tie_rank

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONES = {"thirds": 3, "deployments": 4}
GROUP = 10  # pods per anti-affinity or spread group (shape thirds)
DEPLOYMENT = 30  # pods per deployment (shape deployments)
KINDS = ("anti", "spread", "hspread", "plain")  # the deployments' kinds, in turn
ATTEMPTS = 20  # decisions per pod (a conflict decides again on a fresher snapshot)
# Nodes a claim names, best first: the chosen one and the next best (1: the chosen one only;
# SCHEDCACHE_BENCH_CANDIDATES sets it, for a tree whose claims take no candidates).
CANDIDATES = int(os.environ.get("SCHEDCACHE_BENCH_CANDIDATES", "8"))


def claim_options(others: list[str]) -> dict[str, Any]:
    return {"candidates": others} if others else {}


@dataclass
class Outcome:
    replicas: int
    placed: int
    unschedulable: int
    conflicts: int
    seconds: float
    violations: list[str]
    verify_clean: bool
    reasons: dict[str, int]  # conflicts by the reason the claim named

    @property
    def pods_per_second(self) -> float:
        return self.placed / self.seconds if self.seconds else 0.0

    @property
    def conflict_fraction(self) -> float:
        return self.conflicts / self.placed if self.placed else 0.0


def node(i: int, zones: int = ZONES["thirds"]) -> Node:
    name = f"node-{i:04}"
    labels = {HOST: name, ZONE: f"zone-{i % zones}"}
    return Node.from_k8s(
        {
            "metadata": {"name": name, "uid": name, "labels": labels},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
        }
    )


def pod(i: int, shape: str = "thirds") -> Pod:
    if shape == "deployments":
        group = i // DEPLOYMENT
        kind = KINDS[group % len(KINDS)]
    else:
        kind, group = ("anti", "spread", "plain")[i % 3], (i // 3) // GROUP
    app = f"{kind}-{group}"
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
    }
    selector = {"matchLabels": {"app": app}}
    if kind == "anti":
        term = {"labelSelector": selector, "topologyKey": HOST}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    elif kind in ("spread", "hspread"):
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE if kind == "spread" else HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]
    metadata = {"name": f"p-{i}", "namespace": "bench", "uid": f"uid-{i}", "labels": {"app": app}}
    return Pod.from_k8s({"metadata": metadata, "spec": spec})


def tie_break(index: int, ties: str) -> Any:
    """The second sort key of a node among equal scores (see the module's docstring)."""
    if ties == "replica":  # the reference scheduler's (views/columns.py)
        return lambda node: tie_rank(f"r{index}", node)
    return lambda node: node


def replica(
    url: str,
    name: str,
    index: int,
    count: int,
    pods: int,
    start: Any,
    out: Any,
    shape: str,
    ties: str = "name",
) -> None:
    cache = Cache(redis.Redis.from_url(url), name, replica=f"r{index}")
    mine = [pod(i, shape) for i in range(index, pods, count)]
    snap = Snapshot()
    placed = unschedulable = conflicts = 0
    reasons: Counter[str] = Counter()
    tie = tie_break(index, ties)
    start.wait()
    for p in mine:
        for _ in range(ATTEMPTS):
            cache.update_snapshot(snap)
            cycle = Cycle(p, list(snap.node_infos.values()))
            feasible = [
                (info.name, info) for info in snap.node_info_list if filter_pod(p, info, cycle).fits
            ]
            if not feasible:
                unschedulable += 1
                break
            ranked = scores(p, feasible)  # type: ignore[arg-type]
            order = sorted(ranked, key=lambda n: (ranked[n], tie(n)), reverse=True)
            best, *others = order[:CANDIDATES]
            try:
                cache.assume_pod(
                    p.with_node(best), check_fit=True, snapshot=snap, **claim_options(others)
                )
            except FitConflict as conflict:
                conflicts += 1
                reasons.update(conflict.reasons)
                continue
            placed += 1
            break
        else:
            unschedulable += 1
    out.put((placed, unschedulable, conflicts, dict(reasons)))


def violations(cache: Cache) -> list[str]:
    """Every broken rule among the cache's pods."""
    found: list[str] = []
    zone_of, placed = {}, defaultdict(list)
    for info in cache.dump().nodes.values():
        if info.node is not None:
            zone_of[info.name] = info.node.labels[ZONE]
        for p in info.pods:
            placed[p.labels["app"]].append(info.name)
    for app, nodes in placed.items():
        if app.startswith("anti-"):
            found += [f"{app}: {n} holds {c}" for n, c in Counter(nodes).items() if c > 1]
        elif app.startswith("spread-"):
            zones = Counter(zone_of[n] for n in nodes)
            counts = [zones.get(z, 0) for z in sorted(set(zone_of.values()))]
            if max(counts) - min(counts) > 1:
                found.append(f"{app}: zones {counts}")
        elif app.startswith("hspread-"):
            hosts = Counter(nodes)
            counts = [hosts.get(n, 0) for n in zone_of]
            if max(counts) - min(counts) > 1:
                found.append(f"{app}: {max(counts)} on one node, {min(counts)} on another")
    return found


def run(
    url: str,
    replicas: int,
    nodes: int,
    pods: int,
    name: str = "bench-constrained",
    shape: str = "thirds",
    ties: str = "name",
) -> Outcome:
    cache = Cache(redis.Redis.from_url(url), name, replica="setup")
    cache.clear()
    with cache.batch(chunk_size=500) as batch:
        for i in range(nodes):
            batch.add_node(node(i, ZONES[shape]))
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    processes = [
        ctx.Process(target=replica, args=(url, name, i, replicas, pods, start, out, shape, ties))
        for i in range(replicas)
    ]
    for process in processes:
        process.start()
    time.sleep(1.0)  # the replicas build their pods before the barrier
    began = time.perf_counter()
    start.set()
    totals = [out.get() for _ in processes]
    seconds = time.perf_counter() - began
    for process in processes:
        process.join()
    reasons: Counter[str] = Counter()
    for t in totals:
        reasons.update(t[3])
    found = violations(cache)
    clean = cache.verify() == []
    cache.clear()
    return Outcome(
        replicas,
        sum(t[0] for t in totals),
        sum(t[1] for t in totals),
        sum(t[2] for t in totals),
        seconds,
        found,
        clean,
        dict(reasons),
    )
