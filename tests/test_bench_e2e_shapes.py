"""bench/e2e_shapes.py (issue 38): the shapes carry upstream's scheduler_perf pod specs, and
the final-state checks count what a broken rule leaves (they must, or a 0 proves nothing)."""

from __future__ import annotations

from typing import Any

from bench.e2e import node, pod
from bench.e2e_shapes import SHAPES, anti_violations, ratios, shaped, spread_violations
from schedcache.model.values import Pod


def bound(name: str, node_name: str, shape: str, measured: bool = True) -> dict[str, Any]:
    return shaped(pod(name, node_name), SHAPES[shape], measured)


def test_the_shapes_carry_upstreams_rules() -> None:
    spread = Pod.from_k8s(bound("m", "", "spread"))
    (constraint,) = spread.spread_constraints
    assert (constraint.max_skew, constraint.topology_key, constraint.when_unsatisfiable) == (
        5,
        "topology.kubernetes.io/zone",
        "DoNotSchedule",
    )
    assert constraint.selector is not None and constraint.selector.matches({"color": "blue"})
    anti = Pod.from_k8s(bound("m", "", "anti"))
    (term,) = anti.pod_anti_affinity
    assert (anti.namespace, term.topology_key) == ("sched-1", "kubernetes.io/hostname")
    assert set(term.namespaces) == {"sched-0", "sched-1"}
    assert node(4, SHAPES["spread"].zones)["metadata"]["labels"]["topology.kubernetes.io/zone"] == (
        "moon-2"
    )


def test_the_checks_count_broken_rules() -> None:
    # node-0, node-3: moon-1; node-1: moon-2; node-2: moon-3
    kept = [bound(f"s{i}", f"node-{i % 3}", "spread") for i in range(9)]
    assert spread_violations(kept) == 0
    skewed = kept + [bound(f"t{i}", "node-3", "spread") for i in range(7)]  # moon-1 10, others 3
    assert spread_violations(skewed) == 2
    assert anti_violations([bound("a", "node-1", "anti"), bound("b", "node-2", "anti")]) == 0
    assert anti_violations([bound("a", "node-1", "anti", False), bound("b", "node-1", "anti")]) == 1


def test_ratios_say_whether_the_goals_are_met() -> None:
    rows = [
        {"shape": "basic", "replicas": 1, "pods/s": 100.0},
        {"shape": "spread", "replicas": 1, "pods/s": 70.0},
        {"shape": "anti", "replicas": 1, "pods/s": 20.0},
    ]
    lines = ratios(rows)
    assert "0.70x basic (goal >= 0.68x: met)" in lines[0]
    assert "0.20x basic (goal >= 0.3x: NOT met)" in lines[1]
