"""The start scripts of deploy/overlays/redis-sentinel choose the right role, run here on real
servers.

Each "pod" is a redis-server and a Sentinel started by the overlay's own ``redis.sh`` and
``sentinel.sh`` with the environment its manifest gives, except that its host is a loopback
address of its own (127.0.0.11-13, as pods have addresses of their own) and the ports are
free ones. Sentinel needs real servers: there is no fakeredis variant of this test.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import schedcache
from schedcache import Cache
from tests.factories import make_node
from tests.test_deploy import render

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "deploy/overlays/redis-sentinel"
HOSTS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
MASTER = "schedcache"


def free_on_every_host() -> int:
    for _ in range(100):
        port = random.randint(20_000, 60_000)
        try:
            for host in HOSTS:
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return port
    raise AssertionError("no port free on every test host")


def eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


class Pods:
    """Three pods' Redis and Sentinel processes, started by the overlay's scripts."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.redis_port = free_on_every_host()
        self.sentinel_port = free_on_every_host()
        self.processes: dict[tuple[int, str], subprocess.Popen[bytes]] = {}

    def variables(self, index: int = 0) -> dict[str, str]:
        """What the manifest's env gives a pod's containers, for this test's hosts and ports."""
        return {
            "SELF": HOSTS[index],
            "PEERS": " ".join(HOSTS),
            "MASTER_NAME": MASTER,
            "REDIS_PORT": str(self.redis_port),
            "SENTINEL_PORT": str(self.sentinel_port),
            "QUORUM": "2",
            "DOWN_AFTER_MS": "1000",
            "DATA": str(self.data / f"pod-{index}"),
            "BIND": HOSTS[index],
        }

    def environment(self, index: int) -> dict[str, str]:
        (self.data / f"pod-{index}").mkdir(exist_ok=True)
        return {**os.environ, **self.variables(index)}

    def start(self, index: int, part: str) -> None:
        self.processes[(index, part)] = subprocess.Popen(
            ["sh", str(SCRIPTS / f"{part}.sh")],
            env=self.environment(index),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port = self.redis_port if part == "redis" else self.sentinel_port
        eventually(lambda: self.client(index, port).ping(), f"pod {index} {part} answers")

    def ready(self, index: int) -> bool:
        """The overlay's readiness probe of Redis, run as the kubelet runs it."""
        probe = subprocess.run(
            ["sh", str(SCRIPTS / "ready.sh")], env=self.environment(index), capture_output=True
        )
        return probe.returncode == 0

    def kill(self, index: int, part: str) -> None:
        process = self.processes.pop((index, part))
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def client(self, index: int, port: int) -> redis.Redis:
        return redis.Redis(HOSTS[index], port, socket_timeout=2, socket_connect_timeout=1)

    def role(self, index: int) -> list[object]:
        return list(self.client(index, self.redis_port).execute_command("ROLE"))

    def primary(self, via: int) -> str:
        sentinel = self.client(via, self.sentinel_port)
        host, _ = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)
        return str(host.decode())

    def url(self) -> str:
        sentinels = ",".join(f"{host}:{self.sentinel_port}" for host in HOSTS)
        return f"redis+sentinel://{sentinels}/{MASTER}"


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Pods]:
    started = Pods(tmp_path)
    try:
        # A StatefulSet starts its pods in order. Here the Sentinels come last, so that each
        # finds both replicas in its first INFO of the primary (Sentinel asks every 10 s).
        for index in range(3):
            started.start(index, "redis")
            eventually(lambda: started.ready(index), f"pod {index} ready")  # noqa: B023
        for index in range(3):
            started.start(index, "sentinel")
        yield started
    finally:
        for process in started.processes.values():
            process.kill()
            process.wait(10)


def replicas_known(pods: Pods, count: int) -> Callable[[], bool]:
    def check() -> bool:
        for index in range(3):
            sentinel = pods.client(index, pods.sentinel_port)
            if len(sentinel.execute_command("SENTINEL", "replicas", MASTER)) != count:
                return False
        return True

    return check


def test_a_failed_primary_comes_back_as_a_replica_and_a_whole_restart_keeps_the_primary(
    pods: Pods,
) -> None:
    # Given the first start: pod 0 is the primary, 1 and 2 replicate it.
    assert pods.role(0)[0] == b"master"
    assert [pods.role(i)[0] for i in (1, 2)] == [b"slave", b"slave"]
    eventually(replicas_known(pods, 2), "every Sentinel knows both replicas")
    # As the overlay sets SCHEDCACHE_WAIT_REPLICAS=1: acknowledged once a replica has it.
    cache = Cache(schedcache.connect(pods.url()), f"s-{uuid.uuid4().hex[:8]}", wait_replicas=1)
    cache.add_node(make_node("n1", "4", "8Gi"))

    # When the primary's pod is lost with its volume (a node gone, a node-local volume), the
    # Sentinels promote a replica, and acknowledged writes survive.
    pods.kill(0, "redis")
    pods.kill(0, "sentinel")
    eventually(lambda: pods.primary(1) != HOSTS[0], "a replica is promoted")
    promoted = pods.primary(1)
    cache.add_node(make_node("n2", "4", "8Gi"))
    assert cache.node_count() == 2
    shutil.rmtree(pods.data / "pod-0")

    # Then pod 0, rescheduled on a fresh volume, asks the Sentinels and replicates the
    # promoted primary instead of starting an empty one.
    pods.start(0, "redis")
    pods.start(0, "sentinel")
    role = pods.role(0)
    assert role[0] == b"slave" and role[1].decode() == promoted

    # And after every process of the set stops at once, pod 0 (which a StatefulSet starts
    # first) comes back as a replica of the last primary its Sentinel saw, never as a primary
    # of its own older data.
    eventually(
        lambda: (
            f"monitor {MASTER} {promoted} "
            in (pods.data / "pod-0/sentinel/sentinel.conf").read_text()
        ),
        "pod 0's Sentinel wrote the failover down",
    )
    for index, part in list(pods.processes):
        pods.kill(index, part)
    pods.start(0, "redis")
    assert pods.role(0)[:2] == [b"slave", promoted.encode()]


def test_the_scripts_get_the_environment_the_manifest_gives() -> None:
    (redis,) = [o for o in render("deploy/overlays/redis-sentinel") if o["kind"] == "StatefulSet"]
    for container in redis["spec"]["template"]["spec"]["containers"]:
        given = {e["name"] for e in container["env"]} - {"POD_NAME", "POD_NAMESPACE"}
        # The test adds BIND only: its "pods" share one network namespace.
        assert given == set(Pods(Path("/nonexistent")).variables()) - {"BIND"}
        script = container["command"][-1]
        assert (SCRIPTS / Path(script).name).exists()
