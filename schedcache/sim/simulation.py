"""Scheduler replicas in separate processes, claiming optimistically on one shared cache.

Each replica keeps its own snapshot, filters a window of nodes for the pod (as kube-scheduler
scores only a share of a large cluster, rotating where it starts), picks the least allocated
one and claims it with ``assume_pod(check_fit=True)`` (fine-grained, as Omega) or
``assume_pod(expect_generation=...)`` (strict: any change to the node since the snapshot is a
conflict). On a conflict it tries the next best node of the same decision. Used by
``schedcache demo --replicas N --redis URL`` and ``bench/replicas.py``.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass, field

from schedcache.cache import Cache
from schedcache.errors import FitConflict
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Pod
from schedcache.sim.demo import demo_node, demo_pod
from schedcache.store.connection import connect
from schedcache.views.snapshot import Snapshot

MODES = ("fit", "generation")
WINDOW = 50  # feasible nodes ranked per pod


@dataclass
class ReplicaReport:
    replica: str
    claimed: int = 0
    conflicts: int = 0
    unschedulable: int = 0
    seconds: float = 0.0


@dataclass
class SimulationReport:
    mode: str
    replicas: list[ReplicaReport] = field(default_factory=list)
    seconds: float = 0.0
    overcommitted_nodes: list[str] = field(default_factory=list)

    @property
    def claimed(self) -> int:
        return sum(r.claimed for r in self.replicas)

    @property
    def conflicts(self) -> int:
        return sum(r.conflicts for r in self.replicas)

    @property
    def unschedulable(self) -> int:
        return sum(r.unschedulable for r in self.replicas)

    @property
    def conflict_fraction(self) -> float:
        """Conflicts per successful claim (Omega's measure)."""
        return self.conflicts / self.claimed if self.claimed else 0.0

    @property
    def pods_per_second(self) -> float:
        return self.claimed / self.seconds if self.seconds else 0.0


def ranked_candidates(nodes: list[NodeInfo], pod: Pod, start: int) -> list[NodeInfo]:
    """Up to ``WINDOW`` feasible nodes, scanning from ``start`` (as kube-scheduler stops after
    enough feasible nodes), least allocated CPU first."""
    feasible: list[NodeInfo] = []
    count = len(nodes)
    for offset in range(count):
        info = nodes[(start + offset) % count]
        if info.fits_pod(pod):
            feasible.append(info)
            if len(feasible) == WINDOW:
                break
    return sorted(feasible, key=lambda info: info.requested.milli_cpu / info.allocatable.milli_cpu)


def replica_loop(
    url: str,
    cache_name: str,
    replica: str,
    pod_indexes: list[int],
    mode: str,
    seed: int,
    start_at: float,
    ttl: float = 0.0,
) -> ReplicaReport:
    """One replica: schedule its pods from its own snapshot until each is claimed or fits
    nowhere. Starts at wall-clock time ``start_at``, so all replicas really compete. Claimed
    pods stay assumed (no informer confirms them) and expire ``ttl`` seconds after their
    binding finished (0: never)."""
    cache = Cache(connect(url), cache_name, ttl=ttl, replica=replica)
    rng = random.Random(seed)
    report = ReplicaReport(replica)
    snap = Snapshot()
    start = rng.randrange(1_000_000)
    cache.update_snapshot(snap)
    time.sleep(max(0.0, start_at - time.time()))
    started = time.perf_counter()
    for index in pod_indexes:
        pod = demo_pod(index, random.Random(index))
        cache.update_snapshot(snap)
        start += WINDOW
        for info in ranked_candidates(snap.node_info_list, pod, start):
            placed = pod.with_node(info.name)
            try:
                if mode == "fit":
                    cache.assume_pod(placed, check_fit=True)
                else:
                    cache.assume_pod(placed, expect_generation=info.generation)
            except FitConflict:
                report.conflicts += 1
                continue
            cache.finish_binding(placed)
            report.claimed += 1
            break
        else:
            report.unschedulable += 1
    report.seconds = time.perf_counter() - started
    cache.close()
    return report


def overcommitted(cache: Cache) -> list[str]:
    """Nodes whose requests exceed their allocatable in any resource (must always be empty)."""
    bad = []
    for name, info in cache.dump().nodes.items():
        alloc, used = info.allocatable, info.requested
        if (
            used.milli_cpu > alloc.milli_cpu
            or used.memory > alloc.memory
            or used.ephemeral_storage > alloc.ephemeral_storage
            or len(info.pods) > alloc.allowed_pod_number
            or any(v > alloc.scalar_resources.get(k, 0) for k, v in used.scalar_resources.items())
        ):
            bad.append(name)
    return bad


def run_replicas(
    url: str,
    cache_name: str,
    *,
    replicas: int,
    nodes: int,
    pods: int,
    mode: str,
    seed: int = 1,
    node_cpu: str = "4",
    node_memory: str = "8Gi",
    ttl: float = 0.0,
) -> SimulationReport:
    """A fresh cluster of ``nodes`` nodes (the cache is cleared first: callers make sure it
    may be), then ``pods`` pods scheduled by ``replicas`` processes (pods dealt round robin),
    assumed with ``ttl``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    cache = Cache(connect(url), cache_name, ttl=0, replica="simulation")
    cache.clear()
    with cache.batch(chunk_size=500) as batch:
        for index in range(nodes):
            batch.add_node(demo_node(index, node_cpu, node_memory))
    # Every process starts scheduling at the same moment, once all have started up.
    start_at = time.time() + 1.0 + 0.4 * replicas
    jobs = [
        (
            url,
            cache_name,
            f"sched-{k}",
            list(range(k, pods, replicas)),
            mode,
            seed + k,
            start_at,
            ttl,
        )
        for k in range(replicas)
    ]
    with multiprocessing.get_context("spawn").Pool(replicas) as pool:
        reports = pool.starmap(replica_loop, jobs)
    report = SimulationReport(mode, reports, max(r.seconds for r in reports))
    report.overcommitted_nodes = overcommitted(cache)
    return report
