"""The default profile's scores. NodeResourcesFit's LeastAllocated table is upstream's
(pkg/scheduler/framework/plugins/noderesources/least_allocated_test.go,
TestLeastAllocatedScoringStrategy, the cases with the default resources, names kept); the
others check upstream's formulas and normalisation on small cases worked by hand."""

from __future__ import annotations

import pytest

from schedcache.model.plugins import (
    imagelocality,
    interpodaffinity,
    noderesources,
    podtopologyspread,
)
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import WEIGHTS, plugin_scores, score_nodes
from schedcache.model.podterms import LabelSelector, PodAffinityTerm, WeightedTerm
from schedcache.model.values import Node, Pod
from tests.plugin_tables import capacity, make_node, make_pod, snapshot

C1 = {"cpu": "1000", "memory": "2000"}
C2 = {"cpu": "2000", "memory": "3000"}

LEAST_ALLOCATED = [
    (
        "nothing scheduled, nothing requested",
        [],
        [("4000", "10000"), ("4000", "10000")],
        [],
        [100, 100],
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        [C1, C2],
        [("4000", "10000"), ("6000", "10000")],
        [],
        [37, 50],
    ),
    (
        "no resources requested, pods scheduled",
        [],
        [("4000", "10000"), ("4000", "10000")],
        [("node1", None), ("node1", None), ("node2", None), ("node2", None)],
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        [],
        [("10000", "20000"), ("10000", "20000")],
        [
            ("node1", ("3000", "0")),
            ("node1", ("3000", "0")),
            ("node2", ("3000", "0")),
            ("node2", ("3000", "5000")),
        ],
        [70, 57],
    ),
    (
        "resources requested, pods scheduled with resources",
        [C1, C2],
        [("10000", "20000"), ("10000", "20000")],
        [("node1", ("3000", "0")), ("node2", ("3000", "5000"))],
        [57, 45],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        [C1, C2],
        [("10000", "20000"), ("10000", "50000")],
        [("node1", ("3000", "0")), ("node2", ("3000", "5000"))],
        [57, 60],
    ),
    (
        "requested resources exceed node capacity",
        [{"cpu": "3000", "memory": "0"}],
        [("4000", "10000"), ("4000", "10000")],
        [("node1", ("3000", "0")), ("node2", ("3000", "5000"))],
        [50, 25],
    ),
    (
        "zero node resources, pods scheduled with resources",
        [],
        [("0", "0"), ("0", "0")],
        [("node1", ("3000", "0")), ("node2", ("3000", "5000"))],
        [0, 0],
    ),
]


@pytest.mark.parametrize(
    ("name", "requests", "nodes", "existing", "want"),
    LEAST_ALLOCATED,
    ids=[c[0] for c in LEAST_ALLOCATED],
)
def test_least_allocated_scoring_strategy(name, requests, nodes, existing, want) -> None:
    pod = make_pod(requests=requests)
    node_list = [
        make_node(f"node{i + 1}", allocatable=capacity(cpu, mem))
        for i, (cpu, mem) in enumerate(nodes)
    ]
    pods = [
        make_pod(node=n, requests=[] if r is None else [{"cpu": r[0], "memory": r[1]}])
        for n, r in existing
    ]
    infos = snapshot(pods, node_list)
    assert [noderesources.least_allocated(pod, info) for info in infos] == want


def test_most_allocated_and_balanced_allocation() -> None:
    """MostAllocated: requested / allocatable (3000/4000 -> 75, 5000/10000 -> 50: 62);
    BalancedAllocation: (1 - |0.75 - 0.5| / 2) * 100 = 87."""
    pod = make_pod(requests=[C1, C2])
    (info,) = snapshot([], [make_node("node1", allocatable=capacity("4000", "10000"))])
    assert noderesources.most_allocated(pod, info) == 62
    assert noderesources.balanced_allocation(pod, info) == 87
    assert noderesources.requested_to_capacity_ratio(((0, 0), (100, 10)))(pod, info) == 62
    assert noderesources.STRATEGIES["RequestedToCapacityRatio"](pod, info) == 37


def test_image_locality_scales_by_spread_and_clamps() -> None:
    """A 300 MB image on one of two nodes: 150 MB counted; (150 - 23) * 100 // (1000 - 23) = 12;
    the node without it, 0; the tag defaults to latest."""
    mb = imagelocality.MB
    with_image = make_node("node1", images=(((("nginx:latest",), 300 * mb),)))
    infos = snapshot([], [with_image, make_node("node2")])
    pod = make_pod(images=["nginx"])
    assert [imagelocality.score(pod, info, 2) for info in infos] == [12, 0]


def test_taint_toleration_and_preferred_node_affinity_normalise_as_upstream() -> None:
    """TaintToleration reverse-normalises the intolerable PreferNoSchedule taints (none: 100);
    NodeAffinity scales the matched weights so the best node scores 100."""
    tainted = make_node("node1", {"a": "b"}, taints=(("k", "v", "PreferNoSchedule"),))
    plain = make_node("node2", {"a": "c"})
    pod = Pod.from_k8s(
        {
            "metadata": {"name": "p", "uid": "p"},
            "spec": {
                "containers": [{"name": "c"}],
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 4,
                                "preference": {
                                    "matchExpressions": [
                                        {"key": "a", "operator": "In", "values": ["b"]}
                                    ]
                                },
                            },
                            {
                                "weight": 1,
                                "preference": {
                                    "matchExpressions": [{"key": "a", "operator": "Exists"}]
                                },
                            },
                        ]
                    }
                },
            },
        }
    )
    infos = snapshot([], [tainted, plain])
    scores = plugin_scores(pod, infos, Cycle(pod, infos))
    assert scores["TaintToleration"] == {"node1": 0, "node2": 100}
    assert scores["NodeAffinity"] == {"node1": 100, "node2": 20}


def test_inter_pod_affinity_preferred_both_directions_min_max_normalised() -> None:
    """The pod prefers (weight 5) zones with app=db; an existing pod in zone z2 prefers away
    (weight 3) from app=web, which the pod is: z1 = 5, z2 = -3, z3 = 0 -> 100, 0, 37."""
    zone = "zone"
    selector = LabelSelector((("app", "db"),))
    db = make_pod("db", labels={"app": "db"}, node="n1")
    picky = Pod(
        "picky",
        "picky",
        node_name="n2",
        preferred_pod_anti_affinity=(
            WeightedTerm(3, PodAffinityTerm(zone, LabelSelector((("app", "web"),)))),
        ),
    )
    pod = Pod(
        "web",
        "web",
        labels={"app": "web"},
        preferred_pod_affinity=(WeightedTerm(5, PodAffinityTerm(zone, selector)),),
    )
    nodes = [make_node(f"n{i}", {zone: f"z{i}"}) for i in (1, 2, 3)]
    infos = snapshot([db, picky], nodes)
    cycle = Cycle(pod, infos)
    raw = {i.name: interpodaffinity.score(cycle, i) for i in infos}
    assert raw == {"n1": 5, "n2": -3, "n3": 0}
    assert interpodaffinity.normalize(raw) == {"n1": 100, "n2": 0, "n3": 37}


def test_schedule_anyway_spread_prefers_the_emptier_domain() -> None:
    """Counts 2 / 0 in two zones, weight log(2 + 2): raw 3 and 0 -> normalised 0 and 100."""
    constraint = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "s"}},
    }
    pod = make_pod(labels={"app": "s"}, spread=[constraint])
    nodes: list[Node] = [make_node("a", {"zone": "z1"}), make_node("b", {"zone": "z2"})]
    pods = [make_pod(labels={"app": "s"}, node="a"), make_pod(labels={"app": "s"}, node="a")]
    infos = snapshot(pods, nodes)
    assert podtopologyspread.scores(Cycle(pod, infos), infos) == {"a": 0, "b": 100}


def test_weights_are_the_default_profiles() -> None:
    assert WEIGHTS == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesFit": 1,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    pod = make_pod(requests=[C1])
    infos = snapshot([], [make_node("n1", allocatable=capacity("4000", "10000"))])
    scores = plugin_scores(pod, infos, Cycle(pod, infos))
    want = sum(WEIGHTS[name] * by_node["n1"] for name, by_node in scores.items())
    assert score_nodes(pod, infos, Cycle(pod, infos)) == {"n1": want}


def tolerating(*tolerations: tuple[str, str, str]) -> Pod:
    """``podWithTolerations``: (key, value, effect), operator Equal."""
    return Pod("pod1", "pod1", tolerations=tuple((k, "Equal", v, e) for k, v, e in tolerations))


def tainted_node(name: str, *taints: tuple[str, str, str]) -> Node:
    return make_node(name, taints=taints)


PREFER = "PreferNoSchedule"
TAINT_SCORE = [
    (
        "node with taints tolerated by the pod, gets a higher score than those node with intolerable taints",
        tolerating(("foo", "bar", PREFER)),
        [
            tainted_node("nodeA", ("foo", "bar", PREFER)),
            tainted_node("nodeB", ("foo", "blah", PREFER)),
        ],
        [100, 0],
    ),
    (
        "the nodes that all of their taints are tolerated by the pod, get the same score, no matter how many tolerable taints a node has",
        tolerating(("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        [
            tainted_node("nodeA"),
            tainted_node("nodeB", ("cpu-type", "arm64", PREFER)),
            tainted_node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        [100, 100, 100],
    ),
    (
        "the more intolerable taints a node has, the lower score it gets.",
        tolerating(("foo", "bar", PREFER)),
        [
            tainted_node("nodeA"),
            tainted_node("nodeB", ("cpu-type", "arm64", PREFER)),
            tainted_node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        [100, 50, 0],
    ),
    (
        "only taints and tolerations that have effect PreferNoSchedule are checked by taints-tolerations priority function",
        tolerating(("cpu-type", "arm64", "NoSchedule"), ("disk-type", "ssd", "NoSchedule")),
        [
            tainted_node("nodeA"),
            tainted_node("nodeB", ("cpu-type", "arm64", "NoSchedule")),
            tainted_node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        [100, 100, 0],
    ),
    (
        "Default behaviour No taints and tolerations, lands on node with no taints",
        tolerating(),
        [tainted_node("nodeA"), tainted_node("nodeB", ("cpu-type", "arm64", PREFER))],
        [100, 0],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "want"), TAINT_SCORE, ids=[c[0] for c in TAINT_SCORE]
)
def test_taint_toleration_score(name, pod, nodes, want) -> None:
    """Upstream's TestTaintTolerationScore (tainttoleration/taint_toleration_test.go)."""
    infos = snapshot([], nodes)
    scores = plugin_scores(pod, infos, Cycle(pod, infos))["TaintToleration"]
    assert [scores[n.name] for n in nodes] == want


MB = imagelocality.MB
NODE_40_300_2000 = (
    (("gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"), 40 * MB),
    (("gcr.io/300:latest", "gcr.io/300:v1"), 300 * MB),
    (("gcr.io/2000:latest",), 2000 * MB),
)
NODE_250_10 = ((("gcr.io/250:latest",), 250 * MB), (("gcr.io/10:latest", "gcr.io/10:v1"), 10 * MB))
IMAGE_LOCALITY = [
    (
        "two images spread on two nodes, prefer the larger image one",
        ["gcr.io/40", "gcr.io/250"],
        2,
        [0, 5],
    ),
    ("two images on one node, prefer this node", ["gcr.io/40", "gcr.io/300"], 2, [7, 0]),
    ("if exceed limit, use limit", ["gcr.io/10", "gcr.io/2000"], 2, [49, 0]),
    (
        "if exceed limit, use limit (with node which has no images present)",
        ["gcr.io/10", "gcr.io/2000"],
        3,
        [32, 0, 0],
    ),
]


@pytest.mark.parametrize(
    ("name", "images", "count", "want"), IMAGE_LOCALITY, ids=[c[0] for c in IMAGE_LOCALITY]
)
def test_image_locality_priority(name, images, count, want) -> None:
    """Upstream's TestImageLocalityPriority (imagelocality/image_locality_test.go), its cases
    and nodes; the expected scores follow today's formula (the maximum is 1000 MB per
    container), which the stored copy of the table predates (it divided by 1000 MB)."""
    nodes = [
        make_node("machine1", images=NODE_40_300_2000),
        make_node("machine2", images=NODE_250_10),
        make_node("machine3"),
    ][:count]
    pod = make_pod(images=images)
    infos = snapshot([], nodes)
    assert [imagelocality.score(pod, info, count) for info in infos] == want


@pytest.mark.parametrize(
    ("image", "normalized"),
    [
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        ("root@sha256:" + "0" * 64, "root@sha256:" + "0" * 64),
    ],
    ids=["add :latest postfix 1", "add :latest postfix 2", "keep it as is 1", "keep it as is 2"],
)
def test_normalized_image_name(image, normalized) -> None:
    assert imagelocality.normalized_image_name(image) == normalized


CPU_ONLY = [{"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"}]
CPU_AND_MEMORY = [{"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}]
BALANCED = [
    ("nothing scheduled, nothing requested", [], [(4000, 10000), (4000, 10000)], [], [100, 100]),
    (
        "nothing scheduled, resources requested, differently sized machines",
        CPU_AND_MEMORY,
        [(4000, 10000), (6000, 10000)],
        [],
        [87, 100],
    ),
    (
        "no resources requested, pods scheduled",
        [],
        [(4000, 10000), (4000, 10000)],
        [("machine1", []), ("machine1", []), ("machine2", []), ("machine2", [])],
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        [],
        [(10000, 20000), (10000, 20000)],
        [
            ("machine1", CPU_ONLY),
            ("machine1", CPU_ONLY),
            ("machine2", CPU_ONLY),
            ("machine2", CPU_AND_MEMORY),
        ],
        [70, 82],
    ),
    (
        "resources requested, pods scheduled with resources",
        CPU_AND_MEMORY,
        [(10000, 20000), (10000, 20000)],
        [("machine1", CPU_ONLY), ("machine2", CPU_AND_MEMORY)],
        [82, 95],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized machines",
        CPU_AND_MEMORY,
        [(10000, 20000), (10000, 50000)],
        [("machine1", CPU_ONLY), ("machine2", CPU_AND_MEMORY)],
        [82, 80],
    ),
    (
        "requested resources exceed node capacity",
        CPU_ONLY,
        [(4000, 10000), (4000, 10000)],
        [("machine1", CPU_ONLY), ("machine2", CPU_AND_MEMORY)],
        [50, 75],
    ),
]


@pytest.mark.parametrize(
    ("name", "requests", "nodes", "existing", "want"), BALANCED, ids=[c[0] for c in BALANCED]
)
def test_node_resources_balanced_allocation(name, requests, nodes, existing, want) -> None:
    """Upstream's TestNodeResourcesBalancedAllocation (noderesources/
    balanced_allocation_test.go): its cases, with the scores of today's formula
    ``(1 - std) * 100``, fractions capped at 1, which the stored copy of the table predates
    (it scored ``1 - |cpu - memory|``); its volume-count case went with that feature."""
    node_list = [
        make_node(f"machine{i + 1}", allocatable=capacity(f"{cpu}m", str(mem)))
        for i, (cpu, mem) in enumerate(nodes)
    ]
    pods = [make_pod(node=n, requests=r) for n, r in existing]
    pod = make_pod(requests=requests)
    assert [noderesources.balanced_allocation(pod, i) for i in snapshot(pods, node_list)] == want
