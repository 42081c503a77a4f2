"""The stored pod record, as the Lua functions write it (see ``lua/_helpers.lua``).

``pod:<uid>`` is one string,
``"<state> <node> <finished> <deadline> <gen> <claimer> <contribution>\\n"``
followed by the msgpack of the pod: one GET or SET per pod where a hash would cost a field each,
which is most of what an ``add_pod`` costs the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgpack

from schedcache.errors import CorruptRecord, ValidationError
from schedcache.model.values import Node, Pod
from schedcache.store.events import OBJECT_LIMITS, Limits, unpack

T = TypeVar("T")


@dataclass(frozen=True)
class PodRecord:
    """A pod as the cache holds it."""

    state: str  # "assumed" or "added"
    node: str
    binding_finished: bool
    deadline_ms: int | None  # set by finish_binding when ttl > 0
    generation: int  # the generation that placed the pod on its node
    # The replica that assumed it: until its binding finished, or for good with a deadline
    # claim (timed_claim), which names its claimer from the start ("" otherwise).
    claimer: str
    contribution: str  # what the pod added to its node, "<field> <amount> ..."
    pod: Pod


def parse_pod_record(raw: bytes, key: str | None = None) -> PodRecord:
    """The record stored under a ``pod:<uid>`` key (named ``key`` in errors, when given);
    :class:`CorruptRecord` if it is not one."""
    header, _, blob = raw.partition(b"\n")
    try:
        words = header.decode().split(" ")
        state, node, finished, deadline, generation, claimer, *contribution = words
        deadline_ms = None if deadline == "-" else int(deadline)
        placed = int(generation)
    except ValueError as error:  # too few fields, not UTF-8, not integers
        raise CorruptRecord(_subject(raw, key), f"malformed header ({error})") from None
    return PodRecord(
        state=state,
        node=node,
        binding_finished=finished == "1",
        deadline_ms=deadline_ms,
        generation=placed,
        claimer="" if claimer == "-" else claimer,
        contribution=" ".join(contribution),
        pod=_decode(blob, raw, key),
    )


def record_generation(raw: bytes) -> int:
    """The generation that placed the pod: unique per placement, so it names this version of
    the pod object (any change to the pod re-places it)."""
    try:
        return int(raw[: raw.index(b"\n")].split(b" ", 5)[4])
    except (ValueError, IndexError) as error:
        raise CorruptRecord(_subject(raw, None), f"malformed header ({error})") from None


def record_pod(raw: bytes) -> Pod:
    """The pod of a stored record; :class:`CorruptRecord` if it is not one."""
    newline = raw.find(b"\n")
    if newline < 0:
        raise CorruptRecord(_subject(raw, None), "malformed header (no newline)")
    return _decode(raw[newline + 1 :], raw, None)


def _decode(blob: bytes, raw: bytes, key: str | None) -> Pod:
    return decode_object(blob, lambda: _subject(raw, key), Pod.from_dict)


def decode_node(blob: bytes, name: str) -> Node:
    """The node object stored in node ``name``'s entry; :class:`CorruptRecord` if it is not one."""
    return decode_object(blob, lambda: f"node {name} (its stored object)", Node.from_dict)


def decode_object(blob: bytes, what: Callable[[], str], build: Callable[[Any], T]) -> T:
    """``build(unpack(blob))``, any failure reported as :class:`CorruptRecord` naming
    ``what()`` (called only then: dumps and replays decode every live pod)."""
    try:
        return build(unpack(blob))
    except CorruptRecord as error:
        raise CorruptRecord(what(), error.reason) from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        reason = f"its msgpack is not what schedcache stores ({type(error).__name__}: {error})"
        raise CorruptRecord(what(), reason) from None


def _subject(raw: bytes, key: str | None) -> str:
    """``pod record <key> (<state> on node <node>, generation <gen>)``: what the header says,
    for a record whose blob cannot be read (the uid is only in the key and in the blob)."""
    name = f"pod record {key}" if key else "pod record"
    words = raw[: raw.find(b"\n")].split(b" ", 5) if b"\n" in raw else []
    if len(words) < 5:
        return f"{name} (no valid header: starts {raw[:24]!r})"
    state, node, generation = (w.decode(errors="replace") for w in (words[0], words[1], words[4]))
    return f"{name} ({state} on node {node}, generation {generation})"


# -- the writer's side of the limits ---------------------------------------------------------
#
# Whatever is written must be readable by ``unpack`` above, or one bad object makes dump,
# snapshots, replay and verify fail for good (its event stays in the stream). The limits are
# ``events.OBJECT_LIMITS``, the reader's own table. Below ``min(max_items, max_str)`` bytes no
# container or string can exceed them, so the hot path is one ``packb`` and a length check;
# msgpack's packer itself refuses what the reader could not read (integers outside
# [-2**63, 2**64), strings that are not valid UTF-8, nesting the reader's stack cannot hold);
# the maps whose keys callers choose are checked for string keys (``strict_map_key``).

# to_dict() keys -> the manifest field they come from, for error messages.
FIELD_PATHS = {
    "uid": "metadata.uid",
    "name": "metadata.name",
    "namespace": "metadata.namespace",
    "labels": "metadata.labels",
    "resource_version": "metadata.resourceVersion",
    "node_name": "spec.nodeName",
    "priority": "spec.priority",
    "pvc_claims": "spec.volumes",
    "host_ports": "spec.containers[*].ports",
    "requests": "spec.containers[*].resources.requests",
    "non_zero_requests": "spec.containers[*].resources.requests",
    "phase": "status.phase",
    "conditions": "status.conditions",
    "allocatable": "status.allocatable",
    "images": "status.images",
    "taints": "spec.taints",
    "unschedulable": "spec.unschedulable",
}
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack stores and reads back
# to_dict() nests 4 deep. msgpack's packer refuses 1,024 levels (its reader reads them all); a
# walk (objects over 64 KiB, or that the packer refused) stops at 500, within Python's stack.
_MAX_DEPTH = 500


def pack_object(obj: dict[str, Any], subject: str, limits: Limits = OBJECT_LIMITS) -> bytes:
    """msgpack of a ``Pod``/``Node.to_dict()``; :class:`ValidationError` naming ``subject`` and
    the field when :func:`unpack` would refuse to read it back. Nothing is sent before."""
    try:
        blob = msgpack.packb(obj, use_bin_type=True)
    except (OverflowError, UnicodeEncodeError, ValueError, TypeError):
        blob = None
    small = blob is not None and len(blob) <= limits.max_items and len(blob) <= limits.max_str
    if blob is not None and small and _string_keys(obj):
        return blob
    subject = subject.encode(errors="backslashreplace").decode()  # printable in any message
    for key, value in obj.items():
        _check(value, FIELD_PATHS.get(key, key), subject, limits, 1)
    if blob is None:  # the packer failed on something _check does not know
        raise ValidationError(subject, "", "cannot be stored as msgpack")
    if len(blob) > limits.max_bytes:
        raise ValidationError(
            subject,
            "",
            f"its msgpack is {len(blob)} bytes, over the {limits.max_bytes}-byte limit of what "
            "schedcache reads back",
        )
    try:  # the reader's own check, for anything the walk above missed
        unpack(blob, subject, limits)
    except CorruptRecord as error:
        raise ValidationError(subject, "", f"would not be readable: {error.reason}") from None
    return blob


def _string_keys(obj: dict[str, Any]) -> bool:
    """The maps whose keys a caller chooses (labels, scalar resource names) have string keys,
    as the reader (``strict_map_key``) demands. ``to_dict()``'s own keys always are."""
    try:  # str.join refuses anything but str, at C speed
        "".join(obj.get("labels", ()))
        for name in ("requests", "non_zero_requests", "allocatable"):
            "".join(obj.get(name, _NONE).get("scalar_resources", ()))
    except TypeError:
        return False
    return True


_NONE: dict[str, Any] = {}


def _check(value: Any, path: str, subject: str, limits: Limits, depth: int) -> None:
    """Raise :class:`ValidationError` at the first value under ``path`` that msgpack cannot
    store or :func:`unpack` would refuse."""
    if depth > _MAX_DEPTH:
        raise ValidationError(subject, path, f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValidationError(subject, path, f"{value} is outside [-2**63, 2**64)")
    elif isinstance(value, str):
        _check_text(value, path, subject, limits)
    elif isinstance(value, bytes | bytearray):
        if len(value) > limits.max_str:
            raise ValidationError(subject, path, f"{len(value)} bytes, over {limits.max_str}")
    elif isinstance(value, dict):
        _check_count(len(value), path, subject, limits)
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(subject, path, f"key {key!r} is not a string")
            _check_text(key, f"{path} (key {key[:40]!r})", subject, limits)
            _check(item, f"{path}.{key}", subject, limits, depth + 1)
    elif isinstance(value, list | tuple):
        _check_count(len(value), path, subject, limits)
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", subject, limits, depth + 1)
    else:
        raise ValidationError(subject, path, f"{type(value).__name__} cannot be stored")


def _check_text(text: str, path: str, subject: str, limits: Limits) -> None:
    try:
        size = len(text.encode())
    except UnicodeEncodeError as error:
        raise ValidationError(
            subject,
            path,
            f"is not valid UTF-8 (lone surrogate {text[error.start]!r} at position {error.start})",
        ) from None
    if size > limits.max_str:
        raise ValidationError(subject, path, f"{size} bytes long, over {limits.max_str}")


def _check_count(count: int, path: str, subject: str, limits: Limits) -> None:
    if count > limits.max_items:
        raise ValidationError(
            subject,
            path,
            f"{count} entries, over the {limits.max_items} that schedcache reads back in one "
            "list or map",
        )
