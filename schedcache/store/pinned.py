"""One connection per thread and server for single commands: the lightest redis-py path.

redis-py's ``execute_command`` takes a connection from the pool for each call, polls it for
stray data (a syscall), records pool metrics, wraps the call in its own retry and hands the
connection back: on these 2-core VMs about 50 µs of client CPU per call, as much as Redis
spends running an add_pod. A :class:`~schedcache.store.store.Store`'s single commands instead
keep one connection per thread for each server and write and read on it directly. Retries,
routing and WAIT stay in the Store, exactly as before.

What the pool's checks protected is kept:

* an error in the middle of a call (a timeout, a broken connection, an interrupt) disconnects
  the connection, so a late reply is never read as the next call's; an error *reply* leaves it
  usable (the whole reply was read);
* a forked child never writes on its parent's socket: it takes a connection of its own;
* a thread that ends gives its connection back to the pool (a finalizer on the thread's pin),
  so servers that run a thread per request do not leak sockets;
* pins take at most a quarter of a pool's ``max_connections`` (none of a
  ``BlockingConnectionPool``): the threads past that, batches, reads ahead and the program's
  own calls still find connections in the pool; a thread without a pin takes a connection
  for the call and gives it back;
* a client dropped without ``close()`` frees its pool: the pins live on the pool, and their
  finalizers hold it weakly.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import BlockingConnectionPool, Connection, ConnectionPool
from redis.exceptions import ConnectionError, ResponseError, TimeoutError


class _Pins:
    """A pool's pinned connections: one per thread, and at most ``limit`` at once (a quarter
    of the pool, none of a ``BlockingConnectionPool``), so batches, reads ahead and the rest of
    the program always find connections in the pool. Kept on the pool itself: it goes with
    the pool."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.count = 0
        limited = isinstance(pool, BlockingConnectionPool)
        self.limit = 0 if limited else int(getattr(pool, "max_connections", 0) or 0) // 4


class _Pin:
    """A thread's connection to one pool, given back when the pin is collected (the thread
    ended, or the pool is gone). The finalizer holds the pool and its pins weakly, so a
    dropped client's pool is freed."""

    __slots__ = ("__weakref__", "connection", "pid", "release")

    def __init__(self, pool: ConnectionPool, pins: _Pins) -> None:
        self.connection: Connection = pool.get_connection()
        self.pid = os.getpid()
        self.release = weakref.finalize(
            self, _unpin, weakref.ref(pool), weakref.ref(self.connection), weakref.ref(pins)
        )


def _unpin(
    pool_ref: weakref.ref[ConnectionPool],
    connection_ref: weakref.ref[Connection],
    pins_ref: weakref.ref[_Pins],
) -> None:
    pins = pins_ref()
    if pins is not None:
        with pins.lock:
            pins.count -= 1
    pool, connection = pool_ref(), connection_ref()
    if pool is not None and connection is not None:
        pool.release(connection)


_PINS_ATTRIBUTE = "_schedcache_pins"
_PINS_LOCK = threading.Lock()


def _pin(pool: ConnectionPool) -> _Pin | None:
    """This thread's pinned connection to ``pool``; None when the pool has no room for one
    (the call then takes a connection from the pool and gives it back)."""
    pins: _Pins | None = getattr(pool, _PINS_ATTRIBUTE, None)
    if pins is None:
        with _PINS_LOCK:
            pins = getattr(pool, _PINS_ATTRIBUTE, None)
            if pins is None:
                pins = _Pins(pool)
                setattr(pool, _PINS_ATTRIBUTE, pins)
    pin: _Pin | None = getattr(pins.local, "pin", None)
    if pin is not None and pin.pid == os.getpid():
        return pin
    if pin is not None:  # inherited across a fork: the parent's socket is not ours to use
        pin.release.detach()
        pins.local.pin = None
    with pins.lock:
        if pins.count >= pins.limit:
            return None
        pins.count += 1
    try:
        pin = _Pin(pool, pins)
    except BaseException:
        with pins.lock:
            pins.count -= 1
        raise
    pins.local.pin = pin
    return pin


def call(server: redis.Redis, *commands: Sequence[Any]) -> list[Any]:
    """Send ``commands`` (each the words of one Redis command) to ``server`` in one write and
    read their replies in order; an error reply comes back as its :class:`ResponseError`, in
    its place. A broken or timed-out connection is sent on once more, on a new connection, as
    redis-py's own retry does (a kept connection the server closed while idle); callers'
    commands carry ids, so a resend is never applied twice. Any failure disconnects the
    connection and is raised."""
    try:
        return _call(server.connection_pool, commands)
    except (ConnectionError, TimeoutError):
        return _call(server.connection_pool, commands)


def reply(server: redis.Redis, *words: Any) -> Any:
    """The reply to one command (:func:`call`); an error reply is raised."""
    (answer,) = call(server, words)
    if isinstance(answer, ResponseError):
        raise answer
    return answer


def _call(pool: ConnectionPool, commands: Sequence[Sequence[Any]]) -> list[Any]:
    pin = _pin(pool)
    if pin is not None:
        return _exchange(pin.connection, commands)
    connection = pool.get_connection()
    try:
        return _exchange(connection, commands)
    finally:
        pool.release(connection)


def _exchange(connection: Connection, commands: Sequence[Sequence[Any]]) -> list[Any]:
    try:
        # connect() here, not the send's own reconnect: a Sentinel-managed connection asks
        # the Sentinels for the primary's address only in connect().
        connection.connect()
        if len(commands) == 1:
            connection.send_command(*commands[0])
        else:
            connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies
    except BaseException:
        connection.disconnect()
        raise
