"""``schedcache scheduler``: a reference scheduler replica in Python, on the shared cache.

The loop users copy, kept short: watch the pending pods that name this scheduler, and for each
one — place it on a fresh snapshot (``Columns.place``: upstream's sample of the nodes filtered
and scored, vectorised, views/columns.py), claim the best with ``assume_pod(check_fit=True)``
(checked in Redis against the live node, so N replicas never overfill it), and hand the
Binding to a bounded pool, as kube-scheduler's binding cycle: the next pod is placed meanwhile
on a snapshot that already counts the claim; ``finish_binding`` when the Binding answers, else
the claim is forgotten and the pod backs off. A fit conflict (another replica was first) tries
again on a refreshed snapshot.
The cache learns the binding from ``schedcache sync`` (confirming the claim); until then the
claim holds the room, and expires after the cache's ttl if the pod never shows up bound.

A pod that could not be placed is handled as kube-scheduler's queue does: its reasons per node
are logged once per attempt in upstream's summary form (``0/12 nodes are available: 3
Insufficient cpu, 9 node(s) had untolerated taint {k: v}.``), the pod gets a
``PodScheduled=False`` condition with reason ``Unschedulable`` and that message (a patch of
``pods/status``), and it backs off, 1 s doubling to 10 s (upstream's podInitialBackoffSeconds
and podMaxBackoffSeconds), unless a cluster change that could help (a node added or updated, a
pod removed, a claim forgotten or expired: the cache's event stream) wakes it first. With the
API server away, the pending-pod watch backs off (1 s doubling to 30 s) rather than warning
every second.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
import urllib3
from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from schedcache.cache import Cache
from schedcache.errors import CacheError, FitConflict, PodAlreadyExists, ValidationError
from schedcache.extender.binder import ApiBinder
from schedcache.model.plugins.result import fit_error
from schedcache.model.values import Pod
from schedcache.views.columns import Columns
from schedcache.views.snapshot import Snapshot

log = logging.getLogger(__name__)

PENDING = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"
# upstream's podInitialBackoffSeconds / podMaxBackoffSeconds
POD_INITIAL_BACKOFF = 1.0
POD_MAX_BACKOFF = 10.0
# The pending-pod watch while the API server is away.
API_MAX_BACKOFF = 30.0
# Cache events after which a pod no node could take may fit (upstream's queueing hints for
# NodeResourcesFit, TaintToleration, NodeAffinity, NodePorts: node added or updated, an
# assigned pod deleted or scaled down).
HELPFUL_EVENTS = frozenset(
    {"NodeAdded", "NodeUpdated", "PodRemoved", "PodForgotten", "PodExpired", "PodUpdated"}
)
# Bindings in flight at once (kube-scheduler binds each pod in a goroutine of its own; a
# bounded pool here, the loop waits when it is full).
BINDING_WORKERS = 16


def unschedulable_condition(message: str, now: datetime | None = None) -> dict[str, Any]:
    """The ``pods/status`` patch upstream writes for a pod it could not place."""
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": moment,
    }
    return {"status": {"conditions": [condition]}}


@dataclass
class Outcome:
    """What one scheduling attempt did: ``node`` claimed (its Binding handed to the pool),
    else ``reason`` (``unschedulable``: no node could take the pod, ``reason`` then upstream's
    FitError message)."""

    node: str = ""
    reason: str = ""
    conflicts: int = 0
    unschedulable: bool = False


@dataclass
class _Waiting:
    pod: Pod
    due: float  # monotonic time of the next attempt
    attempts: int


class ReferenceScheduler:
    """One replica; ``run()`` until ``stop`` is set. ``retry_delay``: the first back-off of a
    pod that could not be placed, doubling to ``max_backoff``; ``percentage``: upstream's
    percentageOfNodesToScore (0: adaptive); ``binding_workers``: Bindings in flight."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        scheduler_name: str,
        attempts: int = 3,
        watch_timeout: int = 60,
        retry_delay: float = POD_INITIAL_BACKOFF,
        max_backoff: float = POD_MAX_BACKOFF,
        api_max_backoff: float = API_MAX_BACKOFF,
        percentage: int = 0,
        binding_workers: int = BINDING_WORKERS,
    ) -> None:
        self.cache = cache
        self.api = api
        self.binder = ApiBinder(api)
        self.scheduler_name = scheduler_name
        self.attempts = attempts
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self.max_backoff = max_backoff
        self.api_max_backoff = api_max_backoff
        self.snapshot = Snapshot()
        self.columns = Columns(percentage)
        self.binding = ThreadPoolExecutor(binding_workers, thread_name_prefix="schedcache-bind")
        self._in_flight = threading.BoundedSemaphore(binding_workers)
        self.pending: queue.Queue[Pod] = queue.Queue()
        self.stop = threading.Event()
        self.bound = 0
        self.conflicts = 0
        self.unschedulable = 0  # attempts that found no node
        self.lost = 0  # pods another replica claimed first (every replica sees every pod)
        self.api_errors = 0  # failed lists or watches of pending pods
        self._lock = threading.Lock()
        self._queued: set[str] = set()  # uids in ``pending``
        self._waiting: dict[str, _Waiting] = {}  # backing off, by uid
        self._failures: dict[str, int] = {}  # attempts in a row that failed, by uid
        self._reported: dict[str, str] = {}  # the Unschedulable message last patched, by uid

    # -- scheduling one pod ----------------------------------------------------------------

    def schedule_one(self, pod: Pod) -> Outcome:
        """Place, claim, hand the Binding to the pool; placed again after a conflict."""
        outcome = Outcome()
        for _ in range(self.attempts):
            self.cache.update_snapshot(self.snapshot)
            placement = self.columns.place(pod, self.snapshot)
            if not placement.node:
                outcome.unschedulable = True
                outcome.reason = fit_error(placement.nodes, placement.reasons)
                return outcome
            placed = pod.with_node(placement.node)
            # The snapshot carries the claim's inter-pod rules; a pod without any, in a cluster
            # without required anti-affinity, claims bare (Redis refuses it as unchecked if
            # such a pod was placed since, and assume_pod then judges it).
            judged = (
                pod.has_inter_pod_rules or self.snapshot.have_pods_with_required_anti_affinity_list
            )
            try:
                self.cache.assume_pod(
                    placed, check_fit=True, snapshot=self.snapshot if judged else None
                )
            except FitConflict:
                outcome.conflicts += 1
                self.conflicts += 1
                continue
            self._in_flight.acquire()  # the pool is bounded: wait for a Binding to answer
            self.binding.submit(self._bind, placed)
            outcome.node = placement.node
            return outcome
        outcome.reason = f"{outcome.conflicts} conflicts in a row"
        return outcome

    def _bind(self, placed: Pod) -> None:
        """The binding cycle, in the pool: bind, then ``finish_binding``; a failed Binding
        forgets the claim and the pod backs off."""
        try:
            try:
                self.binder.bind(placed.namespace, placed.name, placed.uid, placed.node_name)
            except ApiException as error:
                self._binding_failed(placed, f"{error.status} {error.reason}")
                return
            except (urllib3.exceptions.HTTPError, OSError) as error:  # the API server away
                self._binding_failed(placed, f"{type(error).__name__}: {_short(error)}")
                return
            self.cache.finish_binding(placed)
            with self._lock:
                self.bound += 1
                self._failures.pop(placed.uid, None)
                self._reported.pop(placed.uid, None)
        except (CacheError, redis.RedisError, OSError) as error:
            log.warning("pod %s/%s: binding cycle: %s", placed.namespace, placed.name, error)
        finally:
            self._in_flight.release()

    def _binding_failed(self, placed: Pod, why: str) -> None:
        self.cache.forget_pod(placed)
        delay = self._back_off(placed.with_node(""))
        log.info(
            "pod %s/%s not scheduled: binding failed: %s (retry in %.1f s)",
            placed.namespace,
            placed.name,
            why,
            delay,
        )

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Watch pending pods and the cache's events in two threads, schedule in this one."""
        helpers = [
            threading.Thread(target=target, name=f"schedcache-{name}", daemon=True)
            for target, name in ((self._watch, "pending"), (self._follow, "events"))
        ]
        for helper in helpers:
            helper.start()
        try:
            self._schedule_until_stopped()
        finally:
            self.stop.set()
            self.binding.shutdown(wait=True)  # the Bindings in flight answer (or time out)
            helpers[1].join(2.0)  # the event follower blocks a second at most

    def _schedule_until_stopped(self) -> None:
        while not self.stop.is_set():
            self._release_due()
            try:
                pod = self.pending.get(timeout=0.1)
            except queue.Empty:
                continue
            with self._lock:
                self._queued.discard(pod.uid)
            try:
                # A pod tried before may have been claimed meanwhile (by this replica or
                # another): ask the cache. A first try goes straight to the claim, which
                # refuses a pod claimed already (PodAlreadyExists): one round trip less a pod.
                if pod.uid in self._failures and self.cache.pod_state(pod) is not None:
                    continue
                outcome = self.schedule_one(pod)
            except PodAlreadyExists:  # another replica claimed it meanwhile: its pod now
                self.lost += 1
                continue
            except CacheError as error:
                log.warning("pod %s/%s: %s", pod.namespace, pod.name, error)
                self._back_off(pod)
                continue
            if outcome.node:
                continue
            delay = self._back_off(pod)
            if outcome.unschedulable:
                self.unschedulable += 1
                log.info(
                    "pod %s/%s unschedulable: %s (retry in %.1f s or on a cluster change)",
                    pod.namespace,
                    pod.name,
                    outcome.reason,
                    delay,
                )
                self._report(pod, outcome.reason)
            else:
                log.info(
                    "pod %s/%s not scheduled: %s (retry in %.1f s)",
                    pod.namespace,
                    pod.name,
                    outcome.reason,
                    delay,
                )

    def _back_off(self, pod: Pod) -> float:
        """Hold ``pod`` back: ``retry_delay`` doubling per failure in a row, to
        ``max_backoff`` (upstream's backoff queue). Returns the delay."""
        with self._lock:
            failures = self._failures.get(pod.uid, 0) + 1
            self._failures[pod.uid] = failures
            delay = float(min(self.max_backoff, self.retry_delay * 2 ** (failures - 1)))
            self._waiting[pod.uid] = _Waiting(pod, time.monotonic() + delay, failures)
        return delay

    def _release_due(self) -> None:
        """Queue the pods whose back-off is over."""
        now = time.monotonic()
        with self._lock:
            due = [uid for uid, waiting in self._waiting.items() if waiting.due <= now]
            for uid in due:
                self._enqueue(self._waiting.pop(uid).pod)

    def wake(self) -> int:
        """A cluster change that could help: every backing-off pod is tried at once (returns
        how many)."""
        with self._lock:
            for waiting in self._waiting.values():
                waiting.due = 0.0
            return len(self._waiting)

    def _enqueue(self, pod: Pod) -> None:
        """Queue ``pod`` unless it is queued already (lock held)."""
        if pod.uid not in self._queued:
            self._queued.add(pod.uid)
            self.pending.put(pod)

    def _report(self, pod: Pod, message: str) -> None:
        """Tell the pod, as upstream does: ``PodScheduled=False``, reason ``Unschedulable``;
        not again while the message is the same (upstream skips a patch that changes nothing)."""
        with self._lock:
            if self._reported.get(pod.uid) == message:
                return
        try:
            self.api.patch_namespaced_pod_status(
                pod.name,
                pod.namespace,
                unschedulable_condition(message),
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=(5, 10),
            )
        except Exception as error:  # the API server away, or the pod gone: it is retried anyway
            log.info("pod %s/%s: condition not written: %s", pod.namespace, pod.name, error)
            return
        with self._lock:
            self._reported[pod.uid] = message

    def _follow(self) -> None:
        """Wake the backing-off pods on a cache event that could help them."""
        after = ""
        delay = self.retry_delay
        while not self.stop.is_set():
            try:
                if not after:  # from the newest event: what came before helped no waiting pod
                    last = self.cache.last_events(1)
                    after = last[0].id if last else "0-0"
                events = self.cache.wait_for_events(after, timeout=1.0)
            except (CacheError, redis.RedisError, OSError) as error:  # Redis away: back off
                if self.stop.is_set():
                    return
                log.info("following the cache's events: %s; again in %.1f s", error, delay)
                self.stop.wait(delay)
                delay = min(self.api_max_backoff, delay * 2)
                continue
            delay = self.retry_delay
            if events:
                after = events[-1].id
                if any(event.type in HELPFUL_EVENTS for event in events):
                    self.wake()

    def _watch(self) -> None:
        delay = 1.0
        while not self.stop.is_set():
            try:
                response: Any = self.api.list_pod_for_all_namespaces(
                    field_selector=PENDING, _request_timeout=(10, 60), _preload_content=False
                )
                listed = json.loads(response.data)
                for item in listed.get("items") or []:
                    self._offer(item)
                delay = 1.0
                watcher: Any = _RawWatch()
                stream = watcher.stream(
                    self.api.list_pod_for_all_namespaces,
                    field_selector=PENDING,
                    resource_version=(listed.get("metadata") or {}).get("resourceVersion"),
                    timeout_seconds=self.watch_timeout,
                )
                for event in stream:
                    if self.stop.is_set():
                        return
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._offer(event["raw_object"])
                    elif event["type"] == "DELETED":
                        self._forget(event["raw_object"])
            except Exception as error:  # the API server away or 410: list again, backing off
                self.api_errors += 1
                log.warning("watching pending pods: %s; again in %.0f s", _short(error), delay)
                self.stop.wait(delay)
                delay = min(self.api_max_backoff, delay * 2)

    def _offer(self, obj: Any) -> None:
        spec = obj.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return
        if spec.get("nodeName"):  # bound (by this replica or another): not ours to retry
            self._forget(obj)
            return
        try:
            pod = Pod.from_k8s(obj)
        except ValidationError as error:
            log.warning("skipped a pending pod: %s", error)
            return
        with self._lock:
            waiting = self._waiting.get(pod.uid)
            if waiting is not None:  # backing off: an update (our own condition) waits too
                waiting.pod = pod
                return
            self._enqueue(pod)

    def _forget(self, obj: Any) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self._lock:
            self._waiting.pop(uid, None)
            self._failures.pop(uid, None)
            self._reported.pop(uid, None)


class _RawWatch(kube_watch.Watch):
    """A watch whose events carry the API server's JSON as it came: the official client would
    build a V1Pod of each, turned back into a dict here (a millisecond a pod, the replica's
    costliest step after the columns)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def get_return_type(self, func: Any) -> None:
        return None


def _short(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__
