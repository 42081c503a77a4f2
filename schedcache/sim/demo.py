"""The demo: a small simulated cluster scheduled by simple scheduler replicas.

It runs the whole cycle a scheduler drives against the cache: update its own snapshot, pick a
node from it, ``assume_pod``, bind, ``finish_binding``, and then the informer's ``add_pod``
confirmation. Each replica keeps its own snapshot, as kube-scheduler does. A
few binds fail (the scheduler calls ``forget_pod``) and a few are never confirmed, so their
assumed pods expire once the simulated clock passes their deadline. Time is simulated (one
second per cycle) so the demo is quick and repeatable for a given seed.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from schedcache.cache import Cache
from schedcache.errors import PodAlreadyExists
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import ZONE_LABEL, Node, Pod
from schedcache.views.snapshot import Snapshot

ZONES = ("zone-a", "zone-b", "zone-c")
# The cache the demo uses unless --cache is given on the command line (never $SCHEDCACHE_CACHE).
DEMO_CACHE = "demo"


@dataclass
class DemoReport:
    """What happened, for the summary table."""

    pods: int = 0
    scheduled: int = 0
    confirmed: int = 0
    bind_failures: int = 0
    expired: int = 0
    unschedulable: int = 0
    conflicts: int = 0
    snapshot_updates: int = 0
    per_replica: Counter[str] = field(default_factory=Counter)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    events: int = 0
    generation: int = 0
    seconds: float = 0.0


def demo_node(index: int, cpu: str = "4", memory: str = "8Gi") -> Node:
    zone = ZONES[index % len(ZONES)]
    return Node.from_k8s(
        {
            "kind": "Node",
            "metadata": {
                "name": f"node-{index}",
                "uid": f"node-uid-{index}",
                "labels": {
                    "topology.kubernetes.io/region": "demo",
                    ZONE_LABEL: zone,
                },
            },
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "images": [{"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 300_000}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def demo_pod(index: int, rng: random.Random) -> Pod:
    return Pod.from_k8s(
        {
            "kind": "Pod",
            "metadata": {
                "name": f"web-{index}",
                "namespace": "demo",
                "uid": f"pod-uid-{index}",
                "labels": {"app": "web"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "nginx",
                        "resources": {
                            "requests": {
                                "cpu": rng.choice(["100m", "250m", "500m", "1"]),
                                "memory": rng.choice(["128Mi", "256Mi", "1Gi"]),
                            }
                        },
                    }
                ]
            },
        }
    )


def pick_node(pod: Pod, nodes: list[NodeInfo]) -> str | None:
    """Least-allocated CPU among the nodes the pod fits on (a toy scoring)."""
    fitting = [info for info in nodes if info.fits_pod(pod)]
    if not fitting:
        return None
    best = min(fitting, key=lambda info: info.requested.milli_cpu / info.allocatable.milli_cpu)
    return best.name


def run_demo(
    cache: Cache,
    *,
    nodes: int = 6,
    pods: int = 40,
    replicas: int = 2,
    fail_rate: float = 0.05,
    lost_rate: float = 0.05,
    seed: int = 1,
    progress: Callable[[int], None] | None = None,
) -> DemoReport:
    """Schedule ``pods`` pods on ``nodes`` nodes with ``replicas`` replicas taking turns."""
    started = time.perf_counter()
    rng = random.Random(seed)
    report = DemoReport(pods=pods)
    now = float(cache.client.time()[0])
    with cache.batch() as batch:
        for index in range(nodes):
            batch.add_node(demo_node(index))
    names = [f"sched-{r}" for r in range(replicas)]
    views = {name: Cache(cache.client, cache.name, ttl=cache.ttl, replica=name) for name in names}
    snapshots = {name: Snapshot() for name in names}
    pending = [demo_pod(index, rng) for index in range(pods)]
    for index, pod in enumerate(pending):
        replica = names[index % replicas]
        view, snap = views[replica], snapshots[replica]
        view.update_snapshot(snap)
        report.snapshot_updates += 1
        node = pick_node(pod, snap.node_info_list)
        if node is None:
            report.unschedulable += 1
        else:
            placed = pod.with_node(node)
            try:
                view.assume_pod(placed)
            except PodAlreadyExists:  # another replica took this pod first
                report.conflicts += 1
                continue
            report.scheduled += 1
            report.per_replica[replica] += 1
            outcome = rng.random()
            if outcome < fail_rate:
                view.forget_pod(placed)  # the bind call failed
                report.bind_failures += 1
            else:
                view.finish_binding(placed, now=now)
                if outcome >= fail_rate + lost_rate:
                    cache.add_pod(placed)  # the informer saw the binding
                    report.confirmed += 1
        now += 1.0
        report.expired += len(cache.cleanup_assumed_pods(now=now))
        if progress:
            progress(1)
    for view in views.values():
        view.close()
    # Let the clock run past every deadline: binds that were never confirmed expire.
    report.expired += len(cache.cleanup_assumed_pods(now=now + cache.ttl + 1))
    dump = cache.dump()
    report.nodes = dump.nodes
    report.generation = dump.generation
    report.events = cache.stream_length()
    report.seconds = time.perf_counter() - started
    return report
