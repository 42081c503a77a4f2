"""The binding cycle (:func:`bind_and_finish`), and that cycle in a process of its own: a
replica's Bindings off the scheduling loop's GIL.

The loop's claim carries its deadline (``Cache.assume_pod(deadline=claim_deadline(ttl))``:
``BINDING_ALLOWANCE`` plus the cache's ttl, set by Redis in the claim's own call). A Binding
that answers within the allowance leaves the bound pod at least the ttl for ``sync`` to
confirm it, as ``finish_binding`` would: no Redis call after the Binding. A slower one sends
``finish_binding`` (the deadline then moves to the ttl from now); an assumed pod whose Binding
never shows up expires at its deadline all the same (the expiry worker).

In one process the scheduling loop and its binding threads share one core: the POST (urllib3
and http.client, their header parsing), the ``finish_binding`` call (then sent every time) and
the threads' GIL hand-offs were a third of a replica's CPU a pod. ``BindingProcess`` runs them
in a spawned process with a pool of its own (its own Redis connection and API client, made
with the replica's settings: ``schedcache scheduler --binding-process``); the loop sends each
claimed pod down a pipe and learns from a reader thread how its Binding ended: ``""`` (bound)
or why it failed (the loop then forgets the claim and gives the pod back, as with its own
pool).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import redis
import urllib3
from kubernetes.client.exceptions import ApiException

from schedcache.cache import Cache
from schedcache.errors import CacheError, log_reason
from schedcache.feed.sync import api_client
from schedcache.model.values import Pod
from schedcache.scheduler.binder import ApiBinder
from schedcache.store.commands import MAX_TTL
from schedcache.store.retry import backoff, call_with_retries

log = logging.getLogger(__name__)

# finish_binding's waits while Redis is away: 1 s doubling to 30 s (the loop's own).
FINISH_BACKOFF = (1.0, 30.0)
# Seconds a Binding may take, from its claim, and still need no finish_binding (the extender's
# --bind-timeout default): the claim's deadline is this plus the cache's ttl.
BINDING_ALLOWANCE = 60.0
# Seconds a binding process may take to start (a spawned interpreter and its imports).
START_TIMEOUT = 60.0
# The reader thread's answer for a Binding the process never answered (it died, or stopped).
PROCESS_GONE = "the binding process ended"


class BindingProcess:
    """Bindings of one replica, ``workers`` at a time, in a spawned process. ``open_cache`` and
    ``open_api`` (picklable: they are called in that process) give it its own cache, the
    replica's (same name, replica and ttl, which ``finish_binding`` starts the claim's expiry
    with), and its API client. ``submit(pod, done)`` calls ``done(pod, why)`` from a reader
    thread once it answered (``why`` empty: bound); ``close()`` ends it (answers still due get
    ``PROCESS_GONE``). :meth:`from_url`: from a Redis URL and a kubeconfig file."""

    @classmethod
    def from_url(
        cls,
        kubeconfig: str,
        redis_url: str,
        cache_name: str,
        replica: str,
        workers: int,
        ttl: float = 30.0,
    ) -> BindingProcess:
        """The process of a cache reached by ``redis_url`` (a plain Redis: ``redis://``,
        ``rediss://``, ``unix://``) and an API server's ``kubeconfig``."""
        return cls(
            functools.partial(url_cache, redis_url, cache_name, replica, ttl),
            functools.partial(api_client, kubeconfig),
            replica,
            workers,
        )

    def __init__(
        self,
        open_cache: Callable[[], Cache],
        open_api: Callable[[], Any],
        replica: str,
        workers: int,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(theirs, open_cache, open_api, workers),
            name=f"schedcache-bind-{replica}",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        # Ready once its client and cache are built: a replica is not ready before its binder.
        if not self._conn.poll(START_TIMEOUT) or self._conn.recv() != "ready":
            self.process.kill()
            raise RuntimeError(f"the binding process of {replica} did not start")
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[Pod, Callable[[Pod, str], None]]] = {}
        self._gone = False  # the reader saw the process end: nothing more is sent
        self._reader = threading.Thread(target=self._read, name="schedcache-bind-answers")
        self._reader.daemon = True
        self._reader.start()

    def submit(
        self, placed: Pod, done: Callable[[Pod, str], None], claimed: float | None = None
    ) -> None:
        """Send ``placed`` (``claimed``: as :func:`bind_and_finish` takes it) to the process;
        a process that is gone answers ``PROCESS_GONE`` at once (the loop forgets the claim and
        goes on)."""
        with self._lock:
            sent = not self._gone
            if sent:
                self._waiting[placed.uid] = (placed, done)
                try:
                    # (time.monotonic is one clock for every process of the machine)
                    self._conn.send((placed.to_dict(), claimed))
                except OSError:  # the process died: the reader thread ends too
                    self._waiting.pop(placed.uid, None)
                    sent = False
        if not sent:
            done(placed, PROCESS_GONE)

    def in_flight(self) -> set[str]:
        with self._lock:
            return set(self._waiting)

    def _read(self) -> None:
        while True:
            try:
                uid, why = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                placed, done = self._waiting.pop(uid, (None, None))
            if placed is not None and done is not None:
                done(placed, why)
        with self._lock:
            self._gone = True
            left, self._waiting = list(self._waiting.values()), {}
        for placed, done in left:
            done(placed, PROCESS_GONE)

    def close(self, timeout: float = 5.0) -> None:
        """Ask the process to end after the Bindings it holds (``timeout`` s at most)."""
        try:
            with self._lock:
                self._conn.send(None)
        except OSError:
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        self._reader.join(timeout)
        self._conn.close()


def url_cache(redis_url: str, cache_name: str, replica: str, ttl: float) -> Cache:
    """:meth:`BindingProcess.from_url`'s cache."""
    return Cache(redis.Redis.from_url(redis_url), cache_name, ttl=ttl, replica=replica)


def serve(
    conn: Connection,
    open_cache: Callable[[], Cache],
    open_api: Callable[[], Any],
    workers: int,
) -> None:
    """The process: bind each pod received (then ``finish_binding`` when it is due); answer
    (uid, why)."""
    cache = open_cache()
    binder = ApiBinder(open_api())
    answers = threading.Lock()
    slots = threading.BoundedSemaphore(workers)
    stop = threading.Event()
    conn.send("ready")

    def answer(uid: str, why: str) -> None:
        with answers:
            conn.send((uid, why))

    def bind(placed: Pod, claimed: float | None) -> None:
        try:
            why = bind_and_finish(binder, cache, placed, stop, claimed)
        except (CacheError, redis.RedisError, OSError) as error:  # bound: the feeder confirms
            log.warning("pod %s/%s: binding cycle: %s", placed.namespace, placed.name, error)
            why = ""
        try:
            answer(placed.uid, why)
        finally:
            slots.release()

    with ThreadPoolExecutor(workers, thread_name_prefix="schedcache-bind") as pool:
        while True:
            try:
                message: Any = conn.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            slots.acquire()
            pod, claimed = message
            pool.submit(bind, Pod.from_dict(pod), claimed)
        stop.set()  # a finish_binding waiting out Redis gives up: the feeder confirms the pod


def claim_deadline(ttl: float) -> float | None:
    """The deadline (seconds) the loop's claim carries: ``BINDING_ALLOWANCE`` plus the cache's
    ``ttl``; None when the ttl is 0 (a bound pod never expires: ``finish_binding`` says so)
    or so long that the sum would pass ``MAX_TTL`` (claims then carry no deadline, and every
    Binding is followed by ``finish_binding``, as with no ttl)."""
    return BINDING_ALLOWANCE + ttl if 0 < ttl <= MAX_TTL - BINDING_ALLOWANCE else None


def bind_and_finish(
    binder: ApiBinder,
    cache: Cache,
    placed: Pod,
    stop: threading.Event,
    claimed: float | None = None,
) -> str:
    """One binding cycle (the loop's pool and this process run the same): "" when bound; else
    why the Binding failed (the loop then forgets the claim). ``claimed``: ``time.monotonic()``
    before the claim with :func:`claim_deadline`'s deadline was sent (None: a claim without
    one). Bound later than ``BINDING_ALLOWANCE`` after it, or with no deadline, the pod gets
    ``finish_binding``, sent until Redis answers (its error raised once ``stop`` is set)."""
    try:
        binder.bind(placed.namespace, placed.name, placed.uid, placed.node_name)
    except ApiException as error:
        return f"{error.status} {error.reason}"
    except (urllib3.exceptions.HTTPError, OSError) as error:  # the API server away
        return f"{type(error).__name__}: {log_reason(error)}"
    if claimed is not None and time.monotonic() - claimed <= BINDING_ALLOWANCE:
        return ""  # the claim's deadline leaves the pod the ttl (or more) for sync to confirm

    def waiting(error: Exception, delay: float) -> None:
        log.warning("Redis unavailable (%s); trying again in %.1f s", log_reason(error), delay)

    # Bound: the claim must learn it whatever Redis does meanwhile (a restart, a failover).
    delays = backoff(FINISH_BACKOFF[0], FINISH_BACKOFF[1], until=stop.is_set)
    call_with_retries(lambda: cache.finish_binding(placed), delays, waiting, sleep=stop.wait)
    return ""
