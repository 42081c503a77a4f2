"""InterPodAffinity's filter, from upstream's tables (pkg/scheduler/framework/plugins/
interpodaffinity/filtering_test.go: TestRequiredAffinitySingleNode and
TestRequiredAffinityMultipleNodes), case names kept. Upstream's PreFilter ``Skip`` (nothing to
check) reads here as every node passing. Left out: the two cases whose label values upstream's
PreFilter refuses (the manifest reader is not the API's validation). Namespaces are upstream's
tables' (plugin_tables.NAMESPACES: the cache's, fed by sync)."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache.model.plugins import interpodaffinity
from schedcache.model.plugins.interpodaffinity import (
    AFFINITY_RULES,
    ANTI_AFFINITY_RULES,
    EXISTING_ANTI_AFFINITY,
)
from tests.plugin_tables import make_node, make_pod, snapshot, statuses, term

AFF = ("UnschedulableAndUnresolvable", AFFINITY_RULES)
ANTI = ("Unschedulable", ANTI_AFFINITY_RULES)
EXISTING = ("Unschedulable", EXISTING_ANTI_AFFINITY)

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = make_node("node1", {"region": "r1", "zone": "z11"})
EXISTING_POD = make_pod(labels=POD_LABEL, node="node1")


def expressions(*items: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": k, "operator": o, **({"values": v} if v else {})} for k, o, v in items
        ]
    }


SINGLE_NODE = [
    (
        "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
        make_pod(),
        [],
        None,
    ),
    (
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
        make_pod(
            labels=POD_LABEL2,
            affinity=[term("In", "service", "region", ["securityscan", "value2"])],
        ),
        [EXISTING_POD],
        None,
    ),
    (
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
        make_pod(
            labels=POD_LABEL2,
            affinity=[term("NotIn", "service", "region", ["securityscan3", "value3"])],
        ),
        [EXISTING_POD],
        None,
    ),
    (
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        make_pod(
            labels=POD_LABEL2,
            raw_affinity=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaces": ["DiffNameSpace"],
                }
            ],
        ),
        [make_pod(namespace="ns", labels=POD_LABEL, node="node1")],
        AFF,
    ),
    (
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        make_pod(
            labels=POD_LABEL, affinity=[term("In", "service", "", ["antivirusscan", "value2"])]
        ),
        [EXISTING_POD],
        AFF,
    ),
    (
        "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution ",
        make_pod(
            labels=POD_LABEL2,
            raw_affinity=[
                {
                    "labelSelector": expressions(
                        ("service", "Exists", []), ("wrongkey", "DoesNotExist", [])
                    ),
                    "topologyKey": "region",
                },
                {
                    "labelSelector": expressions(
                        ("service", "In", ["securityscan"]), ("service", "NotIn", ["WrongValue"])
                    ),
                    "topologyKey": "region",
                },
            ],
        ),
        [EXISTING_POD],
        None,
    ),
    (
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
        make_pod(
            labels=POD_LABEL2,
            raw_affinity=[
                {
                    "labelSelector": expressions(
                        ("service", "Exists", []), ("wrongkey", "DoesNotExist", [])
                    ),
                    "topologyKey": "region",
                },
                {
                    "labelSelector": expressions(
                        ("service", "In", ["securityscan2"]), ("service", "NotIn", ["WrongValue"])
                    ),
                    "topologyKey": "region",
                },
            ],
        ),
        [EXISTING_POD],
        AFF,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        make_pod(
            labels=POD_LABEL2,
            affinity=[term("In", "service", "region", ["securityscan", "value2"])],
            anti=[term("In", "service", "node", ["antivirusscan", "value2"])],
        ),
        [EXISTING_POD],
        None,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
        make_pod(
            labels=POD_LABEL2,
            affinity=[term("In", "service", "region", ["securityscan", "value2"])],
            anti=[term("In", "service", "node", ["antivirusscan", "value2"])],
        ),
        [
            make_pod(
                node="node1",
                labels=POD_LABEL,
                anti=[term("In", "service", "node", ["antivirusscan", "value2"])],
            )
        ],
        None,
    ),
    (
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        make_pod(
            labels=POD_LABEL2,
            affinity=[term("In", "service", "region", ["securityscan", "value2"])],
            anti=[term("In", "service", "zone", ["securityscan", "value2"])],
        ),
        [EXISTING_POD],
        ANTI,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        make_pod(
            labels=POD_LABEL,
            affinity=[term("In", "service", "region", ["securityscan", "value2"])],
            anti=[term("In", "service", "node", ["antivirusscan", "value2"])],
        ),
        [
            make_pod(
                labels=POD_LABEL,
                node="node1",
                anti=[term("In", "service", "zone", ["securityscan", "value2"])],
            )
        ],
        EXISTING,
    ),
    (
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        make_pod(
            labels=POD_LABEL,
            affinity=[term("NotIn", "service", "region", ["securityscan", "value2"])],
        ),
        [make_pod(labels={"service": "securityscan"}, node="node2")],
        AFF,
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        make_pod(labels=POD_LABEL),
        [
            make_pod(
                node="node1",
                labels=POD_LABEL,
                anti=[term("In", "service", "zone", ["securityscan", "value2"])],
            )
        ],
        EXISTING,
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
        make_pod(labels=POD_LABEL),
        [
            make_pod(
                node="node1",
                labels=POD_LABEL,
                anti=[term("NotIn", "service", "zone", ["securityscan", "value2"])],
            )
        ],
        None,
    ),
    (
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
        make_pod(
            labels=POD_LABEL,
            anti=[term("Exists", "service", "region"), term("Exists", "security", "region")],
        ),
        [make_pod(node="node1", labels=POD_LABEL2, anti=[term("Exists", "security", "zone")])],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
        make_pod(
            labels=POD_LABEL,
            anti=[term("Exists", "service", "zone"), term("Exists", "security", "zone")],
        ),
        [make_pod(node="node1", labels=POD_LABEL2, anti=[term("Exists", "security", "zone")])],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
        make_pod(labels=POD_LABEL2, anti=[term("Exists", "security", "zone")]),
        [
            make_pod(
                node="node1",
                labels=POD_LABEL,
                anti=[term("Exists", "service", "zone"), term("Exists", "security", "zone")],
            )
        ],
        EXISTING,
    ),
    (
        "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
        make_pod(
            labels={"abc": "", "xyz": ""},
            anti=[term("Exists", "abc", "zone"), term("Exists", "def", "zone")],
        ),
        [
            make_pod(
                node="node1",
                labels={"def": "", "xyz": ""},
                anti=[term("Exists", "abc", "zone"), term("Exists", "def", "zone")],
            )
        ],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
        make_pod(
            labels={"def": "", "xyz": ""},
            anti=[term("Exists", "abc", "zone"), term("Exists", "def", "zone")],
        ),
        [
            make_pod(
                node="node1",
                labels={"abc": "", "xyz": ""},
                anti=[term("Exists", "abc", "zone"), term("Exists", "def", "zone")],
            )
        ],
        ANTI,
    ),
    (
        "affinity with NamespaceSelector",
        make_pod(
            labels=POD_LABEL2,
            raw_affinity=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaceSelector": expressions(("team", "In", ["team1"])),
                    "topologyKey": "region",
                }
            ],
        ),
        [make_pod(namespace="subteam1.team1", labels=POD_LABEL, node="node1")],
        None,
    ),
    (
        "affinity with non-matching NamespaceSelector",
        make_pod(
            labels=POD_LABEL2,
            raw_affinity=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaceSelector": expressions(("team", "In", ["team1"])),
                    "topologyKey": "region",
                }
            ],
        ),
        [make_pod(namespace="subteam1.team2", labels=POD_LABEL, node="node1")],
        AFF,
    ),
    (
        "anti-affinity with matching NamespaceSelector",
        make_pod(
            namespace="subteam1.team1",
            labels=POD_LABEL2,
            raw_anti=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaceSelector": expressions(("team", "In", ["team1"])),
                    "topologyKey": "zone",
                }
            ],
        ),
        [make_pod(namespace="subteam2.team1", labels=POD_LABEL, node="node1")],
        ANTI,
    ),
    (
        "anti-affinity with matching all NamespaceSelector",
        make_pod(
            namespace="subteam1.team1",
            labels=POD_LABEL2,
            raw_anti=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaceSelector": {},
                    "topologyKey": "zone",
                }
            ],
        ),
        [make_pod(namespace="subteam2.team1", labels=POD_LABEL, node="node1")],
        ANTI,
    ),
    (
        "anti-affinity with non-matching NamespaceSelector",
        make_pod(
            namespace="subteam1.team1",
            labels=POD_LABEL2,
            raw_anti=[
                {
                    "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                    "namespaceSelector": expressions(("team", "In", ["team1"])),
                    "topologyKey": "zone",
                }
            ],
        ),
        [make_pod(namespace="subteam1.team2", labels=POD_LABEL, node="node1")],
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "pods", "want"), SINGLE_NODE, ids=[c[0] for c in SINGLE_NODE]
)
def test_required_affinity_single_node(name, pod, pods, want) -> None:
    assert statuses(interpodaffinity.filter, pod, snapshot(pods, [NODE1])) == [want]


CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}


def nodes3(*labels: dict[str, str], names: str = "ABC") -> list[Any]:
    return [make_node(f"node{names[i]}", lab) for i, lab in enumerate(labels)]


def rzh(region: str, zone: str, host: str) -> dict[str, str]:
    return {"region": region, "zone": zone, "hostname": host}


MULTIPLE_NODES = [
    (
        "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
        make_pod(affinity=[term("In", "foo", "region", ["bar"])]),
        [make_pod(name="p1", node="node1", labels={"foo": "bar"})],
        [make_node("node1", CHINA), make_node("node2", CHINA_AZ1), make_node("node3", INDIA)],
        [None, None, AFF],
    ),
    (
        "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
        make_pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[
                term("In", "foo", "zone", ["bar"]),
                term("In", "service", "zone", ["securityscan"]),
            ],
        ),
        [make_pod(name="p1", node="nodeA", labels={"foo": "bar"})],
        [
            make_node("nodeA", {"zone": "az1", "hostname": "h1"}),
            make_node("nodeB", {"zone": "az2", "hostname": "h2"}),
        ],
        [None, None],
    ),
    (
        "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
        make_pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[
                term("In", "foo", "zone", ["bar"]),
                term("In", "service", "zone", ["securityscan"]),
            ],
        ),
        [make_pod(name="p1", node="nodeA", labels={"foo": "bar"})],
        [
            make_node("nodeA", {"zoneLabel": "az1", "hostname": "h1"}),
            make_node("nodeB", {"zoneLabel": "az2", "hostname": "h2"}),
        ],
        [AFF, AFF],
    ),
    (
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        make_pod(anti=[term("In", "foo", "region", ["abc"])]),
        [make_pod(node="nodeA", labels={"foo": "abc"})],
        [
            make_node("nodeA", {"region": "r1", "hostname": "nodeA"}),
            make_node("nodeB", {"region": "r1", "hostname": "nodeB"}),
        ],
        [ANTI, ANTI],
    ),
    (
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
        make_pod(
            anti=[
                term("In", "foo", "region", ["abc"]),
                term("In", "service", "zone", ["securityscan"]),
            ]
        ),
        [make_pod(node="nodeA", labels={"foo": "abc", "service": "securityscan"})],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [ANTI, ANTI],
    ),
    (
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
        make_pod(anti=[term("In", "foo", "region", ["abc"])]),
        [make_pod(node="nodeA", labels={"foo": "abc"})],
        nodes3(CHINA, CHINA_AZ1, INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
        make_pod(
            namespace="NS1", labels={"foo": "123"}, anti=[term("In", "foo", "region", ["bar"])]
        ),
        [
            make_pod(node="nodeA", namespace="NS1", labels={"foo": "bar"}),
            make_pod(node="nodeC", namespace="NS2", anti=[term("In", "foo", "region", ["123"])]),
        ],
        nodes3(CHINA, CHINA_AZ1, INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
        make_pod(labels={"foo": ""}),
        [make_pod(node="nodeA", anti=[term("Exists", "foo", "invalid-node-label")])],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z1", "nodeB")),
        ],
        [None, None],
    ),
    (
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
        make_pod(node="nodeA", anti=[term("Exists", "foo", "invalid-node-label")]),
        [make_pod(node="nodeA", labels={"foo": ""})],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z1", "nodeB")),
        ],
        [None, None],
    ),
    (
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's terms on all nodes",
        make_pod(labels={"foo": "", "bar": ""}),
        [
            make_pod(node="nodeA", anti=[term("Exists", "foo", "zone")]),
            make_pod(node="nodeA", anti=[term("Exists", "bar", "region")]),
        ],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [EXISTING, EXISTING],
    ),
    (
        "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
        make_pod(anti=[term("Exists", "foo", "zone"), term("Exists", "bar", "region")]),
        [make_pod(node="nodeA", labels={"foo": ""}), make_pod(node="nodeB", labels={"bar": ""})],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [ANTI, ANTI],
    ),
    (
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
        make_pod(labels={"foo": "", "bar": ""}),
        [
            make_pod(
                node="nodeA",
                anti=[term("Exists", "foo", "invalid-node-label"), term("Exists", "bar", "zone")],
            )
        ],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [EXISTING, None],
    ),
    (
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
        make_pod(anti=[term("Exists", "foo", "invalid-node-label"), term("Exists", "bar", "zone")]),
        [make_pod(name="podA", node="nodeA", labels={"foo": "", "bar": ""})],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [ANTI, None],
    ),
    (
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
        make_pod(labels={"foo": "", "bar": ""}),
        [
            make_pod(
                node="nodeA", anti=[term("Exists", "foo", "region"), term("Exists", "bar", "zone")]
            )
        ],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [EXISTING, EXISTING],
    ),
    (
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
        make_pod(anti=[term("Exists", "foo", "region"), term("Exists", "bar", "zone")]),
        [make_pod(node="nodeA", labels={"foo": "", "bar": ""})],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [ANTI, ANTI],
    ),
    (
        "Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term matches incoming pod, so incoming pod can only be scheduled to nodeC",
        make_pod(labels={"foo": "", "bar": ""}),
        [
            make_pod(
                node="nodeA", anti=[term("Exists", "foo", "zone"), term("Exists", "labelA", "zone")]
            ),
            make_pod(
                node="nodeB", anti=[term("Exists", "bar", "zone"), term("Exists", "labelB", "zone")]
            ),
        ],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
            make_node("nodeC", rzh("r1", "z3", "nodeC")),
        ],
        [EXISTING, EXISTING, None],
    ),
    (
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
        make_pod(affinity=[term("Exists", "foo", "region"), term("Exists", "bar", "zone")]),
        [make_pod(name="pod1", labels={"foo": "", "bar": ""}, node="nodeA")],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z1", "nodeB")),
        ],
        [None, None],
    ),
    (
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
        make_pod(affinity=[term("Exists", "foo", "region"), term("Exists", "bar", "zone")]),
        [
            make_pod(name="pod1", node="nodeA", labels={"foo": ""}),
            make_pod(name="pod2", node="nodeB", labels={"bar": ""}),
        ],
        [
            make_node("nodeA", rzh("r1", "z1", "nodeA")),
            make_node("nodeB", rzh("r1", "z2", "nodeB")),
        ],
        [AFF, AFF],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "pods", "nodes", "want"), MULTIPLE_NODES, ids=[c[0] for c in MULTIPLE_NODES]
)
def test_required_affinity_multiple_nodes(name, pod, pods, nodes, want) -> None:
    assert statuses(interpodaffinity.filter, pod, snapshot(pods, nodes)) == want


def test_namespace_selector_selects_by_the_cache_namespace_labels() -> None:
    """A non-empty namespaceSelector selects namespaces by the labels the cache holds: with no
    Namespace known, "affinity with NamespaceSelector" finds no pod (the pod, not matching its
    own term, is refused); relabelled into team1, the namespace's pod is selected."""
    pod = make_pod(
        labels=POD_LABEL2,
        raw_affinity=[
            {
                "labelSelector": expressions(("service", "In", ["securityscan", "value2"])),
                "namespaceSelector": expressions(("team", "In", ["team1"])),
                "topologyKey": "region",
            }
        ],
    )
    pods = [make_pod(namespace="subteam1.team1", labels=POD_LABEL, node="node1")]
    assert statuses(interpodaffinity.filter, pod, snapshot(pods, [NODE1]), {}) == [AFF]
    moved = {"subteam1.team1": {"team": "team2"}}
    assert statuses(interpodaffinity.filter, pod, snapshot(pods, [NODE1]), moved) == [AFF]
    assert statuses(interpodaffinity.filter, pod, snapshot(pods, [NODE1])) == [None]
