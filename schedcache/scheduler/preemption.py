"""The reference scheduler's PostFilter: DefaultPreemption, acted on through the cache and the
API server (docs/preemption.md).

For a pod no node could take, :func:`schedcache.model.plugins.preemption.preempt` picks a node
and its victims on the replica's snapshot. Then, as upstream's preemption.Evaluator:

1. the nomination is held in the cache (``sc_nominate_pod``): from now on no replica's claim
   of a pod of lower or equal priority takes the room, whatever its snapshot says;
2. each victim gets the ``DisruptionTarget`` condition (reason ``PreemptionByScheduler``, a
   ``pods/status`` patch) and is deleted;
3. the preemptor's ``status.nominatedNodeName`` is set (a ``pods/status`` patch).

The pod goes back to the queue; the victims' removal (seen by ``sync``) wakes it and its claim
lands on the room its nomination kept (the claim drops the nomination). A pod that already
holds a live nomination preempts nothing more while it waits (upstream: not eligible while its
nominated node's victims are terminating); one that never comes back frees the room at the
nomination's ttl.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as kube_client

from schedcache.cache import Cache
from schedcache.errors import FitConflict
from schedcache.model.plugins.preemption import Budget, Decision, preempt
from schedcache.model.values import Pod
from schedcache.store import metrics
from schedcache.store.budgets import read_budgets
from schedcache.store.nominations import (
    NOMINATION_TTL,
    nominate_pod,
    read_nominated,
    read_nomination,
)
from schedcache.views.snapshot import Snapshot

log = logging.getLogger(__name__)

#: upstream's v1.PodReasonPreemptionByScheduler
PREEMPTED_REASON = "PreemptionByScheduler"


def disruption_condition(scheduler_name: str, now: datetime | None = None) -> dict[str, Any]:
    """The ``pods/status`` patch upstream writes on a victim before deleting it."""
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": PREEMPTED_REASON,
        "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
        "lastTransitionTime": moment,
    }
    return {"status": {"conditions": [condition]}}


class Preemption:
    """DefaultPreemption for one replica. ``budgets``: the PodDisruptionBudgets to respect
    (by default those ``sync`` keeps in the cache, read at each attempt); ``ttl``: a
    nomination's life (s)."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        scheduler_name: str,
        budgets: Callable[[], Sequence[Budget]] | None = None,
        ttl: float = NOMINATION_TTL,
    ) -> None:
        self.cache = cache
        self.api = api
        self.scheduler_name = scheduler_name
        self.budgets = budgets or (lambda: read_budgets(cache.store))
        self.ttl = ttl
        self.attempts = 0  # PostFilter runs
        self.nominated = 0  # pods nominated
        self.evicted = 0  # victims deleted

    def post_filter(self, pod: Pod, snapshot: Snapshot) -> Decision:
        """Preempt for ``pod`` (no node could take it on ``snapshot``); the decision made."""
        held = read_nomination(self.cache.store, pod.uid)
        # Its victims are leaving: wait for them, preempt nothing more; unless the node is
        # gone (upstream's PodEligibleToPreemptOthers), when the next nomination replaces it.
        info = snapshot.node_infos.get(held[0]) if held is not None else None
        if held is not None and info is not None and info.node is not None:
            node, _ = held
            return Decision(node=node, message=f"nominated to node {node}: waiting for its room")
        self.attempts += 1
        metrics.PREEMPTION_ATTEMPTS.inc()
        decision = preempt(
            pod, snapshot.node_info_list, self.budgets(), nominated=read_nominated(self.cache.store)
        )
        if not decision.node:
            return decision
        try:
            victims = [v.full_name for v in decision.victims]
            self.cache.run(nominate_pod(pod, decision.node, self.ttl, victims=victims))
        except FitConflict as error:  # the node holds too many nominations already
            return Decision(message=f"preemption: {error}")
        self.nominated += 1
        for victim in decision.victims:
            self._evict(victim)
        self._patch(pod, {"status": {"nominatedNodeName": decision.node}})
        log.info(
            "pod %s/%s: nominated to node %s, preempting %s",
            pod.namespace,
            pod.name,
            decision.node,
            ", ".join(v.full_name for v in decision.victims) or "nothing",
        )
        return decision

    def _evict(self, victim: Pod) -> None:
        """Upstream's PreemptPod: the DisruptionTarget condition first, then the DELETE."""
        self._patch(victim, disruption_condition(self.scheduler_name))
        try:
            self.api.delete_namespaced_pod(victim.name, victim.namespace, _request_timeout=(5, 10))
        except Exception as error:  # gone already, or the API server away: logged, not fatal
            log.info("victim %s: not deleted: %s", victim.full_name, error)
            return
        self.evicted += 1
        metrics.PREEMPTION_VICTIMS.inc()

    def _patch(self, pod: Pod, body: dict[str, Any]) -> None:
        try:
            self.api.patch_namespaced_pod_status(
                pod.name,
                pod.namespace,
                body,
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=(5, 10),
            )
        except Exception as error:
            log.info("pod %s: status not patched: %s", pod.full_name, error)
