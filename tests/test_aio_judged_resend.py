"""The asyncio batch settles a judged claim whose reply was lost as the sync batch does
(``CommandBatch.judged_unanswered``, found in review of stop 51's resend): a bare claim Redis
refused as ``unchecked`` is claimed again judged (``AsyncCache.judged_claim``); when that
judged claim lands and its reply is lost, ``settle`` sends the very same judged claim again
and answers the pod claimed where it landed, once. Before, the asyncio batch forgot the bare
claim once it had judged it: settled, the claim stayed refused ``unchecked`` though it had
landed, and its pod was left assumed by a claim its caller took for refused. On every
backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.aio import AsyncCache
from schedcache.errors import FitConflict, RetriesExhausted
from schedcache.store.commands import Command
from tests.apis import async_client_for
from tests.conftest import backend_url
from tests.factories import make_pod
from tests.test_claims_resent_faults import HOST, anti, labelled_node
from tests.test_claims_sent_again import CLAIMS


@pytest.fixture
def opened(
    make_cache: Callable[..., Cache], backend: str, request: pytest.FixtureRequest
) -> Callable[..., Any]:
    """``await opened()``: an AsyncCache on this test's backend, and the sync cache of its
    name, holding node n1 and a pod with required anti-affinity (so bare claims are refused
    ``unchecked`` and judged again)."""
    sync_cache = make_cache()
    sync_cache.add_node(labelled_node("n1"))
    sync_cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="nothing")))
    url = backend_url(backend, request)

    async def opening() -> tuple[AsyncCache, Cache]:
        client = await async_client_for(sync_cache, url)
        return await AsyncCache.open(client, sync_cache.name, replica="aio"), sync_cache

    return opening


def lose_judged_replies(cache: AsyncCache, losses: int) -> list[Command]:
    """The first ``losses`` claims ``cache.run`` sends land and their replies are lost
    (the retry policy spent); the claims, as sent."""
    run, lost = cache.run, list[Command]()

    async def lossy(command: Command) -> Any:
        reply = await run(command)
        if command.name in CLAIMS and len(lost) < losses:
            lost.append(command)
            error = redis.ConnectionError("no answer (test)")
            raise cache.store.gave_up(command, 3, time.monotonic(), error)
        return reply

    cache.run = lossy  # type: ignore[method-assign]
    return lost


@pytest.mark.parametrize("losses", [1, 2])
def test_a_judged_claim_whose_reply_was_lost_is_settled_where_it_landed(
    opened: Callable[..., Any], losses: int
) -> None:
    async def main() -> None:
        cache, sync_cache = await opened()
        lost = lose_judged_replies(cache, losses=1)
        batch = cache.batch()
        batch.assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True, deadline=30.0)
        with pytest.raises(RetriesExhausted):
            await batch.execute()  # the bare claim refused unchecked, its judged claim lost
        assert [c.name for c in lost] == ["timed_claim"]
        sent = batch.sent
        if losses == 2:  # the settle's own resend of the judged claim unanswered too
            run = cache.store.run

            async def away(command: Command) -> Any:
                raise cache.store.gave_up(command, 3, time.monotonic(), redis.ConnectionError())

            cache.store.run = away
            with pytest.raises(RetriesExhausted):
                await batch.settle(sent)
            cache.store.run = run
        (result,) = await batch.settle(sent)
        assert result.ok, result.error
        record = sync_cache.get_pod_record(make_pod("a", "n1", "1", "1Gi"))
        assert (record.state, record.node) == ("assumed", "n1")
        pods = sorted(pod.name for pod in sync_cache.get_node_info("n1").pods)
        assert pods == ["a", "guard"]  # counted once
        # A second claim of the same pod now is refused: the first one holds.
        again = (
            await cache.batch()
            .assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True, deadline=30.0)
            .execute()
        )
        assert not again[0].ok
        await cache.aclose()
        await cache.client.aclose()

    asyncio.run(main())


def test_a_judged_claim_refused_on_its_settle_is_a_result_not_an_error(
    opened: Callable[..., Any],
) -> None:
    """No room left when the bare claim is judged: the batch answers FitConflict as the
    claim's result, and nothing is counted on the node."""

    async def main() -> None:
        cache, sync_cache = await opened()
        (result,) = (
            await cache.batch()
            .assume_pod(make_pod("big", "n1", "64", "1Gi"), check_fit=True, deadline=30.0)
            .execute()
        )
        assert isinstance(result.error, FitConflict) and "unchecked" not in str(result.error)
        assert [p.name for p in sync_cache.get_node_info("n1").pods] == ["guard"]
        await cache.aclose()
        await cache.client.aclose()

    asyncio.run(main())
