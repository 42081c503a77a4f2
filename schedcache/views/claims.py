"""Judging a claim's inter-pod rules on a snapshot, and what the claim then carries.

``Cache.assume_pod(check_fit=True)`` (and the reference scheduler and the extender, with the
snapshot they decided on) call :func:`claim_context`: the placement is refused here when it
already breaks a rule on the snapshot, else the claim carries the snapshot's generation and the
nodes each rule read, which ``lua/_claims.lua`` re-checks against the live cache atomically,
and the newest event the snapshot saw, which ``lua/_history.lua`` finds still in the stream.
"""

from __future__ import annotations

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
    info = snap.node_infos.get(pod.node_name)
    if info is None or info.node is None:
        return snap.generation, "", "", snap.incarnation, snap.seen_id
    cycle = Cycle(
        pod,
        list(snap.node_infos.values()),
        anti_holders=snap.have_pods_with_required_anti_affinity_list,
    )
    rule = broken_rule(cycle, info)
    if rule is not None:
        raise FitConflict(
            f"pod {pod.namespace}/{pod.name} (uid {pod.uid}) cannot be assumed: on node "
            f"{pod.node_name} it would break its {rule} rule",
            node=pod.node_name,
            reasons=(rule,),
        )
    return (snap.generation, *claim_reads(cycle, info), snap.incarnation, snap.seen_id)
