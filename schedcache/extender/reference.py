"""``schedcache scheduler``: a reference scheduler replica in Python, on the shared cache.

The loop users copy, kept short: watch the pending pods that name this scheduler, and for each
one — filter every node of a fresh snapshot, score the feasible ones, claim the best with
``assume_pod(check_fit=True)`` (checked in Redis against the live node, so N replicas never
overfill it), bind through the API server, ``finish_binding``. A fit conflict (another replica
was first) tries the next best node on a refreshed snapshot; a failed binding forgets the claim.
The cache learns the binding from ``schedcache sync`` (confirming the claim); until then the
claim holds the room, and expires after the cache's ttl if the pod never shows up bound.
A pod that could not be placed is tried again after ``retry_delay`` seconds.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from schedcache.cache import Cache
from schedcache.errors import CacheError, FitConflict, ValidationError
from schedcache.extender.binder import ApiBinder
from schedcache.extender.service import scores
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Pod
from schedcache.views.snapshot import Snapshot

log = logging.getLogger(__name__)

PENDING = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"


@dataclass
class Outcome:
    """What one scheduling attempt did: ``node`` bound, else ``reason``."""

    node: str = ""
    reason: str = ""
    conflicts: int = 0


class ReferenceScheduler:
    """One replica; ``run()`` until ``stop`` is set."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        scheduler_name: str,
        attempts: int = 3,
        watch_timeout: int = 60,
        retry_delay: float = 1.0,
    ) -> None:
        self.cache = cache
        self.api = api
        self.binder = ApiBinder(api)
        self.scheduler_name = scheduler_name
        self.attempts = attempts
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self.snapshot = Snapshot()
        self.pending: queue.Queue[Pod] = queue.Queue()
        self.stop = threading.Event()
        self.bound = 0
        self.conflicts = 0

    # -- scheduling one pod ----------------------------------------------------------------

    def schedule_one(self, pod: Pod) -> Outcome:
        """Filter, score, claim, bind; the next best node after a conflict."""
        outcome = Outcome()
        for _ in range(self.attempts):
            self.cache.update_snapshot(self.snapshot)
            cycle = Cycle(
                pod,
                list(self.snapshot.node_infos.values()),
                anti_holders=self.snapshot.have_pods_with_required_anti_affinity_list,
            )
            feasible = [
                (info.name, info)
                for info in self.snapshot.node_info_list
                if not filter_pod(pod, info, cycle).reasons
            ]
            if not feasible:
                outcome.reason = "no node fits"
                return outcome
            ranked = scores(pod, feasible, cycle)  # type: ignore[arg-type]
            best = max(ranked, key=lambda name: (ranked[name], name))
            placed = pod.with_node(best)
            try:
                self.cache.assume_pod(placed, check_fit=True, snapshot=self.snapshot)
            except FitConflict:
                outcome.conflicts += 1
                self.conflicts += 1
                continue
            try:
                self.binder.bind(pod.namespace, pod.name, pod.uid, best)
            except ApiException as error:
                self.cache.forget_pod(placed)
                outcome.reason = f"binding failed: {error.status} {error.reason}"
                return outcome
            self.cache.finish_binding(placed)
            self.bound += 1
            outcome.node = best
            return outcome
        outcome.reason = f"{outcome.conflicts} conflicts in a row"
        return outcome

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Watch pending pods in one thread, schedule them in this one."""
        watcher = threading.Thread(target=self._watch, name="schedcache-pending", daemon=True)
        watcher.start()
        while not self.stop.is_set():
            try:
                pod = self.pending.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                if self.cache.pod_state(pod) is not None:
                    continue  # offered twice (list, then an update): already claimed
                outcome = self.schedule_one(pod)
            except CacheError as error:
                log.warning("pod %s/%s: %s", pod.namespace, pod.name, error)
                continue
            if not outcome.node:
                log.info("pod %s/%s not scheduled: %s", pod.namespace, pod.name, outcome.reason)
                self._retry_later(pod)

    def _retry_later(self, pod: Pod) -> None:
        """Back in the queue after ``retry_delay`` (kube-scheduler's backoff queue, simplified:
        the pod is tried again whatever changed)."""
        timer = threading.Timer(self.retry_delay, self.pending.put, [pod])
        timer.daemon = True
        timer.start()

    def _watch(self) -> None:
        sanitize = self.api.api_client.sanitize_for_serialization
        while not self.stop.is_set():
            try:
                listed = self.api.list_pod_for_all_namespaces(field_selector=PENDING)
                for item in listed.items:
                    self._offer(sanitize(item))
                stream = kube_watch.Watch().stream(
                    self.api.list_pod_for_all_namespaces,
                    field_selector=PENDING,
                    resource_version=listed.metadata.resource_version if listed.metadata else None,
                    timeout_seconds=self.watch_timeout,
                )
                for event in stream:
                    if self.stop.is_set():
                        return
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._offer(sanitize(event["object"]))
            except Exception as error:  # the API server away or 410: list again shortly
                log.warning("watching pending pods: %s", error)
                self.stop.wait(1.0)

    def _offer(self, obj: Any) -> None:
        spec = obj.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name or spec.get("nodeName"):
            return
        try:
            self.pending.put(Pod.from_k8s(obj))
        except ValidationError as error:
            log.warning("skipped a pending pod: %s", error)
