"""Replicas racing to place pods with inter-pod rules while nodes and pods change under them,
and the audit that judges every claim against the cache as it was at that instant.

Each replica (a thread with a cache of its own) takes pods from a shared list, decides on its
snapshot with the default filters and scores (``Columns.place``, as the reference scheduler),
and claims with ``check_fit``, its snapshot and its ranked candidates; a conflict decides
again on a fresher snapshot. Meanwhile a churn thread relabels nodes into other zones, taints
and untaints them, adds nodes, fills placeholders (pods the informer adds to a node not known
yet, then the node) and removes and adds pods that the rules' selectors match.

:func:`claim_violations` folds the event stream and judges each ``PodAssumed`` on the state
just before it with the plugins (``broken_rule``): any rule broken at the claim is a violation
(rules are "IgnoredDuringExecution": a relabel after a claim breaks nothing).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from schedcache import Cache, Pod, Snapshot
from schedcache.errors import FitConflict, NodeNotFound, PodNotFound
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.claims import broken_rule
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.values import Node
from schedcache.store.fold import ReplayState
from schedcache.views.columns import Columns

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONES = ("z0", "z1", "z2", "z3")
ATTEMPTS = 20
TAINT = {"key": "maint", "value": "1", "effect": "NoSchedule"}


@dataclass
class RaceOutcome:
    placed: int = 0
    decisions: int = 0
    unschedulable: int = 0
    conflicts: Counter[str] = field(default_factory=Counter)
    churn: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def node(name: str, zone: str, tainted: bool = False) -> Node:
    manifest: dict[str, Any] = {
        "metadata": {"name": name, "labels": {HOST: name, ZONE: zone}},
        "spec": {"taints": [TAINT]} if tainted else {},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }
    return Node.from_k8s(manifest)


def _term(key: str, app: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def pod(name: str, app: str, node_name: str = "", **spec: Any) -> Pod:
    manifest: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "race",
            "uid": f"uid-{name}",
            "labels": {"app": app},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
            ],
            **spec,
        },
    }
    return Pod.from_k8s(manifest)


def workload(count: int, rng: random.Random) -> list[Pod]:
    """Pods with every kind of rule, in groups of 8, shuffled as replicas would get them."""
    out: list[Pod] = []
    for i in range(count):
        group, kind = i // 8, i % 5
        name = f"p{i}"
        if kind == 0:
            anti = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(HOST, f"h{group}")]}
            out.append(pod(name, f"h{group}", affinity={"podAntiAffinity": anti}))
        elif kind == 1:
            anti = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(ZONE, f"z{group}")]}
            out.append(pod(name, f"z{group}", affinity={"podAntiAffinity": anti}))
        elif kind == 2:
            spread = {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": f"s{group % 3}"}},
                "nodeTaintsPolicy": "Honor" if group % 2 else "Ignore",
            }
            out.append(pod(name, f"s{group % 3}", topologySpreadConstraints=[spread]))
        elif kind == 3:
            near = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(ZONE, "anchor")]}
            out.append(pod(name, "near", affinity={"podAffinity": near}))
        else:
            out.append(pod(name, f"z{group}"))  # plain, but matched by zone anti-affinity
    rng.shuffle(out)
    return out


def _replica(
    cache: Cache, pods: list[Pod], lock: threading.Lock, out: RaceOutcome, ranked: bool
) -> None:
    snap, columns = Snapshot(), Columns()
    while True:
        with lock:
            if not pods:
                return
            current = pods.pop()
        for _ in range(ATTEMPTS):
            cache.update_snapshot(snap)
            placement = columns.place(current, snap)
            with lock:
                out.decisions += 1
            if not placement.node:
                with lock:
                    out.unschedulable += 1
                break
            try:
                placed = current.with_node(placement.node)
                if ranked:
                    cache.assume_pod(
                        placed, check_fit=True, snapshot=snap, candidates=placement.ranked[1:]
                    )
                else:
                    cache.assume_pod(placed, check_fit=True, snapshot=snap)
            except FitConflict as conflict:
                with lock:
                    out.conflicts.update(conflict.reasons)
                continue
            with lock:
                out.placed += 1
            break


def _churn(
    cache: Cache,
    rng: random.Random,
    names: list[str],
    stop: threading.Event,
    rate: float,
    out: RaceOutcome,
) -> None:
    zone_of = {name: rng.choice(ZONES) for name in names}
    tainted: set[str] = set()
    serial = 0
    while not stop.is_set():
        serial += 1
        action = rng.choice(("relabel", "relabel", "taint", "new", "placeholder", "pod"))
        try:
            if action == "relabel":
                name = rng.choice(names)
                zone_of[name] = rng.choice(ZONES)
                cache.update_node(None, node(name, zone_of[name], name in tainted))
            elif action == "taint":
                name = rng.choice(names)
                tainted ^= {name}
                cache.update_node(None, node(name, zone_of[name], name in tainted))
            elif action == "new":
                name = f"new{serial}"
                zone_of[name] = rng.choice(ZONES)
                cache.add_node(node(name, zone_of[name]))
                names.append(name)
            elif action == "placeholder":
                name = f"ph{serial}"
                app = rng.choice(("h0", "z1", "s0", "s1", "anchor", "z2"))
                cache.add_pod(pod(f"c{serial}", app, name))
                time.sleep(rng.random() / rate)
                zone_of[name] = rng.choice(ZONES)
                cache.add_node(node(name, zone_of[name]))
                names.append(name)
            else:
                target = rng.choice(names)
                app = rng.choice(("h1", "z0", "s2", "anchor", "z3"))
                cache.add_pod(pod(f"c{serial}", app, target))
                if rng.random() < 0.5:
                    cache.remove_pod(pod(f"c{serial}", app, target))
        except (NodeNotFound, PodNotFound):
            continue
        out.churn[action] += 1
        time.sleep(rng.random() * 2 / rate)


def race(
    make_cache: Any,
    *,
    replicas: int,
    nodes: int,
    pods: int,
    seed: int,
    churn_per_second: float,
    candidates: bool = True,
) -> RaceOutcome:
    """Runs the race on caches from ``make_cache(replica=...)``; returns what happened.
    ``candidates``: claims carry the next best nodes (False: the best one alone)."""
    rng = random.Random(seed)
    feeder = make_cache(replica="feeder")
    names = [f"n{i:03}" for i in range(nodes)]
    for i, name in enumerate(names):
        feeder.add_node(node(name, ZONES[i % len(ZONES)]))
    feeder.add_pod(pod("anchor-0", "anchor", names[0]))
    queue, lock, out = workload(pods, rng), threading.Lock(), RaceOutcome()
    stop = threading.Event()
    churn = threading.Thread(
        target=_churn, args=(feeder, rng, list(names), stop, churn_per_second, out), daemon=True
    )
    workers = [
        threading.Thread(
            target=_replica, args=(make_cache(replica=f"r{i}"), queue, lock, out, candidates)
        )
        for i in range(replicas)
    ]
    start = time.monotonic()
    if churn_per_second > 0:
        churn.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.seconds = time.monotonic() - start
    stop.set()
    if churn_per_second > 0:
        churn.join()
    return out


def claim_violations(cache: Cache) -> list[str]:
    """Every fit-checked claim (``PodAssumed``) that broke a required inter-pod rule of the cache
    as it was just before it, judged by the plugins on the folded stream (node projections
    refreshed only where events touched them)."""
    state = ReplayState()
    touched, _ = state.track()
    infos: dict[str, NodeInfo] = {}
    found: list[str] = []
    for event in cache.events():
        if event.type == "PodAssumed":
            for name in touched:
                info = state.projection(name)
                if info is None:
                    infos.pop(name, None)
                else:
                    infos[name] = info
            touched.clear()
            claimed = Pod.from_dict(event.data)
            target = infos.get(claimed.node_name)
            if target is not None and target.node is not None:
                holders = [i for i in infos.values() if i.pods_with_required_anti_affinity]
                cycle = Cycle(claimed, list(infos.values()), anti_holders=holders)
                rule = broken_rule(cycle, target)
                if rule is not None:
                    found.append(f"{claimed.name} on {claimed.node_name}: {rule} ({event.id})")
        state.apply(event)
    return found
