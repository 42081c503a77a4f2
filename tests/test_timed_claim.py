"""A claim with its deadline in one call (``Cache.assume_pod(deadline=)``,
``lua/timed_claim.lua``, issue 43): the extender's bind claims the pod and sets its
bind-timeout deadline in one round trip, writing what ``assume_pod`` then ``finish_binding``
wrote, and nothing when the claim is refused."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from schedcache import Cache
from schedcache.errors import FitConflict, ValidationError
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store import commands
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
    events = [event.type for event in cache.events()]
    assert events[-2:] == ["PodAssumed", "BindingFinished"]
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
