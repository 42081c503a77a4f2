"""Replay speed: fold a long event stream in one Python process (real Redis).

Writes ``--events`` events (default 1,000,000) into a cache with batched commands: pods added
to 1,000 nodes, updated and removed again in waves, with node updates in between, then times
``cache.replay()`` (reading the stream in chunks and folding it) and checks the result against
the live state. Medians of ``--repeats`` runs; prints a table and writes
``bench/results/replay.json``. Target: >= 100,000 events/s.

    python bench/replay.py [--redis URL] [--events 1000000] [--repeats 3]
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
from schedcache.sim.demo import demo_node

NODES = 1000


def pod(i: int, cpu: str = "100m") -> Pod:
    return Pod.from_k8s(
        {
            "metadata": {
                "name": f"p-{i}",
                "namespace": "bench",
                "uid": f"uid-{i}",
                "labels": {"app": f"a{i % 13}"},
            },
            "spec": {
                "nodeName": f"node-{i % NODES}",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
                ],
            },
        }
    )


def write_history(cache: Cache, events: int) -> None:
    written, wave = 0, 0
    with cache.batch(chunk_size=500) as batch:
        for i in range(NODES):
            batch.add_node(demo_node(i, "64", "256Gi"))
        written += NODES
        while written < events:
            size = min(20_000, (events - written) // 3 + 1)
            base = wave * size
            for i in range(base, base + size):
                batch.add_pod(pod(i))
            for i in range(base, base + size):
                batch.update_pod(pod(i), pod(i, "200m"))
            for i in range(base, base + size, 2):  # half of them go again
                batch.remove_pod(pod(i))
            for i in range(0, NODES, 10):
                batch.update_node(None, demo_node(i, "64", "256Gi"))
            written += size * 2 + size // 2 + NODES // 10
            wave += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cache = Cache(redis.Redis.from_url(args.redis), "bench-replay", ttl=0, replica="bench")
    cache.clear()
    started = time.perf_counter()
    write_history(cache, args.events)
    written = cache.stream_length()
    write_seconds = time.perf_counter() - started
    runs = []
    for _ in range(args.repeats):
        folded: list[int] = []
        started = time.perf_counter()
        state = cache.replay(progress=folded.append)
        runs.append(time.perf_counter() - started)
        assert sum(folded) == written, (sum(folded), written)
    assert state.nodes == cache.dump().nodes, "replay differs from the live state"
    median = statistics.median(runs)
    results: dict[str, Any] = {
        "settings": vars(args),
        "events": written,
        "write_seconds": write_seconds,
        "replay_seconds": median,
        "events_per_second": written / median,
        "runs": runs,
        "live_pods": cache.pod_count(),
    }
    cache.clear()
    print_table(
        f"replay of the whole stream, median of {args.repeats} runs",
        ["events", "seconds", "events/s", "live pods at the end"],
        [
            [
                f"{written:,}",
                f"{median:.2f}",
                f"{written / median:,.0f}",
                f"{results['live_pods']:,}",
            ]
        ],
    )
    print(f"\nwritten to {write_results('replay', results)}")


if __name__ == "__main__":
    main()
