"""Exactly-once under connection faults: a proxy (``tests/tcp_proxy.py``) between the client and
the real Redis cuts connections at random before a command reaches Redis, after it ran but
before its reply, and in the middle of its reply. Every kind of command (single commands,
batches, the expiry worker's cleanup) must be applied exactly once: the event stream and the
state end up exactly as a run without faults leaves them, no caller sees an error while the
retry policy has room, and ``verify()`` is clean. When the policy runs out, the caller gets
:class:`RetriesExhausted`, and running the same command again settles it exactly once.

Real Redis only, so no ``backend`` fixture: faults need a TCP connection to cut (fakeredis is
in-process). The proxy fronts ``SCHEDCACHE_TEST_REDIS_URL``; each test uses its own cache
names and deletes their keys. Cuts are drawn from ``random.Random(seed)``: a failure names its
seed. ``SCHEDCACHE_LONG_FAULTS=1`` runs ten times as many commands (a soak).
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from schedcache import Cache, Node, Pod
from schedcache.errors import CacheError, RetriesExhausted
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store import commands
from schedcache.store.batch import CommandBatch
from schedcache.store.retry import RetryPolicy
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import make_node, make_pod
from tests.tcp_proxy import POINTS, FaultyProxy, Point

LONG = os.environ.get("SCHEDCACHE_LONG_FAULTS") == "1"
# Commands per scenario: a few hundred in CI, ten times more in the soak.
COMMANDS = 3000 if LONG else 300
# The share of requests cut: high enough that every command kind meets every cut point.
CUT_RATE = 0.25
# Room for a long run of cuts, and quick resends: the proxy answers at once.
FAULT_RETRY = RetryPolicy(attempts=200, within=30.0, first_delay=0.001, max_delay=0.02)


# -- a workload of every mutating command kind ------------------------------------------


@dataclass(frozen=True)
class Step:
    """One call of a mutating method, by name: ``Cache`` and ``CommandBatch`` share them."""

    method: str
    args: tuple[Any, ...]

    def apply(self, target: Cache | CommandBatch) -> Any:
        return getattr(target, self.method)(*self.args)


KINDS = (
    "add_node",
    "update_node",
    "remove_node",
    "assume_pod",
    "finish_binding",
    "forget_pod",
    "add_pod",
    "update_pod",
    "remove_pod",
)


def workload(count: int, seed: int) -> list[Step]:
    """``count`` commands of every kind, each valid where it falls (a model of the cache picks
    them), so an error a caller sees can only come from a fault, and a command applied twice
    shows as an extra event or a rejection."""
    rng = random.Random(seed)
    serial = itertools.count()
    nodes: dict[str, Node] = {}
    pods: dict[str, tuple[Pod, str]] = {}  # uid -> (pod, "assumed" | "bound" | "added")
    steps: list[Step] = []

    def node(name: str) -> Node:
        return make_node(name, "64", "64Gi", pods="10000", labels={"v": str(next(serial))})

    def pod(uid: str, on: str) -> Pod:
        return make_pod(uid, on, "10m", "1Mi", labels={"v": str(next(serial))})

    def pick(states: tuple[str, ...]) -> tuple[Pod, str] | None:
        found = sorted(uid for uid, (_, state) in pods.items() if state in states)
        return pods[rng.choice(found)] if found else None

    while len(steps) < count:
        kind = rng.choice(KINDS)
        if kind == "add_node" and len(nodes) < 6:
            name = f"n{next(serial)}"
            nodes[name] = node(name)
            steps.append(Step(kind, (nodes[name],)))
        elif kind == "update_node" and nodes:
            name = rng.choice(sorted(nodes))
            new = node(name)
            steps.append(Step(kind, (nodes[name], new)))
            nodes[name] = new
        elif kind == "remove_node":
            busy = {p.node_name for p, _ in pods.values()}
            empty = sorted(set(nodes) - busy)
            if empty and len(nodes) > 2:
                steps.append(Step(kind, (nodes.pop(rng.choice(empty)),)))
        elif kind in ("assume_pod", "add_pod") and nodes and len(pods) < 40:
            new_pod = pod(f"u{next(serial)}", rng.choice(sorted(nodes)))
            pods[new_pod.uid] = (new_pod, "assumed" if kind == "assume_pod" else "added")
            steps.append(Step(kind, (new_pod,)))
        elif kind == "add_pod" and (found := pick(("assumed", "bound"))):
            pods[found[0].uid] = (found[0], "added")  # confirms the assumed pod
            steps.append(Step(kind, (found[0],)))
        elif kind == "finish_binding" and (found := pick(("assumed",))):
            pods[found[0].uid] = (found[0], "bound")
            steps.append(Step(kind, (found[0],)))
        elif kind == "forget_pod" and (found := pick(("assumed", "bound"))):
            del pods[found[0].uid]
            steps.append(Step(kind, (found[0],)))
        elif kind == "update_pod" and (found := pick(("added",))):
            new_pod = pod(found[0].uid, found[0].node_name)
            pods[new_pod.uid] = (new_pod, "added")
            steps.append(Step(kind, (found[0], new_pod)))
        elif kind == "remove_pod" and (found := pick(("assumed", "bound", "added"))):
            del pods[found[0].uid]
            steps.append(Step(kind, (found[0],)))
    return steps


def in_batches(steps: list[Step], seed: int) -> Iterator[list[Step]]:
    """The steps cut into batches of 1 to 40 commands."""
    rng = random.Random(seed)
    start = 0
    while start < len(steps):
        size = rng.randint(1, 40)
        yield steps[start : start + size]
        start += size


# -- what exactly once looks like ---------------------------------------------------------


def signature(cache: Cache) -> list[tuple[str, str | None, str | None, int | None]]:
    """The event stream without ids, times or replicas: what was applied, in which order."""
    return [(e.type, e.uid, e.node, e.generation) for e in cache.events()]


def assert_same_as_control(observed: Cache, control: Cache, proxy: FaultyProxy) -> None:
    """``observed`` (read without the proxy) saw exactly the commands ``control`` saw."""
    seen, expected = signature(observed), signature(control)
    extra = Counter(seen) - Counter(expected)
    missing = Counter(expected) - Counter(seen)
    assert (extra, missing) == (Counter(), Counter()), f"cuts {dict(proxy.cuts)}"
    assert seen == expected, "the same events, in the same order"
    assert observed.dump() == control.dump()
    assert observed.generation() == control.generation()
    assert observed.verify() == []


# -- fixtures -----------------------------------------------------------------------------


def target() -> tuple[str, int]:
    real_client()  # fails with a clear message when no server answers
    url = urlparse(REAL_REDIS_URL)
    return url.hostname or "127.0.0.1", url.port or 6379


@pytest.fixture
def names() -> Iterator[Callable[[str], str]]:
    """Unique cache names for this test; their keys are deleted afterwards."""
    made: list[str] = []

    def name(kind: str) -> str:
        made.append(f"faults-{kind}-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield name
    client = real_client()
    for made_name in made:
        Cache(client, made_name).clear()


def proxied(proxy: FaultyProxy, name: str, retry: RetryPolicy = FAULT_RETRY, **kw: Any) -> Cache:
    """A cache whose every command goes through ``proxy``. redis-py's own resends are off
    (since 6.0 it resends up to 10 times, backing off up to 1 s, under schedcache's policy):
    every cut reaches schedcache's retry loop, and the policy alone bounds the wait."""
    client = redis.Redis(
        port=proxy.port, socket_timeout=5, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    proxy_rate, proxy.rate = proxy.rate, 0.0  # loading the library is not under test
    try:
        return Cache(client, name, replica="faulty", retry=retry, lease_ttl=0, **kw)
    finally:
        proxy.rate = proxy_rate


def direct(name: str, **kw: Any) -> Cache:
    return Cache(real_client(), name, replica="faulty", lease_ttl=0, **kw)


def run_control(name: str, steps: list[Step]) -> Cache:
    control = direct(name, ttl=0)
    for step in steps:
        step.apply(control)
    return control


def assert_every_point_hit(proxy: FaultyProxy, at_least: int = 5) -> None:
    assert all(proxy.cuts[point] >= at_least for point in POINTS), dict(proxy.cuts)


# -- random cuts: every command exactly once ------------------------------------------------


@pytest.mark.parametrize("seed", [1])
def test_single_commands_survive_random_cuts_exactly_once(names, seed: int) -> None:
    steps = workload(COMMANDS, seed)
    assert {step.method for step in steps} == set(KINDS)
    control = run_control(names("control"), steps)
    proxy = FaultyProxy(*target(), rate=CUT_RATE, seed=seed)
    try:
        cache = proxied(proxy, names("single"), ttl=0)
        for index, step in enumerate(steps):
            try:
                step.apply(cache)
            except CacheError as error:
                pytest.fail(f"seed {seed}, step {index} {step.method}: {error!r}")
        assert_every_point_hit(proxy)
        assert_same_as_control(direct(cache.name), control, proxy)
    finally:
        proxy.close()


@pytest.mark.parametrize("seed", [2])
def test_batches_survive_random_cuts_exactly_once(names, seed: int) -> None:
    # Twice the commands, and each cut point at least 3 times: batches send several commands
    # a chunk and the proxy decides per chunk, so on a loaded machine (chunks coalesce) the
    # 300-command run once drew 11 cuts ({'before': 5, 'mid': 2, 'after': 4}, CI).
    steps = workload(2 * COMMANDS, seed)
    control = run_control(names("control"), steps)
    proxy = FaultyProxy(*target(), rate=CUT_RATE, seed=seed)
    try:
        cache = proxied(proxy, names("batch"), ttl=0)
        for number, part in enumerate(in_batches(steps, seed)):
            batch = cache.batch(chunk_size=3)  # several groups in flight at once
            for step in part:
                step.apply(batch)
            try:
                results = batch.execute()
            except CacheError as error:
                pytest.fail(f"seed {seed}, batch {number}: {error!r}")
            assert [r.error for r in results if not r.ok] == [], f"seed {seed}, batch {number}"
            assert len(results) == len(part)
        assert_every_point_hit(proxy, at_least=3)
        assert_same_as_control(direct(cache.name), control, proxy)
    finally:
        proxy.close()


def assume_expired(cache: Cache, uids: list[str]) -> None:
    """Assumed pods whose binding finished long ago: due for expiry."""
    seconds, _ = cache.client.time()
    with cache.batch() as batch:
        for uid in uids:
            batch.assume_pod(make_pod(uid, "n1", "1m", "1Ki"))
            batch.finish_binding(make_pod(uid, "n1", "1m", "1Ki"), now=seconds - 100)


@pytest.mark.parametrize("seed", [3])
def test_the_expiry_worker_survives_random_cuts_expiring_each_pod_once(names, seed) -> None:
    name = names("expiry")
    setup = direct(name, ttl=1)
    setup.add_node(make_node("n1", "64", "64Gi", pods="100000"))
    uids = [f"e{i}" for i in range(COMMANDS)]
    assume_expired(setup, uids)
    proxy = FaultyProxy(*target(), rate=CUT_RATE, seed=seed)
    try:
        # Two pods per call: a few hundred sc_cleanup_assumed_pods calls, each one cut at random.
        worker = ExpiryWorker(proxied(proxy, name, ttl=1), interval=0.05, batch=2)
        rounds: list[list[str]] = []
        done = threading.Event()

        def on_round(expired: list[str]) -> None:
            rounds.append(expired)
            if sum(map(len, rounds)) >= len(uids):
                done.set()

        thread = threading.Thread(target=worker.run, args=(on_round,), daemon=True)
        thread.start()
        assert done.wait(60), f"seed {seed}: expired {sum(map(len, rounds))} of {len(uids)}"
        worker.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert sorted(uid for expired in rounds for uid in expired) == sorted(uids)
        assert worker.expired_total == len(uids)
        assert_every_point_hit(proxy)
    finally:
        proxy.close()
    expired = Counter(e.uid for e in setup.events() if e.type == "PodExpired")
    assert expired == Counter(uids), "each pod expired once"
    assert setup.pod_count() == 0 and setup.verify() == []


# -- a fault that outlasts the retry policy -------------------------------------------------

SHORT_RETRY = RetryPolicy(attempts=3, within=0.5)


@pytest.mark.parametrize("point", ["before", "after", "mid"])
def test_a_command_outlasting_the_policy_settles_once_when_run_again(names, point: Point):
    """``before``: not applied when the caller gives up; ``after`` and ``mid``: applied, the
    reply lost. Either way, the same command run again leaves one PodAdded."""
    proxy = FaultyProxy(*target())
    try:
        cache = proxied(proxy, names("exhausted"), retry=SHORT_RETRY)
        observer = direct(cache.name)
        pod = make_pod("web-0", "n1", "100m", "1Mi")
        command = commands.add_pod(pod)
        proxy.cut_next(point, marker=b"sc_add_pod", then_down=True)
        started = time.monotonic()
        with pytest.raises(RetriesExhausted) as exhausted:
            cache.run(command)
        waited = time.monotonic() - started
        message = str(exhausted.value)
        assert f"sc_add_pod {commands.pod_subject(pod)} (command id {command.id})" in message
        assert "run the same command again" in message
        applied = point != "before"
        assert observer.pod_state(pod) == ("added" if applied else None)
        # The policy bounds the wait; the client's own reconnection attempts come on top.
        assert waited < 10, f"gave up after {waited:.1f} s"

        proxy.set_down(False)
        cache.run(command)  # no PodAlreadyExists: answered from its id when it was applied
        assert [e.type for e in observer.events()] == ["PodAdded"]
        assert observer.pod_state(pod) == "added" and observer.verify() == []
    finally:
        proxy.close()


@pytest.mark.parametrize("point", ["before", "after", "mid"])
def test_a_batch_outlasting_the_policy_settles_once(names, point: Point) -> None:
    """The batch gives up with ``RetriesExhausted``; ``settle(error.unsettled)`` sends its
    groups again as they were: each command applied once, every outcome returned."""
    proxy = FaultyProxy(*target())
    try:
        cache = proxied(proxy, names("exhausted-batch"), retry=SHORT_RETRY)
        observer = direct(cache.name)
        cache.add_pod(make_pod("p0", "n1", "10m", "1Mi"))  # answered before the cut
        proxy.cut_next(point, marker=b"sc_batch", then_down=True)
        batch = cache.batch(chunk_size=5)
        for i in range(1, 13):
            batch.add_pod(make_pod(f"p{i}", "n1", "10m", "1Mi"))
        with pytest.raises(RetriesExhausted, match="sc_batch") as exhausted:
            batch.execute()
        unsettled = exhausted.value.unsettled
        assert [len(group) for group in unsettled] == [5, 5, 2]
        proxy.set_down(False)
        results = cache.batch(chunk_size=5).settle(unsettled)
        assert [r.error for r in results] == [None] * 12
        added = Counter(e.uid for e in observer.events() if e.type == "PodAdded")
        assert added == Counter(f"p{i}" for i in range(13)), "each pod added exactly once"
        assert observer.verify() == []
    finally:
        proxy.close()
