"""Zero-valued resources (every kubelet reports ``hugepages-1Gi: "0"``): the write path leaves
zero amounts out of the node hash, so the replay must too, or verify() reports a difference
per node of every real cluster."""

from __future__ import annotations

from pathlib import Path

from schedcache import Cache, load_k8s_file
from schedcache.feed.loader import load
from schedcache.model.values import Node
from tests.factories import make_node, make_pod

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kubectl-cluster.json"
ZERO_HUGEPAGES = {"hugepages-1Gi": "0", "hugepages-2Mi": "0"}


def test_the_kubectl_example_cluster_verifies_clean(cache: Cache):
    nodes = [o for o in load_k8s_file(EXAMPLE) if isinstance(o, Node)]
    assert any(n.allocatable.scalar_resources.get("hugepages-2Mi", 1) == 0 for n in nodes)
    report = load(cache, EXAMPLE.read_text(encoding="utf-8"))
    assert report.rejected == [] and report.invalid == []
    assert cache.pod_count() > 0 and cache.node_count() == len(nodes)
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes
    cache.checkpoint()  # and through a checkpoint
    assert cache.verify() == []


def test_zero_scalar_resources_in_allocatable_and_requests(cache: Cache):
    extended = {**ZERO_HUGEPAGES, "example.com/gpu": "2"}
    cache.add_node(make_node("n1", "4", "8Gi", extended=extended))
    zero_request = make_pod("a", "n1", "100m", "1Mi", extended={"hugepages-2Mi": "0"})
    gpu = make_pod("b", "n1", "100m", "1Mi", extended={"example.com/gpu": "1"})
    cache.add_pod(zero_request)
    cache.assume_pod(gpu, check_fit=True)
    info = cache.get_node_info("n1")
    assert info.allocatable.scalar_resources == {"example.com/gpu": 2}
    assert info.requested.scalar_resources == {"example.com/gpu": 1}
    assert cache.verify() == []
    cache.forget_pod(gpu)  # back to zero requested: the field goes
    assert cache.get_node_info("n1").requested.scalar_resources == {}
    assert cache.verify() == []


def test_a_node_updated_from_nonzero_to_zero_and_back(cache: Cache):
    before = make_node("n1", "4", "8Gi", extended={"hugepages-2Mi": "1Gi"})
    zero = make_node("n1", "4", "8Gi", extended=ZERO_HUGEPAGES)
    cache.add_node(before)
    cache.add_pod(make_pod("a", "n1", "100m", "1Mi", extended={"hugepages-2Mi": "2Mi"}))
    assert cache.verify() == []
    cache.update_node(before, zero)
    info = cache.get_node_info("n1")
    assert info.allocatable.scalar_resources == {}
    assert info.requested.scalar_resources == {"hugepages-2Mi": 2 << 20}
    assert cache.verify() == []
    cache.update_node(zero, before)
    assert cache.get_node_info("n1").allocatable.scalar_resources == {"hugepages-2Mi": 1 << 30}
    assert cache.verify() == []
    cache.remove_node("n1")  # a ghost keeps its allocatable, zero amounts left out all the same
    cache.update_node(None, zero)
    assert cache.verify() == []
