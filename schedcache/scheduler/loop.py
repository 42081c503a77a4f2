"""``schedcache scheduler``: a reference scheduler replica in Python, on the shared cache.

The loop users copy, kept short: pop the next pending pod of this scheduler from the cache's
scheduling queue (:mod:`schedcache.ops.queue`: fed by ``schedcache sync``, shared by every
replica, each pod leased to one replica at a time, highest priority first), place it on a fresh
snapshot (``Columns.place``: upstream's sample of the nodes filtered and scored, vectorised,
views/columns.py), claim the best with ``assume_pod(check_fit=True)`` (checked in Redis against
the live node, so N replicas never overfill it), and hand the Binding to a bounded pool, as
kube-scheduler's binding cycle: the next pod is placed meanwhile on a snapshot that already
counts the claim. The claim carries its deadline, set in the same call (the Binding's
allowance plus the cache's ttl, scheduler/bindings.py): a Binding that answers in time costs
Redis no more call, a slower one sends ``finish_binding``, a failed one forgets the claim and
the pod goes back to the queue, backing off. A fit conflict (another replica was first) tries
again on a refreshed snapshot. The cache learns the binding from ``schedcache sync``
(confirming the claim, and taking the pod out of the queue); until then the claim holds the
room, and expires at its deadline if the pod never shows up bound.

A pod that could not be placed is handled as kube-scheduler's queue does: its reasons per node
are logged once per attempt in upstream's summary form (``0/12 nodes are available: 3
Insufficient cpu, 9 node(s) had untolerated taint {k: v}.``), the pod gets a
``PodScheduled=False`` condition with reason ``Unschedulable`` and that message (a patch of
``pods/status``), and it goes back to the queue: parked until a cluster change that could help
(a node added or updated, a pod removed, a claim forgotten or expired), then backing off 1 s
doubling to 10 s (upstream's podInitialBackoffSeconds and podMaxBackoffSeconds). A pod with
inter-pod rules (which other pods' arrival can satisfy) backs off without parking.

Pods are popped in batches of up to ``pop_batch`` a call (one FCALL and one pass of the queue's
housekeeping for several pods). The batch starts at one pod and doubles while pops come back
full (a queue that is short, or a deployment that just arrived, is shared between replicas
rather than taken whole by the first to poll), and falls back to what the last pop found. The
batch is attempted in order; a pod of higher priority queued meanwhile waits behind the pods
of it not yet attempted, at most ``pop_batch``. Two or more pods in a row that the columns
judge alone (no host ports, scalar resources, inter-pod rules, spread or preferred affinity,
no pod group) are placed together (``claim_together``, ``batch_claims``): one snapshot
catch-up, each pod counted on its node before the next is placed (``Columns.reserve``, as
kube-scheduler's assume), and their claims in one ``sc_batch`` call, each checked in Redis
after the ones before it. A claim refused there (a conflict), and a pod that found no node,
is attempted alone after, as any other pod is. Every pod of a batch is leased together: once
half the lease has passed (slow attempts: API calls of preemption or reports), or when the
scheduler stops, the pods not yet attempted are given back untried (to their place in the
queue, no attempt counted), as they are when Redis goes away mid-batch and the first of them
can still be given back (else their leases lapse, as one popped pod's does).

Redis going away (a restart, a failover) never ends the loop: a failed pop or snapshot read
backs off (1 s doubling to 30 s) and gives the pod back; after a Binding, ``finish_binding``
when due (or ``forget_pod`` when it failed) is sent until Redis answers; a claim that landed
while its reply was lost is found again as this replica's own (the pod's last claim here went
unanswered) and bound. A claim decided on a snapshot that saw writes Redis lost is refused
(``lost-writes``) and decided again on the snapshot, rebuilt by its next update.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import redis
from kubernetes import client as kube_client

from schedcache.cache import Cache
from schedcache.errors import (
    BatchFailed,
    CacheError,
    FitConflict,
    PodAlreadyExists,
    PodNotFound,
    RetriesExhausted,
    ValidationError,
    log_reason,
)
from schedcache.model.arrivals import wake_tokens
from schedcache.model.plugins.result import fit_error
from schedcache.model.values import Pod
from schedcache.ops.queue import LEASE, QueuedPod, SchedulingQueue
from schedcache.scheduler.binder import ApiBinder
from schedcache.scheduler.bindings import (
    BindingProcess,
    bind_and_finish,
    claim_deadline,
)
from schedcache.scheduler.gang import GangScheduler, PodGroups, group_of
from schedcache.scheduler.preemption import Preemption
from schedcache.store import metrics
from schedcache.store.batch import BatchResult, CommandBatch
from schedcache.store.commands import QUEUE_BATCH_LIMIT, claim_reply
from schedcache.store.retry import backoff, call_with_retries
from schedcache.views.claims import taken_node
from schedcache.views.columns import Columns, columnar
from schedcache.views.snapshot import Snapshot

log = logging.getLogger(__name__)
T = TypeVar("T")

# upstream's podInitialBackoffSeconds / podMaxBackoffSeconds
POD_INITIAL_BACKOFF = 1.0
POD_MAX_BACKOFF = 10.0
# Waits between pops of an empty queue (doubling), and after a failed pop (doubling).
IDLE_WAIT = (0.005, 0.1)
CACHE_MAX_BACKOFF = 30.0
# Bindings in flight at once (kube-scheduler binds each pod in a goroutine of its own; a
# bounded pool here, the loop waits when it is full).
BINDING_WORKERS = 16
# Unschedulable messages remembered (so the same one is not patched again), newest kept.
REPORTS_KEPT = 10_000
# Seconds a stop waits for the Bindings in flight: a signal ends the process within 2 s (one
# abandoned keeps its claim until its deadline lets it go, or, without one, until the lease,
# given back at exit; the feeder confirms a Binding that landed).
STOP_WAIT = 1.0
# Pods popped a call at most (the queue's call takes 1..QUEUE_BATCH_LIMIT): docs/performance.md,
# "Batched pops" and "Pops of 32" (8 until stop 63: 32 costs Redis 5 % fewer instructions a
# placed pod with one replica, ~12 % with four), for the choice.
POP_BATCH = 32
#: How long (s) after a conflict a replica's claims carry the next best nodes (ranked
#: candidates, lua/_pick.lua): they spare a replica that lost a race its decision again, and
#: cost Redis their 30 arguments and the client their packing on every claim, where a replica
#: alone never loses one.
RACING_SECONDS = 30.0
# Share of the lease a batch's attempts may start within; the rest is left for the last one.
BATCH_LEASE_SHARE = 0.5
# What a Redis outage raises past the store's retry policy (RetriesExhausted is a CacheError).
REDIS_AWAY = (redis.RedisError, OSError)


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


class ReferenceScheduler:
    """One replica; ``run()`` until ``stop`` is set. ``retry_delay``: the first back-off of a
    pod that could not be placed, doubling to ``max_backoff``; ``percentage``: upstream's
    percentageOfNodesToScore (0: adaptive); ``binding_workers``: Bindings in flight;
    ``lease``: how long a popped pod is this replica's alone (it comes back to the queue
    after, if this replica died before claiming it); ``bindings``: a process that posts the
    Bindings instead of the pool (closed when ``run()`` ends); ``pop_batch``: pods popped a
    call at most (1..100; the module's docstring says how the batch adapts); ``batch_claims``:
    the pods of a pop placed on one snapshot catch-up and claimed in one call (False: one
    catch-up and one claim call a pod, as before)."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        scheduler_name: str,
        attempts: int = 3,
        retry_delay: float = POD_INITIAL_BACKOFF,
        max_backoff: float = POD_MAX_BACKOFF,
        percentage: int = 0,
        binding_workers: int = BINDING_WORKERS,
        lease: float = LEASE,
        bindings: BindingProcess | None = None,
        preemption: bool = True,
        pop_batch: int = POP_BATCH,
        batch_claims: bool = True,
    ) -> None:
        if (
            isinstance(pop_batch, bool)
            or not isinstance(pop_batch, int)
            or not 1 <= pop_batch <= QUEUE_BATCH_LIMIT
        ):
            raise ValueError(
                f"reference scheduler {scheduler_name}: pop_batch: {pop_batch!r} is not in "
                f"1..{QUEUE_BATCH_LIMIT}"
            )
        self.pop_batch = pop_batch
        self.batch_claims = batch_claims
        self.cache = cache
        self.api = api
        self.binder = ApiBinder(api)
        self.scheduler_name = scheduler_name
        self.queue = SchedulingQueue(
            cache, scheduler_name, cache.replica, lease=lease, backoff=(retry_delay, max_backoff)
        )
        self.attempts = attempts
        self.snapshot = Snapshot()
        # Equal scores in this replica's own order (views/columns.py, tie_rank): replicas
        # that ranked them alike raced for the same node.
        self.columns = Columns(percentage, ties=cache.replica or scheduler_name)
        # DefaultPreemption's PostFilter (scheduler/preemption.py), None when disabled.
        self.preemption = Preemption(cache, api, scheduler_name) if preemption else None
        self.binding = ThreadPoolExecutor(binding_workers, thread_name_prefix="schedcache-bind")
        self.bindings = bindings
        self._in_flight = threading.BoundedSemaphore(binding_workers)
        self._binds: dict[Future[None], str] = {}  # Bindings in flight: their pods' uids
        # The deadline each claim carries (None: the cache's ttl is 0, nothing expires), and
        # the pods whose last claim got no answer, with when it was sent (newest last).
        self.deadline = claim_deadline(cache.ttl)
        self._unanswered: dict[str, float] = {}
        self.stop = threading.Event()
        self.bound = 0
        self.conflicts = 0
        self._racing_until = 0.0  # monotonic: the claims carry candidates until then
        self.unschedulable = 0  # attempts that found no node
        self.lost = 0  # pods another replica claimed first (its lease on them had lapsed)
        self.cache_errors = 0  # failed pops of the queue
        self.pops = 0  # pops that leased pods
        self.untried = 0  # pods of a batch given back untried
        self._lock = threading.Lock()
        # The Unschedulable message last patched, by uid (bounded: the oldest go first).
        self._reported: OrderedDict[str, str] = OrderedDict()
        # Pods of a pod group are placed with their group (scheduler/gang.py).
        self.gangs = GangScheduler(self, PodGroups(cache), time.time)

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
                if self.preemption is not None:  # PostFilter: the reasons say what it did
                    decision = self.preemption.post_filter(pod, self.snapshot)
                    outcome.reason += f" {decision.summary()}"
                return outcome
            placed = pod.with_node(placement.node)
            # The snapshot carries the claim's inter-pod rules; a pod without any, in a cluster
            # without required anti-affinity, claims bare (Redis refuses it as unchecked if
            # such a pod was placed since, and assume_pod then judges it).
            judged = pod.has_inter_pod_rules or bool(
                self.snapshot.have_pods_with_required_anti_affinity_list
            )
            claimed = time.monotonic()  # no later than Redis sets the claim's deadline
            try:
                # While replicas race (a conflict in the last RACING_SECONDS), the next best
                # nodes ride along: a lost race for the best one takes the next that still
                # passes every check, with no decision redone.
                racing = claimed < self._racing_until
                taken = self._claim(placed, placement.ranked[1:] if racing else (), judged, claimed)
            except FitConflict:
                outcome.conflicts += 1
                self._lost_race()
                continue
            self._submit(pod.with_node(taken), claimed if self.deadline else None)
            outcome.node = taken
            return outcome
        outcome.reason = f"{outcome.conflicts} conflicts in a row"
        return outcome

    def _claim(self, placed: Pod, candidates: Sequence[str], judged: bool, claimed: float) -> str:
        """Claim ``placed`` (its node, else the first of ``candidates`` that passes); the node
        taken. A claim Redis did not answer is sent again with its id once Redis answers: Redis
        answers what it did with it if it landed, else applies it now (:meth:`_sent_again`).
        The error is raised, the claim remembered for its record to be read
        (:meth:`_settle_unanswered`), only when it cannot be sent again: too late (Redis may
        have forgotten the id), or an error that carries no command (Redis away without the
        store's retry policy spent)."""
        try:
            return self.cache.assume_pod(
                placed,
                check_fit=True,
                snapshot=self.snapshot if judged else None,
                candidates=candidates,
                deadline=self.deadline,
            )
        except (RetriesExhausted, *REDIS_AWAY) as error:  # it may have landed all the same
            self._remember_unanswered([placed], claimed)
            command = getattr(error, "command", None)
            if command is None:
                raise
            reply = self._sent_again([placed], lambda: self.cache.run(command), error)
            # (the node from the claim sent: a judged claim may have moved the pod: review)
            reply = claim_reply(reply, command)
        self.cache.hold_lease()
        return taken_node(reply, placed)

    def _sent_again(self, pods: list[Pod], send: Callable[[], T], error: Exception) -> T:
        """``send()``: the unanswered claims of ``pods`` sent again with their ids, until Redis
        answers. Its answer is exact (found in review: a claim with a deadline recorded before
        stop 62 names no claimer, so its record cannot tell a replica's own claim from
        another's made after its lease lapsed): a claim that landed is answered as it was,
        one that did not is judged now (a refusal raised as such). ``error`` (the first
        send's) is raised again when the ids may be forgotten (first sent over
        ``retry.MAX_RETRY_WINDOW`` ago) or the call failed whole, for the records to settle
        them; the last error when the scheduler stops first."""
        try:
            answer = self._until_redis_answers(send)
        except (FitConflict, PodAlreadyExists):  # an answer: not landed, refused now
            self._answered(pods)
            raise
        except (ValidationError, BatchFailed):
            raise error from None
        self._answered(pods)
        return answer

    def _answered(self, pods: list[Pod]) -> None:
        for pod in pods:
            self._unanswered.pop(pod.uid, None)

    def _bind(self, placed: Pod, claimed: float | None) -> None:
        """The binding cycle, in the pool: bind, then ``finish_binding`` when due."""
        try:
            why = bind_and_finish(self.binder, self.cache, placed, self.stop, claimed)
        except (CacheError, *REDIS_AWAY) as error:
            log.warning("pod %s/%s: binding cycle: %s", placed.namespace, placed.name, error)
            self._in_flight.release()
            return
        self._binding_ended(placed, why)

    def _binding_ended(self, placed: Pod, why: str) -> None:
        """A Binding answered (``why`` empty: bound); a failed one forgets the claim and the
        pod backs off."""
        try:
            if why:
                self._binding_failed(placed, why)
                return
            with self._lock:
                self.bound += 1
                self._reported.pop(placed.uid, None)
        except (CacheError, *REDIS_AWAY) as error:
            log.warning("pod %s/%s: binding cycle: %s", placed.namespace, placed.name, error)
        finally:
            self._in_flight.release()

    def _submit(self, placed: Pod, claimed: float | None = None) -> None:
        """Hand ``placed``'s Binding on (``claimed``: see ``bind_and_finish``)."""
        self._in_flight.acquire()  # the pool is bounded: wait for a Binding to answer
        if self.bindings is not None:
            self.bindings.submit(placed, self._binding_ended, claimed)
            return
        with self._lock:
            future = self.binding.submit(self._bind, placed, claimed)
            self._binds[future] = placed.uid
        future.add_done_callback(self._bind_done)

    def _bind_done(self, future: Future[None]) -> None:
        with self._lock:
            self._binds.pop(future, None)

    def _own_claim(self, pod: Pod, patient: bool = False) -> bool:
        """Whether ``pod`` is already this replica's claim, its Binding now in flight: else a
        claim whose reply Redis lost (a restart, a failover: the retry policy gave up though
        the claim had landed), bound now instead of being left assumed for ever. ``patient``:
        the record is read until Redis answers (a read that fails is no "not mine": found in
        review), its last error raised once the scheduler stops."""
        claimed = self._unanswered.get(pod.uid)  # dropped once the record is read
        with self._lock:
            if pod.uid in self._binds.values():
                return True
        if self.bindings is not None and pod.uid in self.bindings.in_flight():
            return True
        try:
            if patient:
                record = self._until_redis_answers(lambda: self.cache.get_pod_record(pod))
            else:
                record = self.cache.get_pod_record(pod)
        except PodNotFound:  # the claim never landed: nothing of it to find again
            self._unanswered.pop(pod.uid, None)
            return False
        except (CacheError, *REDIS_AWAY):
            if patient:
                raise
            return False  # the remembered claim stays for the next pop to look again
        self._unanswered.pop(pod.uid, None)
        # The record names its claimer: this replica's lease claim, or its claim with a
        # deadline (its binding finished from the start). A claim that names none is no
        # replica's claim in flight (a finished binding's, or a deadline claim recorded before
        # deadline claims named their claimer): not taken as this replica's, which, after its
        # own claim went unanswered, could be another replica's claim made since (its lease on
        # the pod lapsed meanwhile); unbound, it expires at its deadline and is queued again.
        # A claim with a deadline names its claimer until the feed confirms the pod, its
        # Binding done or not: it is to be bound here only when this replica's claim of the
        # pod went unanswered (found in review: the queue handed a pod this replica had bound
        # to it again, and a second Binding was posted).
        mine = bool(record.claimer) and record.claimer == self.cache.replica
        if record.binding_finished:
            mine = mine and claimed is not None
        if record.state != "assumed" or not mine:
            return False
        log.info(
            "pod %s/%s: this replica's claim on node %s landed though its reply was lost: "
            "binding it",
            pod.namespace,
            pod.name,
            record.node,
        )
        self._submit(pod.with_node(record.node), claimed if self.deadline else None)
        return True

    def _until_redis_answers(self, call: Callable[[], T]) -> T:
        """``call()`` through the store's retry loop with delays that never run out until the
        scheduler stops (then the last error is raised)."""
        delays = backoff(POD_INITIAL_BACKOFF, CACHE_MAX_BACKOFF, until=self.stop.is_set)

        def waiting(error: Exception, delay: float) -> None:
            log.warning("Redis unavailable (%s); trying again in %.1f s", log_reason(error), delay)

        return call_with_retries(call, delays, waiting, sleep=self.stop.wait)

    def _binding_failed(self, placed: Pod, why: str) -> None:
        # A claim of this live replica is only given back by this forget: sent until Redis
        # answers (its lease, heartbeated meanwhile, would never lapse).
        self._until_redis_answers(lambda: self.cache.forget_pod(placed))
        outcome = self._give_back(placed.with_node(""), unschedulable=False)
        log.info(
            "pod %s/%s not scheduled: binding failed: %s (%s)",
            placed.namespace,
            placed.name,
            why,
            outcome,
        )

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop_wait: float | None = None) -> None:
        """Pop pods from the queue and schedule them, until ``stop``; a Redis outage is waited
        out. Then the Bindings in flight are waited for (``stop_wait`` seconds at most; None:
        until they answer or time out)."""
        try:
            self._schedule_until_stopped()
        finally:
            self.stop.set()
            if self.bindings is not None:
                self.bindings.close(10.0 if stop_wait is None else stop_wait)
            if stop_wait is None:
                self.binding.shutdown(wait=True)
            else:
                with self._lock:
                    binds = list(self._binds)  # (the futures)
                wait_for(binds, timeout=stop_wait)
                self.binding.shutdown(wait=False)

    def _schedule_until_stopped(self) -> None:
        idle, trouble = IDLE_WAIT[0], POD_INITIAL_BACKOFF
        batch = 1  # doubles while pops come back full, up to pop_batch
        while not self.stop.is_set():
            leased = time.monotonic()  # no later than Redis starts the lease
            try:
                popped = self.queue.pop(batch)
            except (CacheError, *REDIS_AWAY) as error:  # Redis away: back off
                self.cache_errors += 1
                log.warning("popping the scheduling queue: %s; again in %.0f s", error, trouble)
                self.stop.wait(trouble)
                trouble = min(CACHE_MAX_BACKOFF, trouble * 2)
                batch = 1
                continue
            trouble = POD_INITIAL_BACKOFF
            if not popped:
                self.stop.wait(idle)
                idle = min(IDLE_WAIT[1], idle * 2)
                batch = 1
                continue
            idle = IDLE_WAIT[0]
            self.pops += 1
            full = len(popped) >= batch
            batch = min(self.pop_batch, batch * 2) if full else len(popped)
            self._attempt_batch(popped, leased + self.queue.lease * BATCH_LEASE_SHARE)

    def _attempt_batch(self, popped: list[QueuedPod], horizon: float) -> None:
        """Attempt the pods of one pop in order: each run of pods a batch can take
        (:meth:`_together`) claimed together, any other pod, or one whose batched claim did
        not land, attempted alone. Those not attempted when the scheduler stops, or past
        ``horizon`` (monotonic), are given back untried, as after Redis went away (then only
        while Redis answers: a Redis away leaves them to their lease)."""
        todo, alone = list(popped), set[str]()
        for tried in itertools.count():
            if not todo:
                return
            if tried and (self.stop.is_set() or time.monotonic() > horizon):
                self._give_back_untried(todo)
                return
            run = self._together(todo, alone)
            if run:
                again, answered = self.claim_together(run)
                todo = again + todo[len(run) :]
                if not answered:  # Redis away: the pop backs off
                    self._give_back_untried(todo)
                    return
                alone.update(queued.pod.uid for queued in again)
            elif not self.attempt(todo.pop(0)):  # Redis away: the pop backs off
                self._give_back_untried(todo)
                return

    def _together(self, todo: list[QueuedPod], alone: set[str]) -> list[QueuedPod]:
        """The pods at the head of ``todo`` a batch takes, when two or more: no member of a
        pod group, judged by the columns alone (:func:`columnar`: no host ports, scalar
        resources, inter-pod rules, spread or preferred affinity), not already tried in a
        batch (``alone``); none while the last snapshot held pods with affinity (their scores
        and checks read the snapshot's NodeInfo, which holds no reservation: ``claim_together``
        sees it again after its catch-up)."""
        snap = self.snapshot
        if not self.batch_claims or snap.have_pods_with_affinity_list:
            return []
        run = list(
            itertools.takewhile(
                lambda q: q.pod.uid not in alone and not group_of(q.pod) and columnar(q.pod),
                todo,
            )
        )
        return run if len(run) > 1 else []

    def claim_together(self, run: list[QueuedPod]) -> tuple[list[QueuedPod], bool]:
        """Place the pods of ``run`` one after another on one catch-up of the snapshot, each
        counted on its node before the next is placed (``Columns.reserve``: they spread as
        pods placed one by one), and send their claims in one ``sc_batch`` call. Returns the
        pods to attempt alone (no node found, or their claim refused: a conflict), in order,
        and False when Redis did not answer: to the catch-up (the first pod given back,
        backing off, the others returned to give back untried), or to the call until the
        scheduler stopped (its claims are settled once Redis answers: sent again with their
        ids, :meth:`_batch_sent_again`, else read back, :meth:`_settle_unanswered`)."""
        snap = self.snapshot
        try:
            self.cache.update_snapshot(snap)
        except (CacheError, *REDIS_AWAY) as error:
            return self._batch_failed(run, error)
        if snap.have_pods_with_required_anti_affinity_list or snap.have_pods_with_affinity_list:
            return run, True  # the snapshot's NodeInfo judges them, which has no reservations
        batch = self.cache.batch()
        sent: list[tuple[QueuedPod, Pod]] = []
        again: list[QueuedPod] = []
        racing = time.monotonic() < self._racing_until
        try:
            for queued in run:
                placement = self.columns.place(queued.pod, snap)
                if not placement.node:  # attempted alone: reported, preempting, parked
                    again.append(queued)
                    continue
                placed = queued.pod.with_node(placement.node)
                candidates = placement.ranked[1:] if racing else ()
                try:
                    batch.assume_pod(
                        placed, check_fit=True, candidates=candidates, deadline=self.deadline
                    )
                except CacheError as bad:  # this pod's claim alone: as attempt() after it
                    log.warning("pod %s/%s: %s", placed.namespace, placed.name, bad)
                    self._give_back(queued.pod, unschedulable=False)
                    continue
                self.columns.reserve(placement.node, queued.pod)
                sent.append((queued, placed))
            claimed = time.monotonic()  # no later than Redis sets the claims' deadlines
            try:
                results = batch.execute() if sent else []
            except (CacheError, *REDIS_AWAY) as error:
                # No answer, or the call failed whole: the claims may have landed all the same.
                pods = [queued.pod for queued, _ in sent]
                log.warning("%d claims sent together unanswered: %s", len(pods), log_reason(error))
                self._remember_unanswered(pods, claimed)
                try:
                    results = self._batch_sent_again(batch, pods, error)
                except (CacheError, *REDIS_AWAY):
                    return again, self._settle_unanswered(pods)
        finally:
            batch.close()
            self.columns.release(snap)
        for (queued, placed), result in zip(sent, results, strict=True):
            pod, refused = queued.pod, result.error
            if refused is None:
                taken = taken_node(result.reply, placed)
                self._submit(pod.with_node(taken), claimed if self.deadline else None)
            elif isinstance(refused, FitConflict):  # another replica was first: placed again
                for reason in refused.reasons:
                    metrics.FIT_CONFLICTS.labels(reason).inc()
                self._lost_race()
                again.append(queued)
            elif isinstance(refused, PodAlreadyExists):  # as attempt() judges it
                if not self._own_claim(pod):
                    self.lost += 1
            else:
                log.warning("pod %s/%s: %s", pod.namespace, pod.name, refused)
                self._give_back(pod, unschedulable=False)
        order = {id(queued): j for j, queued in enumerate(run)}
        return sorted(again, key=lambda queued: order[id(queued)]), True

    def _batch_sent_again(
        self, batch: CommandBatch, pods: list[Pod], error: Exception
    ) -> list[BatchResult]:
        """A batch's claims Redis did not answer, sent again as they were (``batch.settle``,
        with their ids: :meth:`_sent_again`); ``error`` raised again when they cannot be (a
        call that failed whole, or groups not all unsettled)."""
        groups = getattr(error, "unsettled", None) or []
        if sum(len(group) for group in groups) != len(pods):
            raise error
        return self._sent_again(pods, lambda: batch.settle(groups), error)

    def _lost_race(self) -> None:
        """A claim refused as a conflict (another replica was first): counted, and the next
        claims carry the next best nodes for ``RACING_SECONDS``."""
        self.conflicts += 1
        self._racing_until = time.monotonic() + RACING_SECONDS

    def _remember_unanswered(self, pods: list[Pod], claimed: float) -> None:
        """Claims of ``pods`` sent at ``claimed`` (monotonic) got no answer. The first such
        claim's time is kept: a later try cannot have claimed again (refused while the first
        holds), so its deadline counts from the first."""
        for pod in pods:
            self._unanswered.setdefault(pod.uid, claimed)
        while len(self._unanswered) > REPORTS_KEPT:
            del self._unanswered[next(iter(self._unanswered))]

    def _settle_unanswered(self, pods: list[Pod]) -> bool:
        """Claims of ``pods`` sent with no answer (Redis away, a reply lost, a call failed
        whole) that cannot be sent again with their ids (:meth:`_sent_again`: too late, or
        the error named no command): once Redis answers, each that landed is bound as this
        replica's own
        (:meth:`_own_claim`) and the others go back to the queue. None is given back before:
        another replica would find its claim held, not its own, and drop the pod (found in
        review). False when the scheduler stopped first (their leases lapse, and a claim that
        landed holds until its deadline)."""
        try:
            for pod in pods:
                if not self._own_claim(pod, patient=True):
                    self._give_back(pod, unschedulable=False)
        except (CacheError, *REDIS_AWAY):
            return False
        return True

    def _batch_failed(self, run: list[QueuedPod], error: Exception) -> tuple[list[QueuedPod], bool]:
        """A batch's catch-up failed (before any claim was sent: a call that fails is settled,
        :meth:`_batch_sent_again`): as :meth:`attempt` after the same error, the first pod
        goes back to the queue (backing off); with Redis away the others are returned to give
        back untried, else to attempt alone."""
        pod = run[0].pod
        log.warning("pod %s/%s and %d more: %s", pod.namespace, pod.name, len(run) - 1, error)
        self._give_back(pod, unschedulable=False)
        return run[1:], not isinstance(error, REDIS_AWAY)

    def _give_back_untried(self, rest: list[QueuedPod]) -> None:
        """Give ``rest`` back to the queue untried; once Redis does not answer, the others are
        left to their lease (it lapses: they come back to the queue then)."""
        for j, queued in enumerate(rest):
            try:
                self.queue.untried(queued.pod)
            except (CacheError, *REDIS_AWAY) as error:
                log.warning(
                    "%d pods popped and not attempted left to their lease: %s",
                    len(rest) - j,
                    log_reason(error),
                )
                return
            self.untried += 1

    def attempt(self, queued: QueuedPod) -> bool:
        """One scheduling attempt of a pod popped from the queue; a pod not placed goes back
        to it (parked when no node could take it, else backing off). False when Redis did not
        answer (the pod is given back if it can be, else its lease on it lapses)."""
        pod = queued.pod
        try:
            handled = self.gangs.attempt(pod)
            if handled is not None:
                return handled
            outcome = self.schedule_one(pod)
        except PodAlreadyExists:  # another replica claimed it (after this one's lease lapsed)
            if not self._own_claim(pod):
                self.lost += 1
            return True
        except CacheError as error:
            log.warning("pod %s/%s: %s", pod.namespace, pod.name, error)
            if pod.uid in self._unanswered:  # its claim may hold: settled, not given back
                return self._settle_unanswered([pod])
            self._give_back(pod, unschedulable=False)
            return not isinstance(error, REDIS_AWAY)
        except REDIS_AWAY as error:  # a snapshot read or a claim Redis did not answer
            log.warning(
                "pod %s/%s: Redis unavailable: %s", pod.namespace, pod.name, log_reason(error)
            )
            if pod.uid in self._unanswered:
                return self._settle_unanswered([pod])
            self._give_back(pod, unschedulable=False)
            return False
        if outcome.node:
            return True
        if outcome.unschedulable:
            self.unschedulable += 1
            self._report(pod, outcome.reason)
        # Parked until a helpful event: for a pod with required affinity or DoNotSchedule
        # spread, also the arrival of a pod its selectors select (upstream's QueueingHints).
        retry = self._give_back(pod, outcome.unschedulable, wake_tokens(pod))
        log.info(
            "pod %s/%s %s: %s (%s%s)",
            pod.namespace,
            pod.name,
            "unschedulable" if outcome.unschedulable else "not scheduled",
            outcome.reason,
            retry,
            " until a cluster change could help" if retry == "parked" else "",
        )
        return True

    def _give_back(self, pod: Pod, unschedulable: bool, wake: tuple[str, ...] = ()) -> str:
        try:
            attempt = self.snapshot.last_id or ""
            return self.queue.retry(pod, unschedulable, attempt, wake=wake).outcome
        except (CacheError, *REDIS_AWAY) as error:  # its lease lapses instead
            log.warning("pod %s/%s: back to the queue: %s", pod.namespace, pod.name, error)
            return "lease left to lapse"

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
            self._reported.move_to_end(pod.uid)
            while len(self._reported) > REPORTS_KEPT:
                self._reported.popitem(last=False)
