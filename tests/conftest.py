"""The one backend fixture: every behavioural test runs on fakeredis, a real Redis and a Redis
Cluster.

The real server is ``SCHEDCACHE_TEST_REDIS_URL`` when set; else a ``redis-server`` this
session starts on a free loopback port (and stops at the end; its URL is put in
``SCHEDCACHE_TEST_REDIS_URL`` for subprocesses). A Redis the user runs, on 6379 or anywhere, is
never touched unless that variable names it: the tests load the function library and write
keys. The
cluster (3 primaries, 3 replicas) is started by the session with ``redis-server`` and
``redis-cli --cluster create`` (``tests/servers.py``). When there is no server and no
``redis-server`` to start, or the given one does not answer, the real-Redis part of every test
FAILS with one line saying how to get one: a missing server must never turn into silently
skipped coverage. Each test gets its own
cache name on the real server (and deletes its keys afterwards) and a fresh fakeredis server
(a Lua global written by a bad script would poison a shared one).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from schedcache import Cache
from schedcache.store.connection import connect, embedded_client
from tests.apis import Blocking
from tests.servers import (
    INSTALL_HINT,
    Cluster,
    RedisChoice,
    Server,
    choose_test_redis,
    server_url,
    start_test_redis,
)

ENV_TEST_URL = "SCHEDCACHE_TEST_REDIS_URL"
_STARTED: list[Server] = []


def redis_choice(env_url: str | None) -> RedisChoice:
    """The named server, else one to start: never a server nobody named (the one answering on
    6379 may be someone's, and the tests load the function library into it)."""
    return choose_test_redis(env_url, shutil.which("redis-server") is not None)


def _test_redis() -> tuple[str, str]:
    """(URL, problem) of the real-Redis tests' server, starting one when needed. This module is
    imported twice (as pytest's conftest and as tests.conftest): the first import publishes
    the URL in the environment, so the second one and subprocesses use the same server."""
    choice = redis_choice(os.environ.get(ENV_TEST_URL))
    if not choice.start:
        return choice.url or "", choice.problem
    server = start_test_redis(Path(tempfile.mkdtemp(prefix="schedcache-test-redis-")))
    _STARTED.append(server)
    os.environ[ENV_TEST_URL] = server_url(server)
    return server_url(server), ""


REAL_REDIS_URL, NO_REDIS = _test_redis()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the redis-server this session started (if it did)."""
    while _STARTED:
        _STARTED.pop().kill(signal.SIGTERM)


def real_client() -> redis.Redis:
    if NO_REDIS:
        pytest.fail(NO_REDIS, pytrace=False)
    client = redis.Redis.from_url(REAL_REDIS_URL, socket_connect_timeout=2)
    try:
        version = client.info("server")["redis_version"]
    except redis.ConnectionError as error:
        pytest.fail(
            f"no Redis server answers at {REAL_REDIS_URL} ({error}); {INSTALL_HINT}",
            pytrace=False,
        )
    if int(version.split(".")[0]) < 7:
        pytest.fail(f"Redis {version} at {REAL_REDIS_URL}: schedcache needs >= 7.0", pytrace=False)
    return client


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses a backend runs on fakeredis, a real Redis, and a Redis Cluster
    (3 primaries, 3 replicas) that the session starts."""
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", ["fakeredis", "redis", "cluster"])
    if "cache" in metafunc.fixturenames and getattr(metafunc.module, "BOTH_APIS", False):
        metafunc.parametrize("api", ["sync", "async"])  # tests/apis.py


def backend_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of ``backend`` for code that connects by itself (the CLI, replica processes)."""
    if backend == "fakeredis":
        return "embedded"
    if backend == "cluster":
        return request.getfixturevalue("redis_cluster").url
    return REAL_REDIS_URL


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-primary, 3-replica Redis Cluster on loopback ports, for the whole session.

    Its node timeout is long: a primary busy for over a second (a 65,536-label pod's script and
    its fsync on a loaded CI machine) must not be failed over under the tests that share it,
    which then meet a MOVED slot. The failover tests start their own cluster with 1 s."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster"), node_timeout=15_000)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def client(backend: str, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    if backend == "fakeredis":
        yield embedded_client()
    elif backend == "cluster":
        cluster: Cluster = request.getfixturevalue("redis_cluster")
        client = connect(cluster.url)
        yield client  # type: ignore[misc]
        client.close()
    else:
        client = real_client()
        yield client
        client.close()


@pytest.fixture
def cache_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_cache(client: redis.Redis, cache_name: str) -> Iterator[Callable[..., Cache]]:
    """``make_cache(ttl=10.0, replica="test", **Cache options)``: a cache on this test's
    backend."""
    made: list[Cache] = []

    def factory(
        ttl: float = 10.0, replica: str = "test", name: str | None = None, **options: object
    ) -> Cache:
        cache = Cache(client, name or cache_name, ttl=ttl, replica=replica, **options)
        made.append(cache)
        return cache

    yield factory
    for cache in made:
        if cache.lease is not None:
            cache.lease.stop(release=False)
        cache.clear()


@pytest.fixture
def api() -> str:
    """``sync``, unless the module sets ``BOTH_APIS = True`` (then both, tests/apis.py)."""
    return "sync"


@pytest.fixture
def cache(
    make_cache: Callable[..., Cache], api: str, backend: str, request: pytest.FixtureRequest
) -> Iterator[Cache]:
    sync_cache = make_cache()
    if api == "sync":
        yield sync_cache
        return
    blocking = Blocking(
        sync_cache,
        backend_url(backend, request),
        {"ttl": sync_cache.ttl, "replica": sync_cache.replica},
    )
    yield blocking  # type: ignore[misc]
    blocking.close_async()
