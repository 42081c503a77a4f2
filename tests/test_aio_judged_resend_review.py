"""Review of commit 02f8a8e (the asyncio batch keeps a judged claim whose reply was lost, as
the sync batch does; the judging shared by both batches), as a stranger would attack it; the
findings mended since (each judged claim kept from before it is sent until every judged claim
of its pass is answered). On every backend (fakeredis, real Redis, Redis Cluster).

A node ``n1`` holds a pod with required anti-affinity, so every bare claim of a batch is
refused ``unchecked`` and claimed again judged (``judged_claim_command``, sent through
``cache.run``: the helpers below lose, or cancel, the replies of some of those judged claims
after they land).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.aio import AsyncCache
from schedcache.aio.batch import AsyncCommandBatch
from schedcache.errors import FitConflict, PodAlreadyExists, RetriesExhausted
from schedcache.store import commands
from schedcache.store.batch import BatchResult
from schedcache.store.commands import Command
from schedcache.store.replies import UNCHECKED
from tests.apis import async_client_for
from tests.conftest import backend_url
from tests.factories import make_pod
from tests.test_claims_resent_faults import HOST, anti, labelled_node, lose_reply_of_claim
from tests.test_claims_sent_again import CLAIMS

NAMES = ("a", "b", "c")


def small(name: str, node: str = "n1") -> Any:
    return make_pod(name, node, "1", "1Gi")


@pytest.fixture
def sync_cache(make_cache: Callable[..., Cache]) -> Cache:
    """Nodes n1 and n2; on n1 a guard with required anti-affinity toward app=db pods."""
    cache = make_cache()
    for node in ("n1", "n2"):
        cache.add_node(labelled_node(node))
    cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="db")))
    return cache


@pytest.fixture
def opened(sync_cache: Cache, backend: str, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``await opened()``: an AsyncCache of ``sync_cache``'s name on this test's backend."""
    url = backend_url(backend, request)

    async def opening() -> AsyncCache:
        client = await async_client_for(sync_cache, url)
        return await AsyncCache.open(client, sync_cache.name, replica="aio")

    return opening


async def closing(cache: AsyncCache) -> None:
    await cache.aclose()
    await cache.client.aclose()


def with_cache(opened: Callable[..., Any], body: Callable[[Any], Awaitable[None]]) -> None:
    """``await body(cache)`` on an AsyncCache from ``opened``, closed after."""

    async def main() -> None:
        cache = await opened()
        try:
            await body(cache)
        finally:
            await closing(cache)

    asyncio.run(main())


async def lost_judged_batch(
    cache: AsyncCache, names: tuple[str, ...] = ("a",), nth: int = 1
) -> Any:  # (an AsyncCommandBatch: its settle takes batch.sent as it is)
    """A batch of bare claims of ``names`` whose ``nth`` judged claim landed and its reply was
    lost: ``execute()`` raised RetriesExhausted."""
    lose_nth_judged(cache, nth=nth)
    batch = cache.batch()
    for name in names:
        batch.assume_pod(small(name), check_fit=True, deadline=30.0)
    with pytest.raises(RetriesExhausted):
        await batch.execute()
    return batch


def lose_nth_judged(cache: AsyncCache, nth: int, hang: bool = False) -> list[Command]:
    """The ``nth`` claim (1-based) ``cache.run`` sends lands; its reply is lost (the retry
    policy spent: ``RetriesExhausted``), or with ``hang`` never comes (the caller's
    cancellation ends the wait). The claims so treated are listed."""
    run = cache.run
    seen: list[Command] = []
    lost: list[Command] = []

    async def lossy(command: Command) -> Any:
        if command.name in CLAIMS and not lost:
            seen.append(command)
            if len(seen) == nth:
                lost.append(command)
                await run(command)
                if hang:
                    await asyncio.Event().wait()
                error = redis.ConnectionError("no answer (review)")
                raise cache.store.gave_up(command, 3, time.monotonic(), error)
        return await run(command)

    cache.run = lossy  # type: ignore[method-assign]
    return lost


def assert_placed_once(sync_cache: Cache, names: tuple[str, ...], node: str = "n1") -> None:
    """Each pod assumed on ``node``, and counted once there (beside the guard)."""
    for name in names:
        record = sync_cache.get_pod_record(small(name, node))
        assert (record.state, record.node) == ("assumed", node), name
    on_node = sorted(pod.name for pod in sync_cache.get_node_info(node).pods)
    expected = sorted([*names, "guard"]) if node == "n1" else sorted(names)
    assert on_node == expected


def outcome(results: list[BatchResult]) -> dict[str, str]:
    return {
        r.command.subject.split("/")[-1].split()[0]: "ok" if r.ok else type(r.error).__name__
        for r in results
    }


# -- several judged claims, one lost in the middle -----------------------------------------


# Found in review (mended): the judged claim of an EARLIER bare claim landed and was answered,
# then a later one's reply was lost (RetriesExhausted: the answered results are dropped with
# it). The settle's group is answered from its id (every bare claim `unchecked` again), and the
# earlier claim, in no judged_unanswered, is judged anew: its own landed claim is refused
# PodAlreadyExists (the very defect 02f8a8e mends for the lost one). Same in the sync batch.
def test_aio_judged_claims_answered_before_a_lost_one_are_settled_once(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    async def body(cache: Any) -> None:
        batch = await lost_judged_batch(cache, NAMES, nth=2)
        results = await batch.settle(batch.sent)
        assert_placed_once(sync_cache, NAMES)  # holds: nothing counted twice
        assert outcome(results) == {name: "ok" for name in NAMES}

    with_cache(opened, body)


# Found in review (mended): the sync batch too: an answered judged claim before the lost one is
# judged anew by settle and refused PodAlreadyExists
def test_sync_judged_claims_answered_before_a_lost_one_are_settled_once(
    sync_cache: Cache,
) -> None:
    lose_reply_of_claim(sync_cache, nth=2)
    batch = sync_cache.batch()
    for name in NAMES:
        batch.assume_pod(small(name), check_fit=True, deadline=30.0)
    groups = [list(batch.group)]
    with pytest.raises(RetriesExhausted):
        batch.execute()
    results = batch.settle(groups)
    assert_placed_once(sync_cache, NAMES)
    assert outcome(results) == {name: "ok" for name in NAMES}


def test_aio_lost_judged_claim_in_the_middle_keeps_the_later_bare_claims_and_counts_once(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    """What holds of the same: a and the lost one (b) are kept, c (never judged) keeps its bare
    claim; after settle each pod is on n1 once and a second settle changes nothing."""

    async def body(cache: Any) -> None:
        batch = await lost_judged_batch(cache, NAMES, nth=2)
        ids = [command.id for group in batch.sent for command in group]
        # a (answered) and b (lost) both kept until every judged claim of the pass is
        # answered; c never judged
        assert list(batch.judged_unanswered) == ids[:2]
        assert set(batch.bare_claims) == set(ids)  # given back
        first = outcome(await batch.settle(batch.sent))
        assert first == {name: "ok" for name in NAMES}
        assert not batch.judged_unanswered and not batch.bare_claims
        assert_placed_once(sync_cache, NAMES)
        await batch.settle(batch.sent)  # (every bare claim already taken: not judged)
        assert_placed_once(sync_cache, NAMES)

    with_cache(opened, body)


# -- cancellation / BaseException while the judged claim is awaited --------------------------


# Found in review (mended): the asyncio module documents "a coroutine cancelled inside execute()
# leaves every group applied or not; await batch.settle(batch.sent) then settles them exactly
# once". Cancelled while its judged claim is awaited (the claim landed), judging_again keeps
# nothing (it catches RetriesExhausted only): the bare claim is given back, and settle judges it
# anew, refusing the pod's own landed claim as PodAlreadyExists.
def test_aio_cancelled_while_the_judged_claim_is_awaited_settles_it_once(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    async def body(cache: Any) -> None:
        run = cache.run
        lost = lose_nth_judged(cache, nth=1, hang=True)
        batch = cache.batch()
        batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batch.execute(), timeout=2.0)
        assert lost, "the judged claim was sent (and landed)"
        assert batch.bare_claims, "the bare claim is given back (holds)"
        cache.run = run
        (result,) = await batch.settle(batch.sent)
        assert_placed_once(sync_cache, ("a",))  # holds
        assert result.ok, result.error

    with_cache(opened, body)


# Found in review (mended): a judged claim unanswered and then cancelled on its resend is
# dropped from judged_unanswered: the next settle judges anew, PodAlreadyExists
def test_aio_cancelled_while_the_unanswered_judged_claim_is_resent_keeps_it(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    async def body(cache: Any) -> None:
        batch = await lost_judged_batch(cache)
        store_run = cache.store.run

        async def hanging(command: Command) -> Any:
            await asyncio.Event().wait()

        cache.store.run = hanging
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batch.settle(batch.sent), timeout=1.0)
        cache.store.run = store_run
        (result,) = await batch.settle(batch.sent)
        assert_placed_once(sync_cache, ("a",))
        assert result.ok, result.error

    with_cache(opened, body)


# Found in review (mended): sync: a BaseException (KeyboardInterrupt) after the judged claim
# landed keeps nothing; settle judges anew, PodAlreadyExists
def test_sync_interrupted_after_the_judged_claim_landed_settles_it_once(
    sync_cache: Cache,
) -> None:
    run = sync_cache.run

    def interrupted(command: Command) -> Any:
        run(command)
        sync_cache.run = run  # type: ignore[method-assign]
        raise KeyboardInterrupt

    sync_cache.run = interrupted  # type: ignore[method-assign]
    batch = sync_cache.batch()
    batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
    groups = [list(batch.group)]
    with pytest.raises(KeyboardInterrupt):
        batch.execute()
    assert batch.bare_claims  # given back (holds)
    (result,) = batch.settle(groups)
    assert_placed_once(sync_cache, ("a",))
    assert result.ok, result.error


# -- settle on another batch ---------------------------------------------------------------


# Found in review: the batch's RetriesExhausted says "settle them with
# cache.batch().settle(error.unsettled)" (errors.py's docstring too); a new batch has neither
# the bare claims nor judged_unanswered, so a pod whose judged claim landed is answered
# PodAlreadyExists (its bare claim run again finds its own claim): refused, though it holds.
# (mended: the message and what the error carries) RetriesExhausted's message said to settle
# with cache.batch().settle(error.unsettled), and a judged claim's RetriesExhausted carried no
# groups at all. Now the error from a judged claim carries the batch's groups, and the message
# and docs/aio.md say to settle on the same batch (a new one holds neither the bare claims nor
# the judged claims, and would refuse a landed one as PodAlreadyExists).
def test_aio_a_judged_claims_failure_carries_the_groups_to_settle_on_the_same_batch(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    async def body(cache: Any) -> None:
        lose_nth_judged(cache, nth=1)
        batch = cache.batch()
        batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
        with pytest.raises(RetriesExhausted) as info:
            await batch.execute()
        assert "same batch" in str(info.value)
        assert info.value.unsettled == batch.sent and info.value.command is not None
        (result,) = await batch.settle(info.value.unsettled)
        assert_placed_once(sync_cache, ("a",))  # holds: it landed
        assert result.ok, result.error

    with_cache(opened, body)


# -- what held ---------------------------------------------------------------------------


def test_aio_mixed_batch_each_bare_claim_judged_once(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    """Bare claims refused unchecked (fits / too big) beside other commands, no loss: each
    judged once, the big one's FitConflict a result, nothing counted twice; and the same
    results as the sync batch gives."""

    async def body(cache: Any) -> None:
        batch = cache.batch(chunk_size=2)
        batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
        batch.assume_pod(make_pod("big", "n1", "64", "1Gi"), check_fit=True)
        batch.add_pod(make_pod("bound", "n2", "1", "1Gi"))
        batch.assume_pod(small("c", "n2"), check_fit=True)
        got = outcome(await batch.execute())
        assert got == {"a": "ok", "big": "FitConflict", "bound": "ok", "c": "ok"}
        assert not batch.judged_unanswered and not batch.bare_claims
        assert_placed_once(sync_cache, ("a",))
        assert sorted(p.name for p in sync_cache.get_node_info("n2").pods) == ["bound", "c"]

    with_cache(opened, body)


def test_aio_lost_judged_claim_moved_to_a_candidate_settles_on_the_candidate(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    """An app=db pod on n1 is repelled by the guard: judged, it moves to candidate n2; that
    reply lost, settle answers n2 (the node it took), counted once there."""

    async def body(cache: Any) -> None:
        lose_nth_judged(cache, nth=1)
        batch = cache.batch()
        db = make_pod("db", "n1", "1", "1Gi", labels={"app": "db"})
        batch.assume_pod(db, check_fit=True, candidates=["n2"], deadline=30.0)
        with pytest.raises(RetriesExhausted):
            await batch.execute()
        (result,) = await batch.settle(batch.sent)
        assert result.ok, result.error
        node = result.reply[1]
        assert (node.decode() if isinstance(node, bytes) else node) == "n2"
        assert sync_cache.get_pod_record(db).node == "n2"
        assert [p.name for p in sync_cache.get_node_info("n2").pods] == ["db"]
        assert sorted(p.name for p in sync_cache.get_node_info("n1").pods) == ["guard"]

    with_cache(opened, body)


def test_aio_bare_store_batch_leaves_an_unchecked_claim_refused(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    """A bare AsyncStore's batch has no judged_claim: a fit-checked claim added with add()
    is refused unchecked, a result, nothing kept, nothing written."""

    async def body(cache: Any) -> None:
        batch = AsyncCommandBatch(cache.store)
        claim = commands.assume_pod(small("a"), True, None, 0.0)
        (result,) = await batch.add(claim).execute()
        assert isinstance(result.error, FitConflict)
        assert result.error.reasons == (UNCHECKED,)
        assert not batch.judged_unanswered
        assert sync_cache.pod_state(small("a")) is None

    with_cache(opened, body)


def test_aio_second_claim_of_a_settled_pod_is_refused_not_counted(
    opened: Callable[..., Any], sync_cache: Cache
) -> None:
    """After a lost judged claim is settled, the same pod claimed in a new batch is refused
    PodAlreadyExists (a result, the pod counted once)."""

    async def body(cache: Any) -> None:
        batch = await lost_judged_batch(cache)
        (settled,) = await batch.settle(batch.sent)
        assert settled.ok
        again = cache.batch().assume_pod(small("a"), check_fit=True, deadline=30.0)
        (result,) = await again.execute()
        assert isinstance(result.error, PodAlreadyExists)
        assert_placed_once(sync_cache, ("a",))

    with_cache(opened, body)
