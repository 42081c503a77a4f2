"""Claims judged on a snapshot older than a node change: the snapshot's topology domains are
not the live ones, so Redis refuses the claim (`node-changed`) instead of trusting them — a
node added (the target itself, or one joining its zone), relabelled, tainted or untainted, a
placeholder filled in, a node with pods removed (lua/_changes.lua, docs/constraints.md). Each
case here was accepted, breaking a rule, before node spec changes were recorded."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import FitConflict
from schedcache.model.values import Node, Pod
from tests.factories import caught_up as decided
from tests.factories import keyspace, make_pod, node_manifest
from tests.factories import zone_spread_pod as spread

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}


def node(name: str, zone: str = "z1", *, taints: list[dict[str, str]] | None = None) -> Node:
    m = node_manifest(name, "8", "8Gi", labels={HOST: name, ZONE: zone})
    if taints:
        m.setdefault("spec", {})["taints"] = taints
    return Node.from_k8s(m)


def required(kind: str, key: str, labels: dict[str, str]) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def zone_anti_web(name: str, node_name: str) -> Pod:
    return make_pod(name, node_name, labels=WEB, affinity=required("podAntiAffinity", ZONE, WEB))


def refused_unchanged(cache: Cache, pod: Pod, snap: Snapshot) -> FitConflict:
    """The claim is refused and writes nothing."""
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(pod, check_fit=True, snapshot=snap)
    assert keyspace(cache.client, cache.keys.pattern) == before
    return info.value


# -- the target is newer than the snapshot -------------------------------------------------


def test_a_target_newer_than_the_snapshot_is_refused_under_zone_anti_affinity(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_pod(make_pod("web-0", "n1", labels=WEB))
    snap = decided(cache)
    cache.add_node(node("n2", "z1"))
    conflict = refused_unchanged(cache, zone_anti_web("web-1", "n2"), snap)
    assert conflict.reasons == ("node-changed",)
    # Judged again on a fresh snapshot: the rule itself refuses it.
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(zone_anti_web("web-1", "n2"), check_fit=True, snapshot=decided(cache))
    assert info.value.reasons == ("pod-anti-affinity",)


def test_a_target_newer_than_the_snapshot_cannot_end_zone_spread_4_against_0(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    for i in range(3):
        cache.add_pod(spread(f"s-{i}", "n1"))
    snap = decided(cache)
    cache.add_node(node("n3", "z1"))
    assert refused_unchanged(cache, spread("s-4", "n3"), snap).reasons == ("node-changed",)


def test_a_target_newer_than_the_snapshot_needs_an_anchor_in_its_zone(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_pod(make_pod("db-0", "n2", labels={"app": "db"}))
    snap = decided(cache)
    cache.add_node(node("n3", "z1"))
    pod = make_pod("app-0", "n3", affinity=required("podAffinity", ZONE, {"app": "db"}))
    assert refused_unchanged(cache, pod, snap).reasons == ("node-changed",)


# -- relabelled nodes ------------------------------------------------------------------------


def test_another_node_relabelled_into_the_targets_zone_refuses_the_claim(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_pod(make_pod("web-0", "n2", labels=WEB))
    snap = decided(cache)
    cache.update_node(None, node("n2", "z1"))
    assert refused_unchanged(cache, zone_anti_web("web-1", "n1"), snap).reasons == ("node-changed",)


def test_the_target_relabelled_into_a_zone_whose_pods_repel_it_refuses_the_claim(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_pod(zone_anti_web("web-0", "n2"))
    snap = decided(cache)
    cache.update_node(None, node("n1", "z2"))
    pod = make_pod("web-1", "n1", labels=WEB)
    assert refused_unchanged(cache, pod, snap).reasons == ("node-changed",)


def test_a_new_node_in_the_zone_with_a_matching_pod_from_another_replica_refuses_the_claim(
    make_cache,
):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1", "z1"))
    snap = decided(a)
    b.add_node(node("n2", "z1"))
    b.assume_pod(make_pod("web-0", "n2", labels=WEB), check_fit=True)
    assert refused_unchanged(a, zone_anti_web("web-1", "n1"), snap).reasons == ("node-changed",)


# -- spread domains opened by a node change ----------------------------------------------------


def spread_cluster(cache: Cache) -> None:
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_pod(spread("s-0", "n1"))
    cache.add_pod(spread("s-1", "n2"))


def test_a_new_node_opening_an_empty_spread_domain_refuses_the_claim(cache):
    spread_cluster(cache)
    snap = decided(cache)
    cache.add_node(node("n3", "z3"))
    assert refused_unchanged(cache, spread("s-2", "n1"), snap).reasons == ("node-changed",)


def test_an_untainted_node_opens_a_spread_domain_under_node_taints_policy_honor(cache):
    spread_cluster(cache)
    taint = [{"key": "maint", "value": "1", "effect": "NoSchedule"}]
    cache.add_node(node("n3", "z3", taints=taint))
    snap = decided(cache)
    # On the snapshot, z3 does not count (tainted, not tolerated): z1 may reach 2.
    pod = spread("s-2", "n1", nodeTaintsPolicy="Honor")
    cache.update_node(None, node("n3", "z3"))
    assert refused_unchanged(cache, pod, snap).reasons == ("node-changed",)


def test_a_filled_placeholder_joins_the_targets_zone(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_pod(make_pod("web-0", "n2", labels=WEB))  # n2 is not known yet: a placeholder
    snap = decided(cache)
    cache.add_node(node("n2", "z1"))
    assert refused_unchanged(cache, zone_anti_web("web-1", "n1"), snap).reasons == ("node-changed",)


def test_a_node_update_that_keeps_labels_and_taints_refuses_nothing(cache):
    """A status change (allocatable, images) is no spec change: the claim stands."""
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_pod(make_pod("web-0", "n2", labels=WEB))
    snap = decided(cache)
    m = node_manifest("n2", "16", "8Gi", labels={HOST: "n2", ZONE: "z2"})
    cache.update_node(None, Node.from_k8s(m))
    cache.assume_pod(zone_anti_web("web-1", "n1"), check_fit=True, snapshot=snap)
    assert cache.verify() == []


@pytest.mark.parametrize(
    ("tail", "what"),
    [
        (("x1",), "spec-digest"),
        (("12", "2", "k", "v"), "labels"),  # two labels announced, one sent
        (("12", "1", "", "v"), "labels"),  # an empty key
        (("12", "129", *(["k", "v"] * 129)), "labels"),  # more than the script keeps
    ],
)
def test_a_bad_spec_digest_or_label_list_is_refused_and_changes_nothing(cache, tail, what):
    from schedcache.model.aggregates import spec_digest
    from schedcache.store.commands import Command, add_node

    n1 = node("n1")
    command = add_node(n1)
    head = command.args[: command.args.index(spec_digest(n1))]
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(Exception, match=what):
        cache.run(Command("add_node", command.subject, (*head, *tail)))
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_placeholder_filled_elsewhere_ends_the_first_pod_rule(cache):
    """The first pod of a self-affine group may go anywhere only while no pod matches: a
    placeholder's matching pod, counted once its node is filled in, ends that."""
    cache.add_node(node("n1", "z1"))
    cache.add_pod(make_pod("grp-9", "n3", labels={"app": "grp"}))  # n3: a placeholder
    snap = decided(cache)
    cache.add_node(node("n3", "z2"))
    first = make_pod(
        "grp-0",
        "n1",
        labels={"app": "grp"},
        affinity=required("podAffinity", ZONE, {"app": "grp"}),
    )
    assert refused_unchanged(cache, first, snap).reasons == ("node-changed",)


# -- node changes that cannot change the verdict refuse nothing ------------------------------


def test_nodes_relabelled_added_or_removed_away_from_the_targets_domains_refuse_nothing(cache):
    """Only a node now in one of the target's domains (under the keys its rules use) can
    change an affinity or anti-affinity verdict; elsewhere the claim stands."""
    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    cache.add_node(node("n3", "z3"))
    cache.add_node(node("n4", "z3"))
    cache.add_pod(make_pod("web-0", "n2", labels=WEB))
    cache.add_pod(make_pod("web-9", "n4", labels=WEB))
    snap = decided(cache)
    cache.update_node(None, node("n3", "z2"))  # into a zone that is not n1's
    cache.add_node(node("n5", "z4"))
    cache.remove_node(node("n4", "z3"))  # a ghost now: in no domain
    cache.assume_pod(zone_anti_web("web-1", "n1"), check_fit=True, snapshot=snap)
    assert cache.verify() == []


def test_a_node_with_more_labels_than_kept_is_judged_coarsely(cache):
    """Its labels are not kept (lua/_changes.lua): any spec change of it refuses."""
    cache.add_node(node("n1", "z1"))
    snap = decided(cache)
    many = node_manifest("n2", "8", "8Gi", labels={f"k{i}": "v" for i in range(129)})
    cache.add_node(Node.from_k8s(many))
    assert refused_unchanged(cache, zone_anti_web("web-1", "n1"), snap).reasons == ("node-changed",)


# -- batches judge a pod's own rules without rules= -------------------------------------------


def test_a_batch_claim_without_rules_judges_the_pods_own_rules(cache):
    cache.add_node(node("n1", "z1"))
    cache.add_pod(make_pod("web-0", "n1", labels=WEB))
    batch = cache.batch()
    batch.assume_pod(zone_anti_web("web-1", "n1"), check_fit=True)
    batch.assume_pod(make_pod("plain", "n1"), check_fit=True)
    results = batch.execute()
    assert [r.ok for r in results] == [False, True]
    assert isinstance(results[0].error, FitConflict)
    assert results[0].error.reasons == ("pod-anti-affinity",)
    assert cache.verify() == []
