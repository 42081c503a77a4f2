"""Deciding a pod group on one snapshot: every member placed on a scratch copy, each counting
the members before it (the reference scheduler's gangs, scheduler/gang.py), and what
``whatif`` shows of the groups waiting for members (docs/gangs.md, docs/whatif.md)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from schedcache.model.plugins.result import fit_error
from schedcache.model.values import Pod
from schedcache.ops.gangwaits import GangWaits
from schedcache.sim.scratch import ScratchSnapshot
from schedcache.store.podgroups import read_pod_group
from schedcache.store.store import HasStore
from schedcache.views.columns import Columns
from schedcache.views.snapshot import Snapshot


def decide(members: list[Pod], snap: Snapshot, percentage: int = 0) -> tuple[list[Pod] | None, str]:
    """Every member on a node of ``snap``, each placed on a scratch copy counting the ones
    before it; (None, why) when one fits nowhere."""
    scratch = scratch_of(snap)
    columns = Columns(percentage)
    decided = []
    for member in members:
        placement = columns.place(member, scratch)
        if not placement.node:
            why = fit_error(placement.nodes, placement.reasons)
            return None, f"member {member.namespace}/{member.name}: {why}"
        scratch.place(member, placement.node)
        decided.append(member.with_node(placement.node))
    return decided, ""


def scratch_of(snap: Snapshot) -> ScratchSnapshot:
    """A copy of ``snap``'s nodes that placing pods on changes (the snapshot stays as it is)."""
    infos = copy.deepcopy(snap.node_infos)

    def same(listed: list[Any]) -> list[Any]:
        return [infos[info.name] for info in listed]

    return ScratchSnapshot(
        generation=snap.generation,
        node_infos=infos,
        node_info_list=same(snap.node_info_list),
        have_pods_with_affinity_list=same(snap.have_pods_with_affinity_list),
        have_pods_with_required_anti_affinity_list=same(
            snap.have_pods_with_required_anti_affinity_list
        ),
        used_pvc_set=set(snap.used_pvc_set),
        image_states=dict(snap.image_states),
        zones=snap.zones,
    )


@dataclass(frozen=True)
class WaitingGroup:
    """A pod group waiting for members (its ``gangwait``), and whether the members seen pending
    would fit, placed together, on a snapshot."""

    group: str
    since_ms: int
    pending: tuple[str, ...]  # "<namespace>/<name>" of the members seen pending
    min_member: int | None  # None: the cache holds no PodGroup of that name
    fits: bool
    why: str = ""  # why not, when it does not fit
    nodes: dict[str, str] = field(default_factory=dict)  # member -> node, when it fits

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "since_ms": self.since_ms,
            "pending": list(self.pending),
            "min_member": self.min_member,
            "fits": self.fits,
            "why": self.why,
            "nodes": dict(self.nodes),
        }


def waiting_groups(cache: HasStore, snap: Snapshot) -> list[WaitingGroup]:
    """Every pod group's wait in the cache, its members decided together on ``snap``."""
    store = cache.store
    found = []
    for wait in GangWaits(cache).all():
        group = read_pod_group(store.client, store.keys, wait.group)
        members = sorted(wait.members, key=lambda m: (m.namespace, m.name))
        decided, why = decide(members, snap) if members else (None, "no member pending")
        found.append(
            WaitingGroup(
                wait.group,
                wait.since_ms,
                tuple(f"{m.namespace}/{m.name}" for m in members),
                None if group is None else group.min_member,
                decided is not None,
                why,
                {f"{m.namespace}/{m.name}": m.node_name for m in decided or []},
            )
        )
    return found
