"""``AsyncStore``: one cache's Redis through redis.asyncio, the second transport under the
same commands.

Everything but the sending is :class:`~schedcache.store.store.StoreCore`'s, shared with the
sync :class:`~schedcache.store.store.Store`: the ``FCALL`` convention, the retry policy, the
library's version check, how error replies become :class:`CacheError`\\ s. A command is one
``FCALL``, which Redis runs whole or not at all; a coroutine cancelled while it waits for the
reply leaves the command applied or not, and its id remembered by Redis either way, so running
the same :class:`Command` again settles it exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import fakeredis
import redis
from hiredis import pack_command
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.exceptions import ClusterDownError

from schedcache.aio.connection import AsyncReplicaRoute
from schedcache.store.commands import Command, sent_id
from schedcache.store.library import (
    function_name,
    is_missing_function,
    library_source,
    load_refused,
    needs_loading,
)
from schedcache.store.plain_head import plain_head, refused_by_rules, transaction
from schedcache.store.reads import (
    FOLLOW_READ,
    HEAD_READ,
    HEADS,
    REPLICA_FAILURES,
    STREAM_PAGE,
    Ahead,
    Floor,
    Read,
    Reads,
    ReplicaBehind,
    check_floor,
)
from schedcache.store.replies import translate
from schedcache.store.retry import RETRYABLE, call_with_retries_async
from schedcache.store.store import StoreCore

log = logging.getLogger(__name__)
T = TypeVar("T")
# Replies handed out before the callers answered may run: how finely the work of the client and
# of Redis overlap when many coroutines share a pool.
DELIVER_EVERY = 8
# (calls, deliver(index, reply) called as each reply is read) -> every reply, in order.
Deliver = Callable[[int, Any], None]
SendMany = Callable[[list[list[Any]], Deliver], Awaitable[list[Any]]]


class Coalescer:
    """Commands that coroutines send in the same turn of the event loop go out together, one
    pipeline (at most ``MAX_PIPELINE``), each still its own ``FCALL``, applied whole or not at
    all, answered or refused on its own. One round trip then serves many coroutines: that is
    where concurrency pays on one connection pool. A coroutine cancelled before its turn came
    sends nothing; cancelled after, its command runs (and its id is remembered) all the same."""

    MAX_PIPELINE = 200

    def __init__(self, send_many: SendMany) -> None:
        self.send_many = send_many
        self.pending: list[tuple[list[Any], asyncio.Future[Any]]] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def call(self, args: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((args, future))
        reply = await future
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _flush(self) -> None:
        pending, self.pending = self.pending, []
        for start in range(0, len(pending), self.MAX_PIPELINE):
            task = asyncio.ensure_future(self._send(pending[start : start + self.MAX_PIPELINE]))
            self.tasks.add(task)  # held until done (the loop keeps only weak references)
            task.add_done_callback(self.tasks.discard)

    async def _send(self, batch: list[tuple[list[Any], asyncio.Future[Any]]]) -> None:
        live = [(args, future) for args, future in batch if not future.done()]
        if not live:
            return

        def deliver(index: int, reply: Any) -> None:
            """Each caller resumes as soon as its own reply is read: while Redis still runs
            the rest of the pipeline, the callers answered build their next commands."""
            future = live[index][1]
            if not future.done():
                future.set_result(reply)

        try:
            replies = await self.send_many([args for args, _ in live], deliver)
        except BaseException as error:  # the connection broke: every caller decides to resend
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for index, reply in enumerate(replies):
            deliver(index, reply)


class AsyncStore(StoreCore):
    """One named cache on a Redis server, Sentinel-managed primary or Cluster, for asyncio.
    Make it with :meth:`open` (it checks the library on the server)."""

    def __init__(self, client: Any, name: str = "default", **options: Any) -> None:
        """``options``: ``replica``, ``retry``, ``wait_replicas``, ``wait_timeout``."""
        super().__init__(client, name, **options)
        self._coalescer = Coalescer(self._send_many)
        self._refreshing: asyncio.Lock | None = None
        # A redis.asyncio client of a server (or Sentinel primary): commands packed here.
        self._packs_itself = not isinstance(client, RedisCluster | fakeredis.FakeAsyncRedis)
        # Where snapshot updates read (None: the primary); nothing else reads there.
        self.replicas = (
            AsyncReplicaRoute(client, self.keys.prefix, self.replica_url)
            if self.reads_replica
            else None
        )

    @property
    def store(self) -> AsyncStore:
        """The store itself: whatever takes a cache or its store (``store_of``)."""
        return self

    @classmethod
    async def open(cls, client: Any, name: str = "default", **options: Any) -> AsyncStore:
        store = cls(client, name, **options)
        await store.ensure_loaded()
        try:
            permitted = await store._server("FCALL_RO", *store.permitted_args())
        except redis.exceptions.NoPermissionError:  # not this user's cache: every call says so
            permitted = None
        store.note_permitted(permitted)
        return store

    # -- talking to the cache's server ----------------------------------------------------

    async def server_time(self) -> Any:
        """``TIME`` of the server holding the cache: the clock deadlines are set by."""
        return await self._server("TIME")

    async def _server(self, *args: Any) -> Any:
        """One command to the server holding the cache (in a Cluster, its slot's primary)."""
        if isinstance(self.client, RedisCluster):
            node = self.client.get_node_from_key(self.keys.prefix)
            return await self.client.execute_command(*args, target_nodes=node)
        return await self.client.execute_command(*args)

    async def ensure_loaded(self) -> None:
        """Load the library unless the server has exactly this one (the sync rule)."""
        try:
            loaded = await self._server("FCALL_RO", function_name("version"), 0)
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise
            loaded = None
        if not needs_loading(loaded):
            return
        try:
            await self._server("FUNCTION", "LOAD", "REPLACE", library_source())
        except redis.exceptions.NoPermissionError as error:
            raise load_refused(loaded, error) from None

    # -- commands ---------------------------------------------------------------------------

    async def run(self, command: Command) -> Any:
        """Run one command; raise the matching :class:`CacheError` if it is rejected (see
        :meth:`Store.run <schedcache.store.store.Store.run>`)."""
        self.check_sendable(command)
        started, attempts = time.monotonic(), 1

        async def before_resend(error: Exception, _: float) -> None:
            nonlocal attempts
            attempts += 1
            await self.before_resend(f"sc_{command.name}", error)

        try:
            reply = await call_with_retries_async(
                lambda: self._call_reloading(command), self.retry.delays(), before_resend
            )
        except RETRYABLE as error:
            raise self.gave_up(command, attempts, started, error) from error
        except redis.ResponseError as error:
            raise self.refused(command, error) from None
        return self.applied(command, reply)

    async def retrying(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``await call()`` under the retry policy (reads, transactions of their own)."""

        async def before_resend(error: Exception, _: float) -> None:
            await self.before_resend(what, error)

        return await call_with_retries_async(call, self.retry.delays(), before_resend)

    async def before_resend(self, what: str, error: Exception) -> None:
        """Before sending again: log, and in a Cluster ask where the slot's primary is now."""
        if self.resending(what, error) and isinstance(self.client, RedisCluster):
            await self.refresh_slots()

    async def refresh_slots(self) -> None:
        """Ask the cluster again where the slots are (a failover may have moved the cache's
        primary); one refresh at a time, still electing: the next attempt asks again.
        (``RedisCluster.initialize`` does nothing once the client is initialised.)"""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        if self._refreshing.locked():  # another coroutine is asking: wait for its answer
            async with self._refreshing:
                return
        async with self._refreshing:
            with contextlib.suppress(redis.RedisError, OSError):
                await self.client.nodes_manager.initialize()

    async def on_one_connection(
        self, calls: list[tuple[Any, ...]], deliver: Deliver | None = None
    ) -> list[Any]:
        """``calls`` pipelined on one connection to the server holding the cache, each reply
        or error reply in its place: ``WAIT`` counts the replicas that have the writes sent
        before it on its own connection. In a Cluster, on the slot primary's own connection
        (the asyncio cluster pipeline does not promise one).

        A cancellation of the calling task while this runs is raised at the end even when
        redis-py swallowed it (its send waits in ``asyncio.wait_for``, which on Python 3.11 may
        return normally although the task was cancelled meanwhile; the request stays counted
        by ``Task.cancelling()``). The calls ran all the same: their ids settle a resend."""
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        replies = await self._on_one_connection(calls, deliver)
        if task is not None and task.cancelling() > cancelling:
            raise asyncio.CancelledError
        return replies

    async def _on_one_connection(
        self, calls: list[tuple[Any, ...]], deliver: Deliver | None
    ) -> list[Any]:
        if isinstance(self.client, RedisCluster):
            node = self.client.get_node_from_key(self.keys.prefix)
            if node is None:  # the slot has no primary now: resent after a refresh
                raise ClusterDownError(f"no primary holds the slot of cache {self.name}")
            queued = [PipelineCommand(index, *call) for index, call in enumerate(calls)]
            slot = getattr(self.client, "connection_slot", None)  # connect_async's client
            async with slot() if slot is not None else contextlib.nullcontext():
                await node.execute_pipeline(queued)
            for command in queued:  # a broken connection: the caller's retry resends all
                if isinstance(command.result, RETRYABLE):
                    raise command.result
            return [command.result for command in queued]
        if self._packs_itself:
            return await self._pipelined(calls, deliver)
        pipe = self.client.pipeline(transaction=False)  # the embedded fakeredis
        for call in calls:
            pipe.execute_command(*call)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    async def _pipelined(
        self, calls: list[tuple[Any, ...]], deliver: Deliver | None = None
    ) -> list[Any]:
        """``calls`` packed by hiredis (C) and written at once on one pooled connection, the
        replies read in order: redis-py's asyncio pipeline packs in Python and wraps every
        reply, which cost more than the round trip it saves. A broken connection is closed
        and raised (the caller's retry resends, the command ids settle it)."""
        pool = self.client.connection_pool
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(
                b"".join([pack_command(call) for call in calls]), check_health=False
            )
            replies: list[Any] = []
            for index in range(len(calls)):
                try:
                    reply = await connection.read_response()
                except redis.ResponseError as error:  # read whole: the connection is fine
                    reply = error
                replies.append(reply)
                if deliver is not None:
                    deliver(index, reply)
                    if index % DELIVER_EVERY == DELIVER_EVERY - 1:
                        # Let the callers answered so far run (and send their next commands,
                        # which Redis then runs while the rest are being answered here).
                        await asyncio.sleep(0)
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)
        return replies

    async def _send_many(self, calls: list[list[Any]], deliver: Deliver) -> list[Any]:
        """The ``FCALL`` calls of several coroutines in one round trip; each reply or error
        reply in its place (and to ``deliver`` as it is read, where this transport reads them
        one by one)."""
        return await self.on_one_connection([("FCALL", *args) for args in calls], deliver)

    async def _call_reloading(self, command: Command) -> Any:
        try:
            return await self._call(command)
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise
        await self.ensure_loaded()
        return await self._call(command)

    async def _call(self, command: Command) -> Any:
        args = self.function_args(command.name, sent_id(command), command.args)
        if not self.wait_replicas:
            return await self._coalescer.call(args)
        reply, replicas = await self.on_one_connection(
            [("FCALL", *args), ("WAIT", self.wait_replicas, self.wait_timeout_ms)]
        )
        if isinstance(reply, Exception):
            raise reply
        self.check_replicated(replicas, f"sc_{command.name} {command.subject}", reply)
        return reply

    # -- reads ------------------------------------------------------------------------------

    async def run_snapshot_reads(self, make_reads: Callable[[], Reads[T]], floor: Floor) -> T:
        """A snapshot update on a replica when this store reads from one, else, or when the
        replica is behind ``floor()`` or fails, on the primary (as the sync
        ``schedcache.store.reads.run_snapshot_reads``)."""
        route = self.replicas
        replica = await route.get() if route is not None else None
        if route is not None and replica is not None:
            reads = make_reads()
            try:
                return await self.run_reads(reads, replica, floor)
            except ReplicaBehind as behind:
                log.debug("cache %s: %s; reading the primary", self.name, behind)
            except REPLICA_FAILURES as error:
                log.warning(
                    "cache %s: replica read failed (%s); reading the primary", self.name, error
                )
                await route.refresh()
            finally:
                reads.close()
        return await self.run_reads(make_reads())

    async def run_reads(
        self, reads: Reads[T], replica: Any = None, floor: Floor | None = None
    ) -> T:
        """Drive a read without I/O (``schedcache.store.reads.Reads``: snapshots, node infos)
        on this transport: the same code the sync store drives (on ``replica``, with
        ``floor``, when given)."""
        try:
            step = next(reads)
            while True:
                if isinstance(step, Ahead):  # no read-ahead here: read as asked
                    step = reads.send(None)
                    continue
                reply = await self._answer(step, replica)
                if floor is not None and step[0] in HEADS:
                    check_floor(step[0], reply, floor)
                step = reads.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result

    async def _answer(self, read: Read, replica: Any) -> Any:
        name, args = read
        if name == STREAM_PAGE:  # XRANGE of the stream, a plain command
            first, last, count = args
            words = ("XRANGE", self.keys.events, first, last, "COUNT", count)
            if replica is not None:
                return await replica.execute_command(*words)
            return await self._server(*words)
        if name == FOLLOW_READ:
            return await self._follow_pair(replica, *args)
        if replica is not None:
            return await replica.execute_command("FCALL_RO", *self.read_args(name, *args))
        return await self.read_function(name, *args)

    async def _follow_pair(
        self, replica: Any, head_args: tuple[Any, ...], first: str, count: int
    ) -> tuple[Any, Any]:
        """A ``FOLLOW_READ``: the plain transaction (store/plain_head.py), else the head read
        and the stream's page after ``first`` in one pipeline (one round trip; in a Cluster
        one after the other, the head first)."""
        page = ("XRANGE", self.keys.events, first, "+", "COUNT", count)
        server = replica if replica is not None else self.client
        if self.plain_heads:  # the plain transaction first (store/plain_head.py)
            answered = await self._plain_head(server, head_args, first, count)
            if answered is not None:
                return answered
        if replica is None and isinstance(self.client, RedisCluster):
            return await self.read_function(HEAD_READ, *head_args), await self._server(*page)
        for attempt in range(2):
            pipe = server.pipeline(transaction=False)
            pipe.execute_command("FCALL_RO", *self.read_args(HEAD_READ, *head_args))
            pipe.execute_command(*page)
            head, entries = await pipe.execute(raise_on_error=False)
            if isinstance(head, redis.ResponseError):
                if replica is not None:
                    raise head  # (the replica's failure: the primary is read instead)
                if attempt == 0 and is_missing_function(head):
                    await self.ensure_loaded()
                    continue
                raise translate("read", f"cache {self.name}", head) from None
            if isinstance(entries, redis.ResponseError):
                raise entries
            return head, entries
        raise AssertionError("unreachable")

    async def _plain_head(
        self, server: Any, head_args: tuple[Any, ...], first: str, count: int
    ) -> tuple[Any, Any] | None:
        """The head and the page by the plain transaction, or None when the function must
        answer (:func:`~schedcache.store.plain_head.plain_head`)."""
        pipe = server.pipeline(transaction=True)
        for words in transaction(self.keys, first, count)[1:-1]:
            pipe.execute_command(*words)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except redis.ResponseError as error:
            if refused_by_rules(error):  # the user's rules: the function from now on
                self.plain_heads = False
            return None
        return plain_head(head_args, count, *replies)

    async def read_function(self, name: str, *args: Any) -> Any:
        """``FCALL_RO sc_<name>``, reloading the library once if the server lost it."""
        call = self.read_args(name, *args)
        try:
            return await self._server("FCALL_RO", *call)
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise translate("read", f"cache {self.name}", error) from None
        await self.ensure_loaded()
        try:
            return await self._server("FCALL_RO", *call)
        except redis.ResponseError as error:
            raise translate("read", f"cache {self.name}", error) from None
