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

from schedcache.errors import CorruptRecord
from schedcache.events import unpack
from schedcache.models import Node, Pod

T = TypeVar("T")


@dataclass(frozen=True)
class PodRecord:
    """A pod as the cache holds it."""

    state: str  # "assumed" or "added"
    node: str
    binding_finished: bool
    deadline_ms: int | None  # set by finish_binding when ttl > 0
    generation: int  # the generation that placed the pod on its node
    claimer: str  # the replica that assumed it, until its binding finished ("" otherwise)
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
    return decode_object(blob, _subject(raw, key), Pod.from_dict)


def decode_node(blob: bytes, name: str) -> Node:
    """The node object stored in node ``name``'s entry; :class:`CorruptRecord` if it is not one."""
    return decode_object(blob, f"node {name} (its stored object)", Node.from_dict)


def decode_object(blob: bytes, what: str, build: Callable[[Any], T]) -> T:
    """``build(unpack(blob))``, any failure reported as :class:`CorruptRecord` naming ``what``."""
    try:
        return build(unpack(blob))
    except CorruptRecord as error:
        raise CorruptRecord(what, error.reason) from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        reason = f"its msgpack is not what schedcache stores ({type(error).__name__}: {error})"
        raise CorruptRecord(what, reason) from None


def _subject(raw: bytes, key: str | None) -> str:
    """``pod record <key> (<state> on node <node>, generation <gen>)``: what the header says,
    for a record whose blob cannot be read (the uid is only in the key and in the blob)."""
    name = f"pod record {key}" if key else "pod record"
    words = raw[: raw.find(b"\n")].split(b" ", 5) if b"\n" in raw else []
    if len(words) < 5:
        return f"{name} (no valid header: starts {raw[:24]!r})"
    state, node, generation = (w.decode(errors="replace") for w in (words[0], words[1], words[4]))
    return f"{name} ({state} on node {node}, generation {generation})"
