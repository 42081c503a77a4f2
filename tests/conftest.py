"""The one backend fixture: every behavioural test runs on fakeredis and on a real Redis.

The real server is ``SCHEDCACHE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). When it
does not answer, the real-Redis half of every test FAILS with a message saying how to start
one: a missing server must never turn into silently skipped coverage. Each test gets its own
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
from schedcache.connection import embedded_client

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


@pytest.fixture(params=["fakeredis", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def client(backend: str) -> Iterator[redis.Redis]:
    if backend == "fakeredis":
        yield embedded_client()
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
