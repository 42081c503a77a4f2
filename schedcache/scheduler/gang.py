"""Pod groups in the reference scheduler: a gang is placed whole or not at all (docs/gangs.md).

Groups are named as scheduler-plugins' Coscheduling names them: a pod's label
``scheduling.x-k8s.io/pod-group`` names a PodGroup (``scheduling.x-k8s.io/v1alpha1``) in its
namespace, whose ``spec.minMember`` members must all be placeable before any is, and whose
``spec.scheduleTimeoutSeconds`` bounds how long the group waits for them.

A replica that pops a member records it in the group's wait (``gangwait:<group>`` in the
cache, shared by every replica: the member's pod as popped, and when the wait began) and gives
it back to the queue, backing off, until ``minMember`` members are pending: a waiting group
holds no room. Then the replica that popped a member places every pending member on one
scratch copy of its snapshot (each member counting the ones placed before it) and sends one
gang claim (``Cache.assume_gang``): Redis checks every member against the live cache and
writes all or nothing. A refused claim (another replica took the room) is decided again on a
fresh snapshot, then the pod backs off; a group that cannot be placed on the snapshot is
reported unschedulable, as a pod is. A wait longer than ``scheduleTimeoutSeconds`` is given up
as Coscheduling does: the popped member is reported unschedulable and the wait begins again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from schedcache.cache import Cache
from schedcache.errors import FitConflict, PodAlreadyExists, ValidationError
from schedcache.model.values import Pod
from schedcache.ops.gangwaits import GangWaits
from schedcache.sim.gang import decide
from schedcache.store import metrics
from schedcache.store.gang import MAX_GANG_MEMBERS
from schedcache.store.podgroups import PodGroup, read_pod_group
from schedcache.views.columns import Columns
from schedcache.views.snapshot import Snapshot

log = logging.getLogger(__name__)

#: The label naming a pod's PodGroup (scheduler-plugins' Coscheduling).
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def group_of(pod: Pod) -> str:
    """``<namespace>/<group>`` of a pod labelled into a pod group, else ""."""
    name = pod.labels.get(POD_GROUP_LABEL, "")
    return f"{pod.namespace}/{name}" if name else ""


class PodGroups:
    """The PodGroups ``sync`` fed into the cache (store/podgroups.py): one HMGET a read."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def get(self, group: str) -> PodGroup | None:
        """The PodGroup ``group`` names; None when the cache holds none (the pod waits)."""
        return read_pod_group(self.cache.client, self.cache.keys, group)


class Replica(Protocol):
    """What the gang scheduler uses of the reference scheduler (scheduler/loop.py)."""

    cache: Cache
    snapshot: Snapshot
    columns: Columns
    attempts: int

    def _submit(self, placed: Pod) -> None: ...
    def _give_back(self, pod: Pod, unschedulable: bool) -> str: ...
    def _report(self, pod: Pod, message: str) -> None: ...


class GangScheduler:
    """The gang half of one replica's loop: :meth:`attempt` handles a popped pod of a group."""

    def __init__(self, replica: Replica, groups: PodGroups, clock: Callable[[], float]) -> None:
        self.replica = replica
        self.groups = groups
        self.waits = GangWaits(replica.cache)
        self.clock = clock
        self.placed = 0  # gangs this replica claimed
        self.refused = 0  # gang claims Redis refused
        self.waiting = 0  # pods set aside while their group waited

    def attempt(self, pod: Pod) -> bool | None:
        """None when ``pod`` is in no group (the loop schedules it alone); else True once it
        is handled (placed with its group, waiting, or given back)."""
        name = group_of(pod)
        if not name:
            return None
        cache = self.replica.cache
        if cache.pod_state(pod) is not None:  # another replica's gang claim took it
            return True
        group = self.groups.get(name)
        if group is None:  # recorded, so explain and whatif show why it waits
            self.waits.join(name, None, pod, int(self.clock() * 1000))
            self._wait(pod, f'pod group "{name}" not found')
            return True
        refused = group.too_large()
        if refused:  # reported once (the report is kept), parked until the cluster changes
            self.replica._report(pod, refused)
            self.replica._give_back(pod, unschedulable=True)
            return True
        now_ms = int(self.clock() * 1000)
        since, members, marked = self.waits.join(group.name, group.timeout, pod, now_ms)
        pending: list[Pod] = []
        gone: list[str] = []
        # Members the group's gang claims placed count while the cache holds them.
        unplaced = [uid for uid in marked if cache.pod_state(uid) is None]
        self.waits.unplace(name, unplaced)
        held = set(marked) - set(unplaced)
        placed = len(held)
        for uid, member in sorted(members.items()):
            if uid in held:
                continue  # counted above
            if cache.pod_state(uid) is not None:
                placed += 1  # claimed or bound: it counts, as Coscheduling counts it
            elif cache.client.exists(cache.keys.queued(uid)):
                pending.append(member)
            else:
                gone.append(uid)  # deleted (or bound and not yet seen): no member now
        self.waits.leave(name, gone)
        if placed + len(pending) < group.min_member:
            if group.timeout is not None and now_ms - since > group.timeout * 1000:
                metrics.GANG_TIMEOUTS.inc()
                self.waits.restart(name, list(members))
                self.replica._report(
                    pod, f'pod group "{name}" timed out waiting for {group.min_member} members'
                )
                self.replica._give_back(pod, unschedulable=False)
                return True
            self._wait(pod, f"{placed + len(pending)}/{group.min_member} members of {name}")
            return True
        # minMember <= MAX_GANG_MEMBERS (too_large): the first MAX_GANG_MEMBERS pending place
        # the group's minMember whole; the rest come after it, as a placed group's extras.
        self._place(name, pod, pending[:MAX_GANG_MEMBERS])
        return True

    def _wait(self, pod: Pod, why: str) -> None:
        self.waiting += 1
        metrics.GANG_WAITS.inc()
        log.info("pod %s/%s waits: %s", pod.namespace, pod.name, why)
        self.replica._give_back(pod, unschedulable=False)

    def _place(self, name: str, pod: Pod, members: list[Pod]) -> None:
        """Decide every member on one snapshot and claim them all; decided again after a
        refusal, then ``pod`` backs off."""
        replica = self.replica
        for _ in range(replica.attempts):
            replica.cache.update_snapshot(replica.snapshot)
            decided, why = decide(members, replica.snapshot, replica.columns.percentage)
            if decided is None:
                replica._report(pod, f'pod group "{name}": {why}')
                replica._give_back(pod, unschedulable=True)
                return
            try:
                replica.cache.assume_gang(decided, name, snapshot=replica.snapshot)
            except ValidationError as error:  # more than one gang claim carries: never in parts
                replica._report(pod, f'pod group "{name}": {error}')
                replica._give_back(pod, unschedulable=True)
                return
            except FitConflict as conflict:
                self.refused += 1
                log.info("pod group %s: gang claim refused: %s", name, conflict)
                continue
            except PodAlreadyExists:  # another replica placed (part of) the group first
                self.refused += 1
                if replica.cache.pod_state(pod) is None:
                    replica._give_back(pod, unschedulable=False)
                return
            self.placed += 1
            self.waits.placed(name, [m.uid for m in decided])
            for member in decided:
                replica._submit(member)
            return
        replica._give_back(pod, unschedulable=False)
