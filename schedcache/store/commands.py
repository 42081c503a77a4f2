"""Each cache command as data: the Lua function to call, its arguments, and who it is about.

``Cache`` runs one :class:`Command` per round trip; ``CommandBatch`` sends many in one
``sc_batch`` call. Building the arguments here, once, keeps both paths identical. Arguments that
Lua would only reject later (a pod without a node, a negative ttl) are refused here with a
:class:`ValidationError` before anything is sent.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack

from schedcache.errors import ValidationError
from schedcache.model.aggregates import (
    contribution_string,
    flatten,
    image_pairs,
    resource_pairs,
    spec_digest,
)
from schedcache.model.arrivals import ANY, WAKE_TOKENS
from schedcache.model.selectors import is_dns_subdomain
from schedcache.model.values import MAX_NODE_IMAGES, MAX_NODE_RESOURCES, Node, Pod
from schedcache.store.events import OBJECT_LIMITS
from schedcache.store.records import pack_object

Arg = str | int | bytes
# An event's id in the stream ("<ms>-<seq>"), as lua/_history.lua bounds it.
STREAM_ID = re.compile(r"[0-9]{1,15}-[0-9]{1,19}")


class _CommandIds:
    """Command ids: 64 random bits drawn once per process, then a counter (the id of a call
    Redis must recognise when it is sent again; unique as one ``secrets.token_hex(8)`` per
    call, without a system call each). A forked child draws its own prefix."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = secrets.token_hex(8)
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):x}"


_IDS = _CommandIds()


def new_command_id() -> str:
    """A fresh command id: a retry of the same call reuses it, so Redis applies it once."""
    return _IDS.next()


# Commands Redis may apply twice without harm: a feeder's change carries its object's
# resourceVersion, and the function drops one at or below the version it last applied for that
# object (lua/_versions.lua: "repeated", nothing written). They go without their id
# (:func:`sent_id`), so Redis remembers no reply for them: the reply's encoding and its SET were
# ~39,000 instructions of a confirmation's ~388,000 (docs/performance.md, h40confirm; issue 40).
# A resend after a lost reply is then answered "dropped repeated", not the first outcome.
VERSIONED = frozenset({"sync_pod", "sync_node", "sync_podgroup", "sync_budget", "sync_namespace"})


@dataclass(frozen=True)
class Command:
    """One call of ``sc_<name>``; ``subject`` names the pod or node in error messages; ``id``
    makes retries of this call idempotent (see ``lua/_command_ids.lua``)."""

    name: str
    subject: str
    args: tuple[Arg, ...]
    id: str = field(default_factory=new_command_id)
    # time.monotonic() when the command (and its id) was made: no send of it is earlier, so a
    # resend is refused once this is older than retry.MAX_RETRY_WINDOW (ids are forgotten),
    # unless it goes without its id (sent_with_id: a versioned one, refused only past
    # retry.MAX_VERSIONED_RESEND, under its delete tombstones' life).
    created: float = field(default_factory=time.monotonic, compare=False, repr=False)


def sent_with_id(commands: Iterable[Command]) -> bool:
    """Whether one command, or one ``sc_batch`` group of them, goes with an id (so Redis
    remembers its outcome, for ``retry.COMMAND_ID_TTL_MS``): not when every one is versioned
    (:data:`VERSIONED`). The one place that decides it: :func:`sent_id`, the group's id
    (``batch.derive_group_id``) and the resend cap (``retry.too_late_to_resend``) ask here."""
    return not all(command.name in VERSIONED for command in commands)


def sent_id(command: Command) -> str:
    """The command id sent with ``command``: none for a versioned one (:data:`VERSIONED`)."""
    return command.id if sent_with_id((command,)) else ""


def pod_subject(pod: Pod) -> str:
    return f"pod {pod.namespace}/{pod.name} (uid {pod.uid})"


def pod_ref(pod: Pod | str) -> tuple[str, str]:
    """The uid and the name for messages of a Pod or a uid (:class:`ValidationError` for
    anything else)."""
    if isinstance(pod, Pod):
        return pod.uid, pod_subject(pod)
    if isinstance(pod, str) and pod:
        return pod, f"pod with uid {pod}"
    raise ValidationError("pod", "metadata.uid", f"expected a Pod or a uid, got {pod!r}")


def node_subject(name: str) -> str:
    return f"node {name}"


# Upper bounds of times, in seconds. Lua adds them (deadline = now + ttl, lease expiry) as
# doubles and prints the sum with %.14g, so every sum must stay below 1e14 ms to be exact and to
# fit the int64 that Redis and the pod record hold: MAX_NOW + MAX_TTL = 1.1e13 ms leaves 9x room.
MAX_NOW = 10.0**10  # seconds since the epoch: the year 2286
MAX_TTL = 10.0**9  # about 31 years: longer is "never", which ttl=0 already says
MAX_TIMEOUT = 3600.0  # a socket or WAIT timeout longer than an hour is a hung client


def seconds(value: object, *, subject: str, field: str, maximum: float) -> float:
    """``value`` checked as a finite number of seconds in ``[0, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(subject, field, f"{value!r} is not a number of seconds")
    if not 0 <= value <= maximum:
        raise ValidationError(
            subject, field, f"{value!r} is outside 0..{maximum:g} seconds (see commands.MAX_*)"
        )
    return value


def milliseconds(value: float | None, *, subject: str, field: str, maximum: float = MAX_TTL) -> str:
    """Seconds to integer milliseconds as Lua wants them; ``None`` -> "" (the server's clock)."""
    if value is None:
        return ""
    return str(round(seconds(value, subject=subject, field=field, maximum=maximum) * 1000))


def _token(value: str, subject: str, field: str) -> str:
    """Uids and node names become key names and reply words: no whitespace, not empty."""
    if not isinstance(value, str) or not value or len(value.split()) != 1 or value != value.strip():
        raise ValidationError(subject, field, f"{value!r} must be non-empty without whitespace")
    return value


def _placed_pod_args(pod: Pod, verb: str) -> tuple[Arg, ...]:
    uid, node = _pod_key_args(pod)
    subject = pod_subject(pod)
    if not node:
        raise ValidationError(subject, "spec.nodeName", f"is required to {verb} a pod")
    return (uid, node, pack_object(pod.to_dict(), subject), contribution_string(pod))


def _pod_key_args(pod: Pod) -> tuple[str, str]:
    if not isinstance(pod, Pod):
        raise ValidationError("pod", "", f"expected a schedcache.Pod, got {type(pod).__name__}")
    subject = pod_subject(pod)
    uid = _token(pod.uid, subject, "metadata.uid")
    if pod.node_name:
        _token(pod.node_name, subject, "spec.nodeName")
    return uid, pod.node_name


def assume_pod(
    pod: Pod,
    check_fit: bool = False,
    expect_generation: int | None = None,
    lease_ttl: float = 0.0,
    since: int | None = None,
    reads: str = "",
    domains: str = "",
    incarnation: str = "",
    seen: str = "",
    candidates: Sequence[tuple[str, str, str]] = (),
) -> Command:
    """``check_fit``: the live node must still have room (fine-grained claim);
    ``expect_generation``: the node must not have changed since that generation (strict);
    ``lease_ttl``: take or renew the replica's lease (seconds) together with the claim;
    ``since``/``reads``/``domains``/``incarnation``: with ``check_fit``, the inter-pod rules
    judged on a snapshot at generation ``since`` (of that incarnation of the cache) still hold
    (``schedcache.views.claims``); ``seen``: the id of the newest event that snapshot saw,
    the claim refused (``lost-writes``) when the cache no longer holds it (lua/_history.lua);
    ``candidates``: with ``check_fit``, up to :data:`MAX_EXTRA_CANDIDATES` more nodes, best
    first, each ``(node, reads, domains)`` judged on the same snapshot: Redis takes the first
    of ``pod.node_name`` and these that passes every check (lua/_pick.lua) and answers
    ``[generation, node]``."""
    args = _placed_pod_args(pod, "assume")
    if candidates:
        if not check_fit or expect_generation is not None:
            raise ValidationError(
                pod_subject(pod), "candidates", "need check_fit (and no expect_generation)"
            )
        extra = _candidate_args(pod, cast(bytes, args[2]), candidates)
        lease = milliseconds(lease_ttl, subject=pod_subject(pod), field="lease_ttl")
        rules: tuple[Arg, ...] = (UNJUDGED if pod.has_inter_pod_rules else "", "", "", "")
        if since is not None:
            rules = _rule_args(pod, since, reads, domains, incarnation, seen)
        rules += ("",) * (5 - len(rules))  # `seen`'s place kept: the candidates follow it
        return Command(
            "assume_pod", pod_subject(pod), (*args, fit_check(pod), "", lease, *rules, *extra)
        )
    if check_fit and expect_generation is not None:
        raise ValidationError(
            pod_subject(pod), "check_fit", "choose check_fit or expect_generation, not both"
        )
    lease = milliseconds(lease_ttl, subject=pod_subject(pod), field="lease_ttl")
    if expect_generation is not None:
        if isinstance(expect_generation, bool) or not isinstance(expect_generation, int):
            raise ValidationError(
                pod_subject(pod), "expect_generation", f"{expect_generation!r} is not an integer"
            )
        args += ("generation", expect_generation, lease)
    elif check_fit:
        args += (fit_check(pod), "", lease)
        if since is not None:
            args += _rule_args(pod, since, reads, domains, incarnation, seen)
        elif pod.has_inter_pod_rules:
            # Rules of its own that nobody judged (a batch's claim without rules=): Redis
            # refuses it as unchecked and the batch claims it again, judged.
            args += (UNJUDGED,)
    elif lease != "0":
        args += ("", "", lease)
    # else the function's defaults (no check, no lease) stand: each argument costs Redis ~1,500
    # instructions, 5 % of a plain claim for these three.
    return Command("assume_pod", pod_subject(pod), args)


def fit_check(pod: Pod) -> str:
    """A fit-checked claim's check argument: ``fit:<priority>`` for a pod of non-zero priority,
    so Redis knows which nominated pods' room it may take (lua/_nominations.lua)."""
    return f"fit:{pod.priority}" if pod.priority else "fit"


#: Ranked candidates a claim may carry after its own node (lua/_pick.lua).
MAX_EXTRA_CANDIDATES = 7


def candidate_names(pod: Pod, candidates: Sequence[str]) -> tuple[str, ...]:
    """A claim's ``candidates`` as given to ``assume_pod``: node names, never one string (its
    characters would be taken for as many nodes: found in review)."""
    if isinstance(candidates, str | bytes):
        raise ValidationError(
            pod_subject(pod), "candidates", "a sequence of node names, not one string"
        )
    return tuple(candidates)


def _candidate_args(
    pod: Pod, blob: bytes, candidates: Sequence[tuple[str, str, str]]
) -> tuple[Arg, ...]:
    """``count, shared prefix length, (node, blob rest, reads, domains) * count``: each blob is
    the pod placed on that node; only what differs from ``blob`` travels. ``Pod.to_dict`` puts
    ``node_name`` last, so each candidate's blob is ``blob`` with its last bytes (the node's
    name) swapped: no pod is packed again, and only the names' differing tails travel."""
    subject = pod_subject(pod)
    if len(candidates) > MAX_EXTRA_CANDIDATES:
        raise ValidationError(
            subject, "candidates", f"{len(candidates)} > {MAX_EXTRA_CANDIDATES} more nodes"
        )
    own = msgpack.packb(pod.node_name)
    if not blob.endswith(NODE_NAME_KEY + own):  # (Pod.to_dict's order makes the splice right)
        raise RuntimeError(f"pod {subject}: its msgpack does not end with its node's name")
    head = blob[: len(blob) - len(own)]
    names: list[bytes] = []
    for i, candidate in enumerate(candidates):
        if not isinstance(candidate, tuple) or len(candidate) != 3:
            raise ValidationError(subject, f"candidates[{i}]", "expected (node, reads, domains)")
        node, reads, domains = candidate
        _token(node, subject, f"candidates[{i}]")
        if (reads, domains) != ("", ""):  # (nothing to check in two empty strings)
            _rule_args(pod, 0, reads, domains, "")  # the same checks as the claim's own
        try:
            packed = msgpack.packb(node)
        except UnicodeEncodeError:  # not UTF-8: refused as the pod on that node would be
            packed = b""
        if not packed or len(head) + len(packed) > OBJECT_LIMITS.max_bytes:
            pack_object(pod.with_node(node).to_dict(), subject)  # raises ValidationError
        names.append(packed)
    shared = _shared_prefix(own, names)
    out: list[Arg] = [len(candidates), len(head) + shared]
    for (node, reads, domains), packed in zip(candidates, names, strict=True):
        out += [node, packed[shared:], reads, domains]
    return tuple(out)


#: The msgpack of the key the pod's blob ends with, before its node's name (Pod.to_dict).
NODE_NAME_KEY = msgpack.packb("node_name")


def _shared_prefix(first: bytes, others: Sequence[bytes]) -> int:
    """The length of the bytes every one of ``others`` starts with, as ``first`` does."""
    shared = len(first)
    for other in others:
        low, high = 0, min(shared, len(other))
        while low < high:  # a binary search: slices compare in C
            middle = (low + high + 1) // 2
            if other[:middle] == first[:middle]:
                low = middle
            else:
                high = middle - 1
        shared = low
    return shared


#: ``since`` of a fit-checked claim whose pod's own rules were not judged (lua/assume_pod.lua).
UNJUDGED = "-"
# A claim's reads and domains together at most (BOUNDS.MAX_READS_BYTES, lua/_claims.lua, with
# the two characters Lua pads them with): a claim at 5,000 nodes that read every node carries
# ~105 KB, at 10,000 nodes ~220 KB.
MAX_READS_BYTES = 1024 * 1024 - 2


def _rule_args(
    pod: Pod, since: int, reads: str, domains: str, incarnation: str, seen: str = ""
) -> tuple[Arg, ...]:
    """The inter-pod rule arguments, checked as lua/_claims.lua and lua/_history.lua read
    them (``seen`` sent only when given: each argument costs Redis)."""
    subject = pod_subject(pod)
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise ValidationError(subject, "since", f"{since!r} is not a cache generation")
    for name, text in (("reads", reads), ("domains", domains), ("incarnation", incarnation)):
        if not isinstance(text, str):
            raise ValidationError(subject, name, f"expected a string, got {type(text).__name__}")
    if reads and (not reads.startswith("@") or any(c in reads for c in "\r\n\t")):
        raise ValidationError(subject, "reads", 'must be "@<rule> <node> ..." on one line')
    if len(reads) + len(domains) > MAX_READS_BYTES // 4 and (  # (encoded only when long)
        len(reads.encode()) + len(domains.encode()) > MAX_READS_BYTES
    ):
        raise ValidationError(
            subject, "reads", f"reads and domains pass {MAX_READS_BYTES} bytes together"
        )
    if not seen:
        return (since, reads, domains, incarnation)
    if not isinstance(seen, str) or not STREAM_ID.fullmatch(seen):
        raise ValidationError(subject, "seen", f"{seen!r} is not an event id (<ms>-<seq>)")
    return (since, reads, domains, incarnation, seen)


def add_pod(pod: Pod) -> Command:
    return Command("add_pod", pod_subject(pod), _placed_pod_args(pod, "add"))


def update_pod(old: Pod, new: Pod) -> Command:
    args = _placed_pod_args(new, "update")
    _pod_key_args(old)
    if old.uid != new.uid:
        raise ValidationError(
            pod_subject(new),
            "metadata.uid",
            f"differs from the old pod's uid {old.uid}: a pod recreated under the same name is "
            "a remove_pod of the old one and an add_pod of the new one",
        )
    return Command("update_pod", pod_subject(new), args)


def remove_pod(pod: Pod) -> Command:
    return Command("remove_pod", pod_subject(pod), _pod_key_args(pod))


def remove_pod_by_uid(uid: str) -> Command:
    """remove_pod knowing only the uid (the stored record names the node)."""
    subject = f"pod with uid {uid}"
    return Command("remove_pod", subject, (_token(uid, subject, "metadata.uid"), ""))


def forget_pod(pod: Pod) -> Command:
    return Command("forget_pod", pod_subject(pod), _pod_key_args(pod))


def timed_claim(claim: Command, ttl: float | None) -> Command:
    """``claim`` (an :func:`assume_pod` command) with the claim's deadline, ``ttl`` seconds
    from Redis' clock, set in the same call (``lua/timed_claim.lua``): what
    ``assume_pod`` then ``finish_binding(pod, None, ttl)`` write, in one round trip.
    ``None``: the claim as it is."""
    if ttl is None:
        return claim
    if claim.name != "assume_pod":
        raise ValidationError(claim.subject, "claim", f"{claim.name} is not an assume_pod")
    ttl_ms = milliseconds(ttl, subject=claim.subject, field="ttl")
    if ttl_ms == "0":
        raise ValidationError(claim.subject, "ttl", "a timed claim needs a ttl above 0")
    return Command("timed_claim", claim.subject, (ttl_ms, *claim.args))


def claim_node(command: Command) -> str:
    """The node a claim (:func:`assume_pod` or :func:`timed_claim`) names for its pod: the one
    it takes unless it carries candidates (then its reply names the node taken)."""
    if command.name not in ("assume_pod", "timed_claim"):
        raise ValidationError(command.subject, "claim", f"{command.name} is not a claim")
    node = command.args[2 if command.name == "timed_claim" else 1]
    return node.decode() if isinstance(node, bytes) else str(node)


def claim_reply(reply: Any, claim: Command) -> Any:
    """A claim's reply as ``[generation, node]``, the node from ``claim`` itself when the
    script answered the generation alone: what a claim sent again answers (its pod may have
    been moved to a candidate when it was judged: :func:`judged_reply`)."""
    if isinstance(reply, list | tuple):
        return reply
    return [reply, claim_node(claim)]


def judged_reply(reply: Any, claim: Command, candidates: bool) -> Any:
    """A judged claim's reply as its caller asked for it, first sent or sent again: the
    script's own (the generation) for a claim without candidates, else ``[generation, node]``
    (:func:`claim_reply`): judging may have moved the pod to a candidate with none left to
    send, and the script then answers the generation alone."""
    return claim_reply(reply, claim) if candidates else reply


def finish_binding(pod: Pod, now: float | None, ttl: float) -> Command:
    subject = pod_subject(pod)
    uid, _ = _pod_key_args(pod)
    now_ms = milliseconds(now, subject=subject, field="now", maximum=MAX_NOW)
    ttl_ms = milliseconds(ttl, subject=subject, field="ttl")
    return Command("finish_binding", subject, (uid, now_ms, ttl_ms))


def cleanup_assumed_pods(now: float | None, limit: int) -> Command:
    return Command(
        "cleanup_assumed_pods",
        "assumed pods",
        (milliseconds(now, subject="cleanup_assumed_pods", field="now", maximum=MAX_NOW), limit),
    )


def tree_next() -> Command:
    return Command("tree_next", "the node tree's cursor", ())


def forget_lapsed(limit: int) -> Command:
    return Command("forget_lapsed", "replicas whose lease lapsed", (limit,))


def _node_args(node: Node) -> tuple[Arg, ...]:
    if not isinstance(node, Node):
        raise ValidationError("node", "", f"expected a schedcache.Node, got {type(node).__name__}")
    subject = node_subject(node.name)
    name = _token(node.name, subject, "metadata.name")
    blob = pack_object(node.to_dict(), subject)  # the reader's limits first
    resources, images = resource_pairs(node.allocatable), image_pairs(node)
    for path, pairs, limit in (
        ("status.allocatable", resources, MAX_NODE_RESOURCES),
        ("status.images", images, MAX_NODE_IMAGES),
    ):
        if len(pairs) > limit:
            reason = f"{len(pairs)} names, over the {limit} a node may bring (values.MAX_NODE_*)"
            raise ValidationError(subject, path, reason)
    return (
        name,
        node.zone_key,
        blob,
        *flatten(resources),
        *flatten(images),
        spec_digest(node),
        *_node_labels(node),
    )


#: Node labels sent with a node write for claims to read (lua/_changes.lua); a node with more
#: sends none, and claims then treat its every spec change as one they cannot judge.
MAX_NODE_LABELS = 128


def _node_labels(node: Node) -> tuple[Arg, ...]:
    if len(node.labels) > MAX_NODE_LABELS:
        return ()
    flat: list[Arg] = [len(node.labels)]
    for key, value in sorted(node.labels.items()):
        if not key:
            raise ValidationError(node_subject(node.name), "metadata.labels", "an empty key")
        flat += [key, value]
    return tuple(flat)


def add_node(node: Node) -> Command:
    return Command("add_node", node_subject(node.name), _node_args(node))


def update_node(old: Node | None, new: Node) -> Command:
    args = _node_args(new)
    if old is not None and isinstance(old, Node) and old.name != new.name:
        raise ValidationError(
            node_subject(new.name), "metadata.name", f"differs from the old node's {old.name!r}"
        )
    return Command("update_node", node_subject(new.name), args)


def remove_node(node: Node | str) -> Command:
    name = node.name if isinstance(node, Node) else node
    return Command(
        "remove_node", node_subject(name), (_token(name, node_subject(name), "metadata.name"),)
    )


# -- feeders (schedcache sync): changes ordered by the API server's resourceVersion ----------

_RESOURCE_VERSION = re.compile(r"^[0-9]{1,40}$")


def resource_version(value: object, subject: str) -> str:
    """``metadata.resourceVersion`` as the functions compare it: a decimal integer (what every
    API server backed by etcd sends). Anything else is refused, naming the object: versions the
    cache cannot order would let a stale change win."""
    if not isinstance(value, str) or not _RESOURCE_VERSION.match(value):
        raise ValidationError(
            subject, "metadata.resourceVersion", f"{value!r} is not a decimal resourceVersion"
        )
    return value


def sync_pod(pod: Pod, version: str, present: bool) -> Command:
    """The pod as an API server list or watch showed it at ``version``: ``present`` (assigned
    and running: add, confirm or update) or not (deleted, terminated or unassigned: remove).
    A change at or below the version the cache last applied for this uid is dropped."""
    subject = pod_subject(pod)
    version = resource_version(version, subject)
    if present:
        return Command("sync_pod", subject, (version, "set", *_placed_pod_args(pod, "add")))
    uid, _ = _pod_key_args(pod)
    return Command("sync_pod", subject, (version, "delete", uid))


def sync_pod_gone(uid: str, version: str) -> Command:
    """The pod with ``uid`` is no longer in the API server's list at ``version``."""
    subject = f"pod with uid {uid}"
    version = resource_version(version, subject)
    return Command("sync_pod", subject, (version, "delete", _token(uid, subject, "metadata.uid")))


def sync_node(node: Node, version: str) -> Command:
    """The node as an API server list or watch showed it at ``version`` (add or update)."""
    subject = node_subject(node.name)
    version = resource_version(version, subject)
    return Command("sync_node", subject, (version, "set", *_node_args(node)))


def sync_node_gone(name: str, version: str) -> Command:
    """Node ``name`` was deleted, or is no longer in the API server's list, at ``version``."""
    subject = node_subject(name)
    version = resource_version(version, subject)
    return Command(
        "sync_node", subject, (version, "delete", _token(name, subject, "metadata.name"))
    )


# -- the scheduling queue (lua/_queue.lua) -------------------------------------------------

# The queue's limits, as lua/_queue.lua has them.
QUEUE_BATCH_LIMIT = 100
PRIORITY_LIMIT = 2**31


# What the API server defaults spec.schedulerName to (sync, the extender, its pending pods' watch).
DEFAULT_SCHEDULER = "default-scheduler"


def scheduler_name(value: object, subject: str, field: str = "spec.schedulerName") -> str:
    """A scheduler name (a DNS subdomain, as the API server validates ``spec.schedulerName``):
    part of the queue's key names."""
    if not isinstance(value, str) or not is_dns_subdomain(value):
        raise ValidationError(
            subject, field, f"{value!r} is not a scheduler name (a DNS subdomain, <= 253 chars)"
        )
    return value


def sync_pod_pending(pod: Pod, scheduler: str, version: str) -> Command:
    """The pod pending (no node yet) at ``version``: queued for ``scheduler``'s replicas, or
    its queued copy brought up to date; a pod claimed already is left as it is."""
    subject = pod_subject(pod)
    version = resource_version(version, subject)
    uid, node = _pod_key_args(pod)
    if node:
        raise ValidationError(subject, "spec.nodeName", "a pending pod has none")
    if not -PRIORITY_LIMIT <= pod.priority <= PRIORITY_LIMIT:
        raise ValidationError(subject, "spec.priority", f"{pod.priority} is not an int32")
    blob = pack_object(pod.to_dict(), subject)
    args = (version, "queue", uid, scheduler_name(scheduler, subject), str(pod.priority), blob)
    return Command("sync_pod", subject, args)


def queue_pop(
    scheduler: str, holder: str, lease: float, count: int, parked: float, now: float | None
) -> Command:
    """Lease up to ``count`` pods of ``scheduler``'s queue to ``holder`` for ``lease`` s."""
    subject = f"queue of scheduler {scheduler}"
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= QUEUE_BATCH_LIMIT:
        raise ValidationError(subject, "count", f"{count!r} is not in 1..{QUEUE_BATCH_LIMIT}")
    lease_ms = milliseconds(lease, subject=subject, field="lease")
    if lease_ms == "0":
        raise ValidationError(subject, "lease", f"{lease!r} must be at least a millisecond")
    args = (
        scheduler_name(scheduler, subject, "scheduler"),
        _token(holder, subject, "holder"),
        lease_ms,
        count,
        milliseconds(parked, subject=subject, field="parked"),
        milliseconds(now, subject=subject, field="now", maximum=MAX_NOW),
    )
    return Command("queue_pop", subject, args, id="")


def queue_retry(
    scheduler: str,
    holder: str,
    uid: str,
    unschedulable: bool,
    attempt: str,
    backoff: tuple[float, float],
    parked: float,
    now: float | None,
    wake: tuple[str, ...] = (),
) -> Command:
    """Give back the leased pod ``uid``: parked when no node could take it (``unschedulable``)
    and no helpful event came after ``attempt`` (a stream id), else backing off. ``wake``:
    the arrivals that can help it too (``arrivals.wake_tokens``)."""
    subject = f"queued pod with uid {uid}"
    if attempt and not re.fullmatch(r"\d+-\d+", attempt):
        raise ValidationError(subject, "attempt", f"{attempt!r} is not a stream id")
    if len(wake) > WAKE_TOKENS or any(not _wake_token(token) for token in wake):
        raise ValidationError(subject, "wake", f"{wake!r}: at most {WAKE_TOKENS} key=value or *")
    first, longest = backoff
    args = (
        scheduler_name(scheduler, subject, "scheduler"),
        _token(holder, subject, "holder"),
        _token(uid, subject, "uid"),
        "unschedulable" if unschedulable else "error",
        attempt,
        milliseconds(first, subject=subject, field="backoff"),
        milliseconds(longest, subject=subject, field="max_backoff"),
        milliseconds(parked, subject=subject, field="parked"),
        milliseconds(now, subject=subject, field="now", maximum=MAX_NOW),
        " ".join(wake),
    )
    return Command("queue_retry", subject, args)


def _wake_token(token: str) -> bool:
    return token == ANY or (
        "=" in token and not token.startswith("=") and len(token.split()) == 1 and len(token) < 400
    )


def queue_untried(scheduler: str, holder: str, uid: str) -> Command:
    """Give back the leased pod ``uid`` unattempted (popped in a batch, then the replica
    stopped or lost Redis first): back to its place in the active queue, no attempt counted."""
    return _queue_give_back("untried", scheduler, holder, uid)


def queue_unreadable(scheduler: str, holder: str, uid: str) -> Command:
    """Give back the leased pod ``uid`` whose msgpack could not be decoded: it leaves the
    queue (``sync`` queues it again with its next change or relist)."""
    return _queue_give_back("unreadable", scheduler, holder, uid)


def _queue_give_back(kind: str, scheduler: str, holder: str, uid: str) -> Command:
    """``sc_queue_retry`` of a ``kind`` that takes no attempt, back-off nor wake."""
    subject = f"queued pod with uid {uid}"
    args = (
        scheduler_name(scheduler, subject, "scheduler"),
        _token(holder, subject, "holder"),
        _token(uid, subject, "uid"),
        kind,
        "",
        "0",
        "0",
        "0",
        "",
    )
    return Command("queue_retry", subject, args)
