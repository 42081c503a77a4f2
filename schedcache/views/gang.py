"""Judging a pod group's members on one snapshot before their gang claim (store/gang.py).

Each member's inter-pod rules are judged as a single claim's are (:func:`claim_context`); the
gang claim carries the snapshot's generation, incarnation and newest event once, and each
member's reads, which Redis re-checks against the live cache (lua/gang_claim.lua).

Rules *between* members (one member's required affinity or anti-affinity toward another, an
earlier member's anti-affinity toward a later one, a DoNotSchedule spread among members) are
judged here, not in Redis: each member against the snapshot with the members before it placed
(:func:`with_members`). What they depend on travels inside the claim itself (the members'
labels and nodes), so no other replica can change it between this check and the claim
(docs/gangs.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from schedcache.errors import FitConflict
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.podindex import PodIndex
from schedcache.model.values import Pod
from schedcache.store.gang import Member
from schedcache.views.claims import claim_context
from schedcache.views.snapshot import Snapshot

# What a gang claim carries of its snapshot: generation, incarnation, newest event seen.
GangContext = tuple[int, str, str]


def gang_context(
    snap: Snapshot, pods: Sequence[Pod], group: str = ""
) -> tuple[GangContext, list[Member]]:
    """The snapshot's part of the claim and each member's ``(pod, reads, domains)``, each
    judged on ``snap`` with the members before it placed on their nodes (when any member has
    inter-pod rules); :class:`FitConflict` naming the first member that breaks a rule."""
    judged = any(pod.has_inter_pod_rules for pod in pods)
    members: list[Member] = []
    placed: dict[str, list[Pod]] = {}
    for count, pod in enumerate(pods):
        view = with_members(snap, placed) if judged and placed else snap
        try:
            _, reads, domains, _, _ = claim_context(view, pod)
        except FitConflict as refused:
            if view is snap:
                raise
            raise FitConflict(
                f"pod group {group} member {refused}, counting the {count} members before it",
                node=refused.node,
                reasons=refused.reasons,
            ) from None
        members.append((pod, reads, domains))
        placed.setdefault(pod.node_name, []).append(pod)
    return (snap.generation, snap.incarnation, snap.seen_id), members


def with_members(snap: Snapshot, placed: dict[str, list[Pod]]) -> Snapshot:
    """``snap`` seen with ``placed`` (node -> members) on their nodes: a shallow view (only
    the nodes holding members are copied; the inter-pod rules read names, labels and pods)."""
    infos = dict(snap.node_infos)
    repelling = []
    for name, members in placed.items():
        info = infos.get(name)
        if info is None:
            continue
        infos[name] = NodeInfo(info.name, info.node, [*info.pods, *members])
        if any(m.has_required_anti_affinity for m in members):
            repelling.append(name)
    holders = [infos[i.name] for i in snap.have_pods_with_required_anti_affinity_list]
    known = {i.name for i in holders}
    holders += [infos[name] for name in repelling if name not in known]
    # A pod index of its own (built from these infos when a rule reads it): the snapshot's
    # counts the members before it on their nodes, and is shared with other readers.
    return dataclasses.replace(
        snap,
        node_infos=infos,
        have_pods_with_required_anti_affinity_list=holders,
        pod_index=PodIndex(),
    )
