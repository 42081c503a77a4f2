"""Namespaces' labels in the cache (lua/sync_namespace.lua, issue 38): a non-empty
namespaceSelector of an inter-pod term selects namespaces by the labels ``sync`` fed, as
upstream's does, and a claim whose verdict read them is refused when any namespace's labels
changed since its snapshot (docs/constraints.md, "Namespace selectors")."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schedcache.errors import CacheError, FitConflict
from schedcache.feed.sync import Syncer, api_client
from schedcache.store.commands import Command
from schedcache.store.namespaces import read_namespaces, sync_namespace
from tests.apiserver import FakeApiServer
from tests.factories import caught_up as decided
from tests.factories import keyspace, make_node, make_pod
from tests.scheduling import FAST, eventually
from tests.scheduling import node as make_node_manifest

HOST = "kubernetes.io/hostname"


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def node(name: str):
    return make_node(name, "8", "8Gi", labels={HOST: name})


def anti_team1() -> dict[str, Any]:
    """Required anti-affinity by hostname to app=db pods in namespaces labelled team=team1."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaceSelector": {"matchLabels": {"team": "team1"}},
                    "topologyKey": HOST,
                }
            ]
        }
    }


def test_sync_namespace_keeps_labels_versioned_and_bumps_the_generation_on_change(cache):
    assert read_namespaces(cache.store) == (0, {})
    assert cache.run(sync_namespace(namespace("a", team="t1"), "5"))[0] == b"applied"
    assert read_namespaces(cache.store) == (1, {"a": {"team": "t1"}})
    # The same labels again: applied, but the generation stays (no claim refused for it).
    assert cache.run(sync_namespace(namespace("a", team="t1"), "6"))[1] == b"same"
    assert read_namespaces(cache.store)[0] == 1
    assert cache.run(sync_namespace(namespace("a", team="t2"), "4"))[0] == b"dropped"
    cache.run(sync_namespace(namespace("a", team="t2"), "7", present=False))
    assert read_namespaces(cache.store) == (2, {})


@pytest.mark.parametrize("labels", ["[1]", "team=t1", "x" * (2 << 20)])
def test_sync_namespace_refuses_malformed_labels_and_changes_nothing(cache, labels):
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CacheError, match="labels a"):
        cache.run(Command("sync_namespace", "namespace a", ("5", "a", labels)))
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_anti_affinity_selects_pods_of_namespaces_by_their_labels(cache):
    """Fails before issue 38's namespaces: the selector selected no namespace by labels, so the
    claim next to the team1 pod was accepted."""
    cache.run(sync_namespace(namespace("shop", team="team1"), "3"))
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    cache.add_pod(make_pod("db-0", "n1", labels={"app": "db"}, namespace="shop"))
    web = make_pod("web-0", "n1", affinity=anti_team1())
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(web, check_fit=True, snapshot=decided(cache))
    assert info.value.reasons == ("pod-anti-affinity",)
    assert keyspace(cache.client, cache.keys.pattern) == before
    cache.assume_pod(web.with_node("n2"), check_fit=True, snapshot=decided(cache))
    assert cache.verify() == []


def test_a_namespace_relabelled_after_the_snapshot_refuses_the_claim(make_cache):
    """The relabel race: replica a decided while namespace shop was team2 (its db pod not
    selected); shop is relabelled team1 before a's claim lands. Lua refuses it as
    namespace-changed, nothing written; decided again, the placement is refused by the rule."""
    a, feeder = make_cache(replica="a"), make_cache(replica="feed")
    feeder.run(sync_namespace(namespace("shop", team="team2"), "3"))
    feeder.add_node(node("n1"))
    feeder.add_node(node("n2"))
    feeder.add_pod(make_pod("db-0", "n1", labels={"app": "db"}, namespace="shop"))
    web = make_pod("web-0", "n1", affinity=anti_team1())
    stale = decided(a)
    feeder.run(sync_namespace(namespace("shop", team="team1"), "4"))
    before = keyspace(a.client, a.keys.pattern)
    with pytest.raises(FitConflict, match="namespace") as info:
        a.assume_pod(web, check_fit=True, snapshot=stale)
    assert info.value.reasons == ("namespace-changed",)
    assert keyspace(a.client, a.keys.pattern) == before
    a.update_snapshot(stale)  # the snapshot's update reads the new labels
    with pytest.raises(FitConflict) as info:
        a.assume_pod(web, check_fit=True, snapshot=stale)
    assert info.value.reasons == ("pod-anti-affinity",)
    a.assume_pod(web.with_node("n2"), check_fit=True, snapshot=stale)
    assert a.verify() == []


def test_a_relabel_that_the_claim_did_not_read_refuses_nothing(make_cache):
    """Claims whose rules select no namespace by labels carry no namespace generation."""
    a, feeder = make_cache(replica="a"), make_cache(replica="feed")
    feeder.add_node(node("n1"))
    plain_anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
            ]
        }
    }
    snap = decided(a)
    feeder.run(sync_namespace(namespace("shop", team="team1"), "4"))
    a.assume_pod(make_pod("web-0", "n1", affinity=plain_anti), check_fit=True, snapshot=snap)
    assert a.verify() == []


def test_sync_feeds_namespace_labels_as_they_change(make_cache: Any, tmp_path: Path) -> None:
    """Listed, then watched (a relabel, a new namespace, a deletion)."""
    with FakeApiServer() as server:
        server.create(namespace("shop", team="team1"))
        cache = make_cache(replica="feed")
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
        with Syncer(cache, api_client(kubeconfig), FAST, "feed") as syncer:
            assert syncer.wait_synced(30)
            eventually(lambda: read_namespaces(cache.store)[1] == {"shop": {"team": "team1"}}, 10)
            server.update(namespace("shop", team="team2"))
            server.create(namespace("bank"))
            want = {"shop": {"team": "team2"}, "bank": {}}
            eventually(lambda: read_namespaces(cache.store)[1] == want, 10)
            server.delete("Namespace", "shop")
            eventually(lambda: read_namespaces(cache.store)[1] == {"bank": {}}, 10)
        assert read_namespaces(cache.store)[0] == 4  # listed, relabelled, added, deleted


def test_a_refused_namespace_list_does_not_hold_sync_back(
    make_cache: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RBAC without namespaces (403): nodes are synced, the refusal logged once."""
    caplog.set_level(logging.WARNING, logger="schedcache.feed.sync")
    with FakeApiServer() as server:
        server.refused["Namespace"] = 403
        server.create(make_node_manifest("n1", "4"))
        cache = make_cache(replica="feed")
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
        settings = replace(FAST, max_backoff=0.2)
        with Syncer(cache, api_client(kubeconfig), settings, "feed") as syncer:
            assert syncer.wait_synced(30)
            eventually(lambda: cache.node_count() == 1, 10)
            time.sleep(0.6)
        refusals = [r for r in caplog.records if "namespaceSelector" in r.getMessage()]
        assert len(refusals) == 1
        assert read_namespaces(cache.store) == (0, {})
