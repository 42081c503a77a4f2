"""What a pod's arrival tells the scheduling queue, and what a parked pod waits for.

Upstream's QueueingHints for InterPodAffinity and PodTopologySpread requeue a pending pod when
a pod its required affinity or DoNotSchedule spread selects is added. Lua never decodes a pod,
so both sides are flattened into tokens it compares as strings (docs/queue.md):

* an arriving pod's labels travel in its contribution as ``l:<key>=<value> 1`` (at most
  ``ARRIVAL_LABELS``; a pod with more sends ``l:* 1``, "matches any token"; one with none
  ``l:- 1``); Lua keeps them apart from the node's totals; a claim's re-check compares the
  labels of pods placed since its snapshot with what its rules select
  (:func:`selector_labels`, lua/_claims.lua);
* a parked pod waits for ``<key>=<value>`` tokens, one requirement each of its terms'
  selectors must have (a pod that matches the selector has that label), or ``*`` (any
  arrival) for a selector that pins no value. Namespaces are not compared: waking more pods
  than helped is safe, waking fewer is not.
"""

from __future__ import annotations

import re

from schedcache.model.podterms import LabelSelector
from schedcache.model.values import Pod

# Labels of one pod that Lua compares at most; more send the wildcard (lua/_wakes.lua).
ARRIVAL_LABELS = 16
# Tokens one parked pod waits for at most; more wait for any arrival (sc_queue_retry).
WAKE_TOKENS = 16
ANY = "*"


NONE = "-"  # a pod without labels (a record with no ``l:`` field is an older client's)

# A token Lua compares exactly: one "=", no whitespace (words are space-separated) and no ","
# (a claim's rule joins its tokens with ","). Label values the API server accepts never hold
# those, but the cache does not refuse them: a selector pinning such a value pins nothing Lua
# can compare (a value "web,o=z" split at the "," let a matching pod through).
_COMPARABLE = re.compile(r"[^=\s,]+=[^=\s,]*")


def label_pairs(pod: Pod) -> list[tuple[str, int]]:
    """The ``l:`` fields of ``pod``'s contribution: its labels as Lua compares them."""
    if len(pod.labels) > ARRIVAL_LABELS or any(
        len(f"{key}={value}".split()) != 1 for key, value in pod.labels.items()
    ):  # too many, or one Lua cannot read as one word: "matches any token"
        return [(f"l:{ANY}", 1)]
    if not pod.labels:
        return [(f"l:{NONE}", 1)]
    return [(f"l:{key}={value}", 1) for key, value in sorted(pod.labels.items())]


def selector_labels(selector: LabelSelector | None) -> list[str]:
    """Tokens of which a pod that ``selector`` selects carries at least one (``[]``: it
    selects none; ``["*"]``: no value is pinned)."""
    if selector is None:
        return []  # selects no pod: no arrival can help
    if selector.match_labels:
        key, value = min(selector.match_labels)
        return _comparable([f"{key}={value}"])
    for key, operator, values in selector.expressions:
        if operator == "In":
            return _comparable([f"{key}={value}" for value in values])
    return [ANY]


def _comparable(tokens: list[str]) -> list[str]:
    """``tokens``, or ``["*"]`` when Lua cannot compare one of them exactly."""
    if all(_COMPARABLE.fullmatch(token) for token in tokens):
        return tokens
    return [ANY]


def wake_tokens(pod: Pod) -> tuple[str, ...]:
    """What ``pod``, parked as unschedulable, waits for beyond the events that wake every
    parked pod: the arrival of a pod its required affinity or a DoNotSchedule spread
    constraint selects. Empty when no arrival can help it."""
    tokens: list[str] = []
    for term in pod.pod_affinity:
        tokens += selector_labels(term.selector)
    for constraint in pod.spread_constraints:
        if constraint.when_unsatisfiable == "DoNotSchedule":
            tokens += selector_labels(constraint.selector)
    unique = tuple(dict.fromkeys(tokens))
    if ANY in unique or len(unique) > WAKE_TOKENS:
        return (ANY,)
    return unique
