"""What the scheduling queue costs per pod (issue 34, item 4), on a redis-server of its own.

A cache of ``--nodes`` nodes (upstream's node template) gets ``--pods`` pending pods, and each
step of a pod's way through the queue is timed, Redis' own time per pod (INFO commandstats of
FCALL, reset before each step) and the client's wall time per pod:

* **push**: ``sc_sync_pod`` queueing the pending pods, batched as ``sync`` sends them;
* **pop**: one ``sc_queue_pop`` (count 1) per pod, one client;
* **claim**: ``assume_pod(check_fit=True)`` of each popped pod (what a replica does anyway,
  for scale);
* **bind, queued** / **bind, not queued**: ``sc_sync_pod`` seeing the claimed pod bound, which
  also drops it from the queue, against the same for pods that were never queued: the
  difference is the drop;
* **park + wake**: ``sc_queue_retry`` parking every pod, then one NodeAdded and the pops that
  bring them back (per pod).

    python bench/queue_cost.py [--nodes 1000 --pods 5000 --rounds 3]

Prints a table (medians of ``--rounds``) and writes ``bench/results/queue_cost.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import positive, print_table, start_server, write_results
from schedcache import Cache, Node, Pod
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands

PORT = 17431


def node(i: int) -> Node:
    status = {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
    return Node.from_k8s({"metadata": {"name": f"node-{i}"}, "status": status})


def pod(i: int, prefix: str) -> Pod:
    container = {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
    metadata = {"name": f"{prefix}-{i}", "namespace": "bench", "uid": f"{prefix}-{i}"}
    return Pod.from_k8s({"metadata": metadata, "spec": {"containers": [container]}})


class Step:
    """Redis' time and the client's for one step, per pod."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __call__(self, run: Callable[[], int]) -> tuple[float, float]:
        self.client.config_resetstat()
        started = time.perf_counter()
        count = run()
        wall = time.perf_counter() - started
        stats = self.client.info("commandstats")
        usec = sum(
            stats[name]["usec"] for name in ("cmdstat_fcall", "cmdstat_fcall_ro") if name in stats
        )
        return usec / count, wall * 1e6 / count


def one_round(client: redis.Redis, nodes: int, pods: int, version: list[int]) -> dict[str, tuple]:
    client.flushall()
    cache = Cache(client, "bench-queue", ttl=30.0, replica="bench")
    batch = cache.batch()
    for i in range(nodes):
        batch.add(commands.add_node(node(i)))
    batch.execute()
    step = Step(client)
    queue = SchedulingQueue(cache, "bench", holder="replica-1", lease=600.0)
    queued = [pod(i, "q") for i in range(pods)]
    plain = [pod(i, "p") for i in range(pods)]

    def next_version() -> str:
        version[0] += 1
        return str(version[0])

    def push() -> int:
        batch = cache.batch()
        for p in queued:
            batch.add(commands.sync_pod_pending(p, "bench", next_version()))
        batch.execute()
        return len(queued)

    popped: list[Pod] = []

    def pop() -> int:
        while got := queue.pop():
            popped.extend(q.pod for q in got)
        return len(popped)

    def claim(these: list[Pod]) -> Callable[[], int]:
        def run() -> int:
            for i, p in enumerate(these):
                cache.assume_pod(p.with_node(f"node-{i % nodes}"), check_fit=True)
            return len(these)

        return run

    def bind(these: list[Pod]) -> Callable[[], int]:
        def run() -> int:
            batch = cache.batch()
            for i, p in enumerate(these):
                placed = p.with_node(f"node-{i % nodes}")
                batch.add(commands.sync_pod(placed, next_version(), present=True))
            batch.execute()
            return len(these)

        return run

    figures = {"push (sync, batched)": step(push), "pop (count 1)": step(pop)}
    assert len(popped) == pods
    figures["claim (assume_pod, check_fit)"] = step(claim(popped))
    step(claim(plain))
    figures["bind, queued (sync, batched)"] = step(bind(popped))
    figures["bind, not queued (sync, batched)"] = step(bind(plain))

    # Parked pods woken by a node added.
    parked = [pod(i, "w") for i in range(pods)]
    batch = cache.batch()
    for p in parked:
        batch.add(commands.sync_pod_pending(p, "bench", next_version()))
    batch.execute()
    woken: list[Pod] = []
    while got := queue.pop(100):
        woken.extend(q.pod for q in got)
    attempt = cache.last_events(1)[0].id

    queue.backoff = (0.0, 0.0)  # woken pods are active at once: the wake alone is timed

    def park() -> int:
        for p in woken:
            queue.retry(p, unschedulable=True, attempt=attempt)
        return len(woken)

    figures["park (retry, unschedulable)"] = step(park)
    cache.add_node(node(nodes))
    back: list[Pod] = []

    def wake() -> int:
        while len(back) < len(woken):
            back.extend(q.pod for q in queue.pop())
        return len(back)

    figures["wake + pop (per pod)"] = step(wake)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive, default=1000)
    parser.add_argument("--pods", type=positive, default=5000)
    parser.add_argument("--rounds", type=positive, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, PORT)
        try:
            client = redis.Redis(port=PORT)
            version = [0]
            rounds = [one_round(client, args.nodes, args.pods, version) for _ in range(args.rounds)]
        finally:
            server.terminate()
            server.wait()
    rows, results = [], {}
    for name in rounds[0]:
        redis_us = statistics.median(r[name][0] for r in rounds)
        client_us = statistics.median(r[name][1] for r in rounds)
        rows.append([name, f"{redis_us:.1f}", f"{client_us:.1f}"])
        results[name] = {"redis_us_per_pod": redis_us, "client_us_per_pod": client_us}
    title = (
        f"The scheduling queue per pod ({args.nodes} nodes, {args.pods} pods, "
        f"{args.rounds} rounds, medians)"
    )
    print_table(title, ["step", "Redis µs/pod", "client µs/pod"], rows)
    path = write_results("queue_cost", {"nodes": args.nodes, "pods": args.pods, "steps": results})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
