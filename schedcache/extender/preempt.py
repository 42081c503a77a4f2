"""The extender's preempt verb (``ProcessPreemption``), answered from the cache.

kube-scheduler sends ExtenderPreemptionArgs ``{Pod, NodeNameToVictims, NodeNameToMetaVictims}``
(the candidate nodes its own dry run found, with their victims; meta victims carry uids only,
``nodeCacheCapable: true``) and keeps the nodes the extender answers, with the victims it
answers, in ExtenderPreemptionResult ``{NodeNameToMetaVictims}``. Here each candidate node is
judged again on the cache's snapshot with upstream's SelectVictimsOnNode
(:mod:`schedcache.model.plugins.preemption`): every replica behind the extender sees the same
cluster (other replicas' claims included) and so the same victims; a node the cache does not
know, or where evicting every pod of lower priority would not let the pod fit, is dropped;
``NumPDBViolations`` counts the PodDisruptionBudgets ``sync`` keeps in the cache.
The work is bounded by the request: the nodes it names (its body is capped as filter's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedcache.extender.protocol import ProtocolError, field, pod_arg
from schedcache.model.plugins.preemption import select_victims
from schedcache.model.values import Pod
from schedcache.store.budgets import read_budgets
from schedcache.store.nominations import read_nominated

if TYPE_CHECKING:
    from schedcache.extender.service import Extender


@dataclass(frozen=True)
class PreemptArgs:
    """ExtenderPreemptionArgs: the preemptor and the candidate nodes' names."""

    pod: Pod
    node_names: list[str]


def preempt_args(document: Mapping[str, Any]) -> PreemptArgs:
    """``{Pod, NodeNameToVictims, NodeNameToMetaVictims}``: the nodes are the keys of either
    map (the meta one when both are given, as kube-scheduler sends one of them)."""
    pod, _ = pod_arg(document)
    for name in ("NodeNameToMetaVictims", "NodeNameToVictims"):
        nodes = field(document, name)
        if nodes is None:
            continue
        if not isinstance(nodes, Mapping) or not all(isinstance(k, str) for k in nodes):
            raise ProtocolError(f"{name}: must be a map of node names")
        return PreemptArgs(pod, list(nodes))
    return PreemptArgs(pod, [])


def process_preemption(extender: Extender, args: PreemptArgs) -> dict[str, Any]:
    """ExtenderPreemptionResult ``{NodeNameToMetaVictims}`` for ``args`` on the cache's
    snapshot, brought up to date."""
    answer: dict[str, Any] = {}
    if args.pod.preempt_never:
        return {"NodeNameToMetaVictims": answer}
    budgets = read_budgets(extender.cache.store)  # what sync keeps (upstream's PDB lister)
    nominated = read_nominated(extender.cache.store)  # held by every replica (addNominatedPods)
    with extender.snapshot_lock:
        extender.cache.update_snapshot(extender.snapshot)
        snapshot = extender.snapshot
        infos = snapshot.node_info_list
        for name in args.node_names:
            info = snapshot.node_infos.get(name)
            if info is None or info.node is None:
                continue
            found = select_victims(args.pod, info, infos, budgets, nominated.get(name, ()))
            if found is not None:
                answer[name] = {
                    "Pods": [{"UID": victim.uid} for victim in found.victims],
                    "NumPDBViolations": found.violations,
                }
    return {"NodeNameToMetaVictims": answer}
