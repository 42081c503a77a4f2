"""The event stream's schema: what each entry carries and how to read it back.

Every entry has ``type``, ``v`` (the schema version), ``replica`` and, depending on the type,
``uid``, ``node``, ``gen``, ``deadline``, ``state``, ``from``, ``confirmed``, ``ghost``,
``revived``, ``zone`` and ``data``: the msgpack of the pod or node (for removals, the stored
object), so a fold never needs to look anything up.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from schedcache.errors import CorruptRecord, ValidationError
from schedcache.store.keys import (
    SCHEMA_VERSION as SCHEMA_VERSION,  # one version for keys and events
)

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


# -- msgpack, both ways, with limits ------------------------------------------------------
#
# Nothing read back from Redis is unpickled or evaluated: every blob is msgpack, decoded here
# with limits (a hand-edited or hostile key must not exhaust memory), and refused with
# CorruptRecord when it is anything else. The writers refuse what the readers would refuse.


@dataclass(frozen=True)
class Limits:
    """What one msgpack blob may hold: its size in bytes, the longest string or binary in it,
    and the most entries of any one array or map in it."""

    max_bytes: int
    max_str: int
    max_items: int


# One pod or node object: a pod record's blob, a node entry's blob, an event's ``data``.
MAX_PAYLOAD = 1 << 20  # 1 MiB: Pod/Node.to_dict() keep only what scheduling needs (~1 KiB)
MAX_ITEMS = 1 << 16  # entries of one list or map (labels, containers, images, ...)
OBJECT_LIMITS = Limits(max_bytes=MAX_PAYLOAD, max_str=MAX_PAYLOAD, max_items=MAX_ITEMS)

# One checkpoint chunk (``checkpoint:<id>:<n>``): up to 2,000 nodes or pods with their blobs,
# or a slice of the image index. The writer splits chunks so that none is larger.
MAX_CHUNK = 32 << 20  # 32 MiB
MAX_CHUNK_ITEMS = 1 << 20  # a ghost node's pod list, the pods of one chunk, ...
CHUNK_LIMITS = Limits(max_bytes=MAX_CHUNK, max_str=MAX_PAYLOAD, max_items=MAX_CHUNK_ITEMS)


def pack(obj: Mapping[str, Any], limits: Limits = OBJECT_LIMITS) -> bytes:
    """msgpack of ``obj``; refused (:class:`ValidationError`) when :func:`unpack` would refuse
    to read it back."""
    blob = msgpack.packb(obj, use_bin_type=True)
    if len(blob) > limits.max_bytes:
        raise ValidationError(
            _subject(obj),
            "",
            f"its msgpack is {len(blob)} bytes, over the {limits.max_bytes}-byte limit of "
            "what schedcache reads back",
        )
    return blob


def _subject(obj: Mapping[str, Any]) -> str:
    """``pod <namespace>/<name> (uid <uid>)`` or ``node <name>`` from a ``to_dict()``."""
    if "namespace" in obj:
        return f"pod {obj.get('namespace')}/{obj.get('name')} (uid {obj.get('uid')})"
    return f"node {obj['name']}" if "name" in obj else "object"


def unpack(blob: bytes, what: str = "stored msgpack value", limits: Limits = OBJECT_LIMITS) -> Any:
    """Decode one msgpack blob read from Redis, within ``limits``.

    Only msgpack's plain types come back (no ext types, no timestamps, string map keys, no
    trailing bytes); anything else, or anything over a limit, raises :class:`CorruptRecord`
    naming ``what``.
    """
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise CorruptRecord(what, f"expected a msgpack blob, found {type(blob).__name__}")
    if len(blob) > limits.max_bytes:
        raise CorruptRecord(
            what, f"{len(blob)} bytes, over the {limits.max_bytes}-byte limit; not decoded"
        )
    try:
        return msgpack.unpackb(
            blob,
            raw=False,
            strict_map_key=True,
            max_str_len=limits.max_str,
            max_bin_len=limits.max_str,
            max_array_len=limits.max_items,
            max_map_len=limits.max_items,
            max_ext_len=0,
        )
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        reason = str(error) or type(error).__name__
        raise CorruptRecord(what, f"not a valid schedcache msgpack value ({reason})") from None


@dataclass(frozen=True)
class Event:
    """One stream entry: ``data`` is the decoded payload, ``fields`` the other entry fields."""

    id: str
    type: str
    replica: str
    blob: bytes | None = field(default=None, repr=False)  # the msgpack payload, as stored
    fields: dict[str, str] = field(default_factory=dict)
    version: int = SCHEMA_VERSION
    # The entry's fields as read (kept by decode_entry, so a fold of decoded events reads
    # them without encoding them again).
    raw: Mapping[bytes, bytes] | None = field(default=None, repr=False, compare=False)

    def entry_fields(self) -> Mapping[bytes, bytes]:
        """The stream entry's fields as XRANGE returns them: what a fold reads."""
        if self.raw is not None:
            return self.raw
        raw = {key.encode(): value.encode() for key, value in self.fields.items()}
        raw |= {b"type": self.type.encode(), b"replica": self.replica.encode()}
        raw[b"v"] = str(self.version).encode()
        if self.blob is not None:
            raw[b"data"] = self.blob
        return raw

    @functools.cached_property
    def data(self) -> Any:
        """The decoded payload (decoded on first use: a replay needs few of them);
        :class:`CorruptRecord` naming the event if it is not a valid payload."""
        if not self.blob:
            return None
        try:
            return unpack(self.blob)
        except CorruptRecord as error:
            raise CorruptRecord(self.subject, error.reason) from None

    @property
    def subject(self) -> str:
        """``event <id> (<type>, uid <uid>, node <node>)``, for messages."""
        about = ", ".join(
            [self.type or "no type"]
            + [f"{k} {self.fields[k]}" for k in ("uid", "node") if k in self.fields]
        )
        return f"event {self.id} ({about})"

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
    """An :class:`Event` from one XRANGE entry (:class:`CorruptRecord` if it is not one)."""
    entry = entry_id.decode(errors="replace") if isinstance(entry_id, bytes) else entry_id
    blob = None
    text: dict[str, str] = {}
    try:
        for key, value in raw.items():
            if key == b"data":
                blob = value
            else:
                text[key.decode()] = value.decode()
        version = int(text.pop("v", SCHEMA_VERSION))
    except (UnicodeDecodeError, ValueError) as error:
        raise CorruptRecord(f"event {entry}", f"malformed stream entry ({error})") from None
    return Event(
        id=entry,
        type=text.pop("type", ""),
        replica=text.pop("replica", ""),
        version=version,
        blob=blob,
        fields=text,
        raw=raw,
    )


_STREAM_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")  # ASCII digits only


def normal_stream_id(value: object) -> str | None:
    """``<ms>-<seq>`` for an event id as ``schedcache events`` prints it (``<ms>`` alone is
    ``<ms>-0``); None for anything else."""
    match = _STREAM_ID.fullmatch(value) if isinstance(value, str) else None
    if match:
        milliseconds, sequence = int(match[1]), int(match[2] or 0)
        if milliseconds < 2**64 and sequence < 2**64:
            return f"{milliseconds}-{sequence}"
    return None


def checked_stream_id(value: object, subject: str, field: str) -> str:
    """``value`` as a normal event id, or :class:`ValidationError` naming ``field``."""
    normal = normal_stream_id(value)
    if normal is None:
        raise ValidationError(
            subject,
            field,
            f"{value!r} is not an event id (<milliseconds>-<sequence>, as `schedcache events` "
            "prints them)",
        )
    return normal
