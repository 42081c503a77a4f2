"""What-if and explain on long histories (real Redis).

what-if: 1,000 nodes (32 CPU, 128 GiB, three zones), then 30,000 pods claimed one by one on
nodes picked at random among those they fit, confirmed by the informer; ``whatif --at`` the
moment between the nodes and the claims, with both built-in policies: the replay to the
moment, reading the 30,000 claims, and each policy placing every pod. Target: <= 10 s.
Then, apart, a policy that places nothing (``declines s``: its own run, the first 20 pods
summarised with the filters' verdicts over every node).

explain: a history of ``--events`` events (default 1,000,000) on 1,000 nodes with ``--live``
pods running (default 30,000): each pod claimed, confirmed and deleted later; a checkpoint near
the end and a pod claimed after it; ``explain`` of that pod by uid and by name. Target: <= 3 s.
For contrast, a pod claimed in the middle of the history and gone before the checkpoint
(``--full``: the whole stream is searched and replayed up to its claim), once.

Medians of ``--repeats`` runs; prints tables and writes ``bench/results/whatif.json``.

    python bench/whatif.py [--redis URL] [--pods 30000] [--events 1000000] [--live 30000]
                           [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import print_table, write_results
from bench.replay import pod as history_pod
from schedcache import Cache, Pod
from schedcache.sim.demo import demo_node
from schedcache.sim.explain import explain
from schedcache.sim.policies import BUILT_IN
from schedcache.sim.whatif import what_if
from schedcache.views.snapshot import Snapshot

NODES = 1000


def pending(index: int, rng: random.Random) -> Pod:
    return Pod.from_k8s(
        {
            "metadata": {"name": f"job-{index}", "namespace": "bench", "uid": f"job-{index}"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "requests": {
                                "cpu": rng.choice(["100m", "250m", "500m", "1"]),
                                "memory": rng.choice(["128Mi", "512Mi", "1Gi", "2Gi"]),
                            }
                        },
                    }
                ]
            },
        }
    )


def claims_history(cache: Cache, pods: int) -> str:
    """The nodes, then ``pods`` claims on random fitting nodes; returns the moment between."""
    rng = random.Random(7)
    with cache.batch(chunk_size=500) as batch:
        for i in range(NODES):
            batch.add_node(demo_node(i, "32", "128Gi"))
    at = cache.last_events(1)[0].id
    free = {f"node-{i}": [32_000, 128 * 2**30, 110] for i in range(NODES)}
    names = list(free)
    with cache.batch(chunk_size=500) as batch:
        for i in range(pods):
            pod = pending(i, rng)
            want = (pod.requests.milli_cpu, pod.requests.memory, 1)
            while True:
                node = rng.choice(names)
                if all(have >= need for have, need in zip(free[node], want, strict=True)):
                    break
            free[node] = [have - need for have, need in zip(free[node], want, strict=True)]
            placed = pod.with_node(node)
            batch.assume_pod(placed, check_fit=True)
            batch.add_pod(placed)
    return at


def declines(snapshot: Snapshot, pod: Pod) -> str | None:
    return None


def bench_whatif(cache: Cache, pods: int, repeats: int) -> dict[str, Any]:
    cache.clear()
    started = time.perf_counter()
    at = claims_history(cache, pods)
    write_seconds = time.perf_counter() - started
    runs, policy_runs = [], {name: [] for name in BUILT_IN}
    for _ in range(repeats):
        started = time.perf_counter()
        result = what_if(cache, at, BUILT_IN)
        runs.append(time.perf_counter() - started)
        for name in BUILT_IN:
            policy_runs[name].append(result.outcome(name).seconds)
    assert len(result.pods) == pods and result.outcomes[0].placed == pods
    # A policy that places nothing: each pod "chose no node", the first SUMMARISED with the
    # filters' summary over every node (the pass issue 34 put on the scratch's columns).
    declined = []
    for _ in range(repeats):
        declined.append(what_if(cache, at, {"declines": declines}).outcome("declines").seconds)
    outcomes = {
        o.policy: {
            "placed": o.placed,
            "unschedulable": len(o.unschedulable),
            "nodes_in_use": o.after.nodes_in_use,
            "elsewhere": len(result.differing(o.policy)) if o.policy != "actual" else 0,
        }
        for o in result.outcomes
    }
    cache.clear()
    return {
        "pods": pods,
        "nodes": NODES,
        "events": 2 * pods + NODES,
        "write_seconds": write_seconds,
        "seconds": statistics.median(runs),
        "runs": runs,
        "policy_seconds": {name: statistics.median(r) for name, r in policy_runs.items()},
        "declines_seconds": statistics.median(declined),
        "outcomes": outcomes,
    }


def churn_history(cache: Cache, events: int, live: int) -> tuple[Pod, Pod]:
    """``events`` events of pods coming and going on 1,000 nodes with about ``live`` pods
    running: each claimed (``PodAssumed``), confirmed (``PodAdded``) and later deleted
    (``PodRemoved``). A pod claimed mid-history and gone again, and a checkpoint near the end
    with one more pod claimed after it; returns those two pods."""
    with cache.batch(chunk_size=500) as batch:
        for i in range(NODES):
            batch.add_node(demo_node(i, "32", "128Gi"))
    middle = None
    with cache.batch(chunk_size=500) as batch:
        written, index = NODES, 0
        while written < events:
            pod = history_pod(index).with_node(f"node-{index % NODES}")
            batch.assume_pod(pod)
            batch.add_pod(pod)
            written += 2
            if index >= live:
                gone = index - live
                batch.remove_pod(history_pod(gone).with_node(f"node-{gone % NODES}"))
                written += 1
            if middle is None and written >= events // 2:
                middle = history_pod(10**9).with_node("node-1")
                batch.assume_pod(middle).forget_pod(middle)
                written += 2
            index += 1
    cache.checkpoint()
    late = history_pod(10**9 + 1).with_node("node-2")
    cache.assume_pod(late)
    cache.finish_binding(late)
    cache.add_pod(late)
    assert middle is not None
    return middle, late


def bench_explain(cache: Cache, events: int, live: int, repeats: int) -> dict[str, Any]:
    cache.clear()
    started = time.perf_counter()
    middle, late = churn_history(cache, events, live)
    write_seconds = time.perf_counter() - started
    length = cache.stream_length()

    def run(ref: str, full: bool = False) -> float:
        begun = time.perf_counter()
        (claim,) = explain(cache, ref, full=full)
        assert claim.node in ("node-1", "node-2")
        return time.perf_counter() - begun

    by_uid = [run(late.uid) for _ in range(repeats)]
    by_name = [run(late.full_name) for _ in range(repeats)]
    full = run(middle.uid, full=True)
    results = {
        "events": length,
        "live_pods": cache.pod_count(),
        "write_seconds": write_seconds,
        "by_uid_seconds": statistics.median(by_uid),
        "by_name_seconds": statistics.median(by_name),
        "by_uid_runs": by_uid,
        "by_name_runs": by_name,
        "full_search_seconds": full,
    }
    cache.clear()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=30_000, help="pods running in explain's")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cache = Cache(redis.Redis.from_url(args.redis), "bench-whatif", ttl=0, replica="bench")
    whatif = bench_whatif(cache, args.pods, args.repeats)
    explained = bench_explain(cache, args.events, args.live, args.repeats)
    print_table(
        f"what-if at the moment before {whatif['pods']:,} claims on {NODES:,} nodes, "
        f"both built-ins, median of {args.repeats}",
        ["pods", "events", "what-if s", *(f"{name} s" for name in BUILT_IN), "declines s"],
        [
            [
                f"{whatif['pods']:,}",
                f"{whatif['events']:,}",
                f"{whatif['seconds']:.2f}",
                *(f"{whatif['policy_seconds'][name]:.2f}" for name in BUILT_IN),
                f"{whatif['declines_seconds']:.2f}",
            ]
        ],
    )
    print_table(
        "outcomes",
        ["policy", "placed", "unschedulable", "elsewhere", "nodes in use"],
        [
            [name, o["placed"], o["unschedulable"], o["elsewhere"], o["nodes_in_use"]]
            for name, o in whatif["outcomes"].items()
        ],
    )
    print_table(
        f"explain in a {explained['events']:,}-event history with a checkpoint, "
        f"{explained['live_pods']:,} pods running, median of {args.repeats}",
        ["pod", "seconds"],
        [
            ["claimed after the checkpoint, by uid", f"{explained['by_uid_seconds']:.2f}"],
            ["claimed after the checkpoint, by name", f"{explained['by_name_seconds']:.2f}"],
            [
                "claimed mid-history, gone before the checkpoint (--full, once)",
                f"{explained['full_search_seconds']:.2f}",
            ],
        ],
    )
    path = write_results("whatif", {"settings": vars(args), "whatif": whatif, "explain": explained})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
