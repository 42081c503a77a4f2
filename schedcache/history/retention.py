"""Retention: keep the event stream bounded without anyone running checkpoint and compact by
hand (a pod's life costs about 1 KB of stream: 1,000 pods/s would grow it by gigabytes an hour).

One round (:func:`retain`) keeps the history of the last ``keep_seconds`` (stream ids are the
Redis server's clock in milliseconds, so "older than" is read off the id) and at least the
newest ``keep_events`` events; everything older is trimmed. Trimming needs a checkpoint at or
after the cut, so a round writes one only when the stored checkpoint is older than the cut
(about once per ``keep_seconds``): between those, a round is a cheap ``XTRIM``.

Any number of workers may run rounds at once: a lease (``retention``, ``SET NX PX``) lets one
do the work and the others skip; and should a paused worker outlive its lease, the checkpoint
and compaction are still safe on their own (``checkpoints``: a checkpoint never replaces a
newer one nor stores a fold the stream was trimmed under, a trim never passes the checkpoint).
:func:`run_retention` repeats rounds every ``interval`` seconds until ``stop`` is set; a
failed round is logged and the next one runs as planned.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

import redis

from schedcache.errors import CacheError, ValidationError
from schedcache.history import checkpoints
from schedcache.history.checkpoints import stream_id
from schedcache.store.fetch import gc_paused, read_stream_length
from schedcache.store.responses import stream_entries
from schedcache.store.retry import TOPOLOGY_CHANGED
from schedcache.store.store import HasStore, Store, store_of

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0  # a round longer than this may overlap another worker's (safe, wasted)


@dataclass(frozen=True)
class RetentionRound:
    """What one :func:`retain` round did."""

    ran: bool  # False: another worker held the lease (nothing else was done)
    checkpoint: str | None = None  # the checkpoint written this round, if one was needed
    removed: int = 0  # events trimmed
    history_start: str | None = None  # the oldest event still in the stream's history
    stream_length: int = 0
    seconds: float = 0.0


def retain(
    cache: Store | HasStore,
    keep_seconds: float = 3600.0,
    keep_events: int = 0,
    *,
    now: float | None = None,
    lease_seconds: float = LEASE_SECONDS,
) -> RetentionRound:
    """One retention round: trim the events older than ``keep_seconds`` (before ``now``,
    seconds since the epoch; default the Redis server's clock), keeping at least the newest
    ``keep_events``, checkpointing first when the stored checkpoint is older than the cut.
    ``lease_seconds=0`` works without the lease (a single worker, tests)."""
    _check(keep_seconds, keep_events, lease_seconds)
    store = store_of(cache)
    started = time.monotonic()
    token = _take_lease(store, lease_seconds)
    if token is None:
        return RetentionRound(ran=False)
    try:
        cut = _cut(store, keep_seconds, keep_events, now)
        written = None
        stored = checkpoints.read_checkpoint_id(store)
        if cut is not None and (stored is None or stream_id(stored) < stream_id(cut)):
            with gc_paused():  # folding creates many objects and no cycles
                state = checkpoints.replay(store)
            written = checkpoints.write_checkpoint(store, state)
        removed = checkpoints.compact(store, before=cut) if cut is not None else 0
        return RetentionRound(
            ran=True,
            checkpoint=written,
            removed=removed,
            history_start=checkpoints.history_start(store),
            stream_length=read_stream_length(store),
            seconds=time.monotonic() - started,
        )
    finally:
        if token:
            _release_lease(store, token)


def run_retention(
    cache: Store | HasStore,
    keep_seconds: float,
    interval: float,
    stop: threading.Event,
    *,
    keep_events: int = 0,
    lease_seconds: float = LEASE_SECONDS,
) -> int:
    """Run :func:`retain` every ``interval`` seconds until ``stop`` is set; returns how many
    rounds failed. A failure (Redis away, a race lost) is logged with its reason and does not
    stop the loop: the next round starts from what is in Redis."""
    _check(keep_seconds, keep_events, lease_seconds)
    store = store_of(cache)
    if not interval > 0:
        raise ValidationError("retention", "interval", f"{interval!r} must be > 0 seconds")
    failures = 0
    while not stop.is_set():
        try:
            done = retain(store, keep_seconds, keep_events, lease_seconds=lease_seconds)
        except (redis.RedisError, CacheError) as error:
            failures += 1
            if isinstance(error, TOPOLOGY_CHANGED):  # a failover may have moved the primary
                store.route.refresh()
            log.warning(
                "retention round of cache %s failed (%s: %s); next round in %.0f s",
                store.name,
                type(error).__name__,
                error,
                interval,
            )
        except Exception:  # a bug: say so loudly, and keep the stream bounded all the same
            failures += 1
            log.exception("retention round of cache %s failed unexpectedly", store.name)
        else:
            if done.ran:
                log.info(
                    "retention of cache %s: checkpoint %s, %d events trimmed, history from %s, "
                    "%d events in the stream (%.2f s)",
                    store.name,
                    done.checkpoint or "kept",
                    done.removed,
                    done.history_start,
                    done.stream_length,
                    done.seconds,
                )
        stop.wait(interval)
    return failures


def _check(keep_seconds: float, keep_events: int, lease_seconds: float) -> None:
    if not isinstance(keep_seconds, int | float) or not 0 <= keep_seconds < 10**9:
        raise ValidationError("retention", "keep_seconds", f"{keep_seconds!r} must be >= 0")
    problem = checkpoints.keep_events_problem(keep_events)
    if problem is not None:
        raise ValidationError("retention", "keep_events", problem)
    if not isinstance(lease_seconds, int | float) or not 0 <= lease_seconds < 86400:
        raise ValidationError(
            "retention", "lease_seconds", f"{lease_seconds!r} must be 0 to 86,400 seconds"
        )


def _cut(store: Store, keep_seconds: float, keep_events: int, now: float | None) -> str | None:
    """The first stream id to keep (None: nothing to trim, the stream is empty)."""
    server = store.route.get()
    newest = stream_entries(
        server.xrevrange(store.keys.events, "+", "-", count=max(1, keep_events))
    )
    if not newest:
        return None
    if now is None:
        seconds, microseconds = server.time()
        now = seconds + microseconds / 1e6
    cut = f"{max(0, int(now * 1000) - round(keep_seconds * 1000))}-0"
    if keep_events and stream_id(newest[-1][0].decode()) < stream_id(cut):
        cut = newest[-1][0].decode()  # keep at least keep_events
    newest_id = newest[0][0].decode()
    if stream_id(cut) > stream_id(newest_id):
        cut = newest_id  # the newest event stays: the checkpoint is at it
    return cut


def _take_lease(store: Store, lease_seconds: float) -> str | None:
    """A token when this worker holds the lease now ("" without a lease), else None."""
    if not lease_seconds:
        return ""
    token = f"{store.replica or 'worker'}:{uuid.uuid4().hex[:12]}"
    taken = store.route.get().set(
        store.keys.retention, token, nx=True, px=max(1, round(lease_seconds * 1000))
    )
    return token if taken else None


def _release_lease(store: Store, token: str) -> None:
    """Delete the lease if it is still ours (WATCH/MULTI/EXEC: it may have lapsed and been
    taken by another worker meanwhile)."""
    with store.route.get().pipeline(transaction=True) as pipe:
        try:
            pipe.watch(store.keys.retention)
            if pipe.get(store.keys.retention) != token.encode():
                pipe.unwatch()
                return
            pipe.multi()
            pipe.delete(store.keys.retention)
            pipe.execute()
        except redis.WatchError:  # changed under us: not ours any more
            pass
        except redis.RedisError as error:  # it lapses by itself
            log.warning("cannot release the retention lease of cache %s: %s", store.name, error)
