"""``Cache``: kube-scheduler's scheduler cache, kept in Redis and shared by replicas.

Every mutating method is one Lua function (``lua/<command>.lua``) that checks the transition,
applies all of its effects and appends the event, or fails and writes nothing. Reads go
straight to the keys. Method names and semantics follow kube-scheduler's ``Cache`` interface;
where they differ on purpose, the README's table says how.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis

from schedcache.errors import FitConflict, NodeNotFound, PodAlreadyExists, PodNotFound
from schedcache.history.audit import StreamAudit
from schedcache.model.nodeinfo import Dump, NodeInfo
from schedcache.model.selectors import parse_selector
from schedcache.model.values import Node, Pod
from schedcache.ops.leases import Lease
from schedcache.store import commands, metrics
from schedcache.store.batch import CommandBatch
from schedcache.store.commands import Command, pod_ref
from schedcache.store.events import checked_stream_id
from schedcache.store.fetch import (
    fetch_node_infos,
    fetch_pods,
    read_dump,
    read_generation,
    read_stream_length,
)
from schedcache.store.gang import gang_claim, named_member
from schedcache.store.keys import Keys
from schedcache.store.records import PodRecord, parse_pod_record
from schedcache.store.replies import UNCHECKED
from schedcache.store.responses import as_bytes
from schedcache.store.retry import DEFAULT_RETRY, RetryPolicy
from schedcache.store.store import Client, Store, sweep_reply
from schedcache.views.claims import ClaimRules, ranked_contexts, taken_node
from schedcache.views.gang import gang_context
from schedcache.views.nodetree import NodeTree
from schedcache.views.snapshot import Snapshot, SnapshotUpdate, snapshot_of, update_snapshot

__all__ = ["Cache", "Dump"]

log = logging.getLogger(__name__)

# Pods expired per sc_cleanup_assumed_pods call: bounds how long one call holds Redis.
EXPIRE_BATCH = 500


def cache_settings(name: str, ttl: float, lease_ttl: float) -> tuple[float, float]:
    """``ttl`` and ``lease_ttl`` checked (seconds, 0 to ``MAX_TTL``), for either cache."""
    subject = f"cache {Keys(name).name}"
    return (
        commands.seconds(ttl, subject=subject, field="ttl", maximum=commands.MAX_TTL),
        commands.seconds(lease_ttl, subject=subject, field="lease_ttl", maximum=commands.MAX_TTL),
    )


class Cache(StreamAudit):
    """One named cache on a Redis server: the kube-style facade over its :class:`Store`.

    ``ttl`` (seconds) is how long an assumed pod whose binding finished may wait for its
    confirming ``add_pod`` before it expires; 0 means never (kube-scheduler's setting since
    v1.25). ``replica`` names this client in every event it writes. ``retry``: how often and
    how long a command is sent again when Redis does not answer (:class:`RetryPolicy`); every
    command carries an id, so a retry of a command whose reply was lost is answered with its
    first outcome, never applied twice (a feeder's versioned change goes without one: its
    version drops the retry as "repeated"). When the policy gives up, :class:`RetriesExhausted`.
    ``lease_ttl``: a named replica that assumes pods heartbeats a lease of this many seconds;
    when it lapses (the replica died), the expiry worker forgets its assumed pods whose
    binding never finished. 0 turns leases off.

    ``wait_replicas``: with a replicated primary (Sentinel, Cluster), a command is answered
    only once that many replicas have it (``WAIT``, at most ``wait_timeout`` seconds), so a
    failover cannot lose an acknowledged command; fewer in time raises :class:`NotReplicated`.
    0 (the default, and the only choice on the embedded fakeredis) answers at once.

    ``read_from``: ``"replica"`` (or a replica's URL) feeds :meth:`update_snapshot` from a
    replica of the cache's server; everything else stays on the primary (docs/storage.md).
    """

    def __init__(
        self,
        client: Client,
        name: str = "default",
        *,
        ttl: float = 30.0,
        replica: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        lease_ttl: float = 15.0,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        read_from: str = "primary",
    ) -> None:
        self.ttl, lease_ttl = cache_settings(name, ttl, lease_ttl)
        self.store = Store(
            client,
            name,
            replica=replica,
            retry=retry,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            read_from=read_from,
        )
        self.lease = Lease(self.store, lease_ttl) if replica and lease_ttl > 0 else None
        # The snapshot a check_fit claim made without one judges its inter-pod rules on.
        self._claim_snapshot = Snapshot()
        self._claim_lock = threading.Lock()
        # For callers and inspection (key names: docs/storage.md); commands go through the store.
        self.name: str = self.store.name
        self.keys: Keys = self.store.keys
        self.client: Client = self.store.client
        self.replica: str = self.store.replica

    # -- running commands ---------------------------------------------------------------

    def run(self, command: Command) -> Any:
        """Run one command (``schedcache.store.commands``); raise the matching :class:`CacheError`
        if it is rejected.

        Running the same command again settles it after :class:`RetriesExhausted`, but only
        while Redis surely remembers its id: a command made longer ago than
        ``retry.MAX_RETRY_WINDOW`` is refused (:class:`ValidationError`, nothing sent). A
        feeder's versioned change (``commands.VERSIONED``) has no id: sent again once applied, it
        is answered ``dropped repeated``, and it is refused only past
        ``retry.MAX_VERSIONED_RESEND`` (an hour less a minute, a delete's tombstone's life)."""
        return self.store.run(command)

    def batch(self, chunk_size: int = 200) -> CommandBatch:
        """Collect commands and apply them with few round trips (informer ingest);
        ``chunk_size`` commands per ``sc_batch`` call."""
        return CommandBatch(self, chunk_size=chunk_size)

    # -- pods -------------------------------------------------------------------------

    def assume_pod(
        self,
        pod: Pod,
        check_fit: bool = False,
        expect_generation: int | None = None,
        snapshot: Snapshot | None = None,
        candidates: Sequence[str] = (),
        deadline: float | None = None,
    ) -> str:
        """Book ``pod`` on ``pod.node_name`` before binding (the scheduler's decision); returns
        the node it was booked on. ``deadline``: seconds; the claim gets that deadline in the
        same call, as ``finish_binding(pod, None, deadline)`` would set it after (the
        extender's bind timeout: one round trip, ``lua/timed_claim.lua``).

        With replicas sharing the cache, claim optimistically: ``check_fit=True`` checks inside
        the script that the live node still has room (CPU, memory, ephemeral storage, pod
        count, scalar resources, host ports) and that the pod's inter-pod rules still hold
        (required pod affinity, anti-affinity both ways, DoNotSchedule spread), as judged on
        ``snapshot`` (the one the decision read; else a private one brought up to date here,
        for a pod without rules only when pods with required anti-affinity are placed) and
        re-checked atomically (docs/constraints.md); ``expect_generation=
        snap.get(node).generation`` refuses if the node changed at all since that snapshot
        (the node only: no inter-pod rule is checked). Either raises :class:`FitConflict` and
        writes nothing. ``candidates``: with ``check_fit``, up to seven more nodes, best
        first; the claim takes the first of ``pod.node_name`` and these that passes every
        check, in the same round trip, and :class:`FitConflict` (naming the first) only when
        none does.
        """
        rules: tuple[int | None, str, str, str, str] = (None, "", "", "", "")
        extra: list[tuple[str, str, str]] = []
        candidates = commands.candidate_names(pod, candidates)
        if check_fit and expect_generation is None:
            pod, rules, extra = self._claim_context(pod, snapshot, candidates)
        elif candidates:
            extra = [(node, "", "") for node in candidates]  # refused by the command
        try:
            try:
                claim = commands.assume_pod(
                    pod, check_fit, expect_generation, self.lease_to_take, *rules, extra
                )
                reply = self.run(commands.timed_claim(claim, deadline))
            except FitConflict as conflict:
                if conflict.reasons != (UNCHECKED,) or rules[0] is not None:
                    raise
                # Pods with required anti-affinity are placed: judge their terms toward this
                # pod on the cache's own snapshot, and claim again with what that read.
                reply = self.judged_claim(pod, candidates, deadline)
        except FitConflict as conflict:
            for reason in conflict.reasons:
                metrics.FIT_CONFLICTS.labels(reason).inc()
            raise
        self.hold_lease()
        return taken_node(reply, pod)

    def assume_gang(
        self, pods: Sequence[Pod], group: str, snapshot: Snapshot | None = None
    ) -> list[str]:
        """Book every pod of the pod group ``group`` ("<namespace>/<name>") on its
        ``node_name``, all or nothing, in one call (docs/gangs.md): each is checked as
        ``assume_pod(check_fit=True)`` checks one (room, host ports, inter-pod rules judged on
        ``snapshot``, else on this cache's own brought up to date), counting the members
        before it on the same node; one refused, none is written. :class:`FitConflict` or
        :class:`PodAlreadyExists` names the member and why. Returns the members' nodes."""
        pods = list(pods)
        if snapshot is None:
            with self._claim_lock:
                update_snapshot(self.store, self._claim_snapshot, replica_ok=False)
                context, members = gang_context(self._claim_snapshot, pods, group)
        else:
            context, members = gang_context(snapshot, pods, group)
        command = gang_claim(group, members, self.lease_to_take, *context)
        try:
            self.run(command)
        except (FitConflict, PodAlreadyExists) as refused:
            metrics.GANG_CLAIMS.labels("refused").inc()
            raise named_member(refused, pods) from None
        metrics.GANG_CLAIMS.labels("placed").inc()
        self.hold_lease()
        return [pod.node_name for pod in pods]

    def _claim_context(
        self, pod: Pod, snapshot: Snapshot | None, candidates: Sequence[str]
    ) -> tuple[Pod, tuple[int | None, str, str, str, str], list[tuple[str, str, str]]]:
        """The inter-pod rules judged on ``snapshot``, else, for a pod with rules of its own,
        on this cache's snapshot brought up to date here (:func:`ranked_contexts`: the pod
        moves to the first candidate whose rules hold there). A bare claim of a pod without
        any (no snapshot given) sends none: Redis accepts it when no placed pod has required
        anti-affinity, else refuses it as ``unchecked`` and :meth:`assume_pod` judges it here
        (a snapshot update on every such claim cost too much, docs/constraints.md)."""
        if snapshot is not None:
            return ranked_contexts(snapshot, pod, candidates)
        if not pod.has_inter_pod_rules:
            return pod, (None, "", "", "", ""), [(node, "", "") for node in candidates]
        return self._own_claim_context(pod, candidates)

    def judged_claim(
        self, pod: Pod, candidates: Sequence[str] = (), deadline: float | None = None
    ) -> Any:
        """Claim ``pod`` (``check_fit``) with its inter-pod rules judged on this cache's own
        snapshot, brought up to date; the script's reply (``[generation, node]`` when
        ``candidates`` were given, the judged claim's node: it may be a candidate's with none
        left to send). What a batch sends again for a bare claim Redis refused as ``unchecked``
        (pods with required anti-affinity are placed)."""
        command = self.judged_claim_command(pod, candidates, deadline)
        reply = self.run(command)
        return commands.judged_reply(reply, command, bool(candidates))

    def judged_claim_command(
        self, pod: Pod, candidates: Sequence[str] = (), deadline: float | None = None
    ) -> Command:
        """The claim :meth:`judged_claim` sends, made but not sent: a batch keeps it before
        sending it, to send that very claim again when its reply is lost (its reply is then
        ``commands.claim_reply``'s ``[generation, node]``)."""
        pod, rules, extra = self._own_claim_context(pod, candidates)
        claim = commands.assume_pod(pod, True, None, self.lease_to_take, *rules, extra)
        return commands.timed_claim(claim, deadline)

    def _own_claim_context(
        self, pod: Pod, candidates: Sequence[str] = ()
    ) -> tuple[Pod, ClaimRules, list[tuple[str, str, str]]]:
        """The inter-pod rules judged on this cache's own snapshot, brought up to date."""
        with self._claim_lock:  # (from the primary: a claim's answer must be current)
            update_snapshot(self.store, self._claim_snapshot, replica_ok=False)
            return ranked_contexts(self._claim_snapshot, pod, candidates)

    @property
    def lease_to_take(self) -> float:
        """The lease ttl while the heartbeat has not started (the claim takes the lease in the
        same script), else 0: the heartbeat keeps it, and claims skip two writes."""
        lease = self.lease
        return lease.ttl if lease is not None and lease.thread is None else 0.0

    def hold_lease(self) -> None:
        """Heartbeat this replica's lease from now on (the first ``assume_pod`` took it)."""
        if self.lease is not None:
            self.lease.start()

    def close(self, release_lease: bool = False) -> None:
        """Stop this replica's lease heartbeat. The lease lapses after its ttl (binds in flight
        have that long to finish); then the expiry worker forgets claims whose binding never
        finished. ``release_lease=True`` drops it at once."""
        if self.lease is not None:
            self.lease.stop(release=release_lease)

    def finish_binding(self, pod: Pod, now: float | None = None) -> None:
        """Binding returned: the assumed pod expires at ``now + ttl`` unless confirmed first.

        A no-op for a pod that is not assumed, as upstream.
        """
        self.run(commands.finish_binding(pod, now, self.ttl))

    def forget_pod(self, pod: Pod) -> None:
        """Undo ``assume_pod`` (scheduling failed after the assume)."""
        self.run(commands.forget_pod(pod))

    def add_pod(self, pod: Pod) -> None:
        """The informer saw ``pod`` bound: confirm it if assumed (on whichever node), else add."""
        self.run(commands.add_pod(pod))

    def update_pod(self, old: Pod, new: Pod) -> None:
        """The informer saw an added pod change; the stored pod's contribution is replaced."""
        self.run(commands.update_pod(old, new))

    def remove_pod(self, pod: Pod) -> None:
        """The informer saw ``pod`` deleted; also removes a pod that is still assumed."""
        self.run(commands.remove_pod(pod))

    def cleanup_assumed_pods(self, now: float | None = None) -> list[str]:
        """Expire every assumed pod whose binding finished and whose deadline is before ``now``.

        Returns the uids expired. Works in bounded batches, so Redis is never blocked long.
        """
        expired: list[str] = []
        while True:
            reply = self.run(commands.cleanup_assumed_pods(now, EXPIRE_BATCH))
            done, _, more = sweep_reply(self.name, "expire", reply, EXPIRE_BATCH)
            expired += done
            if not more:
                return expired

    def get_pod(self, pod: Pod | str) -> Pod:
        """The stored pod (assumed or added) with ``pod``'s uid; raises :class:`PodNotFound`."""
        return self.get_pod_record(pod).pod

    def get_pod_record(self, pod: Pod | str) -> PodRecord:
        """The pod with its state, node, binding and deadline; raises :class:`PodNotFound`."""
        uid, subject = self.pod_ref(pod)
        raw = self.client.get(self.keys.pod(uid))
        if raw is None:
            raise PodNotFound(f"{subject} does not exist in the cache")
        return parse_pod_record(as_bytes(raw), self.keys.pod(uid))

    def is_assumed_pod(self, pod: Pod | str) -> bool:
        uid, _ = self.pod_ref(pod)
        return bool(self.client.sismember(self.keys.assumed, uid))

    def pod_state(self, pod: Pod | str) -> str | None:
        """``"assumed"``, ``"added"``, or None when the cache does not hold the pod."""
        try:
            return self.get_pod_record(pod).state
        except PodNotFound:
            return None

    pod_ref = staticmethod(pod_ref)

    def pod_count(self) -> int:
        """Pods in the cache, assumed ones and those on ghost nodes included."""
        return int(self.client.scard(self.keys.pods))

    def list_pods(self, selector: str | dict[str, str] | None = None) -> list[Pod]:
        """Every pod whose labels match a kubectl-style selector (``app=web,tier!=db``)."""
        return self.filtered_list(lambda pod: True, selector)

    def filtered_list(
        self, predicate: Callable[[Pod], bool], selector: str | dict[str, str] | None = None
    ) -> list[Pod]:
        """Pods matching ``selector`` for which ``predicate(pod)`` is true."""
        match = parse_selector(selector)
        uids = sorted(uid.decode() for uid in self.client.sscan_iter(self.keys.pods, count=1000))
        pods = [record.pod for record in fetch_pods(self.store, uids).values()]
        return [pod for pod in pods if match.matches(pod.labels) and predicate(pod)]

    # -- nodes ------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        """Add a node, or revive a ghost / fill a placeholder of the same name."""
        self.run(commands.add_node(node))

    def update_node(self, old: Node | None, new: Node) -> None:
        """Replace the stored node with ``new`` (an unknown node is created, as upstream)."""
        self.run(commands.update_node(old, new))

    def remove_node(self, node: Node | str) -> None:
        """Remove a node; while pods remain on it, it stays as a ghost holding them."""
        self.run(commands.remove_node(node))

    def node_count(self) -> int:
        """Node entries, ghosts and placeholders included (upstream's ``NodeCount``)."""
        return int(self.client.scard(self.keys.nodes))

    def get_node_info(self, name: str) -> NodeInfo:
        """One node's ``NodeInfo``; raises :class:`NodeNotFound` when there is no entry."""
        info = fetch_node_infos(self.store, [name]).get(name)
        if info is None:
            raise NodeNotFound(f"node {name} is not in the cache")
        return info

    def update_snapshot(self, snap: Snapshot) -> SnapshotUpdate:
        """Bring ``snap`` up to the cache's generation, fetching only the nodes that changed."""
        return update_snapshot(self.store, snap)

    def node_tree(self) -> NodeTree:
        """The zone-grouped tree of live nodes (``list()``, ``next()``, ``zones()``)."""
        return NodeTree(self.store)

    # -- everything -------------------------------------------------------------------

    def generation(self) -> int:
        return read_generation(self.store)

    def dump(self) -> Dump:
        """Every node entry (ghosts included) with its pods, and the assumed set."""
        return read_dump(self.store)

    def has_node(self, name: str) -> bool:
        """Whether the cache holds an entry for node ``name`` (live, ghost or placeholder)."""
        return bool(self.client.sismember(self.keys.nodes, name))

    def is_empty(self) -> bool:
        """Whether no key of the cache exists: its main keys first (one round trip), then a
        SCAN for any other (leases, remembered command ids, checkpoint chunks)."""
        keys = self.keys
        if self.client.exists(keys.events, keys.nodes, keys.pods, keys.generation):
            return False
        try:
            return next(iter(self.client.scan_iter(match=keys.pattern, count=1000)), None) is None
        except redis.exceptions.NoPermissionError:  # SCAN is the admin's: the main keys decide
            return True

    def at(self, event_id: str) -> Snapshot:
        """The cache just after event ``event_id``, as a snapshot (node infos in node-tree
        order) to run the same filter and score code a replica runs on: what a scheduler saw
        then. Folded from the checkpoint and the stream like :meth:`replay`; any stream id is a
        moment (``<ms>-<seq>``: one between events, or from a clock, is the state as of then)."""
        event_id = checked_stream_id(event_id, f"cache {self.name}", "event_id")
        return snapshot_of(self.replay(until=event_id))

    def stream_length(self) -> int:
        return read_stream_length(self.store)

    def clear(self) -> int:
        """Delete every key of this cache (tests, demos). Returns how many were deleted.

        Stops this replica's lease heartbeat first: it would re-create ``replicas`` and
        ``lease:<replica>`` (keys without expiry) after they were deleted."""
        self.close()
        deleted = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) == 500:
                deleted += self.client.delete(*batch)
                batch = []
        if batch:
            deleted += self.client.delete(*batch)
        return deleted
