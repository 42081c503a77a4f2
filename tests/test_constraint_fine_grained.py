"""Conflicts only for a change that can break the rule: a node a claim's rules read changed
since the snapshot, but the other way (lua/_claims.lua RULES). A pod taken off a node in the
target's domain cannot break anti-affinity; a pod placed next to an affinity's anchor or on a
node holding pods a spread counts cannot break those. The changes that can still refuse."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict
from schedcache.model.values import Pod
from tests.factories import caught_up as decided
from tests.factories import make_node, make_pod, pod_manifest
from tests.factories import zone_spread_pod as spread

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def nodes(cache: Cache, zones: dict[str, str]) -> None:
    for name, zone in zones.items():
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: zone}))


def required(kind: str, key: str, app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_pod_taken_off_the_targets_domain_does_not_refuse_anti_affinity(cache):
    nodes(cache, {"n1": "z1", "n2": "z1"})
    other = make_pod("other", "n2", labels={"app": "db"})
    cache.add_pod(other)
    snap = decided(cache)
    cache.remove_pod(other)
    pod = make_pod(
        "web-0", "n1", labels={"app": "web"}, affinity=required("podAntiAffinity", ZONE, "web")
    )
    cache.assume_pod(pod, check_fit=True, snapshot=snap)


def test_a_pod_placed_next_to_the_anchor_does_not_refuse_affinity(cache):
    nodes(cache, {"n1": "z1", "n2": "z1"})
    cache.add_pod(make_pod("db-0", "n2", labels={"app": "db"}))
    snap = decided(cache)
    cache.add_pod(make_pod("db-1", "n2", labels={"app": "db"}))
    pod = make_pod("app-0", "n1", affinity=required("podAffinity", ZONE, "db"))
    cache.assume_pod(pod, check_fit=True, snapshot=snap)


def test_a_matching_pod_placed_anywhere_refuses_a_first_pod_affinity(cache):
    nodes(cache, {"n1": "z1", "n2": "z2"})
    snap = decided(cache)
    cache.add_pod(make_pod("grp-9", "n2", labels={"app": "grp"}))
    first = make_pod(
        "grp-0", "n1", labels={"app": "grp"}, affinity=required("podAffinity", ZONE, "grp")
    )
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(first, check_fit=True, snapshot=snap)
    assert info.value.reasons == ("pod-affinity",)


def test_spread_stands_when_pods_arrive_outside_the_target_domain_and_not_when_one_leaves(cache):
    nodes(cache, {"n1": "z1", "n2": "z2", "n3": "z3"})
    cache.add_pod(spread("s-0", "n2"))
    cache.add_pod(spread("s-1", "n3"))
    snap = decided(cache)
    cache.add_pod(spread("s-2", "n2"))  # raises z2's count: the minimum cannot fall
    cache.assume_pod(spread("s-3", "n1"), check_fit=True, snapshot=snap)
    snap = decided(cache)  # z1 1, z2 2, z3 1
    cache.remove_pod(spread("s-1", "n3"))  # z3 falls to 0: s-4 in z1 would make 2 against 0
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(spread("s-4", "n1"), check_fit=True, snapshot=snap)
    assert info.value.reasons == ("topology-spread",)
    assert cache.verify() == []


def test_a_change_next_to_an_anti_affine_pod_placed_before_the_snapshot_refuses_nothing(cache):
    """Its terms were judged on the snapshot: only one placed since can repel the pod."""
    nodes(cache, {"n1": "z1", "n2": "z1"})
    cache.add_pod(
        make_pod(
            "guard", "n2", labels={"app": "g"}, affinity=required("podAntiAffinity", ZONE, "db")
        )
    )
    plain = make_pod("plain", "n2")
    cache.add_pod(plain)
    snap = decided(cache)
    cache.remove_pod(plain)
    cache.assume_pod(make_pod("web-0", "n1", labels={"app": "web"}), check_fit=True, snapshot=snap)
    assert cache.verify() == []


def test_spread_does_not_count_terminating_pods_as_upstream(cache):
    nodes(cache, {"n1": "z1", "n2": "z2"})
    m = pod_manifest("s-old", "n1", labels={"app": "s"})
    m["metadata"]["deletionTimestamp"] = "2026-11-28T17:00:00Z"
    cache.add_pod(Pod.from_k8s(m))
    assert cache.get_pod(Pod.from_k8s(m)).terminating
    # Counted, z1 would hold 1 and a second pod there would make 2 against 0.
    cache.assume_pod(spread("s-0", "n1"), check_fit=True, snapshot=decided(cache))
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(spread("s-1", "n1"), check_fit=True, snapshot=decided(cache))
    assert info.value.reasons == ("topology-spread",)


@pytest.mark.parametrize("labels", [{"app": "db"}, {}, {"tier": "web"}])
def test_a_pod_arriving_in_the_domain_that_the_term_cannot_select_does_not_refuse(cache, labels):
    """Issue 38 ("Done when" 2): a pod placed since the snapshot in an anti-affine target's
    domain refused the claim whether or not it matched (Lua could not read labels). Its
    record's labels now tell: one without the selector's label cannot break the rule."""
    nodes(cache, {"n1": "z1", "n2": "z1"})
    snap = decided(cache)
    cache.add_pod(make_pod("arrived", "n2", labels=labels))
    pod = make_pod(
        "web-0", "n1", labels={"app": "web"}, affinity=required("podAntiAffinity", ZONE, "web")
    )
    cache.assume_pod(pod, check_fit=True, snapshot=snap)
    assert cache.verify() == []


@pytest.mark.parametrize(
    ("labels", "expressions"),
    [
        ({"app": "web"}, None),
        ({"app": "web", "extra": "x"}, None),
        ({"app": "api"}, [{"key": "app", "operator": "In", "values": ["web", "api"]}]),
        ({"other": "x"}, [{"key": "app", "operator": "NotIn", "values": ["db"]}]),
    ],
)
def test_a_pod_arriving_in_the_domain_that_the_term_may_select_still_refuses(
    cache: Cache, labels: dict[str, str], expressions: list[dict[str, Any]] | None
) -> None:
    nodes(cache, {"n1": "z1", "n2": "z1"})
    snap = decided(cache)
    cache.add_pod(make_pod("arrived", "n2", labels=labels))
    affinity = required("podAntiAffinity", ZONE, "web")
    if expressions is not None:
        term = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        term["labelSelector"] = {"matchExpressions": expressions}
    pod = make_pod("web-0", "n1", labels={"app": "web"}, affinity=affinity)
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(pod, check_fit=True, snapshot=snap)
    assert info.value.reasons == ("pod-anti-affinity",)


def test_spread_stands_when_a_pod_it_does_not_count_arrives_in_the_target_domain(cache):
    nodes(cache, {"n1": "z1", "n2": "z2"})
    snap = decided(cache)
    cache.add_pod(make_pod("plain", "n1", labels={"app": "other"}))
    cache.assume_pod(spread("s-0", "n1"), check_fit=True, snapshot=snap)
    snap = decided(cache)
    cache.add_pod(spread("s-1", "n1"))  # counted: z1 2 against z2 0 for s-2
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(spread("s-2", "n1"), check_fit=True, snapshot=snap)
    assert info.value.reasons == ("topology-spread",)
    assert cache.verify() == []


def test_a_claim_on_a_node_where_an_older_client_placed_a_pod_since_refuses(cache):
    """A record without labels (written by a client before them) may hold any pod."""
    from schedcache.store import commands

    nodes(cache, {"n1": "z1", "n2": "z1"})
    snap = decided(cache)
    arrived = make_pod("arrived", "n2", labels={"app": "web"})
    command = commands.add_pod(arrived)
    *args, contribution = command.args
    pairs = str(contribution).split(" ")
    old = " ".join(
        f"{f} {a}" for f, a in zip(pairs[::2], pairs[1::2], strict=True) if f[:2] != "l:"
    )
    cache.run(commands.Command(command.name, command.subject, (*args, old)))
    pod = make_pod(
        "web-0", "n1", labels={"app": "web"}, affinity=required("podAntiAffinity", ZONE, "web")
    )
    with pytest.raises(FitConflict):
        cache.assume_pod(pod, check_fit=True, snapshot=snap)
