"""``AsyncCache``: :class:`~schedcache.cache.Cache` for asyncio, with the same names and
semantics (``await cache.assume_pod(pod, check_fit=True)``).

The commands are the sync cache's (``schedcache.store.commands`` builds them, the Lua library
applies them, :class:`~schedcache.store.store.StoreCore` turns replies into results and
errors); only the transport is redis.asyncio's. The replica lease is heartbeated by a task on
the running loop, cancelled by :meth:`AsyncCache.aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from schedcache.aio.batch import AsyncCommandBatch
from schedcache.aio.connection import sync_client_for
from schedcache.aio.store import AsyncStore
from schedcache.cache import EXPIRE_BATCH, Cache, cache_settings
from schedcache.errors import (
    FitConflict,
    NodeNotFound,
    PodAlreadyExists,
    PodNotFound,
    ValidationError,
)
from schedcache.history.verify import Difference
from schedcache.model.nodeinfo import Dump, NodeInfo
from schedcache.model.values import Node, Pod
from schedcache.store import commands, metrics
from schedcache.store.commands import Command
from schedcache.store.events import Event, decode_entry
from schedcache.store.fetch import node_infos_reads
from schedcache.store.gang import gang_claim, named_member
from schedcache.store.records import PodRecord, parse_pod_record
from schedcache.store.replies import UNCHECKED
from schedcache.store.responses import as_bytes, stream_entries
from schedcache.store.retry import DEFAULT_RETRY, RetryPolicy
from schedcache.store.store import sweep_reply
from schedcache.views.claims import ClaimRules, ranked_contexts, taken_node
from schedcache.views.gang import gang_context
from schedcache.views.nodetree import interleave, parse_tree
from schedcache.views.snapshot import Snapshot, SnapshotUpdate, update_reads

log = logging.getLogger(__name__)
T = TypeVar("T")


class AsyncLease:
    """The heartbeat of one replica's lease, as a task on the running loop."""

    def __init__(self, store: AsyncStore, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self.ttl_ms = max(1, round(ttl * 1000))
        self.interval = ttl / 3
        self.task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return self.store.keys.lease(self.store.replica)

    async def renew(self) -> None:
        pipe = self.store.client.pipeline(transaction=True)
        pipe.set(self.key, "1", px=self.ttl_ms)
        pipe.sadd(self.store.keys.replicas, self.store.replica)
        await pipe.execute()

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._beat(), name=f"schedcache-lease-{self.store.replica}"
            )

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.renew()
            except Exception as error:  # the heartbeat must outlive any outage
                log.warning(
                    "lease heartbeat of replica %s failed (%s: %s); trying again in %.1f s",
                    self.store.replica,
                    type(error).__name__,
                    error,
                    self.interval,
                )

    async def stop(self, release: bool = False) -> None:
        """Cancel the heartbeat (a renewal in flight is cancelled with it); ``release`` drops
        the lease at once."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.task = None
        if release:
            await self.store.client.delete(self.key)


class AsyncNodeTree:
    """:class:`~schedcache.views.nodetree.NodeTree` for asyncio: every call reads Redis."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store

    async def zones(self) -> dict[str, list[str]]:
        """Zone key -> node names, both in tree order."""
        return parse_tree(await self.store.read_function("tree_read"))[1]

    async def list(self) -> list[str]:
        """Every live node once, round robin across zones."""
        return interleave(list((await self.zones()).values()))

    async def num_nodes(self) -> int:
        return sum(len(nodes) for nodes in (await self.zones()).values())

    async def next(self) -> str:
        """The next node of the shared round-robin cursor; "" when the tree is empty (a
        command with an id, as the sync tree's)."""
        reply: bytes = await self.store.run(commands.tree_next())
        return reply.decode()


class AsyncCache:
    """One named cache for asyncio code; make it with :meth:`open` (``await
    AsyncCache.open(await connect_async(url), "prod", replica="sched-0")``) and close it with
    :meth:`aclose` (or ``async with``). Options as :class:`~schedcache.cache.Cache`'s."""

    def __init__(
        self, store: AsyncStore, ttl: float, lease_ttl: float, sync_client: Any = None
    ) -> None:
        self.store = store
        self.sync_client = sync_client
        self._twin: Cache | None = None
        self.ttl = ttl
        self.lease = AsyncLease(store, lease_ttl) if store.replica and lease_ttl > 0 else None
        # The snapshot a check_fit claim made without one judges its inter-pod rules on.
        self._claim_snapshot = Snapshot()
        self._claim_lock = asyncio.Lock()
        self.name: str = store.name
        self.keys = store.keys
        self.client = store.client
        self.replica: str = store.replica

    @classmethod
    async def open(
        cls,
        client: Any,
        name: str = "default",
        *,
        ttl: float = 30.0,
        replica: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        lease_ttl: float = 15.0,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        sync_client: Any = None,
        read_from: str = "primary",
    ) -> AsyncCache:
        """``sync_client``: a sync client of the same server, for the audit calls that fold the
        stream in a worker thread (replay, verify, checkpoints); needed only when ``client`` was
        made neither by :func:`connect_async` nor by fakeredis."""
        ttl, lease_ttl = cache_settings(name, ttl, lease_ttl)
        store = await AsyncStore.open(
            client,
            name,
            replica=replica,
            retry=retry,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            read_from=read_from,
        )
        return cls(store, ttl, lease_ttl, sync_client)

    async def __aenter__(self) -> AsyncCache:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self, release_lease: bool = False) -> None:
        """Cancel the lease heartbeat (the lease lapses after its ttl; ``release_lease``
        drops it at once). The client stays open: it is the caller's."""
        if self.lease is not None:
            await self.lease.stop(release=release_lease)
        twin, self._twin = self._twin, None
        if twin is not None and self.sync_client is None:  # the twin's client is ours
            await asyncio.to_thread(twin.client.close)

    # -- running commands ---------------------------------------------------------------

    async def run(self, command: Command) -> Any:
        """Run one command; after a cancellation or :class:`RetriesExhausted`, running the same
        command again settles it exactly once (while Redis remembers its id; a feeder's
        versioned change by its version: ``dropped repeated``)."""
        return await self.store.run(command)

    def batch(self, chunk_size: int = 200) -> AsyncCommandBatch:
        """Collect commands, apply them with few round trips (``async with cache.batch() as
        batch: batch.add_pod(pod)``); ``chunk_size`` commands per ``sc_batch`` call."""
        return AsyncCommandBatch(self, chunk_size=chunk_size)

    # -- pods -------------------------------------------------------------------------

    async def assume_pod(
        self,
        pod: Pod,
        check_fit: bool = False,
        expect_generation: int | None = None,
        snapshot: Snapshot | None = None,
        candidates: Sequence[str] = (),
        deadline: float | None = None,
    ) -> str:
        """Book ``pod`` on ``pod.node_name`` (or the first of ``candidates`` that passes every
        check) before binding and return the node (see :meth:`Cache.assume_pod`). With
        ``check_fit``, the pod's inter-pod rules are judged on ``snapshot`` (else, when
        needed, on a private one brought up to date here) and re-checked in Redis, as the sync
        cache does. ``deadline``: seconds; the claim gets that deadline in the same call."""
        rules: tuple[int | None, str, str, str, str] = (None, "", "", "", "")
        candidates = commands.candidate_names(pod, candidates)
        extra = [(node, "", "") for node in candidates]
        if check_fit and expect_generation is None:
            if snapshot is not None:
                pod, rules, extra = ranked_contexts(snapshot, pod, candidates)
            elif pod.has_inter_pod_rules:
                pod, rules, extra = await self._own_claim_context(pod, candidates)
        claim = commands.assume_pod(
            pod, check_fit, expect_generation, self.lease_to_take, *rules, extra
        )
        try:
            try:
                reply = await self.run(commands.timed_claim(claim, deadline))
            except FitConflict as conflict:
                if conflict.reasons != (UNCHECKED,) or rules[0] is not None:
                    raise
                # Pods with required anti-affinity are placed: judge their terms toward this
                # pod on the cache's own snapshot, and claim again with what that read.
                reply = await self.judged_claim(pod, candidates, deadline)
        except FitConflict as conflict:
            for reason in conflict.reasons:
                metrics.FIT_CONFLICTS.labels(reason).inc()
            raise
        self.hold_lease()
        return taken_node(reply, pod)

    async def judged_claim(
        self, pod: Pod, candidates: Sequence[str] = (), deadline: float | None = None
    ) -> Any:
        """Claim ``pod`` (``check_fit``) with its inter-pod rules judged on this cache's own
        snapshot, brought up to date; the script's reply (``[generation, node]`` when
        ``candidates`` were given, the judged claim's node: it may be a candidate's with none
        left to send). What a batch sends again for a bare claim Redis refused as ``unchecked``
        (pods with required anti-affinity are placed)."""
        command = await self.judged_claim_command(pod, candidates, deadline)
        reply = await self.run(command)
        return commands.judged_reply(reply, command, bool(candidates))

    async def judged_claim_command(
        self, pod: Pod, candidates: Sequence[str] = (), deadline: float | None = None
    ) -> Command:
        """The claim :meth:`judged_claim` sends, made but not sent (``Cache``'s)."""
        pod, rules, extra = await self._own_claim_context(pod, candidates)
        claim = commands.assume_pod(pod, True, None, self.lease_to_take, *rules, extra)
        return commands.timed_claim(claim, deadline)

    async def assume_gang(
        self, pods: Sequence[Pod], group: str, snapshot: Snapshot | None = None
    ) -> list[str]:
        """Book every pod of the pod group ``group`` on its node, all or nothing, in one call
        (see :meth:`Cache.assume_gang`); the members' nodes."""
        pods = list(pods)
        if snapshot is None:
            async with self._claim_lock:
                await self.store.run_reads(update_reads(self._claim_snapshot, self.name))
                context, members = gang_context(self._claim_snapshot, pods, group)
        else:
            context, members = gang_context(snapshot, pods, group)
        try:
            await self.run(gang_claim(group, members, self.lease_to_take, *context))
        except (FitConflict, PodAlreadyExists) as refused:
            metrics.GANG_CLAIMS.labels("refused").inc()
            raise named_member(refused, pods) from None
        metrics.GANG_CLAIMS.labels("placed").inc()
        self.hold_lease()
        return [pod.node_name for pod in pods]

    async def _own_claim_context(
        self, pod: Pod, candidates: Sequence[str] = ()
    ) -> tuple[Pod, ClaimRules, list[tuple[str, str, str]]]:
        """The inter-pod rules judged on this cache's own snapshot, brought up to date."""
        async with self._claim_lock:
            # (from the primary: a claim's answer must be current)
            await self.store.run_reads(update_reads(self._claim_snapshot, self.name))
            return ranked_contexts(self._claim_snapshot, pod, candidates)

    @property
    def lease_to_take(self) -> float:
        """The lease ttl while the heartbeat has not started (the claim takes the lease in the
        same script), else 0 (see :attr:`Cache.lease_to_take`)."""
        lease = self.lease
        return lease.ttl if lease is not None and lease.task is None else 0.0

    def hold_lease(self) -> None:
        """Heartbeat this replica's lease from now on, as a task on the running loop."""
        if self.lease is not None:
            self.lease.start()

    async def finish_binding(self, pod: Pod, now: float | None = None) -> None:
        await self.run(commands.finish_binding(pod, now, self.ttl))

    async def forget_pod(self, pod: Pod) -> None:
        await self.run(commands.forget_pod(pod))

    async def add_pod(self, pod: Pod) -> None:
        await self.run(commands.add_pod(pod))

    async def update_pod(self, old: Pod, new: Pod) -> None:
        await self.run(commands.update_pod(old, new))

    async def remove_pod(self, pod: Pod) -> None:
        await self.run(commands.remove_pod(pod))

    async def cleanup_assumed_pods(self, now: float | None = None) -> list[str]:
        """Expire the assumed pods whose deadline passed, in bounded batches."""
        expired: list[str] = []
        while True:
            reply = await self.run(commands.cleanup_assumed_pods(now, EXPIRE_BATCH))
            done, _, more = sweep_reply(self.name, "expire", reply, EXPIRE_BATCH)
            expired += done
            if not more:
                return expired

    async def get_pod(self, pod: Pod | str) -> Pod:
        return (await self.get_pod_record(pod)).pod

    async def get_pod_record(self, pod: Pod | str) -> PodRecord:
        uid, subject = Cache.pod_ref(pod)
        raw = await self.client.get(self.keys.pod(uid))
        if raw is None:
            raise PodNotFound(f"{subject} does not exist in the cache")
        return parse_pod_record(as_bytes(raw), self.keys.pod(uid))

    async def is_assumed_pod(self, pod: Pod | str) -> bool:
        uid, _ = Cache.pod_ref(pod)
        return bool(await self.client.sismember(self.keys.assumed, uid))

    async def pod_state(self, pod: Pod | str) -> str | None:
        try:
            return (await self.get_pod_record(pod)).state
        except PodNotFound:
            return None

    async def pod_count(self) -> int:
        return int(await self.client.scard(self.keys.pods))

    # -- nodes ------------------------------------------------------------------------

    async def add_node(self, node: Node) -> None:
        await self.run(commands.add_node(node))

    async def update_node(self, old: Node | None, new: Node) -> None:
        await self.run(commands.update_node(old, new))

    async def remove_node(self, node: Node | str) -> None:
        await self.run(commands.remove_node(node))

    async def get_node_info(self, name: str) -> NodeInfo:
        """One node's ``NodeInfo``; raises :class:`NodeNotFound` when there is no entry."""
        info = (await self.store.run_reads(node_infos_reads([name]))).get(name)
        if info is None:
            raise NodeNotFound(f"node {name} is not in the cache")
        return info

    async def update_snapshot(self, snap: Snapshot) -> SnapshotUpdate:
        """Bring ``snap`` up to the cache's generation, fetching only the nodes that changed
        (the sync cache's code, driven on this transport)."""
        return await self.store.run_snapshot_reads(
            lambda: update_reads(snap, self.name), lambda: (snap.incarnation, snap.generation)
        )

    def node_tree(self) -> AsyncNodeTree:
        """The zone-grouped tree of live nodes (``await tree.next()``, ``list()``, ``zones()``)."""
        return AsyncNodeTree(self.store)

    async def node_count(self) -> int:
        return int(await self.client.scard(self.keys.nodes))

    async def has_node(self, name: str) -> bool:
        return bool(await self.client.sismember(self.keys.nodes, name))

    # -- everything -------------------------------------------------------------------

    async def generation(self) -> int:
        return int(await self.client.get(self.keys.generation) or 0)

    async def stream_length(self) -> int:
        return int(await self.client.xlen(self.keys.events))

    async def events(
        self, start: str | None = None, end: str | None = None, count: int = 1000
    ) -> AsyncIterator[Event]:
        """The stream's events from ``start`` to ``end`` (ids, both included), in order."""
        low, high = start or "-", end or "+"
        while True:
            reply = await self.client.xrange(self.keys.events, low, high, count=count)
            entries = stream_entries(reply)
            for entry_id, raw in entries:
                yield decode_entry(entry_id, raw)
            if len(entries) < count:
                return
            low = "(" + entries[-1][0].decode()

    async def follow(self, after: str = "$", timeout: float = 1.0) -> AsyncIterator[Event]:
        """New events as they come (from after the id ``after``; ``"$"``: from now), for ever:
        stop by leaving the ``async for`` or cancelling the task."""
        block = max(1, round(timeout * 1000))
        while True:
            reply = await self.client.xread({self.keys.events: after}, block=block, count=500)
            for _, entries in list(reply or []):
                for entry_id, raw in stream_entries(entries):
                    event = decode_entry(entry_id, raw)
                    after = event.id
                    yield event

    # -- audit: folded in a worker thread ------------------------------------------------

    def _sync_twin(self) -> Cache:
        """The sync :class:`Cache` of the same name and server (made once, in a thread)."""
        if self._twin is None:
            client = self.sync_client or sync_client_for(self.client)
            if client is None:
                raise ValidationError(
                    f"cache {self.name}",
                    "sync_client",
                    "replay, verify and checkpoints fold the stream in a worker thread with a "
                    "sync client of the same server: open the client with connect_async(url), "
                    "or pass sync_client= to AsyncCache.open",
                )
            self._twin = Cache(
                client,
                self.name,
                ttl=self.ttl,
                replica=self.replica,
                retry=self.store.retry,
                lease_ttl=0,  # the lease is this cache's task's
            )
        return self._twin

    async def _in_thread(self, work: Callable[[Cache], T]) -> T:
        """``work(sync twin)`` in a worker thread: the fold is CPU work and its reads are many;
        the event loop goes on meanwhile."""
        return await asyncio.to_thread(lambda: work(self._sync_twin()))

    async def replay(
        self, until: str | None = None, progress: Callable[[int], None] | None = None
    ) -> Dump:
        """The state folded from the checkpoint and the stream (see :meth:`Cache.replay`)."""
        return await self._in_thread(lambda cache: cache.replay(until, progress))

    async def verify(self) -> list[Difference]:
        """Differences between the replayed stream and the live keys (see :meth:`Cache.verify`)."""
        return await self._in_thread(lambda cache: cache.verify())

    async def checkpoint(self) -> str:
        """Store the folded state at the stream's last event; that event's id."""
        return await self._in_thread(lambda cache: cache.checkpoint())

    async def compact(self, keep: int = 0) -> int:
        """Trim the stream before the checkpoint (see :meth:`Cache.compact`)."""
        return await self._in_thread(lambda cache: cache.compact(keep))

    async def at(self, event_id: str) -> Snapshot:
        """The cache just after event ``event_id`` as a snapshot (see :meth:`Cache.at`)."""
        return await self._in_thread(lambda cache: cache.at(event_id))

    async def dump(self) -> Dump:
        """Every node entry (ghosts included) with its pods, and the assumed set."""
        return await self._in_thread(lambda cache: cache.dump())

    async def history(self, pod: Pod | str) -> list[Event]:
        """The events of one pod (by uid), across nodes, in stream order."""
        return await self._in_thread(lambda cache: cache.history(pod))

    async def history_of_node(self, name: str) -> list[Event]:
        """The events that changed node ``name`` (its own and its pods'), in stream order."""
        return await self._in_thread(lambda cache: cache.history_of_node(name))

    async def list_pods(self, selector: str | dict[str, str] | None = None) -> list[Pod]:
        """Every pod whose labels match a kubectl-style selector (``app=web,tier!=db``)."""
        return await self._in_thread(lambda cache: cache.list_pods(selector))

    async def last_events(self, count: int) -> list[Event]:
        """The newest ``count`` events, oldest first."""
        entries = stream_entries(await self.client.xrevrange(self.keys.events, count=count))
        return [decode_entry(entry_id, raw) for entry_id, raw in reversed(entries)]

    pod_ref = staticmethod(Cache.pod_ref)
