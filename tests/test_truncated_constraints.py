"""A pod stored truncated (labels past the cache's limit, tests/test_load_truncation.py) keeps
its own scheduling terms: its required anti-affinity still counts (``antipods``, the node's
``anti``/``xt`` fields) and still repels claims; only selectors cannot match it by label.
A pod whose terms alone are too large is refused whole (docs/constraints.md, Limits)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import FitConflict
from schedcache.feed.loader import load
from tests.factories import keyspace, make_node, make_pod, pod_manifest

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
LABELS = 70_000  # under etcd's 1.5 MiB, over what the cache reads back


def anti(key: str, **labels: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def big_pod(name: str, node: str, affinity: dict[str, Any], **labels: str) -> dict[str, Any]:
    """A valid pod with LABELS labels besides ``labels``, ``affinity`` and a zone spread."""
    manifest = pod_manifest(name, node, "100m", "1Mi", uid=f"uid-{name}", affinity=affinity)
    many = {f"example.com/label-{i}": "v" * 6 for i in range(LABELS)}
    manifest["metadata"]["labels"] = {**many, **labels}
    manifest["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels},
        }
    ]
    return manifest


def nodes(cache: Cache) -> None:
    """n1 and n2 in zone z1, n3 in z2."""
    for name, zone in (("n1", "z1"), ("n2", "z1"), ("n3", "z2")):
        cache.add_node(make_node(name, "8", "8Gi", labels={HOST: name, ZONE: zone}))


def events(*pairs: tuple[str, dict[str, Any]]) -> str:
    return "\n".join(json.dumps({"type": kind, "object": obj}) for kind, obj in pairs)


def anti_counts(cache: Cache) -> tuple[int, int]:
    """(``antipods``, node n1's ``anti`` field)."""
    total = cache.client.get(cache.keys.anti_affine_pods)
    on_n1 = cache.client.hget(cache.keys.node("n1"), "anti")
    return int(total or 0), int(on_n1 or 0)


def test_a_truncated_pods_own_anti_affinity_is_counted_and_still_repels_claims(cache):
    nodes(cache)
    guard = big_pod("guard", "n1", anti(ZONE, app="db"), app="guard")
    report = load(cache, events(("ADDED", guard)))
    assert report.ok and report.truncated == 1, report
    stored = cache.get_pod("uid-guard")
    assert stored.truncated and stored.labels == {}
    assert stored.pod_anti_affinity and stored.spread_constraints  # the terms are kept
    assert anti_counts(cache) == (1, 1)
    assert cache.verify() == []
    snap = Snapshot()
    cache.update_snapshot(snap)
    for claim in ({}, {"snapshot": snap}):  # bare, and judged on a snapshot
        with pytest.raises(FitConflict) as info:
            cache.assume_pod(make_pod("db", "n2", labels={"app": "db"}), check_fit=True, **claim)
        assert info.value.reasons == ("existing-anti-affinity",)
    cache.assume_pod(make_pod("db", "n3", labels={"app": "db"}), check_fit=True)
    # Deleted, it takes its count with it: the claim it refused now goes ahead.
    report = load(cache, events(("DELETED", guard)))
    assert report.ok and report.applied == {"remove_pod": 1}, report
    assert anti_counts(cache) == (0, 0)
    cache.assume_pod(make_pod("db-2", "n2", labels={"app": "db"}), check_fit=True)
    assert cache.verify() == []


def test_a_truncated_pod_is_matched_by_no_selector(cache):
    """The documented limit: its labels are gone, so another pod's anti-affinity toward them
    does not see it (the cache's verdict; the cluster's pod still carries app=web)."""
    nodes(cache)
    report = load(cache, events(("ADDED", big_pod("web-0", "n1", {}, app="web"))))
    assert report.ok and report.truncated == 1, report
    assert anti_counts(cache) == (0, 0)
    assert cache.list_pods({"app": "web"}) == []
    web = make_pod("web-1", "n1", labels={"app": "web"}, affinity=anti(HOST, app="web"))
    cache.assume_pod(web, check_fit=True)
    assert cache.pod_state(web) == "assumed"
    assert cache.verify() == []


def test_a_pod_whose_terms_alone_are_too_large_is_invalid_and_nothing_changes(cache):
    """Truncation drops labels, never required terms (dropping anti-affinity would let claims
    break it): a pod still too large without its labels is refused, named, and nothing is
    written."""
    nodes(cache)
    values = [f"v{i}" for i in range(70_000)]
    affinity = anti(HOST, app="db")
    selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": values}]}
    affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "labelSelector"
    ] = selector
    before = keyspace(cache.client, cache.keys.pattern)
    report = load(cache, events(("ADDED", big_pod("huge", "n1", affinity, app="huge"))))
    assert report.truncated == 0 and report.applied == {}
    (line,) = report.invalid
    assert "pod_anti_affinity" in line and "huge" in line, line
    assert keyspace(cache.client, cache.keys.pattern) == before
