"""kube-scheduler's cache tests (pkg/scheduler/internal/cache/cache_test.go, v1.25 era), ported.

Pods are built like upstream's ``makeBasePod``: uid = name, namespace ``node_info_cache_test``,
one container, cpu and memory set only when cpu is given. Where upstream compares a whole
``NodeInfo`` we compare requested, non-zero requested, the pods in order and the host ports.
Upstream orders a node's pods by swap-remove; we keep insertion order (see the README).
"""

from __future__ import annotations

import pytest

from schedcache import Cache, NodeInfo
from schedcache.errors import (
    InvalidTransition,
    NodeNotFound,
    PodAlreadyExists,
    PodNotAssumed,
    PodNotFound,
)
from tests.factories import make_node, make_pod, port

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

NOW = 1_700_000_000.0
MIB = 1024 * 1024


def expect_node(
    info: NodeInfo,
    *,
    requested: tuple[int, int],
    non_zero: tuple[int, int],
    pods: list[str],
    ports: set[tuple[str, str, int]],
    scalars: dict[str, int] | None = None,
) -> None:
    assert (info.requested.milli_cpu, info.requested.memory) == requested
    assert (info.non_zero_requested.milli_cpu, info.non_zero_requested.memory) == non_zero
    assert [pod.uid for pod in info.pods] == pods
    assert info.used_ports == ports
    assert info.requested.scalar_resources == (scalars or {})


def assert_no_entry(cache: Cache, node: str) -> None:
    with pytest.raises(NodeNotFound):
        cache.get_node_info(node)


# Upstream's shared pods (node "node").
def p_test():
    return make_pod("test", cpu="100m", mem="500", ports=[port(80, "127.0.0.1", "TCP")])


def p_test_1():
    return make_pod("test-1", cpu="100m", mem="500", ports=[port(80, "127.0.0.1", "TCP")])


def p_test_2():
    return make_pod("test-2", cpu="200m", mem="1Ki", ports=[port(8080, "127.0.0.1", "TCP")])


def p_nonzero():
    return make_pod("test-nonzero", ports=[port(80, "127.0.0.1", "TCP")])


def p_ext(cpu="100m", mem="500", foo="3", name="test", host_port=80):
    return make_pod(
        name,
        cpu=cpu,
        mem=mem,
        extended={"example.com/foo": foo},
        ports=[port(host_port, "127.0.0.1", "TCP")],
    )


def p_invalid_ext():
    return make_pod(
        "test",
        cpu="100m",
        mem="500",
        extended={"random-invalid-extended-key": "100"},
        ports=[{}],
    )


LOCAL80 = ("127.0.0.1", "TCP", 80)
LOCAL8080 = ("127.0.0.1", "TCP", 8080)

ASSUME_CASES = {
    "one pod": ([p_test], (100, 500), (100, 500), {LOCAL80}, {}),
    "two pods": ([p_test_1, p_test_2], (300, 1524), (300, 1524), {LOCAL80, LOCAL8080}, {}),
    "non-zero defaults": ([p_nonzero], (0, 0), (100, 200 * MIB), {LOCAL80}, {}),
    "extended resource": ([p_ext], (100, 500), (100, 500), {LOCAL80}, {"example.com/foo": 3}),
    "two extended resources": (
        [p_ext, lambda: p_ext("200m", "1Ki", "5", "test-2", 8080)],
        (300, 1524),
        (300, 1524),
        {LOCAL80, LOCAL8080},
        {"example.com/foo": 8},
    ),
    "invalid extended key and empty port": ([p_invalid_ext], (100, 500), (100, 500), set(), {}),
}


@pytest.mark.parametrize("case", ASSUME_CASES, ids=list(ASSUME_CASES))
def test_assume_pod_scheduled(make_cache, case):
    """TestAssumePodScheduled: assume books the pod; assuming again fails; forget undoes it."""
    builders, requested, non_zero, ports, scalars = ASSUME_CASES[case]
    cache = make_cache(ttl=1.0)
    pods = [build() for build in builders]
    for pod in pods:
        cache.assume_pod(pod)
        with pytest.raises(PodAlreadyExists, match="is already assumed on node node"):
            cache.assume_pod(pod)
    expect_node(
        cache.get_node_info("node"),
        requested=requested,
        non_zero=non_zero,
        pods=[pod.uid for pod in pods],
        ports=ports,
        scalars=scalars,
    )
    for pod in pods:
        cache.forget_pod(pod)
        assert not cache.is_assumed_pod(pod)
        with pytest.raises(PodNotFound):
            cache.get_pod(pod)
    assert_no_entry(cache, "node")  # the placeholder left with its last pod


def t1():
    return make_pod("test-1", cpu="100m", mem="500", ports=[port(80)])


def t2():
    return make_pod("test-2", cpu="200m", mem="1Ki", ports=[port(8080)])


def t3():
    return make_pod("test-3", cpu="200m", mem="1Ki", ports=[port(8080)])


ANY80 = ("0.0.0.0", "TCP", 80)
ANY8080 = ("0.0.0.0", "TCP", 8080)


def test_expire_assumed_pod_after_ttl(make_cache):
    cache = make_cache(ttl=10.0)
    cache.assume_pod(t1())
    cache.finish_binding(t1(), now=NOW)
    assert cache.cleanup_assumed_pods(now=NOW + 20) == ["test-1"]
    assert_no_entry(cache, "node")
    assert cache.pod_count() == 0


def test_expire_only_pods_past_deadline_with_binding_finished(make_cache):
    cache = make_cache(ttl=10.0)
    for pod in (t1(), t2(), t3()):
        cache.assume_pod(pod)
    cache.finish_binding(t1(), now=NOW)
    cache.finish_binding(t2(), now=NOW + 15)
    # t3's binding never finished: it must not expire whatever the clock says.
    assert cache.cleanup_assumed_pods(now=NOW + 20) == ["test-1"]
    expect_node(
        cache.get_node_info("node"),
        requested=(400, 2048),
        non_zero=(400, 2048),
        pods=["test-2", "test-3"],
        ports={ANY8080},
    )
    assert cache.cleanup_assumed_pods(now=NOW + 1000) == ["test-2"]
    assert cache.is_assumed_pod(t3())


def test_assumed_pod_never_expires_with_ttl_zero(make_cache):
    cache = make_cache(ttl=0)
    cache.assume_pod(t1())
    cache.finish_binding(t1(), now=NOW)
    assert cache.cleanup_assumed_pods(now=NOW + 30) == []
    expect_node(
        cache.get_node_info("node"),
        requested=(100, 500),
        non_zero=(100, 500),
        pods=["test-1"],
        ports={ANY80},
    )


def test_expiry_is_strictly_after_the_deadline(make_cache):
    cache = make_cache(ttl=10.0)
    cache.assume_pod(t1())
    cache.finish_binding(t1(), now=NOW)
    assert cache.cleanup_assumed_pods(now=NOW + 10) == []
    assert cache.cleanup_assumed_pods(now=NOW + 10.001) == ["test-1"]


def test_add_pod_confirms_assumed_pod(make_cache):
    """TestAddPodWillConfirm: a confirmed pod no longer expires; the other one does."""
    cache = make_cache(ttl=10.0)
    for pod in (t1(), t2()):
        cache.assume_pod(pod)
        cache.finish_binding(pod, now=NOW)
    cache.add_pod(t1())
    with pytest.raises(PodAlreadyExists, match="already added"):
        cache.add_pod(t1())
    assert cache.cleanup_assumed_pods(now=NOW + 20) == ["test-2"]
    expect_node(
        cache.get_node_info("node"),
        requested=(100, 500),
        non_zero=(100, 500),
        pods=["test-1"],
        ports={ANY80},
    )
    assert not cache.is_assumed_pod(t1())


def test_dump(make_cache):
    """TestDump: every node entry and the assumed set, as the cache holds them."""
    cache = make_cache(ttl=10.0)
    second = make_pod("test-2", cpu="200m", mem="1Ki", ports=[port(80)])
    for pod in (t1(), second):
        cache.assume_pod(pod)
        cache.finish_binding(pod, now=NOW)
    cache.add_pod(t1())
    dump = cache.dump()
    assert set(dump.nodes) == {"node"}
    assert dump.assumed_pods == {"test-2"}
    info = dump.nodes["node"]
    assert info == cache.get_node_info("node")
    assert [pod.uid for pod in info.pods] == ["test-2", "test-1"]
    assert info.used_ports == {ANY80}  # two pods on one port: still one entry
    assert info.node is None  # pods arrived before their node: a placeholder


def test_add_pod_always_updates_pod_info_in_node_info(make_cache):
    cache = make_cache(ttl=10.0)
    assumed = make_pod("test-1", "node1", "100m", "500", ports=[port(80)])
    confirmed = make_pod(
        "test-1",
        "node1",
        "100m",
        "500",
        ports=[port(80)],
        conditions=[{"type": "PodScheduled", "status": "True"}],
    )
    cache.assume_pod(assumed)
    cache.finish_binding(assumed, now=NOW)
    cache.add_pod(confirmed)
    info = cache.get_node_info("node1")
    assert info.pods == [confirmed]
    assert cache.get_pod(assumed) == confirmed
    expect_node(info, requested=(100, 500), non_zero=(100, 500), pods=["test-1"], ports={ANY80})


def test_add_pod_on_another_node_than_assumed_moves_it(make_cache):
    """TestAddPodWillReplaceAssumed, with the check upstream misspelled made for real."""
    cache = make_cache(ttl=10.0)
    assumed = make_pod("test-1", "assumed-node-1", "100m", "500", ports=[port(80)])
    added = make_pod("test-1", "actual-node", "100m", "500", ports=[port(80)])
    updated = make_pod("test-1", "actual-node", "200m", "500", ports=[port(90)])
    cache.assume_pod(assumed)
    cache.finish_binding(assumed, now=NOW)
    cache.add_pod(added)
    cache.update_pod(added, updated)
    expect_node(
        cache.get_node_info("actual-node"),
        requested=(200, 500),
        non_zero=(200, 500),
        pods=["test-1"],
        ports={("0.0.0.0", "TCP", 90)},
    )
    assert_no_entry(cache, "assumed-node-1")
    assert not cache.is_assumed_pod(added)
    assert cache.cleanup_assumed_pods(now=NOW + 100) == []


def test_add_pod_after_expiration(make_cache):
    cache = make_cache(ttl=10.0)
    base = make_pod("test", cpu="100m", mem="500", ports=[port(80, "127.0.0.1", "TCP")])
    cache.assume_pod(base)
    cache.finish_binding(base, now=NOW)
    assert cache.cleanup_assumed_pods(now=NOW + 20) == ["test"]
    assert not cache.is_assumed_pod(base)
    with pytest.raises(PodNotFound):
        cache.get_pod(base)
    cache.add_pod(base)
    expect_node(
        cache.get_node_info("node"),
        requested=(100, 500),
        non_zero=(100, 500),
        pods=["test"],
        ports={LOCAL80},
    )


def u0():
    return make_pod("test", cpu="100m", mem="500", ports=[port(80)])


def u1():
    return make_pod("test", cpu="200m", mem="1Ki", ports=[port(8080)])


def check_update_round_trip(cache: Cache) -> None:
    cache.update_pod(u0(), u1())
    expect_node(
        cache.get_node_info("node"),
        requested=(200, 1024),
        non_zero=(200, 1024),
        pods=["test"],
        ports={ANY8080},
    )
    cache.update_pod(u1(), u0())
    expect_node(
        cache.get_node_info("node"),
        requested=(100, 500),
        non_zero=(100, 500),
        pods=["test"],
        ports={ANY80},
    )


def test_update_pod(make_cache):
    cache = make_cache(ttl=10.0)
    cache.add_pod(u0())
    check_update_round_trip(cache)


def test_update_and_get_before_anything_fails(make_cache):
    cache = make_cache(ttl=10.0)
    with pytest.raises(PodNotFound, match="does not exist"):
        cache.get_pod(u0())
    with pytest.raises(PodNotFound, match="cannot be updated"):
        cache.update_pod(u0(), u1())


def test_get_assumed_pod(make_cache):
    cache = make_cache(ttl=10.0)
    cache.assume_pod(u0())
    assert cache.get_pod(u0()) == u0()


def test_get_updated_pod(make_cache):
    cache = make_cache(ttl=10.0)
    cache.add_pod(u0())
    cache.update_pod(u0(), u1())
    assert cache.get_pod(u0()) == u1()


def test_update_of_assumed_pod_fails(make_cache):
    cache = make_cache(ttl=10.0)
    cache.assume_pod(u0())
    with pytest.raises(InvalidTransition, match="is assumed, so it cannot be updated"):
        cache.update_pod(u0(), u1())


def test_expire_add_update_pod(make_cache):
    cache = make_cache(ttl=10.0)
    cache.assume_pod(u0())
    cache.finish_binding(u0(), now=NOW)
    assert cache.cleanup_assumed_pods(now=NOW + 20) == ["test"]
    cache.add_pod(u0())
    check_update_round_trip(cache)


def test_ephemeral_storage_resource(make_cache):
    cache = make_cache()
    pod = make_pod("pod-with-ephemeral-storage", namespace="default-namespace", ephemeral="500")
    cache.add_pod(pod)
    info = cache.get_node_info("node")
    assert info.requested.ephemeral_storage == 500
    assert (info.non_zero_requested.milli_cpu, info.non_zero_requested.memory) == (100, 200 * MIB)
    assert info.pods == [pod]
    cache.remove_pod(pod)
    with pytest.raises(PodNotFound):
        cache.get_pod(pod)


@pytest.mark.parametrize("arrival", ["assume_pod", "add_pod"])
def test_remove_pod_that_arrived_before_its_node(make_cache, arrival):
    cache = make_cache(ttl=1.0)
    pod = make_pod("test", "node-1", "100m", "500", ports=[port(80, "127.0.0.1", "TCP")])
    getattr(cache, arrival)(pod)
    expect_node(
        cache.get_node_info("node-1"),
        requested=(100, 500),
        non_zero=(100, 500),
        pods=["test"],
        ports={LOCAL80},
    )
    cache.add_node(make_node("node-1"))
    cache.add_node(make_node("node-2"))
    node_2_generation = cache.get_node_info("node-2").generation
    cache.remove_pod(pod)
    with pytest.raises(PodNotFound):
        cache.get_pod(pod)
    with pytest.raises(PodNotFound, match="cannot be removed"):
        cache.remove_pod(pod)
    # The node that lost the pod changed last (upstream: it moves to the head of the list).
    assert cache.get_node_info("node-1").generation > node_2_generation
    assert cache.get_node_info("node-1").node is not None


def test_forget_pod(make_cache):
    cache = make_cache(ttl=10.0)
    base = make_pod("test", cpu="100m", mem="500", ports=[port(80)])
    cache.assume_pod(base)
    cache.finish_binding(base, now=NOW)
    assert cache.is_assumed_pod(base)
    stored = cache.get_pod(base)
    assert (stored.namespace, stored.name) == (base.namespace, base.name)
    cache.forget_pod(base)
    assert not cache.is_assumed_pod(base)
    with pytest.raises(PodNotAssumed, match="not in the cache, not assumed"):
        cache.forget_pod(base)
    assert cache.cleanup_assumed_pods(now=NOW + 20) == []
    assert_no_entry(cache, "node")


def test_node_operations_with_ghosts(make_cache):
    """TestNodeOperators: add, update, remove with pods left (a ghost), then the pods go."""
    cache = make_cache()
    node = make_node("test-node", "1000m", "100m", extended={"example.com/foo": "1"})
    pod1 = make_pod("pod1", "test-node", "500m", "50m", ports=[port(80)])
    pod2 = make_pod("pod2", "test-node", "500m", "50m")
    cache.add_node(node)
    for pod in (pod1, pod2):
        cache.add_pod(pod)
    info = cache.get_node_info("test-node")
    assert info.node == node
    assert info.allocatable.milli_cpu == 1000
    assert info.allocatable.memory == 1  # "100m" bytes rounds up to 1
    assert info.allocatable.scalar_resources == {"example.com/foo": 1}
    assert (info.requested.milli_cpu, info.requested.memory) == (1000, 2)

    smaller = make_node("test-node", "1000m", "50m", extended={"example.com/foo": "1"})
    cache.update_node(node, smaller)
    updated = cache.get_node_info("test-node")
    assert updated.generation > info.generation
    assert updated.allocatable.memory == 1  # "50m" also rounds up to 1
    assert updated.node == smaller
    assert cache.node_count() == 1

    cache.remove_node(node)
    ghost = cache.get_node_info("test-node")
    assert ghost.node is None
    assert [pod.uid for pod in ghost.pods] == ["pod1", "pod2"]
    assert (ghost.requested.milli_cpu, ghost.requested.memory) == (1000, 2)
    with pytest.raises(NodeNotFound, match="already removed"):
        cache.remove_node(node)
    assert cache.node_count() == 1  # the ghost still counts, as upstream
    for pod in (pod1, pod2):
        assert cache.get_pod(pod) == pod
    for pod in (pod1, pod2):
        cache.remove_pod(pod)
        with pytest.raises(PodNotFound):
            cache.get_pod(pod)
    assert_no_entry(cache, "test-node")
    assert cache.node_count() == 0
