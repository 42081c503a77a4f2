"""A snapshot's catch-up of k events, before and after a change (issue 40; docs/performance.md
"The catch-up in one round trip").

``--instructions``: Redis' CPU instructions of one catch-up's reads, under callgrind: each
tree's library in a ``redis-server`` of its own (100 nodes), k claims (each event carrying its
pod) after the snapshot's last event E, then 200 identical catch-up reads: for ``--base``, the
head read (``sc_snapshot_delta G T -1``) and ``XRANGE events E E'`` (none when k = 0); for this
tree, the head read and ``XRANGE events E + COUNT 1001``, as ``FOLLOW_READ`` sends them.

Without it, the client's wall time of ``update_snapshot`` (``--nodes`` nodes, k claims before
each update, the median of ``--updates``), each tree in a process of its own, alternating
``--runs`` times, on a ``redis-server`` started here.

    python bench/catch_up.py --base /tmp/base40 --instructions --events 0 1 3 10
    python bench/catch_up.py --base /tmp/base40 --events 1 3 --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # (after PYTHONPATH: a row's tree is imported from there)

import redis  # noqa: E402

import bench.server_time as st  # noqa: E402
from bench.common import function_name, load_library, start_server  # noqa: E402
from schedcache.store import commands  # noqa: E402

READS = 200


def instructions(base: str, events: list[int], port: int) -> None:
    trees = {"base": base, "this": str(ROOT)}
    counts: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as directory:
        for offset, (label, tree) in enumerate(trees.items()):
            out = Path(directory) / f"callgrind-{label}.out"
            wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
            server = start_server(directory, port + offset, wrapper)
            try:
                client = redis.Redis(port=port + offset)
                load_library(client, st.library_of(tree))
                st.prepare(client)
                pods = iter(st.make_pod(i, host_port=False) for i in range(10_000))
                for dumps, k in enumerate(events, 1):
                    st.fcall(client, commands.assume_pod(next(pods)))
                    first = client.xrevrange(st.PREFIX + "events", count=1)[0][0]
                    for _ in range(k):
                        st.fcall(client, commands.assume_pod(next(pods)))
                    last = client.xrevrange(st.PREFIX + "events", count=1)[0][0]
                    generation, tree_generation = client.mget(
                        st.PREFIX + "gen", st.PREFIX + "treegen"
                    )
                    name = function_name(client, "snapshot_delta")
                    pipe = client.pipeline(transaction=False)
                    for _ in range(READS):
                        head = (int(generation or 0), int(tree_generation or 0), -1)
                        pipe.fcall_ro(name, 1, st.PREFIX, "", "", *head)
                        if label == "this":
                            pipe.xrange(st.PREFIX + "events", first, "+", 1001)
                        elif k:
                            pipe.xrange(st.PREFIX + "events", first, last, 1001)
                    zero = ["callgrind_control", "-z", str(server.pid)]
                    subprocess.run(zero, check=True, capture_output=True)
                    pipe.execute()
                    dump = ["callgrind_control", "-d", str(server.pid)]
                    subprocess.run(dump, check=True, capture_output=True)
                    counts[(label, k)] = _totals(Path(f"{out}.{dumps}")) / READS
                client.shutdown(nosave=True)
            finally:
                server.terminate()
                server.wait()
    print("events after E | base | this tree | change")
    for k in events:
        before, after = counts[("base", k)], counts[("this", k)]
        print(f"{k} | {before:,.0f} | {after:,.0f} | {after - before:+,.0f}", flush=True)


def _totals(dump: Path) -> int:
    for _ in range(600):
        if dump.exists() and "totals:" in dump.read_text():
            break
        time.sleep(0.05)
    line = next(x for x in dump.read_text().splitlines() if x.startswith("totals:"))
    return int(line.split()[1])


def wall_row(port: int, nodes: int, k: int, updates: int) -> float:
    """This process's tree (its PYTHONPATH): the median µs of an update k claims behind."""
    from schedcache import Cache, Snapshot
    from schedcache.sim.demo import demo_node

    client = redis.Redis(port=port)
    client.flushall()
    cache = Cache(client, name="catchup")
    for i in range(nodes):
        cache.add_node(demo_node(i, "640", "4096Gi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.update_snapshot(snap)
    pods = iter(st.make_pod(i, host_port=False) for i in range(k * updates))
    times = []
    for _ in range(updates):
        for _ in range(k):
            cache.add_pod(next(pods))
        started = time.perf_counter()
        report = cache.update_snapshot(snap)
        times.append(time.perf_counter() - started)
        assert report.events == k and not report.fell_back, report
    return statistics.median(times) * 1e6


def wall(base: str, events: list[int], runs: int, nodes: int, updates: int, port: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, port)
        try:
            for k in events:
                rows: dict[str, list[float]] = {"base": [], "this": []}
                for _ in range(runs):
                    for label, tree in (("base", base), ("this", str(ROOT))):
                        row = [sys.executable, __file__, "--row", str(port), str(nodes)]
                        env = {**os.environ, "PYTHONPATH": tree}
                        done = subprocess.run(
                            [*row, str(k), str(updates)],
                            env=env,
                            check=True,
                            capture_output=True,
                            text=True,
                        )
                        rows[label].append(float(done.stdout))
                print(
                    f"k={k}: base {[round(x) for x in rows['base']]} median "
                    f"{statistics.median(rows['base']):.0f} us; this "
                    f"{[round(x) for x in rows['this']]} median "
                    f"{statistics.median(rows['this']):.0f} us",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="the checkout to compare with")
    parser.add_argument("--events", type=int, nargs="+", default=[0, 1, 3, 10])
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--port", type=int, default=6594)
    parser.add_argument("--row", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(wall_row(*args.row))
    elif args.instructions:
        instructions(args.base, args.events, args.port)
    else:
        wall(args.base, args.events, args.runs, args.nodes, args.updates, args.port)


if __name__ == "__main__":
    main()
