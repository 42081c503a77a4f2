"""The node tree: kube-scheduler's node_tree_test.go cases, on both backends.

Fixture nodes as upstream's ``allNodes`` (E-ref: ``topology.kubernetes.io`` labels, node-9 with
GA and beta labels, node-10 with beta labels only).
"""

from __future__ import annotations

import pytest

from schedcache import Cache, Node
from schedcache.errors import NodeNotFound
from schedcache.views.nodetree import interleave
from tests.factories import make_node, make_pod

REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
BETA_REGION, BETA_ZONE = (
    "failure-domain.beta.kubernetes.io/region",
    ("failure-domain.beta.kubernetes.io/zone"),
)

LABELS = {
    0: {},
    1: {REGION: "region-1"},
    2: {ZONE: "zone-2"},
    3: {REGION: "region-1", ZONE: "zone-2"},
    4: {REGION: "region-1", ZONE: "zone-2"},
    5: {REGION: "region-1", ZONE: "zone-3"},
    6: {REGION: "region-2", ZONE: "zone-2"},
    7: {REGION: "region-2", ZONE: "zone-2"},
    8: {REGION: "region-2", ZONE: "zone-2"},
    9: {REGION: "region-2", ZONE: "zone-2", BETA_REGION: "region-2", BETA_ZONE: "zone-2"},
    10: {BETA_REGION: "region-2", BETA_ZONE: "zone-3"},
}

NONE, R1, Z2 = "", "region-1:\x00:", ":\x00:zone-2"
R1Z2, R1Z3, R2Z2, R2Z3 = (
    "region-1:\x00:zone-2",
    "region-1:\x00:zone-3",
    "region-2:\x00:zone-2",
    "region-2:\x00:zone-3",
)


def node(i: int, labels: dict[str, str] | None = None) -> Node:
    return make_node(f"node-{i}", labels=LABELS[i] if labels is None else labels)


def names(*indexes: int) -> list[str]:
    return [f"node-{i}" for i in indexes]


def add(cache: Cache, *indexes: int) -> None:
    for i in indexes:
        cache.add_node(node(i))


def remove(cache: Cache, *indexes: int) -> None:
    for i in indexes:
        cache.remove_node(f"node-{i}")


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        ([0], {NONE: names(0)}),
        ([0, 0], {NONE: names(0)}),
        ([0, 1, 2, 3], {NONE: names(0), R1: names(1), Z2: names(2), R1Z2: names(3)}),
        (
            [0, 1, 2, 3, 4, 5, 6],
            {
                NONE: names(0),
                R1: names(1),
                Z2: names(2),
                R1Z2: names(3, 4),
                R1Z3: names(5),
                R2Z2: names(6),
            },
        ),
        ([9, 10], {R2Z2: names(9), R2Z3: names(10)}),
    ],
    ids=["single node", "same node twice", "mixed labels", "multiple per zone", "beta labels"],
)
def test_add_node(cache, added, expected):
    add(cache, *added)
    assert cache.node_tree().zones() == expected
    assert cache.node_tree().num_nodes() == sum(len(v) for v in expected.values())


@pytest.mark.parametrize(
    ("removed", "expected"),
    [
        ([0], {R1: names(1), Z2: names(2), R1Z2: names(3, 4), R1Z3: names(5), R2Z2: names(6)}),
        ([1, 2, 3], {NONE: names(0), R1Z2: names(4), R1Z3: names(5), R2Z2: names(6)}),
        ([0, 1, 2, 3, 4, 5, 6], {}),
    ],
    ids=["one", "several", "all"],
)
def test_remove_node(cache, removed, expected):
    add(cache, 0, 1, 2, 3, 4, 5, 6)
    remove(cache, *removed)
    assert cache.node_tree().zones() == expected


def test_removing_from_an_empty_tree_fails_every_time(cache):
    for i in range(5):
        with pytest.raises(NodeNotFound):
            cache.remove_node(f"node-{i}")
    assert cache.node_tree().zones() == {}


def test_update_node_changing_zone_moves_it_to_the_end_of_the_new_zone(cache):
    add(cache, 0, 1, 2, 3, 4, 5, 6)
    cache.update_node(node(0), node(0, {REGION: "region-1", ZONE: "zone-2"}))
    zones = cache.node_tree().zones()
    assert zones[R1Z2] == names(3, 4, 0)
    assert NONE not in zones


def test_update_node_of_the_only_node(cache):
    add(cache, 0)
    cache.update_node(node(0), node(0, {REGION: "region-1", ZONE: "zone-2"}))
    assert cache.node_tree().zones() == {R1Z2: names(0)}


def test_update_of_a_non_existing_node_adds_it(cache):
    add(cache, 0)
    cache.update_node(None, make_node("node-new", labels={REGION: "region-1", ZONE: "zone-2"}))
    assert cache.node_tree().zones() == {NONE: names(0), R1Z2: ["node-new"]}


def test_update_without_zone_change_keeps_the_position(cache):
    add(cache, 3, 4)
    cache.update_node(node(3), make_node("node-3", "2", labels=LABELS[3]))
    assert cache.node_tree().zones() == {R1Z2: names(3, 4)}


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        ([], []),
        ([0], names(0)),
        ([0, 1, 2, 3], names(0, 1, 2, 3)),
        ([0, 1, 2, 3, 4, 5, 6, 7, 8], names(0, 1, 2, 3, 5, 6, 4, 7, 8)),
    ],
    ids=["empty", "one", "four zones", "nine nodes six zones"],
)
def test_list(cache, added, expected):
    add(cache, *added)
    assert cache.node_tree().list() == expected


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        ([("add", [2, 3, 4]), ("remove", [2, 3, 4])], []),
        ([("add", [2, 3, 4]), ("remove", [2])], names(3, 4)),
        ([("add", [2, 3, 4]), ("remove", [2, 3, 4]), ("add", [5])], names(5)),
        ([("add", [4, 5, 6, 7, 8, 3])], names(4, 5, 6, 3, 7, 8)),
        ([("add", [3, 4]), ("remove", [3]), ("add", [6, 7]), ("remove", [4])], names(6, 7)),
    ],
)
def test_list_after_operations(cache, operations, expected):
    for operation, indexes in operations:
        (add if operation == "add" else remove)(cache, *indexes)
    assert cache.node_tree().list() == expected


def test_an_emptied_zone_returns_at_the_end(cache):
    add(cache, 0, 2, 5)
    remove(cache, 0)
    add(cache, 0)
    assert list(cache.node_tree().zones()) == [Z2, R1Z3, NONE]
    assert cache.node_tree().list() == names(2, 5, 0)


def test_ghosts_and_placeholders_are_not_in_the_tree(cache):
    add(cache, 0, 2)
    cache.add_pod(make_pod("p", "node-2"))
    cache.add_pod(make_pod("q", "later"))
    remove(cache, 2)
    assert cache.node_tree().list() == names(0)
    cache.add_node(node(2))  # reviving the ghost puts it back, at the end of its zone
    assert cache.node_tree().list() == names(0, 2)


@pytest.mark.parametrize(
    ("added", "calls", "expected"),
    [
        ([], 2, ["", ""]),
        ([0], 2, names(0, 0)),
        ([0, 1, 2, 3], 5, names(0, 1, 2, 3, 0)),
        ([0, 1, 2, 3, 4, 5, 6, 7, 8], 11, names(0, 1, 2, 3, 5, 6, 4, 7, 8, 0, 1)),
    ],
    ids=["empty", "one", "four zones", "nine nodes six zones"],
)
def test_next(cache, added, calls, expected):
    add(cache, *added)
    tree = cache.node_tree()
    assert [tree.next() for _ in range(calls)] == expected


def run_next_script(cache: Cache, script: list[tuple[str, int | None]]) -> list[str]:
    out = []
    for step, index in script:
        if step == "add":
            add(cache, index)
        elif step == "remove":
            remove(cache, index)
        else:
            out.append(cache.node_tree().next())
    return out


NEXT = ("next", None)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (
            [
                *[("add", 2), ("add", 3), NEXT, ("add", 4)],
                *[("remove", 2), ("remove", 3), ("remove", 4), NEXT],
            ],
            ["node-2", ""],
        ),
        (
            [("add", 2), ("add", 3), NEXT, ("add", 4), ("remove", 2), ("remove", 3), NEXT],
            names(2, 4),
        ),
        (
            [("add", 2), ("add", 3), NEXT, NEXT, ("add", 4), ("remove", 2), ("remove", 3), NEXT],
            names(2, 3, 4),
        ),
        (
            [("add", i) for i in (4, 5, 6, 7, 8)] + [NEXT] * 4 + [("add", 3)] + [NEXT] * 3,
            names(4, 5, 6, 7, 3, 8, 4),
        ),
        (
            [
                *[("add", 3), ("add", 4), NEXT, NEXT, ("remove", 3), ("add", 6), ("add", 7)],
                *[NEXT, NEXT, ("remove", 4), NEXT, NEXT],
            ],
            names(3, 4, 6, 7, 6, 7),
        ),
    ],
    ids=[
        "add and remove all nodes between two next calls",
        "add and remove some nodes between two next calls",
        "remove nodes already iterated on and add new nodes",
        "add more nodes to an exhausted zone",
        "remove zone and add new to ensure exhausted is reset correctly",
    ],
)
def test_next_between_operations(cache, script, expected):
    assert run_next_script(cache, script) == expected


def test_replicas_share_one_cursor(make_cache):
    first, second = make_cache(replica="sched-0"), make_cache(replica="sched-1")
    add(first, 0, 1, 2, 3)
    taken = [(first if i % 2 == 0 else second).node_tree().next() for i in range(8)]
    assert taken == names(0, 1, 2, 3, 0, 1, 2, 3)


def test_interleave_handles_uneven_zones():
    assert interleave([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]) == [
        "a1",
        "b1",
        "c1",
        "a2",
        "c2",
        "a3",
    ]
    assert interleave([]) == []
