"""The gang claim as a command: a pod group's members claimed all or nothing in one
``sc_gang_claim`` call (lua/gang_claim.lua, docs/gangs.md).

Each member travels as ``assume_pod``'s fit-checked claim does (uid, node, blob, contribution,
the nodes its inter-pod rules read); one snapshot decided them all, so ``since``,
``incarnation`` and ``seen`` are the gang's. Redis checks every member, each counting the
members before it on the same node, before it writes any.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from schedcache.errors import CacheError, FitConflict, PodAlreadyExists, ValidationError
from schedcache.model.values import Pod
from schedcache.store.commands import (
    Arg,
    Command,
    _placed_pod_args,
    _rule_args,
    milliseconds,
    pod_subject,
)

#: Members one gang claim carries at most (lua/gang_claim.lua's BOUNDS.MAX_GANG_MEMBERS).
MAX_GANG_MEMBERS = 256
#: Bytes of one gang claim's arguments at most (BOUNDS.MAX_GANG_BYTES).
MAX_GANG_BYTES = 4 * 1048576
#: Contribution fields (resources, host ports, ...) of all members together at most
#: (BOUNDS.MAX_GANG_FIELDS): each is read and written on its node inside the one call.
MAX_GANG_FIELDS = 4096

# One member's claim: the pod on its node, the nodes its rules read, their domains.
Member = tuple[Pod, str, str]


def gang_claim(
    group: str,
    members: Sequence[Member],
    lease_ttl: float = 0.0,
    since: int | None = None,
    incarnation: str = "",
    seen: str = "",
) -> Command:
    """``sc_gang_claim`` of ``members`` (each ``(pod on its node, reads, domains)``) of the pod
    group ``group`` ("<namespace>/<name>"), their rules judged on one snapshot at generation
    ``since`` (None: no rules judged; Redis then refuses the gang as ``unchecked`` while placed
    pods have required anti-affinity). :class:`ValidationError` before anything is sent for a
    malformed member, too many members or bytes."""
    subject = f"pod group {group}"
    if not 1 <= len(members) <= MAX_GANG_MEMBERS:
        raise ValidationError(
            subject, "members", f"{len(members)} members: 1 to {MAX_GANG_MEMBERS} per gang claim"
        )
    args: list[Arg] = [milliseconds(lease_ttl, subject=subject, field="lease_ttl")]
    args += ["" if since is None else since, incarnation, seen, len(members)]
    uids: set[str] = set()
    fields = 0
    for pod, reads, domains in members:
        if not isinstance(pod, Pod):
            raise ValidationError(subject, "members", f"expected Pods, got {type(pod).__name__}")
        if pod.uid in uids:
            raise ValidationError(subject, "members", f"{pod_subject(pod)} is listed twice")
        uids.add(pod.uid)
        member = _placed_pod_args(pod, "assume")
        fields += len(str(member[3]).split()) // 2
        if fields > MAX_GANG_FIELDS:
            raise ValidationError(
                subject,
                "members",
                f"more than {MAX_GANG_FIELDS} contribution fields (requests, host ports, labels) "
                f"together per gang claim",
            )
        if since is not None:
            _rule_args(pod, since, reads, domains, incarnation, seen)
        elif pod.has_inter_pod_rules:
            reads, domains = "", ""
            args[1] = "-"  # rules nobody judged: refused as unchecked (lua/assume_pod.lua)
        args += [*member, reads, domains]
    size = sum(len(a) if isinstance(a, str | bytes) else 20 for a in args)
    if size > MAX_GANG_BYTES:
        raise ValidationError(subject, "members", f"{size} bytes > {MAX_GANG_BYTES} per claim")
    return Command("gang_claim", subject, tuple(args))


_MEMBER = re.compile(r"^pod group \S+ member with uid (\S+)")


def named_member(error: CacheError, members: Sequence[Pod]) -> CacheError:
    """``error`` (a gang claim's refusal, naming a member by uid) naming the member by its
    namespace and name."""
    match = _MEMBER.match(str(error))
    if match is None:
        return error
    uid = match.group(1)
    name = next((pod_subject(p) for p in members if p.uid == uid), f"pod with uid {uid}")
    text = str(error).replace(f"member with uid {uid}", f"member {name}", 1)
    if isinstance(error, FitConflict):
        return FitConflict(text, node=error.node, reasons=error.reasons)
    if isinstance(error, PodAlreadyExists):
        return PodAlreadyExists(text)
    return error
