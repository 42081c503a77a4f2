"""A claim with its deadline in one call (``Cache.assume_pod(deadline=)``,
``lua/timed_claim.lua``, issue 43): the extender's bind claims the pod and sets its
bind-timeout deadline in one round trip, writing what ``assume_pod`` then ``finish_binding``
wrote, and nothing when the claim is refused."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from schedcache import Cache
from schedcache.cli.eventlines import event_text
from schedcache.errors import FitConflict, ValidationError
from schedcache.history.replay import fold
from schedcache.model.nodeinfo import Dump
from schedcache.ops.expiry import ExpiryWorker
from schedcache.sim.explain import explain
from schedcache.store import commands
from schedcache.views.snapshot import Snapshot
from tests.factories import keyspace, make_node, make_pod
from tests.test_constraint_candidates import HOST, HOST_ANTI, WEB, ZONE, decided
from tests.test_lua_bounds import command_calls

BOTH_APIS = True  # every test taking `cache` runs on Cache and on AsyncCache (tests/apis.py)


def test_a_timed_claim_is_the_claim_and_its_deadline_in_one_call(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    before = command_calls(cache, "fcall")
    started = time.time() * 1000
    assert cache.assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True, deadline=30.0) == "n1"
    after = command_calls(cache, "fcall")
    if before is not None and after is not None:  # fakeredis keeps no count
        assert after - before == 1
    record = cache.get_pod_record("a")
    assert record.state == "assumed" and record.node == "n1"
    assert record.deadline_ms is not None
    assert started + 29_000 < record.deadline_ms < time.time() * 1000 + 31_000
    # One event: the claim carrying its deadline (BindingFinished is not written).
    events = list(cache.events())
    assert [event.type for event in events] == ["NodeAdded", "PodAssumed"]
    assert events[-1].fields["deadline"] == str(record.deadline_ms)
    assert f"deadline={record.deadline_ms}" in event_text(events[-1])
    # Its record names the claimer (a replica whose claim went unanswered tells its own from
    # another's by it: tests/test_claims_sent_again.py), in no replica's claims.
    assert record.binding_finished and record.claimer == cache.replica
    # The deadline, not the replica's lease, bounds it (as after finish_binding).
    assert not cache.client.sismember(cache.keys.replica_pods(cache.replica), "a")
    assert cache.get_node_info("n1").requested.milli_cpu == 1000


def test_a_timed_claim_is_released_at_its_deadline(cache: Cache) -> None:
    """The bind that never finishes: its claim goes at the deadline, lease or not."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True, deadline=1.0)
    worker = ExpiryWorker(cache)
    assert worker.run_once() == []
    time.sleep(1.1)
    assert worker.run_once() == ["a"]
    assert cache.pod_state("a") is None
    assert cache.get_node_info("n1").requested.milli_cpu == 0


def test_a_timed_claim_takes_candidates_and_rules_judged_on_a_snapshot(
    make_cache: Callable[..., Cache],
) -> None:
    """What the reference scheduler's claim sends (issue 40): ``check_fit`` with the pod's
    rules judged on its snapshot and the next best nodes, and the deadline, in one call."""
    cache = make_cache(ttl=10.0)
    for name in ("n1", "n2", "n3"):
        cache.add_node(make_node(name, "2", "8Gi", labels={HOST: name, ZONE: "z1"}))
    cache.add_pod(make_pod("web-0", "n2", "100m", "1Mi", labels=WEB))
    snap = decided(cache)
    make_cache(replica="b").assume_pod(make_pod("other", "n1", "2", "1Mi"), check_fit=True)
    web = make_pod("web-1", "n1", "1", "1Mi", labels=WEB, affinity=HOST_ANTI)
    before = command_calls(cache, "fcall")
    started = time.time() * 1000
    taken = cache.assume_pod(
        web, check_fit=True, snapshot=snap, candidates=("n2", "n3"), deadline=30.0
    )
    after = command_calls(cache, "fcall")
    if before is not None and after is not None:  # fakeredis keeps no count
        assert after - before == 1
    # n1 full (the other replica's claim), n2 holds a web pod (anti-affinity): n3.
    assert taken == "n3"
    record = cache.get_pod_record(web)
    assert record.state == "assumed" and record.node == "n3" and record.binding_finished
    assert record.deadline_ms is not None and record.deadline_ms > started + 29_000
    assert cache.verify() == []


def test_a_refused_timed_claim_writes_nothing(cache: Cache) -> None:
    cache.add_node(make_node("n1", "1", "8Gi"))
    cache.assume_pod(make_pod("a", "n1", "800m", "1Gi"), check_fit=True, deadline=30.0)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict) as refused:
        cache.assume_pod(make_pod("b", "n1", "800m", "1Gi"), check_fit=True, deadline=30.0)
    assert refused.value.reasons == ("cpu",)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_timed_claim_needs_a_claim_and_a_deadline() -> None:
    claim = commands.assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True)
    assert commands.timed_claim(claim, None) is claim
    with pytest.raises(ValidationError, match="ttl"):
        commands.timed_claim(claim, 0)
    with pytest.raises(ValidationError, match="is not an assume_pod"):
        commands.timed_claim(commands.finish_binding(make_pod("a", "n1"), None, 1.0), 1.0)


# -- one event for the claim and its deadline: every reader takes it as the old pair ----------


def _claimed(cache: Cache, timed: bool, deadline_ms: int | None = None) -> None:
    """A node, a pod added there, and the claim of pod ``a``: timed (one call, one event), or
    ``assume_pod`` then ``finish_binding`` at ``deadline_ms`` (the cache's ttl is 10 s)."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(make_pod("b", "n1", "100m", "1Mi"))
    pod = make_pod("a", "n1", "1", "1Gi")
    if timed:
        cache.assume_pod(pod, check_fit=True, deadline=30.0)
    else:
        assert deadline_ms is not None
        cache.assume_pod(pod, check_fit=True)
        cache.finish_binding(pod, now=(deadline_ms - 10_000) / 1000)


def _state(dump: Dump) -> tuple[object, ...]:
    """A replayed state without the id of its last event (the streams' ids differ)."""
    return dump.nodes, dump.assumed_pods, dump.generation


def _unfinished(cache: Cache) -> None:
    """Corrupts the live record of ``a``: its binding no longer finished."""
    key = cache.keys.pod("a")
    raw = cache.client.get(key)
    assert raw is not None and raw.startswith(b"assumed n1 1 ")
    cache.client.set(key, b"assumed n1 0 " + raw[len(b"assumed n1 1 ") :])


def test_a_timed_claims_one_event_folds_replays_and_audits_as_the_old_pair(
    make_cache: Callable[..., Cache], cache_name: str
) -> None:
    """A stream with the timed claim's single PodAssumed (with ``deadline``) and one with the
    old PodAssumed + BindingFinished pair (what sc_timed_claim wrote before, and what
    ``assume_pod`` then ``finish_binding`` still write) describe the same cache: the same live
    record, the same fold, replay, checkpoint, audit verdict and explanation."""
    new = make_cache()
    _claimed(new, timed=True)
    deadline = new.get_pod_record("a").deadline_ms
    assert deadline is not None
    old = make_cache(name=f"{cache_name}-pair")
    _claimed(old, timed=False, deadline_ms=deadline)
    assert [e.type for e in new.events()] == ["NodeAdded", "PodAdded", "PodAssumed"]
    assert [e.type for e in old.events()] == [
        "NodeAdded",
        "PodAdded",
        "PodAssumed",
        "BindingFinished",
    ]
    # The same record, but that the timed claim's names its claimer (the pair's binding
    # finished: its claim in flight ended).
    timed = new.get_pod_record("a")
    assert timed.claimer == new.replica and old.get_pod_record("a").claimer == ""
    assert dataclasses.replace(timed, claimer="") == old.get_pod_record("a")
    # The fold (snapshots, replay, audit): assumed, binding finished, deadline D.
    folded = [fold(cache.events()).pods["a"] for cache in (new, old)]
    for record in folded:
        assert (record.state, record.node, record.binding_finished, record.deadline_ms) == (
            "assumed",
            "n1",
            True,
            deadline,
        )
    assert folded[0].generation == folded[1].generation
    assert _state(new.replay()) == _state(old.replay())
    assert new.verify() == [] and old.verify() == []
    # From a checkpoint taken after it, the same again.
    new.checkpoint()
    old.checkpoint()
    assert _state(new.replay()) == _state(old.replay()) == _state(new.dump())
    assert new.verify() == [] and old.verify() == []
    # The explanation of the claim (explain, whatif's reading of claims): the same.
    explained = [
        [(c.node, c.verdicts, c.free_before, c.free_after, c.ended) for c in explain(cache, "a")]
        for cache in (new, old)
    ]
    assert explained[0] == explained[1] and len(explained[0]) == 1
    # A live record that lost its finished binding: the same verdict from both streams.
    for cache in (new, old):
        _unfinished(cache)
    verdicts = [[str(d) for d in cache.verify()] for cache in (new, old)]
    assert verdicts[0] == verdicts[1]
    assert any("binding finished" in line for line in verdicts[0]), verdicts[0]


def test_a_snapshot_following_the_stream_folds_a_timed_claim_as_finished(cache: Cache) -> None:
    """A snapshot (sync and asyncio) folds the one event as the pair: the pod placed, its
    binding finished, its deadline set."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.assume_pod(make_pod("a", "n1", "1", "1Gi"), check_fit=True, deadline=30.0)
    cache.update_snapshot(snap)
    record = cache.get_pod_record("a")
    held = snap.state.pods["a"]
    assert (held.state, held.node, held.binding_finished, held.deadline_ms) == (
        "assumed",
        "n1",
        True,
        record.deadline_ms,
    )
    assert snap.node_infos["n1"].requested.milli_cpu == 1000
    assert cache.verify() == []


def test_separate_assume_and_finish_binding_keep_their_two_events(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    pod = make_pod("a", "n1", "1", "1Gi")
    cache.assume_pod(pod, check_fit=True)
    assumed = list(cache.events())[-1]
    assert assumed.type == "PodAssumed" and "deadline" not in assumed.fields
    assert cache.get_pod_record("a").claimer == cache.replica
    cache.finish_binding(pod)
    assert [e.type for e in cache.events()][-2:] == ["PodAssumed", "BindingFinished"]
    assert cache.verify() == []
