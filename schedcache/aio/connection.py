"""``connect_async``: the same URLs as :func:`schedcache.connect`, as redis.asyncio clients.

The URL is checked, and Sentinel and Cluster URLs read, by the same functions as the sync
``connect``; only the client classes differ. ``embedded`` is fakeredis' asyncio client (with
Lua), on a fresh in-process server unless one is given.
"""

from __future__ import annotations

import weakref
from typing import Any

import fakeredis
import redis
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
    cluster_client,
    connect,
    connection_failed,
    embedded_client,
    sentinel_primary,
)
from schedcache.store.routing import function_call_slot

AsyncClient = aioredis.Redis | RedisCluster

# How connect_async made each client, so a sync client of the same server can be made for the
# work that runs in a thread (replay, verify, checkpoints): client -> (url, connect options).
_OPENED: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


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
    plain = {key: value for key, value in options.items() if key != "retry"}
    _OPENED[client] = (url, {"timeout": timeout, "connect_timeout": connect_timeout, **plain})
    return client


def sync_client_for(client: Any) -> redis.Redis | redis.RedisCluster | None:
    """A sync client of the server ``client`` talks to: the same in-process server for
    fakeredis, the same URL and options for a client of :func:`connect_async`; None for a
    client made otherwise (its URL is not known)."""
    if isinstance(client, fakeredis.FakeAsyncRedis):
        return embedded_client(client.connection_pool.connection_kwargs["server"])
    opened = _OPENED.get(client)
    if opened is None:
        return None
    url, options = opened
    return connect(url, **options)


def _sentinel_client(
    url: str, timeouts: dict[str, float], options: dict[str, Any]
) -> aioredis.Redis:
    primary: aioredis.Redis = sentinel_primary(Sentinel, inner_retry(), url, timeouts, options)
    return primary


def _cluster_client(
    url: str, tls: bool, timeouts: dict[str, Any], options: dict[str, Any]
) -> AsyncClusterClient:
    client: AsyncClusterClient = cluster_client(
        AsyncClusterClient, ClusterNode, url, tls, timeouts, options
    )
    return client
