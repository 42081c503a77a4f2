"""Snapshot reads off the primary: what ``read_from="replica"`` saves the primary, same run.

Starts a primary and one replica (``redis-server``, no persistence, on free loopback ports),
loads ``--nodes`` nodes with ``--pods-per-node`` pods, then, for each mode (``primary``, then
``replica``, on a fresh cache of the same two servers, so replication costs the same in both),
``--schedulers`` in-process schedulers (each a Cache with its own Snapshot) take turns: each
brings its snapshot up to date, then claims ``--claims-per-round`` pods (``check_fit``) on
nodes picked round robin, until each claimed ``--claims`` pods. Reports, per claimed pod,
the CPU the primary and the replica used (``INFO cpu``, user + system) and their time in
snapshot reads (``INFO commandstats``: ``FCALL_RO`` and ``XRANGE``). Prints a table and
writes ``bench/results/read_replicas.json``. Each mode runs ``--repeat`` times, alternating
which goes first; the medians are compared.

    python bench/read_replicas.py [--nodes 1000] [--pods-per-node 10] [--schedulers 4]
                                  [--claims 500] [--claims-per-round 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import positive, print_table, start_server, write_results
from bench.snapshot import cluster_pod, populate, redis_cpu
from schedcache import Cache, Snapshot
from schedcache.store.connection import connect
from tests.servers import free_port, wait_until

MODES = ("primary", "replica")


def snapshot_read_usec(server: redis.Redis) -> float:
    """Microseconds the server spent in snapshot reads since the last ``CONFIG RESETSTAT``."""
    stats = server.info("commandstats")
    return sum(float(stats.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in ("fcall_ro", "xrange"))


def run_mode(
    mode: str, url: str, primary: redis.Redis, replica: redis.Redis, args: argparse.Namespace
) -> dict[str, Any]:
    name = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
    loader = Cache(connect(url), name)
    populate(loader, args.nodes, args.pods_per_node)
    assert primary.execute_command("WAIT", 1, 60_000) >= 1
    schedulers = [
        (Cache(connect(url), name, replica=f"s{i}", read_from=mode), Snapshot())
        for i in range(args.schedulers)
    ]
    for cache, snap in schedulers:
        cache.update_snapshot(snap)
    for server in (primary, replica):
        server.execute_command("CONFIG", "RESETSTAT")
    cpu = {"primary": redis_cpu(primary), "replica": redis_cpu(replica)}
    claimed = conflicts = 0
    started = time.perf_counter()
    for round_start in range(0, args.claims, args.claims_per_round):
        for index, (cache, snap) in enumerate(schedulers):
            cache.update_snapshot(snap)
            for k in range(round_start, min(round_start + args.claims_per_round, args.claims)):
                node = (k * args.schedulers + index) % args.nodes
                pod = cluster_pod(node, args.pods_per_node + k, tag=f"-s{index}")
                try:
                    cache.assume_pod(pod, check_fit=True)
                    claimed += 1
                except Exception:  # (a claim refused at the primary: counted, not fatal)
                    conflicts += 1
    seconds = time.perf_counter() - started
    used = {
        role: redis_cpu(server) - cpu[role]
        for role, server in (("primary", primary), ("replica", replica))
    }
    result = {
        "mode": mode,
        "claimed": claimed,
        "conflicts": conflicts,
        "seconds": seconds,
        "primary_cpu_us_per_pod": used["primary"] / claimed * 1e6,
        "replica_cpu_us_per_pod": used["replica"] / claimed * 1e6,
        "primary_snapshot_reads_us_per_pod": snapshot_read_usec(primary) / claimed,
        "replica_snapshot_reads_us_per_pod": snapshot_read_usec(replica) / claimed,
    }
    loader.clear()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive, default=1000)
    parser.add_argument("--pods-per-node", type=positive, default=10)
    parser.add_argument("--schedulers", type=positive, default=4)
    parser.add_argument("--claims", type=positive, default=500, help="per scheduler")
    parser.add_argument("--claims-per-round", type=positive, default=10)
    parser.add_argument(
        "--repeat", type=positive, default=3, help="runs of each mode, alternating which is first"
    )
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="schedcache-read-replicas-")
    primary_port, replica_port = free_port(), free_port()
    servers = []
    for port in (primary_port, replica_port):
        Path(directory, str(port)).mkdir()
        servers.append(start_server(str(Path(directory, str(port))), port))
    try:
        primary = redis.Redis(port=primary_port)
        replica = redis.Redis(port=replica_port)
        replica.execute_command("REPLICAOF", "127.0.0.1", primary_port)
        wait_until(
            lambda: replica.info("replication").get("master_link_status") == "up", 20, "replica"
        )
        url = f"redis://127.0.0.1:{primary_port}/0"
        results = [
            run_mode(mode, url, primary, replica, args)
            for run in range(args.repeat)
            for mode in (MODES if run % 2 == 0 else MODES[::-1])
        ]
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    rows = [
        [
            r["mode"],
            r["claimed"],
            r["conflicts"],
            f"{r['primary_cpu_us_per_pod']:.1f}",
            f"{r['primary_snapshot_reads_us_per_pod']:.1f}",
            f"{r['replica_cpu_us_per_pod']:.1f}",
            f"{r['replica_snapshot_reads_us_per_pod']:.1f}",
            f"{r['seconds']:.2f}",
        ]
        for r in results
    ]
    print_table(
        f"read_from, {args.schedulers} schedulers, {args.nodes} nodes x {args.pods_per_node} "
        f"pods, {args.claims} claims each, update every {args.claims_per_round}: "
        "µs per claimed pod",
        [
            "read_from",
            "claimed",
            "conflicts",
            "primary CPU",
            "primary snapshot reads",
            "replica CPU",
            "replica snapshot reads",
            "seconds",
        ],
        rows,
    )
    medians = {
        mode: {
            key: statistics.median(r[key] for r in results if r["mode"] == mode)
            for key in ("primary_cpu_us_per_pod", "primary_snapshot_reads_us_per_pod")
        }
        for mode in MODES
    }
    saved = (
        1
        - medians["replica"]["primary_cpu_us_per_pod"]
        / medians["primary"]["primary_cpu_us_per_pod"]
    )
    for mode in MODES:
        print(
            f"median, read_from={mode}: primary CPU "
            f"{medians[mode]['primary_cpu_us_per_pod']:.1f} µs per claimed pod, in snapshot "
            f"reads {medians[mode]['primary_snapshot_reads_us_per_pod']:.1f}"
        )
    print(f"primary CPU per claimed pod with read_from=replica: {saved:.0%} less")
    payload = {"args": vars(args), "runs": results, "medians": medians, "saved": saved}
    path = write_results("read_replicas", payload)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
