"""Wall time of ``schedcache get`` and ``describe``, start-up included, against a real Redis,
optionally beside another source tree (the release before) in alternating runs.

Fills a cache with ``demo`` (6 nodes, 40 pods), then runs each command ``--runs`` times as a
user does (a fresh ``python -m schedcache.cli`` process each time), this tree and ``--before``
taking turns so both meet the same machine load; prints the medians of wall time and of CPU
time (user + system, less disturbed by other processes on a shared machine) and their ratios,
and writes ``bench/results/cli_startup.json``. Bytecode is cached as in an installed package (one
warm-up run each, without ``PYTHONDONTWRITEBYTECODE``). ``python -X importtime`` shows where
the rest goes.

    python bench/cli_startup.py [--redis redis://127.0.0.1:6379/0] [--runs 15] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import positive, print_table, write_results
from schedcache import Cache, connect

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"get pods -A": ["get", "pods", "-A"], "describe node": ["describe", "node"]}


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a command run from ``tree``, with bytecode cached as an installed
    package has it (compiling every module at each start would measure the compiler)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree)}


def run_once(tree: Path, url: str, cache: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds one ``schedcache`` process takes, from exec to exit."""
    env = tree_env(tree)
    command = [sys.executable, "-m", "schedcache.cli", "--redis", url, "--cache", cache, *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # cwd: `python -m` puts it first on sys.path, before PYTHONPATH
    subprocess.run(command, env=env, cwd=tree, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--runs", type=positive, default=15)
    parser.add_argument("--before", type=Path, default=None, help="another source tree")
    options = parser.parse_args()
    cache = f"bench-startup-{uuid.uuid4().hex[:8]}"
    trees = {"this tree": ROOT}
    if options.before is not None:
        trees["before"] = options.before.resolve()
    subprocess.run(
        [
            *(sys.executable, "-m", "schedcache.cli", "--redis", options.redis),
            *("--cache", cache, "demo", "--nodes", "6", "--pods", "40", "--replicas", "1"),
        ],
        env=tree_env(ROOT),
        check=True,
        capture_output=True,
    )
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {label: [] for label in trees} for name in COMMANDS
    }
    try:
        for args in COMMANDS.values():  # warm-up: bytecode written
            for tree in trees.values():
                run_once(tree, options.redis, cache, args)
        for _ in range(options.runs):
            for name, args in COMMANDS.items():
                for label, tree in trees.items():  # alternating: same load for both
                    runs[name][label].append(run_once(tree, options.redis, cache, args))
    finally:
        Cache(connect(options.redis), cache).clear()
    medians = {
        name: {
            label: [statistics.median(r[i] for r in results) for i in (0, 1)]
            for label, results in by.items()
        }
        for name, by in runs.items()
    }
    rows = []
    for name, by in medians.items():
        row = [name]
        for i in (0, 1):
            row += [f"{by[label][i]:.3f}" for label in trees]
            if "before" in by:
                row.append(f"{by['before'][i] / by['this tree'][i]:.2f}x")
        rows.append(row)
    columns = ["command"]
    for what in ("wall", "cpu"):
        columns += [f"{what} {label}" for label in trees] + ["before/this"] * ("before" in trees)
    print_table(f"schedcache start-up + command, median of {options.runs} runs (s)", columns, rows)
    payload = {"runs": options.runs, "wall_cpu_seconds": runs, "medians_wall_cpu": medians}
    print(f"\nwritten to {write_results('cli_startup', payload)}")


if __name__ == "__main__":
    main()
