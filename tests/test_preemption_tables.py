"""kube-scheduler's DefaultPreemption test tables, ported (issue 41, item 5): kubernetes/
kubernetes, pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go,
TestPostFilter, TestDryRunPreemption and TestSelectBestCandidate, case names kept.

The default profile's filters judge here (registry.filter_pod: NodeResourcesFit, NodePorts,
InterPodAffinity, PodTopologySpread, ...), where upstream registers only the plugins a case
names; every case below is one those filters decide the same way. Pure: no cache involved.

Cases that cannot apply, and why:
* TestPostFilter "preemption result filtered out by extenders": extenders filtering the
  candidates are kube-scheduler's (the extender's preempt verb is answered by schedcache).
* TestPostFilter "only one node but failed with TestPlugin", "one failed with TestPlugin and
  the other pass": a test-only plugin failing AddPod/RemovePod; no such plugin here.
* TestPostFilter's "pod with SchedulingGroup ..." cases: Workload-aware and topology-aware
  pod-group preemption (1.35 alpha features), not built.
* TestDryRunPreemption "a pod that does not fit on any node", "a pod that fits with no
  preemption", "a pod that fits on one node with no preemption", "get Unschedulable in the
  preemption phase when the filter plugins filtering the nodes": they count a fake filter
  plugin's calls (FalseFilter, TrueFilter, MatchFilter, FakeFilter); no fake plugins here.
* TestDryRunPreemption "all nodes are possible candidates, but DefaultPreemptionArgs limits to
  2", "some nodes are not possible candidates, DefaultPreemptionArgs limits to 2", "preemption
  offset across multiple scheduling cycles and wrap around", "preemption looks past
  numCandidates until a non-PDB violating node is found": they set minCandidateNodes* (fixed
  here at upstream's defaults, 10 % and 100) and seed the random offset; schedcache starts at
  the snapshot's node order (replicas share the node tree's cursor instead).
* TestCustomSelection: IsEligiblePod hooks of out-of-tree plugins; none here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from schedcache.model.plugins.preemption import Budget, preempt, select_victims
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Pod
from tests.plugin_tables import capacity, make_node, snapshot

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}


def epoch(n: int) -> str:
    """upstream's epochTime<n>: n nanoseconds after the epoch (ms here: the order is kept)."""
    return f"1970-01-01T00:00:{n:02d}Z"


def pod(
    name: str,
    node: str = "",
    priority: int = 0,
    req: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    start: int | None = None,
    namespace: str = "default",
    **spec: Any,
) -> Pod:
    container: dict[str, Any] = {"name": "c"}
    if req:
        container["resources"] = {"requests": req}
    body: dict[str, Any] = {"containers": [container], "priority": priority, **spec}
    if node:
        body["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "uid": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    manifest: dict[str, Any] = {"metadata": meta, "spec": body}
    if start is not None:
        manifest["status"] = {"startTime": epoch(start)}
    return Pod.from_k8s(manifest)


def nodes(*names: str, cpu: str = "500m", memory: str = "500", pods: int = 32) -> list[Any]:
    """st.MakeNode().Capacity(...); names "host/zone" label hostname and zone."""
    out = []
    for name in names:
        parts = name.split("/")
        labels = dict(zip(("hostname", "zone", "region"), parts, strict=False))
        allocatable = dataclasses.replace(capacity(cpu, memory), allowed_pod_number=pods)
        out.append(make_node(parts[0], labels, allocatable))
    return out


def budget(labels: dict[str, str], allowed: int, disrupted: tuple[str, ...] = ()) -> Budget:
    return Budget.from_k8s(
        {
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": labels}},
            "status": {
                "disruptionsAllowed": allowed,
                "disruptedPods": dict.fromkeys(disrupted, "2026-01-01T00:00:00Z"),
            },
        }
    )


# -- TestPostFilter -----------------------------------------------------------------------------

ONE_POD = {"cpu": "0", "memory": "0", "pods": 1}
NODE_RES = {"cpu": "200m", "memory": "400", "pods": 32}


def post_filter_nodes(*spec: tuple[str, dict[str, Any]]) -> list[Any]:
    out = []
    for name, res in spec:
        out += nodes(name, cpu=res["cpu"], memory=res["memory"], pods=res["pods"])
    return out


POST_FILTER = [
    (
        "pod with higher priority can be made schedulable",
        pod("p", priority=HIGH),
        [pod("p1", "node1")],
        [("node1", ONE_POD)],
        {"node1"},
        [],
        "node1",
        "",
    ),
    (
        "pod with tied priority is still unschedulable",
        pod("p"),
        [pod("p1", "node1")],
        [("node1", ONE_POD)],
        {"node1"},
        [],
        "",
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
    ),
    (
        "preemption should respect filteredNodesStatuses",
        pod("p", priority=HIGH),
        [pod("p1", "node1")],
        [("node1", ONE_POD)],
        set(),  # node1 UnschedulableAndUnresolvable
        [],
        "",
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
    ),
    (
        "preemption should respect absent NodeToStatusReader entry meaning "
        "UnschedulableAndUnresolvable",
        pod("p", priority=HIGH),
        [pod("p1", "node1")],
        [("node1", ONE_POD)],
        set(),
        [],
        "",
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
    ),
    (
        "pod can be made schedulable on one node",
        pod("p", priority=MID),
        [pod("p1", "node1", HIGH), pod("p2", "node2", LOW)],
        [("node1", ONE_POD), ("node2", ONE_POD)],
        {"node1", "node2"},
        [],
        "node2",
        "",
    ),
    (
        "pod can be made schedulable on minHighestPriority node",
        pod("p", priority=VERY_HIGH),
        [
            pod("p1", "node1", HIGH, labels={"pdb": "non-violating"}),
            pod("p2", "node1", LOW, labels={"pdb": "violating"}),
            pod("p3", "node2", MID, labels={"pdb": "violating"}),
        ],
        [("node1", ONE_POD), ("node2", ONE_POD)],
        {"node1", "node2"},
        [budget({"pdb": "violating"}, 0), budget({"pdb": "non-violating"}, 2**31 - 1)],
        "node2",
        "",
    ),
    (
        "no candidate nodes found, no enough resource after removing low priority pods",
        pod("p", priority=HIGH, req=LARGE),
        [pod("p1", "node1"), pod("p2", "node2")],
        [("node1", NODE_RES), ("node2", NODE_RES)],
        {"node1", "node2"},
        [],
        "",
        "preemption: 0/2 nodes are available: 2 Insufficient cpu.",
    ),
    (
        "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU "
        "resource",
        pod("p", priority=HIGH, req=LARGE),
        [pod("p1", "node1", HIGH), pod("p2", "node2"), pod("p3", "node3", HIGH)],
        [("node1", ONE_POD), ("node2", NODE_RES), ("node3", ONE_POD)],
        {"node1", "node2", "node3"},
        [],
        "",
        "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims "
        "found for incoming pod.",
    ),
    (
        "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 "
        "nodes don't have enough CPU resource",
        pod("p", priority=HIGH, req=LARGE),
        [pod("p1", "node1"), pod("p2", "node2")],
        [("node1", NODE_RES), ("node2", NODE_RES), ("node3", NODE_RES), ("node4", NODE_RES)],
        {"node1", "node2"},
        [],
        "",
        "preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful "
        "for scheduling.",
    ),
]


@pytest.mark.parametrize(
    ("pod_", "pods", "spec", "resolvable", "budgets", "node", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in POST_FILTER],
)
def test_post_filter(
    pod_: Pod,
    pods: list[Pod],
    spec: list[tuple[str, dict[str, Any]]],
    resolvable: set[str],
    budgets: list[Budget],
    node: str,
    message: str,
) -> None:
    infos = snapshot(pods, post_filter_nodes(*spec))
    verdicts = {
        i.name: filter_pod(pod_, i) for i in infos if i.name in resolvable
    }  # upstream's filteredNodesStatuses: the rest are unresolvable
    decision = preempt(pod_, infos, budgets, verdicts)
    assert decision.node == node
    assert decision.message == message


def test_post_filter_never_preempts_with_policy_never() -> None:
    """TestPodEligibleToPreemptOthers' "Pod with PreemptNever preemption policy"."""
    preemptor = pod("p", priority=HIGH, preemptionPolicy="Never")
    infos = snapshot([pod("p1", "node1")], post_filter_nodes(("node1", ONE_POD)))
    decision = preempt(preemptor, infos)
    assert decision.node == "" and decision.message == "not eligible due to preemptionPolicy=Never."


# -- TestDryRunPreemption ---------------------------------------------------------------------

Victims = dict[str, tuple[list[str], int]]  # node -> (victim names sorted, PDB violations)

DRY_RUN: list[tuple[str, Pod, list[Pod], list[str], list[Budget], Victims]] = [
    (
        "a pod that fits on both nodes when lower priority pods are preempted",
        pod("p", priority=HIGH, req=LARGE),
        [pod("p1", "node1", MID, LARGE), pod("p2", "node2", MID, LARGE)],
        ["node1", "node2"],
        [],
        {"node1": (["p1"], 0), "node2": (["p2"], 0)},
    ),
    (
        "a pod that would fit on the nodes, but other pods running are higher priority, no "
        "preemption would happen",
        pod("p", priority=LOW, req=LARGE),
        [pod("p1", "node1", MID, LARGE), pod("p2", "node2", MID, LARGE)],
        ["node1", "node2"],
        [],
        {},
    ),
    (
        "medium priority pod is preempted, but lower priority one stays as it is small",
        pod("p", priority=HIGH, req=LARGE),
        [
            pod("p1.1", "node1", LOW, SMALL),
            pod("p1.2", "node1", MID, LARGE),
            pod("p2", "node2", MID, LARGE),
        ],
        ["node1", "node2"],
        [],
        {"node1": (["p1.2"], 0), "node2": (["p2"], 0)},
    ),
    (
        "mixed priority pods are preempted",
        pod("p", priority=HIGH, req=LARGE),
        [
            pod("p1.1", "node1", MID, SMALL),
            pod("p1.2", "node1", LOW, SMALL),
            pod("p1.3", "node1", MID, MEDIUM),
            pod("p1.4", "node1", HIGH, SMALL),
            pod("p2", "node2", HIGH, LARGE),
        ],
        ["node1", "node2"],
        [],
        {"node1": (["p1.2", "p1.3"], 0)},
    ),
    (
        "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
        pod("p", priority=HIGH, req=LARGE),
        [
            pod("p1.1", "node1", LOW, SMALL, start=5),
            pod("p1.2", "node1", LOW, SMALL, start=4),
            pod("p1.3", "node1", MID, MEDIUM, start=3),
            pod("p1.4", "node1", HIGH, SMALL, start=2),
            pod("p2", "node2", HIGH, LARGE, start=1),
        ],
        ["node1", "node2"],
        [],
        {"node1": (["p1.1", "p1.3"], 0)},
    ),
    (
        "pod with anti-affinity is preempted",
        pod("p", priority=HIGH, req=SMALL, labels={"foo": ""}),
        [
            pod(
                "p1.1",
                "node1",
                LOW,
                SMALL,
                labels={"foo": ""},
                affinity={
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {
                                    "matchExpressions": [{"key": "foo", "operator": "Exists"}]
                                },
                                "topologyKey": "hostname",
                            }
                        ]
                    }
                },
            ),
            pod("p1.2", "node1", MID, SMALL),
            pod("p1.3", "node1", HIGH, SMALL),
            pod("p2", "node2", HIGH, SMALL),
        ],
        ["node1", "node2"],
        [],
        {"node1": (["p1.1"], 0)},
    ),
    (
        "preemption to resolve pod topology spread filter failure",
        pod(
            "p",
            priority=HIGH,
            labels={"foo": ""},
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": key,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]},
                }
                for key in ("zone", "hostname")
            ],
        ),
        [
            pod("pod-a1", "node-a", MID, labels={"foo": ""}),
            pod("pod-a2", "node-a", LOW, labels={"foo": ""}),
            pod("pod-b1", "node-b", LOW, labels={"foo": ""}),
            pod("pod-x1", "node-x", HIGH, labels={"foo": ""}),
            pod("pod-x2", "node-x", HIGH, labels={"foo": ""}),
        ],
        ["node-a/zone1", "node-b/zone1", "node-x/zone2"],
        [],
        {"node-a": (["pod-a2"], 0), "node-b": (["pod-b1"], 0)},
    ),
    (
        "preemption with violation of same pdb",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            pod("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ],
        ["node1"],
        [budget({"app": "foo"}, 1)],
        {"node1": (["p1.1", "p1.2"], 1)},
    ),
    (
        "preemption with violation of the pdb with pod whose eviction was processed, the victim "
        "doesn't belong to DisruptedPods",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            pod("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ],
        ["node1"],
        [budget({"app": "foo"}, 1, ("p2",))],
        {"node1": (["p1.1", "p1.2"], 1)},
    ),
    (
        "preemption with violation of the pdb with pod whose eviction was processed, the victim "
        "belongs to DisruptedPods",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            pod("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ],
        ["node1"],
        [budget({"app": "foo"}, 1, ("p1.2",))],
        {"node1": (["p1.1", "p1.2"], 0)},
    ),
    (
        "preemption with violation of the pdb with pod whose eviction was processed, the victim "
        "which belongs to DisruptedPods is treated as 'nonViolating'",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            pod("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
            pod("p1.3", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ],
        ["node1"],
        [budget({"app": "foo"}, 1, ("p1.3",))],
        {"node1": (["p1.1", "p1.2", "p1.3"], 1)},
    ),
]


@pytest.mark.parametrize(
    ("pod_", "pods", "names", "budgets", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in DRY_RUN],
)
def test_dry_run_preemption(
    pod_: Pod, pods: list[Pod], names: list[str], budgets: list[Budget], expected: Victims
) -> None:
    infos = snapshot(pods, nodes(*names))
    found: Victims = {}
    for info in infos:
        candidate = select_victims(pod_, info, infos, budgets)
        if candidate is not None:
            found[info.name] = (sorted(v.name for v in candidate.victims), candidate.violations)
    assert found == expected


# -- TestSelectBestCandidate ------------------------------------------------------------------

SELECT_BEST: list[tuple[str, Pod, list[Pod], list[str], set[str]]] = [
    (
        "a pod that fits on both nodes when lower priority pods are preempted",
        pod("p", priority=HIGH, req=LARGE),
        [pod("p1", "node1", MID, LARGE, start=0), pod("p2", "node2", MID, LARGE, start=0)],
        ["node1", "node2"],
        {"node1", "node2"},
    ),
    (
        "node with min highest priority pod is picked",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, start=0),
            pod("p1.2", "node1", MID, LARGE, start=0),
            pod("p2.1", "node2", MID, MEDIUM, start=0),
            pod("p2.2", "node2", LOW, MEDIUM, start=0),
            pod("p3.1", "node3", LOW, MEDIUM, start=0),
            pod("p3.2", "node3", LOW, MEDIUM, start=0),
        ],
        ["node1", "node2", "node3"],
        {"node3"},
    ),
    (
        "when highest priorities are the same, minimum sum of priorities is picked",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, start=0),
            pod("p1.2", "node1", MID, LARGE, start=0),
            pod("p2.1", "node2", MID, LARGE, start=0),
            pod("p2.2", "node2", LOW, MEDIUM, start=0),
            pod("p3.1", "node3", MID, MEDIUM, start=0),
            pod("p3.2", "node3", MID, MEDIUM, start=0),
        ],
        ["node1", "node2", "node3"],
        {"node2"},
    ),
    (
        "when highest priority and sum are the same, minimum number of pods is picked",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, SMALL, start=0),
            pod("p1.2", "node1", NEG, SMALL, start=0),
            pod("p1.3", "node1", MID, SMALL, start=0),
            pod("p1.4", "node1", NEG, SMALL, start=0),
            pod("p2.1", "node2", MID, LARGE, start=0),
            pod("p2.2", "node2", NEG, MEDIUM, start=0),
            pod("p3.1", "node3", MID, MEDIUM, start=0),
            pod("p3.2", "node3", NEG, SMALL, start=0),
            pod("p3.3", "node3", LOW, SMALL, start=0),
        ],
        ["node1", "node2", "node3"],
        {"node2"},
    ),
    (
        "sum of adjusted priorities is considered",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, SMALL, start=0),
            pod("p1.2", "node1", NEG, SMALL, start=0),
            pod("p1.3", "node1", NEG, SMALL, start=0),
            pod("p2.1", "node2", MID, LARGE, start=0),
            pod("p2.2", "node2", NEG, MEDIUM, start=0),
            pod("p3.1", "node3", MID, MEDIUM, start=0),
            pod("p3.2", "node3", NEG, SMALL, start=0),
            pod("p3.3", "node3", LOW, SMALL, start=0),
        ],
        ["node1", "node2", "node3"],
        {"node2"},
    ),
    (
        "non-overlapping lowest high priority, sum priorities, and number of pods",
        pod("p", priority=VERY_HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, SMALL, start=0),
            pod("p1.2", "node1", LOW, SMALL, start=0),
            pod("p1.3", "node1", LOW, SMALL, start=0),
            pod("p2.1", "node2", HIGH, LARGE, start=0),
            pod("p3.1", "node3", MID, MEDIUM, start=0),
            pod("p3.2", "node3", LOW, SMALL, start=0),
            pod("p3.3", "node3", LOW, SMALL, start=0),
            pod("p3.4", "node3", LOW, MEDIUM, start=0),
            pod("p4.1", "node4", MID, MEDIUM, start=0),
            pod("p4.2", "node4", MID, SMALL, start=0),
            pod("p4.3", "node4", MID, SMALL, start=0),
            pod("p4.4", "node4", NEG, SMALL, start=0),
        ],
        ["node1", "node2", "node3", "node4"],
        {"node1"},
    ),
    (
        "same priority, same number of victims, different start time for each node's pod",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, start=2),
            pod("p1.2", "node1", MID, MEDIUM, start=2),
            pod("p2.1", "node2", MID, MEDIUM, start=3),
            pod("p2.2", "node2", MID, MEDIUM, start=3),
            pod("p3.1", "node3", MID, MEDIUM, start=1),
            pod("p3.2", "node3", MID, MEDIUM, start=1),
        ],
        ["node1", "node2", "node3"],
        {"node2"},
    ),
    (
        "same priority, same number of victims, different start time for all pods",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", MID, MEDIUM, start=4),
            pod("p1.2", "node1", MID, MEDIUM, start=2),
            pod("p2.1", "node2", MID, MEDIUM, start=5),
            pod("p2.2", "node2", MID, MEDIUM, start=1),
            pod("p3.1", "node3", MID, MEDIUM, start=3),
            pod("p3.2", "node3", MID, MEDIUM, start=6),
        ],
        ["node1", "node2", "node3"],
        {"node3"},
    ),
    (
        "different priority, same number of victims, different start time for all pods",
        pod("p", priority=HIGH, req=VERY_LARGE),
        [
            pod("p1.1", "node1", LOW, MEDIUM, start=4),
            pod("p1.2", "node1", MID, MEDIUM, start=2),
            pod("p2.1", "node2", MID, MEDIUM, start=6),
            pod("p2.2", "node2", LOW, MEDIUM, start=1),
            pod("p3.1", "node3", LOW, MEDIUM, start=3),
            pod("p3.2", "node3", MID, MEDIUM, start=5),
        ],
        ["node1", "node2", "node3"],
        {"node2"},
    ),
]


@pytest.mark.parametrize(
    ("pod_", "pods", "names", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in SELECT_BEST],
)
def test_select_best_candidate(
    pod_: Pod, pods: list[Pod], names: list[str], expected: set[str]
) -> None:
    decision = preempt(pod_, snapshot(pods, nodes(*names)))
    assert decision.node in expected
