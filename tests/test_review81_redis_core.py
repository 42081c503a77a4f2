"""Review of c31ae48 (``--redis-core``, ``start_server(..., cores=...)``), helper-81.

Two ways the pinning leaves a redis-server behind:

* ``start_server(..., cores=...)`` starts the server first and pins it afterwards: a set of
  CPUs the process may not use raises ``OSError`` from ``sched_setaffinity`` with the server
  already running, and nobody stops it (the caller never got the ``Popen``).
* ``bench/redis_per_pod.py --redis-core N`` stopped by SIGTERM (``timeout``, a CI's cancel,
  ``kill``) skips the ``finally`` that terminates the row's Redis: it is left running, an
  orphan of init, still pinned to CPU N (and the row's child process runs on to its end).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import start_server  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    ping = ["redis-cli", "-p", str(port), "ping"]
    return bool(subprocess.run(ping, capture_output=True).stdout)


def _shutdown(port: int) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True)


def _kill_tree(pid: int) -> None:
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True)
    for child in children.stdout.split():
        _kill_tree(int(child))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_start_server_on_a_cpu_it_may_not_use_leaves_no_server_running() -> None:
    port = _free_port()
    with tempfile.TemporaryDirectory() as directory:
        try:
            with pytest.raises((OSError, RuntimeError, subprocess.SubprocessError)):
                start_server(directory, port, cores={4096})
            time.sleep(0.3)  # (a server the call left behind answers by now)
            assert not _answers(port), f"start_server raised but left a redis-server on {port}"
        finally:
            _shutdown(port)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--redis-core needs two CPUs")
def test_sigterm_to_the_pinned_bench_leaves_no_redis_behind() -> None:
    core = max(os.sched_getaffinity(0))
    bench = subprocess.Popen(
        [
            sys.executable,
            "bench/redis_per_pod.py",
            *["--nodes", "2000", "--replicas", "1", "--measured", "3000", "--initial", "20"],
            *["--redis-core", str(core), "--name", "test-review81-sigterm"],
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ports: list[int] = []
    rows: list[int] = []
    try:
        # The row's redis-server: the bench's child, "redis-server 127.0.0.1:PORT", and the
        # row's own process, also the bench's child.
        for _ in range(200):
            children = subprocess.run(
                ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(bench.pid)],
                capture_output=True,
                text=True,
            ).stdout
            ports = [
                int(line.split(":")[-1])
                for line in children.splitlines()
                if "redis-server" in line and ":" in line
            ]
            # (the row under way: its process started, the Redis answering)
            if ports and _answers(ports[0]) and " --row " in children:
                break
            time.sleep(0.05)
        assert ports, f"the bench started no redis-server: {children!r} {bench.poll()}"
        rows = [int(line.split()[0]) for line in children.splitlines() if " --row " in line]
        bench.send_signal(signal.SIGTERM)
        bench.wait(30)
        time.sleep(0.5)
        assert not _answers(ports[0]), (
            f"SIGTERM ended the bench but its Redis on port {ports[0]} runs on (pinned to CPU "
            f"{core})"
        )
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(30)
        for port in ports:
            _shutdown(port)
        for pid in rows:  # a row process the bench left running, and what it started
            _kill_tree(pid)
        (ROOT / "bench" / "results" / "test-review81-sigterm.json").unlink(missing_ok=True)
