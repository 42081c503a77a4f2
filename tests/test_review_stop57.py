"""Review of stop 57 (620b8c3): (a) sc_sync_pod reads version:pod, pod and queued in one MGET
(READS.pod_texts), EXISTS telling a wrong-typed key from a missing one; (b) claim_conflicts
trusts the probe's ZCARD count of nodepods:<node> (checked[...], a number) until a write of
that pod set in the call marks it (place_pod, unplace_pod, confirm_in_place: true;
drop_if_empty: nil). Attacks: batches of more claims than a node has pods room for, with
removals, moves, confirmations, a node dropped and re-added, gangs and candidates in between;
wrong-typed keys (alone, two at once, under a stale version) for each op of sc_sync_pod, alone
and in an sc_batch. Written by a reviewer of that change."""

from __future__ import annotations

import random
import shutil
import time
from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import BatchFailed, CorruptRecord
from schedcache.store import commands
from schedcache.store.commands import Command
from schedcache.store.gang import gang_claim
from tests.factories import keyspace, make_node, make_pod
from tests.test_bench_redis_per_pod import bench
from tests.test_deferred_writes import send_batch, send_each


def claim(name: str, node: str, cpu: str = "10m", **kw: Any) -> Command:
    return commands.assume_pod(make_pod(name, node, cpu, "1Mi"), check_fit=True, **kw)


def pods_on(cache: Cache, node: str) -> int:
    return int(cache.client.zcard(cache.keys.prefix + "nodepods:" + node))


def allowed(cache: Cache, node: str) -> int:
    return int(cache.client.hget(cache.keys.prefix + "node:" + node, "a:pods") or 0)


def outcome(replies: list[tuple[int, Any]]) -> list[str]:
    """'ok' or the refusal's last word (reasons) per command."""
    return ["ok" if ok else str(value).split()[-1] for ok, value in replies]


def assert_within(cache: Cache, *nodes: str) -> None:
    for node in nodes:
        assert pods_on(cache, node) <= allowed(cache, node), (node, pods_on(cache, node))


def small_node(cache: Cache, name: str = "n1", pods: str = "3") -> None:
    cache.add_node(make_node(name, "64", "64Gi", pods=pods))


# -- (b) the pod count a batch of claims trusts --------------------------------------------


def test_a_batch_of_more_claims_than_room_places_exactly_the_room(cache: Cache) -> None:
    small_node(cache)
    replies = send_batch(cache, [claim(f"c{j}", "n1") for j in range(5)])
    assert outcome(replies) == ["ok", "ok", "ok", "pods", "pods"]
    assert pods_on(cache, "n1") == 3


def test_a_refused_probe_then_an_added_pod_then_claims(cache: Cache) -> None:
    """The first claim probes n1 (count 0) and is refused for cpu (no write); an add_pod then
    places a pod there: the claims after it must count it."""
    small_node(cache, pods="2")
    big = commands.assume_pod(make_pod("big", "n1", "100", "1Mi"), check_fit=True)
    steps = [big, commands.add_pod(make_pod("a1", "n1", "10m", "1Mi"))]
    steps += [claim(f"c{j}", "n1") for j in range(3)]
    replies = send_batch(cache, steps)
    assert outcome(replies) == ["cpu", "ok", "ok", "pods", "pods"]
    assert pods_on(cache, "n1") == 2


def test_a_removal_in_the_middle_of_a_batch_of_claims(cache: Cache) -> None:
    small_node(cache)
    cache.add_pod(make_pod("a1", "n1", "10m", "1Mi"))
    cache.add_pod(make_pod("a2", "n1", "10m", "1Mi"))
    steps = [claim("c1", "n1"), claim("c2", "n1")]  # the second one refused
    steps += [commands.remove_pod(make_pod("a1", "n1", "10m", "1Mi"))]
    steps += [claim(f"c{j}", "n1") for j in range(3, 6)]
    replies = send_batch(cache, steps)
    assert outcome(replies) == ["ok", "pods", "ok", "ok", "pods", "pods"]
    assert pods_on(cache, "n1") == 3


def test_a_claim_probe_then_an_assumed_pod_moved_onto_the_node(cache: Cache) -> None:
    """add_pod of a pod assumed on n2 but bound to n1 (a move: unplaced from n2, placed on n1),
    after a claim on n1 already counted n1; then claims on both nodes."""
    small_node(cache, "n1", pods="2")
    small_node(cache, "n2", pods="1")
    cache.assume_pod(make_pod("m", "n2", "10m", "1Mi"))
    steps = [claim("c1", "n1"), commands.add_pod(make_pod("m", "n1", "10m", "1Mi"))]
    steps += [claim("c2", "n1"), claim("c3", "n2"), claim("c4", "n2")]
    replies = send_batch(cache, steps)
    assert outcome(replies) == ["ok", "ok", "pods", "ok", "pods"]
    assert pods_on(cache, "n1") == 2 and pods_on(cache, "n2") == 1


def test_confirmations_in_place_between_claims(cache: Cache) -> None:
    """An assumed pod confirmed where it is (confirm_in_place, by add_pod and by sync_pod):
    the count does not move, and the claims after it still stop at the room."""
    small_node(cache, pods="4")
    cache.assume_pod(make_pod("s1", "n1", "10m", "1Mi"))
    cache.assume_pod(make_pod("s2", "n1", "10m", "1Mi"))
    steps = [claim("c1", "n1"), commands.add_pod(make_pod("s1", "n1", "10m", "1Mi"))]
    steps += [commands.sync_pod(make_pod("s2", "n1", "10m", "1Mi"), "7", True)]
    steps += [claim(f"c{j}", "n1") for j in range(2, 5)]
    replies = send_batch(cache, steps)
    # 4 allowed: s1, s2 and c1 leave room for c2 alone.
    assert outcome(replies) == ["ok", "ok", "ok", "ok", "pods", "pods"]
    assert pods_on(cache, "n1") == 4


def test_a_node_dropped_and_added_again_in_a_batch(cache: Cache) -> None:
    """remove_node leaves n1 (exists=0) while a pod holds it; the pod's removal then drops the
    node whole (drop_if_empty's DEL); add_node brings it back with room for 2: a batch of 4
    claims places 2."""
    small_node(cache, pods="2")
    cache.add_pod(make_pod("a1", "n1", "10m", "1Mi"))
    steps = [claim("c0", "n1"), commands.remove_node("n1")]
    steps += [commands.remove_pod(make_pod("a1", "n1", "10m", "1Mi"))]
    steps += [commands.remove_pod(make_pod("c0", "n1", "10m", "1Mi"))]
    steps += [commands.add_node(make_node("n1", "64", "64Gi", pods="2"))]
    steps += [claim(f"c{j}", "n1") for j in range(1, 5)]
    replies = send_batch(cache, steps)
    assert outcome(replies)[-4:] == ["ok", "ok", "pods", "pods"], replies
    assert pods_on(cache, "n1") == 2


def test_a_gang_of_members_on_one_node_counts_them(cache: Cache) -> None:
    small_node(cache, pods="3")
    cache.add_pod(make_pod("a1", "n1", "10m", "1Mi"))
    members = [(make_pod(f"g{j}", "n1", "10m", "1Mi"), "", "") for j in range(3)]
    with pytest.raises(Exception, match="pods"):
        cache.run(gang_claim("ns/g", members))
    assert pods_on(cache, "n1") == 1
    two = [(make_pod(f"h{j}", "n1", "10m", "1Mi"), "", "") for j in range(2)]
    cache.run(gang_claim("ns/h", two))
    assert pods_on(cache, "n1") == 3


def test_claims_then_a_gang_then_claims_in_one_batch(cache: Cache) -> None:
    small_node(cache, "n1", pods="4")
    small_node(cache, "n2", pods="4")
    gang = [(make_pod(f"g{j}", "n1" if j < 2 else "n2", "10m", "1Mi"), "", "") for j in range(3)]
    gang2 = [(make_pod(f"h{j}", "n1", "10m", "1Mi"), "", "") for j in range(2)]
    steps = [claim("c1", "n1"), gang_claim("ns/g", gang), gang_claim("ns/h", gang2)]
    steps += [claim(f"c{j}", "n1") for j in range(2, 5)]
    replies = send_batch(cache, steps)
    assert outcome(replies) == ["ok", "ok", "pods", "ok", "pods", "pods"], replies
    assert pods_on(cache, "n1") == 4 and pods_on(cache, "n2") == 1


def test_claims_with_candidates_fill_each_node_to_its_room(cache: Cache) -> None:
    """Every claim names full n0 first, then n1 and n2 (2 pods each): 6 claims place 4, two
    on each candidate, then the rest are refused."""
    small_node(cache, "n0", pods="0")
    small_node(cache, "n1", pods="2")
    small_node(cache, "n2", pods="2")
    steps = [claim(f"c{j}", "n0", candidates=[("n1", "", ""), ("n2", "", "")]) for j in range(6)]
    replies = send_batch(cache, steps)
    assert [ok for ok, _ in replies] == [1, 1, 1, 1, 0, 0], replies
    assert (pods_on(cache, "n1"), pods_on(cache, "n2")) == (2, 2)
    assert_within(cache, "n0", "n1", "n2")


def test_a_gang_after_a_candidate_claim_and_a_cleanup(cache: Cache) -> None:
    """A mix: a timed claim that lapses at once, a candidate claim, an expiry sweep (unplace),
    a gang over the freed room."""
    small_node(cache, "n1", pods="2")
    small_node(cache, "n2", pods="0")
    timed = commands.timed_claim(claim("t1", "n1"), 1.0)
    steps = [timed, claim("c1", "n2", candidates=[("n1", "", "")])]
    steps += [commands.cleanup_assumed_pods(now=time.time() + 3600, limit=100)]
    steps += [gang_claim("ns/g", [(make_pod(f"g{j}", "n1", "10m", "1Mi"), "", "") for j in (1, 2)])]
    steps += [claim("c2", "n1")]
    replies = send_batch(cache, steps)
    assert [ok for ok, _ in replies] == [1, 1, 1, 0, 1], replies
    assert "pods" in replies[3][1]
    assert pods_on(cache, "n1") == 2


def test_a_batch_and_the_same_commands_one_by_one_agree(make_cache: Any, cache_name: str) -> None:
    """The batched count against each command counting on its own (a fresh call each)."""
    one, two = make_cache(), make_cache(name=cache_name + "-each")
    for cache in (one, two):
        small_node(cache, "n1", pods="3")
        small_node(cache, "n2", pods="2")
        cache.add_pod(make_pod("a1", "n1", "10m", "1Mi"))
        cache.assume_pod(make_pod("s1", "n2", "10m", "1Mi"))
    steps: list[Command] = []
    for j in range(3):
        steps += [claim(f"c{j}", "n1"), claim(f"d{j}", "n2", candidates=[("n1", "", "")])]
    steps += [commands.remove_pod(make_pod("a1", "n1", "10m", "1Mi"))]
    steps += [commands.add_pod(make_pod("s1", "n1", "10m", "1Mi"))]  # moved n2 -> n1
    steps += [claim(f"e{j}", "n1") for j in range(2)] + [claim(f"f{j}", "n2") for j in range(2)]
    batched, each = send_batch(one, steps), send_each(two, steps)
    assert outcome(batched) == outcome(each)
    for node in ("n1", "n2"):
        assert pods_on(one, node) == pods_on(two, node) <= allowed(one, node)


# -- (a) sc_sync_pod's one MGET --------------------------------------------------------------


def wrong(cache: Cache, suffix: str, kind: str = "list") -> None:
    key = cache.keys.prefix + suffix
    cache.client.delete(key)
    if kind == "list":
        cache.client.rpush(key, "x")
    else:
        cache.client.hset(key, "f", "v")


def refused(cache: Cache, command: Command, names: tuple[str, ...], batch: bool = False) -> None:
    before = keyspace(cache.client, cache.keys.pattern)
    pattern = "|".join(rf"key \{{{cache.name}\}}:{n}\b" for n in names)
    if batch:
        replies = send_batch(cache, [command])
        assert replies[0][0] == 0 and any(n in replies[0][1] for n in names), replies
    else:
        with pytest.raises((CorruptRecord, BatchFailed), match=pattern):
            cache.run(command)
    assert keyspace(cache.client, cache.keys.pattern) == before


def setup_held(cache: Cache) -> None:
    small_node(cache, "n1", pods="10")
    cache.assume_pod(make_pod("held", "n1", "100m", "1Mi"))


OPS = {
    "set": lambda: commands.sync_pod(make_pod("held", "n1", "100m", "1Mi"), "5", True),
    "delete": lambda: commands.sync_pod_gone("held", "5"),
    "queue": lambda: commands.sync_pod_pending(make_pod("held", "", "100m", "1Mi"), "ref", "5"),
}
KEYS = ["version:pod:held", "pod:held", "queued:held"]


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
@pytest.mark.parametrize("kind", ["list", "hash"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize(
    "bad", [(k,) for k in KEYS] + [(a, b) for a in KEYS for b in KEYS if a < b] + [tuple(KEYS)]
)
def test_wrong_typed_keys_are_named_and_nothing_written(
    cache: Cache, bad: tuple[str, ...], op: str, kind: str, batch: bool
) -> None:
    setup_held(cache)
    for suffix in bad:
        wrong(cache, suffix, kind)
    # The first in read order is named (version, record, queued).
    first = min(bad, key=KEYS.index)
    refused(cache, OPS[op](), (first,), batch)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("kind", ["list", "hash"])
def test_a_wrong_typed_key_of_a_pod_the_cache_never_held(cache: Cache, op: str, kind: str) -> None:
    """Only the wrong-typed key exists (MGET: three nils; EXISTS must still find it)."""
    small_node(cache, "n1", pods="10")
    for suffix in ("pod:held", "queued:held"):
        wrong(cache, suffix, kind)
        refused(cache, OPS[op](), (suffix,))
        cache.client.delete(cache.keys.prefix + suffix)


@pytest.mark.parametrize("bad", ["pod:held", "queued:held"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_a_stale_change_drops_before_any_wrong_typed_key(cache: Cache, bad: str, op: str) -> None:
    setup_held(cache)
    cache.client.set(cache.keys.prefix + "version:pod:held", "9")
    wrong(cache, bad)
    before = keyspace(cache.client, cache.keys.pattern)
    replies = send_batch(cache, [OPS[op]()])
    assert replies[0][0] == 1 and b"stale" in b" ".join(replies[0][1]), replies
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_wrong_typed_version_under_a_newer_change(cache: Cache) -> None:
    """A wrong-typed version is named whatever the change's version."""
    setup_held(cache)
    wrong(cache, "version:pod:held")
    big = commands.sync_pod(make_pod("held", "n1", "100m", "1Mi"), "99999999", True)
    refused(cache, big, ("version:pod:held",))


def test_a_corrupt_sync_pod_in_a_batch_leaves_the_others_applied(cache: Cache) -> None:
    setup_held(cache)
    wrong(cache, "queued:held", "hash")
    steps = [
        commands.sync_pod(make_pod("other", "n1", "100m", "1Mi"), "3", True),
        OPS["set"](),
        commands.sync_pod(make_pod("third", "n1", "100m", "1Mi"), "4", True),
    ]
    replies = send_batch(cache, steps)
    assert [ok for ok, _ in replies] == [1, 0, 1], replies
    assert "queued:held" in replies[1][1]
    assert cache.client.type(cache.keys.prefix + "queued:held") == b"hash"
    assert pods_on(cache, "n1") == 3


# -- a seeded differential fuzz: one sc_batch against the same commands one FCALL each -------


def fuzz_plan(rng: random.Random, n: int) -> list[Command]:
    out: list[Command] = []
    names = ["n1", "n2", "n3"]
    for j in range(n):
        k = rng.randrange(10)
        node = rng.choice(names)
        uid = f"p{rng.randrange(12)}"
        if k <= 3:
            others = [(x, "", "") for x in rng.sample(names, rng.randrange(3)) if x != node]
            out.append(claim(uid, node, candidates=others) if others else claim(uid, node))
        elif k == 4:
            out.append(commands.add_pod(make_pod(uid, node, "10m", "1Mi")))
        elif k == 5:
            out.append(commands.remove_pod_by_uid(uid))
        elif k == 6:
            size = rng.randrange(1, 4)
            members = [
                (make_pod(f"g{j}-{m}", rng.choice(names), "10m", "1Mi"), "", "")
                for m in range(size)
            ]
            out.append(gang_claim(f"ns/g{j}", members))
        elif k == 7:
            out.append(commands.sync_pod(make_pod(uid, node, "10m", "1Mi"), str(100 + j), True))
        elif k == 8:
            out.append(commands.sync_pod_gone(uid, str(100 + j)))
        else:
            out.append(commands.forget_pod(make_pod(uid, node, "10m", "1Mi")))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_fuzz_batched_claims_count_pods_as_single_commands_do(
    make_cache: Any, cache_name: str, seed: int
) -> None:
    rng = random.Random(seed)
    one, two = make_cache(), make_cache(name=cache_name + "-each")
    for cache in (one, two):
        small_node(cache, "n1", pods="2")
        small_node(cache, "n2", pods="3")
        small_node(cache, "n3", pods="1")
        cache.add_pod(make_pod("p0", "n1", "10m", "1Mi"))
        cache.assume_pod(make_pod("p1", "n2", "10m", "1Mi"))
    steps = fuzz_plan(rng, 40)
    batched, each = send_batch(one, steps), send_each(two, steps)
    assert outcome(batched) == outcome(each)
    # (add_pod and sync_pod place what the API server bound, room or not: the single
    # commands, each counting afresh, are the oracle.)
    for node in ("n1", "n2", "n3"):
        assert pods_on(one, node) == pods_on(two, node), node


# -- bench/redis_per_pod.py (40caf45) ---------------------------------------------------------


def test_instructions_leave_the_slow_log_off() -> None:
    """--instructions counts Redis' instructions under callgrind; the slow log's own work must
    not be counted (docs/performance.md, stop 57: "it turns the slow log off"). Since 40caf45
    the only run of an --instructions row is the plain one (slowlog False), which no longer
    sets the threshold to -1: it stays at 10 ms, which callgrind's ~30x slower commands pass."""
    assert shutil.which("valgrind"), "callgrind is needed (.ci/run installs Debian's valgrind)"
    done, (row,) = bench("test-review57-instructions", "--instructions")
    assert done.returncode == 0, done.stderr[-3000:]
    assert row["instructions/pod"] > 0
    assert row["slow log us"] == -1, row["slow log us"]
