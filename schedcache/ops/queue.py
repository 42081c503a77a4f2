"""One scheduling queue in the cache for N replicas of a scheduler (docs/queue.md).

``schedcache sync`` queues every pending pod under its ``spec.schedulerName`` (with its
priority) in the same Lua call that keeps the cache (``sc_sync_pod``), and takes it out in the
call that adds it bound, or when it is deleted. A replica pops pods with a lease
(:meth:`SchedulingQueue.pop`): each pending pod is attempted by one replica at a time, highest
priority first, then oldest; a replica that dies loses its lease and its pods come back. A pod
the replica claims stays out of the queue while its claim lasts (its lease is renewed by the
next pops) and leaves it when it is bound; a pod it could not place is given back
(:meth:`SchedulingQueue.retry`): parked until a cluster change could help it when no node could
take it, else backing off, as upstream's scheduling queue does.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from dataclasses import dataclass

from schedcache.errors import CorruptRecord
from schedcache.model.values import Pod
from schedcache.store import commands
from schedcache.store.queued import queue_lengths
from schedcache.store.records import decode_object
from schedcache.store.responses import as_text
from schedcache.store.store import HasStore, log_skipped

# Upstream's podInitialBackoffSeconds, podMaxBackoffSeconds and
# podMaxInUnschedulablePodsDuration.
INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
MAX_PARKED = 300.0
# A replica holds what it popped this long before it comes back to the queue: far longer than
# one attempt takes, short enough that a dead replica's pods wait little.
LEASE = 15.0


@dataclass(frozen=True)
class QueuedPod:
    """A pod leased from the queue, and how many attempts failed before this one."""

    pod: Pod
    attempts: int


@dataclass(frozen=True)
class Retry:
    """Where a pod given back went: ``backoff`` or ``parked`` (until ``due``, ms since the
    epoch), ``active`` (given back untried), ``gone`` (bound or deleted meanwhile),
    ``notheld`` (its lease had lapsed)."""

    outcome: str
    due_ms: int | None = None


def default_holder() -> str:
    """A name no other process uses: host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class SchedulingQueue:
    """``scheduler``'s queue in ``cache``, seen from one replica (``holder``)."""

    def __init__(
        self,
        cache: HasStore,
        scheduler: str,
        holder: str = "",
        lease: float = LEASE,
        backoff: tuple[float, float] = (INITIAL_BACKOFF, MAX_BACKOFF),
        parked: float = MAX_PARKED,
    ) -> None:
        self.store = cache.store
        self.scheduler = commands.scheduler_name(scheduler, "scheduling queue", "scheduler")
        self.holder = holder or default_holder()
        self.lease = lease
        self.backoff = backoff
        self.parked = parked

    def pop(self, count: int = 1, now: float | None = None) -> list[QueuedPod]:
        """Lease up to ``count`` pods, highest priority first, then oldest (none: the queue
        has nothing ready). A pod whose stored msgpack cannot be decoded is stepped over: it
        leaves the queue (logged and counted as a skipped corrupt pod), and the rest are
        returned."""
        command = commands.queue_pop(
            self.scheduler, self.holder, self.lease, count, self.parked, now
        )
        reply = self.store.run(command)
        popped = []
        for j in range(0, len(reply), 3):
            uid = as_text(reply[j])
            what = functools.partial(str.format, "queued pod with uid {}", uid)
            try:
                pod = decode_object(reply[j + 2], what, Pod.from_dict)
            except CorruptRecord:
                log_skipped(self.store.name, "pop from the queue", [reply[j]])
                self.store.run(commands.queue_unreadable(self.scheduler, self.holder, uid))
                continue
            popped.append(QueuedPod(pod, int(reply[j + 1])))
        return popped

    def retry(
        self,
        pod: Pod,
        unschedulable: bool,
        attempt: str = "",
        now: float | None = None,
        wake: tuple[str, ...] = (),
    ) -> Retry:
        """Give back a leased pod that was not placed: ``unschedulable`` (no node could take
        it: parked until a helpful event after ``attempt``, the stream id the attempt's
        snapshot reflected) or not (back-off). ``wake``: the arrivals that can help it too
        (``schedcache.model.arrivals.wake_tokens``; docs/queue.md)."""
        command = commands.queue_retry(
            self.scheduler,
            self.holder,
            pod.uid,
            unschedulable,
            attempt,
            self.backoff,
            self.parked,
            now,
            wake,
        )
        outcome, due = (as_text(part) for part in self.store.run(command))
        return Retry(outcome, int(due) if outcome in ("backoff", "parked") else None)

    def untried(self, pod: Pod) -> Retry:
        """Give back a leased pod this replica did not attempt (the tail of a batch popped
        with ``count`` > 1, when the replica stops or Redis went away): it goes back to its
        place in the active queue, ahead of the pods queued since, and no attempt counts."""
        command = commands.queue_untried(self.scheduler, self.holder, pod.uid)
        outcome, _ = (as_text(part) for part in self.store.run(command))
        return Retry(outcome)

    def lengths(self) -> dict[str, int]:
        """Pods per state (``active``, ``leased``, ``backoff``, ``parked``)."""
        return queue_lengths(self.store.client, self.store.keys, [self.scheduler])[self.scheduler]
