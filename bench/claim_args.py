"""Client CPU to build one claim: ``commands.assume_pod(check_fit=True)`` with 7 ranked
candidates, as the reference scheduler sends it for every pod (issue 40: a replica's CPU a pod).

Each measurement runs in a fresh process (``--tree DIR``: one importing ``schedcache`` from
another checkout, the before tree), this tree and ``--tree`` alternated ``--rounds`` times in
one run; a process reports the median over 5 blocks of ``--calls`` calls of its CPU time
(``time.process_time``) a call. Prints a table and writes ``bench/results/claim_args.json``.

    python bench/claim_args.py [--tree /tmp/base] [--rounds 3] [--calls 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, write_results

HERE = Path(__file__).resolve().parent.parent

# Run in the measured tree's process (its cwd and PYTHONPATH: schedcache and tests from it).
PROBE = """
import json, statistics, time
from schedcache.store import commands
from tests.factories import make_pod
pod = make_pod("p", "node-1", "100m", "500Mi", labels={{"app": "web"}})
candidates = tuple((f"node-{{i}}", "", "") for i in range(2, 9))
blocks = []
for _ in range(5):
    start = time.process_time()
    for _ in range({calls}):
        commands.assume_pod(pod, check_fit=True, lease_ttl=15.0, candidates=candidates)
    blocks.append((time.process_time() - start) / {calls} * 1e6)
print(json.dumps(statistics.median(blocks)))
"""


def measure(tree: Path, calls: int) -> float:
    """µs of CPU a claim command in a process importing ``schedcache`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = PROBE.format(calls=calls)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return float(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", default="", help="another checkout, alternated with this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    trees = [("this", HERE)] + ([("tree", Path(args.tree).resolve())] if args.tree else [])
    runs: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, tree in trees:
            runs[name].append(measure(tree, args.calls))
    rows = [
        [
            name,
            str(tree),
            round(statistics.median(runs[name]), 1),
            [round(r, 1) for r in runs[name]],
        ]
        for name, tree in trees
    ]
    print_table(
        "claim command, 7 candidates: client CPU µs a call",
        ["tree", "path", "median µs", "runs"],
        rows,
    )
    path = write_results("claim_args", {"calls": args.calls, "runs": {n: runs[n] for n in runs}})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
