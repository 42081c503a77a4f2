"""The reference scheduler pops pods in batches (issue 40: one queue call for several pods): a
batch grows from one pod, doubling while pops come back full, up to ``pop_batch``; the pods of
a batch not attempted when the scheduler stops, when Redis went away, or once half their lease
has passed are given back untried (at once, to their place in the queue), or left to their
lease when Redis does not answer. Nothing is lost or bound twice, and replicas popping in
batches place every pod once with no node over its allocatable.

The cache runs on every backend; the API server is tests/apiserver.py through the official
client, fed into the cache by ``sync`` (which queues the pending pods). The tests that act at
the scheduler's N-th ``attempt`` run the per-pod path (``batch_claims=False``): the pods of a pop
claimed together (tests/test_batched_claims.py) are not attempted one by one."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.ops.queue import SchedulingQueue
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store.commands import Command
from tests.apiserver import FakeApiServer
from tests.racing import racing_schedulers
from tests.scheduling import eventually, fed_scheduler, node, pending


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def bindings(server: FakeApiServer) -> Counter[str]:
    """Binding requests per pod name."""
    return Counter(
        r.path.split("/")[-2]
        for r in server.requests
        if r.method == "POST" and r.path.endswith("/binding")
    )


def bound(server: FakeApiServer) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["spec"]["nodeName"]
        for o in server.objects("Pod")
        if o["spec"].get("nodeName")
    }


def queued(server: FakeApiServer, count: int, cpu: str = "1") -> list[str]:
    names = [f"p{i:02d}" for i in range(count)]
    for name in names:
        server.create(pending(name, cpu))
    return names


def counting_pops(sizes: list[int]) -> Callable[[ReferenceScheduler], None]:
    """A ``prepare`` that records the pods each ``queue_pop`` call Redis answered leased."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        run = scheduler.cache.store.run

        def counted(command: Command) -> Any:
            reply = run(command)
            if command.name == "queue_pop" and reply:
                sizes.append(len(reply) // 3)
            return reply

        scheduler.cache.store.run = counted  # type: ignore[method-assign]

    return prepare


def on_attempt(number: int, act: Callable[[ReferenceScheduler], None]) -> Callable[..., None]:
    """A ``prepare`` that runs ``act`` right before the scheduler's ``number``-th attempt."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        attempt = scheduler.attempt
        seen = {"n": 0}

        def attempting(pod: Any) -> bool:
            seen["n"] += 1
            if seen["n"] == number:
                act(scheduler)
            return attempt(pod)

        scheduler.attempt = attempting  # type: ignore[method-assign]

    return prepare


@pytest.mark.parametrize(
    ("pop_batch", "sizes"),
    [(1, [1] * 15), (4, [1, 2, 4, 4, 4]), (8, [1, 2, 4, 8]), (16, [1, 2, 4, 8])],
)
def test_pods_are_placed_with_one_pop_a_batch_growing_from_one(
    cache: Cache, server: FakeApiServer, tmp_path: Path, pop_batch: int, sizes: list[int]
) -> None:
    server.create(node("big", "64"))
    names = queued(server, 15)
    popped: list[int] = []
    with fed_scheduler(
        cache, server, tmp_path, prepare=counting_pops(popped), pop_batch=pop_batch
    ) as scheduler:
        eventually(lambda: scheduler.bound == 15)
    assert popped == sizes  # one queue call a batch
    assert bindings(server) == Counter(names)  # each pod bound once
    assert scheduler.untried == 0 and scheduler.lost == 0


def test_the_pods_of_a_batch_not_attempted_at_a_stop_are_given_back_at_once(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Stopped at the first pod of the third batch (pods 4-7): 5-7 go back to the queue
    untried, so the next replica places them at once, though their lease (60 s) holds."""
    server.create(node("big", "64"))
    names = queued(server, 12)
    stop = on_attempt(4, lambda scheduler: scheduler.stop.set())
    with fed_scheduler(
        cache, server, tmp_path, prepare=stop, lease=60.0, batch_claims=False
    ) as first:
        eventually(lambda: first.stop.is_set())
    assert first.untried == 3
    lengths = SchedulingQueue(cache, "ref").lengths()
    assert lengths["active"] == 8 and lengths["backoff"] == lengths["parked"] == 0
    eventually(lambda: first.bound == 4)
    with fed_scheduler(cache, server, tmp_path, lease=60.0) as second:
        eventually(lambda: second.bound == 8)
    assert bindings(server) == Counter(names)  # none lost, none bound twice
    assert cache.verify() == []


@pytest.mark.parametrize("give_back", ["answers", "away"])
def test_redis_away_mid_batch_loses_no_pod_and_binds_none_twice(
    cache: Cache, server: FakeApiServer, tmp_path: Path, give_back: str
) -> None:
    """A snapshot read fails at the first pod of the third batch: that pod backs off; the rest
    of the batch is given back untried when Redis answers again (placed at once, the lease
    being 60 s), else left to its lease (1 s), then placed."""
    server.create(node("big", "64"))
    names = queued(server, 12)

    def refuse(*_: Any, **__: Any) -> Any:
        raise redis.ConnectionError("connection refused")

    def redis_away(scheduler: ReferenceScheduler) -> None:
        update = scheduler.cache.update_snapshot

        def once(snapshot: Any) -> Any:
            scheduler.cache.update_snapshot = update  # type: ignore[method-assign]
            refuse()

        scheduler.cache.update_snapshot = once  # type: ignore[method-assign]
        if give_back == "away":
            scheduler.queue.untried = refuse  # type: ignore[method-assign]

    lease = 60.0 if give_back == "answers" else 1.0
    with fed_scheduler(
        cache,
        server,
        tmp_path,
        prepare=on_attempt(4, redis_away),
        lease=lease,
        batch_claims=False,
        retry_delay=0.2,
        max_backoff=0.4,
    ) as scheduler:
        eventually(lambda: scheduler.bound == 12)
    assert scheduler.untried == (3 if give_back == "answers" else 0)
    assert bindings(server) == Counter(names)
    assert scheduler.lost == 0 and cache.verify() == []


def test_a_batch_slower_than_half_its_lease_gives_back_the_rest_before_it_lapses(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Attempts of 0.2 s under a 1 s lease: a batch starts no attempt past 0.5 s, so no pod is
    attempted on a lapsed lease (another replica could have popped it)."""
    server.create(node("big", "64"))
    names = queued(server, 8)

    def slow(scheduler: ReferenceScheduler) -> None:
        attempt = scheduler.attempt

        def slowly(pod: Any) -> bool:
            time.sleep(0.2)
            return attempt(pod)

        scheduler.attempt = slowly  # type: ignore[method-assign]

    with fed_scheduler(
        cache, server, tmp_path, prepare=slow, lease=1.0, batch_claims=False
    ) as scheduler:
        eventually(lambda: scheduler.bound == 8, timeout=20)
    assert scheduler.untried >= 1  # the batch of 4: three attempted, the fourth given back
    assert bindings(server) == Counter(names) and scheduler.lost == 0


def test_two_replicas_popping_batches_place_every_pod_once_within_allocatable(
    cache: Cache, make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """Four nodes of 10 CPUs and 40 pods of one: exactly full; the batches grow from one, so
    the first replica to poll does not take the whole deployment."""
    for i in range(4):
        server.create(node(f"n{i}", "10"))
    names = queued(server, 40)
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    with racing_schedulers(make_cache, kubeconfig, 2, pop_batch=16) as replicas:
        eventually(lambda: sum(r.bound for r in replicas) == 40, timeout=60)
        eventually(lambda: not cache.dump().assumed_pods, timeout=30)
    placed = bound(server)
    assert sorted(placed) == names and bindings(server) == Counter(names)
    assert max(Counter(placed.values()).values()) <= 10  # no node over its 10 CPUs
    assert all(r.bound > 0 for r in replicas)
    assert cache.verify() == []


def test_a_pop_batch_out_of_range_is_refused_by_name(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    from schedcache.feed.sync import api_client

    api = api_client(str(server.kubeconfig(tmp_path / "kubeconfig")))
    for bad in (0, 101, True, 2.0):
        with pytest.raises(ValueError, match=r"reference scheduler ref: pop_batch: .* 1\.\.100"):
            ReferenceScheduler(cache, api, "ref", pop_batch=bad)  # type: ignore[arg-type]


def test_the_scheduler_commands_pop_batch_default_is_the_loops() -> None:
    """`schedcache scheduler --pop-batch` defaults to the loop's own POP_BATCH (the CLI names
    it as a literal: importing the loop would cost every command's start-up)."""
    from schedcache.cli.extender import scheduler
    from schedcache.scheduler.loop import POP_BATCH

    (option,) = [p for p in scheduler.params if p.name == "pop_batch"]
    assert option.default == POP_BATCH == 32
