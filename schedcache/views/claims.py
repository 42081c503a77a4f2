"""Judging a claim's inter-pod rules on a snapshot, and what the claim then carries.

``Cache.assume_pod(check_fit=True)`` (and the reference scheduler and the extender, with the
snapshot they decided on) call :func:`claim_context`: the placement is refused here when it
already breaks a rule on the snapshot, else the claim carries the snapshot's generation and the
nodes each rule read, which ``lua/_claims.lua`` re-checks against the live cache atomically,
and the newest event the snapshot saw, which ``lua/_history.lua`` finds still in the stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schedcache.errors import FitConflict
from schedcache.model.plugins.claims import broken_rule, claim_reads
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.values import Pod
from schedcache.views.snapshot import Snapshot

# What a claim carries of the snapshot it was decided on: (generation, reads, domains,
# incarnation, the id of the newest event it saw).
ClaimRules = tuple[int, str, str, str, str]


def claim_context(snap: Snapshot, pod: Pod) -> ClaimRules:
    """``(generation, reads, domains, incarnation, seen)`` for ``assume_pod``;
    :class:`FitConflict` naming the rule when ``pod`` on ``pod.node_name`` breaks one on
    ``snap`` already. ``seen`` lets Redis refuse the claim when it lost writes the snapshot
    saw (lua/_history.lua)."""
    return _judged(snap, pod, pod.node_name, None)[0]


def _judged(
    snap: Snapshot, pod: Pod, node: str, cycle: Cycle | None
) -> tuple[ClaimRules, Cycle | None]:
    """:func:`claim_context` of ``pod`` on ``node``, and the cycle it judged with (built once
    per pod: it does not depend on the node)."""
    info = snap.node_infos.get(node)
    if info is None or info.node is None:
        return (snap.generation, "", "", snap.incarnation, snap.seen_id), cycle
    if cycle is None:
        cycle = Cycle(
            pod,
            list(snap.node_infos.values()),
            anti_holders=snap.have_pods_with_required_anti_affinity_list,
            index=snap.pod_index.sync(snap.node_infos),
        )
    rule = broken_rule(cycle, info)
    if rule is not None:
        raise FitConflict(
            f"pod {pod.namespace}/{pod.name} (uid {pod.uid}) cannot be assumed: on node "
            f"{node} it would break its {rule} rule",
            node=node,
            reasons=(rule,),
        )
    return (snap.generation, *claim_reads(cycle, info), snap.incarnation, snap.seen_id), cycle


def ranked_contexts(
    snap: Snapshot, pod: Pod, candidates: Sequence[str]
) -> tuple[Pod, ClaimRules, list[tuple[str, str, str]]]:
    """A claim of ``pod`` on ``pod.node_name`` or, failing that, on ``candidates`` in order:
    the pod on the first node whose rules hold on ``snap``, its :func:`claim_context`, and
    ``(node, reads, domains)`` of each later one that holds too (what ``assume_pod`` sends as
    candidates). :class:`FitConflict` of the first when every one breaks a rule on ``snap``."""
    first: FitConflict | None = None
    cycle: Cycle | None = None
    kept: list[tuple[str, ClaimRules]] = []
    for node in dict.fromkeys((pod.node_name, *candidates)):
        try:
            context, cycle = _judged(snap, pod, node, cycle)
        except FitConflict as conflict:
            first = first or conflict
            continue
        kept.append((node, context))
    if not kept:
        assert first is not None
        raise first
    (node, context), rest = kept[0], kept[1:]
    return pod.with_node(node), context, [(n, c[1], c[2]) for n, c in rest]


def taken_node(reply: Any, pod: Pod) -> str:
    """The node an ``assume_pod`` reply says the claim took: ``[generation, node]`` when it
    carried candidates, else the pod's own."""
    if isinstance(reply, list | tuple):
        node = reply[1]
        return node.decode() if isinstance(node, bytes) else str(node)
    return pod.node_name
