"""``connect_async``: the same URLs as :func:`schedcache.connect`, as redis.asyncio clients.

The URL is checked, and Sentinel and Cluster URLs read, by the same functions as the sync
``connect``; only the client classes differ. ``embedded`` is fakeredis' asyncio client (with
Lua), on a fresh in-process server unless one is given.

Concurrency past the pool WAITS for a connection (up to ``pool_timeout`` seconds, then
redis-py's ``ConnectionError("No connection available.")``, which the retry policy treats like
any connection failure) instead of failing at once with ``MaxConnectionsError``: a server's or
embedded client's pool is redis-py's ``BlockingConnectionPool``; a Cluster client holds at most
``max_connections`` commands in flight (a semaphore: the asyncio cluster's per-node pools
cannot wait). docs/aio.md explains the sizing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisClusterException
from redis.utils import str_if_bytes

from schedcache.errors import ValidationError
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
from schedcache.store.routing import REDISCOVER_AFTER, function_call_slot, replica_addresses

log = logging.getLogger(__name__)

AsyncClient = aioredis.Redis | RedisCluster

# redis-py's own pool size: Redis's default maxclients (10,000) leaves room for 100 processes.
MAX_CONNECTIONS = 100
# Seconds a call waits for a free connection before it fails (redis-py's blocking default).
POOL_TIMEOUT = 20.0

# How connect_async made each client, so a sync client of the same server can be made for the
# work that runs in a thread (replay, verify, checkpoints): client -> (url, connect options).
_OPENED: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


class AsyncClusterClient(RedisCluster):
    """``RedisCluster`` (asyncio) that routes ``FCALL``/``FCALL_RO`` by their declared keys,
    as the sync ``ClusterClient`` does, and makes a call past ``max_connections`` in flight
    wait (at most ``pool_timeout`` seconds) rather than fail with ``MaxConnectionsError``."""

    def __init__(self, *args: Any, pool_timeout: float = POOL_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_timeout = pool_timeout
        self.in_flight = asyncio.Semaphore(kwargs.get("max_connections", MAX_CONNECTIONS))

    @contextlib.asynccontextmanager
    async def connection_slot(self) -> AsyncIterator[None]:
        """One of ``max_connections`` slots (no node's pool can then run out), waited for."""
        try:
            await asyncio.wait_for(self.in_flight.acquire(), self.pool_timeout)
        except TimeoutError:
            raise redis.ConnectionError("No connection available.") from None
        try:
            yield
        finally:
            self.in_flight.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.connection_slot():
            return await super().execute_command(*args, **kwargs)

    async def _determine_slot(self, command: str, *args: Any) -> int:
        slot = function_call_slot((command, *args))
        if slot is not None:
            return slot
        found: int = await super()._determine_slot(command, *args)
        return found


def embedded_async_client(
    server: fakeredis.FakeServer | None = None,
    max_connections: int = MAX_CONNECTIONS,
    pool_timeout: float = POOL_TIMEOUT,
) -> fakeredis.FakeAsyncRedis:
    """An in-process fakeredis asyncio client (with Lua), on a fresh server unless one is
    given (share one with a sync ``embedded_client(server)`` to see the same data); calls past
    ``max_connections`` wait for one, as :func:`connect_async`'s do."""
    client = fakeredis.FakeAsyncRedis(
        server=server or fakeredis.FakeServer(version=EMBEDDED_VERSION),
        connection_pool_class=aioredis.BlockingConnectionPool,
        max_connections=max_connections,
    )
    pool = client.connection_pool
    if isinstance(pool, aioredis.BlockingConnectionPool):  # fakeredis keeps the class given
        pool.timeout = pool_timeout
    return client


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
    max_connections: int = MAX_CONNECTIONS,
    pool_timeout: float = POOL_TIMEOUT,
    **options: Any,
) -> AsyncClient:
    """An asyncio Redis client for ``url`` (``redis://``, ``rediss://``, ``unix://``,
    ``redis+sentinel://``, ``redis+cluster://``, ``rediss+cluster://``; ``None`` reads
    ``SCHEDCACHE_REDIS_URL``, else embedded), with the sync ``connect``'s options and errors
    (:class:`ConnectionFailed` naming the URL with any password masked).

    ``max_connections``: the pool's size (per node in a Cluster, where it also bounds the
    commands in flight); a call past it waits up to ``pool_timeout`` seconds for one."""
    url, scheme = checked_url(url, timeout, connect_timeout, options)
    _check_pool(max_connections, pool_timeout)
    if url == EMBEDDED:
        return embedded_async_client(None, max_connections, pool_timeout)
    timeouts: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout,
    }
    if not scheme.endswith("+cluster"):
        options.setdefault("retry", inner_retry())
    try:
        if scheme == "redis+sentinel":
            sized = {**options, "max_connections": max_connections}
            client: AsyncClient = _sentinel_client(url, timeouts, sized)
        elif scheme.endswith("+cluster"):
            sized = {**options, "max_connections": max_connections, "pool_timeout": pool_timeout}
            client = _cluster_client(url, scheme == "rediss+cluster", timeouts, sized)
        else:
            pool = aioredis.BlockingConnectionPool.from_url(
                url, max_connections=max_connections, timeout=pool_timeout, **timeouts, **options
            )
            client = aioredis.Redis.from_pool(pool)
        if check:
            await client.ping()
    except CONNECT_ERRORS as error:
        raise connection_failed(url, options, error, timeout) from None
    plain = {key: value for key, value in options.items() if key != "retry"}
    _OPENED[client] = (url, {"timeout": timeout, "connect_timeout": connect_timeout, **plain})
    return client


def _check_pool(max_connections: int, pool_timeout: float) -> None:
    if type(max_connections) is not int or not 1 <= max_connections <= 100_000:
        raise ValidationError(
            "connect_async", "max_connections", f"{max_connections!r} must be in [1, 100000]"
        )
    if not isinstance(pool_timeout, int | float) or not 0 < pool_timeout <= 3600:
        raise ValidationError(
            "connect_async", "pool_timeout", f"{pool_timeout!r} must be in (0, 3600] seconds"
        )


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


# -- snapshot reads off the primary (as schedcache.store.routing.ReplicaRoute) ----------------


class AsyncReplicaRoute:
    """The redis.asyncio client of one replica of the server that holds ``key``, for snapshot
    reads, found as the sync :class:`~schedcache.store.routing.ReplicaRoute` finds it; None
    when there is none (the snapshot reads the primary; asked again later)."""

    def __init__(self, client: Any, key: str, replica_url: str | None = None) -> None:
        self.client = client
        self.key = key
        self.replica_url = replica_url
        self._replica: aioredis.Redis | None = None
        self._next_discovery = 0.0

    async def get(self) -> aioredis.Redis | None:
        if self._replica is None and time.monotonic() >= self._next_discovery:
            try:
                self._replica = await self._discover()
            except (redis.RedisError, RedisClusterException, OSError) as error:
                log.warning("cannot find a replica to read snapshots from: %s", error)
            if self._replica is None:
                self._next_discovery = time.monotonic() + REDISCOVER_AFTER
        return self._replica

    async def refresh(self) -> None:
        """The replica failed: drop it; snapshots read the primary for ``REDISCOVER_AFTER``
        seconds, then the route looks for one again."""
        replica, self._replica = self._replica, None
        self._next_discovery = time.monotonic() + REDISCOVER_AFTER
        if replica is not None:
            await replica.aclose()

    async def _discover(self) -> aioredis.Redis | None:
        if self.replica_url is not None:
            return aioredis.Redis.from_url(self.replica_url)
        if isinstance(self.client, RedisCluster):
            primary = self.client.get_node_from_key(self.key)
            if primary is None:
                return None
            role = await self.client.execute_command("ROLE", target_nodes=primary)
            addresses = replica_addresses(role)
            kwargs, connection_class = dict(primary.connection_kwargs), primary.connection_class
            kwargs["redis_connect_func"] = _readonly
        else:
            pool = self.client.connection_pool
            if isinstance(pool, SentinelConnectionPool):
                addresses = await pool.sentinel_manager.discover_slaves(pool.service_name)
            else:
                addresses = replica_addresses(await self.client.execute_command("ROLE"))
            kwargs, connection_class = dict(pool.connection_kwargs), pool.connection_class
            kwargs.pop("redis_connect_func", None)
        if not addresses:
            return None
        host, port = random.choice(addresses)
        for name in ("host", "port", "path", "connection_pool"):
            kwargs.pop(name, None)
        if not issubclass(connection_class, aioredis.SSLConnection):
            connection_class = aioredis.Connection
        return aioredis.Redis(
            connection_pool=aioredis.ConnectionPool(
                host=host, port=port, connection_class=connection_class, **kwargs
            )
        )


async def _readonly(connection: aioredis.Connection) -> None:
    """A cluster replica answers reads of its primary's slots only after ``READONLY``."""
    await connection.on_connect()
    await connection.send_command("READONLY")
    if str_if_bytes(await connection.read_response()) != "OK":
        raise redis.ConnectionError("READONLY failed")
