"""DefaultPreemption's PostFilter, pure: which node to nominate and which pods to evict there.

Upstream's (pkg/scheduler/framework/preemption and plugins/defaultpreemption), on a snapshot's
node infos and the default profile's filters (registry.filter_pod, inter-pod rules included):

* a pod whose ``preemptionPolicy`` is ``Never`` preempts nothing (PodEligibleToPreemptOthers);
* only nodes whose filters failed *resolvably* are tried (nodesWherePreemptionMightHelp);
* on each (SelectVictimsOnNode) every pod of lower priority is taken off; if the pod then
  fits, they are put back one by one, most important first (higher priority, then earlier
  start), those whose eviction would break a PodDisruptionBudget before the others, and each
  that still lets the pod fit is reprieved; the rest are the victims, most important first;
* among the candidates (pickOneNodeForPreemption): fewest PDB violations, then the lowest
  priority of the most important victim, the smallest sum of priorities, the fewest victims,
  the latest start of the most important victims; then the first in node order.

The reference scheduler acts on the decision (scheduler/preemption.py); the extender's
preempt verb and explain read it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedcache.errors import ValidationError
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.plugins.result import FilterResult, fit_error
from schedcache.model.podterms import LabelSelector
from schedcache.model.values import Pod

#: upstream's messages (preemption.Evaluator) for nodes with no candidate.
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
#: what a pod with ``preemptionPolicy: Never`` gets (PodEligibleToPreemptOthers).
NEVER = "not eligible due to preemptionPolicy=Never."
_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Budget:
    """A policy/v1 PodDisruptionBudget as preemption reads it: pods its selector matches in
    its namespace, how many more may be disrupted (``status.disruptionsAllowed``), and those
    already counted as disrupted (``status.disruptedPods``: evicting them again costs none)."""

    namespace: str
    name: str
    selector: LabelSelector | None
    allowed: int = 0
    disrupted: frozenset[str] = frozenset()

    def covers(self, pod: Pod) -> bool:
        """Upstream: same namespace; a nil or empty selector matches no pod."""
        selector = self.selector
        if pod.namespace != self.namespace or selector is None:
            return False
        if not selector.match_labels and not selector.expressions:
            return False
        return selector.matches(pod.labels)

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> Budget:
        """From a policy/v1 PodDisruptionBudget manifest (what ``sync`` lists and watches)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or "default")
        where = f"poddisruptionbudget {namespace}/{name}"
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
            raise ValidationError(where, "spec", "spec and status must be mappings")
        allowed = status.get("disruptionsAllowed", 0)
        if isinstance(allowed, bool) or not isinstance(allowed, int):
            raise ValidationError(where, "status.disruptionsAllowed", f"{allowed!r} is not an int")
        raw = spec.get("selector")
        selector = None
        if raw is not None:
            labels = raw.get("matchLabels") or {}
            expressions = tuple(
                (e["key"], e["operator"], tuple(e.get("values") or ()))
                for e in raw.get("matchExpressions") or ()
            )
            selector = LabelSelector(tuple(sorted(labels.items())), expressions)
        disrupted = frozenset(status.get("disruptedPods") or {})
        return cls(namespace, name, selector, allowed, disrupted)


@dataclass
class Candidate:
    """A node where evicting ``victims`` lets the pod fit; ``violations``: how many of them
    break a PodDisruptionBudget."""

    node: str
    victims: list[Pod] = field(default_factory=list)
    violations: int = 0


@dataclass
class Decision:
    """The PostFilter's outcome: ``node`` to nominate and its victims, else ``reasons`` (one per
    node, upstream's message) and ``message`` (``preemption: 0/N nodes are available: ...``)."""

    node: str = ""
    victims: list[Pod] = field(default_factory=list)
    violations: int = 0
    reasons: list[str] = field(default_factory=list)
    message: str = ""

    def summary(self) -> str:
        """What the pod's Unschedulable message adds after upstream's FitError."""
        if self.message or not self.node:
            return self.message
        return f"preemption: nominated to node {self.node}, evicting {len(self.victims)} pod(s)."


def start_ms(pod: Pod) -> float:
    """Upstream's GetPodStartTime: ``status.startTime``; a pod not started yet counts as now
    (the latest)."""
    return pod.started_ms or float("inf")


def more_important(a: Pod, b: Pod) -> bool:
    """Upstream's MoreImportantPod: higher priority, then the earlier start."""
    if a.priority != b.priority:
        return a.priority > b.priority
    return start_ms(a) < start_ms(b)


def _importance(pod: Pod) -> tuple[int, float]:
    return (-pod.priority, start_ms(pod))


def split_by_budgets(pods: Sequence[Pod], budgets: Sequence[Budget]) -> tuple[list[Pod], list[Pod]]:
    """Upstream's filterPodsWithPDBViolation: (violating, non-violating), order kept; each
    pod a budget covers takes one of its allowed disruptions (none if already disrupted)."""
    allowed = [budget.allowed for budget in budgets]
    violating: list[Pod] = []
    fine: list[Pod] = []
    for pod in pods:
        breaks = False
        for i, budget in enumerate(budgets):
            if not budget.covers(pod) or pod.name in budget.disrupted:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                breaks = True
        (violating if breaks else fine).append(pod)
    return violating, fine


class _Trial:
    """One node's NodeInfo as pods come and go, judged in a cycle over the whole snapshot."""

    def __init__(self, pod: Pod, info: NodeInfo, infos: Sequence[NodeInfo]) -> None:
        self.pod = pod
        self.info = _copy(info)
        self.others = [i for i in infos if i.name != info.name]
        self.needs_cycle = pod.has_inter_pod_rules or any(
            i.pods_with_required_anti_affinity for i in infos
        )

    def remove(self, victim: Pod) -> None:
        info = self.info
        info.pods = [p for p in info.pods if p.uid != victim.uid]
        info.requested = info.requested.sub(victim.requests)
        info.used_ports = {port for p in info.pods for port in p.host_ports}

    def add(self, pod: Pod) -> None:
        info = self.info
        info.pods = [*info.pods, pod]
        info.requested = info.requested.add(pod.requests)
        info.used_ports |= set(pod.host_ports)

    def verdict(self) -> FilterResult:
        cycle = Cycle(self.pod, [*self.others, self.info]) if self.needs_cycle else None
        return filter_pod(self.pod, self.info, cycle)


def _copy(info: NodeInfo) -> NodeInfo:
    """A plain NodeInfo with the same content (a stored one's pods decoded), free to change."""
    return NodeInfo(
        name=info.name,
        node=info.node,
        pods=list(info.pods),
        requested=info.requested,
        non_zero_requested=info.non_zero_requested,
        allocatable=info.allocatable,
        used_ports=set(info.used_ports),
        image_states=dict(info.image_states),
        pvc_ref_counts=dict(info.pvc_ref_counts),
        generation=info.generation,
    )


def select_victims(
    pod: Pod,
    info: NodeInfo,
    infos: Sequence[NodeInfo],
    budgets: Sequence[Budget] = (),
    nominated: Sequence[Pod] = (),
) -> Candidate | None:
    """Upstream's SelectVictimsOnNode: the victims on ``info`` (None when evicting every pod of
    lower priority would not let ``pod`` fit). ``nominated``: the pods nominated to this node;
    those of equal or higher priority hold their room in every verdict (addNominatedPods) and
    are never victims."""
    trial = _Trial(pod, info, infos)
    lower = [p for p in info.pods if p.priority < pod.priority and p.uid != pod.uid]
    if not lower:
        return None
    for other in nominated:
        if other.priority >= pod.priority and other.uid != pod.uid:
            trial.add(other)
    for victim in lower:
        trial.remove(victim)
    if not trial.verdict().fits:
        return None
    lower.sort(key=_importance)
    violating, fine = split_by_budgets(lower, budgets)
    victims: list[Pod] = []
    violations = 0
    for group, breaks in ((violating, True), (fine, False)):
        for candidate in group:
            trial.add(candidate)
            if not trial.verdict().fits:
                trial.remove(candidate)
                victims.append(candidate)
                violations += breaks
    victims.sort(key=_importance)
    return Candidate(info.name, victims, violations)


def pick_one(candidates: Sequence[Candidate]) -> Candidate | None:
    """Upstream's pickOneNodeForPreemption over the candidates, in their order."""
    if not candidates:
        return None
    for candidate in candidates:
        if not candidate.victims:  # no victim needed: the pod fits (a race); take it
            return candidate

    def key(c: Candidate) -> tuple[int, int, int, int, float]:
        top = c.victims[0].priority
        total = sum(v.priority + _MAX_INT32 + 1 for v in c.victims)
        highest = [v for v in c.victims if v.priority == top]
        earliest = min(start_ms(v) for v in highest)
        return (c.violations, top, total, len(c.victims), -earliest)

    best = min(key(c) for c in candidates)
    return next(c for c in candidates if key(c) == best)


def preempt(
    pod: Pod,
    infos: Sequence[NodeInfo],
    budgets: Sequence[Budget] = (),
    verdicts: Mapping[str, FilterResult] | None = None,
    nominated: Mapping[str, Sequence[Pod]] | None = None,
) -> Decision:
    """DefaultPreemption's PostFilter for ``pod`` over ``infos`` (a snapshot's node infos, in
    its node order). ``verdicts``: each node's filter result of the scheduling attempt (upstream's
    filteredNodesStatuses; judged here when not given; a node absent from it is unresolvable).
    ``nominated``: node -> the pods nominated to it (the cache's nominations), counted in the
    dry run as upstream's addNominatedPods."""
    nominated = nominated or {}
    live = [info for info in infos if info.node is not None]
    if pod.preempt_never:
        return Decision(message=NEVER)
    if verdicts is None:
        cycle = Cycle(pod, list(infos))
        verdicts = {info.name: filter_pod(pod, info, cycle) for info in live}
    candidates: list[Candidate] = []
    reasons: list[str] = []
    # upstream's minCandidateNodesPercentage (10) and minCandidateNodesAbsolute (100)
    wanted = max(len(live) // 10, 100)
    for info in live:
        # upstream's DryRunPreemption stops once it holds enough, one of them breaking no PDB
        if len(candidates) >= wanted and any(not c.violations for c in candidates):
            break
        verdict = verdicts.get(info.name)
        if verdict is None or verdict.unresolvable:
            reasons.append(NOT_HELPFUL)
            continue
        found = select_victims(pod, info, infos, budgets, nominated.get(info.name, ()))
        if found is None:
            reasons.extend(_why_not(pod, info, infos))
            continue
        candidates.append(found)
    best = pick_one(candidates)
    if best is None:
        return Decision(reasons=reasons, message=_message(len(live), reasons))
    return Decision(best.node, best.victims, best.violations)


def _why_not(pod: Pod, info: NodeInfo, infos: Sequence[NodeInfo]) -> tuple[str, ...]:
    """Upstream's per-node status of a node with no candidate: with no pod of lower priority,
    NO_VICTIMS; else the filter that still fails with all of them gone."""
    lower = [p for p in info.pods if p.priority < pod.priority and p.uid != pod.uid]
    if not lower:
        return (NO_VICTIMS,)
    trial = _Trial(pod, info, infos)
    for victim in lower:
        trial.remove(victim)
    return trial.verdict().reasons or (NO_VICTIMS,)


def _message(nodes: int, reasons: Sequence[str]) -> str:
    return f"preemption: {fit_error(nodes, reasons)}"
