"""Checkpoints and compaction: a stream that grows forever is not operable.

``checkpoint()`` stores the folded state at a stream id, written in chunks (a checkpoint of
150,000 pods never holds Redis long), then switches ``checkpoint`` to it in one command.
``compact(keep)`` trims the stream before the checkpoint (``XTRIM MINID``), keeping ``keep``
events before it, and records where history now starts, so ``replay`` = checkpoint + tail stays
exact and asking for a moment before that is a clear error.

Keys: ``checkpoint`` (hash: id, generation, events, chunks, key prefix of the chunks),
``checkpoint:<id>:<n>`` (msgpack chunks: the nodes, then the pods, then the image index),
``compacted`` (the id history starts at).

A chunk holds at most ``CHUNK`` entries and at most ``events.MAX_CHUNK`` bytes (a chunk that
would be larger is split); reading one back is bounded by ``events.CHUNK_LIMITS``, and a chunk
that is missing, too large or not what this module writes raises ``CorruptRecord`` naming its
key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from schedcache.errors import CacheError, CorruptRecord, ValidationError
from schedcache.events import CHUNK_LIMITS, pack, unpack
from schedcache.models import Node, Resource
from schedcache.replay import NodeState, PodState, ReplayState

if TYPE_CHECKING:
    from schedcache.cache import Cache

CHUNK = 2000  # pods (or nodes, or images) per chunk key
T = TypeVar("T")


class HistoryCompacted(CacheError):
    """The stream before this point was trimmed away by ``compact()``."""


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


def write_checkpoint(cache: Cache, state: ReplayState) -> str:
    """Store ``state`` (folded up to ``state.last_id``) as the cache's checkpoint."""
    if state.last_id is None:
        raise CacheError(f"cache {cache.name}: nothing to checkpoint, the stream is empty")
    prefix = f"{cache.keys.prefix}checkpoint:{state.last_id}:"
    nodes = list(state.nodes.values())
    pods = list(state.pods.items())
    images = sorted(set(state.image_sizes) | set(state.image_spread))
    chunks = _chunks(nodes, _node_chunk) + _chunks(pods, _pod_chunk)
    chunks += _chunks(images, lambda names: _image_chunk(names, state)) or [_image_chunk([], state)]
    for index, chunk in enumerate(chunks):  # one small write each: Redis stays responsive
        cache.client.set(f"{prefix}{index}", chunk)
    previous = cache.client.hgetall(f"{cache.keys.prefix}checkpoint")
    cache.client.hset(
        f"{cache.keys.prefix}checkpoint",
        mapping={
            "id": state.last_id,
            "generation": state.generation,
            "events": state.events,
            "chunks": len(chunks),
            "prefix": prefix,
        },
    )
    if previous:  # the old checkpoint's chunks are no longer needed
        old_prefix = previous[b"prefix"].decode()
        if old_prefix != prefix:
            cache.client.delete(*(f"{old_prefix}{i}" for i in range(int(previous[b"chunks"]))))
    return state.last_id


def read_checkpoint(cache: Cache) -> ReplayState | None:
    """The stored checkpoint, or None; :class:`CorruptRecord` naming the key of a part that is
    missing, over its limit or not what :func:`write_checkpoint` writes."""
    meta_key = f"{cache.keys.prefix}checkpoint"
    meta = cache.client.hgetall(meta_key)
    if not meta:
        return None
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
    for index in range(count):
        key = f"{prefix}{index}"
        raw = cache.client.get(key)
        if raw is None:
            raise CorruptRecord(f"checkpoint chunk {key}", f"missing (chunk {index} of {count})")
        try:
            _read_chunk(unpack(raw, f"checkpoint chunk {key}", CHUNK_LIMITS), state)
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
            allocatable=Resource.from_dict(item["allocatable"]),
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
        )
    state.image_sizes.update(chunk.get("image_sizes", {}))
    state.image_spread.update(chunk.get("image_spread", {}))


def stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def compact(cache: Cache, keep: int = 0) -> int:
    """Trim the stream before the checkpoint, keeping ``keep`` events before it. Returns how
    many events were removed."""
    meta = cache.client.hgetall(f"{cache.keys.prefix}checkpoint")
    if not meta:
        raise CacheError(f"cache {cache.name}: no checkpoint; run checkpoint() before compact()")
    checkpoint_id = meta[b"id"].decode()
    minimum = checkpoint_id
    if keep > 0:
        before = cache.client.xrevrange(cache.keys.events, f"({checkpoint_id}", "-", count=keep)
        if before:
            minimum = before[-1][0].decode()
    # Exact trimming: redis-py asks for approximate ("~") trimming unless told otherwise.
    removed = int(cache.client.xtrim(cache.keys.events, minid=minimum, approximate=False))
    cache.client.set(f"{cache.keys.prefix}compacted", minimum)
    return removed


def history_start(cache: Cache) -> str | None:
    """The first stream id still replayable from the stream itself (None: never compacted)."""
    value = cache.client.get(f"{cache.keys.prefix}compacted")
    return value.decode() if value else None
