"""Judging a pod group's members on one snapshot before their gang claim (store/gang.py).

Each member's inter-pod rules are judged as a single claim's are (:func:`claim_context`); the
gang claim carries the snapshot's generation, incarnation and newest event once, and each
member's reads. Rules between members (one member's anti-affinity toward another) are the
deciding scheduler's to respect: Redis re-checks each member against the live cache, where
the other members are not placed yet (docs/gangs.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from schedcache.model.values import Pod
from schedcache.store.gang import Member
from schedcache.views.claims import claim_context
from schedcache.views.snapshot import Snapshot

# What a gang claim carries of its snapshot: generation, incarnation, newest event seen.
GangContext = tuple[int, str, str]


def gang_context(snap: Snapshot, pods: Sequence[Pod]) -> tuple[GangContext, list[Member]]:
    """The snapshot's part of the claim and each member's ``(pod, reads, domains)``;
    :class:`FitConflict` naming the first member that breaks a rule on ``snap`` already."""
    members: list[Member] = []
    for pod in pods:
        _, reads, domains, _, _ = claim_context(snap, pod)
        members.append((pod, reads, domains))
    return (snap.generation, snap.incarnation, snap.seen_id), members
