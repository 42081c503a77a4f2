"""``Cache``: kube-scheduler's scheduler cache, kept in Redis and shared by replicas.

Every mutating method is one Lua function (``lua/<command>.lua``) that checks the transition,
applies all of its effects and appends the event, or fails and writes nothing. Reads go
straight to the keys. Method names and semantics follow kube-scheduler's ``Cache`` interface;
where they differ on purpose, the README's table says how.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import fakeredis
import redis

from schedcache import checkpoints, commands, metrics
from schedcache.commands import Command, pod_subject
from schedcache.errors import (
    CacheError,
    FitConflict,
    NodeNotFound,
    NotReplicated,
    PodNotFound,
    RetriesExhausted,
    ValidationError,
)
from schedcache.events import Event, decode_entry
from schedcache.fetch import fetch_node_infos, fetch_pods, gc_paused
from schedcache.keys import Keys
from schedcache.leases import Lease
from schedcache.library import ensure_loaded, is_missing_function
from schedcache.models import Node, Pod
from schedcache.nodeinfo import NodeInfo
from schedcache.nodetree import NodeTree
from schedcache.records import PodRecord, parse_pod_record
from schedcache.replay import ReplayState
from schedcache.replies import translate
from schedcache.retry import (
    DEFAULT_RETRY,
    RETRYABLE,
    TOPOLOGY_CHANGED,
    RetryPolicy,
    too_late_to_resend,
)
from schedcache.routing import SlotRoute
from schedcache.selectors import parse_selector
from schedcache.snapshot import Snapshot, SnapshotUpdate, update_snapshot
from schedcache.verify import Difference, compare, invariants

if TYPE_CHECKING:
    from schedcache.batch import CommandBatch

log = logging.getLogger(__name__)
T = TypeVar("T")

# Pods expired per sc_cleanup_assumed_pods call: bounds how long one call holds Redis.
EXPIRE_BATCH = 500


def log_skipped(cache: str, action: str, uids: list[bytes]) -> None:
    """Pods whose stored record is corrupt are skipped by the expiry and lease sweeps (so the
    rest goes on) and said here; their uids name the keys to inspect (``pod:<uid>``)."""
    if uids:
        metrics.SKIPPED_CORRUPT.labels(cache=cache).inc(len(uids))
        log.error(
            "cache %s: could not %s %d pods with a corrupt record: %s",
            cache,
            action,
            len(uids),
            ", ".join(repr(uid.decode(errors="replace")) for uid in uids[:20]),
        )


@dataclass
class Dump:
    """Everything in the cache, for debugging: ``Cache.dump()``."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    assumed_pods: set[str] = field(default_factory=set)
    generation: int = 0
    # replay(): the last event folded in (None for the live dump); not part of the state
    last_id: str | None = field(default=None, compare=False)


# Words the Lua side stores in a replica's place: "-" is the pod record's "no claimer".
RESERVED_REPLICAS = frozenset({"-"})
MAX_REPLICA_LENGTH = 253  # a DNS name: pod names and hostnames fit


def replica_name(replica: object, subject: str) -> str:
    """``replica`` checked: "" (anonymous, no lease) or a word the pod record, the event stream
    and the key ``lease:<replica>`` hold unambiguously. ``-`` is refused: it is the record's
    "no claimer" marker, so a replica of that name would lose its lease protection."""
    if not isinstance(replica, str):
        raise ValidationError(subject, "replica", f"{replica!r} is not a string")
    if replica in RESERVED_REPLICAS:
        raise ValidationError(
            subject, "replica", f"{replica!r} is reserved (the pod record's no-claimer marker)"
        )
    # Not printable: control characters, and lone surrogates (which UTF-8 cannot encode).
    if replica and (not replica.isprintable() or replica.split() != [replica]):
        raise ValidationError(
            subject, "replica", f"{replica!r} must be printable, without whitespace"
        )
    if len(replica) > MAX_REPLICA_LENGTH:
        raise ValidationError(
            subject, "replica", f"{len(replica)} characters, over {MAX_REPLICA_LENGTH}"
        )
    return replica


class Cache:
    """One named cache on a Redis server.

    ``ttl`` (seconds) is how long an assumed pod whose binding finished may wait for its
    confirming ``add_pod`` before it expires; 0 means never (kube-scheduler's setting since
    v1.25). ``replica`` names this client in every event it writes. ``retry``: how often and
    how long a command is sent again when Redis does not answer (:class:`RetryPolicy`); every
    command carries an id, so a retry of a command whose reply was lost is answered with its
    first outcome, never applied twice. When the policy gives up, :class:`RetriesExhausted`.
    ``lease_ttl``: a named replica that assumes pods heartbeats a lease of this many seconds;
    when it lapses (the replica died), the expiry worker forgets its assumed pods whose
    binding never finished. 0 turns leases off.

    ``wait_replicas``: with a replicated primary (Sentinel, Cluster), a command is answered
    only once that many replicas have it (``WAIT``, at most ``wait_timeout`` seconds), so a
    failover cannot lose an acknowledged command; fewer in time raises :class:`NotReplicated`.
    0 (the default, and the only choice on the embedded fakeredis) answers at once.
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str = "default",
        *,
        ttl: float = 30.0,
        replica: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        lease_ttl: float = 15.0,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
    ) -> None:
        self.keys = Keys(name)
        subject = f"cache {name}"
        self.ttl = commands.seconds(ttl, subject=subject, field="ttl", maximum=commands.MAX_TTL)
        lease_ttl = commands.seconds(
            lease_ttl, subject=subject, field="lease_ttl", maximum=commands.MAX_TTL
        )
        self.client = client
        self.name = name
        self.replica = replica_name(replica, subject)
        self.lease = Lease(self, lease_ttl) if replica and lease_ttl > 0 else None
        if not isinstance(retry, RetryPolicy):
            raise ValidationError(subject, "retry", f"expected a RetryPolicy, got {retry!r}")
        self.retry = retry
        if type(wait_replicas) is not int or wait_replicas < 0:
            raise ValidationError(subject, "wait_replicas", f"{wait_replicas!r} must be >= 0")
        self.wait_replicas = wait_replicas
        wait_timeout = commands.seconds(
            wait_timeout, subject=subject, field="wait_timeout", maximum=commands.MAX_TIMEOUT
        )
        self.wait_timeout_ms = str(round(wait_timeout * 1000))
        if wait_replicas and int(self.wait_timeout_ms) < 1:  # WAIT n 0 blocks for ever
            raise ValidationError(
                f"cache {name}", "wait_timeout", f"{wait_timeout!r} must be at least 0.001 s"
            )
        if wait_replicas and isinstance(client, fakeredis.FakeRedis):
            raise ValidationError(
                f"cache {name}",
                "wait_replicas",
                "the embedded fakeredis has no replicas (and no WAIT): use 0, or a real Redis",
            )
        self.route = SlotRoute(client, self.keys.prefix)
        ensure_loaded(self.route.get())

    # -- running commands ---------------------------------------------------------------

    def run(self, command: Command) -> Any:
        """Run one command; raise the matching :class:`CacheError` if it is rejected.

        Running the same command again settles it after :class:`RetriesExhausted`, but only
        while Redis surely remembers its id: a command made longer ago than
        ``retry.MAX_RETRY_WINDOW`` is refused (:class:`ValidationError`, nothing sent)."""
        late = too_late_to_resend(command.created)
        if late is not None:
            raise ValidationError(command.subject, f"sc_{command.name} command id", late)
        try:
            reply = self._fcall_retrying(command)
        except redis.ResponseError as error:
            translated = self._translate(command, error)
            if isinstance(translated, CacheError):
                metrics.count_command(command.name, applied=False)
            raise translated from None
        metrics.count_command(command.name, applied=True)
        return reply

    def _fcall_retrying(self, command: Command) -> Any:
        """Send again after a connection error, with the same command id: if the first call
        ran and only its reply was lost, Redis answers with that first outcome. (A plain loop:
        this is the hot path, and tenacity's bookkeeping cost a quarter of a call.)"""
        delays = self.retry.delays()
        attempts, started = 0, time.monotonic()
        while True:
            attempts += 1
            try:
                return self._fcall_reloading(command)
            except RETRYABLE as error:
                delay = next(delays, None)
                if delay is None:
                    raise RetriesExhausted(
                        f"sc_{command.name} {command.subject} (command id {command.id}): no "
                        f"answer from Redis after {attempts} attempts in "
                        f"{time.monotonic() - started:.1f} s ({type(error).__name__}: {error}); "
                        "it may or may not have been applied: run the same command again to "
                        "settle it exactly once"
                    ) from error
                log.warning("sc_%s: %s; sending again", command.name, error)
                if isinstance(error, TOPOLOGY_CHANGED):
                    self.route.refresh()
                time.sleep(delay)

    def _fcall_reloading(self, command: Command) -> Any:
        try:
            return self._fcall(command)
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise
        # The server lost the library (restarted without persistence, or flushed): reload.
        log.warning("schedcache functions missing on the server; loading them again")
        ensure_loaded(self.route.get())
        return self._fcall(command)

    def read(self, call: Callable[[], T]) -> T:
        """Run a read that uses the library's read functions, reloading the library once if the
        server lost it; a corrupt key it meets raises :class:`CorruptRecord`."""
        try:
            return call()
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise translate("read", f"cache {self.name}", error) from None
        ensure_loaded(self.route.get())
        try:
            return call()
        except redis.ResponseError as error:
            raise translate("read", f"cache {self.name}", error) from None

    def _fcall(self, command: Command) -> Any:
        server = self.route.get()
        args = (self.keys.prefix, self.replica, command.id, *command.args)
        if not self.wait_replicas:
            return server.fcall(f"sc_{command.name}", 1, *args)
        pipe = server.pipeline(transaction=False)
        pipe.fcall(f"sc_{command.name}", 1, *args)
        pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        reply, replicas = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        self.check_replicated(replicas, f"sc_{command.name} {command.subject}", reply)
        return reply

    def check_replicated(self, replicas: Any, what: str, reply: Any = None) -> None:
        """Raise :class:`NotReplicated` if ``WAIT`` answered fewer than ``wait_replicas``."""
        if isinstance(replicas, Exception):
            raise replicas
        if int(replicas) < self.wait_replicas:
            raise NotReplicated(
                f"{what}: applied on the primary, but only {int(replicas)} of "
                f"{self.wait_replicas} replicas confirmed it within {self.wait_timeout_ms} ms",
                reply,
            )

    @staticmethod
    def _translate(command: Command, error: redis.ResponseError) -> Exception:
        return translate(command.name, command.subject, error)

    def batch(self, chunk_size: int = 200) -> CommandBatch:
        """Collect commands and apply them with few round trips (informer ingest);
        ``chunk_size`` commands per ``sc_batch`` call."""
        from schedcache.batch import CommandBatch

        return CommandBatch(self, chunk_size=chunk_size)

    # -- pods -------------------------------------------------------------------------

    def assume_pod(
        self, pod: Pod, check_fit: bool = False, expect_generation: int | None = None
    ) -> None:
        """Book ``pod`` on ``pod.node_name`` before binding (the scheduler's decision).

        With replicas sharing the cache, claim optimistically: ``check_fit=True`` checks inside
        the script that the live node still has room (CPU, memory, ephemeral storage, pod
        count, scalar resources, host ports); ``expect_generation=snap.get(node).generation``
        refuses if the node changed at all since that snapshot. Either raises
        :class:`FitConflict` and writes nothing.
        """
        try:
            self.run(commands.assume_pod(pod, check_fit, expect_generation, self.lease_to_take))
        except FitConflict as conflict:
            for reason in conflict.reasons:
                metrics.FIT_CONFLICTS.labels(reason).inc()
            raise
        self.hold_lease()

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
            done, skipped = self.run(commands.cleanup_assumed_pods(now, EXPIRE_BATCH))
            expired += [uid.decode() for uid in done]
            log_skipped(self.name, "expire", skipped)
            if len(done) + len(skipped) < EXPIRE_BATCH:
                return expired

    def get_pod(self, pod: Pod | str) -> Pod:
        """The stored pod (assumed or added) with ``pod``'s uid; raises :class:`PodNotFound`."""
        return self.get_pod_record(pod).pod

    def get_pod_record(self, pod: Pod | str) -> PodRecord:
        """The pod with its state, node, binding and deadline; raises :class:`PodNotFound`."""
        uid, subject = self._pod_ref(pod)
        raw = self.client.get(self.keys.pod(uid))
        if raw is None:
            raise PodNotFound(f"{subject} does not exist in the cache")
        return parse_pod_record(raw, self.keys.pod(uid))

    def is_assumed_pod(self, pod: Pod | str) -> bool:
        uid, _ = self._pod_ref(pod)
        return bool(self.client.sismember(self.keys.assumed, uid))

    def pod_state(self, pod: Pod | str) -> str | None:
        """``"assumed"``, ``"added"``, or None when the cache does not hold the pod."""
        try:
            return self.get_pod_record(pod).state
        except PodNotFound:
            return None

    @staticmethod
    def _pod_ref(pod: Pod | str) -> tuple[str, str]:
        if isinstance(pod, Pod):
            return pod.uid, pod_subject(pod)
        if isinstance(pod, str) and pod:
            return pod, f"pod with uid {pod}"
        raise ValidationError("pod", "metadata.uid", f"expected a Pod or a uid, got {pod!r}")

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
        pods = [record.pod for record in fetch_pods(self.client, self.keys, uids).values()]
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
        info = self.read(lambda: fetch_node_infos(self.client, self.keys, [name])).get(name)
        if info is None:
            raise NodeNotFound(f"node {name} is not in the cache")
        return info

    def update_snapshot(self, snap: Snapshot) -> SnapshotUpdate:
        """Bring ``snap`` up to the cache's generation, fetching only the nodes that changed."""
        return update_snapshot(self, snap)

    def node_tree(self) -> NodeTree:
        """The zone-grouped tree of live nodes (``list()``, ``next()``, ``zones()``)."""
        return NodeTree(self)

    # -- everything -------------------------------------------------------------------

    def generation(self) -> int:
        return int(self.client.get(self.keys.generation) or 0)

    def dump(self) -> Dump:
        """Every node entry (ghosts included) with its pods, and the assumed set."""
        names = sorted(name.decode() for name in self.client.smembers(self.keys.nodes))
        return Dump(
            nodes=self.read(lambda: fetch_node_infos(self.client, self.keys, names)),
            assumed_pods={uid.decode() for uid in self.client.smembers(self.keys.assumed)},
            generation=self.generation(),
        )

    def events(
        self, start: str | None = None, end: str | None = None, count: int = 1000
    ) -> Iterator[Event]:
        """The stream's events from ``start`` to ``end`` (ids, both included), in order."""
        low = start or "-"
        high = end or "+"
        while True:
            entries = self.client.xrange(self.keys.events, low, high, count=count)
            for entry_id, raw in entries:
                yield decode_entry(entry_id, raw)
            if len(entries) < count:
                return
            low = "(" + entries[-1][0].decode()

    def history(self, pod: Pod | str) -> list[Event]:
        """The events of one pod (by uid), across nodes, in stream order."""
        uid, _ = self._pod_ref(pod)
        return [event for event in self.events() if event.uid == uid]

    def history_of_node(self, name: str) -> list[Event]:
        """The events that changed node ``name`` (its own and its pods'), in stream order."""
        return [
            event
            for event in self.events()
            if event.node == name or event.fields.get("from") == name
        ]

    def replay(
        self, until: str | None = None, progress: Callable[[int], None] | None = None
    ) -> Dump:
        """The state folded from the stream, up to and including event ``until``, shaped like
        :meth:`dump` (``last_id`` names the last event folded in): from the latest checkpoint
        when ``until`` is at or after it, else from the stream's start
        (:class:`HistoryCompacted` if that part was trimmed away)."""
        return self._replay(until, progress).as_dump()

    def _replay(
        self, until: str | None = None, progress: Callable[[int], None] | None = None
    ) -> ReplayState:
        """The fold itself (checkpoints and verify work on it)."""
        with gc_paused():  # folding creates many objects and no cycles
            return checkpoints.replay(self, until, progress)

    def checkpoint(self) -> str:
        """Store the folded state at the stream's last event; returns that event's id."""
        return checkpoints.write_checkpoint(self, self._replay())

    def compact(self, keep: int = 0) -> int:
        """Trim the stream before the checkpoint (keeping ``keep`` events before it), so
        replay = checkpoint + tail. Returns how many events were removed."""
        return checkpoints.compact(self, keep)

    def verify(self) -> list[Difference]:
        """Differences between the replayed stream and the live keys, and broken invariants;
        empty when the cache is consistent."""
        return compare(self._replay(), self) + invariants(self)

    def stream_length(self) -> int:
        return int(self.client.xlen(self.keys.events))

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
