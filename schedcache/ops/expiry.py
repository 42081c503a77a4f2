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
from typing import TypeVar

from schedcache.errors import NotReplicated
from schedcache.store import commands, metrics
from schedcache.store.retry import RETRYABLE, backoff, call_with_retries
from schedcache.store.store import HasStore, Store, log_skipped, store_of

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class ExpiryWorker:
    """Runs expiry rounds for one cache until :meth:`stop` is called."""

    cache: Store | HasStore  # a Cache, or its Store
    interval: float = 1.0  # longest sleep between rounds, seconds
    batch: int = 500  # pods expired per Lua call
    max_backoff: float = 30.0  # longest wait between reconnection attempts, seconds

    def __post_init__(self) -> None:
        self.store = store_of(self.cache)
        self.stopping = threading.Event()
        self.expired_total = 0
        self.skipped_total = 0  # pods skipped because their stored record is corrupt
        self.forgotten_total = 0

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT finish the current round, then stop."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run_once(self) -> list[str]:
        """One round: expire everything due now, then forget the unfinished pods of replicas
        whose lease lapsed, in bounded calls. Returns the uids expired."""
        expired = self._drain(lambda: commands.cleanup_assumed_pods(None, self.batch), "expire")
        forgotten = self._drain(lambda: commands.forget_lapsed(self.batch), "forget")
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
        return expired

    def _drain(self, command: Callable[[], commands.Command], action: str) -> list[str]:
        done: list[str] = []
        while not self.stopping.is_set():
            try:
                uids, skipped = self.store.run(command())
            except NotReplicated as error:  # applied all the same: carry on, but say so
                log.warning("%s; the worker carries on", error)
                uids, skipped = _sweep_reply(error.reply)
            done += [uid.decode() for uid in uids]
            self.skipped_total += len(skipped)
            log_skipped(self.store.name, action, skipped)
            if len(uids) + len(skipped) < self.batch:
                break
        return done

    def seconds_until_next_deadline(self) -> float:
        """How long until the earliest deadline by the server's clock (``interval`` if none)."""
        # The server holding the cache (in a cluster, its slot's primary: TIME has no key).
        pipe = self.store.server().pipeline(transaction=False)
        pipe.zrange(self.store.keys.deadlines, 0, 0, withscores=True)
        pipe.time()
        first, (seconds, micros) = pipe.execute()
        if not first:
            return self.interval
        now_ms = float(seconds) * 1000 + float(micros) / 1000
        # Expiry is strictly after the deadline: wake 1 ms past it.
        return max(0.0, min(self.interval, (float(first[0][1]) + 1 - now_ms) / 1000))

    def _before_retry(self, error: Exception, delay: float) -> None:
        log.warning("Redis unavailable (%s); retrying in %.1fs", error, delay)
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


def _sweep_reply(reply: object) -> tuple[list[bytes], list[bytes]]:
    """``(done uids, skipped uids)`` of a sweep whose reply came with :class:`NotReplicated`."""
    assert isinstance(reply, list) and len(reply) == 2, reply
    done, skipped = reply
    return list(done), list(skipped)
