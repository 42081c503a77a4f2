"""Expiring 10,000 due assumed pods: one worker round on real Redis (and fakeredis).

Pods are spread 10 per node as in upstream's BenchmarkExpirePods; each run books them, lets
their deadlines pass, and times ``ExpiryWorker.run_once()``. Medians of ``--repeats`` runs;
prints a table and writes ``bench/results/expiry.json``. Target: under 2 s for 10,000 pods.

    python bench/expiry.py [--redis URL] [--pods 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import print_table, write_results
from schedcache import Cache, Pod
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store.connection import embedded_client


def due_pods(count: int) -> list[Pod]:
    return [
        Pod.from_k8s(
            {
                "metadata": {"name": f"p-{i}", "namespace": "bench", "uid": f"uid-{i}"},
                "spec": {
                    "nodeName": f"node-{i // 10}",
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
                    ],
                },
            }
        )
        for i in range(count)
    ]


def measure(client: redis.Redis, pods: list[Pod], repeats: int, batch: int) -> dict[str, Any]:
    cache = Cache(client, "bench-expiry", ttl=1.0, replica="bench")
    runs = []
    for _ in range(repeats):
        cache.clear()
        seconds, _ = client.time()
        with cache.batch(chunk_size=500) as commands:
            for pod in pods:
                commands.assume_pod(pod)
                commands.finish_binding(pod, now=seconds - 10)
        started = time.perf_counter()
        expired = ExpiryWorker(cache, batch=batch).run_once()
        runs.append(time.perf_counter() - started)
        assert len(expired) == len(pods) and cache.pod_count() == 0
    cache.clear()
    median = statistics.median(runs)
    return {"seconds": median, "pods_per_second": len(pods) / median, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=500, help="pods per Lua call")
    args = parser.parse_args()
    pods = due_pods(args.pods)
    results: dict[str, Any] = {"settings": vars(args), "backends": {}}
    rows = []
    for backend, client in (
        ("redis", redis.Redis.from_url(args.redis)),
        ("fakeredis", embedded_client()),
    ):
        figures = measure(client, pods, args.repeats, args.batch)
        results["backends"][backend] = figures
        rows.append(
            [
                backend,
                f"{args.pods:,}",
                f"{figures['seconds']:.3f}",
                f"{figures['pods_per_second']:,.0f}",
            ]
        )
    print_table(
        f"expiring due assumed pods, one worker round, median of {args.repeats} runs "
        f"({args.batch} per Lua call)",
        ["backend", "pods", "seconds", "pods per second"],
        rows,
    )
    print(f"\nwritten to {write_results('expiry', results)}")


if __name__ == "__main__":
    main()
