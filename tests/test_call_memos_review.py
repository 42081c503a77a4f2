"""Review of the per-call memos of h40memo (7091a74, 9b87222, 449f6c8, de46e75): inside an
sc_batch, NOM.any (`EXISTS nominated`) and ARRIVALS.note (`ZCARD arrivalwakes`) keep their
first answer in `checked[' nominated']` / `checked[' arrivalwakes']`. Attacks: a seeded
differential fuzz (one sc_batch against the same commands one FCALL each) over nominations
made, lapsed, given up and settled, fit-checked claims of every priority (nominees' own
among them), gang claims, deletes of nominated pods, removals, informer adds carrying
awaited labels, give-backs with wake tokens and pops; explicit orders where the memo is set
and then a later command must see the truth; a refused command after the memo was set;
single commands keep nothing (a nomination written between two calls is seen); a batch on
one cache right after another cache's batch (the memo keys carry no prefix). Written by a
reviewer of that change."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from schedcache import Cache
from schedcache.model.values import Pod
from schedcache.store import commands, nominations
from schedcache.store.commands import Command
from schedcache.store.gang import gang_claim
from tests.factories import make_node, make_pod
from tests.test_deferred_writes import entries, normal, replies_named, send_batch, send_each

T0 = 1_700_000_000.0  # the queue's clock
# Nominations are judged live against Redis' own clock (NOM.conflicts reads TIME): their
# `now` is the real time, rounded so that both caches get the same deadlines.
NOW = float(int(time.time()))


def nominee(j: int, node: str = "", cpu: str = "2", priority: int = 1000) -> Pod:
    return make_pod(f"v{j}", node, cpu, "10Mi", priority=priority)


def pend(j: int) -> Pod:
    return make_pod(f"q{j}", "", "100m", "10Mi")


def setup(cache: Cache, rng: random.Random | None = None) -> None:
    """Three nodes of 4 cpu; a pending pod parked-ready for give-backs (q1..q3 leased to
    `a`); optionally (rng) a live and a lapsed nomination before the batch."""
    for name in ("n1", "n2", "n3"):
        cache.add_node(make_node(name, "4", "8Gi"))
    cache.add_pod(make_pod("old", "n3", "1", "10Mi", labels={"app": "db"}))
    for j in (1, 2, 3):
        cache.run(commands.sync_pod_pending(pend(j), "ref", str(100 + j)))
    cache.run(commands.queue_pop("ref", "a", 600.0, 3, 300.0, T0))
    if rng is not None:
        if rng.random() < 0.5:
            cache.run(nominations.nominate_pod(nominee(8), "n1", ttl=600, now=NOW))
        if rng.random() < 0.5:
            cache.run(nominations.nominate_pod(nominee(9, cpu="3"), "n2", ttl=1, now=NOW - 600))


def plan(rng: random.Random, n: int) -> list[Any]:
    """Commands; a give-back is a tuple (its attempt is the cache's last stream id)."""
    out: list[Any] = []
    rv = 1000
    for _ in range(n):
        rv += 1
        k = rng.randrange(16)
        node = rng.choice(["n1", "n2", "n3"])
        j = rng.randrange(6)
        labels = rng.choice([None, {"app": "web"}, {"app": "db"}])
        if k in (0, 1):  # a nomination, live or lapsed on arrival
            prio = rng.choice([0, 100, 1000, 2000])
            pod = nominee(j, cpu=rng.choice(["1", "2", "3"]), priority=prio)
            if rng.random() < 0.8:
                out.append(nominations.nominate_pod(pod, node, ttl=600, now=NOW))
            else:
                out.append(nominations.nominate_pod(pod, node, ttl=1, now=NOW - 600))
        elif k == 2:
            out.append(nominations.denominate_pod(nominee(j), now=NOW))
        elif k in (3, 4, 5, 6):  # fit-checked claims of every priority
            pod = make_pod(
                f"c{rng.randrange(8)}",
                node,
                rng.choice(["1", "2", "3"]),
                "10Mi",
                labels=labels,
                priority=rng.choice([0, 100, 1000, 3000]),
            )
            out.append(commands.assume_pod(pod, check_fit=True))
        elif k == 7:  # a nominee's own claim (settles its nomination when it lands)
            pod = nominee(j, node, cpu=rng.choice(["1", "2"]), priority=1000)
            out.append(commands.assume_pod(pod, check_fit=True))
        elif k == 8:
            members = [
                (make_pod(f"g{rng.randrange(6)}", node, "1", "1Mi", labels=labels), "", ""),
                (make_pod(f"h{rng.randrange(6)}", node, "1", "1Mi"), "", ""),
            ]
            out.append(gang_claim(f"default/g{rng.randrange(3)}", members))
        elif k == 9:  # a delete: a nominee's (settles it) or a claimed pod's
            uid = rng.choice([nominee(j).uid, f"c{rng.randrange(8)}", "v8", "v9"])
            out.append(commands.sync_pod_gone(uid, str(rv)))
        elif k == 10:
            pod = make_pod(f"c{rng.randrange(8)}", node, "1", "10Mi")
            out.append(rng.choice([commands.forget_pod, commands.remove_pod])(pod))
        elif k == 11:  # an informer add: place_pod notes arrivals too
            pod = make_pod(f"d{rng.randrange(4)}", node, "1", "10Mi", labels=labels)
            out.append(commands.add_pod(pod))
        elif k in (12, 13):
            wake = rng.choice([(), ("app=web",), ("*",), ("app=db",), ("app=web", "app=db")])
            out.append(("retry", rng.choice("ab"), pend(rng.randrange(1, 4)).uid, wake))
        elif k == 14:
            out.append(commands.queue_pop("ref", rng.choice("ab"), 600.0, 2, 300.0, T0 + 30))
        else:
            out.append(commands.sync_pod_pending(pend(rng.randrange(1, 4)), "ref", str(rv)))
    return out


def resolve(cache: Cache, planned: list[Any]) -> list[Command]:
    last = entries(cache)[-1][0].decode()
    out = []
    for c in planned:
        if isinstance(c, tuple):
            _, holder, uid, wake = c
            out.append(
                commands.queue_retry("ref", holder, uid, True, last, (1, 10), 300, T0 + 20, wake)
            )
        else:
            out.append(c)
    return out


def pair(make_cache: Callable[..., Cache], cache_name: str, tag: str) -> tuple[Cache, Cache]:
    return make_cache(name=f"{cache_name}-{tag}b"), make_cache(name=f"{cache_name}-{tag}e")


def both_ways(one: Cache, each: Cache, steps: list[Command]) -> list[tuple[int, Any]]:
    batched = send_batch(one, steps)
    singly = send_each(each, steps)

    def named(cache: Cache, replies: list[tuple[int, Any]]) -> Any:
        return [
            (ok, v.replace(cache.keys.prefix, "<p>") if isinstance(v, str) else v)
            for ok, v in replies_named(cache, replies)
        ]

    assert named(one, batched) == named(each, singly)
    assert normal(one) == normal(each)
    return batched


@pytest.mark.parametrize("seed", range(10))
def test_fuzz_nominations_claims_and_wakes_batch_equals_one_by_one(
    make_cache: Callable[..., Cache], cache_name: str, seed: int
) -> None:
    """HELD. Random mixes of every writer of `nominated` and `arrivalwakes` with claims
    that read them: the batch's replies and keyspace are the single commands'."""
    rng = random.Random(seed)
    one, each = pair(make_cache, cache_name, f"f{seed}")
    pre = rng.random()
    setup(one, random.Random(pre))
    setup(each, random.Random(pre))
    planned = plan(rng, 40)
    assert normal(one) == normal(each)
    batched = send_batch(one, resolve(one, planned))
    singly = send_each(each, resolve(each, planned))
    assert replies_named(one, batched) == replies_named(each, singly)
    assert normal(one) == normal(each)
    # some of the claims must have been judged against nominations for this to mean much
    assert any(ok == 1 for ok, _ in batched)


ORDERS: dict[str, Callable[[], list[Command]]] = {
    # memo false, then a nomination by nominate_pod, then a claim that would take its room
    "false-then-nominate": lambda: [
        commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(1), "n1", ttl=600, now=NOW),
        commands.assume_pod(make_pod("b", "n1", "2", "1Mi"), check_fit=True),
    ],
    # memo true, the last nomination deleted by a sync_pod delete, then a claim that fits
    "true-then-delete": lambda: [
        nominations.nominate_pod(nominee(1), "n1", ttl=600, now=NOW),
        commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True),
        commands.sync_pod_gone(nominee(1).uid, "500"),
        commands.assume_pod(make_pod("b", "n1", "3", "1Mi"), check_fit=True),
    ],
    # nominated, then displaced by a higher-priority nomination on the same node (NOM.drop in
    # nominate), then a claim of middle priority
    "displaced": lambda: [
        nominations.nominate_pod(nominee(1, priority=100), "n1", ttl=600, now=NOW),
        nominations.nominate_pod(nominee(2, priority=2000, cpu="1"), "n1", ttl=600, now=NOW),
        commands.assume_pod(make_pod("a", "n1", "3", "1Mi", priority=500), check_fit=True),
        commands.assume_pod(make_pod("b", "n1", "1", "1Mi", priority=500), check_fit=True),
    ],
    # a nominee re-nominated to another node (its own plan settles the old one first)
    "moved": lambda: [
        nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW),
        nominations.nominate_pod(nominee(1, cpu="3"), "n2", ttl=600, now=NOW),
        commands.assume_pod(make_pod("a", "n1", "3", "1Mi"), check_fit=True),
        commands.assume_pod(make_pod("b", "n2", "2", "1Mi"), check_fit=True),
    ],
    # a gang settles the nomination of a member; a claim after it sees none
    "gang-settles": lambda: [
        nominations.nominate_pod(nominee(1, cpu="1"), "n1", ttl=600, now=NOW),
        gang_claim(
            "default/g",
            [(nominee(1, "n1", cpu="1"), "", ""), (make_pod("g2", "n1", "1", "1Mi"), "", "")],
        ),
        commands.assume_pod(make_pod("a", "n1", "2", "1Mi", priority=0), check_fit=True),
    ],
    # a gang refused by the nomination after the memo is set, then given up, then again
    "gang-refused-then-denominated": lambda: [
        nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW),
        gang_claim("default/g", [(make_pod("g1", "n1", "2", "1Mi"), "", "")]),
        nominations.denominate_pod(nominee(1), now=NOW),
        gang_claim("default/g", [(make_pod("g1", "n1", "2", "1Mi"), "", "")]),
    ],
    # a nomination refused (nominations-full is hard to reach; a missing node) after the memo
    # says false: still false and correct
    "refused-nominate": lambda: [
        commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(1), "nX", ttl=600, now=NOW),
        commands.assume_pod(make_pod("b", "n1", "3", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(1), "n1", ttl=600, now=NOW),
        commands.assume_pod(make_pod("c", "n1", "1", "1Mi", priority=5000), check_fit=True),
        commands.assume_pod(make_pod("d", "n2", "1", "1Mi"), check_fit=True),
    ],
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_memo_writer_orders(make_cache: Callable[..., Cache], cache_name: str, order: str) -> None:
    """HELD. Each order, one batch against one call at a time."""
    one, each = pair(make_cache, cache_name, order)
    setup(one)
    setup(each)
    both_ways(one, each, ORDERS[order]())


def test_the_nominated_room_is_kept_against_a_batch_of_claims(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """HELD. Preemption as the reference scheduler does it: the preemptor nominated, its
    victims removed, then a batch of other pods' claims (lower priority) that would take its
    room is refused `nominated`; the preemptor's own claim lands in the same batch, and the
    claims after it fit what it left."""
    one, each = pair(make_cache, cache_name, "pre")
    for cache in (one, each):
        setup(cache)
        for j in range(4):
            cache.add_pod(make_pod(f"low{j}", "n1", "1", "1Mi", priority=0))
        cache.run(nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW))
        for j in range(3):
            cache.run(commands.remove_pod(make_pod(f"low{j}", "n1", "1", "1Mi", priority=0)))
    steps = [
        commands.assume_pod(make_pod(f"o{j}", "n1", "1", "1Mi", priority=10), check_fit=True)
        for j in range(3)
    ]
    steps += [commands.assume_pod(nominee(1, "n1", cpu="3"), check_fit=True)]
    steps += [
        commands.assume_pod(make_pod(f"p{j}", "n1", "1", "1Mi", priority=10), check_fit=True)
        for j in range(2)
    ]
    batched = both_ways(one, each, steps)
    assert [ok for ok, _ in batched] == [0, 0, 0, 1, 0, 0]
    assert all("nominated" in str(v) for ok, v in batched[:3])
    assert not one.client.exists(one.keys.nominated)


def test_a_single_claim_asks_redis_each_time(cache: Cache) -> None:
    """HELD. Outside a batch nothing is kept: a nomination written by a plain ZADD/HSET (as
    another replica's nominate_pod would, between two calls) is seen by the next claim."""
    setup(cache)
    cache.run(commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True))
    cache.run(nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW))
    reply = send_each(cache, [commands.assume_pod(make_pod("b", "n1", "1", "1Mi"), check_fit=True)])
    assert reply[0][0] == 0 and "nominated" in reply[0][1]
    # and the arrival count likewise: a parked pod's token registered between two claims
    cache.run(
        commands.queue_retry(
            "ref",
            "a",
            pend(1).uid,
            True,
            entries(cache)[-1][0].decode(),
            (1, 10),
            300,
            T0 + 20,
            ("app=web",),
        )
    )
    before = cache.client.get(cache.keys.helped)
    cache.run(commands.assume_pod(make_pod("w", "n2", "1", "1Mi", labels={"app": "web"})))
    assert cache.client.get(cache.keys.helped) != before
    assert cache.client.get(cache.keys.helped) == entries(cache)[-1][0]


def test_a_batch_on_one_cache_then_another_cache_sees_its_own_nominations(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """HELD. The memo keys carry no prefix: a batch of cache A (no nominations: memo false)
    then a batch of cache B (a nomination) on the same server, and B's claims are refused;
    then A again (memo true in B's call) with claims that fit."""
    a = make_cache(name=f"{cache_name}-A")
    b = make_cache(name=f"{cache_name}-B")
    setup(a)
    setup(b)
    b.run(nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW))
    ra = send_batch(a, [commands.assume_pod(make_pod("x", "n1", "2", "1Mi"), check_fit=True)])
    rb = send_batch(b, [commands.assume_pod(make_pod("x", "n1", "2", "1Mi"), check_fit=True)])
    ra2 = send_batch(a, [commands.assume_pod(make_pod("y", "n1", "2", "1Mi"), check_fit=True)])
    assert ra[0][0] == 1 and ra2[0][0] == 1
    assert rb[0][0] == 0 and "nominated" in rb[0][1]


def test_a_nomination_dropped_in_a_batch_is_forgotten_corruption_tells(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """HELD. A stale `true` in the memo (NOM.drop not forgetting it) is otherwise invisible: a
    claim that believes nominations exist only reads more. A corrupt `nom:n2` (a string) that
    no call reads while the cache holds no nomination makes it visible: after a nomination
    made and given up in the batch, a claim on n2 must not read `nom:n2` (one call at a time
    it does not), and is placed."""
    one, each = pair(make_cache, cache_name, "drop")
    for cache in (one, each):
        setup(cache)
        cache.client.set(cache.keys.prefix + "nom:n2", "garbage")
    steps = [
        nominations.nominate_pod(nominee(1), "n1", ttl=600, now=NOW),
        nominations.denominate_pod(nominee(1), now=NOW),
        commands.assume_pod(make_pod("a", "n2", "1", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(2), "n1", ttl=600, now=NOW),
        commands.sync_pod_gone(nominee(2).uid, "700"),
        commands.assume_pod(make_pod("b", "n2", "1", "1Mi"), check_fit=True),
    ]
    batched = both_ways(one, each, steps)
    assert [ok for ok, _ in batched] == [1, 1, 1, 1, 1, 1]


def test_awaited_arrivals_of_one_cache_do_not_leak_into_another_cache_batch(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """HELD. Cache A's parked pod waits for app=web, cache B's for nothing: batches of app=web
    claims alternating A, B, A, B on one server: A's each mark `helped`, B's never (the
    unprefixed memo and ARRIVALS.woke are cleared at each call's start)."""
    a = make_cache(name=f"{cache_name}-wA")
    b = make_cache(name=f"{cache_name}-wB")
    setup(a)
    setup(b)
    a.run(
        commands.queue_retry(
            "ref",
            "a",
            pend(1).uid,
            True,
            entries(a)[-1][0].decode(),
            (1, 10),
            300,
            T0 + 20,
            ("app=web",),
        )
    )
    helped_b = b.client.get(b.keys.helped)
    for j in range(2):
        for cache in (b, a) if j else (a, b):
            claims = [
                commands.assume_pod(
                    make_pod(f"w{j}{k}", "n2", "100m", "1Mi", labels={"app": "web"}),
                    check_fit=True,
                )
                for k in range(2)
            ]
            assert [ok for ok, _ in send_batch(cache, claims)] == [1, 1]
        assert a.client.get(a.keys.helped) == entries(a)[-1][0]
        assert b.client.get(b.keys.helped) == helped_b


def test_a_timed_claim_in_a_batch_respects_a_nomination_made_before_it(cache: Cache) -> None:
    """HELD. sc_timed_claim (the reference scheduler's claim_together sends these) after a
    claim that kept `false` and a nomination in the same batch is refused `nominated`."""
    setup(cache)
    steps = [
        commands.timed_claim(
            commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True), 30.0
        ),
        nominations.nominate_pod(nominee(1, cpu="2"), "n1", ttl=600, now=NOW),
        commands.timed_claim(
            commands.assume_pod(make_pod("b", "n1", "2", "1Mi"), check_fit=True), 30.0
        ),
        commands.timed_claim(
            commands.assume_pod(make_pod("c", "n1", "1", "1Mi"), check_fit=True), 30.0
        ),
    ]
    replies = send_batch(cache, steps)
    assert [ok for ok, _ in replies] == [1, 1, 0, 1]
    assert "nominated" in replies[2][1]


def test_a_command_refused_as_corrupt_mid_batch_leaves_the_memo_right(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """HELD. `nomvictims` corrupt (a string): a claim keeps `false`; each nomination is
    refused CORRUPT before its first write (memo and Redis both still `false`), so the claims
    after them take the room they would have held. Replies and keyspace as one call at a
    time."""
    one, each = pair(make_cache, cache_name, "corrupt")
    for cache in (one, each):
        setup(cache)
        cache.client.set(cache.keys.prefix + "nomvictims", "garbage")
    steps = [
        commands.assume_pod(make_pod("a", "n1", "1", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(1, cpu="3"), "n1", ttl=600, now=NOW, victims=["d/x"]),
        commands.assume_pod(make_pod("b", "n1", "2", "1Mi"), check_fit=True),
        nominations.nominate_pod(nominee(2, cpu="1"), "n2", ttl=600, now=NOW),
        commands.assume_pod(make_pod("c", "n2", "3", "1Mi"), check_fit=True),
        commands.assume_pod(nominee(2, "n2", cpu="1"), check_fit=True),
        commands.assume_pod(make_pod("d", "n2", "3", "1Mi"), check_fit=True),
    ]
    batched = both_ways(one, each, steps)
    assert [ok for ok, _ in batched] == [1, 0, 1, 0, 1, 1, 0]
    assert "CORRUPT" in batched[1][1] and "CORRUPT" in batched[3][1]
