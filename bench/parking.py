"""Hopeless pods with inter-pod rules at the head of the queue: parked, or spinning (issue 38,
item 4).

One replica (this process) works the cache's scheduling queue as the reference scheduler does
(pop one, catch its snapshot up, run the default filters, claim the best node; not placed:
``retry``). The queue holds ``--stuck`` high-priority pods no node can take (required zone
affinity to pods that never come, and a zone spread that already counts its maximum skew), and
``--plain`` lower-priority pods any node takes. For ``--seconds`` it counts the stuck pods'
attempts and when the first lower-priority pod was placed. Two modes, alternated in one run:

* ``backoff``: as 0ae1dd3's loop gave such pods back (``unschedulable=False``: back-off only,
  since another pod's arrival, which then woke no parked pod, could help them);
* ``parked``: as now (``unschedulable=True`` with ``arrivals.wake_tokens``: parked until a pod
  their selectors select arrives, or another event that wakes parked pods).

    python bench/parking.py [--stuck 1500 --plain 200 --seconds 60 --rounds 1]

Starts its own redis-server on ``--port`` (a free one), writes bench/results/parking.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import redis

from bench.common import positive, print_table, start_server, write_results
from schedcache import Cache, Pod, Snapshot
from schedcache.errors import FitConflict
from schedcache.model.arrivals import wake_tokens
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Node
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
SCHEDULER = "bench"


def node(i: int) -> Node:
    name = f"node-{i:03}"
    return Node.from_k8s(
        {
            "metadata": {"name": name, "uid": name, "labels": {HOST: name, ZONE: f"z{i % 4}"}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
        }
    )


def pending(name: str, priority: int, labels: dict[str, str], **spec: Any) -> Pod:
    container = {"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    return Pod.from_k8s(
        {
            "metadata": {"name": name, "namespace": "b", "uid": name, "labels": labels},
            "spec": {"containers": [container], "priority": priority, **spec},
        }
    )


def stuck(i: int) -> Pod:
    """Required zone affinity to ``app=db-<i % 50>`` pods, which never come."""
    term = {"labelSelector": {"matchLabels": {"app": f"db-{i % 50}"}}, "topologyKey": ZONE}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return pending(f"stuck-{i}", 1000, {"app": f"web-{i % 50}"}, affinity=affinity)


def run(url: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cache = Cache(redis.Redis.from_url(url), "parking", replica="r0")
    cache.clear()
    version = iter(range(1, 10**9))
    with cache.batch(chunk_size=500) as batch:
        for i in range(args.nodes):
            batch.add_node(node(i))
        for i in range(args.stuck):
            batch.add(commands.sync_pod_pending(stuck(i), SCHEDULER, str(next(version))))
        for i in range(args.plain):
            plain = pending(f"plain-{i}", 0, {"app": "plain"})
            batch.add(commands.sync_pod_pending(plain, SCHEDULER, str(next(version))))
    queue = SchedulingQueue(cache, SCHEDULER, holder="r0", lease=30.0)
    snap = Snapshot()
    attempts = placed = 0
    first_plain: float | None = None
    began = time.perf_counter()
    while (elapsed := time.perf_counter() - began) < args.seconds:
        popped = queue.pop()
        if not popped:
            time.sleep(0.01)
            continue
        pod = popped[0].pod
        cache.update_snapshot(snap)
        cycle = Cycle(pod, list(snap.node_infos.values()))
        fits = [info.name for info in snap.node_info_list if filter_pod(pod, info, cycle).fits]
        if fits:
            try:
                cache.assume_pod(pod.with_node(fits[0]), check_fit=True, snapshot=snap)
            except FitConflict:
                queue.retry(pod, unschedulable=False)
                continue
            placed += 1
            if first_plain is None:
                first_plain = elapsed
            continue
        attempts += 1
        if mode == "parked":
            queue.retry(pod, True, snap.last_id or "", wake=wake_tokens(pod))
        else:
            queue.retry(pod, unschedulable=False)
    lengths = queue.lengths()
    clean = cache.verify() == []
    cache.clear()
    return {
        "mode": mode,
        "seconds": round(min(elapsed, args.seconds), 1),
        "stuck_attempts": attempts,
        "first_plain_placed_s": None if first_plain is None else round(first_plain, 2),
        "plain_placed": placed,
        "parked_at_end": lengths["parked"],
        "verify_clean": clean,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stuck", type=positive, default=1500)
    parser.add_argument("--plain", type=positive, default=200)
    parser.add_argument("--nodes", type=positive, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=positive, default=1, help="before/after pairs")
    parser.add_argument("--port", type=positive, default=6411)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, args.port)
        try:
            for _ in range(args.rounds):
                for mode in ("backoff", "parked"):
                    rows.append(run(f"redis://127.0.0.1:{args.port}/0", mode, args))
        finally:
            server.terminate()
            server.wait()
    columns = list(rows[0])
    print_table("hopeless pods with rules, one replica", columns, [list(r.values()) for r in rows])
    medians = {
        mode: statistics.median(r["stuck_attempts"] for r in rows if r["mode"] == mode)
        for mode in ("backoff", "parked")
    }
    print("median stuck attempts:", medians)
    print(write_results("parking", {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
