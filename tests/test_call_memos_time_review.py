"""The time and `antipods` kept once per sc_batch (h40memo2), attacked by a reviewer of that
change: every writer of the count in a batch before bare claims, an expired anti-affine pod,
gang claims, a corrupt or missing count, deadlines and queue leases from the batch's one time,
an explicit `now` beside the server's. Each as one batch against one call at a time."""

from __future__ import annotations

import time
from collections.abc import Callable

from schedcache import Cache
from schedcache.store import commands
from schedcache.store.commands import Command
from tests.factories import make_node, make_pod
from tests.test_call_memos import claim
from tests.test_call_memos_time import (
    HOST,
    UNCHECKED,
    anti_pod,
    refused,
    same_both_ways,
    two_nodes,
)


def test_every_anti_writer_path_in_a_batch_is_seen_by_later_bare_claims(
    make_cache: Callable[..., Cache],
) -> None:
    """assume (no fit check), forget_pod, update_pod (anti -> plain), sync_pod set/delete,
    add_pod on a new node then remove_node (ghost keeps the pod), remove_pod: each moves the
    count, and the bare claim after it answers as one call at a time."""
    guard = anti_pod("guard", "n1")
    g2 = anti_pod("g2", "n2")
    plain_g2 = make_pod("g2", "n2", "1", "10Mi", labels={"app": "guard"})
    g3 = anti_pod("g3", "n3")

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),  # 0: exact
            commands.assume_pod(guard),  # assumed anti: 1
            claim("b", "n2", "1"),  # refused
            commands.forget_pod(guard),  # 0
            claim("c", "n2", "1"),  # exact
            commands.sync_pod(g2, "5", True),  # 1
            claim("d", "n2", "1"),  # refused
            commands.update_pod(g2, plain_g2),  # 0
            claim("e", "n2", "1"),  # exact
            commands.add_node(make_node("n3", "8", "8Gi", labels={HOST: "n3"})),
            commands.add_pod(g3),  # 1
            commands.remove_node("n3"),  # ghost keeps g3: still 1
            claim("f", "n1", "1"),  # refused
            commands.sync_pod(g3, "9", False),  # 0 (and the ghost goes)
            claim("g", "n1", "1"),  # exact
            commands.sync_pod(plain_g2, "6", False),  # no anti: still 0
            claim("h", "n2", "1"),  # exact
        ]

    cache, replies, _ = same_both_ways(make_cache, two_nodes, steps)
    assert [j for j in refused(replies) if UNCHECKED in replies[j][1]] == [2, 6, 12]
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 0
    assert cache.verify() == []


def test_an_expired_anti_pod_in_a_batch_is_seen_by_later_bare_claims(
    make_cache: Callable[..., Cache],
) -> None:
    """An assumed anti pod whose binding finished (explicit now, tiny ttl), then expired by a
    cleanup with an explicit far-future now: the count goes 1 -> 0 within the batch."""
    guard = anti_pod("guard", "n1")

    def prepare(cache: Cache) -> None:
        two_nodes(cache)
        cache.run(commands.assume_pod(guard))

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n2", "1"),  # refused: 1 (memo holds 1)
            commands.finish_binding(guard, 1000.0, 0.001),
            commands.cleanup_assumed_pods(4_000_000_000.0, 10),  # expires it: 0
            claim("b", "n2", "1"),  # exact
        ]

    cache, replies, _ = same_both_ways(make_cache, prepare, steps)
    assert refused(replies) == [0]
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 0
    assert cache.verify() == []


def test_a_deadline_set_in_a_batch_is_never_before_the_batch_time(
    make_cache: Callable[..., Cache],
) -> None:
    """finish_binding ('' now, 1 ms ttl) then cleanup ('' now) in one batch: the batch's one
    instant does not expire it (deadline = now + 1 > now); one call at a time may. The
    deadline is within the call's real time + 1 ms: never earlier than the batch began."""
    cache = make_cache(lease_ttl=0)
    two_nodes(cache)
    pod = make_pod("p", "n1", "1", "10Mi")
    cache.run(commands.assume_pod(pod))
    start = int(time.time() * 1000) - 1
    batch = cache.batch()
    batch.add(commands.finish_binding(pod, None, 0.001))
    batch.add(commands.cleanup_assumed_pods(None, 10))
    results = batch.execute()
    end = int(time.time() * 1000) + 1
    assert all(r.error is None for r in results)
    score = cache.client.zscore(cache.keys.prefix + "deadlines", pod.uid)
    assert score is not None  # not expired by the same instant
    assert start + 1 <= int(score) <= end + 1


def test_explicit_now_then_server_time_in_one_batch(make_cache: Callable[..., Cache]) -> None:
    """An explicit `now` (far in the past) does not become the batch's time: the later ''
    command reads TIME, and the explicit one does not poison the memo."""
    cache = make_cache(lease_ttl=0)
    two_nodes(cache)
    a, b = make_pod("a", "n1", "1", "10Mi"), make_pod("b", "n1", "1", "10Mi")
    cache.run(commands.assume_pod(a))
    cache.run(commands.assume_pod(b))
    start = int(time.time() * 1000) - 1
    batch = cache.batch()
    batch.add(commands.finish_binding(a, 1000.0, 10.0))  # deadline 1,010,000 ms
    batch.add(commands.finish_binding(b, None, 10.0))  # TIME + 10 s
    batch.add(commands.cleanup_assumed_pods(None, 10))  # expires a only
    results = batch.execute()
    assert all(r.error is None for r in results)
    scores = dict(cache.client.zrange(cache.keys.prefix + "deadlines", 0, -1, withscores=True))
    assert a.uid.encode() not in scores
    assert start + 10_000 <= int(scores[b.uid.encode()]) <= int(time.time() * 1000) + 10_001


def test_a_missing_count_memo_stays_some_until_a_new_generation(
    make_cache: Callable[..., Cache],
) -> None:
    """`antipods` missing while `gen` exists (a cache older than the count): claims read
    'some' before and after an anti pod's add/remove (apply_contribution leaves it missing),
    batch and one by one alike."""

    def prepare(cache: Cache) -> None:
        two_nodes(cache)
        cache.client.delete(cache.keys.anti_affine_pods)

    def steps(cache: Cache) -> list[Command]:
        return [
            claim("a", "n1", "1"),
            commands.add_pod(anti_pod("guard", "n1")),
            commands.remove_pod(anti_pod("guard", "n1")),
            claim("b", "n1", "1"),
        ]

    cache, replies, _ = same_both_ways(make_cache, prepare, steps)
    assert refused(replies) == [0, 3]
    assert cache.client.get(cache.keys.anti_affine_pods) is None


def test_queue_leases_in_one_batch_neither_lapse_nor_break_fifo(
    make_cache: Callable[..., Cache],
) -> None:
    """Three pending pods of one priority pushed and popped one at a time in one batch, the
    leases 1 ms with '' now: every pop sees one instant, so no lease granted in the batch
    lapses within it (a lapsed lease would hand the first pod out again) and the pods come
    out in push order."""
    cache = make_cache(lease_ttl=0)
    two_nodes(cache)
    pods = [make_pod(f"q{j}", "", "1", "10Mi") for j in range(3)]
    batch = cache.batch()
    for j, pod in enumerate(pods):
        batch.add(commands.sync_pod_pending(pod, "default-scheduler", str(10 + j)))
    for _ in range(4):
        batch.add(commands.queue_pop("default-scheduler", "h1", 0.001, 1, 60.0, None))
    results = batch.execute()
    assert all(r.error is None for r in results), [r.error for r in results]
    popped = [r.reply for r in results[3:]]
    uids = [reply[0] for reply in popped if reply]
    assert uids == [p.uid.encode() for p in pods], popped
    assert popped[3] == []


def _each(cache: Cache, steps: list[Command]) -> list[str]:
    out = []
    for command in steps:
        try:
            cache.run(command)
            out.append("")
        except Exception as error:
            out.append(f"{type(error).__name__}: {error}")
    return out


def _together(cache: Cache, steps: list[Command]) -> list[str]:
    batch = cache.batch()
    for command in steps:
        batch.add(command)
    return [
        "" if r.error is None else f"{type(r.error).__name__}: {r.error}" for r in batch.execute()
    ]


def test_a_corrupt_count_is_refused_in_a_batch_as_one_call_at_a_time(
    make_cache: Callable[..., Cache],
) -> None:
    """`antipods` not an integer: every bare claim and every anti pod's placement is refused
    (corruption, nothing written), in a batch as alone; a plain add goes through."""

    def steps() -> list[Command]:
        return [
            claim("a", "n1", "1"),
            commands.add_pod(make_pod("plain", "n1", "1", "10Mi")),
            claim("b", "n2", "1"),
            commands.add_pod(anti_pod("guard", "n2")),
            claim("c", "n2", "1"),
        ]

    caches = []
    for name in ("corrupt-batch", "corrupt-alone"):
        cache = make_cache(name=name, lease_ttl=0)
        two_nodes(cache)
        cache.client.set(cache.keys.anti_affine_pods, "x")
        caches.append(cache)
    together = [e.replace("corrupt-batch", "C") for e in _together(caches[0], steps())]
    alone = [e.replace("corrupt-alone", "C") for e in _each(caches[1], steps())]
    assert together == alone
    assert [bool(e) for e in together] == [True, False, True, True, True]
    for cache in caches:
        assert cache.client.get(cache.keys.anti_affine_pods) == b"x"
        assert {p.name for p in cache.list_pods()} == {"plain"}


def test_gang_claims_in_a_batch_see_the_count_moved_before_them(
    make_cache: Callable[..., Cache],
) -> None:
    """Gang members with no rules judged read the same count as a bare claim (refusal()):
    an anti pod added in the batch refuses the gang after it `unchecked`; removed, the next
    gang goes through; a bare claim after the gangs still reads the right count."""
    from schedcache.store.gang import gang_claim

    guard = anti_pod("guard", "n1")

    def steps(cache: Cache) -> list[Command]:
        return [
            gang_claim("default/g", [(make_pod("g1", "n1", "1", "1Mi"), "", "")]),
            commands.add_pod(guard),
            gang_claim("default/h", [(make_pod("h1", "n2", "1", "1Mi"), "", "")]),
            commands.remove_pod(guard),
            gang_claim("default/k", [(make_pod("k1", "n2", "1", "1Mi"), "", "")]),
            claim("z", "n2", "1"),
        ]

    cache, replies, _ = same_both_ways(make_cache, two_nodes, steps)
    assert refused(replies) == [2]
    assert {p.name for p in cache.list_pods()} == {"g1", "k1", "z"}
