"""``schedcache explain pod``: each claim of a pod against the state it ran on, on every
backend."""

from __future__ import annotations

from schedcache import Cache, Node
from schedcache.history.checkpoints import history_start
from schedcache.sim.explain import explain, pod_history
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


def test_with_a_checkpoint_the_search_starts_at_the_pods_stay(cache: Cache) -> None:
    """A checkpoint keeps when each pod came, so explain reads from there, not the stream's
    start; a pod the checkpoint does not hold is searched from the checkpoint on."""
    cluster(cache)
    early = make_pod("early", "big", "100m", "1Mi")
    cache.assume_pod(early)
    came = cache.history(early.uid)[0].id
    cache.add_pod(early)  # confirmed: the stay began at the claim all the same
    gone = make_pod("gone", "big", "100m", "1Mi")
    cache.assume_pod(gone)
    cache.forget_pod(gone)  # came and went before the checkpoint
    checkpoint = cache.checkpoint()
    late = make_pod("late", "big", "100m", "1Mi")
    cache.assume_pod(late)

    found = pod_history(cache, early.uid)
    assert found.searched_from == came
    assert [e.type for e in found.events] == ["PodAssumed", "PodAdded"]
    assert pod_history(cache, f"{early.namespace}/early").searched_from == came
    assert [c.node for c in explain(cache, late.uid)] == ["big"]
    assert pod_history(cache, late.uid).searched_from == checkpoint

    assert explain(cache, gone.uid) == []  # before the checkpoint: not searched by default
    (claim,) = explain(cache, gone.uid, full=True)
    assert claim.ended == "forgotten"
    assert pod_history(cache, gone.uid, full=True).searched_from is None


def test_a_pod_name_means_its_latest_uid(cache: Cache) -> None:
    cluster(cache)
    first = make_pod("same", "big", "100m", "1Mi")
    cache.assume_pod(first)
    cache.forget_pod(first)
    second = make_pod("same", "small", "100m", "1Mi", uid="same-2")  # a new pod, same name
    cache.assume_pod(second)
    found = pod_history(cache, f"{second.namespace}/same")
    assert found.uid == second.uid != first.uid
    assert [c.node for c in explain(cache, f"{second.namespace}/same")] == ["small"]


def test_claims_after_a_checkpoint_are_folded_forward_from_it(cache: Cache) -> None:
    """Two claims after the checkpoint, the node filled in between: the second sees it, and
    replaying from the checkpoint gives what replaying the whole stream gives."""
    cluster(cache)
    cache.checkpoint()
    job = make_pod("job", "small", "100m", "1Mi")
    cache.assume_pod(job)
    cache.forget_pod(job)
    cache.add_pod(make_pod("filler", "small", "200m", "1Mi"))
    cache.assume_pod(job.with_node("big"))
    first, second = explain(cache, job.uid)
    small = {c.event_id: next(v for v in c.verdicts if v.node == "small") for c in (first, second)}
    assert small[first.event_id].fits
    assert small[second.event_id].reasons == ["Insufficient cpu"]
    assert explain(cache, job.uid, full=True) == [first, second]


def test_after_compaction_the_search_starts_where_the_stream_begins(cache: Cache) -> None:
    cluster(cache)
    gone = make_pod("gone", "big", "100m", "1Mi")
    cache.assume_pod(gone)
    cache.forget_pod(gone)
    stays = make_pod("stays", "big", "100m", "1Mi")
    cache.assume_pod(stays)
    cache.add_pod(make_pod("filler", "big", "100m", "1Mi"))
    cache.checkpoint()
    cache.compact()
    late = make_pod("late", "big", "100m", "1Mi")
    cache.assume_pod(late)
    floor = history_start(cache.store)
    assert floor is not None
    (claim,) = explain(cache, late.uid)
    assert claim.node == "big"
    for ref, full, wanted_earlier in [
        (gone.uid, False, False),  # searched from the checkpoint: nothing earlier wanted
        ("ns/nobody", False, False),
        (gone.uid, True, True),  # the whole stream wanted: it begins at the floor now
    ]:
        found = pod_history(cache, ref, full=full)
        assert found.events == [] and found.searched_from == floor
        assert found.compacted_before == (floor if wanted_earlier else None)
    # stays: its claim is in the compacted part, before where its search wanted to start
    found = pod_history(cache, stays.uid)
    assert found.compacted_before == floor and found.events == []
