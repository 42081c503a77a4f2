"""Claims whose rules name the labels a term's selector pins (lua/_claims.lua,
ARRIVALS.arrived) must still be refused when a pod that the selector DOES select was placed
since the snapshot, whatever its label values hold. Review of issue 38's label checks."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict
from schedcache.model.arrivals import wake_tokens
from schedcache.store import commands
from tests.factories import caught_up as decided
from tests.factories import make_node, make_pod
from tests.factories import zone_spread_pod as spread

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _anti(selector: dict[str, Any]) -> dict[str, Any]:
    term = {"labelSelector": selector, "topologyKey": ZONE}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


@pytest.mark.parametrize(
    "value",
    ["web,o=z", "a=b", "web,", "x@y"],
    ids=["comma", "equals", "trailing-comma", "at"],
)
def test_a_selected_pod_with_an_odd_label_value_placed_since_refuses_anti_affinity(
    cache: Cache, value: str
) -> None:
    """A value with "," was split by Lua into tokens the arriving pod's label is not: the
    claim was accepted next to the pod its anti-affinity selects; one with "=" was a BADARG
    (the pod could never be claimed). "@" held already (Lua's rule match is greedy)."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: "z1"}))
    snap = decided(cache)
    cache.add_pod(make_pod("intruder", "n2", labels={"app": value}))
    pod = make_pod("w", "n1", affinity=_anti({"matchLabels": {"app": value}}))
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(pod, check_fit=True, snapshot=snap)
    assert info.value.reasons == ("pod-anti-affinity",)
    assert cache.verify() == []


def test_a_parked_pod_waits_for_any_arrival_when_its_selector_value_cannot_be_a_token() -> None:
    """Lua splits wake tokens at whitespace: such a value waits for any arrival instead."""
    term = {"labelSelector": {"matchLabels": {"app": "a=b"}}, "topologyKey": ZONE}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    assert wake_tokens(make_pod("p", "", affinity=affinity)) == ("*",)


def test_a_pod_whose_label_value_holds_whitespace_is_placed_and_refuses_anti_affinity(
    cache: Cache,
) -> None:
    """Its labels travel as "any label" (Lua splits words at whitespace): before, the pod could
    not be added at all (ValidationError on its contribution's ``l:`` field)."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: "z1"}))
    snap = decided(cache)
    cache.add_pod(make_pod("intruder", "n2", labels={"app": "web", "note": "a b"}))
    pod = make_pod("w", "n1", affinity=_anti({"matchLabels": {"app": "web"}}))
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(pod, check_fit=True, snapshot=snap)
    assert info.value.reasons == ("pod-anti-affinity",)
    assert cache.verify() == []


@pytest.mark.parametrize(
    "zone", ["a b", "x@y", "x@topology-spread-min"], ids=["space", "at", "rule"]
)
def test_a_zone_spread_claim_sees_pods_placed_since_in_a_zone_whose_value_is_no_word(
    cache: Cache, zone: str
) -> None:
    """A domain travels as one word "~<key>=<value>"; Lua read a zone "a b" as "a" and missed
    the pods placed since in it (accepted: 3 against 1 with maxSkew 1), and a zone with "@"
    made the claim a BADARG. Such a domain's nodes are named instead."""
    for name, value in (("n1", zone), ("n2", zone), ("n3", "zb")):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: value}))
    cache.add_pod(spread("s-0", "n3"))
    snap = decided(cache)  # the zone 0, zb 1: s-2 and s-3 each fit there on the snapshot
    cache.add_pod(spread("s-1", "n2"))
    placed = 0
    for name in ("s-2", "s-3"):
        try:
            cache.assume_pod(spread(name, "n1"), check_fit=True, snapshot=snap)
            placed += 1
        except FitConflict as error:
            assert error.reasons == ("topology-spread",)
    assert placed == 0  # a pod placed since in the target's zone refuses (coarse, as "za")
    assert cache.verify() == []


@pytest.mark.parametrize(
    "reads",
    [
        "@pod-affinity n2 @pod-anti-affinity:app=db n2 @pod-anti-affinity:app=web n2",
        " ".join(["@pod-anti-affinity:app=db n2"] * 50 + ["@pod-anti-affinity n1 n2"]),
        f"@pod-anti-affinity:app=db n2 @topology-spread:app=web ~{ZONE}=z1",
        f"@topology-spread-min ~{ZONE}=z1 @topology-spread:app=web ~{ZONE}=z1",
    ],
    ids=["last-rule", "many-then-one", "word-after-name", "word-under-second-rule"],
)
def test_a_node_named_under_several_rules_refuses_by_the_one_its_change_breaks(
    cache: Cache, reads: str
) -> None:
    """Each rule's words are searched once (lua/_claims.lua read_broken): the node named
    under rules a pod placed since cannot break, then under one it can, still refuses."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: "z1"}))
    snap = decided(cache)
    cache.add_pod(make_pod("web-1", "n2", labels={"app": "web"}))
    before = cache.verify()
    command = commands.assume_pod(
        make_pod("w", "n1"), check_fit=True, since=snap.generation, reads=reads
    )
    with pytest.raises(FitConflict):
        cache.run(command)
    assert cache.verify() == before == []
