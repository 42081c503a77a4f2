"""What another placement policy would have done with the cluster exactly as it was at a moment.

The cache is replayed to the moment (checkpoint and tail, as :meth:`Cache.at`); each policy
places the pending pods, one at a time in their order, on its own scratch copy of that state
(:class:`ScratchSnapshot`), and what happened is placed on another copy the same way: the pods
that were claimed after the moment, each on the node of its first claim. The cluster is held as
it was: nodes that joined, changed or left later, and pods that were deleted later, play no
part, so the comparison is of placements alone. A policy's answer must pass kube-scheduler's
filters on its copy (the cache's ``check_fit`` would refuse it otherwise); a node that does
not is counted unschedulable, with the reasons.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from schedcache.cache import Cache
from schedcache.errors import PolicyError
from schedcache.history.checkpoints import read_events
from schedcache.model.nodeinfo import Dump, NodeInfo
from schedcache.model.plugins.preemption import preempt
from schedcache.model.plugins.registry import cycle_for, filter_pod
from schedcache.model.plugins.result import FilterResult, fit_error
from schedcache.model.values import Pod
from schedcache.sim.policies import Policy, checked
from schedcache.sim.scratch import ScratchSnapshot
from schedcache.views.columns import Columns, columnar

ACTUAL = "actual"
# Pods per policy whose "chose no node" reason carries the filters' summary (the text output
# lists the first 20 unschedulable pods; each summary is a filter pass over every node).
SUMMARISED = 20


@dataclass
class Usage:
    """Requested over allocatable, for CPU and memory (0 where nothing is allocatable)."""

    cpu: float
    memory: float
    pods: int

    @classmethod
    def of(cls, infos: list[NodeInfo]) -> Usage:
        cpu = sum(i.allocatable.milli_cpu for i in infos)
        memory = sum(i.allocatable.memory for i in infos)
        return cls(
            cpu=sum(i.requested.milli_cpu for i in infos) / cpu if cpu else 0.0,
            memory=sum(i.requested.memory for i in infos) / memory if memory else 0.0,
            pods=sum(len(i.pods) for i in infos),
        )


@dataclass
class Utilisation:
    """Per node and per zone (zones by ``zone_key``), and the whole cluster."""

    nodes: dict[str, Usage]
    zones: dict[str, Usage]
    cluster: Usage

    @classmethod
    def of(cls, snapshot: ScratchSnapshot) -> Utilisation:
        infos = snapshot.node_infos
        return cls(
            nodes={i.name: Usage.of([i]) for i in snapshot.node_info_list},
            zones={
                zone_name(zone): Usage.of([infos[name] for name in names])
                for zone, names in snapshot.zones.items()
            },
            cluster=Usage.of(snapshot.node_info_list),
        )

    @property
    def nodes_in_use(self) -> int:
        return sum(1 for usage in self.nodes.values() if usage.pods)


def zone_name(zone_key: str) -> str:
    """``region/zone`` (or either alone) of a node-tree zone key; ``(no zone)`` for none."""
    region, _, zone = zone_key.partition(":\x00:")
    return "/".join(part for part in (region, zone) if part) or "(no zone)"


@dataclass
class Outcome:
    """Where one policy (or what happened: ``actual``) put each pod, and the result."""

    policy: str
    placements: dict[str, str | None]  # uid -> node, None: not placed
    reasons: dict[str, str]  # uid -> why it was not placed
    after: Utilisation
    seconds: float
    # uid -> what DefaultPreemption would choose for a pod placed nowhere: {"node", "victims"}
    # (the decision only: no victim is removed from the scratch; docs/whatif.md)
    preemptions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def placed(self) -> int:
        return sum(1 for node in self.placements.values() if node is not None)

    @property
    def unschedulable(self) -> list[str]:
        return [uid for uid, node in self.placements.items() if node is None]


@dataclass
class WhatIf:
    """The moment, the pods, the state before, and one outcome per policy (``actual`` first)."""

    at: str
    pods: dict[str, str]  # uid -> namespace/name, in placement order
    before: Utilisation
    outcomes: list[Outcome] = field(default_factory=list)

    def outcome(self, policy: str) -> Outcome:
        return next(o for o in self.outcomes if o.policy == policy)

    def differing(self, policy: str, other: str = ACTUAL) -> list[str]:
        """The uids ``policy`` placed elsewhere than ``other`` did (or placed where it did not)."""
        mine, theirs = self.outcome(policy).placements, self.outcome(other).placements
        return [uid for uid in self.pods if mine.get(uid) != theirs.get(uid)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def what_if(
    cache: Cache,
    at: str,
    policies: Mapping[str, Policy],
    pods: list[Pod] | None = None,
    until: str | None = None,
) -> WhatIf:
    """Replay to ``at``, then place ``pods`` (default: the pods claimed after ``at``, up to
    ``until`` if given, in their order) with each policy, and as they were placed;
    :class:`PolicyError` if a policy fails."""
    state = cache.replay(until=at)
    claims = claims_after(cache, at, until)
    if pods is None:
        pods = [pod for pod, _ in claims.values()]
    pods = list({pod.uid: pod.with_node("") for pod in pods}.values())  # each uid once
    result = WhatIf(
        at=state.last_id or at,
        pods={pod.uid: pod.full_name for pod in pods},
        before=Utilisation.of(ScratchSnapshot.of(fresh_copy(state), indexed=False)),
    )
    actual = {uid: node for uid, (_, node) in claims.items()}
    result.outcomes.append(_as_happened(state, pods, actual))
    for name, policy in policies.items():
        result.outcomes.append(_run(name, checked(name, policy), state, pods))
    return result


def claims_after(cache: Cache, at: str, until: str | None = None) -> dict[str, tuple[Pod, str]]:
    """Each pod claimed after ``at`` (up to ``until``, included), by uid in the order of its
    first claim then, with the node of that claim."""
    claims: dict[str, tuple[Pod, str]] = {}
    for event in read_events(cache.store, at, until):
        if event.type == "PodAssumed" and event.uid and event.uid not in claims:
            claims[event.uid] = (Pod.from_dict(event.data), event.node or "")
    return claims


def fresh_copy(state: Dump) -> Dump:
    """A copy of ``state`` whose node infos a scratch snapshot may change (pods and resource
    values are immutable and shared)."""
    nodes = {
        name: replace(
            info,
            pods=list(info.pods),
            used_ports=set(info.used_ports),
            image_states=dict(info.image_states),
            pvc_ref_counts=dict(info.pvc_ref_counts),
        )
        for name, info in state.nodes.items()
    }
    return Dump(nodes, set(state.assumed_pods), state.generation, state.last_id)


def _as_happened(state: Dump, pods: list[Pod], actual: dict[str, str]) -> Outcome:
    """Each pod on the node it was claimed on, fitting or not (it happened)."""
    started = time.perf_counter()
    scratch = ScratchSnapshot.of(fresh_copy(state), indexed=False)
    placements: dict[str, str | None] = {}
    reasons: dict[str, str] = {}
    for pod in pods:
        node = actual.get(pod.uid)
        placements[pod.uid] = node
        if node is None:
            reasons[pod.uid] = f"not claimed after {state.last_id}"
        elif node in scratch.node_infos:
            scratch.place(pod, node)
        else:
            placements[pod.uid] = None
            reasons[pod.uid] = f"claimed on {node}, not a node at {state.last_id}"
    return Outcome(ACTUAL, placements, reasons, Utilisation.of(scratch), _since(started))


def _run(name: str, policy: Policy, state: Dump, pods: list[Pod]) -> Outcome:
    started = time.perf_counter()
    scratch = ScratchSnapshot.of(fresh_copy(state))
    placements: dict[str, str | None] = {}
    reasons: dict[str, str] = {}
    preemptions: dict[str, dict[str, Any]] = {}
    names = list(scratch.node_infos)
    summarised = 0
    columns = Columns(percentage=100)  # built on the first summary, then kept up with place()
    for pod in pods:
        node = policy(scratch, pod)
        _check_untouched(name, scratch, names, node, pod)
        placements[pod.uid] = None
        if node is None:
            summarised += 1
            reasons[pod.uid] = none_chosen(name, pod, scratch, summarised <= SUMMARISED, columns)
            if summarised <= SUMMARISED:
                preemptions[pod.uid] = would_preempt(pod, scratch)
            continue
        info = scratch.node_infos.get(node)
        if info is None:
            raise PolicyError(
                f"policy {name!r} chose {node!r} for pod {pod.full_name}: not a node at "
                f"{state.last_id}"
            )
        holders = scratch.have_pods_with_required_anti_affinity_list
        verdict = filter_pod(pod, info, cycle_for(pod, scratch.node_infos, holders))
        if not verdict.fits:
            reasons[pod.uid] = f"chose {node}: {'; '.join(verdict.reasons)}"
            continue
        scratch.place(pod, node)
        placements[pod.uid] = node
    if pods:
        _check_untouched(name, scratch, names, None, pods[-1], everywhere=True)
    return Outcome(name, placements, reasons, Utilisation.of(scratch), _since(started), preemptions)


def would_preempt(pod: Pod, scratch: ScratchSnapshot) -> dict[str, Any]:
    """What upstream's DefaultPreemption would choose for ``pod`` on the scratch (no
    PodDisruptionBudgets: the replayed moment has none): the node and its victims
    (``namespace/name``), or no node and upstream's PostFilter message."""
    decision = preempt(pod, scratch.node_info_list)
    if not decision.node:
        return {"node": None, "victims": [], "message": decision.message}
    return {"node": decision.node, "victims": [v.full_name for v in decision.victims]}


def none_chosen(
    policy: str,
    pod: Pod,
    scratch: ScratchSnapshot,
    summarise: bool,
    columns: Columns | None = None,
) -> str:
    """Why ``policy`` placed ``pod`` nowhere: it chose no node; with ``summarise``, what
    kube-scheduler's filters say of every node, in upstream's summary form (``0/3 nodes are
    available: 3 Insufficient cpu.``; nodes that fit mean the policy declined them). A filter
    pass over every node costs, so only the first SUMMARISED such pods of a policy get it;
    with ``columns`` (the scratch's), a plain pod's pass is on them and only the nodes that
    refuse it are judged one by one."""
    chose = f"policy {policy!r} chose no node"
    if not summarise:
        return chose
    infos = scratch.node_info_list
    holders = scratch.have_pods_with_required_anti_affinity_list
    verdicts: list[FilterResult | None]
    if columns is not None and columnar(pod) and not holders:
        # On the columns (no inter-pod filter can refuse the pod: cycle_for's None too)
        verdicts = columns.filter_names(pod, scratch, [info.name for info in infos])
    else:
        cycle = cycle_for(pod, scratch.node_infos, holders)
        verdicts = [filter_pod(pod, info, cycle) for info in infos]
    refusals: Counter[str] = Counter()
    fit = 0
    for verdict in verdicts:
        assert verdict is not None  # every name is one of the scratch's nodes
        fit += verdict.fits
        refusals.update(verdict.reasons)
    return f"{chose}; {fit_error(len(infos), refusals.elements(), available=fit)}"


def _check_untouched(
    policy: str,
    scratch: ScratchSnapshot,
    names: list[str],
    node: str | None,
    pod: Pod,
    everywhere: bool = False,
) -> None:
    """A policy reads the scratch snapshot; one that changed it would have the what-if count
    on a cluster that never was: :class:`PolicyError`. Checked after every call, cheaply (the
    same number of nodes; the chosen node's sums still the what-if's own), and on every node
    once the policy is done (``everywhere``)."""
    infos, index = scratch.node_infos, scratch.index
    changed = len(infos) != len(names) or len(scratch.node_info_list) != len(names)
    checked = names if everywhere else [node] if node is not None and node in infos else []
    if index is not None and not changed:
        for name in checked:
            info, at = infos.get(name), index.position[name]
            own = (int(index.cpu[at]), int(index.mem[at]), int(index.pods[at]))
            if (
                info is None
                or (info.requested.milli_cpu, info.requested.memory, len(info.pods)) != own
            ):
                changed = True
                break
    if changed:
        raise PolicyError(
            f"policy {policy!r} changed the snapshot it was given (deciding pod "
            f"{pod.full_name}); a policy must only read it"
        )


def _since(started: float) -> float:
    return time.perf_counter() - started
