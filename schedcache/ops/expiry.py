"""The expiry worker: expires assumed pods whose binding finished and whose deadline passed.

kube-scheduler stopped expiring assumed pods (ttl 0 since v1.25) because a pod expired while
its bind was still in flight freed resources that were about to be used. schedcache keeps
expiry for the case upstream never had: a shared cache outlives the replica that assumed a
pod, and nobody else would release what a crashed replica booked. As upstream learned, the
deadline starts at ``finish_binding``, never at assume.

Each round calls ``sc_cleanup_assumed_pods`` with a bounded ``limit`` until fewer than ``limit``
pods came back; the function re-checks every pod (still assumed, binding finished, deadline
passed), so a pod confirmed meanwhile is never expired, and several workers may run at once: a
pod one of them expired is simply gone for the others. Time is the Redis server's clock. Between
rounds the worker sleeps until the next deadline or its interval, whichever comes first.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from schedcache.errors import NotReplicated, ValidationError
from schedcache.store import commands, metrics
from schedcache.store.commands import seconds
from schedcache.store.retry import RETRYABLE, backoff, call_with_retries
from schedcache.store.store import Store, StoreCore, store_of, sweep_reply

log = logging.getLogger(__name__)
T = TypeVar("T")


ACTIONS = ("expire", "forget")
MAX_INTERVAL = 3600.0  # seconds: a worker asleep longer is not expiring anything
MAX_BATCH = 1_000  # pods per Lua call (Lua's MAX_EXPIRY_LIMIT): one call holds Redis throughout


@dataclass
class ExpiryRounds:
    """What an expiry round is, for the sync :class:`ExpiryWorker` and the asyncio
    ``schedcache.aio.AsyncExpiryWorker``: the commands, what a reply means, what is counted
    and logged, how long to sleep. The workers only send."""

    cache: Any  # a Cache, or its Store (an AsyncCache, or its AsyncStore)
    interval: float = 1.0  # longest sleep between rounds, seconds
    batch: int = 500  # pods expired per Lua call
    max_backoff: float = 30.0  # longest wait between reconnection attempts, seconds

    def __post_init__(self) -> None:
        for name, maximum in (("interval", MAX_INTERVAL), ("max_backoff", MAX_INTERVAL)):
            value = getattr(self, name)
            if seconds(value, subject="expiry worker", field=name, maximum=maximum) == 0:
                raise ValidationError("expiry worker", name, "must be more than 0 seconds")
        batch = self.batch
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise ValidationError(
                "expiry worker", "batch", f"{batch!r} must be an integer in 1..{MAX_BATCH}"
            )
        self.store: StoreCore = store_of(self.cache)
        self.expired_total = 0
        self.skipped_total = 0  # pods skipped because their stored record is corrupt
        self.forgotten_total = 0

    def command(self, action: str) -> commands.Command:
        """The next call of a round: expire what is due, or forget lapsed replicas' claims."""
        if action == "expire":
            return commands.cleanup_assumed_pods(None, self.batch)
        return commands.forget_lapsed(self.batch)

    def take(self, action: str, reply: Any) -> tuple[list[str], bool]:
        """The uids one call settled, and whether another call is due (it hit ``batch``, or
        its byte bound)."""
        uids, skipped, more = sweep_reply(self.store.name, action, reply, self.batch)
        self.skipped_total += len(skipped)
        return uids, more

    def tolerate(self, error: NotReplicated) -> Any:
        """Applied all the same (fewer replicas confirmed it): carry on, but say so."""
        log.warning("%s; the worker carries on", error)
        return error.reply

    def report(self, expired: list[str], forgotten: list[str]) -> None:
        if forgotten:
            self.forgotten_total += len(forgotten)
            log.warning(
                "forgot %d assumed pods of replicas whose lease lapsed in cache %s",
                len(forgotten),
                self.store.name,
            )
        if expired:
            self.expired_total += len(expired)
            metrics.EXPIRED_PODS.labels(cache=self.store.name).inc(len(expired))
            log.info("expired %d assumed pods in cache %s", len(expired), self.store.name)

    def pause(self, first: list[Any], server_time: Any) -> float:
        """Seconds until the earliest deadline (``ZRANGE ... WITHSCORES`` of the first) by the
        server's clock (``TIME``), at most ``interval``."""
        if not first:
            return self.interval
        seconds, micros = server_time
        now_ms = float(seconds) * 1000 + float(micros) / 1000
        # Expiry is strictly after the deadline: wake 1 ms past it.
        return max(0.0, min(self.interval, (float(first[0][1]) + 1 - now_ms) / 1000))

    def retrying(self, error: Exception, delay: float) -> None:
        log.warning("Redis unavailable (%s); retrying in %.1fs", error, delay)


@dataclass
class ExpiryWorker(ExpiryRounds):
    """Runs expiry rounds for one cache until :meth:`stop` is called."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.store: Store = store_of(self.cache)
        self.stopping = threading.Event()

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT finish the current round, then stop."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run_once(self) -> list[str]:
        """One round: expire everything due now, then forget the unfinished pods of replicas
        whose lease lapsed, in bounded calls. Returns the uids expired."""
        expired, forgotten = (self._drain(action) for action in ACTIONS)
        self.report(expired, forgotten)
        return expired

    def _drain(self, action: str) -> list[str]:
        done: list[str] = []
        more = True
        while more and not self.stopping.is_set():
            try:
                reply = self.store.run(self.command(action))
            except NotReplicated as error:
                reply = self.tolerate(error)
            uids, more = self.take(action, reply)
            done += uids
        return done

    def seconds_until_next_deadline(self) -> float:
        """How long until the earliest deadline by the server's clock (``interval`` if none)."""
        # The server holding the cache (in a cluster, its slot's primary: TIME has no key).
        pipe = self.store.server().pipeline(transaction=False)
        pipe.zrange(self.store.keys.deadlines, 0, 0, withscores=True)
        pipe.time()
        return self.pause(*pipe.execute())

    def _before_retry(self, error: Exception, delay: float) -> None:
        self.retrying(error, delay)
        self.store.route.refresh()  # a failover may have moved the cache to another server

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()`` through the store's retry loop, with delays that never run out (doubling
        from 0.1 s to ``max_backoff``) until the worker is stopped: a worker outlasts any
        outage, then raises the last error once stopped."""
        delays = backoff(0.1, self.max_backoff, until=self.stopping.is_set)
        return call_with_retries(call, delays, self._before_retry, sleep=self.stopping.wait)

    def run(self, on_round: Callable[[list[str]], None] | None = None) -> None:
        """Rounds until stopped; reconnects with exponential backoff when Redis goes away."""
        log.info("expiry worker started for cache %s", self.store.name)
        while not self.stopping.is_set():
            try:
                expired = self._retrying(self.run_once)
                if on_round:
                    on_round(expired)
                pause = self._retrying(self.seconds_until_next_deadline)
            except RETRYABLE:
                if self.stopping.is_set():
                    break
                raise
            self.stopping.wait(pause)
        log.info("expiry worker stopped after expiring %d pods", self.expired_total)
