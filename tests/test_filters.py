"""kube-scheduler's filters (schedcache.model.filters), from upstream's test tables:
``v1.Toleration.ToleratesTaint`` (staging/src/k8s.io/api/core/v1/toleration_test.go), the
TaintToleration, NodeUnschedulable and NodeAffinity plugins' filter tests, and the reasons in
upstream's words. Pure model: no backend; the cache round trip of the new pod fields runs on
every backend at the end."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import ValidationError
from schedcache.model.filters import (
    AFFINITY_MISMATCH,
    PORTS_IN_USE,
    UNSCHEDULABLE,
    filter_pod,
    intolerable_prefer_no_schedule,
    tolerates,
)
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Node, Pod
from tests.factories import keyspace, node_manifest, pod_manifest

# -- ToleratesTaint -------------------------------------------------------------------------

TOLERATES = [
    # (upstream case, toleration (key, operator, value, effect), taint (key, value, effect), ok)
    (
        "empty toleration and non-empty taint",
        ("", "Equal", "", ""),
        ("foo", "bar", "NoSchedule"),
        False,
    ),
    (
        "toleration and taint have the same key and effect, and operator is Exists, and taint has no value, expect tolerated",
        ("foo", "Exists", "", "NoSchedule"),
        ("foo", "", "NoSchedule"),
        True,
    ),
    (
        "toleration and taint have the same key and effect, and operator is Exists, and taint has some value, expect tolerated",
        ("foo", "Exists", "", "NoSchedule"),
        ("foo", "bar", "NoSchedule"),
        True,
    ),
    (
        "toleration and taint have the same effect, toleration has empty key and operator is Exists, means match all taints, expect tolerated",
        ("", "Exists", "", "NoSchedule"),
        ("foo", "bar", "NoSchedule"),
        True,
    ),
    (
        "toleration and taint have the same key, effect and value, and operator is Equal, expect tolerated",
        ("foo", "Equal", "bar", "NoSchedule"),
        ("foo", "bar", "NoSchedule"),
        True,
    ),
    (
        "toleration and taint have the same key and effect, but different values, and operator is Equal, expect not tolerated",
        ("foo", "Equal", "value1", "NoSchedule"),
        ("foo", "value2", "NoSchedule"),
        False,
    ),
    (
        "toleration and taint have the same key and value, but different effects, and operator is Equal, expect not tolerated",
        ("foo", "Equal", "bar", "NoSchedule"),
        ("foo", "bar", "NoExecute"),
        False,
    ),
    (
        "empty effect in the toleration matches every effect",
        ("foo", "Equal", "bar", ""),
        ("foo", "bar", "PreferNoSchedule"),
        True,
    ),
    (
        "empty operator is Equal",
        ("foo", "", "bar", "NoSchedule"),
        ("foo", "bar", "NoSchedule"),
        True,
    ),
    (
        "different keys never match",
        ("foo", "Exists", "", ""),
        ("other", "bar", "NoSchedule"),
        False,
    ),
    (
        "empty key with Exists and empty effect tolerates everything",
        ("", "Exists", "", ""),
        ("any", "thing", "NoExecute"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "toleration", "taint", "ok"), TOLERATES, ids=[c[0][:60] for c in TOLERATES]
)
def test_tolerates_taint(case: str, toleration: Any, taint: Any, ok: bool) -> None:
    assert tolerates(toleration, taint) is ok, case


# -- the filter plugins on a NodeInfo -------------------------------------------------------


def node(
    taints: list[dict[str, str]] | None = None, unschedulable: bool = False, **kw: Any
) -> NodeInfo:
    manifest = node_manifest("n1", "4", "8Gi", **kw)
    manifest["spec"] = {"taints": taints or [], "unschedulable": unschedulable}
    built = Node.from_k8s(manifest)
    return NodeInfo(name="n1", node=built, allocatable=built.allocatable)


def pod(cpu: str = "100m", **spec: Any) -> Pod:
    manifest = pod_manifest("p", "", cpu, "100Mi", uid="uid-p")
    manifest["spec"].update(spec)
    return Pod.from_k8s(manifest)


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


TAINT_FILTER = [
    # upstream TestTaintTolerationFilter
    (
        "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        [],
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}],
        [taint("dedicated", "user1", "NoSchedule")],
        None,
    ),
    (
        "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
        [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on the node",
        [{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}],
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "A pod has multiple tolerations, node has multiple taints, all the taints are tolerated, pod can be scheduled onto the node",
        [
            {"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
            {"key": "foo", "operator": "Exists", "effect": "NoSchedule"},
        ],
        [taint("dedicated", "user2", "NoSchedule"), taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't match, can't be scheduled onto the node",
        [{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}],
        [taint("foo", "bar", "NoSchedule")],
        "node(s) had untolerated taint {foo: bar}",
    ),
    (
        "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
        [{"key": "foo", "operator": "Equal", "value": "bar"}],
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "The pod has a toleration that key and value don't match the taint on the node, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
        [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    (
        "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
        [],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    (
        "A NoExecute taint filters too",
        [],
        [taint("node.kubernetes.io/not-ready", "", "NoExecute")],
        "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
    ),
]


@pytest.mark.parametrize(
    ("case", "tolerations", "taints", "reason"), TAINT_FILTER, ids=[c[0][:60] for c in TAINT_FILTER]
)
def test_taint_toleration_filter(
    case: str, tolerations: list[Any], taints: list[Any], reason: str | None
) -> None:
    result = filter_pod(pod(tolerations=tolerations), node(taints))
    if reason is None:
        assert result.fits, case
    else:
        assert result.reasons == (reason,) and result.unresolvable, case


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        (
            [],
            False,
        ),  # "Does not schedule pod to unschedulable node (node.spec.unschedulable==true)"
        (
            [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            True,
        ),
        ([{"operator": "Exists"}], True),  # tolerates everything
    ],
)
def test_node_unschedulable(tolerations: list[Any], fits: bool) -> None:
    result = filter_pod(pod(tolerations=tolerations), node(unschedulable=True))
    assert result.fits is fits
    if not fits:
        assert result.reasons == (UNSCHEDULABLE,) and result.unresolvable


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


NODE_AFFINITY = [
    # (upstream-style case, pod spec, node labels, fits)
    ("no selector", {}, {"foo": "bar"}, True),
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, {}, False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, True),
    (
        "node labels are superset",
        {"nodeSelector": {"foo": "bar"}},
        {"foo": "bar", "baz": "blah"},
        True,
    ),
    (
        "node labels are subset",
        {"nodeSelector": {"foo": "bar", "baz": "blah"}},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with matchExpressions using In operator that matches the existing node",
        {"affinity": affinity(expr("foo", "In", "bar", "value2"))},
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with matchExpressions using Gt operator that matches the existing node",
        {"affinity": affinity(expr("kernel-version", "Gt", "0204"))},
        {"kernel-version": "0206.10"} | {"kernel-version": "206"},
        True,
    ),
    (
        "Pod with matchExpressions using NotIn operator that matches the existing node",
        {"affinity": affinity(expr("mem-type", "NotIn", "DDR", "DDR2"))},
        {"mem-type": "DDR3"},
        True,
    ),
    (
        "Pod with matchExpressions using Exists operator that matches the existing node",
        {"affinity": affinity(expr("GPU", "Exists"))},
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "Pod with affinity that don't match node's labels won't schedule onto the node",
        {"affinity": affinity(expr("foo", "In", "value1", "value2"))},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with an empty NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
        {"affinity": affinity({})},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
        {
            "affinity": affinity(
                {
                    "matchExpressions": [
                        {"key": "GPU", "operator": "Exists"},
                        {"key": "GPU", "operator": "NotIn", "values": ["AMD", "INTER"]},
                    ]
                }
            )
        },
        {"GPU": "AMD"},
        False,
    ),
    (
        "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
        {
            "affinity": affinity(
                expr("foo", "In", "bar", "value2"), expr("diffkey", "In", "wrong", "value2")
            )
        },
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, will schedule onto the node",
        {"nodeSelector": {"foo": "bar"}, "affinity": affinity(expr("foo", "Exists"))},
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) is not satisfied, won't schedule onto the node",
        {"nodeSelector": {"foo": "bar"}, "affinity": affinity(expr("foo", "Exists"))},
        {"foo": "barrrrrr"},
        False,
    ),
    (
        "Pod with matchFields using In operator that matches the existing node",
        {
            "affinity": affinity(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            )
        },
        {},
        True,
    ),
    (
        "Pod with matchFields using In operator that does not match the existing node",
        {
            "affinity": affinity(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node_2"]}]}
            )
        },
        {},
        False,
    ),
    (
        "Pod with Lt that the label does not satisfy",
        {"affinity": affinity(expr("cores", "Lt", "4"))},
        {"cores": "8"},
        False,
    ),
    (
        "Pod with Gt on a label that is not a number",
        {"affinity": affinity(expr("cores", "Gt", "4"))},
        {"cores": "many"},
        False,
    ),
    (
        "Pod with DoesNotExist on an absent label",
        {"affinity": affinity(expr("spot", "DoesNotExist"))},
        {"foo": "bar"},
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "spec", "labels", "fits"), NODE_AFFINITY, ids=[c[0][:60] for c in NODE_AFFINITY]
)
def test_node_affinity(case: str, spec: dict[str, Any], labels: dict[str, str], fits: bool) -> None:
    result = filter_pod(pod(**spec), node(labels=labels))
    assert result.fits is fits, case
    if not fits:
        assert result.reasons == (AFFINITY_MISMATCH,) and result.unresolvable


def test_resources_and_ports_are_resolvable_and_in_upstream_words() -> None:
    info = node()
    big = pod("8")
    result = filter_pod(big, info)
    assert result.reasons == ("Insufficient cpu",) and not result.unresolvable
    info.used_ports.add(("0.0.0.0", "TCP", 80))
    ported = pod(containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}])
    assert filter_pod(ported, info).reasons == (PORTS_IN_USE,)


def test_the_first_failing_plugin_decides_as_the_framework_stops_there() -> None:
    info = node([taint("dedicated", "a", "NoSchedule")], unschedulable=True)
    assert filter_pod(pod("8"), info).reasons == (UNSCHEDULABLE,)


def test_prefer_no_schedule_counts_only_for_the_score() -> None:
    info = node([taint("a", "1", "PreferNoSchedule"), taint("b", "2", "PreferNoSchedule")])
    assert filter_pod(pod(), info).fits
    assert intolerable_prefer_no_schedule(pod(), info) == 2
    tolerant = pod(tolerations=[{"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"}])
    assert intolerable_prefer_no_schedule(tolerant, info) == 1
    # A toleration for another effect does not count (upstream: only empty or PreferNoSchedule).
    other = pod(tolerations=[{"key": "a", "operator": "Exists", "effect": "NoSchedule"}])
    assert intolerable_prefer_no_schedule(other, info) == 2


# -- reading the fields --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"tolerations": [{"key": "a", "operator": "Maybe"}]}, "spec.tolerations[0].operator"),
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
            "spec.tolerations[0].value",
        ),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].operator"),
        ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "spec.tolerations[0].effect"),
        ({"tolerations": "all"}, "spec.tolerations"),
        ({"nodeSelector": {"a": 1}}, "spec.nodeSelector"),
        (
            {"affinity": affinity({"matchExpressions": [{"key": "a", "operator": "Near"}]})},
            "matchExpressions[0].operator",
        ),
        ({"affinity": affinity(expr("a", "In"))}, "matchExpressions[0].values"),
        ({"affinity": affinity(expr("a", "Exists", "x"))}, "matchExpressions[0].values"),
        ({"affinity": affinity(expr("a", "Gt", "x"))}, "matchExpressions[0].values"),
        (
            {
                "affinity": affinity(
                    {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]}
                )
            },
            "matchFields[0]",
        ),
    ],
)
def test_bad_scheduling_fields_name_the_pod_and_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match="pod node_info_cache_test/p: ") as raised:
        pod(**spec)
    assert field in str(raised.value)


def test_the_fields_survive_the_cache(cache: Cache) -> None:
    spec = {
        "nodeName": "n1",
        "tolerations": [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
        ],
        "nodeSelector": {"disk": "ssd"},
        "affinity": affinity(
            expr("zone", "In", "a", "b"),
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
        ),
    }
    placed = pod(**spec)
    cache.add_node(Node.from_k8s(node_manifest("n1", "4", "8Gi")))
    before = keyspace(cache.client, cache.keys.pattern)
    cache.add_pod(placed)
    assert cache.get_pod(placed) == placed
    assert cache.get_node_info("n1").pods == [placed]
    assert keyspace(cache.client, cache.keys.pattern) != before and cache.verify() == []
