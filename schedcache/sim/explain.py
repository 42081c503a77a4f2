"""Why a pod went where it went: each of its claims, against the state the claim ran on.

A claim that was refused writes nothing, so only successful ones (``PodAssumed``) are
explained. For each: the cache just before it (:meth:`Cache.at` of the previous moment), every
node's verdict under kube-scheduler's filters (fits, or upstream's reasons), the chosen node's
free CPU and memory before and after, which replica claimed it, and how the claim ended —
confirmed by the informer (``PodAdded``), forgotten, expired, or removed — after how long.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from schedcache.cache import Cache
from schedcache.model.filters import filter_pod
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Pod
from schedcache.store.events import Event

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


def explain(cache: Cache, uid: str) -> list[Claim]:
    """Every claim of the pod with ``uid``, oldest first (empty if it was never assumed)."""
    events = cache.history(uid)
    claims = []
    for index, event in enumerate(events):
        if event.type != "PodAssumed":
            continue
        pod = Pod.from_dict(event.data).with_node("")
        before = cache.at(_just_before(event.id))  # one replay per claim
        node = event.node or ""
        free = _free(before.node_infos.get(node))
        claim = Claim(
            event_id=event.id,
            replica=event.replica,
            node=node,
            verdicts=[_verdict(pod, info) for info in before.node_info_list],
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


def _verdict(pod: Pod, info: NodeInfo) -> Verdict:
    result = filter_pod(pod, info)
    return Verdict(info.name, result.fits, list(result.reasons))


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
