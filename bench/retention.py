"""Stream memory per pod life and per event, and what retention's ``keep`` costs (real Redis).

Runs ``--lives`` pod lives through a cache on a real Redis (``MEMORY USAGE`` does not exist on
the embedded fakeredis): each is ``assume_pod`` → ``finish_binding`` → ``add_pod`` (the
informer confirms) → ``remove_pod``, 4 events, batched. Two pod shapes: ``small`` (one
container, two labels) and ``kubectl`` (the first pod of ``examples/kubectl-cluster.json``:
init and sidecar containers, anti-affinity, overhead). Measures the stream key with
``MEMORY USAGE … SAMPLES 0`` (exact) and the server's ``used_memory`` before and after, then
one retention round (``keep_seconds=0``) and the memory left, and the size of a checkpoint
per running pod; prints a table of what ``keep``
means at 100 and 1,000 pods/s and writes ``bench/results/retention.json``.

    python bench/retention.py [--redis URL] [--lives 5000]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import print_table, write_results
from schedcache import Cache, Pod
from schedcache.history.retention import retain
from schedcache.sim.demo import demo_node

ROOT = Path(__file__).resolve().parent.parent
NODES = 100
EVENTS_PER_LIFE = 4


def small_pod(i: int) -> Pod:
    return Pod.from_k8s(
        {
            "metadata": {
                "name": f"p-{i}",
                "namespace": "bench",
                "uid": f"uid-{i}",
                "labels": {"app": f"a{i % 13}", "pod-template-hash": f"{i % 97:05d}"},
            },
            "spec": {
                "nodeName": f"node-{i % NODES}",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
                ],
            },
        }
    )


def kubectl_pod_factory() -> Any:
    items = json.loads((ROOT / "examples" / "kubectl-cluster.json").read_text())["items"]
    template = next(item for item in items if item["kind"] == "Pod")
    template["spec"].pop("affinity", None)  # anti-affinity would refuse pods per node
    template["spec"].pop("runtimeClassName", None)

    def make(i: int) -> Pod:
        manifest = copy.deepcopy(template)
        manifest["metadata"].update(name=f"web-{i}", uid=f"uid-{i}")
        manifest["spec"]["nodeName"] = f"node-{i % NODES}"
        return Pod.from_k8s(manifest)

    return make


def used_memory(server: redis.Redis) -> int:
    return int(server.info("memory")["used_memory"])


def stream_bytes(cache: Cache) -> int:
    usage = cache.client.execute_command("MEMORY", "USAGE", cache.keys.events, "SAMPLES", "0")
    return int(usage or 0)


def measure(server: redis.Redis, shape: str, make: Any, lives: int) -> dict[str, Any]:
    cache = Cache(server, f"bench-retention-{shape}", ttl=3600, replica="bench")
    cache.clear()
    with cache.batch(chunk_size=500) as batch:
        for i in range(NODES):
            batch.add_node(demo_node(i, "640", "2560Gi"))
    base_stream, base_memory = stream_bytes(cache), used_memory(server)
    base_events = cache.stream_length()
    pods = [make(i) for i in range(lives)]
    with cache.batch(chunk_size=500) as batch:
        for pod in pods:
            batch.assume_pod(pod)
            batch.finish_binding(pod)
    live_memory = used_memory(server)  # the pods assumed: records, aggregates, deadlines
    with cache.batch(chunk_size=500) as batch:
        for pod in pods:
            batch.add_pod(pod)
        for pod in pods:
            batch.remove_pod(pod)
    events = cache.stream_length() - base_events
    assert events == lives * EVENTS_PER_LIFE, events
    stream = stream_bytes(cache) - base_stream
    total = used_memory(server) - base_memory
    started = time.perf_counter()
    done = retain(cache, keep_seconds=0, lease_seconds=0)
    retention_seconds = time.perf_counter() - started
    after = used_memory(server) - base_memory
    assert cache.verify() == [], "retention broke the audit invariant"
    with cache.batch(chunk_size=500) as batch:  # a checkpoint of the pods, all running
        for pod in pods:
            batch.add_pod(pod)
    retain(cache, keep_seconds=0, lease_seconds=0)
    chunks = cache.client.scan_iter(match=f"{cache.keys.prefix}checkpoint:*:*:*", count=1000)
    checkpoint = sum(
        int(cache.client.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0") or 0)
        for key in chunks
    )
    cache.clear()
    return {
        "shape": shape,
        "lives": lives,
        "events": events,
        "stream_bytes_per_event": stream / events,
        "stream_bytes_per_life": stream / lives,
        "memory_bytes_per_life": total / lives,
        "assumed_pod_bytes": (live_memory - base_memory) / lives,
        "memory_after_retention_bytes": after,
        "retention_round_seconds": retention_seconds,
        "events_trimmed": done.removed,
        "checkpoint_bytes_per_pod": checkpoint / lives,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--lives", type=int, default=5000)
    args = parser.parse_args()
    server = redis.Redis.from_url(args.redis)
    shapes = [("small", small_pod), ("kubectl", kubectl_pod_factory())]
    results = [measure(server, shape, make, args.lives) for shape, make in shapes]
    print_table(
        f"Redis memory per pod life ({EVENTS_PER_LIFE} events: assume, finish, add, remove)",
        [
            "pod",
            "stream B/event",
            "stream B/life",
            "all B/life",
            "assumed pod B",
            "left",
            "checkpoint B/pod",
        ],
        [
            [
                r["shape"],
                f"{r['stream_bytes_per_event']:.0f}",
                f"{r['stream_bytes_per_life']:.0f}",
                f"{r['memory_bytes_per_life']:.0f}",
                f"{r['assumed_pod_bytes']:.0f}",
                f"{r['memory_after_retention_bytes'] / 1024:.0f} KiB",
                f"{r['checkpoint_bytes_per_pod']:.0f}",
            ]
            for r in results
        ],
    )
    keeps = {"1 min": 60, "10 min": 600, "1 h": 3600}
    rows = []
    for r in results:
        for rate in (100, 1000):
            per_second = rate * r["stream_bytes_per_life"]
            rows.append(
                [r["shape"], f"{rate:,}/s"]
                + [f"{per_second * seconds / 2**20:,.0f} MiB" for seconds in keeps.values()]
            )
    print_table(
        "stream memory kept by retention (keep x pod lives/s)", ["pod", "rate", *keeps], rows
    )
    print(f"\nwritten to {write_results('retention', {'settings': vars(args), 'runs': results})}")


if __name__ == "__main__":
    main()
