"""PodDisruptionBudgets fed by ``sync`` and read by preemption (issue 41, item 1): the feed
lists and watches policy/v1 PDBs into the cache (a cluster refusing the list does not hold
sync back), and the reference scheduler's and the extender's preemption count their
violations as upstream. Every backend (fakeredis, Redis, Redis Cluster)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import ValidationError
from schedcache.extender.service import Extender
from schedcache.feed.sync import Syncer, api_client
from schedcache.model.values import Pod
from schedcache.store.budgets import read_budgets, stored_budget, sync_budget
from tests.apiserver import FakeApiServer
from tests.extender_server import RunningExtender
from tests.factories import make_node
from tests.scheduling import FAST, eventually, node
from tests.test_preemption import bound_pod, pending_pod, replicas


def pdb(name: str, app: str, allowed: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }


def labelled(manifest: dict[str, Any], app: str) -> dict[str, Any]:
    manifest["metadata"]["labels"] = {"app": app}
    return manifest


def allowed(cache: Cache) -> dict[str, int]:
    return {f"{b.namespace}/{b.name}": b.allowed for b in read_budgets(cache.store)}


def test_sync_feeds_budgets_as_they_change(make_cache: Any, tmp_path: Path) -> None:
    """Listed, then watched (status change, a new one, a deletion). Before: no budget ever
    reached the cache."""
    with FakeApiServer() as server:
        server.create(pdb("guard", "db", 0))
        cache = make_cache(replica="feed")
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
        with Syncer(cache, api_client(kubeconfig), FAST, "feed") as syncer:
            assert syncer.wait_synced(30)
            eventually(lambda: allowed(cache) == {"default/guard": 0}, 10)
            server.update({**pdb("guard", "db", 2)})
            server.create(pdb("other", "web", 1, namespace="team"))
            eventually(lambda: allowed(cache) == {"default/guard": 2, "team/other": 1}, 10)
            server.delete("PodDisruptionBudget", "guard", "default")
            eventually(lambda: allowed(cache) == {"team/other": 1}, 10)
        (budget,) = read_budgets(cache.store)
        assert (budget.namespace, budget.name, budget.allowed) == ("team", "other", 1)


@pytest.mark.parametrize("code", [403, 404])
def test_a_refused_budget_list_does_not_hold_sync_back(
    make_cache: Any, tmp_path: Path, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """RBAC without poddisruptionbudgets (403) or a cluster not serving policy/v1 (404): nodes
    and pods are synced, the refusal is logged once, and no budget is read."""
    caplog.set_level(logging.WARNING, logger="schedcache.feed.sync")
    with FakeApiServer() as server:
        server.refused["PodDisruptionBudget"] = code
        server.create(node("n1", "4"))
        cache = make_cache(replica="feed")
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
        settings = replace(FAST, max_backoff=0.2)
        with Syncer(cache, api_client(kubeconfig), settings, "feed") as syncer:
            assert syncer.wait_synced(30)
            eventually(lambda: cache.node_count() == 1, 10)
            time.sleep(0.6)  # several more tries of the budgets' list
            lists = [r for r in server.requests if "poddisruptionbudgets" in r.path]
            assert len(lists) >= 2
        refusals = [r for r in caplog.records if "poddisruptionbudgets" in r.getMessage()]
        assert len(refusals) == 1
        assert f"answered {code}" in refusals[0].getMessage()
        assert read_budgets(cache.store) == []


def test_sync_budget_refuses_a_malformed_budget_naming_it(cache: Cache) -> None:
    bad = pdb("guard", "db", 0)
    bad["status"]["disruptionsAllowed"] = "two"
    with pytest.raises(ValidationError, match="poddisruptionbudget default/guard"):
        sync_budget(bad, "5")
    bad = pdb("guard", "db", 0)
    bad["spec"]["selector"] = ["app"]
    with pytest.raises(ValidationError, match="default/guard"):
        stored_budget(bad)
    assert allowed(cache) == {}


def test_an_older_budget_version_is_dropped(cache: Cache) -> None:
    """Many feeders: a late copy of an older version never overwrites a newer one."""
    cache.run(sync_budget(pdb("guard", "db", 3), "7"))
    reply = cache.run(sync_budget(pdb("guard", "db", 0), "6"))
    assert [x if isinstance(x, str) else x.decode() for x in reply][:2] == ["dropped", "stale"]
    assert allowed(cache) == {"default/guard": 3}
    cache.run(sync_budget(pdb("guard", "db", 0), "8", present=False))
    assert allowed(cache) == {}
    cache.run(sync_budget(pdb("guard", "db", 3), "7"))  # a late copy: the tombstone holds
    assert allowed(cache) == {}


def test_two_replicas_preempt_on_the_node_breaking_no_budget(
    make_cache: Any, tmp_path: Path
) -> None:
    """n1 holds one priority-0 pod a PDB protects (disruptionsAllowed 0); n2 one of priority
    100. Without budgets upstream picks n1 (the lowest highest-victim priority); with the PDB,
    fewest violations comes first: n2's pod is evicted, the protected one never. Before this
    change (sync fed no PDB) the protected pod was evicted."""
    with FakeApiServer() as server:
        server.create(node("n1", "2"))
        server.create(node("n2", "2"))
        server.create(labelled(bound_pod("guarded", "2", 0, "2026-01-01T00:00:00Z"), "db"))
        server.create(bound_pod("mid", "2", 100, "2026-01-01T00:00:00Z", "n2"))
        server.create(pdb("guard", "db", 0))
        with replicas(make_cache, server, tmp_path):
            cache = make_cache()
            eventually(lambda: allowed(cache) == {"default/guard": 0}, 10)
            server.create(pending_pod("pre", "2", 1000))
            eventually(
                lambda: (server.get("Pod", "pre") or {}).get("spec", {}).get("nodeName") == "n2", 20
            )
        deletes = [r.path.rsplit("/", 1)[1] for r in server.requests if r.method == "DELETE"]
        assert deletes == ["mid"]
        assert server.get("Pod", "guarded") is not None


def test_the_extenders_preempt_verb_counts_budget_violations(cache: Cache) -> None:
    """NumPDBViolations from the budgets in the cache (before: always 0)."""
    cache.add_node(make_node("n1", cpu="2", mem="8Gi"))
    cache.add_pod(
        Pod.from_k8s(labelled(bound_pod("guarded", "2", 0, "2026-01-01T00:00:00Z"), "db"))
    )
    cache.run(sync_budget(pdb("guard", "db", 0), "3"))
    meta = {"n1": {"Pods": []}}
    with RunningExtender(Extender(cache), "/scheduler") as server:
        status, answer = server.post(
            "preempt", {"Pod": pending_pod("pre", "2", 1000), "NodeNameToMetaVictims": meta}
        )
    assert status == 200
    assert answer["NodeNameToMetaVictims"]["n1"] == {
        "Pods": [{"UID": "uid-guarded"}],
        "NumPDBViolations": 1,
    }
