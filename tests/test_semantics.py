"""The cache's transitions beyond upstream's own tests: ghosts, placeholders, node mismatches,
replicas sharing a cache, generations, events and batches."""

from __future__ import annotations

import pytest

from schedcache import Cache
from schedcache.errors import (
    InvalidTransition,
    NodeNotFound,
    PodAlreadyExists,
    PodNotAssumed,
    ValidationError,
)
from schedcache.store.keys import SCHEMA_VERSION
from tests.factories import make_node, make_pod, port

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

NOW = 1_700_000_000.0


def test_second_replica_assuming_the_same_pod_is_refused(make_cache):
    first = make_cache(replica="sched-0")
    second = make_cache(replica="sched-1")
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    first.assume_pod(pod)
    with pytest.raises(PodAlreadyExists, match=r"pod node_info_cache_test/web-0 \(uid web-0\)"):
        second.assume_pod(pod.with_node("n2"))
    assert first.get_node_info("n1").requested.milli_cpu == 100
    with pytest.raises(NodeNotFound):
        first.get_node_info("n2")
    assert [e.replica for e in first.events()] == ["sched-0"]


def test_events_name_type_replica_and_payload(make_cache):
    cache = make_cache(replica="sched-7")
    node = make_node("n1", "2", "1Gi")
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.add_node(node)
    cache.assume_pod(pod)
    cache.finish_binding(pod, now=NOW)
    cache.add_pod(pod)
    cache.remove_pod(pod)
    cache.remove_node(node)
    events = list(cache.events())
    assert [e.type for e in events] == [
        "NodeAdded",
        "PodAssumed",
        "BindingFinished",
        "PodAdded",
        "PodRemoved",
        "NodeRemoved",
    ]
    assert {e.replica for e in events} == {"sched-7"}
    assert {e.version for e in events} == {SCHEMA_VERSION} == {2}
    assert events[0].data == node.to_dict()
    assert events[1].data == pod.to_dict() and events[1].uid == "web-0"
    assert events[2].fields["deadline"] == str(int((NOW + 10) * 1000))
    # Confirmed where it was assumed: `from`/`fromgen` would be its own node and gen, and are
    # left out (docs/storage.md); a move names them (test below).
    assert events[3].fields["confirmed"] == "1" and events[3].node == "n1"
    assert "from" not in events[3].fields and "fromgen" not in events[3].fields
    assert events[4].fields["state"] == "added"
    assert events[5].fields["ghost"] == "0"
    generations = [e.generation for e in events if e.generation is not None]
    assert generations == sorted(generations) and len(set(generations)) == len(generations)


def test_removed_node_with_pods_stays_as_ghost_and_add_node_revives_it(make_cache):
    cache = make_cache()
    cache.add_node(make_node("n1", "2", "1Gi"))
    pod = make_pod("web-0", "n1", "500m", "1Mi")
    cache.add_pod(pod)
    cache.remove_node("n1")
    ghost = cache.get_node_info("n1")
    assert ghost.node is None and ghost.pods == [pod]
    cache.update_pod(pod, make_pod("web-0", "n1", "700m", "1Mi"))
    assert cache.get_node_info("n1").requested.milli_cpu == 700
    revived_node = make_node("n1", "4", "2Gi")
    cache.add_node(revived_node)
    revived = cache.get_node_info("n1")
    assert revived.node == revived_node
    assert [p.uid for p in revived.pods] == ["web-0"]
    assert revived.requested.milli_cpu == 700
    assert revived.allocatable.milli_cpu == 4000


def test_update_node_of_unknown_node_creates_it(make_cache):
    cache = make_cache()
    node = make_node("n9", "3", "1Gi")
    cache.update_node(None, node)
    assert cache.get_node_info("n9").node == node
    assert cache.node_count() == 1


def test_remove_unknown_node_fails(make_cache):
    cache = make_cache()
    with pytest.raises(NodeNotFound, match="node nope is not in the cache"):
        cache.remove_node("nope")


def test_remove_node_of_placeholder_fails_and_keeps_pods(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "later", "100m", "1Mi")
    cache.add_pod(pod)
    with pytest.raises(NodeNotFound, match="node later"):
        cache.remove_node("later")
    assert cache.get_node_info("later").pods == [pod]


def test_generation_of_a_re_added_node_is_never_reused(make_cache):
    cache = make_cache()
    cache.add_node(make_node("n1"))
    first = cache.get_node_info("n1").generation
    cache.remove_node("n1")
    cache.add_node(make_node("n1"))
    assert cache.get_node_info("n1").generation > first
    assert cache.generation() == cache.get_node_info("n1").generation


def test_update_pod_on_another_node_is_refused_naming_both(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.add_pod(pod)
    with pytest.raises(InvalidTransition, match=r"added on node n1.*names node n2"):
        cache.update_pod(pod, pod.with_node("n2"))
    assert cache.get_node_info("n1").pods == [pod]


def test_remove_pod_on_another_node_is_refused(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.add_pod(pod)
    with pytest.raises(InvalidTransition, match=r"added on node n1.*names node n2"):
        cache.remove_pod(pod.with_node("n2"))
    assert cache.get_pod(pod) == pod


def test_remove_pod_without_node_name_removes_the_stored_pod(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.add_pod(pod)
    cache.remove_pod(pod.with_node(""))
    assert cache.pod_count() == 0


def test_remove_pod_removes_an_assumed_pod(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod, now=NOW)
    cache.remove_pod(pod)
    assert not cache.is_assumed_pod(pod)
    assert cache.dump().assumed_pods == set()
    assert cache.cleanup_assumed_pods(now=NOW + 100) == []
    assert [e.fields.get("state") for e in cache.events() if e.type == "PodRemoved"] == ["assumed"]


def test_forget_pod_on_another_node_fails(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.assume_pod(pod)
    with pytest.raises(InvalidTransition, match=r"assumed on node n1.*names node n2"):
        cache.forget_pod(pod.with_node("n2"))
    assert cache.is_assumed_pod(pod)


def test_forget_pod_of_an_added_pod_fails(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.add_pod(pod)
    with pytest.raises(PodNotAssumed, match="is added, not assumed"):
        cache.forget_pod(pod)


def test_finish_binding_of_unknown_pod_is_a_no_op(make_cache):
    cache = make_cache()
    cache.finish_binding(make_pod("ghost", "n1"), now=NOW)
    assert cache.stream_length() == 0


def test_deadline_is_set_by_finish_binding_not_by_assume(make_cache):
    cache = make_cache(ttl=10.0)
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.assume_pod(pod)
    assert cache.cleanup_assumed_pods(now=NOW + 10_000) == []
    cache.finish_binding(pod, now=NOW + 10_000)
    assert cache.cleanup_assumed_pods(now=NOW + 10_005) == []
    assert cache.cleanup_assumed_pods(now=NOW + 10_011) == ["web-0"]


def test_finish_binding_without_now_uses_the_server_clock(make_cache):
    cache = make_cache(ttl=0.001)
    pod = make_pod("web-0", "n1", "100m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod)
    deadline = float(cache.client.zscore(cache.keys.deadlines, "web-0"))
    server_now_ms = cache.client.time()[0] * 1000
    assert abs(deadline - server_now_ms) < 60_000
    assert cache.cleanup_assumed_pods(now=deadline / 1000 + 1) == ["web-0"]


def test_removal_subtracts_the_stored_pod_not_the_callers_copy(make_cache):
    cache = make_cache()
    stored = make_pod("web-0", "n1", "100m", "1Mi", ports=[port(80)])
    cache.add_pod(stored)
    stale_copy = make_pod("web-0", "n1", "900m", "5Mi", ports=[port(81)])
    cache.update_pod(stale_copy, make_pod("web-0", "n1", "200m", "1Mi"))
    info = cache.get_node_info("n1")
    assert (info.requested.milli_cpu, info.requested.memory) == (200, 1024 * 1024)
    assert info.used_ports == set()
    cache.remove_pod(stale_copy)
    with pytest.raises(NodeNotFound):
        cache.get_node_info("n1")


def test_host_ports_are_a_set_per_node(make_cache):
    cache = make_cache()
    a = make_pod("a", "n1", ports=[port(80)])
    b = make_pod("b", "n1", ports=[port(80)])
    cache.add_pod(a)
    cache.add_pod(b)
    assert cache.get_node_info("n1").used_ports == {("0.0.0.0", "TCP", 80)}
    cache.remove_pod(a)
    # Upstream's set loses the port here (quirk 13); ours still knows b holds it.
    assert cache.get_node_info("n1").used_ports == {("0.0.0.0", "TCP", 80)}


def test_pvc_and_affinity_aggregates(make_cache):
    cache = make_cache()
    affinity = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
            ]
        }
    }
    a = make_pod("a", "n1", pvcs=["data"], affinity=affinity)
    b = make_pod("b", "n1", pvcs=["data", "logs"])
    cache.add_pod(a)
    cache.add_pod(b)
    info = cache.get_node_info("n1")
    assert info.pvc_ref_counts == {"node_info_cache_test/data": 2, "node_info_cache_test/logs": 1}
    assert info.pods_with_affinity == [a]
    assert info.pods_with_required_anti_affinity == [a]
    cache.remove_pod(a)
    info = cache.get_node_info("n1")
    assert info.pvc_ref_counts == {"node_info_cache_test/data": 1, "node_info_cache_test/logs": 1}
    assert info.pods_with_affinity == []


def test_image_states_count_live_nodes(make_cache):
    cache = make_cache()
    cache.add_node(make_node("n1", images=[(["gcr.io/80:latest", "gcr.io/80:v1"], 80)]))
    cache.add_node(make_node("n2", images=[(["gcr.io/80:latest"], 99)]))
    states = cache.get_node_info("n1").image_states
    assert states["gcr.io/80:latest"].size == 80  # the first reported size wins
    assert states["gcr.io/80:latest"].num_nodes == 2
    assert states["gcr.io/80:v1"].num_nodes == 1
    cache.remove_node("n2")
    assert cache.get_node_info("n1").image_states["gcr.io/80:latest"].num_nodes == 1


def test_counts_and_label_selectors(make_cache):
    cache = make_cache()
    web = make_pod("web", "n1", labels={"app": "web", "tier": "front"})
    db = make_pod("db", "n2", labels={"app": "db", "tier": "db"})
    canary = make_pod("canary", "n2", labels={"app": "web", "canary": "yes"})
    for pod in (web, db):
        cache.add_pod(pod)
    cache.assume_pod(canary)
    assert cache.pod_count() == 3
    assert cache.node_count() == 2
    assert {p.uid for p in cache.list_pods()} == {"web", "db", "canary"}
    assert {p.uid for p in cache.list_pods("app=web,tier!=db")} == {"web", "canary"}
    assert {p.uid for p in cache.list_pods("app in (db, other)")} == {"db"}
    assert {p.uid for p in cache.list_pods("app=web,!canary")} == {"web"}
    assert {p.uid for p in cache.filtered_list(lambda p: p.node_name == "n2")} == {"db", "canary"}
    with pytest.raises(ValidationError):
        cache.list_pods("app in (")


def test_pod_without_node_name_cannot_be_assumed_or_added(make_cache):
    cache = make_cache()
    pod = make_pod("web-0", "")
    with pytest.raises(ValidationError, match=r"spec\.nodeName: is required to assume"):
        cache.assume_pod(pod)
    with pytest.raises(ValidationError, match=r"spec\.nodeName: is required to add"):
        cache.add_pod(pod)


def test_update_pod_with_another_uid_is_refused(make_cache):
    cache = make_cache()
    old = make_pod("web-0", "n1", uid="a")
    cache.add_pod(old)
    with pytest.raises(ValidationError, match=r"metadata\.uid"):
        cache.update_pod(old, make_pod("web-0", "n1", uid="b"))


def test_batch_applies_in_order_and_reports_each_rejection(cache):
    pods = [make_pod(f"p{i}", f"n{i % 3}", "100m", "1Mi") for i in range(10)]
    batch = cache.batch(chunk_size=4)
    batch.add_node(make_node("n0", "4", "1Gi"))
    for pod in pods:
        batch.add_pod(pod)
    batch.add_pod(pods[0])  # a duplicate: rejected on its own
    batch.remove_node("missing")
    batch.update_pod(pods[1], make_pod("p1", "n1", "300m", "1Mi"))
    results = batch.execute()
    assert len(results) == 14 and len(batch) == 0
    assert [r.ok for r in results] == [True] * 11 + [False, False, True]
    assert isinstance(results[11].error, PodAlreadyExists)
    assert isinstance(results[12].error, NodeNotFound)
    assert cache.pod_count() == 10
    assert cache.get_node_info("n1").requested.milli_cpu == 100 * 3 + 200
    assert cache.get_node_info("n0").node is not None


def test_cache_reloads_the_library_when_the_server_lost_it(cache):
    cache.client.function_flush()
    cache.add_pod(make_pod("web-0", "n1"))
    assert cache.pod_count() == 1
    cache.client.function_flush()
    results = cache.batch().add_pod(make_pod("web-1", "n1")).execute()
    assert results[0].ok and cache.pod_count() == 2


def test_reads_reload_the_library_when_the_server_lost_it(make_cache):
    cache: Cache = make_cache()
    cache.add_node(make_node("n1"))
    cache.client.function_flush()
    assert cache.get_node_info("n1").node is not None
    cache.client.function_flush()
    assert set(cache.dump().nodes) == {"n1"}


def test_batch_resent_after_a_lost_library_keeps_its_order(make_cache):
    """Found in review: groups after a failed one were applied before it."""
    from schedcache.store.library import ensure_loaded

    cache: Cache = make_cache()
    pod = make_pod("p", "n1", "100m", "1Mi")
    batch = cache.batch(chunk_size=1)
    cache.client.function_flush()
    batch.add_pod(pod)  # sent at once: fails, the library is gone
    ensure_loaded(cache.client)  # another client loads it again meanwhile
    batch.remove_pod(pod)
    results = batch.execute()
    assert [r.ok for r in results] == [True, True]
    assert cache.pod_state(pod) is None  # the informer's last word: deleted


def test_a_failed_batch_call_keeps_the_results_of_the_others(cache):
    from schedcache import BatchFailed
    from schedcache.store.commands import Command

    batch = cache.batch(chunk_size=2)
    batch.add_pod(make_pod("a", "n1"))
    batch.add_pod(make_pod("b", "n1"))
    batch.add(Command("no_such_command", "test", ()))  # the whole call is refused
    batch.add_pod(make_pod("c", "n1"))
    batch.add_pod(make_pod("d", "n1"))
    batch.add_pod(make_pod("e", "n1"))
    with pytest.raises(BatchFailed, match="1 batch call") as info:
        batch.execute()
    assert [r.command.subject for r in info.value.results] == [
        "pod node_info_cache_test/a (uid a)",
        "pod node_info_cache_test/b (uid b)",
        "pod node_info_cache_test/d (uid d)",
        "pod node_info_cache_test/e (uid e)",
    ]
    assert [len(group) for group, _ in info.value.failures] == [2]
    assert cache.pod_count() == 4 and cache.verify() == []


def test_node_info_fits_pod_reads_right_and_shortages_lists_what_is_short(make_cache):
    """``fits_pod`` is the bool a kube-scheduler user expects; ``shortages`` the list (like
    ``noderesources.Fits``); the old ``fits`` still returns the list, with a warning."""
    cache = make_cache()
    cache.add_node(make_node("n1", "1", "1Gi"))
    cache.add_pod(make_pod("a", "n1", "600m", "100Mi", ports=[port(80)]))
    info = cache.get_node_info("n1")
    small, big = make_pod("s", "n1", "100m", "1Mi"), make_pod("b", "n1", "500m", "2Gi")
    clash = make_pod("c", "n1", "10m", "1Mi", ports=[port(80)])
    assert info.fits_pod(small) is True
    assert info.fits_pod(big) is False and info.fits_pod(clash) is False
    assert info.shortages(small) == []
    assert info.shortages(big) == ["cpu", "memory"]
    assert info.shortages(clash) == ["host-ports"]
    with pytest.deprecated_call(match=r"use info\.fits_pod\(pod\) for a bool"):
        assert info.fits(big) == ["cpu", "memory"]  # the old meaning, unchanged


def test_a_pod_confirmed_where_it_was_assumed_keeps_the_node_totals_and_is_seen_anew(make_cache):
    """The usual confirmation (same node, same requests) changes the record, the indexes of an
    assumed pod and the node's generation, not the node's totals; a snapshot reads the confirmed
    pod, and the stream folds to the live state."""
    from schedcache import Snapshot

    cache = make_cache(ttl=10.0, replica="sched-0")
    cache.add_node(make_node("n1", "4", "8Gi"))
    assumed = make_pod("web-0", "n1", "250m", "64Mi", ports=[port(8080)])
    cache.assume_pod(assumed)
    cache.finish_binding(assumed, now=NOW)
    snap = Snapshot()
    cache.update_snapshot(snap)
    before = cache.get_node_info("n1")
    confirmed = make_pod("web-0", "n1", "250m", "64Mi", ports=[port(8080)], labels={"seen": "1"})
    cache.add_pod(confirmed)
    after = cache.get_node_info("n1")
    assert (after.requested, after.non_zero_requested, after.used_ports) == (
        before.requested,
        before.non_zero_requested,
        before.used_ports,
    )
    assert after.generation > before.generation
    assert not cache.is_assumed_pod(confirmed)
    # No index of an assumed pod keeps it (verify() does not look at these two).
    assert cache.client.zscore(cache.keys.deadlines, "web-0") is None
    assert not cache.client.sismember(cache.keys.replica_pods("sched-0"), "web-0")
    assert cache.cleanup_assumed_pods(now=NOW + 60) == []
    # Confirmed before its binding finished: the replica's claim ends too.
    early = make_pod("web-1", "n1", "100m", "1Mi")
    cache.assume_pod(early)
    cache.add_pod(early)
    assert not cache.client.sismember(cache.keys.replica_pods("sched-0"), "web-1")
    cache.remove_pod(early)
    report = cache.update_snapshot(snap)
    assert report.changed_nodes == 1
    assert [pod.labels for pod in snap.node_infos["n1"].pods] == [{"seen": "1"}]
    event = next(e for e in cache.events() if e.type == "PodAdded" and e.fields["uid"] == "web-0")
    # Its labels changed, and a placement's contribution carries the labels (the claims'
    # arrival checks, docs/constraints.md): confirmed on n1 as a removal then a placement.
    assert event.fields["from"] == "n1"
    assert int(event.fields["fromgen"]) == int(event.fields["gen"]) - 1
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes
