"""What the extender's verbs do on the shared cache (no HTTP here: :mod:`.server` serves it).

* **filter**: every candidate node is checked on a snapshot of the cache, brought up to date
  incrementally on each call (so all replicas' claims count, not only this scheduler's), with
  kube-scheduler's filter rules (:func:`schedcache.model.filters.filter_pod`). Failures that
  preemption cannot cure (taints, unschedulable, node affinity/selector, a node the cache does
  not know) go to ``FailedAndUnresolvableNodes``, the others to ``FailedNodes``.
* **prioritize**: 0–10 per node: the mean of least-allocated (CPU and memory, by the non-zero
  requests as upstream scores) and, when any candidate has taints with effect
  ``PreferNoSchedule`` the pod does not tolerate, TaintToleration's reverse-normalised count.
* **bind**: ``assume_pod(check_fit=True)``: the claim is checked inside Redis against the live
  node, so two replicas can never overfill it; then the Binding through the API server; then
  ``finish_binding``. A fit conflict answers an error and writes nothing (kube-scheduler
  forgets the pod and retries it); a failed API call forgets the claim.

The pod a bind names is the one the filter call carried (remembered by uid, bounded), else it
is read from the API server.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

from schedcache.cache import Cache
from schedcache.errors import CacheError, FitConflict
from schedcache.extender import protocol
from schedcache.extender.protocol import MAX_SCORE, BindArgs, FilterArgs
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod, score_nodes
from schedcache.model.values import Pod
from schedcache.views.snapshot import Snapshot

UNKNOWN_NODE = "node(s) not found in the scheduler cache"


class Binder(Protocol):
    """The API server side of a bind (``schedcache.extender.binder.ApiBinder``)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...


class Extender:
    """The three verbs over one cache; thread-safe (the server calls it from a thread pool)."""

    def __init__(self, cache: Cache, binder: Binder | None = None, remember: int = 10_000) -> None:
        self.cache = cache
        self.binder = binder
        self.snapshot = Snapshot()
        self.snapshot_lock = threading.Lock()
        self.pods: OrderedDict[str, Pod] = OrderedDict()
        self.pods_lock = threading.Lock()
        self.remember = remember

    # -- filter and prioritize ------------------------------------------------------------

    def filter(self, args: FilterArgs) -> dict[str, Any]:
        self._remember(args.pod)
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        with self.snapshot_lock:
            self.cache.update_snapshot(self.snapshot)
            cycle = Cycle(
                args.pod,
                list(self.snapshot.node_infos.values()),
                anti_holders=self.snapshot.have_pods_with_required_anti_affinity_list,
            )
            for name in args.node_names:
                info = self.snapshot.node_infos.get(name)
                if info is None or info.node is None:
                    unresolvable[name] = UNKNOWN_NODE
                    continue
                result = filter_pod(args.pod, info, cycle)
                if not result.reasons:
                    passed.append(name)
                elif result.unresolvable:
                    unresolvable[name] = ", ".join(result.reasons)
                else:
                    failed[name] = ", ".join(result.reasons)
        return protocol.filter_result(args, passed, failed, unresolvable)

    def prioritize(self, args: FilterArgs) -> list[dict[str, Any]]:
        self._remember(args.pod)
        with self.snapshot_lock:
            self.cache.update_snapshot(self.snapshot)
            infos = [(name, self.snapshot.node_infos.get(name)) for name in args.node_names]
            cycle = Cycle(
                args.pod,
                list(self.snapshot.node_infos.values()),
                anti_holders=self.snapshot.have_pods_with_required_anti_affinity_list,
            )
            return protocol.host_priorities(scores(args.pod, infos, cycle))

    # -- bind -----------------------------------------------------------------------------

    def bind(self, args: BindArgs) -> dict[str, str]:
        try:
            pod = self._pod(args)
        except (CacheError, LookupError, ValueError, OSError) as error:
            return protocol.bind_result(f"pod {args.pod_namespace}/{args.pod_name}: {error}")
        placed = pod.with_node(args.node)
        try:
            self.cache.assume_pod(placed, check_fit=True, snapshot=self._claim_snapshot())
        except FitConflict as conflict:
            return protocol.bind_result(f"{conflict}; retry the pod")
        except CacheError as error:
            return protocol.bind_result(str(error))
        if self.binder is not None:
            try:
                self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
            except Exception as error:  # the API refused or is away: the claim goes
                self.cache.forget_pod(placed)
                return protocol.bind_result(f"binding {pod.namespace}/{pod.name}: {error}")
        self.cache.finish_binding(placed)
        with self.pods_lock:
            self.pods.pop(pod.uid, None)
        return protocol.bind_result()

    def _claim_snapshot(self) -> Snapshot:
        """A private copy of the snapshot, caught up now: the claim judges the pod's inter-pod
        rules (existing pods' anti-affinity included) on it and Redis re-checks them."""
        with self.snapshot_lock:
            self.cache.update_snapshot(self.snapshot)
            return dataclasses.replace(self.snapshot, node_infos=dict(self.snapshot.node_infos))

    def _pod(self, args: BindArgs) -> Pod:
        with self.pods_lock:
            pod = self.pods.get(args.pod_uid)
        if pod is not None:
            return pod
        if self.binder is None:
            raise LookupError(
                "not seen in a filter call, and no API server to read it from (--kubeconfig)"
            )
        pod = Pod.from_k8s(self.binder.read_pod(args.pod_namespace, args.pod_name))
        if pod.uid != args.pod_uid:
            raise LookupError(f"the API server has uid {pod.uid}, the bind names {args.pod_uid}")
        return pod

    def _remember(self, pod: Pod) -> None:
        with self.pods_lock:
            self.pods[pod.uid] = pod
            self.pods.move_to_end(pod.uid)
            while len(self.pods) > self.remember:
                self.pods.popitem(last=False)


def scores(
    pod: Pod, infos: list[tuple[str, NodeInfo | None]], cycle: Cycle | None = None
) -> dict[str, int]:
    """0-10 per node: the default profile's weighted scores (``registry.score_nodes``, judged in
    ``cycle``: the snapshot's whole cluster) scaled so the best candidate scores 10, as
    upstream's DefaultNormalizeScore scales; unknown nodes score 0."""
    known = [info for _, info in infos if info is not None and info.node is not None]
    if cycle is None:
        cycle = Cycle(pod, known)
    totals = score_nodes(pod, known, cycle)
    best = max(totals.values(), default=0)
    return {
        name: (MAX_SCORE * totals[name] // best if best and name in totals else 0)
        for name, _ in infos
    }
