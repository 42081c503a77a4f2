"""Facts a call keeps for its later commands (issue 40): whether the cache holds any
nomination (``NOM.any``, lua/_nominations.lua) and how many tokens parked pods wait for
(``ARRIVALS.note``, lua/_wakes.lua) are asked of Redis once per call, not once per claim of an
``sc_batch``. A command of the batch that changes the fact (a nomination made, settled,
pruned or given up; a parked pod's wake tokens registered) must be seen by the commands after
it exactly as when each runs in a call of its own: the same command list is run as one batch
on one cache and one call at a time on another, and their replies and keyspaces (stream ids
aside) must be the same. Every backend."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from schedcache import Cache
from schedcache.errors import FitConflict
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands, nominations
from schedcache.store.commands import Command
from schedcache.store.responses import as_text
from tests.factories import keyspace, make_node, make_pod

T0 = 1_700_000_000.0  # the queue's clock (given: nothing sleeps)
STREAM_ID = re.compile(rb"\d+-\d+")

Steps = Callable[[Cache], list[Command]]


def claim(name: str, node: str, cpu: str, priority: int = 0, **labels: str) -> Command:
    """A bare fit-checked claim (no lease, no deadline: its keyspace is the same on both
    caches)."""
    pod = make_pod(name, node, cpu, "10Mi", labels=labels or None, priority=priority)
    return commands.assume_pod(pod, check_fit=True)


def one_by_one(cache: Cache, steps: list[Command]) -> list[tuple[Any, str]]:
    """Each command in a call of its own: its reply, or its error's class and text."""
    out: list[tuple[Any, str]] = []
    for command in steps:
        try:
            out.append((cache.run(command), ""))
        except FitConflict as refused:
            out.append((None, f"{type(refused).__name__}: {refused}"))
    return out


def batched(cache: Cache, steps: list[Command]) -> list[tuple[Any, str]]:
    """The same commands in one ``sc_batch`` call."""
    batch = cache.batch()
    for command in steps:
        batch.add(command)
    results = batch.execute()
    return [
        (r.reply, "" if r.error is None else f"{type(r.error).__name__}: {r.error}")
        for r in results
    ]


def normalized(cache: Cache) -> dict[bytes, Any]:
    """The cache's keyspace without its prefix, its remembered replies (``cmd:<id>``, one per
    call), its incarnation (a time) and its stream ids (each replaced by its event's place in
    the stream, wherever it is written)."""
    prefix = cache.keys.prefix.encode()
    state = keyspace(cast(redis.Redis, cache.client), cache.keys.pattern)
    kind, entries = state.get(prefix + b"events", ("stream", []))
    places = {entry_id: b"<event %d>" % j for j, (entry_id, _) in enumerate(entries)}

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return STREAM_ID.sub(lambda m: places.get(m.group(0), m.group(0)), value)
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set)):
            return type(value)(plain(item) for item in value)
        return value

    out: dict[bytes, Any] = {}
    for key, (kind, value) in state.items():
        name = key[len(prefix) :]
        if name.startswith(b"cmd:") or name == b"incarnation":
            continue
        if kind == "stream":
            value = [(places[entry_id], fields) for entry_id, fields in value]
        out[name] = (kind, plain(value))
    return out


def same_both_ways(
    make_cache: Callable[..., Cache], prepare: Callable[[Cache], None], steps: Steps
) -> tuple[Cache, list[tuple[Any, str]]]:
    """``steps`` (built on each cache: a give-back names its cache's stream ids) run as one
    batch and one call at a time after the same ``prepare``: the same replies, the same
    keyspace. Returns the batch's cache and its replies."""
    together = make_cache(name="memo-batch", lease_ttl=0)
    alone = make_cache(name="memo-alone", lease_ttl=0)
    prepare(together)
    prepare(alone)
    assert normalized(together) == normalized(alone)
    replies = batched(together, steps(together))
    assert replies == one_by_one(alone, steps(alone))
    assert normalized(together) == normalized(alone)
    return together, replies


def two_nodes(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_node(make_node("n2", "4", "8Gi"))


def test_a_nomination_made_in_a_batch_holds_its_room_against_the_claims_after_it(
    make_cache: Callable[..., Cache],
) -> None:
    """The first claim finds no nomination (and the call keeps that); the nomination that
    follows holds 2 cpu of n1, so the next claim that would take it is refused `nominated`,
    as when each is a call of its own. Then the nominee's own claim settles it, and the
    claims after it are judged on a cache without nominations again; a second nomination,
    given up in the batch, neither."""
    now = time.time()
    vip = make_pod("vip", "n1", "2", "10Mi", priority=2000)
    other = make_pod("other", "n2", "1", "10Mi", priority=1000)

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),  # no nomination yet
            nominations.nominate_pod(vip.with_node(""), "n1", ttl=600, now=now),
            claim("b", "n1", "2"),  # 1 + 2 held + 2 > 4: refused
            claim("c", "n1", "1"),  # 1 + 2 held + 1 fits
            commands.assume_pod(vip, check_fit=True),  # its own room: its nomination goes
            claim("d", "n2", "1"),  # no nomination left
            nominations.nominate_pod(other.with_node(""), "n2", ttl=600, now=now),
            claim("e", "n2", "3"),  # 1 + 1 held + 3 > 4: refused
            nominations.denominate_pod(other, now=now),
            claim("f", "n2", "3"),  # given up: fits
        ]

    cache, replies = same_both_ways(make_cache, two_nodes, steps)
    refused = [j for j, (_, error) in enumerate(replies) if error]
    assert refused == [2, 7]
    assert "nominated" in replies[2][1] and "nominated" in replies[7][1]
    assert not cache.client.exists(cache.keys.nominated)
    assert {p.name for p in cache.list_pods()} == {"a", "c", "vip", "d", "f"}


def test_a_nomination_pruned_by_a_claim_then_a_nomination_made_are_both_seen(
    make_cache: Callable[..., Cache],
) -> None:
    """A lapsed nomination is there when the batch starts (the first claim sees one and prunes
    it: the set is empty then); the next claim asks again and finds none; a nomination made
    after it is seen by the claim after that."""
    now = time.time()

    def prepare(cache: Cache) -> None:
        two_nodes(cache)
        old = make_pod("old", "", "4", "10Mi", priority=5)
        cache.run(nominations.nominate_pod(old, "n2", ttl=1, now=now - 600))

    vip = make_pod("vip", "", "3", "10Mi", priority=2000)

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),  # prunes the lapsed one
            claim("b", "n2", "1"),
            nominations.nominate_pod(vip, "n2", ttl=600, now=now),
            claim("c", "n2", "1"),  # 1 + 3 held + 1 > 4: refused
            claim("d", "n1", "1"),
        ]

    cache, replies = same_both_ways(make_cache, prepare, steps)
    assert [bool(error) for _, error in replies] == [False, False, False, True, False]
    assert cache.client.zrange(cache.keys.nominated, 0, -1) == [vip.uid.encode()]


def _parked_pod(cache: Cache) -> None:
    """A pending pod of scheduler `ref`, leased to `a` (its give-back is in the steps)."""
    two_nodes(cache)
    pod = make_pod("waiting", "", "1", "10Mi")
    cache.run(commands.sync_pod_pending(pod, "ref", "100"))
    (popped,) = SchedulingQueue(cache, "ref", holder="a", lease=10.0).pop(now=T0)
    assert popped.pod.uid == pod.uid


def _give_back(cache: Cache, wake: tuple[str, ...]) -> Command:
    events = cache.last_events(1)
    attempt = events[0].id if events else "0-0"
    uid = make_pod("waiting", "", "1", "10Mi").uid
    return commands.queue_retry("ref", "a", uid, True, attempt, (1.0, 10.0), 300.0, T0, wake)


def test_wake_tokens_registered_in_a_batch_are_seen_by_the_claims_after_it(
    make_cache: Callable[..., Cache],
) -> None:
    """The first claim finds no pod waiting for arrivals (and the call keeps that); a
    give-back in the batch then waits for `app=web`: a later claim of a pod carrying it marks
    its event helpful (`helped`), as when each is a call of its own; one carrying another
    label does not."""

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1", app="db"),
            _give_back(cache, ("app=web",)),
            claim("b", "n1", "1", app="db"),  # waited for by nobody
            claim("c", "n2", "1", app="web"),  # wakes it
            claim("d", "n2", "1", tier="x"),
        ]

    cache, replies = same_both_ways(make_cache, _parked_pod, steps)
    assert all(not error for _, error in replies)
    assert replies[1][0] == [b"backoff", str(int(T0 * 1000) + 1000).encode()]
    events = list(cache.events())
    assert [e.fields.get("uid") for e in events][-4:] == ["a", "b", "c", "d"]
    assert as_text(cache.client.get(cache.keys.prefix + "helped")) == events[-2].id


def test_wake_tokens_waited_for_before_a_batch_are_seen_by_each_claim(
    make_cache: Callable[..., Cache],
) -> None:
    """Tokens waited for when the batch starts (the count the call keeps is not 0): every
    claim compares its labels, and a give-back in the batch (its lapsed tokens dropped, new
    ones waited for) changes what the claims after it match."""

    def prepare(cache: Cache) -> None:
        _parked_pod(cache)
        cache.run(_give_back(cache, ("app=web",)))
        SchedulingQueue(cache, "ref", holder="a", lease=10.0).pop(now=T0 + 20)

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1", app="web"),  # wakes
            claim("b", "n1", "1", app="db"),
            _give_back(cache, ("app=db", "app=web")),
            claim("c", "n2", "1", app="db"),  # wakes now
            claim("d", "n2", "1", tier="x"),
        ]

    cache, replies = same_both_ways(make_cache, prepare, steps)
    assert all(not error for _, error in replies)
    events = list(cache.events())
    assert as_text(cache.client.get(cache.keys.prefix + "helped")) == events[-2].id
