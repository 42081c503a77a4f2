"""Why a pod went where it went: each of its claims, against the state the claim ran on.

A claim that was refused writes nothing, so only successful ones (``PodAssumed``) are
explained. For each: the cache just before it (:meth:`Cache.at` of the previous moment), every
node's verdict under kube-scheduler's filters (fits, or upstream's reasons), the chosen node's
free CPU and memory before and after, which replica claimed it, and how the claim ended —
confirmed by the informer (``PodAdded``), forgotten, expired, or removed — after how long.

Finding a pod's events must not read a million-event stream: with a checkpoint, the search
starts where the pod's latest stay in the cache began (the checkpoint keeps that event id for
every pod it holds) or, for a pod the checkpoint does not hold, at the checkpoint itself.
``full=True`` searches the whole stream (a pod that came and went before the checkpoint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from schedcache.cache import Cache
from schedcache.errors import CorruptRecord
from schedcache.history.checkpoints import (
    history_start,
    read_checkpoint,
    read_events,
    read_events_from,
    stream_id,
)
from schedcache.history.replay import ReplayState, fold
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Pod
from schedcache.store.events import Event, unpack
from schedcache.store.fetch import gc_paused
from schedcache.views.snapshot import snapshot_of

ENDINGS = {
    "PodAdded": "confirmed",
    "PodForgotten": "forgotten",
    "PodExpired": "expired",
    "PodRemoved": "removed",
}


@dataclass
class Verdict:
    node: str
    fits: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class Claim:
    """One successful claim of the pod, explained."""

    event_id: str
    replica: str
    node: str
    verdicts: list[Verdict]
    free_before: dict[str, int]  # milli_cpu, memory of the chosen node
    free_after: dict[str, int]
    ended: str = "still assumed"  # confirmed, forgotten, expired, removed
    ended_by: str = ""  # the event that ended it
    assumed_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PodHistory:
    """A pod's events, and where the search for them began (None: the stream's start)."""

    uid: str | None
    events: list[Event]
    searched_from: str | None
    # The checkpoint read to decide where to search (None with ``full`` or without one): the
    # claims after it are replayed from it, without reading it again.
    checkpoint: ReplayState | None = field(default=None, repr=False)
    # Where a compacted stream now begins, when the search wanted to start before it.
    compacted_before: str | None = None


def pod_history(cache: Cache, ref: str, *, full: bool = False) -> PodHistory:
    """The events of the pod ``ref`` names: ``NAMESPACE/NAME`` (its latest uid) or a uid.
    Searched from the start of the pod's latest stay if the checkpoint holds the pod, else from
    the checkpoint, else (or with ``full``) from the stream's start; never from before where a
    compacted stream now begins (``compacted_before`` says so)."""
    by_name = _name_of(ref)
    checkpoint = None if full else read_checkpoint(cache.store)
    start = _search_start(checkpoint, ref, by_name) if checkpoint else None
    floor = history_start(cache.store)
    compacted_before = None
    if floor is not None and (start is None or stream_id(start) < stream_id(floor)):
        start, compacted_before = floor, floor
    events: list[Event] = []
    uid = None if by_name else ref
    found = read_events_from(cache.store, start) if start else read_events(cache.store)
    for event in found:
        if not event.uid:
            continue
        newer = by_name is not None and event.uid != uid and pod_name(event) == by_name
        if newer:  # a newer pod of that name: its history replaces the older one's
            uid, events = event.uid, []
        if event.uid == uid:
            events.append(event)
    if uid is None and by_name is not None:  # no event names it: maybe a live pod
        live = cache.filtered_list(lambda p: p.full_name == by_name)
        uid = live[0].uid if live else None
    return PodHistory(uid, events, start, checkpoint, compacted_before)


def _name_of(ref: str) -> str | None:
    """``namespace/name`` for a by-name reference, None for a uid."""
    if "/" not in ref:
        return None
    namespace, name = ref.split("/", 1)
    return f"{namespace or 'default'}/{name}"


def _search_start(checkpoint: ReplayState, ref: str, by_name: str | None) -> str | None:
    if by_name is None:
        record = checkpoint.pods.get(ref)
        return record.since if record is not None else checkpoint.last_id
    starts = [
        record.since for record in checkpoint.pods.values() if _record_name(record.blob) == by_name
    ]
    if not starts:
        return checkpoint.last_id
    if None in starts:  # an older checkpoint does not know when the pod came
        return None
    return min(starts, key=stream_id)  # type: ignore[arg-type]


def _record_name(blob: bytes | None) -> str | None:
    """``namespace/name`` of a checkpointed pod record, without building the Pod."""
    try:
        return payload_name(unpack(blob or b""))
    except CorruptRecord:
        return None


def pod_name(event: Event) -> str | None:
    """``namespace/name`` of a pod event, from its payload (None if it has none)."""
    try:
        return payload_name(event.data)
    except CorruptRecord:
        return None


def payload_name(data: Any) -> str | None:
    """``namespace/name`` of a pod payload (None if it is not one)."""
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        return f"{data.get('namespace') or 'default'}/{data['name']}"
    return None


def explain(cache: Cache, ref: str, *, full: bool = False) -> list[Claim]:
    """Every claim of the pod ``ref`` names (uid or ``NAMESPACE/NAME``), oldest first (empty
    if it was never assumed)."""
    found = pod_history(cache, ref, full=full)
    return explain_events(cache, found.events, found.checkpoint)


def explain_events(
    cache: Cache, events: list[Event], checkpoint: ReplayState | None = None
) -> list[Claim]:
    """The claims among one pod's ``events`` (in stream order), each explained. Claims after
    ``checkpoint`` (a state this call may fold forward) are replayed from it, one claim after
    the other; earlier ones by :meth:`Cache.at`."""
    claims = []
    state = checkpoint
    for index, event in enumerate(events):
        if event.type != "PodAssumed":
            continue
        pod = Pod.from_dict(event.data).with_node("")
        moment = _just_before(event.id)
        if state is not None and stream_id(state.last_id or "0-0") <= stream_id(moment):
            with gc_paused():  # folding creates many objects and no cycles
                state = fold(read_events(cache.store, state.last_id, moment), state)
                before = snapshot_of(state.as_dump())
        else:
            before = cache.at(moment)
        node = event.node or ""
        free = _free(before.node_infos.get(node))
        claim = Claim(
            event_id=event.id,
            replica=event.replica,
            node=node,
            verdicts=_verdicts(pod, before.node_info_list, list(before.node_infos.values())),
            free_before=free,
            # The claim added exactly the pod's requests to the node.
            free_after={
                "milli_cpu": free["milli_cpu"] - pod.requests.milli_cpu,
                "memory": free["memory"] - pod.requests.memory,
            },
        )
        _ending(claim, events[index + 1 :])
        claims.append(claim)
    return claims


def _verdicts(pod: Pod, listed: list[NodeInfo], every: list[NodeInfo]) -> list[Verdict]:
    """Every filter of the default profile on each listed node, judged in one cycle over
    ``every`` node of the cache at that moment (the inter-pod filters read them all)."""
    cycle = Cycle(pod, every)
    verdicts = []
    for info in listed:
        result = filter_pod(pod, info, cycle)
        verdicts.append(Verdict(info.name, result.fits, list(result.reasons)))
    return verdicts


def _free(info: NodeInfo | None) -> dict[str, int]:
    if info is None:
        return {"milli_cpu": 0, "memory": 0}
    return {
        "milli_cpu": info.allocatable.milli_cpu - info.requested.milli_cpu,
        "memory": info.allocatable.memory - info.requested.memory,
    }


def _ending(claim: Claim, later: list[Event]) -> None:
    """The first later event that ended the assumed state."""
    for event in later:
        ended = ENDINGS.get(event.type)
        if ended is not None:
            claim.ended, claim.ended_by = ended, event.id
            claim.assumed_seconds = (_ms(event.id) - _ms(claim.event_id)) / 1000
            return


def _ms(event_id: str) -> int:
    return int(event_id.split("-")[0])


def _just_before(event_id: str) -> str:
    """The largest stream id below ``event_id``: replaying up to it leaves the event out."""
    ms, seq = (int(part) for part in event_id.split("-"))
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{2**64 - 1}"
