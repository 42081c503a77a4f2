"""Two more facts an ``sc_batch`` keeps for its later commands (issue 40): the server's time
(``now_ms``, lua/_helpers.lua: one ``TIME`` per batch, not one per timed claim) and the count
of placed pods with required anti-affinity (``bare_claim_unchecked``, lua/_claims.lua: one
``GET antipods`` per batch, not one per bare claim). ``TIME`` is not frozen within a call, on
Redis 7 nor fakeredis (the first test): the memo is what gives a batch's commands one time.
A command of the batch that moves the count (an anti-affine pod placed or removed, a new
incarnation's count created) must be seen by the bare claims after it exactly as when each
command runs in a call of its own: the same command list is run as one batch on one cache and
one call at a time on another, and their replies and keyspaces must be the same (stream ids
aside, and the timed claims' deadlines, which differ by the real time between the two runs).
Every backend."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from schedcache import Cache
from schedcache.store import commands
from schedcache.store.commands import Command
from tests.factories import make_node, make_pod
from tests.test_call_memos import batched, claim, normalized, one_by_one

HOST = "kubernetes.io/hostname"
TTL = 30.0  # the timed claims' ttl (s)
# How a claim refused `unchecked` reads (FitConflict's text).
UNCHECKED = "must be judged on a snapshot first"
MS = re.compile(rb"\b\d{13}\b")

Steps = Callable[[Cache], list[Command]]


def anti_pod(name: str, node: str) -> Any:
    """A pod with required anti-affinity (hostname, against app=web): it counts in `antipods`."""
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    rules = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return make_pod(name, node, "1", "10Mi", labels={"app": "guard"}, affinity=rules)


def two_nodes(cache: Cache) -> None:
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name}))


def timed(name: str, node: str) -> Command:
    return commands.timed_claim(claim(name, node, "1"), TTL)


def without_deadlines(state: dict[bytes, Any], low: int, high: int) -> dict[bytes, Any]:
    """``state`` (normalized) with every time in ms within [low, high] (a deadline the run
    between them set) written ``<deadline>``, in values and zset scores alike."""

    def mark(found: re.Match[bytes]) -> bytes:
        return b"<deadline>" if low <= int(found.group(0)) <= high else found.group(0)

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return MS.sub(mark, value)
        if isinstance(value, float) and low <= value <= high:
            return "<deadline>"
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set)):
            return type(value)(plain(item) for item in value)
        return value

    return {name: plain(value) for name, value in state.items()}


def same_both_ways(
    make_cache: Callable[..., Cache], prepare: Callable[[Cache], None], steps: Steps
) -> tuple[Cache, list[tuple[Any, str]], tuple[int, int]]:
    """``steps`` run as one batch and one call at a time after the same ``prepare``: the same
    replies, the same keyspace (deadlines set by either run aside). Returns the batch's cache,
    its replies and the bounds (ms) of the real time around the batch's call."""
    together = make_cache(name="memo-batch", lease_ttl=0)
    alone = make_cache(name="memo-alone", lease_ttl=0)
    prepare(together)
    prepare(alone)
    assert normalized(together) == normalized(alone)
    ttl_ms = int(TTL * 1000)
    start = int(time.time() * 1000) - 1  # Redis' clock is this machine's (ms, floored)
    replies = batched(together, steps(together))
    batch_end = int(time.time() * 1000) + 1
    assert replies == one_by_one(alone, steps(alone))
    end = int(time.time() * 1000) + 1
    low, high = start + ttl_ms, end + ttl_ms
    assert without_deadlines(normalized(together), low, high) == without_deadlines(
        normalized(alone), low, high
    )
    return together, replies, (start, batch_end)


def refused(replies: list[tuple[Any, str]]) -> list[int]:
    return [j for j, (_, error) in enumerate(replies) if error]


def test_time_is_not_frozen_within_one_call(client: Any) -> None:
    """Why the memo: a script's TIME answers the clock afresh each time (Redis 7.0 freezes
    the time expiry reads, not TIME's; fakeredis reads time.time()). The same holds for a
    function (FCALL), checked by hand on redis-server 7.0.15."""
    script = (
        "local a = redis.call('TIME') local x = 0 "
        "for i = 1, 3000000 do x = x + i end "
        "local b = redis.call('TIME') return { a[1], a[2], b[1], b[2] }"
    )
    s1, us1, s2, us2 = (int(v) for v in client.eval(script, 0))
    assert s2 * 1_000_000 + us2 > s1 * 1_000_000 + us1


def test_an_anti_affine_pod_placed_in_a_batch_makes_the_bare_claims_after_it_unchecked(
    make_cache: Callable[..., Cache],
) -> None:
    """The first bare claim reads no anti-affine pod (and the batch keeps that); the pod added
    next counts 1, so the bare claim after it is refused `unchecked`, as when each is a call
    of its own; its removal takes the count back to 0, and the claim after that is exact
    again. A claimed anti-affine pod (a claim with its rules judged) counts too."""
    guard = anti_pod("guard", "n1")

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),  # 0: exact
            commands.add_pod(guard),  # 0 -> 1
            claim("b", "n2", "1"),  # refused: unchecked
            claim("c", "n2", "1"),  # again
            commands.remove_pod(guard),  # 1 -> 0
            claim("d", "n2", "1"),  # exact again
            commands.add_pod(anti_pod("guard2", "n2")),  # 0 -> 1
            commands.remove_pod(make_pod("a", "n1", "1", "10Mi")),  # no anti: still 1
            claim("e", "n1", "1"),  # refused
        ]

    cache, replies, _ = same_both_ways(make_cache, two_nodes, steps)
    assert refused(replies) == [2, 3, 8]
    assert all(UNCHECKED in replies[j][1] for j in (2, 3, 8))
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 1
    assert {p.name for p in cache.list_pods()} == {"d", "guard2"}
    assert cache.verify() == []


def test_an_anti_affine_pod_there_before_the_batch_and_removed_in_it(
    make_cache: Callable[..., Cache],
) -> None:
    """The batch starts with the count at 1: its first bare claims are refused (the memo holds
    1); a removal takes it to 0 and the bare claims after it are accepted."""

    def prepare(cache: Cache) -> None:
        two_nodes(cache)
        cache.add_pod(anti_pod("guard", "n1"))

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n2", "1"),
            claim("b", "n2", "1"),
            commands.remove_pod(anti_pod("guard", "n1")),
            claim("c", "n2", "1"),
            timed("d", "n1"),
        ]

    cache, replies, _ = same_both_ways(make_cache, prepare, steps)
    assert refused(replies) == [0, 1]
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 0
    assert {p.name for p in cache.list_pods()} == {"c", "d"}


def test_a_count_created_by_a_new_generation_in_the_batch_is_seen(
    make_cache: Callable[..., Cache],
) -> None:
    """A cache without the count (older than it) and without `gen`: the first bare claim
    reads it missing ("some": refused, and the batch keeps that); the next write starts a
    generation and creates the count at 0 (touch), which the claim after it must see."""

    def prepare(cache: Cache) -> None:
        two_nodes(cache)
        cache.client.delete(cache.keys.anti_affine_pods, cache.keys.prefix + "gen")

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),  # refused: unknown
            commands.add_node(make_node("n3", "8", "8Gi", labels={HOST: "n3"})),  # SET 0
            claim("b", "n1", "1"),  # exact
        ]

    cache, replies, _ = same_both_ways(make_cache, prepare, steps)
    assert refused(replies) == [0]
    assert UNCHECKED in replies[0][1]
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 0


def test_a_batch_of_timed_claims_shares_one_time(make_cache: Callable[..., Cache]) -> None:
    """Eight timed claims in one batch (the reference scheduler's group): every deadline is
    the batch's one time (read within the call) plus the ttl; one call at a time writes the
    same keyspace but its own times."""

    def steps(cache: Cache) -> list[Command]:
        return [timed(f"t{j}", "n1" if j % 2 else "n2") for j in range(8)]

    cache, replies, (start, end) = same_both_ways(make_cache, two_nodes, steps)
    assert refused(replies) == []
    deadlines = cache.client.zrange(cache.keys.prefix + "deadlines", 0, -1, withscores=True)
    assert len(deadlines) == 8
    times = {int(score) for _, score in deadlines}
    assert len(times) == 1
    (deadline,) = times
    assert start + int(TTL * 1000) <= deadline <= end + int(TTL * 1000)


def test_a_single_command_keeps_no_time(make_cache: Callable[..., Cache]) -> None:
    """Calls of their own read the clock each: two timed claims a few ms apart get deadlines
    as far apart (nothing of one call's time is left for the next)."""
    cache = make_cache(lease_ttl=0)
    two_nodes(cache)
    cache.run(timed("a", "n1"))
    time.sleep(0.02)
    cache.run(timed("b", "n2"))
    scores = dict(cache.client.zrange(cache.keys.prefix + "deadlines", 0, -1, withscores=True))
    assert scores[make_pod("b", "n2").uid.encode()] - scores[make_pod("a", "n1").uid.encode()] >= 15
