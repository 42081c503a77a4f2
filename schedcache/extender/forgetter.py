"""Forgets that land: a claim whose Binding failed must be given back, even when Redis is away
at that moment (the lease heartbeat would otherwise keep it for as long as the process lives).

:meth:`Forgetter.forget` tries at once; a forget that fails for want of Redis is retried in a
daemon thread, doubling from 0.1 s to 5 s, until it lands or the claim is gone anyway (confirmed
by the sync feed, released by the expiry worker's bind timeout). What is still pending when the
process dies is left to that bind timeout (``--bind-timeout``), which is durable.
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from schedcache.cache import Cache
from schedcache.errors import CacheError, RetriesExhausted
from schedcache.model.values import Pod

log = logging.getLogger(__name__)

FORGETS_PENDING = Gauge(
    "schedcache_extender_forgets_pending", "Claims to forget, waiting for Redis to answer."
)
FORGET_RETRIES = Counter(
    "schedcache_extender_forget_retries_total", "Forgets retried because Redis did not answer."
)
UNAVAILABLE = (RetriesExhausted, RedisError, OSError)


class Forgetter:
    """Gives claims back, retrying until Redis answers."""

    def __init__(self, cache: Cache, first_delay: float = 0.1, max_delay: float = 5.0) -> None:
        self.cache = cache
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.pending: dict[str, Pod] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def forget(self, pod: Pod) -> bool:
        """True when forgotten (or gone) now; False when it will be retried."""
        if self._try(pod):
            return True
        with self.lock:
            self.pending[pod.uid] = pod
            FORGETS_PENDING.set(len(self.pending))
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._retry, name="schedcache-extender-forget", daemon=True
                )
                self.thread.start()
        self.wake.set()
        return False

    def _try(self, pod: Pod) -> bool:
        try:
            self.cache.forget_pod(pod)
        except UNAVAILABLE as error:
            log.warning(
                "forgetting pod %s/%s: Redis did not answer (%s); retrying",
                pod.namespace,
                pod.name,
                type(error).__name__,
            )
            return False
        except CacheError as error:  # no longer assumed: confirmed or already released
            log.info("forgetting pod %s/%s: %s", pod.namespace, pod.name, error)
        return True

    def _retry(self) -> None:
        delay = self.first_delay
        while not self.stopping.is_set():
            with self.lock:
                todo = list(self.pending.values())
            if not todo:
                self.wake.wait(1.0)
                self.wake.clear()
                delay = self.first_delay
                continue
            self.stopping.wait(delay)
            for pod in todo:
                FORGET_RETRIES.inc()
                if self._try(pod):
                    with self.lock:
                        self.pending.pop(pod.uid, None)
                        FORGETS_PENDING.set(len(self.pending))
            delay = min(self.max_delay, delay * 2)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
