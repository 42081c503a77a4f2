"""What a gang claim costs Redis: one ``sc_gang_claim`` of N members against N single
fit-checked ``sc_assume_pod`` claims of the same pods, alternated in one run (docs/gangs.md).

Starts a redis-server of its own on a loopback port (``--port``); per round and gang size, a
fresh cache with enough nodes, the members decided on one snapshot, then either one
``Cache.assume_gang`` or N ``Cache.assume_pod(check_fit=True, snapshot=...)``. Redis' time is
read from ``INFO commandstats`` (``fcall``'s usec) around each; the client's wall time too.
Prints medians of the rounds per member and writes ``bench/results/gang_claim.json``.

    python bench/gang_claim.py [--sizes 8 64 256] [--rounds 5] [--port 6411]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import pod_manifest, positive, print_table, start_server, write_results
from schedcache import Cache, Node, Pod, Snapshot

NODE_PODS = 8  # members per node


def fcall_usec(client: redis.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats")
    found = stats.get("cmdstat_fcall", {})
    return int(found.get("usec", 0)), int(found.get("calls", 0))


def node(name: str) -> Node:
    return Node.from_k8s(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
        }
    )


def member(i: int) -> Pod:
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    return Pod.from_k8s(
        pod_manifest(
            f"w{i}",
            f"w{i}",
            f"n{i // NODE_PODS}",
            namespace="default",
            labels=labels,
            cpu="1",
            memory="1Gi",
        )
    )


def one_round(client: redis.Redis, size: int, gang: bool, tag: str) -> tuple[float, float]:
    """Redis µs and wall µs per member for ``size`` members claimed one way."""
    cache = Cache(client, f"bench-gang-{tag}", replica="bench", lease_ttl=0)
    try:
        for n in range((size + NODE_PODS - 1) // NODE_PODS):
            cache.add_node(node(f"n{n}"))
        snap = Snapshot()
        cache.update_snapshot(snap)
        pods = [member(i) for i in range(size)]
        usec, _ = fcall_usec(client)
        start = time.perf_counter()
        if gang:
            cache.assume_gang(pods, "default/train", snapshot=snap)
        else:
            for pod in pods:
                cache.assume_pod(pod, check_fit=True, snapshot=snap)
        wall = (time.perf_counter() - start) * 1e6
        spent = fcall_usec(client)[0] - usec
        assert cache.pod_count() == size
        return spent / size, wall / size
    finally:
        cache.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=positive, nargs="+", default=[8, 64, 256])
    parser.add_argument("--rounds", type=positive, default=5)
    parser.add_argument("--port", type=positive, default=6411)
    args = parser.parse_args()
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, args.port)
        try:
            client = redis.Redis(port=args.port)
            figures: dict[tuple[int, bool], list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                for size in args.sizes:
                    for gang in (False, True):  # alternated: the same noise for both
                        figures.setdefault((size, gang), []).append(
                            one_round(client, size, gang, f"{r}-{size}-{int(gang)}")
                        )
        finally:
            server.terminate()
            server.wait()
    for size in args.sizes:
        single = [statistics.median(x[k] for x in figures[(size, False)]) for k in (0, 1)]
        whole = [statistics.median(x[k] for x in figures[(size, True)]) for k in (0, 1)]
        rows.append(
            [
                size,
                f"{single[0]:.1f}",
                f"{whole[0]:.1f}",
                f"{whole[0] / single[0]:.2f}",
                f"{single[1]:.0f}",
                f"{whole[1]:.0f}",
            ]
        )
        results[str(size)] = {
            "single_redis_us_per_pod": single[0],
            "gang_redis_us_per_pod": whole[0],
            "single_wall_us_per_pod": single[1],
            "gang_wall_us_per_pod": whole[1],
        }
    load = os.getloadavg()[0]
    print_table(
        f"gang claim vs single claims, medians of {args.rounds} rounds (load {load:.1f})",
        ["members", "single µs/pod", "gang µs/pod", "ratio", "single wall", "gang wall"],
        rows,
    )
    path = write_results(
        "gang_claim", {"rounds": args.rounds, "load_average": load, "sizes": results}
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
