"""schedcache for asyncio: :class:`AsyncCache` and :func:`connect_async`.

from schedcache.aio import AsyncCache, connect_async

cache = await AsyncCache.open(await connect_async("redis://localhost:6379/0"), "prod")
await cache.assume_pod(pod, check_fit=True)
"""

from schedcache.aio.batch import AsyncCommandBatch
from schedcache.aio.cache import AsyncCache, AsyncLease, AsyncNodeTree
from schedcache.aio.connection import connect_async, embedded_async_client
from schedcache.aio.expiry import AsyncExpiryWorker
from schedcache.aio.store import AsyncStore

__all__ = [
    "AsyncCache",
    "AsyncCommandBatch",
    "AsyncExpiryWorker",
    "AsyncLease",
    "AsyncNodeTree",
    "AsyncStore",
    "connect_async",
    "embedded_async_client",
]
