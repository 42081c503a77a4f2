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
  so servers that run a thread per request do not leak sockets.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import Connection, ConnectionPool
from redis.exceptions import ConnectionError, ResponseError


class _Pin:
    """A thread's connection to one pool, given back when the pin is collected."""

    __slots__ = ("__weakref__", "connection", "pid", "release")

    def __init__(self, pool: ConnectionPool) -> None:
        self.connection: Connection = pool.get_connection()
        self.pid = os.getpid()
        self.release = weakref.finalize(self, pool.release, self.connection)


# Each pool's pins, one per thread (threading.local drops a thread's pin when it ends).
_PINS: weakref.WeakKeyDictionary[ConnectionPool, threading.local] = weakref.WeakKeyDictionary()
_PINS_LOCK = threading.Lock()


def _pin(pool: ConnectionPool) -> _Pin:
    local = _PINS.get(pool)
    if local is None:
        with _PINS_LOCK:
            local = _PINS.setdefault(pool, threading.local())
    pin: _Pin | None = getattr(local, "pin", None)
    if pin is not None and pin.pid == os.getpid():
        return pin
    if pin is not None:  # inherited across a fork: the parent's socket is not ours to use
        pin.release.detach()
    pin = _Pin(pool)
    local.pin = pin
    return pin


def call(server: redis.Redis, *commands: Sequence[Any]) -> list[Any]:
    """Send ``commands`` (each the words of one Redis command) to ``server`` in one write and
    read their replies in order; an error reply comes back as its :class:`ResponseError`, in
    its place. A broken connection is sent on once more, on a new connection, as redis-py's own
    retry does (a kept connection the server closed while idle); callers' commands carry ids,
    so a resend is never applied twice. Any failure disconnects the connection and is raised.
    """
    try:
        return _exchange(_pin(server.connection_pool).connection, commands)
    except ConnectionError:
        return _exchange(_pin(server.connection_pool).connection, commands)


def reply(server: redis.Redis, *words: Any) -> Any:
    """The reply to one command (:func:`call`); an error reply is raised."""
    (answer,) = call(server, words)
    if isinstance(answer, ResponseError):
        raise answer
    return answer


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
