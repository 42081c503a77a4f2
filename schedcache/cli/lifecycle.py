"""How the long-running commands (``sync``, ``scheduler``, ``extender``, ``worker expiry``)
start and stop: they outlive Redis and end cleanly.

* **Start while Redis is away**: the cache is made (the library loaded, the replica's lease
  taken) through the store's retry loop with delays that never run out until a signal
  (:func:`ready_cache`), so a container started before its Redis waits instead of exiting 1.
* **Signals**: SIGTERM and SIGINT set one event (:func:`stop_on_signals`) the whole process
  watches, the wait for Redis included.
* **A clean exit gives the replica's lease back** (:func:`give_back_lease`): a container
  restarted in place with the same ``--replica`` is not refused for the lease's ttl.
* **Exit without tearing the interpreter down** (:func:`exit_now`): a daemon thread still in a
  socket call (a list page of a silent API server) aborts CPython's finalisation (exit 134);
  everything worth keeping is flushed first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
import redis
from redis.exceptions import RedisClusterException

from schedcache.store.connection import ConnectionFailed
from schedcache.store.retry import RETRYABLE, backoff, call_with_retries

if TYPE_CHECKING:
    from schedcache.cache import Cache
    from schedcache.cli.settings import Settings

log = logging.getLogger(__name__)

# Waits between attempts to reach Redis at start: doubling from the first to the longest.
START_BACKOFF = (0.1, 5.0)

# Seconds a stopping command waits to give its lease back (the lease lapses after its ttl).
GIVE_BACK_WAIT = 2.0


class RedisNotReady(redis.ConnectionError):
    """Redis cannot be reached yet (refused, loading, a Cluster no seed node answered):
    retried at start."""


# What says that Redis is not there yet, as opposed to settings that are wrong.
NOT_YET = (*RETRYABLE, RedisClusterException)


class Interrupted(BaseException):
    """A signal came while the main thread was busy with something no event stops (setting a
    server up): raised there, as KeyboardInterrupt is, and caught by the command."""


class StopEvent(threading.Event):
    """The stop event of a command: a :class:`threading.Event` that a signal handler may set.

    Python runs a handler in the main thread between two bytecodes, also while that thread
    holds the event's own lock (inside ``wait()`` or ``set()``); ``threading.Event`` guards
    itself with a plain Lock, so the handler's ``set()`` then waited for itself forever and
    the command hung until SIGKILL (found in review). This one guards itself with an RLock,
    which the same thread takes again."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Condition(threading.RLock())
        self._raised = False

    def is_set(self) -> bool:
        return self._raised

    def set(self) -> None:
        with self._guard:
            self._raised = True
            self._guard.notify_all()

    def clear(self) -> None:
        with self._guard:
            self._raised = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._guard:
            if not self._raised:
                self._guard.wait(timeout)
            return self._raised


def stop_on_signals(stop: threading.Event, interrupt: bool = False) -> None:
    """SIGTERM and SIGINT set ``stop`` (a :class:`StopEvent`: the command then ends within its
    own bound); with ``interrupt``, they also raise :class:`Interrupted` in the main thread
    (until a server installs handlers of its own)."""

    def handler(*_: object) -> None:
        # A repeat changes nothing: raised again, it escaped the ``except`` saying "stopped"
        # (found in review: a traceback, exit 1).
        if stop.is_set():
            return
        stop.set()
        if interrupt:
            raise Interrupted

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def ignore_stop_signals() -> None:
    """SIGTERM and SIGINT ignored from here on: for a command whose stop is done. Python gives
    its own handlers back to the default action while the interpreter tears down, so a signal
    repeated in that window (~100 ms; an operator's second Ctrl-C, a supervisor's repeat) ended
    a clean stop with -15 (found in review); ignored handlers stay as they are."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ready_cache(
    settings: Settings,
    stop: threading.Event,
    what: str,
    take_lease: Callable[[Cache], None] | None = None,
    **options: Any,
) -> Cache | None:
    """The cache (and its lease, with ``take_lease``) once Redis answers, trying again with a
    growing back-off meanwhile; None when ``stop`` is set first. Errors other than an
    unreachable or loading Redis (a refused lease, wrong credentials or settings, a
    maxmemory-policy that may evict the cache's keys) are raised
    at once."""

    def attempt() -> Cache:
        try:
            cache = settings.cache(**options)
            settings.refuse_evicting(cache)  # a policy that may evict its keys: exit 1 at once
            if take_lease is not None:
                take_lease(cache)
        except redis.AuthenticationError as error:  # wrong credentials: no use waiting
            raise ConnectionFailed(f"Redis refused the credentials: {error}") from None
        except ConnectionFailed as error:  # connect() names the URL; what failed is inside
            failed = error.__context__
            if isinstance(failed, redis.AuthenticationError) or not isinstance(failed, NOT_YET):
                raise
            raise RedisNotReady(str(error)) from error
        return cache

    def waiting(error: Exception, delay: float) -> None:
        log.warning("%s: Redis unavailable (%s); trying again in %.1f s", what, error, delay)

    try:
        return call_with_retries(
            attempt, backoff(*START_BACKOFF, until=stop.is_set), waiting, sleep=stop.wait
        )
    except redis.ConnectionError:
        if stop.is_set():
            return None
        raise


def serve_until_stopped(
    settings: Settings, what: str, **options: Any
) -> tuple[Cache, threading.Event] | None:
    """A long-running command's start: the stop event SIGTERM and SIGINT set, and the cache once
    Redis answers (:func:`ready_cache`); None, said on stderr, when a signal came first (then
    further signals are ignored: :func:`ignore_stop_signals`; the command, once stopped, says
    so too)."""
    stop = StopEvent()
    stop_on_signals(stop)
    cache = ready_cache(settings, stop, what, **options)
    if cache is None:
        click.echo("stopped before Redis answered", err=True)
        ignore_stop_signals()
        return None
    return cache, stop


def in_a_daemon_thread(
    work: Callable[[], None], name: str
) -> tuple[threading.Thread, list[BaseException]]:
    """``work`` started in a daemon thread (a process may exit while it still waits on
    Redis), and the list that gets the exception it raised, if any."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # the caller's to raise or say
            failed.append(error)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, failed


def run_until_stopped(work: Callable[[], None], stop: threading.Event, within: float) -> bool:
    """Run ``work`` (a loop that ends once ``stop`` is set) in a daemon thread, and wait for
    it: until it ends, or ``within`` seconds after ``stop`` at most. False when it is still
    running then (the caller exits all the same); its exception is raised here.

    Why a thread: a loop caught in a Redis call while Redis hangs (a frozen primary, a
    partition) waits out its socket timeouts and retries, a minute or more, past the grace
    period Kubernetes leaves after SIGTERM (found at stop 53: the reference scheduler did not
    stop in 30 s)."""
    thread, failed = in_a_daemon_thread(work, "schedcache-main-loop")
    while thread.is_alive() and not stop.wait(0.2):
        pass
    thread.join(within)
    if failed:
        raise failed[0]
    return not thread.is_alive()


def give_back_lease(cache: Cache, within: float = GIVE_BACK_WAIT) -> None:
    """Stop the replica's heartbeat and delete its lease (a clean exit: the binds it started
    have answered), waiting ``within`` seconds at most. Redis away: said, and the lease lapses
    after its ttl instead (the give-back goes on in its daemon thread meanwhile).

    Bounded because a Redis that does not answer (a hung primary, a partition) held the stop
    ~10 s (a renewal in flight, then the delete, each a socket timeout), past the grace period
    Kubernetes leaves after the extender's drain (noticed at stop 52)."""
    thread, failed = in_a_daemon_thread(
        lambda: cache.close(release_lease=True), "schedcache-lease-give-back"
    )
    thread.join(within)
    if thread.is_alive():
        log.warning(
            "replica %s: lease not given back within %g s (Redis does not answer); it lapses "
            "after its ttl",
            cache.replica,
            within,
        )
    elif failed:
        if not isinstance(failed[0], redis.RedisError | OSError):
            raise failed[0]
        log.warning(
            "replica %s: lease not given back (%s); it lapses after its ttl",
            cache.replica,
            failed[0],
        )


def exit_now(status: int = 0) -> NoReturn:
    """Flush logs and output, then end the process without finalising the interpreter."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to keep
            stream.flush()
    os._exit(status)
