"""Snapshot cost on real Redis: full build, and incremental updates after k changed nodes.

Clusters: upstream's 1,000 nodes x 30 pods, and 5,000 x 30 (150,000 pods, kube's largest
supported size). For each: the time to build a snapshot from scratch; the time of
``update_snapshot`` after 1, 10, 100 and 1,000 changed nodes (one pod added to each), with the
cost per changed node; and the Redis memory per node and per pod (their events included).
Medians of ``--repeats`` runs. Prints a table and writes ``bench/results/snapshot.json``.

    python bench/snapshot.py [--redis URL] [--repeats 5] [--sizes 1000x30,5000x30]
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
from schedcache import Cache, Node, Pod, Snapshot

ZONES = 3


def cluster_node(i: int) -> Node:
    return Node.from_k8s(
        {
            "metadata": {
                "name": f"node-{i}",
                "uid": f"node-uid-{i}",
                "labels": {
                    "topology.kubernetes.io/region": "bench",
                    "topology.kubernetes.io/zone": f"zone-{i % ZONES}",
                    "kubernetes.io/hostname": f"node-{i}",
                },
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                "images": [
                    {"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 300_000},
                    {"names": [f"app/img-{i % 20}:v1"], "sizeBytes": 50_000_000},
                ],
            },
        }
    )


def cluster_pod(node: int, j: int, tag: str = "") -> Pod:
    name = f"node-{node}-pod-{j}{tag}"
    return Pod.from_k8s(
        {
            "metadata": {
                "name": name,
                "namespace": "bench",
                "uid": f"uid-{name}",
                "labels": {"app": f"app-{j % 7}"},
            },
            "spec": {
                "nodeName": f"node-{node}",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}}}
                ],
            },
        }
    )


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def populate(cache: Cache, nodes: int, pods_per_node: int) -> tuple[float, float, float]:
    """Load the cluster; returns (seconds, Redis bytes per node, Redis bytes per pod)."""
    started = time.perf_counter()
    before = used_memory(cache.client)
    with cache.batch(chunk_size=500) as batch:
        for i in range(nodes):
            batch.add_node(cluster_node(i))
    with_nodes = used_memory(cache.client)
    with cache.batch(chunk_size=500) as batch:
        for j in range(pods_per_node):
            for i in range(nodes):
                batch.add_pod(cluster_pod(i, j))
    seconds = time.perf_counter() - started
    per_pod = (used_memory(cache.client) - with_nodes) / (nodes * pods_per_node)
    return seconds, (with_nodes - before) / nodes, per_pod


def measure(client: redis.Redis, nodes: int, pods_per_node: int, repeats: int) -> dict[str, Any]:
    cache = Cache(client, f"bench-snap-{nodes}", ttl=0, replica="bench")
    cache.clear()
    load_seconds, memory_per_node, memory_per_pod = populate(cache, nodes, pods_per_node)
    pods = nodes * pods_per_node

    full_runs = []
    for _ in range(repeats):
        snap = Snapshot()
        started = time.perf_counter()
        cache.update_snapshot(snap)
        full_runs.append(time.perf_counter() - started)
        assert snap.num_nodes() == nodes
    full = statistics.median(full_runs)

    incremental: dict[int, dict[str, float]] = {}
    serial = 0
    for changed in (1, 10, 100, 1000):
        if changed > nodes:
            continue
        runs = []
        for _ in range(repeats):
            serial += 1
            with cache.batch(chunk_size=500) as batch:
                for k in range(changed):
                    batch.add_pod(cluster_pod((serial * 7919 + k) % nodes, 0, f"-x{serial}-{k}"))
            started = time.perf_counter()
            report = cache.update_snapshot(snap)
            runs.append(time.perf_counter() - started)
            assert report.changed_nodes <= changed and not report.inconsistent
        median = statistics.median(runs)
        incremental[changed] = {
            "seconds": median,
            "per_changed_node_ms": median / changed * 1000,
            "fraction_of_full": median / full,
            "runs": runs,
        }
    cache.clear()
    return {
        "nodes": nodes,
        "pods": pods,
        "load_seconds": load_seconds,
        "memory_per_node_bytes": memory_per_node,
        "memory_per_pod_bytes": memory_per_pod,
        "full_build_seconds": full,
        "full_build_runs": full_runs,
        "incremental": incremental,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="1000x30,5000x30")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    results: dict[str, Any] = {"settings": vars(args), "clusters": []}
    rows = []
    for size in args.sizes.split(","):
        nodes, per_node = (int(x) for x in size.split("x"))
        figures = measure(client, nodes, per_node, args.repeats)
        results["clusters"].append(figures)
        label = f"{nodes:,} nodes x {per_node}"
        rows.append([label, "full build", f"{figures['full_build_seconds'] * 1000:,.1f}", "", "1"])
        for changed, inc in figures["incremental"].items():
            rows.append(
                [
                    label,
                    f"update after {changed:,} changed",
                    f"{inc['seconds'] * 1000:,.2f}",
                    f"{inc['per_changed_node_ms']:.3f}",
                    f"{inc['fraction_of_full']:.4f}",
                ]
            )
        for what in ("node", "pod"):
            memory = f"{figures[f'memory_per_{what}_bytes']:,.0f} B"
            rows.append([label, f"Redis memory per {what}", memory, "", ""])
    print_table(
        f"update_snapshot on real Redis, median of {args.repeats} runs",
        ["cluster", "operation", "ms", "ms per changed node", "of full build"],
        rows,
    )
    print(f"\nwritten to {write_results('snapshot', results)}")


if __name__ == "__main__":
    main()
