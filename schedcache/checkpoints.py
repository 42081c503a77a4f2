"""Checkpoints and compaction: a stream that grows forever is not operable.

``checkpoint()`` stores the folded state at a stream id, written in chunks (a checkpoint of
150,000 pods never holds Redis long), then switches ``checkpoint`` to it in one command.
``compact(keep)`` trims the stream before the checkpoint (``XTRIM MINID``), keeping ``keep``
events before it, and records where history now starts, so ``replay`` = checkpoint + tail stays
exact and asking for a moment before that is a clear error.

Keys: ``checkpoint`` (hash: id, generation, events, chunks, key prefix of the chunks),
``checkpoint:<id>:<n>`` (msgpack chunks: the nodes, then the pods), ``compacted`` (the id
history starts at).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schedcache.errors import CacheError
from schedcache.events import pack, unpack
from schedcache.models import Node, Resource
from schedcache.replay import NodeState, PodState, ReplayState

if TYPE_CHECKING:
    from schedcache.cache import Cache

CHUNK = 2000  # pods (or nodes) per chunk key


class HistoryCompacted(CacheError):
    """The stream before this point was trimmed away by ``compact()``."""


def _node_chunk(entries: list[NodeState]) -> bytes:
    return pack(
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


def _pod_chunk(items: list[tuple[str, PodState]]) -> bytes:
    return pack(
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


def write_checkpoint(cache: Cache, state: ReplayState) -> str:
    """Store ``state`` (folded up to ``state.last_id``) as the cache's checkpoint."""
    if state.last_id is None:
        raise CacheError(f"cache {cache.name}: nothing to checkpoint, the stream is empty")
    prefix = f"{cache.keys.prefix}checkpoint:{state.last_id}:"
    nodes = list(state.nodes.values())
    pods = list(state.pods.items())
    chunks = [_node_chunk(nodes[i : i + CHUNK]) for i in range(0, len(nodes), CHUNK)]
    chunks += [_pod_chunk(pods[i : i + CHUNK]) for i in range(0, len(pods), CHUNK)]
    chunks.append(
        pack({"image_sizes": state.image_sizes, "image_spread": dict(state.image_spread)})
    )
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
    meta = cache.client.hgetall(f"{cache.keys.prefix}checkpoint")
    if not meta:
        return None
    prefix = meta[b"prefix"].decode()
    state = ReplayState(
        generation=int(meta[b"generation"]),
        last_id=meta[b"id"].decode(),
        events=int(meta[b"events"]),
    )
    for index in range(int(meta[b"chunks"])):
        chunk: dict[str, Any] = unpack(cache.client.get(f"{prefix}{index}"))
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
    return state


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
