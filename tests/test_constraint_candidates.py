"""Claims with ranked candidates (lua/_pick.lua): a replica that lost the race for its best node
takes the next one that still passes every check, in the same round trip, instead of deciding
again; a conflict only when every candidate is refused."""

from __future__ import annotations

import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import CacheError, FitConflict, ValidationError
from schedcache.store.commands import Command, assume_pod
from schedcache.store.events import MAX_PAYLOAD
from schedcache.store.records import pack_object
from tests.factories import keyspace, make_node, make_pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}
HOST_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": WEB}, "topologyKey": HOST}
        ]
    }
}


def nodes(cache: Cache, *names: str, cpu: str = "1") -> None:
    for name in names:
        cache.add_node(make_node(name, cpu, "8Gi", labels={HOST: name, ZONE: "z1"}))


def decided(cache: Cache) -> Snapshot:
    snap = Snapshot()
    cache.update_snapshot(snap)
    return snap


def test_a_claim_that_lost_its_best_node_takes_the_next_candidate(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    nodes(a, "n1", "n2", "n3")
    snap = decided(a)
    b.assume_pod(make_pod("other", "n1", "1", "1Mi"), check_fit=True)  # n1 is full now
    pod = make_pod("mine", "n1", "1", "1Mi")
    taken = a.assume_pod(pod, check_fit=True, snapshot=snap, candidates=("n2", "n3"))
    assert taken == "n2"
    assert a.get_pod(pod).node_name == "n2"
    assert [e.data["node_name"] for e in a.events() if e.type == "PodAssumed"][-1] == "n2"
    assert a.verify() == []


def test_the_candidate_taken_stores_the_whole_pod_on_that_node(make_cache):
    """The candidates' records are built from one dict of the pod, its node swapped: the one
    stored is exactly the pod placed there, every field kept (labels, requests, priority)."""
    a, b = make_cache(replica="a"), make_cache(replica="b")
    nodes(a, "n1", "n2", "n3")
    snap = decided(a)
    b.assume_pod(make_pod("other", "n1", "1", "1Mi"), check_fit=True)  # n1 is full now
    pod = make_pod("mine", "n1", "1", "1Mi", labels={"app": "web", "tier": "x"}, priority=7)
    taken = a.assume_pod(pod, check_fit=True, snapshot=snap, candidates=("n2", "n3"))
    assert taken == "n2"
    assert a.get_pod(pod) == pod.with_node("n2")


def test_a_rule_broken_on_the_best_node_meanwhile_moves_the_claim_to_the_next(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    nodes(a, "n1", "n2")
    snap_a, snap_b = decided(a), decided(b)
    b.assume_pod(make_pod("web-0", "n1", labels=WEB, affinity=HOST_ANTI), True, snapshot=snap_b)
    web1 = make_pod("web-1", "n1", labels=WEB, affinity=HOST_ANTI)
    assert a.assume_pod(web1, check_fit=True, snapshot=snap_a, candidates=("n2",)) == "n2"
    assert a.verify() == []


def test_a_candidate_that_breaks_a_rule_on_the_snapshot_is_not_sent(cache):
    nodes(cache, "n1", "n2")
    cache.add_pod(make_pod("web-0", "n1", labels=WEB))
    web1 = make_pod("web-1", "n1", labels=WEB, affinity=HOST_ANTI)
    assert cache.assume_pod(web1, check_fit=True, snapshot=decided(cache), candidates=("n2",)) == (
        "n2"
    )


def test_every_candidate_refused_is_one_conflict_naming_the_first_and_changes_nothing(
    make_cache,
):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    nodes(a, "n1", "n2")
    snap = decided(a)
    b.assume_pod(make_pod("x", "n1", "1", "1Mi"), check_fit=True)
    b.assume_pod(make_pod("y", "n2", "1", "1Mi"), check_fit=True)
    before = keyspace(a.client, a.keys.pattern)
    with pytest.raises(FitConflict) as info:
        a.assume_pod(
            make_pod("mine", "n1", "1", "1Mi"), check_fit=True, snapshot=snap, candidates=["n2"]
        )
    assert info.value.node == "n1" and info.value.reasons == ("cpu",)
    assert keyspace(a.client, a.keys.pattern) == before


def test_a_bare_claim_takes_candidates_too(cache):
    nodes(cache, "n1", "n2")
    cache.assume_pod(make_pod("x", "n1", "1", "1Mi"), check_fit=True)
    assert (
        cache.assume_pod(make_pod("y", "n1", "1", "1Mi"), check_fit=True, candidates=("n2",))
        == "n2"
    )


def test_each_candidates_blob_as_the_script_rebuilds_it_is_the_pod_packed_on_that_node():
    """Only the tails of the candidates' names travel (node_name is the blob's last field):
    the shared prefix plus each rest is exactly what packing the pod on that node gives, for
    names shorter, longer, and across msgpack's 31/32-byte string header boundary."""
    pod = make_pod("p", "n-" + "a" * 29, "1", "1Mi", labels={"app": "web"}, priority=7)
    others = ("n2", "n-" + "a" * 30, "n-" + "b" * 29, "node-" + "x" * 40, pod.node_name)
    args = assume_pod(pod, True, candidates=tuple((n, "", "") for n in others)).args
    blob, at = args[2], args.index(len(others))
    shared = args[at + 1]
    for j, node in enumerate(others):
        name, rest = args[at + 2 + 4 * j : at + 4 + 4 * j]
        assert name == node
        assert blob[:shared] + rest == pack_object(pod.with_node(node).to_dict(), "p")
    sent = sum(len(args[at + 3 + 4 * j]) for j in range(len(others)))
    assert sent <= sum(len(n) + 3 for n in others) < len(blob)  # names' tails, no pod


def test_a_candidate_whose_pod_would_pass_the_size_limit_is_refused_before_sending(cache):
    nodes(cache, "n1")
    pod = make_pod("p", "n1", labels={"big": "x" * (MAX_PAYLOAD - 400)})
    assume_pod(pod, True, candidates=(("n2", "", ""),))  # the pod itself fits
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match="byte limit"):
        cache.assume_pod(pod, check_fit=True, candidates=["n" + "2" * 500])
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize("name", ["\ud800", "n-\udcff"])
def test_a_candidate_name_that_is_not_utf8_is_refused_by_name_and_changes_nothing(cache, name):
    """(Found in review: the splice packed the name alone, and a lone surrogate escaped as a
    UnicodeEncodeError.)"""
    nodes(cache, "n1")
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match="UTF-8"):
        cache.assume_pod(make_pod("p", "n1", "1", "1Mi"), check_fit=True, candidates=[name])
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_bare_claim_whose_own_node_is_full_is_judged_and_takes_a_candidate(cache):
    """(Found in review: with a pod of required anti-affinity placed, Redis refused the bare
    claim's candidates as unchecked but named its own node's `cpu`, so the client never judged
    and claimed again, though a candidate fitted.)"""
    nodes(cache, "n1", "c1", "other")
    cache.assume_pod(make_pod("fill", "n1", "1", "1Mi"), check_fit=True)  # n1 is full
    cache.add_pod(make_pod("anti", "other", labels=WEB, affinity=HOST_ANTI))
    bare = make_pod("bare", "n1", "1", "1Mi", labels={"x": "y"})
    assert cache.assume_pod(bare, check_fit=True, candidates=["c1"]) == "c1"
    assert cache.get_pod(bare).node_name == "c1"
    with pytest.raises(FitConflict) as refused:  # nowhere to go: the judged claim's reasons
        cache.assume_pod(make_pod("late", "n1", "1", "1Mi"), check_fit=True, candidates=["c1"])
    assert refused.value.reasons == ("cpu",)


def test_too_many_candidates_or_no_fit_check_are_refused_before_sending(cache):
    nodes(cache, "n1")
    pod = make_pod("p", "n1")
    with pytest.raises(ValidationError, match="candidates"):
        cache.assume_pod(pod, check_fit=True, candidates=[f"c{i}" for i in range(8)])
    with pytest.raises(ValidationError, match="candidates"):
        cache.assume_pod(pod, candidates=["n2"])
    with pytest.raises(ValidationError, match="candidates"):
        cache.assume_pod(pod, expect_generation=1, candidates=["n2"])


@pytest.mark.parametrize(
    "tail",
    [
        ("8", "0", *(["n2", "x", "", ""] * 8)),  # too many
        ("1", "0", "n2", "x", ""),  # short
        ("1", "99999", "n2", "x", "", ""),  # a prefix longer than the blob
        ("1", "0", "n 2", "x", "", ""),  # whitespace in a node name
        ("1", "0", "n2", "x", "@nonsense n1", ""),  # reads the script does not know
    ],
)
def test_malformed_candidates_are_refused_by_the_script_and_change_nothing(cache, tail):
    nodes(cache, "n1", "n2")
    cache.assume_pod(make_pod("x", "n1", "1", "1Mi"), check_fit=True)
    command = assume_pod(make_pod("p", "n1", "1", "1Mi"), True, since=0)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CacheError):
        cache.run(Command("assume_pod", command.subject, (*command.args, *tail)))
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_the_async_cache_takes_candidates_too(make_cache, backend, request):
    from tests.apis import Blocking
    from tests.conftest import backend_url

    sync = make_cache(replica="a")
    nodes(sync, "n1", "n2")
    snap = decided(sync)
    sync.assume_pod(make_pod("x", "n1", "1", "1Mi"), check_fit=True)
    blocking = Blocking(sync, backend_url(backend, request), {"ttl": sync.ttl, "replica": "b"})
    try:
        web = make_pod("web-0", "n1", "1", "1Mi", labels=WEB, affinity=HOST_ANTI)
        assert blocking.assume_pod(web, check_fit=True, snapshot=snap, candidates=["n2"]) == "n2"
    finally:
        blocking.close_async()
    assert sync.verify() == []
