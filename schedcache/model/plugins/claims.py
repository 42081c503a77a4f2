"""What a claim carries so that Redis can re-check the pod's inter-pod rules atomically.

A replica judged InterPodAffinity and PodTopologySpread on a snapshot at cache generation G.
Each rule's verdict on the chosen node depends on the pods of a known set of nodes (the
*reads*): the nodes sharing the node's domain for each anti-affinity or affinity term (every
live node when the affinity held by upstream's first-pod-of-a-group rule: a matching pod
anywhere would change it), every node that holds pods with required anti-affinity (existing
pods' terms toward the pod), and every live node for DoNotSchedule spread (each domain's count
and the global minimum). ``lua/_claims.lua`` refuses the claim when any of those nodes changed
after G, or when a node changed after G now holds a pod with required anti-affinity. See
docs/constraints.md for why this is sound and what it costs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any

from schedcache.model.arrivals import ANY, WAKE_TOKENS, selector_labels
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins import interpodaffinity, podtopologyspread
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.podterms import LabelSelector
from schedcache.model.values import Node

#: Rule names as the claim and its FitConflict name them.
POD_AFFINITY = "pod-affinity"
POD_ANTI_AFFINITY = "pod-anti-affinity"
EXISTING_ANTI_AFFINITY = "existing-anti-affinity"
TOPOLOGY_SPREAD = "topology-spread"
#: The reads where a spread's minimum can fall (a pod taken off); refused as TOPOLOGY_SPREAD.
SPREAD_MINIMUM = "topology-spread-min"

HOSTNAME = "kubernetes.io/hostname"

#: A line of a claim's ``domains``: the pod's affinity held by upstream's first-pod rule ("@"
#: starts no label key).
FIRST_POD = "@first-pod"
#: A line of a claim's ``domains``: the namespace generation a verdict that read namespace
#: labels saw ("@namespaces=<n>", lua/_claims.lua).
NAMESPACES = "@namespaces="

_RULE_OF_REASON = {
    interpodaffinity.AFFINITY_RULES: POD_AFFINITY,
    interpodaffinity.ANTI_AFFINITY_RULES: POD_ANTI_AFFINITY,
    interpodaffinity.EXISTING_ANTI_AFFINITY: EXISTING_ANTI_AFFINITY,
    podtopologyspread.CONSTRAINTS_NOT_MATCH: TOPOLOGY_SPREAD,
    podtopologyspread.LABEL_NOT_MATCH: TOPOLOGY_SPREAD,
}


def broken_rule(cycle: Cycle, info: NodeInfo) -> str | None:
    """The inter-pod rule the placement breaks on this snapshot, or None."""
    for plugin in (interpodaffinity.filter, podtopologyspread.filter):
        result = plugin(cycle, info)
        if result is not None:
            return _RULE_OF_REASON[result.reasons[0]]
    return None


def claim_reads(cycle: Cycle, info: NodeInfo) -> tuple[str, str]:
    """``("@<rule> <node> ...", "<key> <node> ...\n...")``: the nodes whose pods the verdict
    on ``info`` read, per rule; and per topology key of the required anti-affinity terms in
    the cluster, the nodes sharing ``info``'s domain (what the existing-anti-affinity check
    reads of a node changed since, lua/_claims.lua)."""
    pod, node = cycle.pod, info.node
    if node is None:
        return "", ""
    memo = _memo(cycle)
    domains: dict[tuple[str, str], list[str]] = memo["domains"]
    parts: list[str] = []
    first_pod = False
    texts: dict[Hashable, str] = memo["joined"]

    def joined(key: Hashable, build: Callable[[], str]) -> str:
        found = texts.get(key)
        if found is None:
            found = texts[key] = build()
        return found

    def domain(key: str) -> list[str]:
        value = node.labels.get(key)
        if value is None:
            return []
        found = domains.get((key, value))
        if found is None:
            if cycle.index is not None:  # the index's members: no pass over the nodes
                found = list(cycle.index.members.get((key, value), ()))
            else:
                found = [name for name, n in _live(cycle) if n.labels.get(key) == value]
            domains[(key, value)] = found
        return found

    if pod.pod_affinity:
        s = interpodaffinity.state(cycle)
        if any(
            s.affinity[(t.topology_key, node.labels.get(t.topology_key, ""))] <= 0
            for t in pod.pod_affinity
        ):
            names = [name for name, _ in _live(cycle)]  # held by the first-pod rule
            first_pod = True
        else:
            names = [n for t in pod.pod_affinity for n in domain(t.topology_key)]
        parts.append(_rule(POD_AFFINITY, names))
    # Per term, with the labels a pod it selects carries one of: a pod placed since that
    # carries none cannot break it (lua/_claims.lua).
    for t in pod.pod_anti_affinity:
        parts.append(_rule(POD_ANTI_AFFINITY + _selected(t.selector), domain(t.topology_key)))
    # Existing pods' terms toward the pod: not read node by node. Lua reads, of each node
    # changed since the snapshot, its terms by topology key (may_repel in lua/_claims.lua);
    # here only the keys those terms use, with the node's domain under each.
    # The hostname always (its domain is one node: nearly free), and the pod's own keys (its
    # group's pods, claimed by other replicas meanwhile, use them): terms under those keys on a
    # node changed since need not refuse the claim.
    # The pod's affinity keys too: a node relabelled since into the target's domain under one
    # of them refuses the claim (lua/_changes.lua).
    keys: set[str] = {
        HOSTNAME,
        *(t.topology_key for t in pod.pod_anti_affinity),
        *(t.topology_key for t in pod.pod_affinity),
    }
    keys.update(memo["anti_keys"])
    constraints = podtopologyspread.hard_constraints(pod)
    if constraints:
        # A count grows only in the node's own domain; the minimum falls only where matching
        # pods leave: those two sets, not the whole cluster.
        # Under a key other than the hostname, a domain travels as one word "~<key>=<value>"
        # (lua/_claims.lua reads the changed nodes' kept labels), not as its every node: at
        # 5,000 nodes in 3 zones a claim named ~3,000 nodes per candidate. Per constraint,
        # with the labels a pod it counts carries one of (a pod placed since that carries none
        # cannot raise the count). (Joined once per cycle, rule and domain: the candidates in
        # one zone share them.)
        for c in constraints:
            rule = TOPOLOGY_SPREAD + _selected(c.selector)
            value = node.labels.get(c.topology_key)
            parts.append(
                joined(
                    (rule, c.topology_key, value),
                    partial(_spread_rule, rule, c.topology_key, value, domain),
                )
            )
        minimum = joined(SPREAD_MINIMUM, lambda: _rule(SPREAD_MINIMUM, _minimum_reads(cycle)))
        if minimum != "@" + SPREAD_MINIMUM:
            parts.append(minimum)
    lines = [
        joined(("line", key, node.labels.get(key)), partial(_line, key, domain))
        for key in sorted(keys)
        if key
    ]
    if _reads_namespace_labels(cycle):
        # Lua refuses the claim when any namespace's labels changed since (lua/_claims.lua).
        lines.append(f"{NAMESPACES}{cycle.index.namespace_generation if cycle.index else 0}")
    if first_pod:
        # A node not live at the snapshot (a placeholder filled in since) may hold a pod that
        # ends the first-pod rule: Lua refuses then (lua/_changes.lua).
        lines.append(FIRST_POD)
    return " ".join(parts), "\n".join(lines)


def _reads_namespace_labels(cycle: Cycle) -> bool:
    """Whether the verdict read namespace labels: a required term of the pod, or an existing
    pod's required anti-affinity term, with a non-empty namespaceSelector (once per cycle)."""
    memo = _memo(cycle)
    found: bool | None = memo.get("namespaces")
    if found is None:
        pod, uid = cycle.pod, cycle.pod.uid
        terms = [*pod.pod_affinity, *pod.pod_anti_affinity]
        if cycle.index is not None:
            terms += [
                t for (_, t), w in cycle.index.anti.items() if len(w.where) > (uid in w.where)
            ]
        else:
            terms += [
                t
                for i in cycle.holders()
                for p in i.pods_with_required_anti_affinity
                if p.uid != uid
                for t in p.pod_anti_affinity
            ]
        found = memo["namespaces"] = any(t.reads_namespace_labels for t in terms)
    return found


def _memo(cycle: Cycle) -> dict[str, Any]:
    """What every claim of the cycle's pod reads alike, whichever node (candidates share it):
    each (key, value)'s nodes once found, existing pods' anti-affinity keys."""
    memo: dict[str, Any] | None = cycle.state.get(_MEMO)
    if memo is None:
        uid = cycle.pod.uid
        index = cycle.index
        memo = cycle.state[_MEMO] = {
            "domains": {},
            "joined": {},
            "anti_keys": {
                t.topology_key
                for i in cycle.holders()  # the nodes with such pods only
                for p in i.pods_with_required_anti_affinity
                if p.uid != uid
                for t in p.pod_anti_affinity
            }
            if index is None
            else {  # the same keys, from the index's terms
                key[1].topology_key
                for key, terms in index.anti.items()
                if len(terms.where) > (uid in terms.where)
            },
        }
    return memo


_MEMO = "claims"


def _domain_word(key: str, value: str | None) -> str | None:
    """A domain as one word of a spread rule's reads (a node lacking the key is judged
    unresolvable on the snapshot already: never sent); None when Lua cannot read it back as
    one (whitespace splits words, "@" starts a rule, "=" ends the key): its nodes are named
    then. A zone "a b" read as "a" let pods placed since in the target's zone pass unseen."""
    if _WORD_KEY.fullmatch(key) and _WORD_VALUE.fullmatch(value or ""):
        return f"~{key}={value or ''}"
    return None


_WORD_KEY = re.compile(r"[^\s=@]+")
_WORD_VALUE = re.compile(r"[^\s@]*")


def _minimum_reads(cycle: Cycle) -> list[str]:
    """Where the spread's minimum can fall (a counted pod taken off): the domains holding
    counted pods as domain words; the nodes holding them when a constraint spreads by
    hostname (a word per node would cost Redis a read each)."""
    state = podtopologyspread.state(cycle)
    if any(c.topology_key == HOSTNAME for c in state.constraints):
        return state.holders
    words = [
        _domain_word(c.topology_key, value)
        for c, counts in zip(state.constraints, state.counts, strict=True)
        for value, count in counts.items()
        if count > 0
    ]
    if None in words:
        return state.holders
    return [word for word in words if word is not None]


def _line(key: str, domain: Callable[[str], list[str]]) -> str:
    return " ".join([key, *domain(key)])


def _live(cycle: Cycle) -> list[tuple[str, Node]]:
    """The live nodes (once per cycle, and only when a rule reads them all)."""
    memo = _memo(cycle)
    found: list[tuple[str, Node]] | None = memo.get("live")
    if found is None:
        found = memo["live"] = [(i.name, n) for i, n in cycle.nodes()]
    return found


def _spread_rule(rule: str, key: str, value: str | None, domain: Callable[[str], list[str]]) -> str:
    """A spread constraint's reads: its hostname domain as the node, any other domain as one
    word."""
    word = None if key == HOSTNAME else _domain_word(key, value)
    return _rule(rule, domain(key) if word is None else [word])


def _selected(selector: LabelSelector | None) -> str:
    """``":<key>=<value>,..."``: the labels a pod ``selector`` selects carries one of, or ""
    when that says nothing (no value pinned, or too many)."""
    labels = selector_labels(selector)
    if not labels or ANY in labels or len(labels) > WAKE_TOKENS:
        return ""
    return ":" + ",".join(labels)


def _rule(name: str, nodes: Sequence[str]) -> str:
    return " ".join(["@" + name, *dict.fromkeys(nodes)])
