"""bench/extender.py as docs/extender.md shows it, scaled down to a few seconds: on a
redis-server of its own, both profiles drive the extender through its HTTP verbs with the
bench's own client (a kept-alive socket speaking HTTP/1.1 as kube-scheduler's Go client does)
and bind every pod once. The bench itself is not a test: this is the one check that the
documented command still works (issue 43's figures come from it)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_rows(tmp_path: Path, arguments: list[str]) -> list[dict[str, Any]]:
    """The rows of one run of the bench with ``arguments``, on a redis-server of its own."""
    out = tmp_path / "extender.json"
    own = ["--port", str(free_port()), "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "bench/extender.py", *arguments, *own],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"]
    return rows


def test_both_profiles_bind_every_pod_once_through_the_verbs(tmp_path: Path) -> None:
    """Each profile with each binding: ``serial`` (each bind before the next pod's cycle) and
    ``async`` (binds on worker threads while the next pods are filtered, as kube-scheduler's
    binding goroutines)."""
    tiny = ["--nodes", "20", "--initial", "5", "--pods", "12", "--sample", "10"]
    tiny += ["--binding", "serial", "async", "--bind-workers", "3"]
    rows = {(row["profile"], row["binding"]): row for row in bench_rows(tmp_path, tiny)}
    assert set(rows) == {
        (profile, binding) for profile in ("full", "bind-only") for binding in ("serial", "async")
    }
    for (profile, binding), row in rows.items():
        checks = ("over allocatable", "bound twice", "unbound", "rules broken")
        assert [row[check] for check in checks] == [0, 0, 0, 0], (profile, binding, row)
        assert row["pods/s"] > 0 and row["bind p50 ms"] > 0
        # The full profile went through filter and prioritize first; bind-only did not.
        if profile == "full":
            assert row["filter p50 ms"] > 0 and row["prioritize p50 ms"] > 0
        else:
            assert "filter p50 ms" not in row


def test_async_binding_gives_up_an_unplaceable_pod_as_serial_does(tmp_path: Path) -> None:
    """Found in review (mended): two nodes with room for one pod each and four pods; after its
    cycles the async client left the row waiting on its pipe for ever, where serial reports
    the pods unbound. Both now finish and count them."""
    full = ["--nodes", "2", "--initial", "78", "--pods", "4", "--sample", "2"]
    full += ["--profiles", "full", "--binding", "async", "--bind-workers", "2"]
    (row,) = bench_rows(tmp_path, full)
    assert row["unbound"] > 0 and row["over allocatable"] == 0 and row["bound twice"] == 0
