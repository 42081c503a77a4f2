"""Scheduler replicas in separate processes, claiming optimistically on one shared cache.

Each replica keeps its own snapshot, filters a window of nodes for the pod (as kube-scheduler
scores only a share of a large cluster, rotating where it starts), picks the least allocated
one and claims it with ``assume_pod(check_fit=True)`` (fine-grained, as Omega) or
``assume_pod(expect_generation=...)`` (strict: any change to the node since the snapshot is a
conflict). Claims are always checked server-side; the snapshot is caught up every
``refresh_every`` pods (and before calling a pod unschedulable), and a conflict re-reads just
the node it was on, so a replica's reads follow the changes it meets rather than every other
replica's every claim. Used by ``schedcache demo --replicas N --redis URL`` and
``bench/replicas.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections.abc import Set
from dataclasses import dataclass, field
from threading import Barrier, BrokenBarrierError

from redis import Redis
from redis.exceptions import NoPermissionError

from schedcache.cache import Cache
from schedcache.errors import FitConflict
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Pod
from schedcache.sim.demo import demo_node, demo_pod
from schedcache.sim.processes import ReplicaProcesses
from schedcache.store.connection import connect
from schedcache.store.routing import ClusterClient
from schedcache.views.snapshot import Snapshot, changed_since, refresh_nodes

MODES = ("fit", "generation")
WINDOW = 50  # feasible nodes ranked per pod
# Pods a replica schedules from one snapshot before catching it up, per mode. 1 is
# kube-scheduler's "update before every cycle": every replica then reads every other replica's
# every claim, so the cluster's read work grows as replicas squared. More reads a node changed
# many times in between once, and a conflict re-reads just its node (the claim is checked
# server-side anyway). Fine-grained claims tolerate a stale view (the server checks room);
# strict ones skip the nodes changed since, so a long interval leaves them few nodes (measured
# with bench/replicas.py on 1,000 nodes: these were the fastest of 1, 16, 64 and 256).
REFRESH_EVERY = {"fit": 256, "generation": 64}

STARTUP_SECONDS = 300.0  # for every replica to build its pods and first snapshot


@dataclass
class ReplicaReport:
    replica: str
    claimed: int = 0
    conflicts: int = 0
    unschedulable: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU (user + system) while scheduling
    snapshot_updates: int = 0
    nodes_read: int = 0  # nodes read again: changed ones by updates, conflicted ones alone
    node_refreshes: int = 0  # single nodes re-read after a conflict


@dataclass
class SimulationReport:
    mode: str
    replicas: list[ReplicaReport] = field(default_factory=list)
    seconds: float = 0.0
    overcommitted_nodes: list[str] = field(default_factory=list)
    refresh_every: int = 1
    redis_cpu_seconds: float | None = None  # the Redis server's CPU (INFO cpu) while they ran
    wall_seconds: float = 0.0  # from the start barrier until the last replica finished
    machine_busy_seconds: float | None = None  # every process's CPU (/proc/stat; Linux only)

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

    @property
    def redis_cores(self) -> float | None:
        """Cores the Redis server used while the replicas ran (near 1: it is the ceiling);
        None on a cluster."""
        if self.redis_cpu_seconds is None or not self.wall_seconds:
            return None
        return self.redis_cpu_seconds / self.wall_seconds

    @property
    def client_cores(self) -> float:
        """Cores the replica processes used together while they ran."""
        cpu = sum(r.cpu_seconds for r in self.replicas)
        return cpu / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def machine_cores(self) -> float | None:
        """Cores busy on the whole machine while the replicas ran: beyond Redis and the
        replicas, what other processes took (a shared machine's ceiling is lower)."""
        if self.machine_busy_seconds is None or not self.wall_seconds:
            return None
        return self.machine_busy_seconds / self.wall_seconds

    @property
    def nodes_read_per_claim(self) -> float:
        """Changed nodes the replicas' snapshot updates read per successful claim."""
        return sum(r.nodes_read for r in self.replicas) / self.claimed if self.claimed else 0.0


def ranked_candidates(
    nodes: list[NodeInfo], pod: Pod, start: int, skip: Set[str] = frozenset()
) -> list[NodeInfo]:
    """Up to ``WINDOW`` feasible nodes, scanning from ``start`` (as kube-scheduler stops after
    enough feasible nodes), least allocated CPU first. Nodes in ``skip`` (ones this replica
    changed since its snapshot, which no longer describes them) are passed over."""
    feasible: list[NodeInfo] = []
    count = len(nodes)
    for offset in range(count):
        info = nodes[(start + offset) % count]
        if info.name not in skip and info.fits_pod(pod):
            feasible.append(info)
            if len(feasible) == WINDOW:
                break
    return sorted(feasible, key=lambda info: info.requested.milli_cpu / info.allocatable.milli_cpu)


@dataclass
class _Replica:
    """A replica's view between snapshot updates: the snapshot, and the nodes it claimed on
    since (its own claims are not in the snapshot until the next update)."""

    cache: Cache
    report: ReplicaReport
    snap: Snapshot = field(default_factory=Snapshot)
    claimed_on: set[str] = field(default_factory=set)
    since_update: int = 0

    def update(self) -> None:
        """Catch the snapshot up: it reads only the nodes changed since, each once."""
        self.report.nodes_read += self.cache.update_snapshot(self.snap).changed_nodes
        self.report.snapshot_updates += 1
        self.claimed_on.clear()
        self.since_update = 0

    def schedule(self, pod: Pod, mode: str, start: int, refresh_every: int) -> None:
        """Place ``pod`` from the snapshot, caught up first every ``refresh_every`` pods. The
        pod is unschedulable only when a snapshot caught up for it has no node left."""
        if self.since_update >= refresh_every:
            self.update()
        self.since_update += 1
        if self.place(pod, mode, start):
            return
        if self.since_update > 1:  # a stale snapshot (or this replica's claims) may be why
            self.update()
            self.since_update = 1
            if self.place(pod, mode, start):
                return
        self.report.unschedulable += 1

    def place(self, pod: Pod, mode: str, start: int) -> bool:
        """Claim a node for ``pod``, best of its decision first, passing over the nodes this
        replica claimed on since its snapshot (and, claiming strictly, every node changed
        since: asked by name, not read). A conflict means another replica changed that node
        since the snapshot: re-read that node alone and, if the pod still fits it, claim it
        again once; else (or on a second conflict) try the next best. False when no node of
        the decision took it."""
        skip: Set[str] = self.claimed_on
        if mode == "generation" and self.since_update > 1:
            skip = self.claimed_on.union(changed_since(self.cache.store, self.snap))
        for info in ranked_candidates(self.snap.node_info_list, pod, start, skip):
            if self.claim(pod, mode, info):
                return True
            refresh_nodes(self.cache.store, self.snap, [info.name])  # ``info`` in place
            self.report.nodes_read += 1
            self.report.node_refreshes += 1
            fits = info.name in self.snap.node_infos and info.fits_pod(pod)
            if fits and self.claim(pod, mode, info):
                return True
        return False

    def claim(self, pod: Pod, mode: str, info: NodeInfo) -> bool:
        """Assume ``pod`` on ``info``'s node (checked server-side as ``mode`` says) and finish
        its binding; False on a conflict."""
        placed = pod.with_node(info.name)
        try:
            if mode == "fit":
                self.cache.assume_pod(placed, check_fit=True)
            else:
                self.cache.assume_pod(placed, expect_generation=info.generation)
        except FitConflict:
            self.report.conflicts += 1
            return False
        self.cache.finish_binding(placed)
        self.claimed_on.add(info.name)
        self.report.claimed += 1
        return True


def replica_loop(
    url: str,
    cache_name: str,
    replica: str,
    pod_indexes: list[int],
    mode: str,
    seed: int,
    ttl: float = 0.0,
    refresh_every: int = 1,
    *,
    start: Barrier | None = None,
) -> ReplicaReport:
    """One replica: schedule its pods from its own snapshot until each is claimed or fits
    nowhere. Its pods and first snapshot are built before the ``start`` barrier (shared with
    the other replicas and the caller; None: nothing to wait for), so the timed part is
    scheduling alone and all replicas really compete. Claimed pods stay assumed (no informer
    confirms them) and expire ``ttl`` seconds after their binding finished (0: never)."""
    # (A failure here breaks ``start`` for the others and the caller: processes._child.)
    cache = Cache(connect(url), cache_name, ttl=ttl, replica=replica)
    rng = random.Random(seed)
    offset = rng.randrange(1_000_000)
    pods = [demo_pod(index, random.Random(index)) for index in pod_indexes]
    state = _Replica(cache, ReplicaReport(replica))
    state.update()
    state.report.snapshot_updates = state.report.nodes_read = 0  # the untimed first one
    if start is not None:
        try:
            start.wait(timeout=STARTUP_SECONDS)
        except BrokenBarrierError:
            cache.close()
            return state.report  # another replica failed to start: its error is the run's
    started, cpu = time.perf_counter(), time.process_time()
    for pod in pods:
        offset += WINDOW
        state.schedule(pod, mode, offset, refresh_every)
    state.report.seconds = time.perf_counter() - started
    state.report.cpu_seconds = time.process_time() - cpu
    cache.close()
    return state.report


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
    refresh_every: int | None = None,
) -> SimulationReport:
    """A fresh cluster of ``nodes`` nodes (the cache is cleared first: callers make sure it
    may be), then ``pods`` pods scheduled by ``replicas`` processes (pods dealt round robin),
    assumed with ``ttl``, each replica catching its snapshot up every ``refresh_every`` pods
    (None: the mode's ``REFRESH_EVERY``)
    and after a conflict. Measures the Redis server's CPU (``INFO cpu``) over the timed part."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if refresh_every is None:
        refresh_every = REFRESH_EVERY[mode]
    if refresh_every < 1:
        raise ValueError("refresh_every must be at least 1")
    client = connect(url)
    cache = Cache(client, cache_name, ttl=0, replica="simulation")
    # Asked before the cache is cleared: a user who may not run INFO (docs/security.md's
    # admin role) gets the run without the figure, not a cleared cache and an error (found
    # in review).
    measure_cpu = _redis_cpu_seconds(client) is not None
    cache.clear()
    with cache.batch(chunk_size=500) as batch:
        for index in range(nodes):
            batch.add_node(demo_node(index, node_cpu, node_memory))
    names = [f"sched-{k}" for k in range(replicas)]
    jobs = [
        (
            url,
            cache_name,
            names[k],
            list(range(k, pods, replicas)),
            mode,
            seed + k,
            ttl,
            refresh_every,
        )
        for k in range(replicas)
    ]
    context = multiprocessing.get_context("spawn")
    with ReplicaProcesses(context, replica_loop, jobs, names) as processes:
        processes.wait_for_start(STARTUP_SECONDS)
        cpu_before = _redis_cpu_seconds(client) if measure_cpu else None
        busy_before = _machine_busy_seconds()
        started = time.perf_counter()
        reports = processes.results()
        wall = time.perf_counter() - started
        cpu_after = _redis_cpu_seconds(client) if measure_cpu else None
        busy_after = _machine_busy_seconds()
    redis_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    busy = None if busy_before is None or busy_after is None else busy_after - busy_before
    report = SimulationReport(
        mode,
        reports,
        max(r.seconds for r in reports),
        refresh_every=refresh_every,
        redis_cpu_seconds=redis_cpu,
        wall_seconds=wall,
        machine_busy_seconds=busy,
    )
    report.overcommitted_nodes = overcommitted(cache)
    return report


def _redis_cpu_seconds(client: Redis | ClusterClient) -> float | None:
    """The server's CPU seconds so far (user + system, all its threads); None on a cluster,
    whose shards each have their own, and for a user who may not run INFO."""
    if not isinstance(client, Redis):
        return None
    try:
        cpu = client.info("cpu")
    except NoPermissionError:
        return None
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _machine_busy_seconds() -> float | None:
    """CPU seconds every process of the machine has used so far (``/proc/stat``: all but
    idle and iowait); None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
