"""Turning the Lua functions' error replies into schedcache exceptions.

A function fails with ``<CODE> <detail...>`` (codes listed in each ``lua/*.lua`` header). The
reply carries ids and states; the exception message adds what the caller passed (namespace and
name) and says what was wrong, because it usually ends up in a log line read without context.
"""

from __future__ import annotations

from redis.exceptions import OutOfMemoryError

from schedcache.errors import (
    CacheError,
    CorruptRecord,
    FitConflict,
    InvalidTransition,
    NodeAlreadyRemoved,
    NodeNotFound,
    PodAlreadyExists,
    PodNotAssumed,
    PodNotFound,
    RedisFull,
    ValidationError,
)
from schedcache.model.aggregates import NODE_TOTAL_LIMIT, describe_field

CODES = frozenset(
    {
        "PODEXISTS",
        "PODNOTFOUND",
        "NOTASSUMED",
        "NOTADDED",
        "WRONGNODE",
        "NODENOTFOUND",
        "FITCONFLICT",
        "OVERFLOW",
        "BADARG",
        "CORRUPT",
        "OOM",
    }
)

# The inter-pod rules a claim re-checks (lua/_claims.lua).
_RULES = ("pod-affinity", "pod-anti-affinity", "existing-anti-affinity", "topology-spread")

#: The refusal of a claim decided on a snapshot that saw writes the cache no longer holds
#: (lua/_history.lua); the snapshot's next update rebuilds it (views/snapshot.py).
LOST_WRITES = "lost-writes"

#: A claim's rules were judged on a snapshot older than a node's labels, taints or
#: membership (lua/_changes.lua): decide again on a fresher one.
NODE_CHANGED = "node-changed"

#: A claim's rules read namespace labels (a non-empty namespaceSelector) that changed since
#: its snapshot (lua/sync_namespace.lua): decide again on a fresher one.
NAMESPACE_CHANGED = "namespace-changed"

#: The refusal of a bare fit-checked claim (no rules judged) while pods with required
#: anti-affinity are placed: the client judges on a snapshot and claims again (cache.py).
UNCHECKED = "unchecked"

VERBS = {
    "assume_pod": "assumed",
    "timed_claim": "assumed",
    "add_pod": "added",
    "update_pod": "updated",
    "remove_pod": "removed",
    "forget_pod": "forgotten",
    "finish_binding": "finished binding",
    "remove_node": "removed",
}


def is_cache_error(text: str) -> bool:
    return text.split(" ", 1)[0] in CODES


def translate(command: str, subject: str, error: Exception) -> Exception:
    """The schedcache exception for an error reply to ``command``, or ``error`` itself when it
    is none of schedcache's (redis-py strips the ``OOM`` code into its own class)."""
    if isinstance(error, OutOfMemoryError):
        return error_from_reply(command, subject, "OOM")
    text = str(error)
    if is_cache_error(text):
        return error_from_reply(command, subject, text)
    return error


def error_from_reply(command: str, subject: str, text: str) -> CacheError:
    """The exception for error reply ``text`` of ``command`` about ``subject``."""
    code, *detail = text.split(" ")
    verb = VERBS.get(command, command)
    if command == "gang_claim" and code in ("PODEXISTS", "FITCONFLICT", "OVERFLOW"):
        subject, verb = f"{subject} member with uid {detail[0]}", "assumed"  # store/gang.py
    if code == "PODEXISTS":
        _, state, node = detail
        return PodAlreadyExists(
            f"{subject} is already {state} on node {node}, so it cannot be {verb}"
        )
    if code == "PODNOTFOUND":
        return PodNotFound(f"{subject} is not in the cache, so it cannot be {verb}")
    if code == "NOTASSUMED":
        state = "not in the cache" if detail[1] == "absent" else detail[1]
        return PodNotAssumed(f"{subject} is {state}, not assumed, so it cannot be forgotten")
    if code == "NOTADDED":
        return InvalidTransition(
            f"{subject} is {detail[1]}, so it cannot be updated: add_pod confirms an assumed pod "
            "before it can be updated"
        )
    if code == "WRONGNODE":
        _, state, stored, given = detail
        return InvalidTransition(
            f"{subject} is {state} on node {stored}, but the pod to be {verb} names node {given}; "
            "nothing was changed"
        )
    if code == "NODENOTFOUND":
        name, why = detail
        if why == "ghost":
            return NodeAlreadyRemoved(
                f"node {name} was already removed (only its pods keep it in the cache), so it "
                f"cannot be {verb}"
            )
        return NodeNotFound(f"node {name} is not in the cache, so it cannot be {verb}")
    if code == "FITCONFLICT":
        _, node, reasons = detail
        names = tuple(reasons.split(","))
        if names == ("stale",):
            # (the same reason when its rules' re-check would pass the call's budget: more
            # changed since that snapshot than one call may search; lua/_claims.lua)
            why = (
                f"node {node} changed since the snapshot it was chosen from, or more of the "
                "cache did than one claim may re-check its rules against (decide again on a "
                "fresh snapshot)"
            )
        elif names == (NODE_CHANGED,):
            why = (
                f"a node changed its labels, taints or membership since the snapshot the "
                f"placement on node {node} was judged on (decide again on a fresh one)"
            )
        elif names == (NAMESPACE_CHANGED,):
            why = (
                f"a namespace's labels changed since the snapshot the placement on node {node} "
                "was judged on, and its rules select namespaces by labels (decide again)"
            )
        elif names == ("node-missing",):
            why = f"node {node} is no longer in the cache"
        elif names == (LOST_WRITES,):
            why = (
                "the cache lost writes the snapshot it was chosen from had seen (Redis restarted "
                "from an older state, or failed over to a replica behind): decide again on a "
                "snapshot updated since, which is rebuilt"
            )
        elif names == (UNCHECKED,):
            why = (
                f"pods with required anti-affinity are placed, so their terms toward it on node "
                f"{node} must be judged on a snapshot first (claim with the snapshot's rules)"
            )
        elif names[0] in _RULES:
            why = f"on node {node} it would break its {names[0]} rule (the live cache changed)"
        else:
            why = f"node {node} no longer has room: {', '.join(names)} short"
        return FitConflict(f"{subject} cannot be assumed: {why}", node=node, reasons=names)
    if code == "OVERFLOW":
        _, node, field = detail
        return ValidationError(
            subject,
            "resources",
            # ("about": Lua sums in doubles, so a total just past it may round back under)
            f"would push node {node}'s total {describe_field(field)} past about "
            f"{NODE_TOTAL_LIMIT:,}, the cache's bound on a node's total (int64 less the "
            "margin Lua's doubles need)",
        )
    if code == "CORRUPT":
        key, *reason = detail
        return CorruptRecord(
            f"key {key}",
            f"{' '.join(reason)}; nothing was changed ({subject}, sc_{command}). Another client "
            "wrote it: restore it (or clear the cache) before running commands that touch it",
        )
    if code == "OOM":
        return RedisFull(
            f"{subject}: sc_{command} refused, nothing was changed: the Redis server reached "
            "its maxmemory. Trim the history (schedcache worker compact, or checkpoint and "
            "compact), or give Redis more memory"
        )
    if code == "BADARG":
        return ValidationError(
            subject, " ".join(detail), f"malformed argument to sc_{command} (a schedcache bug)"
        )
    return CacheError(f"{subject}: sc_{command} failed: {text}")
