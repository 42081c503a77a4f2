"""A spread claim's reads name domains, not their nodes (issue 38): under a key other than the
hostname, the target's domain and the domains holding counted pods travel as one word each
("~<key>=<value>"), and Lua reads the kept labels of the nodes changed since the snapshot. At
5,000 nodes in 3 zones a claim named ~3,000 nodes per candidate before. The refusals stay those
of the node lists: a pod placed in the target's zone, a counted pod taken off where the minimum
is counted; malformed domain words are refused as BADARG, nothing written."""

from __future__ import annotations

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict, ValidationError
from schedcache.store import commands
from schedcache.views.claims import claim_context
from tests.factories import caught_up as decided
from tests.factories import keyspace, make_node, make_pod
from tests.factories import zone_spread_pod as spread

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def zones(cache: Cache, per_zone: int) -> list[str]:
    names = []
    for z in range(3):
        for i in range(per_zone):
            name = f"z{z}-n{i:02}"
            cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: f"z{z}"}))
            names.append(name)
    return names


def test_a_zone_spread_claim_names_its_domains_not_their_nodes(cache: Cache) -> None:
    names = zones(cache, 20)
    for i, name in enumerate(names[::7]):
        cache.add_pod(spread(f"s-{i}", name, skew=3))
    snap = decided(cache)
    _, reads, _, _, _ = claim_context(snap, spread("new", "z0-n05", skew=3))
    count, minimum = reads.split(" @")
    assert count == f"@topology-spread:app=s ~{ZONE}=z0"  # its selector's labels (arrivals)
    assert sorted(minimum.split()) == ["topology-spread-min", *(f"~{ZONE}=z{z}" for z in range(3))]
    assert not any(name in reads for name in names)


def test_domain_words_refuse_what_the_node_lists_refused(cache: Cache) -> None:
    zones(cache, 3)
    cache.add_pod(spread("s-1", "z1-n01"))
    cache.add_pod(spread("s-2", "z2-n02"))
    cache.add_pod(make_pod("plain", "z1-n00"))  # counted by no constraint
    snap = decided(cache)
    # Placed in the target's zone, on a node the claim did not name: z0 1 against 0.
    cache.add_pod(spread("s-0", "z0-n02"))
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(spread("s-3", "z0-n00"), check_fit=True, snapshot=snap)
    assert info.value.reasons == ("topology-spread",)
    snap = decided(cache)  # z0 1, z1 1, z2 1
    cache.remove_pod(spread("s-1", "z1-n01"))  # z1 falls to 0: s-4 in z0 would make 2 against 0
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(spread("s-4", "z2-n01"), check_fit=True, snapshot=snap)
    assert info.value.reasons == ("topology-spread",)
    snap = decided(cache)  # z0 1, z1 0, z2 1
    # Taken off a zone holding no counted pod (not among the minimum's words), and placed
    # outside the target's zone: neither can break the claim.
    cache.remove_pod(make_pod("plain", "z1-n00"))
    cache.add_pod(make_pod("elsewhere", "z2-n01"))
    assert cache.assume_pod(spread("s-5", "z1-n02"), check_fit=True, snapshot=snap) == "z1-n02"
    assert cache.verify() == []


@pytest.mark.parametrize(
    "reads",
    [
        f"@pod-anti-affinity ~{ZONE}=z0",  # a domain word under a rule that reads nodes
        f"@topology-spread ~{ZONE}",  # no value part
        "@topology-spread ~=z0",  # no key
    ],
)
def test_malformed_domain_words_are_refused_and_change_nothing(cache: Cache, reads: str) -> None:
    zones(cache, 1)
    cache.add_pod(spread("s-1", "z1-n00"))
    snap = decided(cache)
    cache.add_pod(spread("s-2", "z2-n00"))  # a node changed since: the reads are searched
    before = keyspace(cache.client, cache.keys.pattern)
    command = commands.assume_pod(
        spread("s-3", "z0-n00"), check_fit=True, since=snap.generation, reads=reads
    )
    with pytest.raises(ValidationError, match="reads"):
        cache.run(command)
    assert keyspace(cache.client, cache.keys.pattern) == before
