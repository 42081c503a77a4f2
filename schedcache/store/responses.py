"""Replies of plain Redis commands, as the types they are.

redis-py annotates replies as ``bytes | str`` (which one depends on ``decode_responses``).
schedcache's clients never decode (``connect()`` makes them so; blobs are msgpack), so a reply
is bytes: these narrow it once, where it is read, and fail loudly on a client made with
``decode_responses=True`` instead of corrupting msgpack blobs later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_bytes(value: object) -> bytes:
    """A bulk string reply."""
    if isinstance(value, bytes):
        return value
    raise TypeError(
        f"expected a bytes reply from Redis, got {type(value).__name__}: schedcache needs a "
        "client made with decode_responses=False (connect() makes one)"
    )


def as_text(value: object) -> str:
    """A bulk string reply that holds text (names, stream ids)."""
    return as_bytes(value).decode()


def optional_text(value: object) -> str | None:
    """A bulk string reply, or None for a missing key."""
    return None if value is None else as_text(value)


def as_hash(value: Mapping[Any, Any]) -> dict[bytes, bytes]:
    """An ``HGETALL`` reply."""
    return {as_bytes(k): as_bytes(v) for k, v in value.items()}


def stream_entries(value: object) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """An ``XRANGE``/``XREVRANGE`` reply: ``[(id, fields), ...]``."""
    if not isinstance(value, list):
        return []
    return [(as_bytes(entry_id), as_hash(fields or {})) for entry_id, fields in value]


def stream_page(value: object) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """A raw ``XRANGE`` reply (read without redis-py's response callback): ``[[id, [field,
    value, ...]], ...]`` as ``[(id, fields), ...]``. Only the first id is type-checked (a client
    that decodes fails there): a replay reads a million entries."""
    if not isinstance(value, list) or not value:
        return []
    as_bytes(value[0][0])
    page = []
    for entry_id, flat in value:
        pairs = iter(flat or ())
        page.append((entry_id, dict(zip(pairs, pairs))))  # noqa: B905 (as redis-py pairs them)
    return page
