"""The event stream's schema: what each entry carries and how to read it back.

Every entry has ``type``, ``v`` (the schema version), ``replica`` and, depending on the type,
``uid``, ``node``, ``gen``, ``deadline``, ``state``, ``from``, ``confirmed``, ``ghost``,
``revived``, ``zone`` and ``data``: the msgpack of the pod or node (for removals, the stored
object), so a fold never needs to look anything up.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

SCHEMA_VERSION = 1

POD_EVENTS = frozenset(
    {
        "PodAssumed",
        "BindingFinished",
        "PodForgotten",
        "PodAdded",
        "PodUpdated",
        "PodRemoved",
        "PodExpired",
    }
)
NODE_EVENTS = frozenset({"NodeAdded", "NodeUpdated", "NodeRemoved"})

# Payloads come from our own writers, but a hand-edited key must not exhaust memory.
MAX_PAYLOAD = 1 << 20


def pack(obj: Mapping[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(blob: bytes) -> Any:
    if len(blob) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(blob)} bytes exceeds the {MAX_PAYLOAD}-byte limit")
    return msgpack.unpackb(blob, raw=False, max_bin_len=MAX_PAYLOAD, max_str_len=MAX_PAYLOAD)


@dataclass(frozen=True)
class Event:
    """One stream entry: ``data`` is the decoded payload, ``fields`` the other entry fields."""

    id: str
    type: str
    replica: str
    blob: bytes | None = field(default=None, repr=False)  # the msgpack payload, as stored
    fields: dict[str, str] = field(default_factory=dict)
    version: int = SCHEMA_VERSION

    @functools.cached_property
    def data(self) -> Any:
        """The decoded payload (decoded on first use: a replay needs few of them)."""
        return unpack(self.blob) if self.blob else None

    @property
    def uid(self) -> str | None:
        return self.fields.get("uid")

    @property
    def node(self) -> str | None:
        return self.fields.get("node")

    @property
    def generation(self) -> int | None:
        gen = self.fields.get("gen")
        return int(gen) if gen else None


def decode_entry(entry_id: bytes | str, raw: Mapping[bytes, bytes]) -> Event:
    """An :class:`Event` from one XRANGE entry."""
    blob = None
    text: dict[str, str] = {}
    for key, value in raw.items():
        if key == b"data":
            blob = value
        else:
            text[key.decode()] = value.decode()
    return Event(
        id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        type=text.pop("type", ""),
        replica=text.pop("replica", ""),
        version=int(text.pop("v", SCHEMA_VERSION)),
        blob=blob,
        fields=text,
    )
