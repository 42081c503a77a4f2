"""Scheduler replicas sharing one cache: throughput, conflicts, and no overcommit, ever.

1, 2, 4 and 8 replica processes schedule 20,000 pods on a 1,000-node cluster (real Redis),
each from its own snapshot, claiming either fine-grained (``check_fit``: the live node must
still have room) or strictly (``expect_generation``: the node must not have changed since the
snapshot). Each replica builds its pods before a start barrier, so only scheduling is timed,
and catches its snapshot up every ``--refresh-every`` pods (default per mode), re-reading just
the node of a conflict in between. Reports pods/s, the conflict fraction (conflicts per
successful claim, Omega's measure), the nodes the replicas read again per claim, the cores the
Redis server (``INFO cpu``), the replica processes and the whole machine (other processes
included) used while scheduling (on a small machine they share the cores: the ceiling),
whether any node ended over its allocatable in any resource (it must never), the Redis CPU
per claimed pod (flat as replicas are added when each replica's catch-up costs Redis per change,
not per changed node), and the largest replica count's pods/s over the one before it.
Prints a table and writes ``bench/results/replicas.json``.

    python bench/replicas.py [--redis URL] [--nodes 1000] [--pods 20000] [--replicas 1,2,4,8]
                             [--refresh-every N]

``--constrained``: instead, the inter-pod workload of ``bench/constrained.py`` (a third of the
pods anti-affine by hostname, a third spread by zone): violations (must be 0), conflicts and
pods/s per replica count; writes ``bench/results/replicas_constrained.json``.

    python bench/replicas.py --constrained [--nodes 60] [--pods 900] [--replicas 1,2,4]

``--constrained --shape deployments``: deployments of 30 pods arriving whole (hostname
anti-affinity, zone spread, hostname spread, plain, in turn) on 160 nodes in 4 zones, 720 pods
by default, dealt round-robin to the replicas; writes
``bench/results/replicas_deployments.json``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, write_results
from schedcache.sim.simulation import MODES, REFRESH_EVERY, run_replicas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--replicas", default="1,2,4,8")
    parser.add_argument("--node-cpu", default="10", help="sized so the pods fill ~90%% of CPU")
    parser.add_argument("--node-memory", default="24Gi")
    parser.add_argument(
        "--refresh-every",
        type=int,
        help="pods a replica schedules from one snapshot (1: update before every pod); "
        f"default per mode: {REFRESH_EVERY}",
    )
    parser.add_argument(
        "--shape",
        choices=("thirds", "deployments"),
        default="thirds",
        help="--constrained's workload (bench/constrained.py): deployments arriving whole",
    )
    parser.add_argument(
        "--ties",
        choices=("name", "replica"),
        default="name",
        help="--constrained: equal scores ranked by name, or in each replica's own order",
    )
    parser.add_argument(
        "--constrained", action="store_true", help="the inter-pod workload (bench/constrained.py)"
    )
    args = parser.parse_args()
    if args.constrained:
        constrained_main(args)
        return
    results: dict[str, Any] = {"settings": vars(args), "runs": []}
    rows = []
    counts = [int(n) for n in args.replicas.split(",")]
    for count in counts:
        for mode in MODES:
            report = run_replicas(
                args.redis,
                "bench-replicas",
                replicas=count,
                nodes=args.nodes,
                pods=args.pods,
                mode=mode,
                node_cpu=args.node_cpu,
                node_memory=args.node_memory,
                refresh_every=args.refresh_every,
            )
            results["runs"].append(
                {
                    "replicas": count,
                    "mode": mode,
                    "refresh_every": report.refresh_every,
                    "claimed": report.claimed,
                    "conflicts": report.conflicts,
                    "unschedulable": report.unschedulable,
                    "seconds": report.seconds,
                    "pods_per_second": report.pods_per_second,
                    "conflict_fraction": report.conflict_fraction,
                    "overcommitted_nodes": report.overcommitted_nodes,
                    "nodes_read_per_claim": report.nodes_read_per_claim,
                    "redis_cpu_seconds": report.redis_cpu_seconds,
                    "redis_cores": report.redis_cores,
                    "redis_us_per_claimed_pod": per_pod(report.redis_cpu_seconds, report.claimed),
                    "client_cores": report.client_cores,
                    "machine_cores": report.machine_cores,
                    "wall_seconds": report.wall_seconds,
                    "per_replica": [asdict(r) for r in report.replicas],
                }
            )
            rows.append(
                [
                    count,
                    mode,
                    f"{report.claimed:,}",
                    f"{report.pods_per_second:,.0f}",
                    f"{report.conflicts:,}",
                    f"{report.conflict_fraction:.4f}",
                    f"{report.unschedulable:,}",
                    f"{report.nodes_read_per_claim:.2f}",
                    cores(report.redis_cores),
                    micros(per_pod(report.redis_cpu_seconds, report.claimed)),
                    cores(report.client_cores),
                    cores(report.machine_cores),
                    "none" if not report.overcommitted_nodes else len(report.overcommitted_nodes),
                ]
            )
            print(rows[-1], flush=True)
    print_table(
        f"{args.pods:,} pods on {args.nodes:,} nodes, replica processes on one cache "
        f"(snapshot caught up every {args.refresh_every or REFRESH_EVERY} pods)",
        [
            "replicas",
            "claims",
            "claimed",
            "pods/s",
            "conflicts",
            "per claim",
            "unschedulable",
            "nodes read/claim",
            "redis cores",
            "redis µs/pod",
            "client cores",
            "machine cores",
            "overcommitted",
        ],
        rows,
    )
    if len(counts) > 1:
        results["scaling"] = scaling(results["runs"], counts[-2], counts[-1])
        for mode, ratio in results["scaling"].items():
            print(f"{mode}: {counts[-1]} replicas / {counts[-2]} replicas = {ratio:.2f}x pods/s")
    print(f"\nwritten to {write_results('replicas', results)}")
    if any(run["overcommitted_nodes"] for run in results["runs"]):
        sys.exit("a node was overcommitted")


def constrained_main(args: argparse.Namespace) -> None:
    """``--constrained``: bench/constrained.py at each replica count."""
    from bench import constrained

    deployments = args.shape == "deployments"
    nodes = args.nodes if args.nodes != 1000 else (160 if deployments else 60)
    pods = args.pods if args.pods != 20_000 else (720 if deployments else 900)
    rows, runs = [], []
    for count in [int(n) for n in args.replicas.split(",")]:
        outcome = constrained.run(args.redis, count, nodes, pods, shape=args.shape, ties=args.ties)
        runs.append({**asdict(outcome), "pods_per_second": outcome.pods_per_second})
        rows.append(
            [
                count,
                f"{outcome.placed:,}",
                f"{outcome.unschedulable:,}",
                f"{outcome.pods_per_second:,.0f}",
                f"{outcome.conflicts:,}",
                f"{outcome.conflict_fraction:.3f}",
                len(outcome.violations),
                "clean" if outcome.verify_clean else "DIFFERS",
            ]
        )
        print(rows[-1], outcome.reasons, flush=True)
    workload = (
        "deployments of 30 arriving whole: hostname anti-affine, zone spread, hostname spread, "
        "plain, in turn; 4 zones"
        if deployments
        else "1/3 hostname anti-affine, 1/3 zone spread, 1/3 plain"
    )
    print_table(
        f"{pods:,} constrained pods on {nodes:,} nodes ({workload}), replica processes on one "
        "cache",
        [
            "replicas",
            "placed",
            "unschedulable",
            "pods/s",
            "conflicts",
            "per claim",
            "violations",
            "verify",
        ],
        rows,
    )
    name = "replicas_deployments" if deployments else "replicas_constrained"
    if args.ties != "name":
        name += f"_ties_{args.ties}"
    path = write_results(name, {"settings": vars(args), "runs": runs})
    print(f"\nwritten to {path}")
    if any(run["violations"] or not run["verify_clean"] for run in runs):
        sys.exit("a rule was broken")


def per_pod(seconds: float | None, claimed: int) -> float | None:
    """Microseconds per claimed pod (None: not measured)."""
    return None if seconds is None or not claimed else seconds / claimed * 1e6


def micros(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def cores(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def scaling(runs: list[dict[str, Any]], fewer: int, more: int) -> dict[str, float]:
    """Per mode, pods/s with ``more`` replicas over pods/s with ``fewer`` (>= 1: it scales)."""
    rate = {(run["replicas"], run["mode"]): run["pods_per_second"] for run in runs}
    return {
        mode: rate[more, mode] / rate[fewer, mode] if rate[fewer, mode] else 0.0 for mode in MODES
    }


if __name__ == "__main__":
    main()
