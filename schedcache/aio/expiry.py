"""``AsyncExpiryWorker``: the expiry worker as a coroutine, for a process whose event loop is
already busy (an extender, an operator).

A round is :class:`~schedcache.ops.expiry.ExpiryRounds`' (the sync worker's): the same bounded
``sc_cleanup_assumed_pods`` and ``sc_forget_lapsed`` calls, counters, logs and sleep until the
next deadline by the server's clock. Run it as a task (``asyncio.create_task(worker.run())``);
:meth:`AsyncExpiryWorker.stop` ends it after the current round, cancelling the task ends it at
once (each call is applied whole or not at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from schedcache.aio.store import AsyncStore
from schedcache.errors import NotReplicated
from schedcache.ops.expiry import ACTIONS, ExpiryRounds
from schedcache.store.retry import RETRYABLE, backoff, call_with_retries_async

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class AsyncExpiryWorker(ExpiryRounds):
    """Runs expiry rounds for one ``AsyncCache`` (or its ``AsyncStore``) until stopped."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.store: AsyncStore = self.cache.store
        self.stopping = asyncio.Event()

    def stop(self) -> None:
        self.stopping.set()

    async def run_once(self) -> list[str]:
        """One round (see :meth:`ExpiryWorker.run_once`); the uids expired."""
        expired, forgotten = [await self._drain(action) for action in ACTIONS]
        self.report(expired, forgotten)
        return expired

    async def _drain(self, action: str) -> list[str]:
        done: list[str] = []
        more = True
        while more and not self.stopping.is_set():
            try:
                reply = await self.store.run(self.command(action))
            except NotReplicated as error:
                reply = self.tolerate(error)
            uids, more = self.take(action, reply)
            done += uids
        return done

    async def seconds_until_next_deadline(self) -> float:
        """How long until the earliest deadline by the server's clock (``interval`` if none)."""
        first = await self.store.client.zrange(self.store.keys.deadlines, 0, 0, withscores=True)
        return self.pause(first, await self.store.server_time())

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """``await call()`` with delays that never run out until the worker is stopped."""

        async def before_retry(error: Exception, delay: float) -> None:
            self.retrying(error, delay)
            await self.store.before_resend("expiry", error)

        delays = backoff(0.1, self.max_backoff, until=self.stopping.is_set)
        return await call_with_retries_async(call, delays, before_retry, sleep=self._sleep)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, waking early when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def run(self, on_round: Callable[[list[str]], Any] | None = None) -> None:
        """Rounds until stopped; reconnects with exponential backoff when Redis goes away."""
        log.info("expiry worker started for cache %s", self.store.name)
        while not self.stopping.is_set():
            try:
                expired = await self._retrying(self.run_once)
                if on_round:
                    on_round(expired)
                pause = await self._retrying(self.seconds_until_next_deadline)
            except RETRYABLE:
                if self.stopping.is_set():
                    break
                raise
            await self._sleep(pause)
        log.info("expiry worker stopped after expiring %d pods", self.expired_total)
