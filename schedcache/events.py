"""The event stream's schema: what each entry carries and how to read it back.

Every entry has ``type``, ``v`` (the schema version), ``replica`` and, depending on the type,
``uid``, ``node``, ``gen``, ``deadline``, ``state``, ``from``, ``confirmed``, ``ghost``,
``revived``, ``zone`` and ``data``: the msgpack of the pod or node (for removals, the stored
object), so a fold never needs to look anything up.
"""

from __future__ import annotations

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
    data: Any = None
    fields: dict[str, str] = field(default_factory=dict)
    version: int = SCHEMA_VERSION

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
    fields = {key.decode(): value for key, value in raw.items()}
    blob = fields.pop("data", None)
    text = {key: value.decode() for key, value in fields.items()}
    return Event(
        id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        type=text.pop("type", ""),
        replica=text.pop("replica", ""),
        version=int(text.pop("v", SCHEMA_VERSION)),
        data=unpack(blob) if blob else None,
        fields=text,
    )
