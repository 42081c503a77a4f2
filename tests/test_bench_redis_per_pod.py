"""bench/redis_per_pod.py as docs/performance.md shows it, scaled down to a few seconds: one
replica places every pod once on a redis-server of the bench's own, and the steady window's
Redis time is split by function. The bench itself is not a test: this checks that the command
issue 40's figures come from still runs. It hung twice when bench/e2e.py's API server gained
an option this bench's arguments lacked (its process died; the row waited on it for ever):
that process's death now ends the bench at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_one_replica_places_every_pod_and_redis_time_is_split_by_function() -> None:
    name = "test-redis-per-pod"
    results = ROOT / "bench" / "results" / f"{name}.json"
    tiny = ["--nodes", "100", "--replicas", "1", "--measured", "100", "--initial", "20"]
    try:
        done = subprocess.run(
            [sys.executable, "bench/redis_per_pod.py", *tiny, "--name", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (row,) = json.loads(results.read_text())["rows"]
    finally:
        results.unlink(missing_ok=True)
    placed = row["row"]
    checks = ("over allocatable", "bound twice", "unbound", "rules broken")
    assert placed["bound"] == 100 and [placed[check] for check in checks] == [0, 0, 0, 0]
    assert row["steady pods"] > 0 and row["redis cpu us/pod"] > 0
    # The pops (with their claims) and sync's confirmations are functions of the library,
    # each row of the breakdown timed by Redis' own slow log.
    functions = set(row["usec"])
    assert "queue_pop" in functions and functions & {"batch", "sync_pod"}, functions
    assert "steady Redis per placed pod" in done.stdout
