"""The stored pod record, as the Lua functions write it (see ``lua/_helpers.lua``).

``pod:<uid>`` is one string,
``"<state> <node> <finished> <deadline> <gen> <claimer> <contribution>\\n"``
followed by the msgpack of the pod: one GET or SET per pod where a hash would cost a field each,
which is most of what an ``add_pod`` costs the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedcache.events import unpack
from schedcache.models import Pod


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


def parse_pod_record(raw: bytes) -> PodRecord:
    header, _, blob = raw.partition(b"\n")
    state, node, finished, deadline, generation, claimer, *contribution = header.decode().split(" ")
    return PodRecord(
        state=state,
        node=node,
        binding_finished=finished == "1",
        deadline_ms=None if deadline == "-" else int(deadline),
        generation=int(generation),
        claimer="" if claimer == "-" else claimer,
        contribution=" ".join(contribution),
        pod=Pod.from_dict(unpack(blob)),
    )


def record_generation(raw: bytes) -> int:
    """The generation that placed the pod: unique per placement, so it names this version of
    the pod object (any change to the pod re-places it)."""
    return int(raw[: raw.index(b"\n")].split(b" ", 5)[4])


def record_pod(raw: bytes) -> Pod:
    return Pod.from_dict(unpack(raw[raw.index(b"\n") + 1 :]))
