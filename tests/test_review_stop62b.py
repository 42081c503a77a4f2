"""Review of stop 62 (second pass): `schedcache demo --redis` with its replica processes
(both found in review, mended: schedcache/sim/processes.py).

Both tests run the real CLI in a process group of its own, as a terminal runs it, against
the test Redis, and act once the replicas are scheduling (claims reach the stream)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import redis

from tests.conftest import REAL_REDIS_URL, real_client

NODES, PODS = 50, 30_000


def start_demo(name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "schedcache.cli",
            "--redis",
            REAL_REDIS_URL,
            "demo",
            "--cache",
            name,
            "--reset",
            "--nodes",
            str(NODES),
            "--pods",
            str(PODS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the replicas are in it too
    )


def wait_until_scheduling(client: redis.Redis, name: str, demo: subprocess.Popen[bytes]) -> None:
    """Until the replicas have claimed some pods (past the start barrier)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert demo.poll() is None, demo.communicate()
        if client.xlen(f"{{{name}}}:events") > NODES + 50:
            return
        time.sleep(0.05)
    pytest.fail("the replicas never started claiming")


def replica_pids(demo: subprocess.Popen[bytes]) -> list[int]:
    """The pool's worker processes: children of the demo spawned to run spawn_main."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                args = cmdline.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == demo.pid and b"spawn_main" in args:
            found.append(int(entry))
    return found


def stop_group(demo: subprocess.Popen[bytes]) -> None:
    if demo.poll() is None:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()


def test_ctrl_c_while_the_replicas_schedule_prints_no_traceback() -> None:
    """Found (mended): Ctrl-C (SIGINT to the foreground process group, as a terminal sends it, or
    `timeout -s INT 4 schedcache --redis URL demo --cache x --pods 20000 --nodes 50`) while
    the replica processes schedule ends with status 130 but prints each replica's
    KeyboardInterrupt traceback ("Process SpawnPoolWorker-1:", ~55 lines each) on stderr.
    Every other command ends a Ctrl-C with 130 and no traceback (commit 0be63b5)."""
    client = real_client()
    name = f"t-{uuid.uuid4().hex[:12]}"
    demo = start_demo(name)
    try:
        wait_until_scheduling(client, name, demo)
        os.killpg(demo.pid, signal.SIGINT)
        _, err = demo.communicate(timeout=60)
        stderr = err.decode(errors="replace")
        assert demo.returncode == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert "SpawnPoolWorker" not in stderr, stderr
    finally:
        stop_group(demo)
        for key in client.scan_iter(match=f"{{{name}}}:*", count=1000):
            client.delete(key)
        client.close()


def test_a_replica_process_killed_while_scheduling_ends_the_run() -> None:
    """Found (mended): a replica process killed (SIGKILL, as the OOM killer does) while the replicas
    schedule leaves `demo` waiting for ever: run_replicas' `pending.get()` has no timeout and
    a multiprocessing.Pool replaces a dead worker without failing its job. (Killed before the
    start barrier it waits STARTUP_SECONDS, 5 minutes, then 5 more in pending.get.) Expected:
    the run ends with an error naming the lost replica, as fd36621 did for one that fails to
    start."""
    client = real_client()
    name = f"t-{uuid.uuid4().hex[:12]}"
    demo = start_demo(name)
    try:
        wait_until_scheduling(client, name, demo)
        pids = replica_pids(demo)
        assert pids, "no replica process found"
        os.kill(pids[0], signal.SIGKILL)
        try:
            demo.wait(timeout=45)  # the whole run takes ~15 s undisturbed (30000 pods, 50 nodes)
        except subprocess.TimeoutExpired:
            pytest.fail("demo still running 45 s after one replica process was killed")
        assert demo.returncode == 1
    finally:
        stop_group(demo)
        for key in client.scan_iter(match=f"{{{name}}}:*", count=1000):
            client.delete(key)
        client.close()
