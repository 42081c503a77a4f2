"""Replicas racing under node and pod churn: rules broken at any claim, decisions per placed
pod, conflicts by reason, pods/s (tests/rule_race.py does the race and the audit).

Each run starts a redis-server of its own on a free loopback port (or uses ``--redis``),
places ``--pods`` pods with every kind of required inter-pod rule by ``--replicas`` replica
threads while a churn thread relabels, taints and untaints nodes, adds nodes, fills
placeholders and adds and removes matching pods about ``--churn`` times a second; then folds
the stream and judges every claim against the cache as it was at that instant. ``--runs``
alternates claims with and without candidates (``--no-candidates`` runs the latter only: the
way to run this file under an older tree that has none). Writes
``bench/results/rule_race.json``.

    python bench/rule_race.py --pods 5000 --replicas 4 --nodes 40 --churn 25
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import positive, print_table, start_server, write_results
from schedcache import Cache
from tests.rule_race import claim_violations, race


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(
    client: redis.Redis, args: argparse.Namespace, run: int, ranked: bool
) -> dict[str, Any]:
    name = f"race-{run}-{int(ranked)}"
    made: list[Cache] = []

    def make_cache(replica: str) -> Cache:
        cache = Cache(client, name, ttl=0.0, replica=replica)
        made.append(cache)
        return cache

    outcome = race(
        make_cache,
        replicas=args.replicas,
        nodes=args.nodes,
        pods=args.pods,
        seed=args.seed + run,
        churn_per_second=args.churn,
        candidates=ranked,
    )
    audit = made[0]
    started = time.monotonic()
    broken = claim_violations(audit)
    audited = time.monotonic() - started
    clean = audit.verify() == []
    audit.clear()
    return {
        "candidates": ranked,
        "placed": outcome.placed,
        "violations": len(broken),
        "examples": broken[:5],
        "decisions_per_placed": outcome.decisions / max(outcome.placed, 1),
        "redone_per_placed": (outcome.decisions - outcome.placed - outcome.unschedulable)
        / max(outcome.placed, 1),
        "unplaced": args.pods - outcome.placed,
        "conflicts": dict(outcome.conflicts),
        "churn": dict(outcome.churn),
        "pods_per_second": outcome.placed / outcome.seconds if outcome.seconds else 0.0,
        "audit_seconds": audited,
        "verify_clean": clean,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="a Redis URL (default: a server started here)")
    parser.add_argument("--replicas", type=positive, default=4)
    parser.add_argument("--nodes", type=positive, default=40)
    parser.add_argument("--pods", type=positive, default=5000)
    parser.add_argument(
        "--churn", type=float, default=25.0, help="node/pod changes a second (0: none)"
    )
    parser.add_argument("--runs", type=positive, default=1)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--no-candidates", action="store_true")
    args = parser.parse_args()
    server = None
    with tempfile.TemporaryDirectory() as directory:
        url = args.redis
        if url is None:
            port = free_port()
            server = start_server(directory, port)
            url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            rows: list[dict[str, Any]] = []
            modes = [False] if args.no_candidates else [True, False]
            for run in range(args.runs):
                for ranked in modes:
                    rows.append(one_run(client, args, run, ranked))
        finally:
            if server is not None:
                server.terminate()
                server.wait()
    table = []
    for ranked in sorted({r["candidates"] for r in rows}, reverse=True):
        mine = [r for r in rows if r["candidates"] == ranked]
        table.append(
            [
                "yes" if ranked else "no",
                sum(r["placed"] for r in mine),
                sum(r["violations"] for r in mine),
                f"{statistics.median(r['redone_per_placed'] for r in mine):.3f}",
                sum(r["unplaced"] for r in mine),
                f"{statistics.median(r['pods_per_second'] for r in mine):.0f}",
                " ".join(f"{k} {v}" for k, v in sorted(_sum(mine, "conflicts").items())),
                sum(sum(r["churn"].values()) for r in mine),
                all(r["verify_clean"] for r in mine),
            ]
        )
    print_table(
        f"{args.replicas} replicas, {args.nodes} nodes, {args.pods} pods per run, "
        f"{args.runs} run(s), churn {args.churn:g}/s",
        [
            "candidates",
            "placed",
            "violations",
            "redone/placed",
            "unplaced",
            "pods/s",
            "conflicts by reason",
            "churn ops",
            "verify",
        ],
        table,
    )
    path = write_results("rule_race", {"args": vars(args), "runs": rows})
    print(f"\nwritten to {path}")


def _sum(rows: list[dict[str, Any]], key: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for row in rows:
        for name, count in row[key].items():
            total[name] = total.get(name, 0) + count
    return total


if __name__ == "__main__":
    main()
