"""Faults around a claim sent again with its command id after Redis did not answer (found in
review of the change that made the scheduler do so): a judged claim that moved to a
candidate, a settle retried after one that failed, a judged claim's reply lost while settling,
real restarts of redis-server during a batch and during one pod's claim, a stop while waiting.
On every backend (the restarts: real servers)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import redis

from schedcache import Cache
from schedcache.errors import FitConflict, RetriesExhausted
from schedcache.model.values import Pod
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store.batch import CommandBatch, SentGroup
from schedcache.store.commands import Command
from tests.apiserver import FakeApiServer
from tests.factories import make_node, make_pod
from tests.scheduling import eventually, fed_scheduler, pending, pending_on_big
from tests.test_claims_sent_again import CLAIMS
from tests.test_reference_batches import bindings, bound

HOST = "kubernetes.io/hostname"


def anti(key: str, **labels: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def labelled_node(name: str) -> Any:
    return make_node(name, "8", "8Gi", labels={HOST: name})


def scheduler_on(cache: Cache) -> ReferenceScheduler:
    """A reference scheduler whose loop never runs: its methods are driven by the test."""
    return ReferenceScheduler(cache, mock.MagicMock(), "ref", preemption=False)


def lose_reply_of_claim(cache: Cache, nth: int) -> list[Command]:
    """The ``nth`` claim (1-based) ``cache.run`` sends lands and its reply is lost: the
    store's retry policy gives up (``RetriesExhausted``, with the command). The commands so
    treated are listed."""
    run = cache.run
    seen: list[Command] = []
    lost: list[Command] = []

    def unanswered(command: Command) -> Any:
        if command.name in CLAIMS and not lost:
            seen.append(command)
            if len(seen) == nth:
                lost.append(command)
                run(command)
                error = redis.ConnectionError("no answer (review)")
                raise cache.store.gave_up(command, 3, time.monotonic(), error)
        return run(command)

    cache.run = unanswered  # type: ignore[method-assign]
    return lost


# -- per-pod path: the claim Redis judged and moved to a candidate --------------------------


# Found in review (mended): per-pod resend reads the node from the scheduler's `placed` pod, not
# from the command: a bare claim refused `unchecked` is judged again (Cache.judged_claim) and may
# move to a candidate; when that judged claim's reply is lost, the resend answers the generation
# alone and _claim returns placed.node_name: the Binding goes to a node the pod was not claimed on
# (one the anti-affinity rules forbid)
def test_resent_judged_claim_that_moved_to_a_candidate_reports_the_node_it_took(
    make_cache: Callable[..., Cache],
) -> None:
    # Placed after the scheduler's snapshot (so its claim goes bare): a pod whose required
    # anti-affinity repels app=db pods from n1.
    cache, placed, taken = judged_claim_reply_lost(make_cache, "db", "n1", ["n2"])
    record = cache.get_pod_record(placed)
    assert record.node == "n2"  # Redis placed it where the rules allow
    assert taken == record.node  # ... and the scheduler would bind it there


def test_resent_judged_claim_without_a_move_reports_its_node(
    make_cache: Callable[..., Cache],
) -> None:
    """The same lost reply with no candidate to move to: the resend answers the node."""
    cache, placed, taken = judged_claim_reply_lost(make_cache, "other", "n2", [])
    assert taken == cache.get_pod_record(placed).node == "n2"


def judged_claim_reply_lost(
    make_cache: Callable[..., Cache], repelled: str, node: str, candidates: list[str]
) -> tuple[Cache, Pod, str]:
    """Nodes n1 and n2, a pod on n1 with required anti-affinity to app=``repelled`` added
    after the scheduler's snapshot (so the scheduler's claim goes bare, is refused
    ``unchecked`` and judged), then pod db (app=db) claimed on ``node`` with ``candidates``,
    the judged claim's reply lost: the cache, the pod and the node ``_claim`` reported."""
    cache = make_cache(replica="a")
    for name in ("n1", "n2"):
        cache.add_node(labelled_node(name))
    cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app=repelled)))
    scheduler = scheduler_on(cache)
    placed = make_pod("db", node, labels={"app": "db"})
    lost = lose_reply_of_claim(cache, nth=2)  # the bare claim is refused; the judged one lands
    taken = scheduler._claim(placed, candidates, judged=False, claimed=time.monotonic())
    assert lost, "the judged claim was sent"
    return cache, placed, taken
    assert placed.uid not in scheduler._unanswered


def test_resent_bare_claim_refused_unchecked_is_a_conflict_not_a_binding(
    make_cache: Callable[..., Cache],
) -> None:
    """The bare claim itself went unanswered and did not land; meanwhile a pod with required
    anti-affinity was placed: the resend is refused `unchecked` and surfaces as a
    FitConflict (placed again by schedule_one), nothing claimed, nothing left unanswered."""
    cache = make_cache(replica="a")
    for name in ("n1", "n2"):
        cache.add_node(labelled_node(name))
    scheduler = scheduler_on(cache)
    placed = make_pod("db", "n1", labels={"app": "db"})
    run = cache.run

    def unanswered(command: Command) -> Any:
        cache.run = run  # type: ignore[method-assign]
        # Not applied; the guard lands meanwhile.
        cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="db")))
        raise cache.store.gave_up(command, 3, time.monotonic(), redis.ConnectionError("x"))

    cache.run = unanswered  # type: ignore[method-assign]
    with pytest.raises(FitConflict) as info:
        scheduler._claim(placed, [], judged=False, claimed=time.monotonic())
    assert "unchecked" in info.value.reasons
    assert cache.pod_state(placed) is None
    assert placed.uid not in scheduler._unanswered


# -- batch path: the judged claim batch.settle makes for an `unchecked` bare claim ----------

PODS = [f"p{i:02d}" for i in range(4)]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with pending_on_big(PODS) as s:
        yield s


def lose_first_judged_reply(cache: Cache, events: list[str], lose: bool = True) -> None:
    """Once ``"armed"`` is in ``events``, the first claim ``cache.run`` sends (a batch's judged
    claim) lands and, with ``lose``, its reply is lost (the retry policy spent); ``"judged"``
    is then added to ``events``."""
    run = cache.run

    def lossy_run(command: Command) -> Any:
        if "armed" in events and "judged" not in events and command.name in CLAIMS:
            events.append("judged")
            if not lose:
                return run(command)
            run(command)
            error = redis.ConnectionError("no answer (review)")
            raise cache.store.gave_up(command, 3, time.monotonic(), error)
        return run(command)

    cache.run = lossy_run  # type: ignore[method-assign]


def wrap_batches(
    cache: Cache, wrap: Callable[[CommandBatch, Callable[[], Any]], Callable[[], Any]]
) -> None:
    """Every batch ``cache.batch()`` makes runs ``wrap(batch, its execute)`` as its execute."""
    make = cache.batch

    def batch(*args: Any, **options: Any) -> CommandBatch:
        made = make(*args, **options)
        made.execute = wrap(made, made.execute)  # type: ignore[method-assign]
        return made

    cache.batch = batch  # type: ignore[method-assign]


def settle_loses_judged_reply(
    events: list[str], lose: bool = True
) -> Callable[[ReferenceScheduler], None]:
    """The scheduler's first batch of claims is applied (every bare claim refused as
    `unchecked`: a pod with required anti-affinity was placed since its snapshot) and its reply
    lost; settled, the first judged claim lands and its reply is lost too."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        cache = scheduler.cache
        lose_first_judged_reply(cache, events, lose)

        def unanswering(made: CommandBatch, execute: Callable[[], Any]) -> Callable[[], Any]:
            def unanswered() -> Any:
                claims = list(made.group)
                if events or not any(c.name in CLAIMS for c in claims):
                    return execute()
                events.append("batch")
                cache.add_pod(make_pod("guard", "big", affinity=anti(HOST, app="nothing")))
                bare = dict(made.bare_claims)
                made.bare_claims = {}  # applied as Redis applies it: refused `unchecked`
                results = execute()
                assert all(r.error is not None for r in results), results
                made.bare_claims = bare
                events.append("armed")
                raise RetriesExhausted(
                    "no answer (review)", unsettled=[SentGroup(claims, time.monotonic())]
                )

            return unanswered

        wrap_batches(cache, unanswering)

    return prepare


def guard_lands_then_judged_reply_lost(events: list[str]) -> Callable[[ReferenceScheduler], None]:
    """The scheduler's first batch: a guard with required anti-affinity lands just before it is
    sent (every bare claim refused `unchecked` for real, in the execute), and the first judged
    claim lands with its reply lost: the execute raises the judged claim's RetriesExhausted
    (with the batch's groups, ``groups_unsettled``), not a fake one."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        cache = scheduler.cache
        lose_first_judged_reply(cache, events)

        def guarded(made: CommandBatch, execute: Callable[[], Any]) -> Callable[[], Any]:
            def guarded_execute() -> Any:
                if not events and any(c.name in CLAIMS for c in made.group):
                    events.append("armed")
                    cache.add_pod(make_pod("guard", "big", affinity=anti(HOST, app="nothing")))
                return execute()

            return guarded_execute

        wrap_batches(cache, guarded)

    return prepare


# Found in review (mended): batch.settle clears bare_claims before judging them again
# (Cache.judged_claim); when that judged claim lands with its reply lost, _until_redis_answers
# sends settle() again, which now answers the bare claim `unchecked` without judging it: the pod
# is placed again alone, refused PodAlreadyExists, and _own_claim (its unanswered entry already
# dropped) takes its own claim for another's: counted lost, assumed and unbound until the claim's
# deadline
# (Second scenario, found holding in review: the judged claim of the FIRST execute lost,
# _batch_sent_again takes its RetriesExhausted, which now carries the batch's groups, and settles
# on the same batch.)
@pytest.mark.parametrize("lost", ["in the settle", "in the first execute"])
def test_settled_batch_whose_judged_claim_reply_is_lost_binds_every_pod(
    make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path, lost: str
) -> None:
    events: list[str] = []
    losing = (
        settle_loses_judged_reply if lost == "in the settle" else guard_lands_then_judged_reply_lost
    )
    with fed_scheduler(
        make_cache(replica="a"),
        server,
        tmp_path,
        losing(events),
        retry_delay=0.2,
        max_backoff=0.4,
        pop_batch=4,
    ) as scheduler:
        eventually(lambda: "judged" in events, timeout=20)
        until = time.monotonic() + 10
        while set(bound(server)) != set(PODS) and time.monotonic() < until:
            time.sleep(0.05)
        lost, placed = scheduler.lost, bound(server)
    assert (lost, sorted(placed)) == (0, PODS)
    assert bindings(server) == {name: 1 for name in PODS}


# -- the scheduler stopping while the resend waits for Redis ---------------------------------


def test_scheduler_stopping_while_a_resend_waits_ends_promptly_and_binds_nothing(
    make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """Every claim goes unanswered (never applied): the resend loop waits; stop() ends the
    thread within seconds, nothing is bound, nothing is left claimed."""
    events: list[str] = []
    cache = make_cache(replica="a")

    def prepare(scheduler: ReferenceScheduler) -> None:
        def unanswered(command: Command) -> Any:
            if command.name not in CLAIMS:
                return Cache.run(cache, command)
            events.append(command.name)
            error = redis.ConnectionError("no answer (review)")
            raise cache.store.gave_up(command, 3, time.monotonic(), error)

        cache.run = unanswered  # type: ignore[method-assign]

    with fed_scheduler(
        cache, server, tmp_path, prepare, pop_batch=1, batch_claims=False
    ) as scheduler:
        eventually(lambda: len(events) >= 2, timeout=20)  # the first send and a resend
        started = time.monotonic()
        scheduler.stop.set()  # the block's end joins the scheduler's thread
    thread_ended = time.monotonic() - started
    assert thread_ended < 10
    assert bindings(server) == {}
    for name in PODS:
        (obj,) = [o for o in server.objects("Pod") if o["metadata"]["name"] == name]
        assert cache.pod_state(Pod.from_k8s(obj)) is None


# -- the resend refused: node filled meanwhile; another replica popped the pod --------------


def test_resend_refused_because_the_node_filled_counts_nothing_twice(
    make_cache: Callable[..., Cache],
) -> None:
    cache = make_cache(replica="a")
    cache.add_node(make_node("n1", "2", "8Gi"))
    scheduler = scheduler_on(cache)
    placed = make_pod("p", "n1", "2", "1Gi")
    run = cache.run

    def unanswered(command: Command) -> Any:
        cache.run = run  # type: ignore[method-assign]
        cache.add_pod(make_pod("filler", "n1", "1", "1Gi"))  # not applied; the node fills
        raise cache.store.gave_up(command, 3, time.monotonic(), redis.ConnectionError("x"))

    cache.run = unanswered  # type: ignore[method-assign]
    with pytest.raises(FitConflict):
        scheduler._claim(placed, [], judged=False, claimed=time.monotonic())
    assert cache.pod_state(placed) is None
    assert cache.get_node_info("n1").requested.milli_cpu == 1000
    assert placed.uid not in scheduler._unanswered
    assert cache.verify() == []


def test_resend_landing_after_another_replica_popped_the_pod_binds_it_once(
    make_cache: Callable[..., Cache],
) -> None:
    """A's first send never lands; its resend lands; B (which popped the pod after A's lease
    lapsed) then claims it: refused, and B does not take A's claim for its own."""
    a_cache, b_cache = make_cache(replica="a"), make_cache(replica="b")
    a_cache.add_node(labelled_node("n1"))
    a, b = scheduler_on(a_cache), scheduler_on(b_cache)
    placed = make_pod("p", "n1", "1", "1Gi")
    run = a_cache.run

    def unanswered(command: Command) -> Any:
        a_cache.run = run  # type: ignore[method-assign]
        raise a_cache.store.gave_up(command, 3, time.monotonic(), redis.ConnectionError("x"))

    a_cache.run = unanswered  # type: ignore[method-assign]
    assert a._claim(placed, [], judged=False, claimed=time.monotonic()) == "n1"
    from schedcache.errors import PodAlreadyExists

    with pytest.raises(PodAlreadyExists):
        b._claim(placed, [], judged=False, claimed=time.monotonic())
    assert not b._own_claim(placed)
    assert a_cache.get_node_info("n1").requested.milli_cpu == 1000


# -- the API: RetriesExhausted ---------------------------------------------------------------


def test_retries_exhausted_keeps_its_positional_api() -> None:
    error = RetriesExhausted("m", [["g"]])
    assert error.unsettled == [["g"]] and error.command is None
    assert str(error) == "m"
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, RetriesExhausted) and str(again) == "m"


def test_async_single_command_carries_its_command(make_cache: Callable[..., Cache]) -> None:
    """The aio store's give-up is the shared StoreCore.gave_up: it carries the command."""
    import inspect

    from schedcache.aio import store as aio_store

    assert "self.gave_up(command" in inspect.getsource(aio_store)


# -- a real redis-server killed with a batch's reply unread, restarted ----------------------


def real_server_restart(
    tmp_path: Path, persistence: tuple[str, ...], kube: FakeApiServer, restart_after: float
) -> tuple[ReferenceScheduler, list[str], Cache]:
    import uuid

    from schedcache.store.connection import connect
    from tests.test_resilience import SHORT, own_server, restart_later, url_of

    names = [f"r{i:02d}" for i in range(12)]
    gen = own_server(tmp_path / "redis", *persistence)
    redis_server = next(gen)
    try:
        cache = Cache(
            connect(url_of(redis_server)), f"t-{uuid.uuid4().hex[:8]}", retry=SHORT, replica="a"
        )
        events: list[str] = []

        def prepare(scheduler: ReferenceScheduler) -> None:
            make = scheduler.cache.batch

            def batch(*args: Any, **options: Any) -> CommandBatch:
                made = make(*args, **options)
                read = made._read_reply

                def killed_before_the_reply() -> None:
                    if not events and any(
                        c.name in CLAIMS for _, group in made.in_flight for c in group
                    ):
                        events.append("killed")
                        time.sleep(0.05)  # applied; its reply lost with the connection
                        assert made.connection is not None
                        made.connection.disconnect()
                        redis_server.kill()
                        restart_later(redis_server, restart_after)
                    read()

                made._read_reply = killed_before_the_reply  # type: ignore[method-assign]
                return made

            scheduler.cache.batch = batch  # type: ignore[method-assign]

        from tests.scheduling import node

        kube.create(node("a", "4"))
        kube.create(node("b", "4"))
        with fed_scheduler(
            cache, kube, tmp_path, prepare, retry_delay=0.2, max_backoff=0.4, pop_batch=8
        ) as scheduler:
            for name in names:
                kube.create(pending(name, "500m"))
            eventually(lambda: bool(events), timeout=20)
            eventually(lambda: redis_server.alive, timeout=20)
            eventually(lambda: set(bound(kube)) == set(names), timeout=20)
            time.sleep(0.5)
        return scheduler, names, cache
    finally:
        redis_server.kill()


# Found in review (mended): the scheduler's thread dies (ValueError: zip() argument 2 is longer
# than argument 1 in claim_together): _until_redis_answers calls batch.settle(groups) again on the
# same CommandBatch after a try that failed while sending (Redis still down), and settle appends
# the groups to in_flight again without dropping the failed try's: the replies are read twice,
# results are twice as long as the claims sent
def test_real_restart_with_aof_while_a_batch_reply_is_lost_binds_each_pod_once(
    tmp_path: Path,
) -> None:
    """AOF always: the claims and their ids survive; the batch is settled from its ids."""
    with FakeApiServer() as kube:
        scheduler, names, _ = real_server_restart(
            tmp_path, ("--appendonly", "yes", "--appendfsync", "always"), kube, 1.0
        )
        assert bindings(kube) == {name: 1 for name in names}
        per_node: dict[str, int] = {}
        for node_name in bound(kube).values():
            per_node[node_name] = per_node.get(node_name, 0) + 500
        assert all(milli <= 4000 for milli in per_node.values()), per_node
        assert scheduler.lost == 0


# Found in review (mended): CommandBatch.settle is not safe to call again after it raised: the
# failed try's groups stay in in_flight (and sent), so the next settle reads every reply twice and
# returns twice as many results as commands; the scheduler retries settle on one batch
def test_settle_again_after_a_settle_that_failed_answers_each_command_once(
    make_cache: Callable[..., Cache],
) -> None:
    from schedcache.store.retry import RetryPolicy

    cache = make_cache(
        replica="a", retry=RetryPolicy(attempts=2, within=0.3, first_delay=0.01, max_delay=0.02)
    )
    cache.add_node(labelled_node("n1"))
    batch = cache.batch()
    send = batch._send
    down = [True]

    def sending(group_id: str, group: list[Command]) -> None:
        if down[0]:
            raise redis.ConnectionError("Redis away (review)")
        send(group_id, group)

    batch._send = sending  # type: ignore[method-assign]
    for name in ("a", "b"):
        batch.assume_pod(make_pod(name, "n1", "1", "1Gi"), check_fit=True, deadline=30.0)
    with pytest.raises(RetriesExhausted) as info:
        batch.execute()
    groups = info.value.unsettled
    with pytest.raises(RetriesExhausted):
        batch.settle(groups)  # Redis still away
    down[0] = False
    import threading

    outcome: list[Any] = []

    def settle() -> None:
        try:
            outcome.append(batch.settle(groups))
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=settle, daemon=True)  # it may block for ever (fakeredis)
    thread.start()
    thread.join(10)
    assert outcome, "settle did not return within 10 s"
    (results,) = outcome
    assert isinstance(results, list), results
    assert len(results) == 2, [r.command.subject for r in results]
    assert all(r.ok for r in results)


def test_settled_batch_refused_unchecked_is_judged_again_and_binds_every_pod(
    make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """The same with the judged claim answered: batch.settle keeps the batch's bare claims
    across the first RetriesExhausted and judges those refused `unchecked` (held)."""
    events: list[str] = []
    with fed_scheduler(
        make_cache(replica="a"),
        server,
        tmp_path,
        settle_loses_judged_reply(events, lose=False),
        retry_delay=0.2,
        max_backoff=0.4,
        pop_batch=4,
    ) as scheduler:
        eventually(lambda: "judged" in events, timeout=20)
        eventually(lambda: set(bound(server)) == set(PODS), timeout=10)
        time.sleep(0.3)
        assert scheduler.lost == 0
    assert bindings(server) == {name: 1 for name in PODS}


def test_real_restart_with_aof_during_a_per_pod_claim_binds_each_pod_once(
    tmp_path: Path,
) -> None:
    """Per-pod path, a real redis-server (AOF always) killed as a claim is sent and started
    again 1 s later, past the 0.3 s retry policy: the claim is sent again with its id once
    Redis answers; every pod bound once, no node over its CPU (held)."""
    import uuid

    from schedcache.store.connection import connect
    from tests.scheduling import node
    from tests.test_resilience import SHORT, own_server, restart_later, url_of

    names = [f"s{i:02d}" for i in range(6)]
    gen = own_server(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    redis_server = next(gen)
    events: list[str] = []
    try:
        cache = Cache(
            connect(url_of(redis_server)), f"t-{uuid.uuid4().hex[:8]}", retry=SHORT, replica="a"
        )

        def prepare(scheduler: ReferenceScheduler) -> None:
            run = scheduler.cache.run

            def killed(command: Command) -> Any:
                if not events and command.name in CLAIMS:
                    events.append("killed")
                    redis_server.kill()
                    restart_later(redis_server, 1.0)
                return run(command)

            scheduler.cache.run = killed  # type: ignore[method-assign]

        with FakeApiServer() as kube:
            kube.create(node("a", "2"))
            kube.create(node("b", "2"))
            with fed_scheduler(
                cache, kube, tmp_path, prepare, pop_batch=1, batch_claims=False
            ) as scheduler:
                for name in names:
                    kube.create(pending(name, "500m"))
                eventually(lambda: bool(events), timeout=20)
                eventually(lambda: set(bound(kube)) == set(names), timeout=30)
                time.sleep(0.5)
                assert scheduler.lost == 0
            assert bindings(kube) == {name: 1 for name in names}
            per_node: dict[str, int] = {}
            for node_name in bound(kube).values():
                per_node[node_name] = per_node.get(node_name, 0) + 500
            assert all(milli <= 2000 for milli in per_node.values()), per_node
    finally:
        redis_server.kill()
