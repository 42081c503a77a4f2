"""bench/e2e.py as docs/performance.md shows it: it runs with nothing but what the README's
prerequisites name (it starts a redis-server of its own), it never flushes a database it did
not create unless told to, and what it lacks it says in one line, not a traceback.

The bench itself is not a test: the one run here is scaled down to a few seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import REAL_REDIS_URL, real_client

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--nodes", "20", "--initial", "10", "--measured", "20", "--replicas", "1"]
TINY += ["--capacity", "20", "--capacity-clients", "1x1"]


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/e2e.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_it_runs_as_documented_on_a_redis_server_of_its_own(tmp_path):
    """No --url: a redis-server it starts, places every measured pod, stops it again (6-8 s:
    the only check that the documented command works)."""
    out = tmp_path / "e2e.json"
    done = bench(*TINY, "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "redis-server of the bench's own: redis://127.0.0.1:" in done.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["bound"], row["over allocatable"], row["bound twice"]) == (20, 0, 0)
    # Issue 40: the start-up apart from the steady rate, and Redis's time a pod beside it.
    assert 0 < row["start s"] < row["seconds"]
    assert row["steady pods/s"] > 0 and row["redis µs/pod"] > 0 and row["redis cpu µs/pod"] > 0
    assert row["redis µs/pod"] == pytest.approx(sum(row["redis µs/pod by command"].values()), abs=2)
    assert "fcall" in row["redis µs/pod by command"]
    url = json.loads(out.read_text())["args"]["url"]
    port = url.rsplit(":", 1)[1].split("/")[0]
    ping = subprocess.run(["redis-cli", "-p", port, "ping"], capture_output=True, text=True)
    assert "PONG" not in ping.stdout  # stopped at the end


def test_it_refuses_to_flush_a_database_that_holds_data():
    client = real_client()
    key = f"someones-data-{uuid.uuid4().hex}"
    client.set(key, "keep me")
    try:
        done = bench(*TINY, "--url", REAL_REDIS_URL, "--json", os.devnull)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "--flush" in line and "keys" in line
        assert client.get(key) == b"keep me"
    finally:
        client.delete(key)


def test_without_redis_server_it_says_so_in_one_line(tmp_path):
    """PATH holds the Python it runs with and nothing else: no redis-server to start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    done = bench(*TINY, "--json", os.devnull, env=env)
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bench/e2e.py: no redis-server") and "--url" in line


def test_an_unreachable_url_is_one_line():
    done = bench(*TINY, "--url", "redis://127.0.0.1:1/0", "--json", os.devnull)
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bench/e2e.py: --url redis://127.0.0.1:1/0:")
