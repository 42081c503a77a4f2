"""The contract tests on both APIs: an :class:`AsyncCache` driven from synchronous test code.

A module that sets ``BOTH_APIS = True`` gets its ``cache`` fixture parametrised over
``api = sync | async`` (``conftest.py``). For ``async``, ``cache`` is a :class:`Blocking` view of
an ``AsyncCache`` on the same server: each coroutine method of the ``AsyncCache`` runs on an
event loop in a thread of its own and is waited for; async iterators are collected. What the
async API does not have (inspection: ``dump``, ``verify``, snapshots, ``clear``) and the
attributes tests read keys through (``store``, ``client``, ``keys``) come from the sync cache
on the same cache name, so the test's assertions read the same keys either way.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import fakeredis

from schedcache import Cache
from schedcache.aio import AsyncCache, AsyncCommandBatch, connect_async

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


async def async_client_for(sync_cache: Cache, url: str) -> Any:
    """An asyncio client of the server ``sync_cache`` is on."""
    pool = getattr(sync_cache.client, "connection_pool", None)
    server = pool.connection_kwargs.get("server") if pool is not None else None
    if isinstance(server, fakeredis.FakeServer):
        return fakeredis.FakeAsyncRedis(server=server)
    return await connect_async(url)


class BlockingBatch:
    """An :class:`AsyncCommandBatch` used as the sync batch is: ``with`` executes on a clean
    exit; ``execute`` and ``settle`` are waited for; the shortcuts return this wrapper."""

    def __init__(self, batch: AsyncCommandBatch, loop: LoopThread) -> None:
        self.batch = batch
        self.loop = loop

    def __enter__(self) -> BlockingBatch:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.loop.run(self.batch.__aexit__(exc_type, None, None))

    def __len__(self) -> int:
        return len(self.batch)

    def execute(self) -> list[Any]:
        return self.loop.run(self.batch.execute())

    def settle(self, groups: list[Any]) -> list[Any]:
        return self.loop.run(self.batch.settle(groups))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.batch, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self if result is self.batch else result

        return call


class Blocking:
    """``AsyncCache``'s methods, called and waited for; the rest from the sync cache."""

    def __init__(self, sync_cache: Cache, url: str, options: dict[str, Any]) -> None:
        self.sync_cache = sync_cache
        self.loop = LoopThread()

        async def make() -> AsyncCache:
            client = await async_client_for(sync_cache, url)
            return await AsyncCache.open(client, sync_cache.name, **options)

        self.async_cache = self.loop.run(make())

    def batch(self, chunk_size: int = 200) -> BlockingBatch:
        return BlockingBatch(self.async_cache.batch(chunk_size), self.loop)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.async_cache, name, None)
        if inspect.iscoroutinefunction(target):
            return self._blocking(target)
        if inspect.isasyncgenfunction(target):
            return self._collecting(target)
        return getattr(self.sync_cache, name)

    def _blocking(self, method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run(method(*args, **kwargs))

        return call

    def _collecting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            async def collect() -> list[Any]:
                return [item async for item in method(*args, **kwargs)]

            return iter(self.loop.run(collect()))

        return call

    def close_async(self) -> None:
        async def close() -> None:
            await self.async_cache.aclose()
            close_client = getattr(self.async_cache.client, "aclose", None)
            if close_client is not None:
                await close_client()

        self.loop.run(close())
        self.loop.stop()
