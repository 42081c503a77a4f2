"""Review of commit e611775 (a batch keeps each judged claim from before it is sent until
every judged claim of its pass is answered; ``judged_claim_command``; a judged claim's
RetriesExhausted carries the batch's groups; the extender keeps the HostPriorityList pieces of
recurring rows), as a stranger would attack it. On every backend (fakeredis, real Redis,
Redis Cluster).

A node ``n1`` holds a pod with required anti-affinity, so every bare claim of a batch is
refused ``unchecked`` by Redis and claimed again judged (``judged_claim_command``, sent through
``cache.run``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from itertools import permutations
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.aio import AsyncCache
from schedcache.errors import RetriesExhausted, ValidationError
from schedcache.extender import protocol
from schedcache.extender.service import Extender
from schedcache.model.values import Node
from schedcache.store.batch import BatchResult, CommandBatch
from schedcache.store.commands import Command
from tests.apis import async_client_for
from tests.conftest import backend_url
from tests.factories import make_node, make_pod, node_manifest, pod_manifest
from tests.test_claims_resent_faults import (
    HOST,
    anti,
    labelled_node,
    lose_reply_of_claim,
)
from tests.test_claims_sent_again import CLAIMS
from tests.test_extender_columns import per_node


def small(name: str, node: str = "n1") -> Any:
    return make_pod(name, node, "1", "1Gi")


@pytest.fixture
def guarded(make_cache: Callable[..., Cache]) -> Cache:
    """Nodes n1 and n2; on n1 a guard with required anti-affinity toward app=db pods."""
    cache = make_cache()
    for node in ("n1", "n2"):
        cache.add_node(labelled_node(node))
    cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="db")))
    return cache


def outcome(results: list[BatchResult]) -> dict[str, str]:
    return {
        r.command.subject.split("/")[-1].split()[0]: "ok" if r.ok else type(r.error).__name__
        for r in results
    }


def on_n1(cache: Cache) -> list[str]:
    return sorted(pod.name for pod in cache.get_node_info("n1").pods)


def failed_execute(batch: CommandBatch, names: tuple[str, ...]) -> RetriesExhausted:
    """``batch`` given bare claims of ``names``, executed: the RetriesExhausted it raised."""
    for name in names:
        batch.assume_pod(small(name), check_fit=True, deadline=30.0)
    with pytest.raises(RetriesExhausted) as info:
        batch.execute()
    return info.value


def snapshot_read_fails_once(cache: Cache) -> list[str]:
    """``cache.judged_claim_command`` raises RetriesExhausted (Redis away while the snapshot
    is read: no claim made, nothing sent) the first time; the pods so refused are listed."""
    make = cache.judged_claim_command
    failed: list[str] = []

    def failing(pod: Any, *args: Any) -> Command:
        if not failed:
            failed.append(pod.name)
            raise RetriesExhausted("snapshot read: no answer (review)")
        return make(pod, *args)

    cache.judged_claim_command = failing  # type: ignore[method-assign,assignment]
    return failed


# -- a judged claim refused, then a later one lost ------------------------------------------


# Holds: the first judged claim is refused FitConflict by Redis (a filler took n1's room after
# the snapshot judged it), the second lands with its reply lost. Both are kept; settled on the
# same batch, the refused one is a refusal again (not applied), the landed one is answered ok
# once, and nothing stays kept (a second settle of the same groups sends no judged claim).
def test_judged_claim_refused_before_a_lost_one_is_refused_once_and_not_kept(
    guarded: Cache,
) -> None:
    run = guarded.run
    sent: list[Command] = []

    def filled_then_lost(command: Command) -> Any:
        if command.name in CLAIMS:
            sent.append(command)
            if len(sent) == 1:
                guarded.add_pod(make_pod("filler", "n1", "6", "1Gi"))
            elif len(sent) == 2:
                run(command)
                error = redis.ConnectionError("no answer (review)")
                raise guarded.store.gave_up(command, 3, time.monotonic(), error)
        return run(command)

    guarded.run = filled_then_lost  # type: ignore[method-assign]
    batch = guarded.batch()
    batch.assume_pod(make_pod("big", "n1", "4", "1Gi"), check_fit=True, deadline=30.0)
    error = failed_execute(batch, ("a",))
    assert len(batch.judged_unanswered) == 2
    results = batch.settle(error.unsettled)
    assert outcome(results) == {"big": "FitConflict", "a": "ok"}
    assert "unchecked" not in str(results[0].error)
    assert batch.judged_unanswered == {}
    assert on_n1(guarded) == ["a", "filler", "guard"]
    assert len(sent) == 4  # each judged claim sent again once


# -- a judged claim that fails without RetriesExhausted -------------------------------------


# Holds: a judged claim failing with an error no settle mends (a CacheError, a Redis error) is
# raised as it is; the same batch then runs an unrelated batch of claims, answered alone (no
# stale bare claim or kept judged claim of the failed pass in its results).
@pytest.mark.parametrize(
    "failure", [ValidationError("pod", "claim", "review"), redis.ResponseError("review")]
)
def test_failed_judged_claim_leaves_the_batch_fit_for_an_unrelated_execute(
    guarded: Cache, failure: Exception
) -> None:
    run = guarded.run
    raised: list[str] = []

    def failing(command: Command) -> Any:
        if command.name in CLAIMS and not raised:
            raised.append(command.subject)
            raise failure
        return run(command)

    guarded.run = failing  # type: ignore[method-assign]
    batch = guarded.batch()
    batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
    with pytest.raises(type(failure)):
        batch.execute()
    batch.assume_pod(small("b"), check_fit=True, deadline=30.0)
    assert outcome(batch.execute()) == {"b": "ok"}
    assert on_n1(guarded) == ["b", "guard"]


# -- judged_claim_command failing --------------------------------------------------------------


# Holds: the snapshot read of judged_claim_command gives up (nothing made, nothing kept): the
# error carries the batch's groups, and settled on the same batch the pod is judged and placed.
def test_judged_claim_command_giving_up_is_settled_on_the_same_batch(guarded: Cache) -> None:
    failed = snapshot_read_fails_once(guarded)
    batch = guarded.batch()
    error = failed_execute(batch, ("a", "b"))
    assert failed == ["a"] and error.unsettled
    assert batch.judged_unanswered == {}
    assert outcome(batch.settle(error.unsettled)) == {"a": "ok", "b": "ok"}
    assert on_n1(guarded) == ["a", "b", "guard"]


# -- the same batch reused before it is settled ----------------------------------------------


# Holds: a judged claim landed, its reply lost; the same batch runs an unrelated claim first
# (answered alone), then settles the failed groups: the kept judged claim is sent again and
# answered ok once.
def test_unrelated_execute_before_the_settle_keeps_the_lost_judged_claim(guarded: Cache) -> None:
    lose_reply_of_claim(guarded, nth=1)
    batch = guarded.batch()
    error = failed_execute(batch, ("a",))
    batch.assume_pod(small("b"), check_fit=True, deadline=30.0)
    assert outcome(batch.execute()) == {"b": "ok"}
    assert outcome(batch.settle(error.unsettled)) == {"a": "ok"}
    assert on_n1(guarded) == ["a", "b", "guard"]


# Found in review: the first pass failed before its judged claim was made (the snapshot read
# gave up: the error's groups say settle on the same batch). An unrelated execute on that batch
# first takes every bare claim and drops those not among its own results, so the settle after
# it finds the failed pass's bare claim refused `unchecked` with nothing to judge it by: it is
# answered FitConflict('unchecked') (never placed), which a Cache's batch otherwise never answers.
# Expected: the bare claims of a pass not yet settled kept until settled, as the judged ones are.
# Found in review (mended): an execute between a failure and its settle drops the failed pass's
# bare claims: the settle answers FitConflict('unchecked') instead of judging the claim
def test_unrelated_execute_before_the_settle_keeps_the_unjudged_bare_claim(
    guarded: Cache,
) -> None:
    snapshot_read_fails_once(guarded)
    batch = guarded.batch()
    error = failed_execute(batch, ("a",))
    batch.assume_pod(small("b"), check_fit=True, deadline=30.0)
    assert outcome(batch.execute()) == {"b": "ok"}
    assert outcome(batch.settle(error.unsettled)) == {"a": "ok"}


@pytest.fixture
def opened(guarded: Cache, backend: str, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``await opened()``: an AsyncCache of ``guarded``'s name on this test's backend."""
    url = backend_url(backend, request)

    async def opening() -> AsyncCache:
        client = await async_client_for(guarded, url)
        return await AsyncCache.open(client, guarded.name, replica="aio")

    return opening


# Found in review: the asyncio batch alike (the same claims_judged_again): an execute between
# the failure and its settle drops the failed pass's bare claim, and the settle answers
# FitConflict('unchecked').
# Found in review (mended): an execute between a failure and its settle drops the failed pass's
# bare claims (asyncio batch): the settle answers FitConflict('unchecked')
def test_aio_unrelated_execute_before_the_settle_keeps_the_unjudged_bare_claim(
    opened: Callable[..., Any],
) -> None:
    async def main() -> None:
        cache: AsyncCache = await opened()
        try:
            make = cache.judged_claim_command
            failed: list[str] = []

            async def failing(pod: Any, *args: Any) -> Command:
                if not failed:
                    failed.append(pod.name)
                    raise RetriesExhausted("snapshot read: no answer (review)")
                return await make(pod, *args)

            cache.judged_claim_command = failing  # type: ignore[method-assign,assignment]
            batch = cache.batch()
            batch.assume_pod(small("a"), check_fit=True, deadline=30.0)
            with pytest.raises(RetriesExhausted) as info:
                await batch.execute()
            batch.assume_pod(small("b"), check_fit=True, deadline=30.0)
            assert outcome(await batch.execute()) == {"b": "ok"}
            assert outcome(await batch.settle(info.value.unsettled)) == {"a": "ok"}
        finally:
            await cache.aclose()
            await cache.client.aclose()

    asyncio.run(main())


# Found in review: settling on the same batch is now what the error says to do, yet the sync
# batch's settle replaces the commands added since the failure (its unsent group) with the
# settled groups: a claim added before the settle is never sent and has no result (the asyncio
# batch keeps it for its next execute). Expected: sent with the settle (a result of its own), or
# the settle refused while commands wait; never silently dropped.
# Found in review (mended): CommandBatch.settle overwrites batch.group: a command added after
# the failure and before the settle is dropped unsent, with no result
def test_settle_on_the_same_batch_keeps_commands_added_since_the_failure(
    guarded: Cache,
) -> None:
    lose_reply_of_claim(guarded, nth=1)
    batch = guarded.batch()
    error = failed_execute(batch, ("a",))
    batch.assume_pod(small("b"), check_fit=True, deadline=30.0)
    results = batch.settle(error.unsettled)
    left = batch.execute()  # whatever the settle left to send
    assert {**outcome(results), **outcome(left)} == {"a": "ok", "b": "ok"}
    assert on_n1(guarded) == ["a", "b", "guard"]


# -- the extender's kept HostPriorityList pieces -------------------------------------------------


# Holds: prioritize's bytes equal the per-node code's while the kept pieces would go stale if
# keyed wrongly: the same names sent again after the columns were rebuilt with the same names
# (a node removed and added back), after the node list changed order, and past KEPT_LISTS lists
# (evicted and written again).
def test_kept_host_items_answer_as_the_per_node_code_across_rebuilds(cache: Cache) -> None:
    for i in range(4):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i}", f"{i + 1}", "8Gi")))
    ext = Extender(cache)
    manifest = pod_manifest("p", "", "1500m", "1Gi", uid="uid-p")

    def check(names: list[str]) -> None:
        args = protocol.filter_args({"Pod": manifest, "NodeNames": names})
        for _ in range(2):
            answered = ext.prioritize(args)  # (brings the snapshot up to date)
            expected = per_node(ext, args)[1]
            assert json.dumps(answered) == json.dumps(expected)
            wire = json.dumps(expected, separators=(",", ":")).encode()
            assert ext.prioritize_answer(args) == wire, names

    lists = [["n0", "n1", "n2", "n3"], ["n3", "n2", "n1", "n0"], ["n2", "n0"]]
    for names in lists:
        check(names)
    kept_before = len(ext._items)
    assert kept_before >= 1
    cache.remove_node(Node.from_k8s(node_manifest("n1", "2", "8Gi")))
    cache.add_node(Node.from_k8s(node_manifest("n1", "8", "8Gi")))  # same name, new rows
    for names in lists:
        check(names)
    cache.remove_node(Node.from_k8s(node_manifest("n0", "1", "8Gi")))
    check(["n3", "n2", "n1"])
    cache.add_node(make_node("n0", "2", "8Gi"))
    nodes = ["n0", "n1", "n2", "n3"]
    many = [*permutations(nodes, 3), *permutations(nodes, 2)]  # more lists than are kept
    for picked in many:
        check(list(picked))
    assert len(ext._items) <= 32
    for names in lists:
        check(names)
