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
from click.testing import CliRunner

import schedcache
from schedcache import Cache
from schedcache.cli.app import main
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store.connection import ConnectionFailed
from tests.factories import make_node, make_pod
from tests.test_deploy import render

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "deploy/overlays/redis-sentinel"
HOSTS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
MASTER = "schedcache"
# The keys of the Secret schedcache-redis-users the overlay reads (docs/kubernetes.md).
SECRET_KEYS = (
    "admin",
    "feeder",
    "scheduler",
    "worker",
    "replica",
    "sentinel",
    "sentinels-requirepass",
)


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
        # The Secret schedcache-redis-users, as the kubelet mounts it: a file per key.
        self.passwords = {key: os.urandom(12).hex() for key in SECRET_KEYS}
        self.users = data / "users"

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
            # Short, so a vote that two Sentinels split is held again after 10 s, not 30.
            "FAILOVER_TIMEOUT_MS": "5000",
            "DATA": str(self.data / f"pod-{index}"),
            "RULES": str(SCRIPTS / "users.acl.rules"),
            "USERS": str(self.users),
            "RUN": str(self.data / f"run-{index}"),
            "BIND": HOSTS[index],
        }

    def environment(self, index: int) -> dict[str, str]:
        (self.data / f"pod-{index}").mkdir(exist_ok=True)
        (self.data / f"run-{index}").mkdir(exist_ok=True)
        self.users.mkdir(exist_ok=True)
        for key, password in self.passwords.items():
            (self.users / key).write_text(password)
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

    def client(self, index: int, port: int, user: str | None = "admin") -> redis.Redis:
        """A client of a pod's Redis (as ``user``) or Sentinel (with the Sentinels' password);
        ``user=None``: with no password."""
        if user is None:
            credentials: dict[str, str] = {}
        elif port == self.sentinel_port:
            credentials = {"password": self.passwords["sentinels-requirepass"]}
        else:
            credentials = {"username": user, "password": self.passwords[user]}
        return redis.Redis(
            HOSTS[index], port, socket_timeout=2, socket_connect_timeout=1, **credentials
        )

    def role(self, index: int) -> list[object]:
        return list(self.client(index, self.redis_port).execute_command("ROLE"))

    def primary(self, via: int) -> str:
        sentinel = self.client(via, self.sentinel_port)
        host, _ = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)
        return str(host.decode())

    def url(self, user: str = "admin", sentinel_password: str | None = None) -> str:
        """The URL a component's SCHEDCACHE_REDIS_URL names (its user, the Sentinels' password)."""
        sentinels = ",".join(f"{host}:{self.sentinel_port}" for host in HOSTS)
        secret = self.passwords["sentinels-requirepass"]
        if sentinel_password is not None:
            secret = sentinel_password
        return (
            f"redis+sentinel://{user}:{self.passwords[user]}@{sentinels}/{MASTER}"
            f"?sentinel_password={secret}"
        )


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
    # (down-after, the vote and the promotion: seconds. Over 20 s once, and over 60 s once, on
    # a loaded 2-core CI run: both Sentinels asked for votes at once and split them, and each
    # waits twice the failover timeout before it asks again, 120 s with the 60 s then set.)
    eventually(lambda: pods.primary(1) != HOSTS[0], "a replica is promoted", timeout=60.0)
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
    # All of it authenticated: replicas log in as `replica`, the Sentinels as `sentinel`,
    # and neither was refused anything it asked (Redis logs every denial).
    for index in (0, 1, 2):
        if (index, "redis") in pods.processes:
            assert denials(pods.client(index, pods.redis_port)) == [], index


def denials(client: redis.Redis) -> list[object]:
    """The ACL log of a Redis, less redis-py's CLIENT SETINFO (refused to users without it,
    harmlessly: redis-py goes on)."""
    return [e for e in client.acl_log() if e["object"] != "client|setinfo"]


def test_nothing_is_served_without_a_password(pods: Pods) -> None:
    for index in range(3):
        for port in (pods.redis_port, pods.sentinel_port):
            with pytest.raises(redis.exceptions.AuthenticationError):
                pods.client(index, port, user=None).ping()
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(HOSTS[index], pods.sentinel_port, password="wrong").ping()
        admin = pods.client(index, pods.redis_port)
        assert admin.config_get("protected-mode") == {"protected-mode": "yes"}
        assert any(line.startswith("user default off") for line in admin.acl_list())
    # A component's URL with a wrong password: the Sentinels' (none answers), or its own.
    with pytest.raises(ConnectionFailed, match="no Sentinel answered"):
        schedcache.connect(pods.url("feeder", sentinel_password="wrong"))
    wrong = pods.url("feeder").replace(pods.passwords["feeder"], "wrong")
    with pytest.raises(ConnectionFailed, match="invalid username-password"):
        schedcache.connect(wrong)
    # The replicas replicate as the user `replica` (masteruser), which may do that only.
    for index in (1, 2):
        replica = pods.client(index, pods.redis_port)
        assert replica.config_get("masteruser") == {"masteruser": "replica"}
    replication = pods.client(0, pods.redis_port, user="replica")
    with pytest.raises(redis.exceptions.NoPermissionError):
        replication.get("{default}:gen")
    sentinel = pods.client(0, pods.redis_port, user="sentinel")
    with pytest.raises(redis.exceptions.NoPermissionError):
        sentinel.get("{default}:gen")


def test_each_component_runs_its_part_as_its_own_user_through_the_sentinels(pods: Pods) -> None:
    loaded = CliRunner().invoke(main, ["--redis", pods.url("admin"), "scripts"])
    assert loaded.exit_code == 0, loaded.output  # deploy/jobs/scripts, as the admin
    primary = pods.client(0, pods.redis_port)
    primary.acl_log_reset()
    feeder = Cache(schedcache.connect(pods.url("feeder")), "default", wait_replicas=1)
    with feeder.batch() as batch:
        batch.add_node(make_node("n1", "4", "8Gi"))
        batch.add_pod(make_pod("fed", "n1", "100m", "64Mi"))
    scheduler = Cache(schedcache.connect(pods.url("scheduler")), "default", wait_replicas=1)
    due = make_pod("due", "n1", "100m", "64Mi")
    scheduler.assume_pod(due, check_fit=True)
    scheduler.finish_binding(due, now=float(scheduler.client.time()[0]) - 3600)
    worker = Cache(schedcache.connect(pods.url("worker")), "default", wait_replicas=1)
    assert ExpiryWorker(worker).run_once() == ["due"]
    worker.checkpoint()
    worker.compact()
    assert worker.verify() == []
    assert denials(primary) == []
    with pytest.raises(redis.exceptions.NoPermissionError):
        Cache(schedcache.connect(pods.url("feeder")), "other").add_node(make_node("x"))


def test_the_scripts_get_the_environment_the_manifest_gives() -> None:
    (redis,) = [o for o in render("deploy/overlays/redis-sentinel") if o["kind"] == "StatefulSet"]
    for container in redis["spec"]["template"]["spec"]["containers"]:
        given = {e["name"] for e in container["env"]} - {"POD_NAME", "POD_NAMESPACE"}
        # The test adds BIND only: its "pods" share one network namespace.
        assert given == set(Pods(Path("/nonexistent")).variables()) - {"BIND"}
        script = container["command"][-1]
        assert (SCRIPTS / Path(script).name).exists()


def test_password_rotations_as_docs_kubernetes_md_shows_them(pods: Pods) -> None:
    """A component's password: the new one beside the old on every server (Redis does not
    replicate its users), the pods moved, the old one taken away. The Sentinels' password: the
    new one added to each Sentinel, the Secret changed, each Sentinel restarted with it alone."""
    old, new = pods.passwords["feeder"], os.urandom(12).hex()
    servers = [pods.client(index, pods.redis_port) for index in range(3)]
    for server in servers:
        server.execute_command("ACL", "SETUSER", "feeder", f">{new}")
    for password in (old, new):  # both work while the pods roll, whichever is the primary
        pods.passwords["feeder"] = password
        assert schedcache.connect(pods.url("feeder")).ping()
    for server in servers:
        server.execute_command("ACL", "SETUSER", "feeder", f"<{old}")
    pods.passwords["feeder"] = old
    with pytest.raises(ConnectionFailed, match="invalid username-password"):
        schedcache.connect(pods.url("feeder"))
    pods.passwords["feeder"] = new
    assert schedcache.connect(pods.url("feeder")).ping()

    old, new = pods.passwords["sentinels-requirepass"], os.urandom(12).hex()
    for index in range(3):
        pods.client(index, pods.sentinel_port).execute_command(
            "ACL", "SETUSER", "default", f">{new}"
        )
    for password in (old, new):
        assert schedcache.connect(pods.url("feeder", sentinel_password=password)).ping()
    pods.passwords["sentinels-requirepass"] = new  # the Secret patched
    for index in range(3):  # the StatefulSet restarted: each Sentinel with the Secret's
        pods.kill(index, "sentinel")
        pods.start(index, "sentinel")
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(HOSTS[index], pods.sentinel_port, password=old).ping()
    assert schedcache.connect(pods.url("feeder")).ping()
    with pytest.raises(ConnectionFailed):
        schedcache.connect(pods.url("feeder", sentinel_password=old))
    # and they still agree on the primary, with both replicas
    eventually(replicas_known(pods, 2), "every Sentinel knows both replicas")
    assert {pods.primary(index) for index in range(3)} == {HOSTS[0]}
