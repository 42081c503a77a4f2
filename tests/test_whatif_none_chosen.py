"""A what-if policy that chooses no node: the reason names the policy, says it chose none, and
gives kube-scheduler's filter summary of the nodes (issue 32 follow-up: it read only "no node
chosen", the same for every policy and every cause)."""

from __future__ import annotations

import pytest

from schedcache import Cache, Pod
from schedcache.sim import whatif as whatif_module
from schedcache.sim.whatif import what_if
from schedcache.views.snapshot import Snapshot
from tests.factories import make_node, make_pod


def declines(snapshot: Snapshot, pod: Pod) -> str | None:
    return None  # a policy that places nothing, fitting or not


def test_the_reason_names_the_policy_and_what_the_filters_say_of_each_node(cache: Cache) -> None:
    cache.add_node(make_node("small", "1", "2Gi"))
    cache.add_node(make_node("big", "4", "2Gi"))
    at = cache.last_events(1)[0].id
    pods = [make_pod("huge", "", "8", "1Gi", uid="huge"), make_pod("tiny", "", "100m", "1Mi")]
    result = what_if(cache, at, {"declines": declines}, pods)
    reasons = result.outcome("declines").reasons
    assert reasons["huge"] == (
        "policy 'declines' chose no node; 0/2 nodes are available: 2 Insufficient cpu."
    )
    # Nodes that fit: the policy declined them, and the reason shows it.
    assert reasons["tiny"] == "policy 'declines' chose no node; 2/2 nodes are available"


def test_only_the_first_pods_get_the_summary(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each summary is a filter pass over every node: bounded per policy."""
    monkeypatch.setattr(whatif_module, "SUMMARISED", 2)
    cache.add_node(make_node("only", "1", "2Gi"))
    at = cache.last_events(1)[0].id
    pods = [make_pod(f"p{i}", "", "2", "1Gi", uid=f"p{i}") for i in range(3)]
    reasons = what_if(cache, at, {"declines": declines}, pods).outcome("declines").reasons
    assert reasons["p1"].startswith("policy 'declines' chose no node; 0/1 nodes are available")
    assert reasons["p2"] == "policy 'declines' chose no node"
