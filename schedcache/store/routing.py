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
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException

log = logging.getLogger(__name__)


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
