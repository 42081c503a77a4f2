"""What only the asyncio API has to prove, on every backend: many coroutines claiming at once
never oversubscribe a node, a command cancelled mid-flight is applied whole or not at all and
settles exactly once when run again, and the lease task ends with ``aclose``."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import pytest

from schedcache import Cache
from schedcache.aio import AsyncCache, AsyncExpiryWorker, connect_async
from schedcache.aio.connection import embedded_async_client
from schedcache.errors import FitConflict, PodAlreadyExists, ValidationError
from schedcache.store import commands
from tests.apis import async_client_for
from tests.conftest import REAL_REDIS_URL, backend_url, real_client
from tests.factories import make_node, make_pod, pod_manifest
from tests.tcp_proxy import FaultyProxy


@pytest.fixture
def open_async(
    make_cache: Callable[..., Cache], backend: str, request: pytest.FixtureRequest
) -> Callable[..., Any]:
    """``await open_async(**options)``: an AsyncCache on this test's backend and cache name
    (the sync cache of the same name cleans up after the test)."""
    sync_cache = make_cache()
    url = backend_url(backend, request)

    async def opened(**options: Any) -> tuple[AsyncCache, Cache]:
        client = await async_client_for(sync_cache, url)
        options.setdefault("replica", "aio")
        return await AsyncCache.open(client, sync_cache.name, **options), sync_cache

    return opened


async def close(cache: AsyncCache) -> None:
    """The cache's lease task, then its client (the caller's to close)."""
    await cache.aclose()
    await cache.client.aclose()


def test_200_coroutines_claiming_one_node_never_oversubscribe_it(open_async) -> None:  # type: ignore[no-untyped-def]
    async def main() -> tuple[int, int]:
        cache, sync_cache = await open_async()
        await cache.add_node(make_node("only", "10", "100Gi"))  # room for 10 pods of 1 CPU

        async def claim(index: int) -> bool:
            try:
                await cache.assume_pod(make_pod(f"p{index}", "only", "1", "1Gi"), check_fit=True)
            except FitConflict:
                return False
            return True

        results = await asyncio.gather(*(claim(i) for i in range(200)))
        await close(cache)
        info = sync_cache.get_node_info("only")
        assert info.requested.milli_cpu <= info.allocatable.milli_cpu
        return sum(results), len(info.pods)

    claimed, on_node = asyncio.run(main())
    assert claimed == on_node == 10


def test_a_cancelled_command_settles_exactly_once(open_async) -> None:  # type: ignore[no-untyped-def]
    """Cancel ``run`` at random points (before sending, while Redis runs it, while the reply
    is read); the same command run again answers without applying it twice."""

    async def main() -> None:
        cache, sync_cache = await open_async()
        await cache.add_node(make_node("n", "100", "100Gi"))
        rng = random.Random(5)
        for index in range(30):
            pod = make_pod(f"p{index}", "n", "100m", "1Mi")
            command = commands.assume_pod(pod, False, None, 0.0)
            task = asyncio.ensure_future(cache.run(command))
            if index % 2:  # let it get that far: a few turns of the loop, or some time
                await asyncio.sleep(rng.uniform(0, 0.0006))
            else:
                for _ in range(rng.randrange(4)):
                    await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await cache.run(command)  # settles it: applied now, or answered as before
            with pytest.raises(PodAlreadyExists):
                await cache.assume_pod(pod)  # a new command: refused, the pod is there once
        await close(cache)
        claims = [e for e in sync_cache.events() if e.type == "PodAssumed"]
        assert len(claims) == 30 and len({e.uid for e in claims}) == 30
        assert sync_cache.generation() == 31  # the node, then one change per pod
        assert sync_cache.verify() == []

    asyncio.run(main())


def test_the_lease_task_is_cancelled_by_aclose(open_async) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        cache, sync_cache = await open_async(lease_ttl=0.3)
        await cache.add_node(make_node("n", "4", "8Gi"))
        await cache.assume_pod(make_pod("p", "n", "1", "1Gi"))
        lease = cache.lease
        assert lease is not None and lease.task is not None
        await asyncio.sleep(0.5)  # past the ttl: only the heartbeat keeps it
        assert sync_cache.client.exists(sync_cache.keys.lease("aio"))
        await close(cache)
        assert lease.task is None
        await asyncio.sleep(0.5)
        assert not sync_cache.client.exists(sync_cache.keys.lease("aio"))  # it lapsed

    asyncio.run(main())


def test_an_async_batch_claims_in_order_and_then_holds_the_lease(open_async) -> None:  # type: ignore[no-untyped-def]
    """``async with cache.batch()``: the commands applied in order, each judged on its own (the
    claim that no longer fits refused, the others kept); the lease heartbeat starts once the
    claims are sent."""

    async def main() -> None:
        cache, sync_cache = await open_async(lease_ttl=0.3)
        async with cache.batch(chunk_size=2) as batch:
            batch.add_node(make_node("n", "1", "1Gi"))
            for index in range(3):
                batch.assume_pod(make_pod(f"c{index}", "n", "400m", "1Mi"), check_fit=True)
            assert len(batch) == 4 and cache.lease is not None and cache.lease.task is None
        assert len(batch) == 0 and cache.lease.task is not None
        results = await cache.batch().add_pod(make_pod("c0", "n", "400m", "1Mi")).execute()
        assert results[0].ok and await cache.pod_state("c0") == "added"  # the informer confirms
        await asyncio.sleep(0.5)  # past the ttl: only the heartbeat keeps the lease
        assert sync_cache.client.exists(sync_cache.keys.lease("aio"))
        await close(cache)
        assert sorted(pod.name for pod in sync_cache.get_node_info("n").pods) == ["c0", "c1"]
        types = [e.type for e in sync_cache.events()]
        assert types[:3] == ["NodeAdded", "PodAssumed", "PodAssumed"] and len(types) == 4

    asyncio.run(main())


def test_the_expiry_worker_coroutine_shares_the_loop_and_stops_at_once(open_async) -> None:  # type: ignore[no-untyped-def]
    """Bounded rounds as the sync worker's (23 due pods in calls of 5, the not-due and the
    unfinished kept); three workers at once expire each pod once; ``run()`` as a task wakes
    for the deadline while other coroutines go on, and ``stop()`` ends it mid-sleep."""

    async def main() -> None:
        cache, sync_cache = await open_async(ttl=0.3)
        past = sync_cache.client.time()[0] - 3600
        with sync_cache.batch() as batch:
            for index in range(83):
                pod = make_pod(f"due{index}", f"n{index % 4}", "10m", "1Mi")
                batch.assume_pod(pod)
                batch.finish_binding(pod, now=past)
        unfinished = make_pod("binding", "n1", "10m", "1Mi")
        await cache.assume_pod(unfinished)
        workers = [AsyncExpiryWorker(cache, batch=5) for _ in range(3)]
        rounds = await asyncio.gather(*(worker.run_once() for worker in workers))
        expired = [uid for round_ in rounds for uid in round_]
        assert sorted(expired) == sorted(f"due{index}" for index in range(83))
        assert await cache.pod_state(unfinished) == "assumed"
        assert await workers[0].seconds_until_next_deadline() == 1.0  # nothing finished

        worker = AsyncExpiryWorker(cache, interval=30.0)
        task = asyncio.create_task(worker.run())
        await cache.finish_binding(unfinished)  # due in 0.3 s
        added = 0
        while await cache.pod_state(unfinished) and added < 500:  # the loop is not blocked
            await cache.add_pod(make_pod(f"other{added}", "n2", "1m", "1Mi"))
            added += 1
            await asyncio.sleep(0.01)
        assert await cache.pod_state(unfinished) is None and 0 < added < 500
        worker.stop()
        await asyncio.wait_for(task, 2)  # asleep for up to 30 s: woken by stop()
        assert worker.expired_total == 1
        await close(cache)
        expiries = [e.uid for e in sync_cache.events() if e.type == "PodExpired"]
        assert len(expiries) == len(set(expiries)) == 84

    asyncio.run(main())


def test_audit_folds_in_a_thread_while_the_loop_goes_on(open_async) -> None:  # type: ignore[no-untyped-def]
    """replay, verify, checkpoint, compact, at and history answer as the sync cache's do, and
    the loop keeps serving other coroutines while the fold runs."""

    async def main() -> None:
        cache, sync_cache = await open_async()
        async with cache.batch() as batch:
            for index in range(300):
                batch.add_node(make_node(f"n{index}", "4", "8Gi"))
                batch.add_pod(make_pod(f"p{index}", f"n{index}", "100m", "1Mi"))
        middle = (await cache.last_events(301))[0].id  # just after the 300th event
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        running = asyncio.create_task(ticker())
        assert await cache.verify() == []
        assert ticks > 0, "the loop stood still during verify"
        running.cancel()
        replayed = await cache.replay()
        assert replayed == sync_cache.replay() and len(replayed.nodes) == 300
        then = await cache.at(middle)  # n0..n149 and their pods
        assert then.num_nodes() == 150 and sum(len(i.pods) for i in then.node_info_list) == 150
        assert await cache.checkpoint() == (await cache.last_events(1))[0].id
        await cache.add_pod(make_pod("late", "n0", "1m", "1Mi"))
        assert await cache.compact() == 599  # all before the checkpoint's own event
        assert [e.type for e in await cache.history("late")] == ["PodAdded"]
        assert await cache.verify() == [] and sync_cache.verify() == []
        assert len(await cache.list_pods()) == 301
        await close(cache)

    asyncio.run(main())


def test_audit_on_a_client_of_unknown_origin_asks_for_a_sync_client() -> None:
    """A redis.asyncio client made by hand: its URL is unknown, so the audit calls say what to
    pass instead of guessing; with ``sync_client=`` they work."""
    name = f"aio-{uuid.uuid4().hex[:8]}"
    sync_cache = Cache(real_client(), name)

    async def main() -> None:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(REAL_REDIS_URL)
        cache = await AsyncCache.open(client, name)
        await cache.add_node(make_node("n", "1", "1Gi"))
        with pytest.raises(ValidationError, match=r"sync_client.*connect_async"):
            await cache.verify()
        given = await AsyncCache.open(client, name, sync_client=real_client())
        assert await given.verify() == []
        await given.aclose()
        await cache.aclose()
        await client.aclose()

    try:
        asyncio.run(main())
    finally:
        sync_cache.clear()


def test_a_batch_cancelled_just_after_it_started_raises_and_settles_once(open_async) -> None:  # type: ignore[no-untyped-def]
    """Found by a stranger: cancelled one to three loop turns after ``execute()`` began, the
    batch ran on and returned its results (redis-py's send waits in ``asyncio.wait_for``,
    which on Python 3.11 can swallow a cancellation). The caller must see CancelledError;
    ``settle(batch.sent)`` then applies every command once."""

    async def main() -> None:
        cache, sync_cache = await open_async()
        await cache.add_node(make_node("n", "1000", "1000Gi", pods="100000"))
        total = 0
        for turns in range(4):
            batch = cache.batch(chunk_size=50)
            for index in range(600):
                batch.add_pod(make_pod(f"t{turns}-{index}", "n", "1m", "1Ki"))
            task = asyncio.ensure_future(batch.execute())
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            if turns == 0:  # cancelled before it ran: nothing sent, the commands still there
                assert batch.sent == [] and len(batch) == 600
                results = await batch.execute()
            else:
                assert len(batch) == 0 and sum(len(group) for group in batch.sent) == 600
                results = await cache.batch().settle(batch.sent)
            assert len(results) == 600 and all(result.ok for result in results)
            total += 600
        await close(cache)
        added = [e.uid for e in sync_cache.events() if e.type == "PodAdded"]
        assert len(added) == len(set(added)) == total
        assert sync_cache.verify() == []

    asyncio.run(main())


def through_proxy(test: Callable[[FaultyProxy, AsyncCache, Cache], Any]) -> None:
    """Run ``await test(proxy, cache, sync_cache)`` with an AsyncCache on the real Redis
    through a :class:`FaultyProxy`, and a sync cache of the same name to check with."""
    target = urlparse(REAL_REDIS_URL)
    proxy = FaultyProxy(target.hostname or "127.0.0.1", target.port or 6379)
    database = int((target.path or "/0").strip("/") or 0)
    name = f"aio-{uuid.uuid4().hex[:8]}"
    sync_cache = Cache(real_client(), name, replica="check")

    async def main() -> None:
        client = await connect_async(f"redis://127.0.0.1:{proxy.port}/{database}")
        cache = await AsyncCache.open(client, name, replica="aio")
        await test(proxy, cache, sync_cache)
        await cache.aclose()
        await client.aclose()

    try:
        asyncio.run(main())
    finally:
        proxy.close()
        sync_cache.clear()


def test_an_async_batch_whose_reply_was_lost_is_sent_again_and_applied_once() -> None:
    async def test(proxy: FaultyProxy, cache: AsyncCache, sync_cache: Cache) -> None:
        await cache.add_node(make_node("n", "100", "100Gi"))
        batch = cache.batch(chunk_size=5)
        for index in range(30):
            batch.add_pod(make_pod(f"lost-{index:02}", "n", "100m", "1Mi"))
        proxy.cut_next("after", b"lost-12")  # Redis runs that window; its replies are lost
        results = await batch.execute()
        assert proxy.cuts["after"] == 1
        assert len(results) == 30 and all(result.ok for result in results)
        added = [e.uid for e in sync_cache.events() if e.type == "PodAdded"]
        assert added == [f"lost-{index:02}" for index in range(30)]  # once each, in order

    through_proxy(test)


def test_a_cancelled_async_batch_settles_exactly_once() -> None:
    """Cancelled while Redis has run a group and its reply is held: ``settle(batch.sent)``
    answers the groups that ran from their ids and applies the rest, once."""

    async def test(proxy: FaultyProxy, cache: AsyncCache, sync_cache: Cache) -> None:
        await cache.add_node(make_node("n", "100", "100Gi"))
        batch = cache.batch(chunk_size=5)
        for index in range(60):  # 12 groups: two round trips of 8 and 4
            batch.add_pod(make_pod(f"held-{index:02}", "n", "100m", "1Mi"))
        proxy.hold_next(b"held-00")
        task = asyncio.ensure_future(batch.execute())
        for _ in range(200):  # until Redis has run the first window (its reply held)
            if sync_cache.pod_count() == 40:
                break
            await asyncio.sleep(0.01)
        assert sync_cache.pod_count() == 40 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        proxy.release()
        results = await cache.batch().settle(batch.sent)
        assert len(results) == 60 and all(result.ok for result in results)
        added = [e.uid for e in sync_cache.events() if e.type == "PodAdded"]
        assert added == [f"held-{index:02}" for index in range(60)]
        assert sync_cache.verify() == []

    through_proxy(test)


def test_connect_async_takes_the_sync_urls_and_errors() -> None:
    async def main() -> None:
        client = await connect_async("embedded")
        cache = await AsyncCache.open(client, "embedded-cache")
        await cache.add_node(make_node("n", "1", "1Gi"))
        assert await cache.node_count() == 1 and await cache.generation() == 1
        await close(cache)
        with pytest.raises(ValidationError, match="timeout"):
            await connect_async("embedded", timeout=0)
        with pytest.raises(Exception, match=r"unsupported scheme 'http'"):
            await connect_async("http://localhost")
        with pytest.raises(Exception, match=r"cannot reach Redis at redis://u:\*\*\*@127.0.0.1:1"):
            await connect_async("redis://u:secret@127.0.0.1:1/0", connect_timeout=0.5)

    asyncio.run(main())


def test_cancelled_after_redis_ran_it_the_resend_is_answered_not_applied() -> None:
    """Deterministic: a proxy in front of the real Redis holds the reply of the claim; Redis
    has applied it; the coroutine is cancelled while it waits; the same command run again (a
    new connection) gets the first outcome and nothing is applied twice."""

    async def test(proxy: FaultyProxy, cache: AsyncCache, sync_cache: Cache) -> None:
        await cache.add_node(make_node("n", "4", "8Gi"))
        pod = make_pod("held", "n", "1", "1Gi")
        command = commands.assume_pod(pod, False, None, 0.0)
        proxy.hold_next(command.id.encode())
        task = asyncio.ensure_future(cache.run(command))
        for _ in range(200):  # until Redis has run it (the reply is held at the proxy)
            if sync_cache.pod_state(pod) == "assumed":
                break
            await asyncio.sleep(0.01)
        assert sync_cache.pod_state(pod) == "assumed" and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        proxy.release()
        await cache.run(command)  # answered from the remembered id
        assert [e.type for e in sync_cache.events()] == ["NodeAdded", "PodAssumed"]
        assert proxy.cuts["hold"] == 1

    through_proxy(test)


def test_the_readme_aiohttp_example_claims_and_refuses() -> None:
    """The README's asyncio block, served by aiohttp's test server on the embedded cache."""
    from aiohttp.test_utils import TestClient, TestServer

    from tests.test_readme import python_blocks

    (block,) = [b for b in python_blocks() if "schedcache.aio" in b]
    namespace: dict[str, Any] = {"__name__": "readme_aio"}
    exec(compile(block, "README.md", "exec"), namespace)
    app = namespace["app"]

    async def main() -> None:
        async with TestClient(TestServer(app)) as client:
            cache = app[namespace["CACHE"]]
            await cache.add_node(make_node("node-1", "1", "2Gi"))
            pod = pod_manifest("web-0", "", "600m", "1Gi", uid="w0")
            first = await client.post("/claim", json={"pod": pod, "node": "node-1"})
            assert first.status == 200 and await first.json() == {"claimed": "w0"}
            other = pod_manifest("web-1", "", "600m", "1Gi", uid="w1")
            second = await client.post("/claim", json={"pod": other, "node": "node-1"})
            assert second.status == 409 and "cpu" in str(await second.json())
            assert await cache.pod_state("w0") == "assumed"
            assert await cache.pod_state("w1") is None
        assert cache.lease is not None and cache.lease.task is None  # cleanup ran aclose

    asyncio.run(main())


# -- issue 29: concurrency past the pool waits for a connection ------------------------------


async def default_client(sync_cache: Cache, url: str) -> Any:
    """The client a user gets on default settings: ``connect_async(url)``, or for fakeredis the
    embedded client on the fixture's server (every ``embedded`` connect is a new server)."""
    pool = getattr(sync_cache.client, "connection_pool", None)
    server = pool.connection_kwargs.get("server") if pool is not None else None
    if server is not None:
        return embedded_async_client(server)
    return await connect_async(url)


def test_5000_concurrent_mixed_coroutines_all_complete_on_default_settings(
    make_cache: Callable[..., Cache], backend: str, request: pytest.FixtureRequest
) -> None:
    """Before: past redis-py's pool of 100 connections, reads failed with MaxConnectionsError
    (4,701 of 5,000 in a mixed workload)."""
    sync_cache = make_cache()
    url = backend_url(backend, request)

    async def main() -> tuple[list[Any], Cache]:
        client = await default_client(sync_cache, url)
        cache = await AsyncCache.open(client, sync_cache.name, replica="aio")
        for n in range(10):
            await cache.add_node(make_node(f"n{n}", "1000", "1000Gi"))
        pods = [make_pod(f"p{i}", f"n{i % 10}", "10m", "1Mi") for i in range(1000)]

        async def work(i: int) -> Any:
            kind = i % 5
            if kind == 0:
                return await cache.assume_pod(pods[i // 5], check_fit=True)
            if kind == 1:
                return await cache.pod_state(f"uid-{i}")
            if kind == 2:
                return await cache.get_node_info(f"n{i % 10}")
            if kind == 3:
                return await cache.node_count()
            return await cache.is_assumed_pod(f"uid-{i}")

        results = await asyncio.gather(*(work(i) for i in range(5000)), return_exceptions=True)
        await close(cache)
        return results, sync_cache

    results, cache = asyncio.run(main())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of 5000 failed, first: {failures[0]!r}"
    assert cache.pod_count() == 1000 and cache.verify() == []


def test_a_pool_of_two_serves_200_concurrent_reads_by_waiting_and_bad_sizes_are_refused(
    make_cache: Callable[..., Cache], backend: str, request: pytest.FixtureRequest
) -> None:
    sync_cache = make_cache()
    sync_cache.add_node(make_node("n0", "4", "8Gi"))
    url = backend_url(backend, request)

    async def main() -> list[Any]:
        if backend == "fakeredis":
            server = sync_cache.client.connection_pool.connection_kwargs["server"]
            client: Any = embedded_async_client(server, max_connections=2, pool_timeout=30)
        else:
            client = await connect_async(url, max_connections=2, pool_timeout=30)
        cache = await AsyncCache.open(client, sync_cache.name, replica="aio")
        reads = [cache.get_node_info("n0") for _ in range(100)]
        reads += [cache.node_count() for _ in range(100)]
        results = await asyncio.gather(*reads, return_exceptions=True)
        await close(cache)
        for size, wait in ((0, 1.0), (2, 0.0), (True, 1.0)):
            with pytest.raises(ValidationError, match=r"max_connections|pool_timeout"):
                await connect_async(url, max_connections=size, pool_timeout=wait)
        return results

    results = asyncio.run(main())
    assert not [r for r in results if isinstance(r, BaseException)]


def test_a_feeders_change_goes_without_an_id_from_asyncio_too(open_async) -> None:  # type: ignore[no-untyped-def]
    """Issue 40 (commands.VERSIONED): the async cache sends a versioned change, alone or in a
    batch, without its id: no reply remembered; sent again, it is dropped as repeated."""

    async def main() -> tuple[list[Any], list[Any], set[bytes]]:
        cache, sync_cache = await open_async()
        node = commands.sync_node(make_node("n1"), "5")
        pod = commands.sync_pod(make_pod("web-0", "n1", "100m", "1Mi"), "10", True)
        alone = [await cache.run(node), await cache.run(node)]
        batch = cache.batch()
        batch.add(pod)
        batch.add(node)
        together = [result.reply[:2] for result in await batch.execute()]
        await close(cache)
        keys = {key for key in sync_cache.client.scan_iter(sync_cache.keys.pattern)}
        return alone, together, {key for key in keys if b":cmd:" in key}

    alone, together, remembered = asyncio.run(main())
    assert [reply[:2] for reply in alone] == [[b"applied", b"add"], [b"dropped", b"repeated"]]
    assert together == [[b"applied", b"add"], [b"dropped", b"repeated"]]
    assert remembered == set()
