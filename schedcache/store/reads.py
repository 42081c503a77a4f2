"""Reads without I/O, and their sync driver with read-ahead.

A read (a snapshot update, node infos) is a generator of read-function calls: it yields
``("<function>", args)``, is sent the reply, and returns its result, so the sync Store and the
asyncio one drive the same code. A read that knows its next calls (a snapshot reading changed
nodes in chunks) first yields :class:`Ahead` with them: the sync driver then fetches them on a
thread of its own, at most ``READ_AHEAD`` replies ahead, while the generator decodes the chunk
before (Redis computing one chunk overlaps Python decoding the other; the replies and the
order are the same). The asyncio driver answers ``Ahead`` with ``None`` and reads as asked.

One read is a plain command rather than a function: ``(STREAM_PAGE, (first, last, count))``
is ``XRANGE`` of the cache's event stream (a snapshot following the stream). Through a function
the same entries cost Redis 4.4 times as much (each converted to Lua tables and back; answered
by ``sc_snapshot_delta`` itself, a catch-up of one event cost Redis 1.3 times the head read
and its ``XRANGE``, of ten 2.2 times). So a snapshot's catch-up, ``(FOLLOW_READ, (head args, first,
count))``, is the head read and an ``XRANGE`` from the snapshot's last event to the stream's
end, sent together: one round trip, answered ``(head reply, page)`` with the page as
``XRANGE`` parses it. They are two commands, not one atomic read: the page may end past the
head's last event (the caller cuts it there) or, in principle, before it (the caller reads on).

A snapshot update may be read from a replica (``read_from``, :class:`ReplicaRoute`): all of its
reads from one replica, with a floor. A replica behind the snapshot (an older generation, or
another incarnation, than the snapshot already holds) or failing to answer gives up the
replica's run and the same update reads the primary instead: a snapshot never moves back.
Only snapshot updates read there; claims, ``verify``, expiry and leases read the primary.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from schedcache.store import pinned
from schedcache.store.plain_head import plain_head, refused_by_rules, transaction
from schedcache.store.responses import stream_page
from schedcache.store.routing import is_cluster

if TYPE_CHECKING:
    from schedcache.store.store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

STREAM_PAGE = "XRANGE"
# The head of a snapshot update (and of each generation catch-up round): its reply carries
# the generation (first) and the incarnation (seventh) the floor is checked against.
HEAD_READ = "snapshot_delta"
# The head read and the stream's page after the snapshot's last event, in one round trip.
FOLLOW_READ = "snapshot_delta+XRANGE"
HEADS = (HEAD_READ, FOLLOW_READ)

Read = tuple[str, tuple[Any, ...]]  # FCALL_RO sc_<name> with these arguments (or STREAM_PAGE)


@dataclass(frozen=True)
class Ahead:
    """The reads a generator yields next, in this order (a driver may send them early)."""

    reads: tuple[Read, ...]


Reads = Generator[Read | Ahead, Any, T]  # yields the calls, is sent their replies, returns

# Replies fetched ahead of the one being decoded: bounds the memory held and how long one
# reader keeps Redis busy back to back (each call is one chunk of nodes).
READ_AHEAD = 2
# How long a read stopped early waits for its reading thread (seconds): an interrupt is not
# held up by a slow reply.
EARLY_STOP_WAIT = 0.2


# What a snapshot's floor is: (incarnation, generation) it already holds ("" for none yet).
Floor = Callable[[], tuple[str, int]]


class ReplicaBehind(Exception):
    """A replica answered an older point of the cache than the snapshot holds."""


# A replica failing to answer (down, loading, not synced, without the library): the update
# reads the primary instead, and the route looks for a replica again.
REPLICA_FAILURES = (redis.RedisError, OSError)


def run_snapshot_reads(store: Store, make_reads: Callable[[], Reads[T]], floor: Floor) -> T:
    """Drive a snapshot update (``make_reads()``) on a replica when the store reads from one,
    else, or when the replica is behind ``floor()`` or fails, on the primary."""
    route = store.replicas
    replica = route.get() if route is not None else None
    if route is not None and replica is not None:
        reads = make_reads()
        try:
            return run_reads(store, reads, replica, floor)
        except ReplicaBehind as behind:
            log.debug("cache %s: %s; reading the primary", store.name, behind)
        except REPLICA_FAILURES as error:
            log.warning(
                "cache %s: replica read failed (%s); reading the primary", store.name, error
            )
            route.refresh()
        finally:
            reads.close()  # (its cleanup runs now, before the primary's run)
    return run_reads(store, make_reads())


def check_floor(name: str, reply: Any, floor: Floor) -> None:
    """Raise :class:`ReplicaBehind` when a head read (``name``: one of ``HEADS``) is older
    than ``floor()``."""
    if name == FOLLOW_READ:
        reply = reply[0]
    incarnation, generation = floor()
    answered, at = reply[6].decode(), int(reply[0])
    if incarnation and (answered != incarnation or at < generation):
        raise ReplicaBehind(
            f"a replica answered generation {at} of incarnation {answered!r}, the snapshot "
            f"holds {generation} of {incarnation!r}"
        )


def run_reads(
    store: Store, reads: Reads[T], replica: redis.Redis | None = None, floor: Floor | None = None
) -> T:
    """Drive ``reads`` on the sync store (on ``replica``, with ``floor``, when given), fetching
    announced reads ahead (``AsyncStore.run_reads`` drives them on asyncio)."""
    ahead: _ReadAhead | None = None
    try:
        step = next(reads)
        while True:
            if isinstance(step, Ahead):
                if ahead is not None:
                    ahead.close()
                ahead = _ReadAhead(store, step.reads, replica) if len(step.reads) > 1 else None
                step = reads.send(None)
            elif ahead is not None and ahead.serves(step):
                step = reads.send(ahead.take())
            else:
                reply = answer_from(store, step, replica)
                if floor is not None and step[0] in HEADS:
                    check_floor(step[0], reply, floor)
                step = reads.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        if ahead is not None:
            ahead.close()


def answer(store: Store, read: Read) -> Any:
    """The reply to one read on the sync store."""
    name, args = read
    if name == FOLLOW_READ:
        head_args, first, count = args
        if is_cluster(store.client):  # (a Cluster client routes both by their key)
            return store.read(lambda: _cluster_pair(store, head_args, first, count))
        return store.read(lambda: _follow_pair(store, store.route.get(), head_args, first, count))
    if name != STREAM_PAGE:
        return store.read_function(name, *args)
    first, last, count = args  # (a Cluster client routes it by its key)
    return store.client.xrange(store.keys.events, first, last, count)


def _cluster_pair(
    store: Store, head_args: Sequence[Any], first: str, count: int
) -> tuple[Any, list[tuple[bytes, dict[bytes, bytes]]]]:
    """A :data:`FOLLOW_READ` in a Cluster: one pipeline to the slot's primary (the plain
    transaction first, :mod:`schedcache.store.plain_head`)."""
    if store.plain_heads:
        pipe = store.client.pipeline(transaction=True)
        for words in transaction(store.keys, first, count)[1:-1]:
            pipe.execute_command(*words)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.ResponseError as error:
            _refused(store, error)
        else:
            answered = plain_head(head_args, count, *replies)
            if answered is not None:
                return answered
    pipe = store.client.pipeline(transaction=False)
    pipe.fcall_ro(*store.read_args(HEAD_READ, *head_args))
    pipe.xrange(store.keys.events, first, "+", count)
    head, page = pipe.execute(raise_on_error=False)  # (errors as the server said them)
    return _raised(head), _raised(page)


def _follow_pair(
    store: Store, server: redis.Redis, head_args: Sequence[Any], first: str, count: int
) -> tuple[Any, list[tuple[bytes, dict[bytes, bytes]]]]:
    """A :data:`FOLLOW_READ` on ``server``: the plain transaction
    (:mod:`schedcache.store.plain_head`), else the head read and the page in one write (an
    error reply of either is raised, the head's first)."""
    if store.plain_heads:
        *queued, answer = pinned.call(server, *transaction(store.keys, first, count))
        # (A command refused as it is queued: EXEC answers EXECABORT, or "without MULTI".)
        errors = [reply for reply in queued if isinstance(reply, redis.ResponseError)]
        if errors or isinstance(answer, redis.ResponseError):
            for error in errors or [answer]:
                _refused(store, error)
        elif isinstance(answer, list) and len(answer) == 3:
            answered = plain_head(head_args, count, *answer)
            if answered is not None:
                return answered
    head, page = pinned.call(
        server,
        ("FCALL_RO", *store.read_args(HEAD_READ, *head_args)),
        ("XRANGE", store.keys.events, first, "+", "COUNT", count),
    )
    return _raised(head), stream_page(_raised(page))


def _refused(store: Store, error: redis.ResponseError) -> None:
    """The plain transaction was refused: by the user's ACL rules (no ``MULTI``, ``MGET``),
    never tried again on this store; otherwise the function answers this time only."""
    if refused_by_rules(error):
        store.plain_heads = False
        log.info("cache %s: catch-ups by the head read function (%s)", store.name, error)


def _raised(reply: Any) -> Any:
    """``reply``, or raised when it is an error reply (of a pipeline or a pinned call)."""
    if isinstance(reply, redis.ResponseError):
        raise reply
    return reply


def answer_from(store: Store, read: Read, replica: redis.Redis | None) -> Any:
    """The reply to one read, from ``replica`` when given (any error there, the function
    library missing included, is the replica's failure), else as :func:`answer`."""
    if replica is None:
        return answer(store, read)
    name, args = read
    if name == STREAM_PAGE:
        return replica.xrange(store.keys.events, *args)
    if name == FOLLOW_READ:
        return _follow_pair(store, replica, *args)
    return pinned.reply(replica, "FCALL_RO", *store.read_args(name, *args))


class _ReadAhead:
    """Announced reads, made in order on a thread of their own (with the Store's own retries
    and library reload); their replies, or the error that ended them, wait in a short queue."""

    def __init__(
        self, store: Store, reads: Sequence[Read], replica: redis.Redis | None = None
    ) -> None:
        self.expected: deque[Read] = deque(reads)
        self.replies: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=READ_AHEAD)
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._fetch,
            args=(store, list(reads), replica),
            name="schedcache-read-ahead",
            daemon=True,
        )
        self.thread.start()

    def serves(self, read: Read) -> bool:
        return bool(self.expected) and self.expected[0] == read

    def take(self) -> Any:
        self.expected.popleft()
        ok, value = self.replies.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Stop fetching (replies not taken are dropped). When every reply was taken the thread
        is done: wait for it. When the caller stopped early (an error, an interrupt), wait only
        briefly: the thread may be in a read Redis is slow to answer, and it ends by itself
        after that read (a daemon, its connection back to the pool)."""
        self.stopped.set()
        self.thread.join(None if not self.expected else EARLY_STOP_WAIT)

    def _fetch(self, store: Store, reads: list[Read], replica: redis.Redis | None) -> None:
        for name, args in reads:
            if self.stopped.is_set():
                return
            try:
                item: tuple[bool, Any] = (True, answer_from(store, (name, args), replica))
            except BaseException as error:  # raised in the reading thread, by take()
                item = (False, error)
            while not self.stopped.is_set():
                try:
                    self.replies.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if not item[0]:
                return
