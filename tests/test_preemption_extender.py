"""The extender keeps the room kube-scheduler's preemption freed (issue 41 follow-up, item 2):
kube-scheduler picks the node after the preempt verb, so the nomination is held when the
preemptor's next filter call carries ``status.nominatedNodeName``; from then on no replica's
claim (the bind verb's ``assume_pod(check_fit=True)``) of a pod of lower or equal priority
takes the room. Every backend (fakeredis, Redis, Redis Cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict
from schedcache.extender.protocol import filter_args
from schedcache.extender.service import Extender
from schedcache.model.values import Pod
from schedcache.store.nominations import read_nomination
from tests.factories import make_node, make_pod
from tests.test_preemption import pending_pod


def nominated(name: str, cpu: str, priority: int, node_name: str) -> dict[str, Any]:
    manifest = pending_pod(name, cpu, priority)
    manifest["status"] = {"nominatedNodeName": node_name}
    return manifest


def filter_call(extender: Extender, manifest: dict[str, Any]) -> Any:
    return extender.filter(filter_args({"Pod": manifest, "NodeNames": ["n1", "n2"]}))


def test_a_nominated_preemptors_filter_call_holds_its_room_for_every_replica(
    make_cache: Any,
) -> None:
    """Two extender replicas on one cache. Before: nothing held the room, and the other
    replica's priority-0 pod took it."""
    first, second = make_cache(replica="a"), make_cache(replica="b")
    first.add_node(make_node("n1", cpu="4", mem="8Gi"))
    first.add_node(make_node("n2", cpu="1", mem="8Gi"))
    first.add_pod(make_pod("bound", "n1", cpu="2", mem="1Gi"))
    a, b = Extender(first), Extender(second)
    filter_call(a, nominated("pre", "2", 1000, "n1"))
    held = read_nomination(second.store, "uid-pre")
    assert held is not None and held[0] == "n1"
    filter_call(b, pending_pod("low", "1", 0))  # a pod without a nomination holds nothing
    low = Pod.from_k8s(pending_pod("low", "1", 0)).with_node("n1")
    with pytest.raises(FitConflict) as refused:
        second.assume_pod(low, check_fit=True)
    assert refused.value.reasons == ("nominated",)
    # a second attempt does not push the deadline back; the nominee itself lands
    filter_call(b, nominated("pre", "2", 1000, "n1"))
    assert read_nomination(first.store, "uid-pre") == held
    pre = Pod.from_k8s(pending_pod("pre", "2", 1000)).with_node("n1")
    second.assume_pod(pre, check_fit=True)
    assert read_nomination(first.store, "uid-pre") is None


def test_a_nomination_to_an_unknown_node_is_not_held(cache: Cache) -> None:
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    filter_call(Extender(cache), nominated("pre", "2", 1000, "gone"))
    assert read_nomination(cache.store, "uid-pre") is None
