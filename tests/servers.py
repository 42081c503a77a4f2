"""Redis servers that tests and benchmarks start (and kill) themselves, on loopback ports:
single servers with AOF, a Redis Cluster of primaries and replicas, a primary and replica
watched by a Sentinel. Real Redis only: fakeredis has no process to kill."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis


def free_port(bus_offset: int = 0) -> int:
    """A free loopback port (and, with ``bus_offset``, ``port + bus_offset`` free as well:
    Redis Cluster's bus port is the port plus 10000)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if not bus_offset:
            return port
        if port + bus_offset < 65536:
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port + bus_offset))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that takes connections (the kernel's listen backlog) and never reads
    or answers them: a server that stopped, or is busy for good."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until it is true; return the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what}: not within {timeout} s")


@dataclass
class Server:
    """One redis-server process."""

    port: int
    directory: Path
    arguments: list[str]
    process: subprocess.Popen | None = None

    def start(self) -> Server:
        assert shutil.which("redis-server"), "these tests start redis-server: install it"
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 - the process owns it
        self.process = subprocess.Popen(
            [
                "redis-server",
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--dir", str(self.directory), "--save", ""),
                *self.arguments,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        client = self.client()
        wait_until(lambda: bool(client.ping()), 10, f"redis-server on port {self.port}")
        return self

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, **options)  # type: ignore[arg-type]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=20)
        self.process = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Cluster:
    """``primaries`` primaries with ``replicas`` replicas each, created with
    ``redis-cli --cluster create``; fails over after ``node_timeout`` ms."""

    directory: Path
    primaries: int = 3
    replicas: int = 1
    node_timeout: int = 1000
    fsync: str = "always"
    servers: list[Server] = field(default_factory=list)

    def start(self) -> Cluster:
        assert shutil.which("redis-cli"), "the cluster tests need redis-cli: install it"
        for _ in range(self.primaries * (1 + self.replicas)):
            port = free_port(bus_offset=10000)
            self.servers.append(
                Server(
                    port,
                    self.directory / str(port),
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        str(self.node_timeout),
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        self.fsync,
                    ],
                ).start()
            )
        subprocess.run(
            ["redis-cli", "--cluster", "create"]
            + [f"127.0.0.1:{s.port}" for s in self.servers]
            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until(self.healthy, 30, "cluster state ok on every node")
        return self

    def healthy(self) -> bool:
        """Every live node sees the cluster ok, and every replica is in sync."""
        for server in self.servers:
            if not server.alive:
                continue
            client = server.client()
            if client.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                return False
            info = client.info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    @property
    def url(self) -> str:
        live = [s for s in self.servers if s.alive]
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in live[:3])

    def primary_of(self, key: str) -> Server:
        """The live server that is primary for ``key``'s slot."""
        for server in self.servers:
            if server.alive:
                client = server.client()
                slot = client.execute_command("CLUSTER KEYSLOT", key)
                for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        port = primary[1]
                        return next(s for s in self.servers if s.port == port)
        raise RuntimeError("no live node answers")

    def stop(self) -> None:
        for server in self.servers:
            server.kill()


@dataclass
class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (quorum 1 with one)
    watching them as ``master``; fails over ``down_after`` ms after the primary stops
    answering."""

    directory: Path
    replicas: int = 1
    sentinels: int = 1
    down_after: int = 1000
    master: str = "schedcache"
    fsync: str = "always"
    servers: list[Server] = field(default_factory=list)
    watchers: list[Server] = field(default_factory=list)

    def start(self) -> SentinelGroup:
        durable = ["--appendonly", "yes", "--appendfsync", self.fsync]
        primary_port = free_port()
        self.servers.append(Server(primary_port, self.directory / "primary", durable).start())
        for index in range(self.replicas):
            port = free_port()
            self.servers.append(
                Server(
                    port,
                    self.directory / f"replica{index}",
                    [*durable, "--replicaof", "127.0.0.1", str(primary_port)],
                ).start()
            )
        quorum = self.sentinels // 2 + 1
        for index in range(self.sentinels):
            port = free_port()
            directory = self.directory / f"sentinel{index}"
            directory.mkdir(parents=True)
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {self.master} 127.0.0.1 {primary_port} {quorum}\n"
                f"sentinel down-after-milliseconds {self.master} {self.down_after}\n"
                f"sentinel failover-timeout {self.master} 10000\n"
                f"sentinel parallel-syncs {self.master} 1\n"
            )
            sentinel = Server(port, directory, [])
            sentinel.arguments = []
            self.watchers.append(_start_sentinel(sentinel, config))
        wait_until(self.replicas_in_sync, 20, "replicas in sync")
        wait_until(
            lambda: all(
                int(w.client().sentinel_master(self.master)["num-slaves"]) >= self.replicas
                for w in self.watchers
            ),
            20,
            "sentinels see the replicas",
        )
        return self

    def replicas_in_sync(self) -> bool:
        for server in self.servers:
            if not server.alive:
                continue
            info = server.client().info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def replicated(self, primary: Server, timeout: float = 20.0) -> None:
        """Wait until every replica holds every write ``primary`` took (``WAIT`` after a write
        of its own). Replication is asynchronous: a test that kills the primary and expects
        nothing lost must first know the replica caught up, or a promotion of one still
        syncing (after Sentinel's own failover on a loaded machine, say) loses writes, as
        Redis documents."""
        client = primary.client()
        client.set("schedcache-test:replicated", time.time())  # WAIT counts from a write of its own
        wait_until(
            lambda: client.execute_command("WAIT", self.replicas, 1000) >= self.replicas,
            timeout,
            f"{self.replicas} replicas acknowledging the writes of port {primary.port}",
        )

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{w.port}" for w in self.watchers)
        return f"redis+sentinel://{hosts}/{self.master}"

    def primary(self) -> Server:
        _, port = self.watchers[0].client().sentinel_get_master_addr_by_name(self.master)
        return next(s for s in self.servers if s.port == int(port))

    def stop(self) -> None:
        for server in self.watchers + self.servers:
            server.kill()


def _start_sentinel(sentinel: Server, config: Path) -> Server:
    log = open(sentinel.directory / "sentinel.log", "ab")  # noqa: SIM115
    sentinel.process = subprocess.Popen(
        ["redis-server", str(config), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
    )
    client = sentinel.client()
    wait_until(lambda: bool(client.ping()), 10, f"sentinel on port {sentinel.port}")
    return sentinel


@contextmanager
def running(group: Cluster | SentinelGroup) -> Iterator[Cluster | SentinelGroup]:
    try:
        yield group.start()
    finally:
        group.stop()


# -- the Redis of the real-Redis tests ----------------------------------------------------------

INSTALL_HINT = (
    "install redis-server >= 7.0 (`apt-get install redis-server`, `brew install redis`) or set "
    "SCHEDCACHE_TEST_REDIS_URL to a Redis >= 7.0"
)


@dataclass(frozen=True)
class RedisChoice:
    """Where the real-Redis tests run: ``url``, or ``start`` a server of their own, or neither
    (``problem`` says why, and every real-Redis test fails with it: never a silent skip)."""

    url: str | None = None
    start: bool = False
    problem: str = ""


def choose_test_redis(env_url: str | None, have_redis_server: bool) -> RedisChoice:
    """``SCHEDCACHE_TEST_REDIS_URL`` when set (it must answer: no fallback hides a typo), else
    a redis-server the session starts on a free port, else the one-line problem. A Redis that
    answers elsewhere (6379 included) is someone's: never used unless the variable names it."""
    if env_url:
        return RedisChoice(url=env_url)
    if have_redis_server:
        return RedisChoice(start=True)
    return RedisChoice(
        problem="no Redis for the real-Redis tests: SCHEDCACHE_TEST_REDIS_URL is unset and there "
        f"is no redis-server on PATH for the session to start; {INSTALL_HINT}"
    )


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers PING at ``url``."""
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def start_test_redis(directory: Path) -> Server:
    """A throwaway redis-server for a test session: loopback, a free port, no persistence."""
    return Server(free_port(), directory, ["--appendonly", "no"]).start()


def server_url(server: Server) -> str:
    return f"redis://127.0.0.1:{server.port}/0"
