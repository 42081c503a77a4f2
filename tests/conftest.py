"""The one backend fixture: every behavioural test runs on fakeredis, a real Redis and a Redis
Cluster.

The real server is ``SCHEDCACHE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``); the
cluster (3 primaries, 3 replicas) is started by the session with ``redis-server`` and
``redis-cli --cluster create`` (``tests/servers.py``). When the server does not answer, the
real-Redis part of every test FAILS with a message saying how to start one: a missing server
must never turn into silently skipped coverage. Each test gets its own
cache name on the real server (and deletes its keys afterwards) and a fresh fakeredis server
(a Lua global written by a bad script would poison a shared one).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from schedcache import Cache
from schedcache.connection import connect, embedded_client
from tests.servers import Cluster

REAL_REDIS_URL = os.environ.get("SCHEDCACHE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def real_client() -> redis.Redis:
    client = redis.Redis.from_url(REAL_REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError as error:
        pytest.fail(
            f"no Redis server answers at {REAL_REDIS_URL} ({error}). The real-Redis tests need "
            "one: start `redis-server` (>= 7.0) or set SCHEDCACHE_TEST_REDIS_URL; .ci/run does "
            "this for you.",
            pytrace=False,
        )
    return client


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses a backend runs on fakeredis, a real Redis, and a Redis Cluster
    (3 primaries, 3 replicas) that the session starts."""
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", ["fakeredis", "redis", "cluster"])


def backend_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of ``backend`` for code that connects by itself (the CLI, replica processes)."""
    if backend == "fakeredis":
        return "embedded"
    if backend == "cluster":
        return request.getfixturevalue("redis_cluster").url
    return REAL_REDIS_URL


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-primary, 3-replica Redis Cluster on loopback ports, for the whole session."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
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
def cache(make_cache: Callable[..., Cache]) -> Cache:
    return make_cache()
