"""``connect_async``: the same URLs as :func:`schedcache.connect`, as redis.asyncio clients.

The URL is checked, and Sentinel and Cluster URLs read, by the same functions as the sync
``connect``; only the client classes differ. ``embedded`` is fakeredis' asyncio client (with
Lua), on a fresh in-process server unless one is given.
"""

from __future__ import annotations

from typing import Any

import fakeredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialWithJitterBackoff

from schedcache.store.connection import (
    CONNECT_ERRORS,
    EMBEDDED,
    EMBEDDED_VERSION,
    checked_url,
    cluster_settings,
    connection_failed,
    sentinel_settings,
)
from schedcache.store.routing import function_call_slot

AsyncClient = aioredis.Redis | RedisCluster


class AsyncClusterClient(RedisCluster):
    """``RedisCluster`` (asyncio) that routes ``FCALL``/``FCALL_RO`` by their declared keys,
    as the sync ``ClusterClient`` does."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        slot = function_call_slot((command, *args))
        if slot is not None:
            return slot
        found: int = await super()._determine_slot(command, *args)
        return found


def embedded_async_client(server: fakeredis.FakeServer | None = None) -> fakeredis.FakeAsyncRedis:
    """An in-process fakeredis asyncio client (with Lua), on a fresh server unless one is
    given (share one with a sync ``embedded_client(server)`` to see the same data)."""
    return fakeredis.FakeAsyncRedis(server=server or fakeredis.FakeServer(version=EMBEDDED_VERSION))


def inner_retry() -> Retry:
    """redis-py's own resend of a call whose connection broke: once, at once (the sync
    client's rule: the cache's ``RetryPolicy`` does the rest)."""
    return Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.1), 1)


async def connect_async(
    url: str | None = None,
    *,
    timeout: float = 5.0,
    connect_timeout: float = 2.0,
    check: bool = True,
    **options: Any,
) -> AsyncClient:
    """An asyncio Redis client for ``url`` (``redis://``, ``rediss://``, ``unix://``,
    ``redis+sentinel://``, ``redis+cluster://``, ``rediss+cluster://``; ``None`` reads
    ``SCHEDCACHE_REDIS_URL``, else embedded), with the sync ``connect``'s options and errors
    (:class:`ConnectionFailed` naming the URL with any password masked)."""
    url, scheme = checked_url(url, timeout, connect_timeout)
    if url == EMBEDDED:
        return embedded_async_client()
    timeouts: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout,
    }
    if not scheme.endswith("+cluster"):
        options.setdefault("retry", inner_retry())
    try:
        if scheme == "redis+sentinel":
            client: AsyncClient = _sentinel_client(url, timeouts, options)
        elif scheme.endswith("+cluster"):
            client = _cluster_client(url, scheme == "rediss+cluster", timeouts, options)
        else:
            client = aioredis.Redis.from_url(url, **timeouts, **options)
        if check:
            await client.ping()
    except CONNECT_ERRORS as error:
        raise connection_failed(url, options, error) from None
    return client


def _sentinel_client(
    url: str, timeouts: dict[str, float], options: dict[str, Any]
) -> aioredis.Redis:
    settings = sentinel_settings(url)
    sentinel_kwargs: dict[str, Any] = {**timeouts, "retry": inner_retry()}
    if settings.sentinel_password is not None:
        sentinel_kwargs["password"] = settings.sentinel_password
    sentinel = Sentinel(
        settings.hosts,
        sentinel_kwargs=sentinel_kwargs,
        username=settings.username,
        password=settings.password,
        db=settings.db,
        **timeouts,
        **options,
    )
    primary: aioredis.Redis = sentinel.master_for(settings.master)
    return primary


def _cluster_client(
    url: str, tls: bool, timeouts: dict[str, Any], options: dict[str, Any]
) -> AsyncClusterClient:
    parts, tls_options = cluster_settings(url)
    return AsyncClusterClient(
        startup_nodes=[ClusterNode(host, port) for host, port in parts.hosts],
        username=parts.username,
        password=parts.password,
        ssl=tls,
        **tls_options,
        **timeouts,
        **options,
    )
