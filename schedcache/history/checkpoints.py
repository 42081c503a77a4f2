"""Checkpoints and compaction: a stream that grows forever is not operable.

``checkpoint()`` stores the folded state at a stream id, written in chunks (a checkpoint of
150,000 pods never holds Redis long) under a key prefix of their own, then switches
``checkpoint`` to them in one WATCH/MULTI/EXEC transaction, only if the stored one is older and
the history the state was folded from is still whole: a slow writer (GC pause, starved CPU)
can neither overwrite a newer checkpoint nor store a fold that skipped trimmed events.
``compact(keep)`` trims the stream before the checkpoint (``XTRIM MINID``), keeping ``keep``
events before it, and records where history now starts in the same transaction, so ``replay``
= checkpoint + tail stays exact, a replay whose pages find the stream trimmed under them raises
:class:`HistoryCompacted`, and asking for a moment before that is a clear error.

Keys: ``checkpoint`` (hash: id, generation, events, chunks, key prefix of the chunks),
``checkpoint:<id>:<token>:<n>`` (msgpack chunks: the nodes, then the pods, then the image
index), ``checkpoint:parts`` (hash: chunk prefix -> chunk count of every checkpoint written or
being written, so the chunks of replaced, outrun or crashed writers are deleted), ``compacted``
(the id history starts at).

A chunk holds at most ``CHUNK`` entries and at most ``events.MAX_CHUNK`` bytes (a chunk that
would be larger is split); reading one back is bounded by ``events.CHUNK_LIMITS``, and a chunk
that is missing, too large or not what this module writes raises ``CorruptRecord`` naming its
key.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import redis

from schedcache.errors import CacheError, CorruptRecord, HistoryCompacted, ValidationError
from schedcache.history.replay import NodeState, PodState, ReplayState, fold_pages, stored
from schedcache.model.values import Node, Resource
from schedcache.store.events import CHUNK_LIMITS, Event, decode_entry, pack, unpack
from schedcache.store.keys import Keys
from schedcache.store.responses import (
    as_bytes,
    as_hash,
    as_text,
    optional_text,
    stream_entries,
    stream_page,
)
from schedcache.store.store import Store

log = logging.getLogger(__name__)

LAST_ID = (2**64 - 1, 2**64 - 1)  # the largest stream id
# The most events a compaction or a retention round may be asked to keep: XREVRANGE's COUNT,
# a C long (more was Redis' "value is not an integer or out of range"; found in review).
MAX_KEEP_EVENTS = 2**63 - 1


def keep_events_problem(value: object) -> str | None:
    """Why ``value`` is no count of events to keep (compact's ``keep``, retention's
    ``keep_events``), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_KEEP_EVENTS:
        return f"{value!r} must be an integer from 0 to {MAX_KEEP_EVENTS}"
    return None


CHUNK = 2000  # pods (or nodes, or images) per chunk key
PAGE = 1000  # events per XRANGE page of a replay
SWITCH_ATTEMPTS = 20  # WATCH/MULTI/EXEC rounds before giving up (each lost to a concurrent write)
READ_ATTEMPTS = 3  # times a checkpoint replaced while being read is read again
T = TypeVar("T")


def _node_chunk(entries: Sequence[NodeState]) -> bytes:
    return _pack_chunk(
        {
            "nodes": [
                {
                    "name": e.name,
                    "node": e.node.to_dict() if e.node else None,
                    "allocatable": e.allocatable.to_dict(),
                    "pods": list(e.pods),
                    "generation": e.generation,
                }
                for e in entries
            ]
        }
    )


def _pod_chunk(items: Sequence[tuple[str, PodState]]) -> bytes:
    return _pack_chunk(
        {
            "pods": [
                {
                    "uid": uid,
                    "blob": record.blob,
                    "state": record.state,
                    "node": record.node,
                    "generation": record.generation,
                    "finished": record.binding_finished,
                    "deadline": record.deadline_ms,
                    "since": record.since,
                }
                for uid, record in items
            ]
        }
    )


def _image_chunk(names: Sequence[str], state: ReplayState) -> bytes:
    sizes, spread = state.image_sizes, state.image_spread
    return _pack_chunk(
        {
            "image_sizes": {n: sizes[n] for n in names if n in sizes},
            "image_spread": {n: spread[n] for n in names if n in spread},
        }
    )


def _pack_chunk(obj: dict[str, Any]) -> bytes:
    return pack(obj, limits=CHUNK_LIMITS)


def _chunks(items: Sequence[T], encode: Callable[[Sequence[T]], bytes]) -> list[bytes]:
    """``items`` encoded ``CHUNK`` at a time; a slice whose encoding is over the chunk limit is
    halved until it fits (one entry over it cannot be stored: :class:`ValidationError`)."""
    out: list[bytes] = []
    pending = [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]
    while pending:
        part = pending.pop(0)
        blob = _pack_or_none(encode, part) if len(part) > 1 else encode(part)
        if blob is None:
            half = len(part) // 2
            pending[:0] = [part[:half], part[half:]]
        else:
            out.append(blob)
    return out


def _pack_or_none(encode: Callable[[Sequence[T]], bytes], part: Sequence[T]) -> bytes | None:
    """``encode(part)``, or None when it is over the chunk limit."""
    try:
        return encode(part)
    except ValidationError:
        return None


def write_checkpoint(store: Store, state: ReplayState) -> str:
    """Store ``state`` (folded up to ``state.last_id``) as the cache's checkpoint; returns the id
    of the checkpoint in place afterwards.

    The chunks go under a key prefix of their own, then the pointer (``checkpoint``) switches
    to them in a WATCH/MULTI/EXEC transaction, only if the history ``state`` was folded from is
    still whole (else :class:`HistoryCompacted`: a compaction ran under the replay, which may
    have skipped the trimmed events) and the stored checkpoint is older. When it is as new or
    newer (another process got there first), ``state`` is dropped and that checkpoint's id is
    returned: a checkpoint never overwrites a newer one.
    """
    if state.last_id is None:
        raise CacheError(f"cache {store.name}: nothing to checkpoint, the stream is empty")
    keys = store.keys
    server = store.route.get()
    stored = optional_text(server.hget(keys.checkpoint, "id"))
    compacted = optional_text(server.get(keys.compacted))
    check_history(store, state.base_id, compacted)  # before any write; again at the switch
    if stored is not None and stream_id(stored) >= stream_id(state.last_id):
        return stored
    prefix = keys.checkpoint_chunk_prefix(state.last_id, uuid.uuid4().hex[:12])
    nodes = list(state.nodes.values())
    pods = list(state.pods.items())
    images = sorted(set(state.image_sizes) | set(state.image_spread))
    chunks = _chunks(nodes, _node_chunk) + _chunks(pods, _pod_chunk)
    chunks += _chunks(images, lambda names: _image_chunk(names, state)) or [_image_chunk([], state)]
    server.hset(
        keys.checkpoint_parts, prefix, len(chunks)
    )  # registered first: a crash leaves no orphan
    try:
        for index, chunk in enumerate(chunks):  # one small write each: Redis stays responsive
            server.set(f"{prefix}{index}", chunk)
        in_place, previous = _switch(store, keys, state, prefix, len(chunks))
    except BaseException:
        try:
            _delete_parts(server, keys, {prefix: len(chunks)})
        except redis.RedisError as error:  # left in checkpoint:parts: the next one sweeps them
            log.warning("cannot delete the chunks of checkpoint %s: %s", state.last_id, error)
        raise
    if previous is None:
        _delete_parts(server, keys, {prefix: len(chunks)})
        log.info(
            "cache %s: checkpoint %s already in place; %s dropped",
            store.name,
            in_place,
            state.last_id,
        )
        return in_place
    _sweep(server, keys, prefix, state.last_id, previous)
    return in_place


def _switch(
    store: Store, keys: Keys, state: ReplayState, prefix: str, count: int
) -> tuple[str, dict[str, int] | None]:
    """Point ``checkpoint`` at ``prefix`` unless one as new is stored: (the id in place, the
    replaced checkpoint's chunks, or None when nothing was switched)."""
    assert state.last_id is not None
    with store.route.get().pipeline(transaction=True) as pipe:
        for _ in range(SWITCH_ATTEMPTS):
            try:
                pipe.watch(keys.checkpoint, keys.compacted)
                stored = pipe.hmget(keys.checkpoint, "id", "prefix", "chunks")
                check_history(store, state.base_id, optional_text(pipe.get(keys.compacted)))
                stored_id = optional_text(stored[0])
                if stored_id is not None and stream_id(stored_id) >= stream_id(state.last_id):
                    pipe.unwatch()
                    return stored_id, None
                pipe.multi()
                pipe.hset(
                    keys.checkpoint,
                    mapping={
                        "id": state.last_id,
                        "generation": state.generation,
                        "events": state.events,
                        "chunks": count,
                        "prefix": prefix,
                    },
                )
                pipe.execute()
                previous = {as_text(stored[1]): int(as_bytes(stored[2]))} if stored[1] else {}
                return state.last_id, previous
            except redis.WatchError:
                continue
    raise CacheError(
        f"cache {store.name}: the checkpoint kept changing while checkpoint {state.last_id} was "
        f"being switched in ({SWITCH_ATTEMPTS} attempts); run it again"
    )


def _sweep(
    server: redis.Redis,
    keys: Keys,
    current: str,
    current_id: str,
    previous: dict[str, int],
) -> None:
    """Delete the chunks of every checkpoint no newer than the one just switched in (the one it
    replaced, and any a crashed or outrun writer left)."""
    parts = {k.decode(): int(v) for k, v in as_hash(server.hgetall(keys.checkpoint_parts)).items()}
    stale = {
        chunk_prefix: count
        for chunk_prefix, count in parts.items()
        if chunk_prefix != current
        and stream_id(keys.checkpoint_id(chunk_prefix)) <= stream_id(current_id)
    }
    stale.update({k: v for k, v in previous.items() if k != current})
    _delete_parts(server, keys, stale)


def _delete_parts(server: redis.Redis, keys: Keys, parts: dict[str, int]) -> None:
    for chunk_prefix, count in parts.items():
        names = [f"{chunk_prefix}{i}" for i in range(count)]
        for start in range(0, len(names), 500):
            server.delete(*names[start : start + 500])
        server.hdel(keys.checkpoint_parts, chunk_prefix)


def check_history(store: Store, base_id: str | None, compacted: str | None) -> None:
    """Raise :class:`HistoryCompacted` unless the stream still holds every event after
    ``base_id`` (None: the stream's beginning), given where it starts (``compacted``)."""
    if compacted is None:
        return
    if base_id is None or stream_id(compacted) > stream_id(base_id):
        after = f"event {base_id}" if base_id else "the stream's beginning"
        raise HistoryCompacted(
            f"cache {store.name}: the stream was compacted up to {compacted} while a replay "
            f"from {after} was reading it (another process ran compact()), so the replay may "
            "have skipped events; replay again (from the newer checkpoint)"
        )


def read_checkpoint(store: Store) -> ReplayState | None:
    """The stored checkpoint, or None; :class:`CorruptRecord` naming the key of a part that is
    missing, over its limit or not what :func:`write_checkpoint` writes. A checkpoint replaced
    while it is being read (its chunks deleted) is read again from the new pointer."""
    keys = store.keys
    server = store.route.get()
    attempt = 0
    while True:
        meta = as_hash(server.hgetall(keys.checkpoint))
        if not meta:
            return None
        try:
            return _read_checkpoint(server, keys.checkpoint, meta)
        except _ChunkVanished as vanished:
            attempt += 1
            replaced = server.hget(keys.checkpoint, "prefix") != meta.get(b"prefix")
            if not replaced or attempt >= READ_ATTEMPTS:
                raise vanished.error from None


class _ChunkVanished(Exception):
    """A chunk is missing: corrupt, unless the checkpoint was replaced meanwhile."""

    def __init__(self, error: CorruptRecord) -> None:
        super().__init__(str(error))
        self.error = error


def _read_checkpoint(server: redis.Redis, meta_key: str, meta: dict[bytes, bytes]) -> ReplayState:
    try:
        prefix = meta[b"prefix"].decode()
        count = int(meta[b"chunks"])
        state = ReplayState(
            generation=int(meta[b"generation"]),
            last_id=meta[b"id"].decode(),
            events=int(meta[b"events"]),
        )
    except (KeyError, ValueError) as error:
        raise CorruptRecord(f"checkpoint {meta_key}", f"malformed ({error!r})") from None
    state.base_id = state.last_id
    for index in range(count):
        key = f"{prefix}{index}"
        raw = server.get(key)
        if raw is None:
            missing = CorruptRecord(
                f"checkpoint chunk {key}", f"missing (chunk {index} of {count})"
            )
            raise _ChunkVanished(missing)
        try:
            _read_chunk(unpack(as_bytes(raw), f"checkpoint chunk {key}", CHUNK_LIMITS), state)
        except CorruptRecord:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            reason = f"not a checkpoint chunk ({type(error).__name__}: {error})"
            raise CorruptRecord(f"checkpoint chunk {key}", reason) from None
    return state


def _read_chunk(chunk: dict[str, Any], state: ReplayState) -> None:
    for item in chunk.get("nodes", ()):
        state.nodes[item["name"]] = NodeState(
            name=item["name"],
            node=Node.from_dict(item["node"]) if item["node"] else None,
            allocatable=stored(Resource.from_dict(item["allocatable"])),  # older ones kept 0s
            pods=dict.fromkeys(item["pods"]),
            generation=item["generation"],
        )
    for item in chunk.get("pods", ()):
        state.pods[item["uid"]] = PodState(
            blob=item["blob"],
            state=item["state"],
            node=item["node"],
            generation=item["generation"],
            binding_finished=item["finished"],
            deadline_ms=item["deadline"],
            since=item.get("since"),  # absent from checkpoints written before it was kept
        )
    state.image_sizes.update(chunk.get("image_sizes", {}))
    state.image_spread.update(chunk.get("image_spread", {}))


def stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def compact(store: Store, keep: int = 0, before: str | None = None) -> int:
    """Trim the stream before the checkpoint, keeping ``keep`` events before it, and (when
    given) every event at or after the stream id ``before``. Returns how many events were
    removed.

    Never past the stored checkpoint (complete: the pointer moves only once its chunks are
    written), and the trim and the ``compacted`` marker go in one MULTI/EXEC, so a reader that
    takes the marker with its page (:func:`read_events`) sees every trim. With nothing to trim
    the marker is left as it is: a stream never trimmed stays replayable from its start."""
    keys = store.keys
    with store.route.get().pipeline(transaction=True) as pipe:
        for _ in range(SWITCH_ATTEMPTS):
            try:
                pipe.watch(keys.checkpoint, keys.compacted)
                checkpoint_id = optional_text(pipe.hget(keys.checkpoint, "id"))
                if checkpoint_id is None:
                    pipe.unwatch()
                    raise CacheError(
                        f"cache {store.name}: no checkpoint; run checkpoint() before compact()"
                    )
                minimum = checkpoint_id
                if keep > 0:
                    older = pipe.xrevrange(store.keys.events, f"({checkpoint_id}", "-", count=keep)
                    if older:
                        minimum = as_text(older[-1][0])
                if before is not None and stream_id(before) < stream_id(minimum):
                    minimum = before
                current = optional_text(pipe.get(keys.compacted))
                if current is not None and stream_id(current) > stream_id(minimum):
                    minimum = current  # never move the marker back: that history is gone
                if not pipe.xrange(keys.events, "-", f"({minimum}", count=1):
                    # Nothing before it to trim: the marker stays where it is (none: the whole
                    # history is still replayable; found in review, a retention round whose
                    # cut came before the first event made replay refuse it all). No event can
                    # appear before it meanwhile: new ids come after the checkpoint.
                    pipe.unwatch()
                    return 0
                pipe.multi()
                # Exact trimming: redis-py asks for approximate ("~") trimming unless told not.
                pipe.xtrim(store.keys.events, minid=minimum, approximate=False)
                pipe.set(keys.compacted, minimum)
                removed, _ = pipe.execute()
                return int(removed)
            except redis.WatchError:
                continue
    raise CacheError(
        f"cache {store.name}: the checkpoint kept changing during compact() "
        f"({SWITCH_ATTEMPTS} attempts); run it again"
    )


def read_checkpoint_id(store: Store) -> str | None:
    """The stream id of the stored checkpoint (None: there is none)."""
    return optional_text(store.route.get().hget(store.keys.checkpoint, "id"))


def history_start(store: Store) -> str | None:
    """The first stream id still replayable from the stream itself (None: never compacted)."""
    return optional_text(store.client.get(store.keys.compacted))


def read_events(
    store: Store, after: str | None = None, until: str | None = None, page: int | None = None
) -> Iterator[Event]:
    """The events after ``after`` (None: from the beginning) up to ``until`` (included), in
    order, decoded (see :func:`read_pages`)."""
    for entries in read_pages(store, after, until, page):
        for entry_id, raw in entries:
            yield decode_entry(entry_id, raw)


def read_pages(
    store: Store, after: str | None = None, until: str | None = None, page: int | None = None
) -> Iterator[list[tuple[bytes, dict[bytes, bytes]]]]:
    """The stream entries after ``after`` (None: from the beginning) up to ``until`` (included),
    a page at a time, as XRANGE returns them; :class:`HistoryCompacted` when a page finds the
    stream compacted past the last event read (the ``compacted`` marker is read right after
    each page, on the same connection: a trim before the page shows in it; one just after may
    raise needlessly, never the reverse): paging on through XRANGE would silently skip the
    trimmed events. No MULTI, so a Redis at its maxmemory (which refuses every command inside
    MULTI) can still be replayed.

    The next page is asked for as soon as a page arrives, before it is folded, so Redis reads
    it meanwhile (waiting for each page took a seventh of a replay); hence a connection of its
    own, held until the last page."""
    if after is not None and stream_id(after) == LAST_ID:
        return  # nothing can come after the largest id (and XRANGE refuses "(" before it)
    position, low, high = after, f"({after}" if after else "-", until or "+"
    pages = _PageReader(store.route.get(), store.keys.events, store.keys.compacted, high, page)
    try:
        while True:
            entries, compacted = pages.receive(low)
            if len(entries) == pages.count:
                low = f"({as_text(entries[-1][0])}"
                pages.ask_ahead(low)
            check_history(store, position, optional_text(compacted))
            if entries:
                yield entries
            if len(entries) < pages.count:
                return
            position = as_text(entries[-1][0])
    finally:
        pages.close()


class _PageReader:
    """XRANGE pages (with the ``compacted`` marker) on one connection, one asked for ahead.
    A connection error while a page is read resends it once on a new connection (the client's
    ``retry``, as a pipeline would); a reader closed with a reply unread drops its connection,
    which would otherwise hand that reply to the next command."""

    def __init__(
        self, server: redis.Redis, key: str, marker: str, high: str, count: int | None
    ) -> None:
        self.pool = server.connection_pool
        self.connection = self.pool.get_connection()
        self.key, self.marker, self.high, self.count = key, marker, high, count or PAGE
        self.sent: str | None = None  # the ``low`` of the page asked for and not yet read

    def send(self, low: str) -> None:
        commands = [("XRANGE", self.key, low, self.high, "COUNT", self.count), ("GET", self.marker)]
        self.connection.send_packed_command(self.connection.pack_commands(commands))
        self.sent = low

    def ask_ahead(self, low: str) -> None:
        """Send the page from ``low`` now; if the connection fails, :meth:`receive` resends."""
        try:
            self.send(low)
        except (redis.ConnectionError, redis.TimeoutError):
            self.connection.disconnect()
            self.sent = None

    def receive(self, low: str) -> tuple[list[tuple[bytes, dict[bytes, bytes]]], object]:
        """The page from ``low`` (sent now unless it already was) and the marker after it."""

        def exchange() -> tuple[list[tuple[bytes, dict[bytes, bytes]]], object]:
            if self.sent != low:
                self.send(low)
            try:
                entries = self.connection.read_response()
            except redis.ResponseError:
                self.connection.read_response()  # the marker's reply: the connection stays usable
                self.sent = None
                raise
            compacted = self.connection.read_response()
            self.sent = None
            return stream_page(entries), compacted

        def failed(error: Exception) -> None:
            self.connection.disconnect()
            self.sent = None

        result: tuple[list[tuple[bytes, dict[bytes, bytes]]], object]
        result = self.connection.retry.call_with_retry(exchange, failed)
        return result

    def close(self) -> None:
        if self.sent is not None:
            self.connection.disconnect()
        self.pool.release(self.connection)


def read_events_from(store: Store, first: str, until: str | None = None) -> Iterator[Event]:
    """The events from ``first`` (included, if it is an event) on, up to ``until``: as
    :func:`read_events`, for a search that may start exactly where the stream now begins."""
    entries = stream_entries(store.route.get().xrange(store.keys.events, first, first))
    for entry_id, raw in entries:
        yield decode_entry(entry_id, raw)
    yield from read_events(store, first, until)


def replay(
    store: Store, until: str | None = None, progress: Callable[[int], None] | None = None
) -> ReplayState:
    """The state folded from the stream up to and including ``until``: from the stored
    checkpoint when ``until`` is at or after it, else from the stream's start
    (:class:`HistoryCompacted` if that part was trimmed away, or is trimmed while reading)."""
    checkpoint = read_checkpoint(store)
    if (
        checkpoint is not None
        and checkpoint.last_id is not None
        and (until is None or stream_id(until) >= stream_id(checkpoint.last_id))
    ):
        return fold_pages(read_pages(store, checkpoint.last_id, until), checkpoint, progress)
    start = history_start(store)
    if start is not None:  # the stream no longer begins at the beginning
        raise HistoryCompacted(
            f"cache {store.name}: the history before the checkpoint "
            f"{checkpoint.last_id if checkpoint else start} was compacted away; "
            "replay at or after it"
        )
    return fold_pages(read_pages(store, None, until), progress=progress)
