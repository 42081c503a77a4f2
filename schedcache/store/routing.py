"""Finding the server that holds a cache: the client itself, or in Redis Cluster the primary
that owns the cache's slot.

Every key of a cache carries the hash tag ``{<name>}`` (``schedcache.store.keys``), so one cache
lives in one slot of one primary. Commands that must share a connection with what follows them (the
batch's streamed ``FCALL``\\s, ``WAIT`` after a write) go to that primary's own client; when a
failover or a resharding moves the slot, :meth:`SlotRoute.refresh` asks the cluster again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException
from redis.sentinel import SentinelConnectionPool
from redis.utils import str_if_bytes

from schedcache.errors import ValidationError
from schedcache.store.urls import describe

log = logging.getLogger(__name__)

# A sync client of one server or of a Cluster: what a Store, and every read below it, talks to.
Client = redis.Redis | RedisCluster


class ClusterClient(RedisCluster):
    """``RedisCluster`` that routes ``FCALL``/``FCALL_RO`` by their declared keys.

    redis-py asks the server (``COMMAND GETKEYS``) where an ``FCALL`` goes, one extra round trip
    per call, and one that fails while the node it asks is down. The keys of ``FCALL name
    numkeys key...`` are right there in the arguments, as they are for ``EVAL``.
    """

    def determine_slot(self, *args: Any) -> int | None:
        slot = function_call_slot(args)
        if slot is not None:
            return slot
        found: int | None = super().determine_slot(*args)
        return found


def function_call_slot(args: tuple[Any, ...]) -> int | None:
    """The slot of ``FCALL``/``FCALL_RO name numkeys key...`` from its declared keys (a random
    one for none); None for any other command. Shared by the sync and asyncio cluster clients."""
    if str(args[0]).upper() not in ("FCALL", "FCALL_RO") or len(args) < 3:
        return None
    keys = args[3 : 3 + int(args[2])]
    if not keys:
        return random.randrange(REDIS_CLUSTER_HASH_SLOTS)
    slots = {key_slot(key if isinstance(key, bytes) else str(key).encode()) for key in keys}
    if len(slots) != 1:
        raise RedisClusterException(f"{args[0]} {args[1]}: keys in several slots")
    return slots.pop()


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def primaries(client: redis.Redis | RedisCluster) -> list[redis.Redis]:
    """The plain client of every primary: all of a cluster's, or the one server."""
    if not is_cluster(client):
        return [client]  # type: ignore[list-item]
    cluster: RedisCluster = client  # type: ignore[assignment]
    return [cluster.get_redis_connection(node) for node in cluster.get_primaries()]


class SlotRoute:
    """The plain client of the server that holds ``key``'s slot."""

    def __init__(self, client: redis.Redis | RedisCluster, key: str) -> None:
        self.client = client
        self.key = key
        self._node: redis.Redis | None = None

    def get(self) -> redis.Redis:
        if not is_cluster(self.client):
            return self.client  # type: ignore[return-value]
        if self._node is None:
            cluster: RedisCluster = self.client  # type: ignore[assignment]
            node = cluster.get_node_from_key(self.key)
            self._node = cluster.get_redis_connection(node)
        return self._node

    def refresh(self) -> None:
        """The primary may have changed (failover, resharding): ask the cluster again at the
        next :meth:`get`. A single server or Sentinel client finds its primary by itself."""
        if not is_cluster(self.client):
            return
        self._node = None
        try:
            self.client.nodes_manager.initialize()  # type: ignore[union-attr]
        except (redis.RedisError, RedisClusterException) as error:  # still electing: next time
            log.warning("cannot read the cluster's slots yet: %s", error)


# -- snapshot reads off the primary ---------------------------------------------------------

PRIMARY = "primary"
REPLICA = "replica"
# Seconds before a route that found no replica (or whose replica failed) asks again: discovery
# is a call to the primary or the Sentinels, not something to pay for on every update.
REDISCOVER_AFTER = 30.0
# Connection settings a replica's client takes from the primary's, less where it goes.
_NOT_COPIED = ("host", "port", "path", "connection_pool", "redis_connect_func")


class ReplicaRoute:
    """The plain client of one replica of the server that holds ``key``, for snapshot reads.

    One replica at a time, so every read of one snapshot update meets one server that only
    moves forward (a round robin over replicas could answer each read from another point of
    the stream). Found from what the client already knows: in a Cluster, the replicas the
    slot's primary lists (``ROLE``), read with ``READONLY``; a Sentinel client's Sentinels
    (``SENTINEL REPLICAS``); a plain server's ``ROLE`` (its connected replicas); or named
    (``replica_url``). None when
    there is none: the snapshot reads the primary, and the route asks again later.
    """

    def __init__(
        self, client: redis.Redis | RedisCluster, key: str, replica_url: str | None = None
    ) -> None:
        self.client = client
        self.key = key
        self.replica_url = replica_url
        self._replica: redis.Redis | None = None
        self._next_discovery = 0.0
        self._lock = threading.Lock()  # (threads share a Store: one discovery at a time)

    def get(self) -> redis.Redis | None:
        if self._replica is not None or time.monotonic() < self._next_discovery:
            return self._replica
        with self._lock:
            if self._replica is None and time.monotonic() >= self._next_discovery:
                try:
                    self._replica = self._discover()
                except (redis.RedisError, RedisClusterException, OSError) as error:
                    log.warning("cannot find a replica to read snapshots from: %s", error)
                if self._replica is None:
                    self._next_discovery = time.monotonic() + REDISCOVER_AFTER
            return self._replica

    def refresh(self) -> None:
        """The replica failed: drop it; snapshots read the primary for ``REDISCOVER_AFTER``
        seconds (a replica that cannot be reached must not cost each update a connect
        timeout), then the route looks for one again (another, after a failover)."""
        with self._lock:
            replica, self._replica = self._replica, None
            self._next_discovery = time.monotonic() + REDISCOVER_AFTER
        if replica is not None:
            replica.close()

    def _discover(self) -> redis.Redis | None:
        if self.replica_url is not None:
            return redis.Redis.from_url(self.replica_url, **_timeouts(self.client))
        if is_cluster(self.client):
            return _cluster_replica(self.client, self.key)  # type: ignore[arg-type]
        client: redis.Redis = self.client  # type: ignore[assignment]
        pool = client.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            addresses = pool.sentinel_manager.discover_slaves(pool.service_name)
        else:
            addresses = replica_addresses(client.execute_command("ROLE"))
        if not addresses:
            return None
        host, port = random.choice(addresses)
        kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _NOT_COPIED}
        connection_class = pool.connection_class
        if not issubclass(connection_class, SSLConnection):
            connection_class = Connection  # (a Sentinel-managed or unix socket class)
        return redis.Redis(
            connection_pool=ConnectionPool(
                host=host, port=port, connection_class=connection_class, **kwargs
            )
        )


def replica_addresses(role: Any) -> list[tuple[str, int]]:
    """The connected replicas a primary's ``ROLE`` reply lists (none when it is no primary)."""
    if not role or role[0] not in (b"master", "master"):
        return []
    found = []
    for host, port, _offset in role[2]:
        found.append((host.decode() if isinstance(host, bytes) else str(host), int(port)))
    return found


def _cluster_replica(cluster: RedisCluster, key: str) -> redis.Redis | None:
    """A client of one replica of ``key``'s slot, its connections in ``READONLY`` mode. The
    slot's primary says which (``ROLE``): ``CLUSTER SLOTS``, and so redis-py's slot map, leave
    out a replica the cluster has not yet seen acknowledge any data."""
    primary = cluster.get_redis_connection(cluster.get_node_from_key(key))
    addresses = replica_addresses(primary.execute_command("ROLE"))
    if not addresses:
        return None
    host, port = random.choice(addresses)
    kwargs = {
        k: v for k, v in cluster.nodes_manager.connection_kwargs.items() if k not in _NOT_COPIED
    }
    kwargs["redis_connect_func"] = _readonly
    return redis.Redis(host=host, port=port, **kwargs)


def _readonly(connection: Connection) -> None:
    """A cluster replica answers reads of its primary's slots only after ``READONLY``."""
    connection.on_connect()
    connection.send_command("READONLY")
    if str_if_bytes(connection.read_response()) != "OK":
        raise redis.ConnectionError("READONLY failed")


def _timeouts(client: Any) -> dict[str, Any]:
    """The primary's socket timeouts, for a replica named by URL."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    return {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout") if kwargs.get(k)}


def read_from_setting(read_from: object, subject: str) -> tuple[bool, str | None]:
    """``read_from`` checked: whether snapshots read from a replica, and the URL of the one
    named (None: found as :class:`ReplicaRoute` says)."""
    if read_from == PRIMARY:
        return False, None
    if read_from == REPLICA:
        return True, None
    if isinstance(read_from, str) and read_from.split("://", 1)[0] in REPLICA_SCHEMES:
        return True, read_from
    # (a URL's password masked: found in review)
    shown = repr(describe(read_from)) if isinstance(read_from, str) else repr(read_from)
    raise ValidationError(
        subject,
        "read_from",
        f"{shown} must be 'primary', 'replica' or the URL of a replica "
        f"({', '.join(s + '://' for s in REPLICA_SCHEMES)})",
    )


REPLICA_SCHEMES = ("redis", "rediss", "unix")
