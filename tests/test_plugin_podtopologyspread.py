"""PodTopologySpread's filter, from upstream's TestSingleConstraint table
(pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go), case names kept; status
codes per node as upstream asserts them. Upstream's "terminating Pods should be excluded" is
left out: the cache keeps no deletionTimestamp (docs/constraints.md)."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache.model.plugins import podtopologyspread
from tests.plugin_tables import make_node, make_pod, snapshot, statuses

OK, NO, NEVER = "Success", "Unschedulable", "UnschedulableAndUnresolvable"
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}


def constraint(
    skew: int, key: str, selector: dict[str, Any] | None, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule"}
    if selector is not None:
        c["labelSelector"] = selector
    c.update(extra)
    return c


def incoming(*constraints: dict[str, Any], labels: dict[str, str] | None = None, **kwargs: Any):
    return make_pod(
        "p", labels={"foo": ""} if labels is None else labels, spread=list(constraints), **kwargs
    )


def zone_nodes(names: str = "abxy") -> list[Any]:
    zones = {"a": "zone1", "b": "zone1", "x": "zone2", "y": "zone2"}
    return [make_node(f"node-{n}", {"zone": zones[n], "node": f"node-{n}"}) for n in names]


def foo_pods(*placements: str, namespace: str = "") -> list[Any]:
    """``"a1"``: pod p-a1 with label foo on node-a."""
    return [make_pod(f"p-{p}", namespace, {"foo": ""}, f"node-{p[0]}") for p in placements]


SPREAD_2103 = foo_pods("a1", "a2", "b1", "y1", "y2", "y3")
NODE_ONLY = [make_node(f"node-{n}", {"node": f"node-{n}"}) for n in "abc"]
SPREAD_221 = foo_pods("a1", "a2", "b1", "b2", "c1")
FOO_NODES = [make_node(f"node-{n}", {"node": f"node-{n}", "foo": ""}) for n in "abx"] + [
    make_node("node-y", {"node": "node-y"})
]
SPREAD_110 = [
    make_pod("p-b1", "", {"foo": ""}, "node-a"),
    make_pod("p-b2", "", {"foo": ""}, "node-b"),
    make_pod("p-y1", "", {"foo": ""}, "node-y"),
]


def node_affinity(key: str, op: str, values: list[str]) -> list[dict[str, Any]]:
    return [{"matchExpressions": [{"key": key, "operator": op, "values": values}]}]


def with_node_affinity(pod_constraint: dict[str, Any], terms: list[dict[str, Any]]):
    from schedcache.model.values import Pod

    manifest = {
        "metadata": {"name": "p", "uid": "uid-incoming", "labels": {"foo": ""}},
        "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [pod_constraint],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            },
        },
    }
    return Pod.from_k8s(manifest)


SINGLE_CONSTRAINT = [
    (
        "no existing pods",
        incoming(constraint(1, "zone", FOO)),
        zone_nodes(),
        [],
        [OK, OK, OK, OK],
    ),
    (
        "no existing pods, incoming pod doesn't match itself",
        incoming(constraint(1, "zone", BAR)),
        zone_nodes(),
        [],
        [OK, OK, OK, OK],
    ),
    (
        "existing pods in a different namespace do not count",
        incoming(constraint(1, "zone", FOO)),
        zone_nodes(),
        [
            make_pod("p-a1", "ns1", {"foo": ""}, "node-a"),
            make_pod("p-b1", "ns2", {"foo": ""}, "node-a"),
            *foo_pods("x1", "y1"),
        ],
        [OK, OK, NO, NO],
    ),
    (
        "existing pods do not match null selector",
        incoming(constraint(1, "zone", None)),
        zone_nodes(),
        foo_pods("x1", "y1"),
        [OK, OK, OK, OK],
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        incoming(constraint(1, "zone", FOO)),
        zone_nodes(),
        SPREAD_2103,
        [OK, OK, OK, OK],
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        incoming(constraint(1, "zone", FOO)),
        [
            make_node("node-a", {"zone": "zone1", "node": "node-a"}),
            make_node("node-b", {"zon": "zone1", "node": "node-b"}),
            make_node("node-x", {"zone": "zone2", "node": "node-x"}),
            make_node("node-y", {"zone": "zone2", "node": "node-y"}),
        ],
        foo_pods("a1", "b1", "x1", "y1"),
        [OK, NEVER, NO, NO],
    ),
    (
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        incoming(constraint(1, "rack", FOO)),
        zone_nodes("ax"),
        [],
        [NEVER, NEVER],
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        incoming(constraint(1, "node", FOO)),
        zone_nodes(),
        SPREAD_2103,
        [NO, NO, OK, NO],
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        incoming(constraint(2, "node", FOO)),
        zone_nodes(),
        SPREAD_2103,
        [NO, OK, OK, NO],
    ),
    (
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        incoming(constraint(1, "node", FOO), labels={"bar": ""}),
        zone_nodes(),
        SPREAD_2103,
        [NO, OK, OK, NO],
    ),
    (
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        with_node_affinity(
            constraint(1, "node", FOO), node_affinity("node", "In", ["node-a", "node-y"])
        ),
        zone_nodes(),
        SPREAD_2103,
        [OK, OK, OK, NO],
    ),
    (
        "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
        with_node_affinity(constraint(1, "zone", FOO), node_affinity("node", "NotIn", ["node-b"])),
        zone_nodes(),
        foo_pods("b1", "b2", "y1"),
        [OK, OK, NO, NO],
    ),
    (
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
        incoming(constraint(2, "node", FOO, minDomains=4)),
        NODE_ONLY,
        SPREAD_221,
        [NO, NO, OK],
    ),
    (
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
        incoming(constraint(2, "node", FOO, minDomains=2)),
        NODE_ONLY,
        SPREAD_221,
        [OK, OK, OK],
    ),
    (
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
        incoming(constraint(2, "zone", FOO, minDomains=3)),
        zone_nodes(),
        [
            make_pod("p-b1", "", {"foo": ""}, "node-a"),
            make_pod("p-b2", "", {"foo": ""}, "node-b"),
            make_pod("p-y1", "", {"foo": ""}, "node-y"),
        ],
        [NO, NO, OK, OK],
    ),
    (
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
        incoming(constraint(2, "zone", FOO, minDomains=1)),
        zone_nodes(),
        [
            make_pod("p-b1", "", {"foo": ""}, "node-a"),
            make_pod("p-b2", "", {"foo": ""}, "node-b"),
            make_pod("p-y1", "", {"foo": ""}, "node-y"),
        ],
        [OK, OK, OK, OK],
    ),
    (
        "NodeAffinityPolicy honored with labelSelectors",
        incoming(constraint(1, "node", FOO), node_selector={"foo": ""}),
        FOO_NODES,
        SPREAD_110,
        [NO, NO, OK, OK],
    ),
    (
        "NodeAffinityPolicy ignored with labelSelectors",
        incoming(
            constraint(1, "node", FOO, nodeAffinityPolicy="Ignore"), node_selector={"foo": ""}
        ),
        FOO_NODES,
        SPREAD_110,
        [NO, NO, OK, NO],
    ),
    (
        "NodeAffinityPolicy honored with nodeAffinity",
        with_node_affinity(constraint(1, "node", FOO), node_affinity("foo", "In", [""])),
        FOO_NODES,
        SPREAD_110,
        [NO, NO, OK, OK],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "pods", "want"),
    SINGLE_CONSTRAINT,
    ids=[c[0] for c in SINGLE_CONSTRAINT],
)
def test_single_constraint(name, pod, nodes, pods, want) -> None:
    got = statuses(podtopologyspread.filter, pod, snapshot(pods, nodes))
    assert [OK if s is None else s[0] for s in got] == want
