"""What-if's "chose no node" summaries on the scratch snapshot's columns (issue 34) read exactly
as the per-node filter pass words them, while the scratch cluster fills up pod by pod (the
columns follow the nodes each placement changed). On every backend."""

from __future__ import annotations

import random

import pytest

from schedcache import Cache, Pod
from schedcache.sim import whatif as whatif_module
from schedcache.sim.policies import least_allocated
from schedcache.sim.scratch import ScratchSnapshot
from schedcache.sim.whatif import none_chosen, what_if
from schedcache.views.columns import columnar
from schedcache.views.snapshot import Snapshot
from tests.factories import pod_manifest
from tests.test_columns import random_node, random_pod


def test_summaries_on_the_columns_equal_the_per_node_pass(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(whatif_module, "SUMMARISED", 1000)  # every declined pod summarised
    rng = random.Random(34)
    nodes = [random_node(rng, i) for i in range(30)]
    for node in nodes:
        cache.add_node(node)
    for i in range(20):
        cache.add_pod(random_pod(rng, f"p{i}", rng.choice(nodes).name))
    at = cache.last_events(1)[0].id
    pods = [random_pod(rng, f"in{i}", "") for i in range(120)]
    for i in range(0, 120, 10):  # host ports: the per-node pass
        ported = pod_manifest(f"port{i}", "", "100m", "128Mi", uid=f"uid-port{i}")
        ported["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
        pods[i] = Pod.from_k8s(ported)
    expected: dict[str, str] = {}

    def sometimes(snapshot: Snapshot, pod: Pod) -> str | None:
        """Least-allocated for two pods in three; declines the third, fitting or not (the
        reason it will be given, judged node by node on the scratch as it stands)."""
        if rng.random() < 0.66:
            return least_allocated(snapshot, pod)
        assert isinstance(snapshot, ScratchSnapshot)
        expected[pod.uid] = none_chosen("sometimes", pod, snapshot, True)
        return None

    result = what_if(cache, at, {"sometimes": sometimes}, pods)
    outcome = result.outcome("sometimes")
    declined = {uid: reason for uid, reason in outcome.reasons.items() if uid in expected}
    assert declined == expected
    # Plain and ported pods were summarised, some with nodes that fit and some without, on a
    # cluster that had filled up in between.
    plain = [p for p in pods if p.uid in expected and columnar(p)]
    assert len(plain) > 20 and len(expected) > len(plain)
    assert any(" 0/" in reason for reason in expected.values())
    assert any(" 0/" not in reason for reason in expected.values())
    assert outcome.placed > 40
