"""``verify``'s invariants on a big cache, quiet and while commands flow (real Redis).

A cache of ``--nodes`` nodes and ``--pods`` bound pods on a redis-server of its own; the
invariants (``schedcache.history.invariants``) are read ``--runs`` times with nothing else
running, then as many times while a writer process adds pods and removes two in three of
them. Prints, for each: the seconds a run (median and most), the differences found (any is
false: the cache is consistent), the commands the writer applied during the runs, and the
transactions the reads took (``MULTI``/``EXEC``, only while commands flow) with Redis' time a
transaction (``INFO commandstats``): how long one holds Redis. Writes
``bench/results/verify_flow.json``.

    python bench/verify_flow.py [--nodes 5000 --pods 20000 --runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import positive, print_table, start_server, write_results
from schedcache import Cache, Pod
from schedcache.history.invariants import invariants
from tests.factories import make_node

CACHE = "verify-flow"


def pod(name: str, node: str) -> Pod:
    requests = {"cpu": "10m", "memory": "1Mi"}
    return Pod.from_k8s(
        {
            "metadata": {"name": name, "namespace": "bench", "uid": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
        }
    )


def flow(url: str, nodes: int, stop: Any, applied: Any) -> None:
    """Add pods one by one over the nodes, removing two in three again, until ``stop``."""
    cache = Cache(redis.Redis.from_url(url), CACHE, replica="writer")
    i = 0
    while not stop.is_set():
        placed = pod(f"flow-{i}", f"n{(i * 7) % nodes}")
        cache.add_pod(placed)
        if i % 3:
            cache.remove_pod(placed)
        i += 1
        applied.value = i


def runs(cache: Cache, count: int) -> tuple[list[float], int]:
    seconds, differences = [], 0
    for _ in range(count):
        start = time.perf_counter()
        differences += len(invariants(cache.store))
        seconds.append(time.perf_counter() - start)
    return seconds, differences


def row(
    state: str, seconds: list[float], differences: int, applied: int, client: Any
) -> dict[str, Any]:
    execs = client.info("commandstats").get("cmdstat_exec", {})
    return {
        "state": state,
        "median_s": round(statistics.median(seconds), 2),
        "most_s": round(max(seconds), 2),
        "differences": differences,
        "commands_meanwhile": applied,
        "transactions": execs.get("calls", 0),
        "us_per_transaction": round(execs.get("usec_per_call", 0.0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive, default=5000)
    parser.add_argument("--pods", type=positive, default=20000)
    parser.add_argument("--runs", type=positive, default=3)
    parser.add_argument("--port", type=int, default=36411)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, args.port)
        try:
            url = f"redis://127.0.0.1:{args.port}/0"
            client = redis.Redis.from_url(url)
            cache = Cache(client, CACHE, replica="bench")
            for i in range(args.nodes):
                cache.add_node(make_node(f"n{i}", "64", "256Gi"))
            for j in range(args.pods):
                cache.add_pod(pod(f"p{j}", f"n{j % args.nodes}"))
            client.config_resetstat()
            quiet, found = runs(cache, args.runs)
            rows = [row("quiet", quiet, found, 0, client)]
            context = multiprocessing.get_context("spawn")
            stop, applied = context.Event(), context.Value("q", 0)
            writer = context.Process(target=flow, args=(url, args.nodes, stop, applied))
            writer.start()
            while applied.value < 100:  # flowing
                time.sleep(0.05)
            client.config_resetstat()
            before = applied.value
            flowing, found = runs(cache, args.runs)
            rows.append(row("commands flowing", flowing, found, applied.value - before, client))
            stop.set()
            writer.join(30)
        finally:
            server.terminate()
            server.wait()
    columns = list(rows[0])
    title = f"verify's invariants, {args.nodes:,} nodes, {args.pods:,} pods, {args.runs} runs"
    print_table(title, columns, [[r[c] for c in columns] for r in rows])
    path = write_results("verify_flow", {"args": vars(args), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
