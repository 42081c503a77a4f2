"""What the extender's verbs do on the shared cache (no HTTP here: :mod:`.server` serves it).

* **filter**: every candidate node is checked on a snapshot of the cache, brought up to date
  incrementally on each call (so all replicas' claims count, not only this scheduler's), with
  kube-scheduler's filter rules (:func:`schedcache.model.filters.filter_pod`; a pod without
  inter-pod rules, host ports or extended resources is judged on the snapshot's columns,
  :mod:`schedcache.views.columns`, and only the failing nodes node by node). Failures that
  preemption cannot cure (taints, unschedulable, node affinity/selector, a node the cache does
  not know) go to ``FailedAndUnresolvableNodes``, the others to ``FailedNodes``.
  The pod judged is the pending pods' watch's decoded copy when the body's uid and
  resourceVersion are that copy's (:meth:`Extender.filter_args`), else the body's, decoded.
* **prioritize**: 0–10 per node: the default profile's weighted scores
  (:func:`schedcache.model.plugins.registry.score_nodes`, on the columns likewise where the pod
  and the cluster allow) scaled so the best candidate scores 10.
* **bind**: ``assume_pod(check_fit=True)``: the claim is checked inside Redis against the live
  node, so two replicas can never overfill it; then the Binding through the API server; then
  ``finish_binding``. A fit conflict answers an error and writes nothing (kube-scheduler
  forgets the pod and retries it); a failed API call forgets the claim.

The pod a bind claims is the API server's: never one remembered from ``/filter`` (a caller could
send any requests there). With ``pending`` (:class:`.pending.PendingPods`, the extender's
list-watch of the unscheduled pods, on by default with an API server) a bind whose uid, name and
namespace are a watched pod's claims that copy, decoded at watch time, as kube-scheduler binds
the pod its informer holds (no API GET, no decoding on the bind's path; what a lagging copy
means: pending.py); else the pod is read at bind time. With ``bind_pod_from_filter``
(``--bind-pod-from-filter``), a bind the watch cannot serve whose uid a filter or prioritize
call of this extender decoded lately claims that pod, as kube-scheduler binds the pod object it
scheduled, without reading it (an API GET a bind saved); a caller of ``/filter`` is then trusted
as kube-scheduler is (docs/security.md). Kept by uid, the last ``FILTERED_PODS`` pods of at most
256 labels and annotations and ``KEPT_POD_BYTES`` of JSON (several kube-scheduler clients on one
extender), each taken by its bind; any other bind reads the pod. Either way its name, namespace
and uid must all match the bind, its ``schedulerName`` must be served (``scheduler_names``;
empty: all) and it must not be bound yet. Errors name only what the caller sent (no uid, no
response header). A Binding whose outcome is unknown (5xx, timeout, connection lost) is settled
by reading where the pod is, as the 409 path does. The claim gets a deadline ``bind_timeout``
away in the claim's own call (``Cache.assume_pod(deadline=)``), so it never outlives an
unfinished bind; once bound, the pod keeps at least the cache's ttl for ``sync`` to confirm it
(the deadline moves to the ttl when less is left: with the defaults, 60 s and 30 s, a bind costs
Redis one call); a claim that must go and cannot be forgotten now (Redis away) is retried in the
background until it lands (:mod:`.forgetter`). Without an API server (``--no-api``: tests, dry
runs) the pod is the filter call's, remembered by uid within ``remember_bytes``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Counter
from redis.exceptions import RedisError

from schedcache.cache import Cache
from schedcache.errors import CacheError, FitConflict, RetriesExhausted
from schedcache.extender import protocol
from schedcache.extender.forgetter import Forgetter
from schedcache.extender.nominate import hold_nomination
from schedcache.extender.protocol import MAX_SCORE, BindArgs, FilterArgs
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import score_nodes
from schedcache.model.plugins.result import FITS
from schedcache.model.values import Pod
from schedcache.store.commands import DEFAULT_SCHEDULER
from schedcache.views import columns as kept_bounds
from schedcache.views.columns import Columns, Ints
from schedcache.views.snapshot import Snapshot

#: The largest total prioritize scales on int64 arrays (MAX_SCORE times it fits int64).
SCALABLE_TOTAL = (2**63 - 1) // MAX_SCORE

if TYPE_CHECKING:
    from schedcache.extender.pending import PendingPods

log = logging.getLogger(__name__)

UNKNOWN_NODE = "node(s) not found in the scheduler cache"
# Seconds after a pod's filter call within which its prioritize call scores on the snapshot
# the filter brought up to date (kube-scheduler sends both in one cycle, milliseconds apart).
SAME_CYCLE = 1.0
# --bind-pod-from-filter: how many filtered pods are kept for their binds (kube-scheduler binds
# asynchronously, so a client may filter the next pods before the last one's bind arrives).
FILTERED_PODS = 64
# A pod's JSON at most, to be kept: decoded, a pod takes up to ~3x its JSON (203 KiB measured
# for 64 KiB of node-affinity terms), so 64 kept hold ~3 MiB at most; real pods are a few KiB.
KEPT_POD_BYTES = 16 * 1024
BIND_PODS = Counter(
    "schedcache_extender_bind_pods_total",
    "Binds by where their pod came from: the pending pods' watch, the filter call "
    "(--bind-pod-from-filter) or the API server read at bind time.",
    ["source"],
)


class Binder(Protocol):
    """The API server side of a bind (``schedcache.scheduler.binder.ApiBinder``)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...


class Refused(Exception):
    """A bind answered with ``Error``; the message names only what the caller sent."""


class Extender:
    """The three verbs over one cache; thread-safe (the server calls it from thread pools)."""

    def __init__(
        self,
        cache: Cache,
        binder: Binder | None = None,
        remember_bytes: int = 32 * 1024 * 1024,
        scheduler_names: frozenset[str] = frozenset(),
        forgetter: Forgetter | None = None,
        bind_timeout: float = 60.0,
        bind_pod_from_filter: bool = False,
        pending: PendingPods | None = None,
    ) -> None:
        self.cache = cache
        self.binder = binder
        self.snapshot = Snapshot()
        self.snapshot_lock = threading.Lock()
        # The snapshot's columns: filter and prioritize judge a plain pod on arrays
        # (views/columns.py), refreshed from the nodes each update changed.
        self.columns = Columns(percentage=100)
        self.pods: OrderedDict[str, bytes] = OrderedDict()  # --no-api only: uid -> pod JSON
        self.pods_bytes = 0
        self.pods_lock = threading.Lock()
        self.remember_bytes = remember_bytes
        self.scheduler_names = scheduler_names
        self.forgetter = forgetter or Forgetter(cache)
        self.bind_timeout = bind_timeout
        # The pod of the last filter call and when its snapshot update was: its prioritize
        # call reuses that snapshot (_same_cycle).
        self.filtered: tuple[str, float] = ("", 0.0)
        # Each column row's HostPriorityList item start, for the columns' node list it was
        # written for (_host_starts).
        self._starts: tuple[list[str], list[str | None]] = ([], [])
        # The HostPriorityList pieces (protocol.host_items) of the kept rows of names sent again
        # (Columns._rows_named: the same read-only array for the same names), by the array's
        # id: the newest KEPT_LISTS, each holding its array (so no id is reused meanwhile) and
        # the columns' node list it was written for (_host_items).
        self._items: OrderedDict[int, tuple[Ints, list[str], list[str]]] = OrderedDict()
        # The JSON of the filter answers that passed every name, by the names (recurring).
        self.passed = protocol.AllPassed()
        # bind_pod_from_filter: uid -> the pod filter or prioritize decoded, and its
        # spec.schedulerName (the bind checks it as it checks the API server's pod).
        self.bind_pod_from_filter = bind_pod_from_filter and binder is not None
        self.decoded: OrderedDict[str, tuple[Pod, str]] = OrderedDict()
        # The pending pods' watch (pending.py): the API server's pods, decoded ahead of binds
        # (and of filter and prioritize calls: filter_args).
        self.pending = pending if binder is not None else None
        self.known = self.pending.decoded if self.pending is not None else None

    # -- filter and prioritize ------------------------------------------------------------

    def filter_args(self, document: Mapping[str, Any]) -> FilterArgs:
        """A filter or prioritize request's arguments: its pod is the pending pods' watch's
        decoded copy when the body's uid and resourceVersion are that copy's (the object at
        that version: kube-scheduler sends its informer's), else decoded from the body
        (``protocol.LastPod``: prioritize reuses its filter's). No memory is added for
        either: the watch's pods are bounded by it (pending.py), LastPod holds one pod."""
        return protocol.filter_args(document, self.known)

    def filter(self, args: FilterArgs) -> dict[str, Any]:
        answer = self.filter_answer(args, written=False)
        assert isinstance(answer, dict)
        return answer

    def filter_answer(self, args: FilterArgs, written: bool = True) -> dict[str, Any] | bytes:
        """filter's ExtenderFilterResult; for the server (``written``), when every named node
        passed and the names came as ``NodeNames``, as its JSON (``protocol.AllPassed``: the
        bytes ``protocol.encode`` writes, from the names' JSON kept)."""
        self._remember(args)
        self._keep(args)
        hold_nomination(self.cache, args)  # a nominated preemptor (docs/preemption.md)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        with self.snapshot_lock:
            self.cache.update_snapshot(self.snapshot)
            self.filtered = (args.pod.uid, time.monotonic())
            verdicts = self.columns.filter_names(args.pod, self.snapshot, args.node_names)
            # Under the lock still: it serialises the verbs' CPU work, which keeps /healthz
            # answering under a flood (tests/test_extender_memory.py).
            # Often every node fits (the one shared FITS verdict): then one comprehension
            # answers; else each verdict in turn, in the caller's order.
            if verdicts.count(FITS) == len(verdicts):  # one pass in C
                if written and not args.full_nodes:
                    return self.passed.encode(args.node_names)
                return protocol.filter_result(args, list(args.node_names), failed, unresolvable)
            passed = []
            for name, result in zip(args.node_names, verdicts, strict=True):
                if result is None:
                    unresolvable[name] = UNKNOWN_NODE
                elif not result.reasons:
                    passed.append(name)
                elif result.unresolvable:
                    unresolvable[name] = ", ".join(result.reasons)
                else:
                    failed[name] = ", ".join(result.reasons)
        return protocol.filter_result(args, passed, failed, unresolvable)

    def prioritize(self, args: FilterArgs) -> list[dict[str, Any]]:
        return protocol.host_priorities(self.prioritize_scores(args))

    def prioritize_answer(self, args: FilterArgs) -> bytes:
        """prioritize's HostPriorityList, written: the bytes ``protocol.encode_scores`` writes
        for :meth:`prioritize_scores`. When every name is a live node named once and the
        columns judge the pod alone (``Columns.score_rows``: kube-scheduler's call, often),
        the scores are scaled on the arrays and written from each node's kept start
        (:meth:`_host_starts`), with no dict and no Python step per host."""
        self._remember(args)
        self._keep(args)
        with self.snapshot_lock:
            if not self._same_cycle(args.pod):
                self.cache.update_snapshot(self.snapshot)
            names = args.node_names
            found = self.columns.score_rows(args.pod, self.snapshot, names)
            # (no total below 0, nor one that MAX_SCORE times would pass int64: found in
            # review, a hostile pod's totals wrapped there and scaled otherwise)
            if (
                found is not None
                and int(found[1].min()) >= 0
                and int(found[1].max()) <= SCALABLE_TOTAL
            ):
                rows, totals = found
                best = int(totals.max())
                # scaled()'s integers, 0 to MAX_SCORE (all 0 when the best is)
                points = MAX_SCORE * totals // best if best else totals * 0
                return protocol.encode_items(self._host_items(rows), points.tolist())
            totaled = self.columns.score_names(args.pod, self.snapshot, names)
            return protocol.encode_scores(scaled(totaled, names))

    def _host_items(self, rows: Ints) -> list[str]:
        """The HostPriorityList pieces of the columns' ``rows`` (:func:`protocol.host_items`),
        kept for rows that recur (a read-only array: the columns' kept rows of names sent
        again, ``Columns._rows_named``): ~0.3 ms at 5,000 names. Under the snapshot lock."""
        names = self.columns.names
        kept = self._items.get(id(rows))
        if kept is not None and kept[0] is rows and kept[1] is names:
            self._items.move_to_end(id(rows))
            return kept[2]
        items = protocol.host_items(self._host_starts(rows.tolist()))
        if not rows.flags.writeable:
            self._items[id(rows)] = (rows, names, items)
            if len(self._items) > kept_bounds.KEPT_LISTS:
                self._items.popitem(last=False)
        return items

    def _host_starts(self, rows: list[int]) -> list[str]:
        """The HostPriorityList item start (``protocol.host_start``) of each of the columns'
        ``rows``, each written once while the columns' node list stands (a node name each:
        bounded by the cluster). Under the snapshot lock."""
        names = self.columns.names
        kept_for, kept = self._starts
        if kept_for is not names:  # the columns were rebuilt: other rows
            kept = [None] * len(names)
            self._starts = (names, kept)
        starts = list(map(kept.__getitem__, rows))
        if None in starts:
            for at, row in enumerate(rows):
                if starts[at] is None:
                    starts[at] = kept[row] = protocol.host_start(names[row])
        return starts  # type: ignore[return-value]  # (no None left)

    def prioritize_scores(self, args: FilterArgs) -> dict[str, int]:
        """prioritize's scores, host -> 0-10 in the call's order: the server writes them with
        :func:`protocol.encode_scores`, without a dict per host."""
        self._remember(args)
        self._keep(args)
        with self.snapshot_lock:
            if not self._same_cycle(args.pod):
                self.cache.update_snapshot(self.snapshot)
            totals = self.columns.score_names(args.pod, self.snapshot, args.node_names)
            return scaled(totals, args.node_names)

    def _same_cycle(self, pod: Pod) -> bool:
        """Whether the snapshot was brought up to date for this pod's filter call just now:
        then its prioritize scores on that snapshot, as kube-scheduler filters and scores one
        cycle on one snapshot (one Redis read a pod saved; the bind re-checks in Redis)."""
        uid, at = self.filtered
        return bool(uid) and uid == pod.uid and time.monotonic() - at < SAME_CYCLE

    # -- bind -----------------------------------------------------------------------------

    def bind(self, args: BindArgs) -> dict[str, str]:
        who = f"pod {args.pod_namespace}/{args.pod_name}"
        try:
            pod = self._authoritative(args)
        except Refused as refused:
            return protocol.bind_result(f"{who}: {refused}")
        placed = pod.with_node(args.node)
        # With an API server the claim gets its bind-timeout deadline in the same call
        # (lua/timed_claim.lua): whatever becomes of this bind, the claim is released then.
        deadline = None if self.binder is None else self.bind_timeout
        claimed_at = time.monotonic()  # no later than Redis set the deadline
        try:
            self._claim(placed, deadline)
        except FitConflict as conflict:
            return protocol.bind_result(f"{conflict}; retry the pod")
        except RetriesExhausted:  # Redis away: the server answers 503
            raise
        except CacheError as error:
            return protocol.bind_result(f"{who}: {error}")
        if self.binder is None:
            self.cache.finish_binding(placed)
            with self.pods_lock:
                self._drop(pod.uid)
            return protocol.bind_result()
        try:
            self._binding(args, placed)
        except Refused as refused:
            return protocol.bind_result(f"binding {who}: {refused}")
        if time.monotonic() - claimed_at + self.cache.ttl <= self.bind_timeout:
            # The claim's deadline still leaves the bound pod the cache's ttl (or more) for
            # sync to confirm it: moving it would only shorten it, for a Redis call a bind.
            return protocol.bind_result()
        try:
            self.cache.finish_binding(placed)
        except (RetriesExhausted, RedisError) as error:
            # The pod is bound: say so. The claim keeps its bind-timeout deadline until the
            # sync feed confirms the pod (or the deadline releases it, as a ttl would).
            log.warning("%s bound, but its deadline was not moved to the ttl: %s", who, error)
        return protocol.bind_result()

    def _claim(self, pod: Pod, deadline: float | None) -> None:
        """The claim, fit-checked. A pod without rules of its own is claimed bare while the
        snapshot knows no placed pod with required anti-affinity (Redis then takes the bare
        claim, and refuses it as ``unchecked`` should such a pod have been placed since:
        ``Cache.assume_pod`` judges it then). Any other pod's rules (existing pods'
        anti-affinity included) are judged on the snapshot caught up now, which Redis
        re-checks; under the snapshot's lock, since the judgement reads the snapshot's pod
        index (model/plugins/podindex.py), which other requests' catch-ups change."""
        if (
            not pod.has_inter_pod_rules
            and not self.snapshot.have_pods_with_required_anti_affinity_list
        ):
            self.cache.assume_pod(pod, check_fit=True, deadline=deadline)
            return
        with self.snapshot_lock:
            self.cache.update_snapshot(self.snapshot)
            self.cache.assume_pod(pod, check_fit=True, snapshot=self.snapshot, deadline=deadline)

    def _binding(self, args: BindArgs, placed: Pod) -> None:
        """The Binding; its outcome settled. Refused (and the claim forgotten, or left to the
        bind timeout when even where the pod is cannot be read) unless the pod is bound there."""
        assert self.binder is not None
        node = args.node
        try:
            self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, node)
            return
        except Exception as error:
            status = getattr(error, "status", None)
            failure = _api_failure(error)
            if isinstance(status, int) and 400 <= status < 500:  # refused: nothing applied
                self.forgetter.forget(placed)
                raise Refused(failure) from None
        # Unknown outcome (5xx after the Binding may have been applied, a timeout, a lost
        # connection): where is the pod now?
        try:
            where = self._bound_to(args)
        except Exception:
            # Neither bound nor not: the claim stays, with its bind-timeout deadline, for the
            # sync feed to confirm or the expiry worker to release.
            raise Refused(f"{failure}; the outcome is unknown, the claim is kept") from None
        if where == node:
            return
        self.forgetter.forget(placed)
        raise Refused(failure)

    def _bound_to(self, args: BindArgs) -> str:
        assert self.binder is not None
        raw = self.binder.read_pod(args.pod_namespace, args.pod_name)
        metadata, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        if metadata.get("uid") != args.pod_uid:
            return ""
        return str(spec.get("nodeName") or "")

    def _authoritative(self, args: BindArgs) -> Pod:
        """The pod to claim, checked against the bind: see the module docstring."""
        kept = self._kept(args)  # taken either way: the watched copy comes first
        watched = self._watched(args)
        if watched is not None:
            kept = watched
        if kept is not None:
            BIND_PODS.labels("watch" if watched is not None else "filter").inc()
            pod, served = kept
            if self.scheduler_names and served not in self.scheduler_names:
                raise Refused("its schedulerName is not served by this extender")
            if pod.node_name:
                raise Refused("already bound to a node")
            return pod
        BIND_PODS.labels("api" if self.binder is not None else "filter").inc()
        raw = self._read(args)
        metadata = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
            raise Refused("the pod is malformed")
        if (metadata.get("namespace") or "default", metadata.get("name")) != (
            args.pod_namespace,
            args.pod_name,
        ):
            raise Refused("the name or namespace does not match the pod's")
        if metadata.get("uid") != args.pod_uid:
            raise Refused("the uid does not match the pod's")
        served = spec.get("schedulerName") or DEFAULT_SCHEDULER
        if self.scheduler_names and served not in self.scheduler_names:
            raise Refused("its schedulerName is not served by this extender")
        if spec.get("nodeName"):
            raise Refused("already bound to a node")
        try:
            return Pod.from_k8s(raw)
        except (CacheError, ValueError) as error:
            raise Refused(str(error)) from None

    def _read(self, args: BindArgs) -> Mapping[str, Any]:
        if self.binder is None:
            with self.pods_lock:
                blob = self.pods.get(args.pod_uid)
            if blob is None:
                raise Refused(
                    "not seen in a filter call, and no API server to read it from (--kubeconfig)"
                )
            value: Mapping[str, Any] = json.loads(blob)
            return value
        try:
            return self.binder.read_pod(args.pod_namespace, args.pod_name)
        except Exception as error:
            if getattr(error, "status", None) == 404:
                raise Refused("not found in the API server") from None
            raise Refused(f"reading it: {_api_failure(error)}") from None

    def _keep(self, args: FilterArgs) -> None:
        """``bind_pod_from_filter`` only: the pod this call judged, for its bind (at most
        FILTERED_PODS, the newest; none of over KEPT_POD_BYTES of JSON, nor one decoded from a
        body of over 256 labels and annotations, whose JSON LastPod does not write: the
        watch's copy of such a pod is kept, its size known)."""
        if not self.bind_pod_from_filter:
            return
        pod = args.pod
        if not pod.uid:
            return
        if not 0 < args.pod_bytes <= KEPT_POD_BYTES:
            with self.pods_lock:
                self.decoded.pop(pod.uid, None)  # an older copy must not stand in for it
            return
        spec = args.raw_pod.get("spec")
        served = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        if served is not None and not isinstance(served, str):
            with self.pods_lock:  # refused at bind as the API server's pod would be
                self.decoded.pop(pod.uid, None)
            return
        entry = (pod, served or DEFAULT_SCHEDULER)
        with self.pods_lock:
            self.decoded[pod.uid] = entry
            self.decoded.move_to_end(pod.uid)
            while len(self.decoded) > FILTERED_PODS:
                self.decoded.popitem(last=False)

    def _watched(self, args: BindArgs) -> tuple[Pod, str] | None:
        """The pending pods' watch's copy of this bind's uid, when its name and namespace are
        the bind's too and the watch is current (pending.py)."""
        if self.pending is None:
            return None
        entry = self.pending.get(args.pod_uid)
        if entry is None or (entry.pod.namespace, entry.pod.name) != (
            args.pod_namespace,
            args.pod_name,
        ):
            return None
        return entry.pod, entry.served

    def _kept(self, args: BindArgs) -> tuple[Pod, str] | None:
        """The pod filter or prioritize decoded for this bind's uid, taken (a retried bind
        reads the API server's), when its name and namespace are the bind's too."""
        if not self.bind_pod_from_filter:
            return None
        with self.pods_lock:
            kept = self.decoded.pop(args.pod_uid, None)
        if kept is None or (kept[0].namespace, kept[0].name) != (
            args.pod_namespace,
            args.pod_name,
        ):
            return None
        return kept

    def _remember(self, args: FilterArgs) -> None:
        """``--no-api`` only: the filter's pod, for the bind (bounded by its JSON's bytes)."""
        if self.binder is not None or not self.remember_bytes:
            return
        blob = json.dumps(args.raw_pod, separators=(",", ":")).encode()
        if len(blob) > self.remember_bytes:
            return
        uid = args.pod.uid
        with self.pods_lock:
            self._drop(uid)
            self.pods[uid] = blob
            self.pods_bytes += len(blob)
            while self.pods_bytes > self.remember_bytes:
                _, old = self.pods.popitem(last=False)
                self.pods_bytes -= len(old)

    def _drop(self, uid: str) -> None:
        old = self.pods.pop(uid, None)
        if old is not None:
            self.pods_bytes -= len(old)


def _api_failure(error: Exception) -> str:
    """What the API server answered, without its headers or body (they may carry what the
    caller did not send)."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status:
        reason = getattr(error, "reason", "") or ""
        return f"the API server answered {status} {reason}".rstrip()
    return f"the API server did not answer ({type(error).__name__})"


def scores(
    pod: Pod, infos: list[tuple[str, NodeInfo | None]], cycle: Cycle | None = None
) -> dict[str, int]:
    """0-10 per node: the default profile's weighted scores (``registry.score_nodes``, judged in
    ``cycle``: the snapshot's whole cluster) scaled by :func:`scaled`; unknown nodes score 0."""
    known = [info for _, info in infos if info is not None and info.node is not None]
    if cycle is None:
        cycle = Cycle(pod, known)
    return scaled(score_nodes(pod, known, cycle), [name for name, _ in infos])


def scaled(totals: Mapping[str, int], names: list[str]) -> dict[str, int]:
    """0-10 per name of ``names``: its weighted score in ``totals`` scaled so the best scores
    10, as upstream's DefaultNormalizeScore scales; a name without one scores 0."""
    best = max(totals.values(), default=0)
    if not best:
        return dict.fromkeys(names, 0)
    get = totals.get
    return {name: MAX_SCORE * get(name, 0) // best for name in names}
