"""Claims that keep inter-pod rules: ``assume_pod(check_fit=True)`` refuses, atomically in
Redis, a placement the live cache shows would break the pod's required pod affinity,
anti-affinity (its own terms, and existing pods' terms toward it) or DoNotSchedule topology
spread, even when the replica decided on a snapshot where it was fine (docs/constraints.md)."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict, ValidationError
from schedcache.model.values import Pod
from schedcache.views.claims import taken_node
from tests.factories import caught_up as decided
from tests.factories import keyspace, make_node, make_pod, pod_manifest
from tests.factories import zone_spread_pod as spread_pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str = "z1"):
    return make_node(name, "8", "8Gi", labels={HOST: name, ZONE: zone})


def term(key: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def anti(key: str, **labels: str) -> dict[str, Any]:
    return {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(key, labels)]}
    }


def affinity(key: str, **labels: str) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(key, labels)]}}


def test_bare_claim_next_to_a_pod_its_hostname_anti_affinity_repels_is_refused(cache):
    cache.add_node(node("n1"))
    cache.add_pod(make_pod("web-0", "n1", labels={"app": "web"}))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict, match="pod-anti-affinity") as info:
        cache.assume_pod(
            make_pod("web-1", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web")),
            check_fit=True,
        )
    assert info.value.reasons == ("pod-anti-affinity",)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_two_replicas_deciding_on_one_snapshot_cannot_both_place_anti_affine_pods_on_a_node(
    make_cache,
):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1"))
    a.add_node(node("n2"))
    snap_a, snap_b = decided(a), decided(b)
    first = make_pod("web-0", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web"))
    second = make_pod("web-1", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web"))
    a.assume_pod(first, check_fit=True, snapshot=snap_a)
    before = keyspace(b.client, b.keys.pattern)
    with pytest.raises(FitConflict) as info:
        b.assume_pod(second, check_fit=True, snapshot=snap_b)
    assert info.value.reasons == ("pod-anti-affinity",)
    assert keyspace(b.client, b.keys.pattern) == before
    b.assume_pod(second.with_node("n2"), check_fit=True, snapshot=decided(b))
    assert b.verify() == []


def test_an_existing_pods_anti_affinity_placed_meanwhile_in_the_zone_refuses_a_plain_pod(
    make_cache,
):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    for name, zone in (("n1", "z1"), ("n2", "z1"), ("n3", "z2")):
        a.add_node(node(name, zone))
    snap_a = decided(a)
    b.assume_pod(make_pod("guard", "n2", affinity=anti(ZONE, app="db")), check_fit=True)
    with pytest.raises(FitConflict) as info:
        a.assume_pod(make_pod("db", "n1", labels={"app": "db"}), check_fit=True, snapshot=snap_a)
    assert info.value.reasons == ("existing-anti-affinity",)
    # Decided again, the zone is out: the other zone takes it.
    with pytest.raises(FitConflict, match="existing-anti-affinity"):
        a.assume_pod(
            make_pod("db", "n1", labels={"app": "db"}), check_fit=True, snapshot=decided(a)
        )
    a.assume_pod(make_pod("db", "n3", labels={"app": "db"}), check_fit=True, snapshot=decided(a))


def test_spread_claims_decided_on_one_snapshot_keep_max_skew(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1", "z1"))
    a.add_node(node("n2", "z2"))
    snap_a, snap_b = decided(a), decided(b)
    a.assume_pod(spread_pod("s0", "n1"), check_fit=True, snapshot=snap_a)
    with pytest.raises(FitConflict) as info:
        b.assume_pod(spread_pod("s1", "n1"), check_fit=True, snapshot=snap_b)
    assert info.value.reasons == ("topology-spread",)
    with pytest.raises(FitConflict, match="topology-spread"):
        b.assume_pod(spread_pod("s1", "n1"), check_fit=True)
    b.assume_pod(spread_pod("s1", "n2"), check_fit=True)


def test_affinity_claim_is_refused_once_the_pod_it_needs_is_gone(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1", "z1"))
    a.add_node(node("n2", "z2"))
    target = make_pod("db", "n1", labels={"app": "db"})
    a.add_pod(target)
    snap = decided(a)
    b.remove_pod(target)
    with pytest.raises(FitConflict) as info:
        a.assume_pod(
            make_pod("web", "n1", affinity=affinity(ZONE, app="db")), check_fit=True, snapshot=snap
        )
    assert info.value.reasons == ("pod-affinity",)


def test_first_pod_of_a_self_affine_group_goes_anywhere_but_not_twice_apart(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1", "z1"))
    a.add_node(node("n2", "z2"))
    snap_a, snap_b = decided(a), decided(b)
    group = {"labels": {"app": "g"}, "affinity": affinity(ZONE, app="g")}
    a.assume_pod(make_pod("g0", "n1", **group), check_fit=True, snapshot=snap_a)
    with pytest.raises(FitConflict, match="pod-affinity"):
        b.assume_pod(make_pod("g1", "n2", **group), check_fit=True, snapshot=snap_b)
    b.assume_pod(make_pod("g1", "n1", **group), check_fit=True)


def test_unconstrained_claims_elsewhere_do_not_conflict(make_cache):
    a, b = make_cache(replica="a"), make_cache(replica="b")
    a.add_node(node("n1", "z1"))
    a.add_node(node("n2", "z2"))
    snap = decided(a)
    b.assume_pod(make_pod("x", "n2"), check_fit=True)
    a.assume_pod(
        make_pod("web", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web")),
        check_fit=True,
        snapshot=snap,
    )
    assert a.verify() == []


def test_anti_affine_pods_placed_meanwhile_on_other_hosts_do_not_refuse_a_claim(make_cache):
    """The existing-anti-affinity check reads, of a node changed since the snapshot, its terms
    by topology key: hostname terms on another node cannot repel the pod; a zone term (a key
    the decision did not see) on a node of the same zone does."""
    a, b = make_cache(replica="a"), make_cache(replica="b")
    for name in ("n1", "n2", "n3"):
        a.add_node(node(name, "z1"))
    a.add_pod(make_pod("old", "n3", labels={"app": "web"}, affinity=anti(HOST, app="web")))
    snap = decided(a)
    b.assume_pod(
        make_pod("web-1", "n2", labels={"app": "web"}, affinity=anti(HOST, app="web")),
        check_fit=True,
    )
    a.assume_pod(make_pod("db", "n1", labels={"app": "db"}), check_fit=True, snapshot=snap)
    b.assume_pod(make_pod("guard", "n2", affinity=anti(ZONE, app="cache")), check_fit=True)
    with pytest.raises(FitConflict) as info:
        a.assume_pod(
            make_pod("cache", "n1", labels={"app": "cache"}), check_fit=True, snapshot=snap
        )
    assert info.value.reasons == ("existing-anti-affinity",)
    assert a.verify() == []


def test_the_extenders_bind_refuses_a_node_an_existing_pods_anti_affinity_repels(cache):
    """kube-scheduler replicas judge on their own informers; the extender's bind claims with
    the cache's rules, so the second of two racing binds cannot break them (here: the pod's
    own filter ran before the repelling pod arrived)."""
    from schedcache.extender.protocol import BindArgs, FilterArgs
    from schedcache.extender.service import Extender

    cache.add_node(node("n1", "z1"))
    cache.add_node(node("n2", "z2"))
    extender = Extender(cache)
    manifest = pod_manifest("db", "", labels={"app": "db"})
    db = Pod.from_k8s(manifest)
    filtered = extender.filter(FilterArgs(db, ["n1", "n2"], False, [], raw_pod=manifest))
    assert filtered["NodeNames"] == ["n1", "n2"]
    cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="db")))
    refused = extender.bind(BindArgs("db", db.namespace, db.uid, "n1"))
    assert "existing-anti-affinity" in refused["Error"]
    assert cache.pod_state(db) is None
    assert extender.bind(BindArgs("db", db.namespace, db.uid, "n2")) == {"Error": ""}


@pytest.mark.parametrize(
    ("since", "reads", "field"),
    [(-1, "", "since"), (True, "", "since"), (0, "pod-anti-affinity n1", "reads")],
    ids=["negative generation", "bool generation", "reads without a rule"],
)
def test_malformed_rule_arguments_are_refused_naming_the_field(cache, since, reads, field):
    from schedcache.errors import ValidationError
    from schedcache.store import commands

    with pytest.raises(ValidationError, match=field):
        commands.assume_pod(make_pod("web", "n1"), check_fit=True, since=since, reads=reads)


def test_a_rule_the_script_does_not_know_is_refused_and_changes_nothing(cache):
    """What a client of another version might send: BADARG, nothing written."""
    from schedcache.errors import ValidationError
    from schedcache.store import commands

    cache.add_node(node("n1"))
    before = keyspace(cache.client, cache.keys.pattern)
    command = commands.assume_pod(
        make_pod("web", "n1"), check_fit=True, since=0, reads="@no-such-rule n1"
    )
    with pytest.raises(ValidationError, match="reads"):
        cache.run(command)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_batch_keeps_the_rules_between_its_own_claims(cache):
    """Two anti-affine claims in one sc_batch, both judged on one snapshot: the second sees
    the first (changed earlier in the same call) and is refused; the batch goes on."""
    from schedcache.views.claims import claim_context

    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    snap = decided(cache)
    web = {"labels": {"app": "web"}, "affinity": anti(HOST, app="web")}
    first, second, third = (make_pod(n, "n1", **web) for n in ("web-0", "web-1", "web-2"))
    third = third.with_node("n2")
    batch = cache.batch()
    for pod in (first, second, third):
        batch.assume_pod(pod, check_fit=True, rules=claim_context(snap, pod))
    results = batch.execute()
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, FitConflict)
    assert results[1].error.reasons == ("pod-anti-affinity",)
    assert cache.verify() == []


def test_a_snapshot_of_a_cache_that_lost_its_data_is_stale(cache):
    """Generations restart when the cache begins again (a Redis without persistence restarted):
    a decision on the old incarnation's snapshot says nothing about the new one's nodes."""
    cache.add_node(node("n1"))
    for i in range(5):
        cache.add_pod(make_pod(f"filler-{i}", "n1"))
    old = decided(cache)
    cache.clear()
    cache.add_node(node("n1"))
    cache.add_pod(make_pod("web-0", "n1", labels={"app": "web"}))
    web = make_pod("web-1", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web"))
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(web, check_fit=True, snapshot=old)
    assert info.value.reasons == ("stale",)


def test_the_async_cache_claims_with_the_rules_of_the_snapshot_it_is_given(
    make_cache, backend, request
):
    """AsyncCache.assume_pod(..., snapshot=snap) keeps the rules as the sync cache does."""
    from tests.apis import Blocking
    from tests.conftest import backend_url

    sync = make_cache(replica="a")
    sync.add_node(node("n1"))
    sync.add_pod(make_pod("web-0", "n1", labels={"app": "web"}))
    snap = decided(sync)
    web = make_pod("web-1", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web"))
    blocking = Blocking(sync, backend_url(backend, request), {"ttl": sync.ttl, "replica": "b"})
    try:
        with pytest.raises(FitConflict) as info:
            blocking.assume_pod(web, check_fit=True, snapshot=snap)
        assert info.value.reasons == ("pod-anti-affinity",)
    finally:
        blocking.close_async()


# -- bare claims of pods without rules of their own: existing pods' anti-affinity still holds --


def guarded(cache: Cache, key: str) -> None:
    """n1 and n2 in zone z1, n3 in z2; on n1 a pod whose required anti-affinity under ``key``
    repels pods labelled app=db."""
    for name, zone in (("n1", "z1"), ("n2", "z1"), ("n3", "z2")):
        cache.add_node(node(name, zone))
    cache.add_pod(make_pod("guard", "n1", affinity=anti(key, app="db")))


@pytest.mark.parametrize(("key", "target"), [(HOST, "n1"), (ZONE, "n1"), (ZONE, "n2")])
def test_a_bare_claim_of_a_pod_without_rules_where_an_existing_pods_anti_affinity_repels_it(
    cache, key, target
):
    """No snapshot, no rules of its own: the claim is still refused, naming the rule, and Redis
    is exactly as before (hostname: the guard's node; zone: also the other node of its zone)."""
    guarded(cache, key)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(make_pod("db", target, labels={"app": "db"}), check_fit=True)
    assert info.value.reasons == ("existing-anti-affinity",)
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize(("key", "target"), [(HOST, "n2"), (ZONE, "n3")])
def test_a_bare_claim_of_a_pod_without_rules_where_no_anti_affinity_applies_is_placed(
    cache, key, target
):
    guarded(cache, key)
    cache.assume_pod(make_pod("db", target, labels={"app": "db"}), check_fit=True)
    cache.assume_pod(make_pod("other", "n1", labels={"app": "other"}), check_fit=True)
    assert cache.pod_state(make_pod("db", target)) is not None
    assert cache.verify() == []


def test_a_bare_claim_without_anti_affine_pods_placed_takes_one_round_trip(cache, monkeypatch):
    """The cheap path stays cheap: with no placed pod holding required anti-affinity, Redis
    judges the bare claim exactly and the client neither reads a snapshot nor claims twice."""
    cache.add_node(node("n1"))
    cache.add_pod(make_pod("web-0", "n1", labels={"app": "web"}))
    sent: list[str] = []
    run = cache.store.run

    def counting(command):
        sent.append(command.name)
        return run(command)

    def no_snapshot(_snap):
        raise AssertionError("a bare claim read a snapshot")

    monkeypatch.setattr(cache.store, "run", counting)
    monkeypatch.setattr(cache, "update_snapshot", no_snapshot)
    cache.assume_pod(make_pod("web-1", "n1", labels={"app": "web"}), check_fit=True)
    assert sent == ["assume_pod"]


def test_the_anti_affine_pod_count_follows_placements_and_verify_checks_it(cache):
    """Placed, moved off and removed, the count Redis keeps stays the sum of the nodes';
    once the last anti-affine pod is gone, the bare claim is exact again (refused before)."""
    guarded(cache, HOST)
    guard = make_pod("guard", "n1", affinity=anti(HOST, app="db"))
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 1
    assert cache.verify() == []
    cache.remove_pod(guard)
    assert int(cache.client.get(cache.keys.anti_affine_pods)) == 0
    cache.assume_pod(make_pod("db", "n1", labels={"app": "db"}), check_fit=True)
    cache.client.set(cache.keys.anti_affine_pods, 5)
    assert [(d.subject, d.field) for d in cache.verify()] == [("cache", "antipods")]


def test_a_cache_without_the_count_judges_bare_claims_on_a_snapshot(cache):
    """A cache written before the count existed has none: read as unknown, never as zero."""
    guarded(cache, HOST)
    cache.client.delete(cache.keys.anti_affine_pods)
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(make_pod("db", "n1", labels={"app": "db"}), check_fit=True)
    assert info.value.reasons == ("existing-anti-affinity",)
    cache.assume_pod(make_pod("db", "n2", labels={"app": "db"}), check_fit=True)


def test_the_async_cache_judges_a_bare_claim_of_a_pod_without_rules(make_cache, backend, request):
    from tests.apis import Blocking
    from tests.conftest import backend_url

    sync = make_cache(replica="a")
    guarded(sync, ZONE)
    blocking = Blocking(sync, backend_url(backend, request), {"ttl": sync.ttl, "replica": "b"})
    try:
        with pytest.raises(FitConflict) as info:
            blocking.assume_pod(make_pod("db", "n2", labels={"app": "db"}), check_fit=True)
        assert info.value.reasons == ("existing-anti-affinity",)
        blocking.assume_pod(make_pod("db", "n3", labels={"app": "db"}), check_fit=True)
    finally:
        blocking.close_async()


def test_a_batchs_bare_claims_of_pods_without_rules_keep_existing_pods_anti_affinity(cache):
    """Bare check_fit claims in a batch: Redis refuses them as unchecked while an anti-affine
    pod is placed, and execute() judges them on the cache's snapshot and claims them again."""
    guarded(cache, ZONE)
    batch = cache.batch()
    batch.assume_pod(make_pod("db-0", "n2", labels={"app": "db"}), check_fit=True)
    batch.assume_pod(make_pod("db-1", "n3", labels={"app": "db"}), check_fit=True)
    results = batch.execute()
    assert [r.ok for r in results] == [False, True]
    assert isinstance(results[0].error, FitConflict)
    assert results[0].error.reasons == ("existing-anti-affinity",)
    assert isinstance(results[1].reply, int)
    assert cache.pod_state(make_pod("db-0", "n2")) is None
    assert cache.verify() == []


def test_a_batchs_timed_claims_with_candidates_keep_their_deadline_when_judged_again(cache):
    """A batch's claim with a deadline and candidates (the reference scheduler's batched
    claims): taken with its deadline in the same command; refused as unchecked while an
    anti-affine pod is placed, it is judged and claimed again with the same deadline and
    candidates (before, the claim judged again lost both, and a claim moved to its candidate
    answered its generation alone: read as taken on the node it first named)."""
    guarded(cache, ZONE)
    batch = cache.batch()
    # db-0 names n2 (in the guard's zone) with n3 as its candidate; db-1 takes n3 outright.
    batch.assume_pod(
        make_pod("db-0", "n2", labels={"app": "db"}),
        check_fit=True,
        candidates=["n3"],
        deadline=30.0,
    )
    batch.assume_pod(make_pod("db-1", "n3", labels={"app": "db"}), check_fit=True, deadline=30.0)
    results = batch.execute()
    assert [r.ok for r in results] == [True, True]
    assert taken_node(results[0].reply, make_pod("db-0", "n2")) == "n3"
    for name in ("db-0", "db-1"):
        record = cache.get_pod_record(make_pod(name, "n3"))
        assert record.node == "n3" and record.binding_finished and record.deadline_ms
    with pytest.raises(ValidationError, match="candidates"):
        cache.batch().assume_pod(
            make_pod("db-2", "n3"), check_fit=True, rules=(1, "", "", "", ""), candidates=["n2"]
        )
    assert cache.verify() == []


def test_a_bare_claim_judged_again_onto_its_candidate_answers_the_candidate(cache):
    """``assume_pod`` of a pod without rules, with a candidate, while an anti-affine pod is
    placed: refused as unchecked, judged on the cache's snapshot, it moves to the candidate.
    Before, the answer was the node it first named (n2), so a scheduler bound it there."""
    guarded(cache, ZONE)
    pod = make_pod("db", "n2", labels={"app": "db"})
    assert cache.assume_pod(pod, check_fit=True, candidates=["n3"], deadline=30.0) == "n3"
    assert cache.get_pod_record(pod).node == "n3"


@pytest.mark.parametrize("stored", ["x", "9223372036854775807"])
def test_a_corrupt_anti_affine_pod_count_refuses_the_placement_and_changes_nothing(cache, stored):
    from schedcache.errors import CorruptRecord

    cache.add_node(node("n1"))
    cache.client.set(cache.keys.anti_affine_pods, stored)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CorruptRecord, match="antipods"):
        cache.add_pod(make_pod("guard", "n1", affinity=anti(HOST, app="db")))
    assert keyspace(cache.client, cache.keys.pattern) == before
