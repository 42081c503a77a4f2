"""A node's requested totals stay exact int64 sums, past 2**53 where doubles would round.

Node totals are summed by Redis (HINCRBY), never by Lua numbers: these tests drive them across
2**53 and back, within one sc_batch, within one update and through a confirmation on the same
node, and hold the node to the exact sum computed here. (Computing totals in Lua to send one
HSET instead of an HINCRBY per field was measured and left out: it cost more instructions than
the calls it saved, see docs/operations.md.)"""

from __future__ import annotations

from collections import Counter

import pytest

from schedcache import Cache, Pod
from tests.factories import make_node, make_pod

GPU = "example.com/big"
# Around the sizes where doubles stop being exact.
AMOUNTS = [1, 7, 10**15 - 1, 10**15, 3 * 10**15 + 1, 123_456_789, 2**53 + 1, 10**18 + 7]


def pod(name: str, amount: int, node: str = "n1") -> Pod:
    return make_pod(name, node, "100m", "1Mi", extended={GPU: str(amount)})


def expected(pods: dict[str, Pod]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for each in pods.values():
        for name, amount in each.requests.scalar_resources.items():
            total[name] += amount
    return {name: amount for name, amount in total.items() if amount}


def held(cache: Cache, node: str = "n1") -> dict[str, int]:
    return cache.get_node_info(node).requested.scalar_resources


@pytest.fixture
def with_node(cache: Cache) -> Cache:
    cache.add_node(make_node("n1", "64", "64Gi", extended={GPU: str(2 * 10**18)}))
    return cache


def test_a_batch_adds_and_removes_across_the_exact_bound(with_node: Cache):
    cache = with_node
    placed: dict[str, Pod] = {}
    batch = cache.batch()
    for i, amount in enumerate(AMOUNTS):
        placed[f"p{i}"] = pod(f"p{i}", amount)
        batch.add_pod(placed[f"p{i}"])
    for name in ("p3", "p6", "p0"):  # out again in the same call, the long ones among them
        batch.remove_pod(placed.pop(name))
    assert all(result.ok for result in batch.execute())
    assert held(cache) == expected(placed)
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes


def test_totals_that_grow_past_the_bound_and_shrink_back(with_node: Cache):
    cache = with_node
    placed: dict[str, Pod] = {}
    batch = cache.batch()
    for i in range(12):
        placed[f"p{i}"] = pod(f"p{i}", 10**15 - 1)
        batch.add_pod(placed[f"p{i}"])
    for i in range(11):
        batch.remove_pod(placed.pop(f"p{i}"))
    batch.add_pod(placed.setdefault("small", pod("small", 5)))
    assert all(result.ok for result in batch.execute())
    assert held(cache) == expected(placed) == {GPU: 10**15 + 4}
    cache.remove_pod(placed.pop("p11"))
    assert held(cache) == {GPU: 5}
    cache.remove_pod(placed.pop("small"))
    assert held(cache) == {}
    fields = cache.client.hkeys(cache.keys.node("n1"))
    assert f"r:s:{GPU}".encode() not in fields  # back to zero: the field is gone


def test_an_update_on_the_same_node_in_one_command(with_node: Cache):
    cache = with_node
    old, new = pod("a", 10**15 - 1), pod("a", 10**18 + 3)
    cache.add_pod(pod("b", 10**15 - 1))
    cache.add_pod(old)
    cache.update_pod(old, new)  # one call takes the old total off and puts the new one on
    assert held(cache) == {GPU: 10**15 - 1 + 10**18 + 3}
    back = pod("a", 2)
    cache.update_pod(new, back)
    assert held(cache) == {GPU: 10**15 + 1}
    assert cache.verify() == []


def test_an_assumed_pod_confirmed_on_the_same_node(with_node: Cache):
    cache = with_node
    assumed = pod("a", 10**15 - 1)
    cache.assume_pod(assumed)
    batch = cache.batch()
    batch.add_pod(pod("b", 10**15 - 1))
    batch.add_pod(assumed)  # confirms: off the node and on again in the same call
    batch.add_pod(pod("c", 3))
    assert all(result.ok for result in batch.execute())
    assert held(cache) == {GPU: 2 * (10**15 - 1) + 3}
    assert cache.verify() == []


def test_totals_stay_exact_past_the_kept_contributions(with_node: Cache):
    """The functions keep parsed contributions across calls, at most 1,000 (lua/_helpers.lua,
    CONTRIBUTIONS_KEPT), then start again: 2,500 pods of distinct requests, added, removed in
    part and added again, leave the exact sums and a cache that folds to the same state."""
    pods = {f"p{j}": pod(f"p{j}", 10**15 + j) for j in range(2_500)}
    with with_node.batch() as batch:
        for each in pods.values():
            batch.add_pod(each)
    assert held(with_node) == expected(pods)
    gone = [name for j, name in enumerate(pods) if j % 3 == 0]
    with with_node.batch() as batch:
        for name in gone:
            batch.remove_pod(pods[name])
    for name in gone[:50]:  # one command at a time too, each a contribution seen before
        with_node.add_pod(pods[name])
    kept = {name: each for name, each in pods.items() if name not in gone[50:]}
    assert held(with_node) == expected(kept)
    assert with_node.verify() == []
