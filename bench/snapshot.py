"""Snapshot cost on real Redis: full build, and incremental updates after k changed nodes.

Clusters: upstream's 1,000 nodes x 30 pods, and 5,000 x 30 (150,000 pods, kube's largest
supported size). For each: the time to build a snapshot from scratch; the time of
``update_snapshot`` after 1, 10, 100 and 1,000 changed nodes (one pod added to each), with the
cost per changed node, the client's CPU (``process_time``: on a shared machine the wall
clock counts other processes too) and the Redis CPU it took per change (``INFO cpu``, less
what ``INFO`` itself costs) and, beside it, the Redis CPU of an ``XRANGE`` of the same events
(what reading the changes alone costs); and the Redis memory per node and per pod (their
events included).
``--threshold`` adds catch-ups after many changes on few nodes, from the stream and from
generations (``STREAM_BEHIND_PER_POD``). Medians of ``--repeats`` runs. Prints a table and
writes ``bench/results/snapshot.json`` (``--label`` names the tree measured, for a
before/after pair in one session: run the old tree's copy of this script, then this one).

    python bench/snapshot.py [--redis URL] [--repeats 5] [--sizes 1000x30,5000x30] [--label X]
"""

from __future__ import annotations

import argparse
import copy
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


def redis_cpu(client: redis.Redis) -> float:
    """Seconds of CPU the server has used (user + system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def info_cost(client: redis.Redis, samples: int = 50) -> float:
    """The server CPU one ``redis_cpu`` reading adds to a measurement (seconds)."""
    first = redis_cpu(client)
    for _ in range(samples):
        redis_cpu(client)
    return (redis_cpu(client) - first) / (samples + 1)


def last_event(client: redis.Redis, cache: Cache) -> bytes:
    entries = client.xrevrange(cache.store.keys.events, count=1)
    return entries[0][0] if entries else b"0-0"


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


def catch_up_threshold(
    client: redis.Redis, cache: Cache, snap: Snapshot, nodes: int
) -> list[dict[str, Any]]:
    """Catch-ups after many events (pods added and removed again, spread over every node):
    from the stream, and from generations (the same snapshot state, its stream point
    forgotten). Where the second costs less is the threshold (``STREAM_BEHIND_PER_POD``)."""
    import schedcache.views.snapshot as module  # (only the new tree has the threshold)

    limit, module.STREAM_BEHIND_MIN = module.STREAM_BEHIND_MIN, 10**12
    try:
        return _threshold_rows(client, cache, snap, nodes)
    finally:
        module.STREAM_BEHIND_MIN = limit


def _threshold_rows(
    client: redis.Redis, cache: Cache, snap: Snapshot, nodes: int
) -> list[dict[str, Any]]:
    out = []
    for events in (2_000, 10_000, 40_000):
        cache.update_snapshot(snap)
        twin = copy.deepcopy(snap)
        twin.last_id = None  # caught up from generations
        pods = [cluster_pod(k % nodes, 0, f"-t{events}-{k}") for k in range(events // 2)]
        with cache.batch(chunk_size=500) as batch:
            for pod in pods:
                batch.add_pod(pod)
            for pod in pods:
                batch.remove_pod(pod)
        row: dict[str, Any] = {"events": events, "pods": len(snap.state.pods)}
        for path, target in (("stream", snap), ("generations", twin)):
            cpu, started = redis_cpu(client), time.process_time()
            report = cache.update_snapshot(target)
            row[f"{path}_client_ms"] = (time.process_time() - started) * 1000
            row[f"{path}_redis_ms"] = (redis_cpu(client) - cpu) * 1000
            row[f"{path}_events"] = report.events
        out.append(row)
    return out


def measure(
    client: redis.Redis, nodes: int, pods_per_node: int, repeats: int, with_threshold: bool = False
) -> dict[str, Any]:
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

    incremental: dict[int, dict[str, Any]] = {}
    overhead = info_cost(client)
    serial = 0
    for changed in (1, 10, 100, 1000):
        if changed > nodes:
            continue
        runs, cpu_runs, xrange_runs, client_cpu_runs = [], [], [], []
        for _ in range(repeats):
            serial += 1
            first = last_event(client, cache)
            with cache.batch(chunk_size=500) as batch:
                for k in range(changed):
                    batch.add_pod(cluster_pod((serial * 7919 + k) % nodes, 0, f"-x{serial}-{k}"))
            last = last_event(client, cache)
            cpu = redis_cpu(client)
            started, client_cpu = time.perf_counter(), time.process_time()
            report = cache.update_snapshot(snap)
            runs.append(time.perf_counter() - started)
            client_cpu_runs.append(time.process_time() - client_cpu)
            cpu_runs.append(redis_cpu(client) - cpu - overhead)
            assert report.changed_nodes <= changed and not report.inconsistent
            cpu = redis_cpu(client)
            entries = client.xrange(cache.store.keys.events, first, last)
            xrange_runs.append(redis_cpu(client) - cpu - overhead)
            assert len(entries) == changed + 1
        median = statistics.median(runs)
        redis_seconds, xrange_seconds = statistics.median(cpu_runs), statistics.median(xrange_runs)
        incremental[changed] = {
            "seconds": median,
            "per_changed_node_ms": median / changed * 1000,
            "client_us_per_change": median / changed * 1e6,
            "client_cpu_us_per_change": statistics.median(client_cpu_runs) / changed * 1e6,
            "redis_us_per_change": redis_seconds / changed * 1e6,
            "xrange_us_per_change": xrange_seconds / changed * 1e6,
            "redis_over_xrange": redis_seconds / xrange_seconds if xrange_seconds > 0 else None,
            "fraction_of_full": median / full,
            "runs": runs,
            "client_cpu_runs": client_cpu_runs,
            "redis_cpu_runs": cpu_runs,
            "xrange_cpu_runs": xrange_runs,
        }
    threshold = catch_up_threshold(client, cache, snap, nodes) if with_threshold else []
    cache.clear()
    return {
        "threshold": threshold,
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
    parser.add_argument("--label", default="", help="the tree measured (before/after)")
    parser.add_argument("--threshold", action="store_true", help="stream vs generations")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    results: dict[str, Any] = {"settings": vars(args), "clusters": []}
    rows = []
    for size in args.sizes.split(","):
        nodes, per_node = (int(x) for x in size.split("x"))
        figures = measure(client, nodes, per_node, args.repeats, args.threshold)
        results["clusters"].append(figures)
        label = f"{nodes:,} nodes x {per_node}"
        full_ms = f"{figures['full_build_seconds'] * 1000:,.1f}"
        rows.append([label, "full build", full_ms, "", "1", "", "", "", ""])
        for changed, inc in figures["incremental"].items():
            ratio = inc["redis_over_xrange"]
            rows.append(
                [
                    label,
                    f"update after {changed:,} changed",
                    f"{inc['seconds'] * 1000:,.2f}",
                    f"{inc['per_changed_node_ms']:.3f}",
                    f"{inc['fraction_of_full']:.4f}",
                    f"{inc['client_cpu_us_per_change']:.1f}",
                    f"{inc['redis_us_per_change']:.1f}",
                    f"{inc['xrange_us_per_change']:.2f}",
                    "n/a" if ratio is None else f"{ratio:.1f}",
                ]
            )
        for what in ("node", "pod"):
            memory = f"{figures[f'memory_per_{what}_bytes']:,.0f} B"
            rows.append([label, f"Redis memory per {what}", memory, "", "", "", "", "", ""])
    print_table(
        f"update_snapshot on real Redis{f' ({args.label})' if args.label else ''}, "
        f"median of {args.repeats} runs",
        [
            "cluster",
            "operation",
            "ms",
            "ms per changed node",
            "of full build",
            "client CPU µs/change",
            "Redis µs/change",
            "XRANGE µs/change",
            "Redis/XRANGE",
        ],
        rows,
    )
    for figures in results["clusters"]:
        for row in figures["threshold"]:
            print(
                f"{figures['nodes']:,} nodes, {row['events']:,} events behind ({row['pods']:,} "
                f"pods held): from the stream client {row['stream_client_ms']:.1f} ms, Redis "
                f"{row['stream_redis_ms']:.1f} ms; from generations client "
                f"{row['generations_client_ms']:.1f} ms, Redis {row['generations_redis_ms']:.1f} ms"
            )
    name = f"snapshot-{args.label}" if args.label else "snapshot"
    print(f"\nwritten to {write_results(name, results)}")


if __name__ == "__main__":
    main()
