"""A claim's node totals stay exact integers (issue 40): on the node taken (the claim's own or a
candidate), in a batch after refused claims, and for a gang's members counted on one node.
Each field moves by one HINCRBY; totals computed in Lua and written in one HSET were measured
dearer (docs/performance.md, stop 63). Only the first test's values pass a Lua number's 2^53,
so only it would catch such totals computed as doubles; the others check the sums."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict
from tests.factories import make_node, make_pod

BIG = 2**62  # memory allocatable: room for totals far past 2^53


def totals(cache: Cache, node: str) -> dict[str, str]:
    stored = cache.client.hgetall(cache.keys.node(node))
    return {k.decode(): v.decode() for k, v in stored.items() if k.decode() in ("r:cpu", "r:mem")}


def test_totals_within_15_digits_and_past_2_53_are_exact(make_cache: Callable[..., Cache]) -> None:
    cache = make_cache()
    cache.add_node(make_node("n1", "64", str(BIG)))
    # 123456789012345678 + 1 is not a double: a sum computed in Lua would be off by one.
    cache.add_pod(make_pod("big", "n1", "100m", "123456789012345678"))
    cache.assume_pod(make_pod("one", "n1", "250m", "1"), check_fit=True)
    assert totals(cache, "n1") == {"r:cpu": "350", "r:mem": "123456789012345679"}
    cache.add_node(make_node("n2", "64", str(BIG)))
    # 15 digits each: the sum (16 digits) is exact as a double, and written so.
    cache.add_pod(make_pod("nines", "n2", "1m", "999999999999999"))
    cache.assume_pod(make_pod("plus", "n2", "1", "999999999999999"), check_fit=True)
    assert totals(cache, "n2") == {"r:cpu": "1001", "r:mem": "1999999999999998"}
    cache.remove_pod(make_pod("plus", "n2", "1", "999999999999999"))
    assert totals(cache, "n2") == {"r:cpu": "1", "r:mem": "999999999999999"}
    assert cache.verify() == []


def test_a_candidate_taken_gets_the_totals_and_the_refused_node_none(
    make_cache: Callable[..., Cache],
) -> None:
    cache = make_cache()
    cache.add_node(make_node("full", "1", "1Gi"))
    cache.add_node(make_node("free", "2", "1Gi"))
    cache.add_pod(make_pod("filler", "full", "900m", "10Mi"))
    cache.add_pod(make_pod("other", "free", "300m", "10Mi"))
    before = totals(cache, "full")
    taken = cache.assume_pod(
        make_pod("web", "full", "500m", "1Mi"), check_fit=True, candidates=["free"]
    )
    assert taken == "free"
    assert totals(cache, "full") == before
    assert totals(cache, "free") == {"r:cpu": "800", "r:mem": str(11 * 2**20)}
    assert cache.verify() == []


def test_a_batch_after_refused_claims_adds_each_pod_once(
    make_cache: Callable[..., Cache],
) -> None:
    cache = make_cache()
    cache.add_node(make_node("n1", "1", "1Gi"))
    with cache.batch() as batch:
        batch.assume_pod(make_pod("a", "n1", "600m", "1Mi"), check_fit=True)
        batch.assume_pod(make_pod("b", "n1", "600m", "2Mi"), check_fit=True)  # no room: refused
        batch.add_pod(make_pod("c", "n1", "100m", "4Mi"))  # added outright: HINCRBY
        batch.assume_pod(make_pod("d", "n1", "200m", "8Mi"), check_fit=True)
        results = batch.execute()
    assert [r.ok for r in results] == [True, False, True, True]
    assert isinstance(results[1].error, FitConflict)
    assert totals(cache, "n1") == {"r:cpu": "900", "r:mem": str(13 * 2**20)}
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes


@pytest.mark.parametrize("layout", [("n1", "n1"), ("n2", "n1", "n1"), ("n1", "n2")])
def test_a_gangs_members_add_up_on_each_node(
    make_cache: Callable[..., Cache], layout: tuple[str, ...]
) -> None:
    cache = make_cache()
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "4", "1Gi"))
        cache.add_pod(make_pod(f"there-{name}", name, "100m", "1Mi"))
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    pods = [
        make_pod(f"m{j}", node, "300m", "2Mi", labels=labels, namespace="default")
        for j, node in enumerate(layout)
    ]
    cache.assume_gang(pods, "default/train")
    for name in ("n1", "n2"):
        members = layout.count(name)
        assert totals(cache, name) == {
            "r:cpu": str(100 + 300 * members),
            "r:mem": str((1 + 2 * members) * 2**20),
        }
    assert cache.verify() == []
