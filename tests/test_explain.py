"""``schedcache explain pod``: each claim of a pod against the state it ran on, on every
backend."""

from __future__ import annotations

from schedcache import Cache, Node
from schedcache.sim.explain import explain
from tests.factories import make_node, make_pod, node_manifest


def cluster(cache: Cache) -> None:
    cache.add_node(make_node("big", "2", "8Gi"))
    cache.add_node(make_node("small", "200m", "8Gi"))
    tainted = node_manifest("gpu", "8", "8Gi")
    tainted["spec"] = {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}
    cache.add_node(Node.from_k8s(tainted))
    cache.add_pod(make_pod("db", "big", "500m", "1Gi"))


def test_each_claim_is_explained_against_the_state_it_ran_on(cache: Cache) -> None:
    cluster(cache)
    web = make_pod("web", "big", "1", "1Gi")
    cache.assume_pod(web, check_fit=True)
    cache.finish_binding(web)
    cache.add_pod(web)  # the informer confirms it
    cache.add_pod(make_pod("late", "big", "400m", "1Gi"))  # after: must not show

    (claim,) = explain(cache, web.uid)
    assert (claim.node, claim.replica, claim.ended) == ("big", "test", "confirmed")
    assert claim.assumed_seconds is not None and claim.assumed_seconds >= 0
    assert claim.free_before["milli_cpu"] == 1500 and claim.free_after["milli_cpu"] == 500
    verdicts = {v.node: (v.fits, v.reasons) for v in claim.verdicts}
    assert verdicts == {
        "big": (True, []),
        "small": (False, ["Insufficient cpu"]),
        "gpu": (False, ["node(s) had untolerated taint {gpu: yes}"]),
    }


def test_a_forgotten_claim_and_a_second_one(cache: Cache) -> None:
    cluster(cache)
    job = make_pod("job", "small", "100m", "1Mi")
    cache.assume_pod(job)
    cache.forget_pod(job)  # the bind failed
    cache.assume_pod(job.with_node("big"))
    first, second = explain(cache, job.uid)
    assert (first.node, first.ended) == ("small", "forgotten")
    assert (second.node, second.ended, second.ended_by) == ("big", "still assumed", "")
    assert explain(cache, "nobody") == []
