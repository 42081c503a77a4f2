"""``Cache.at(event_id)``: what a scheduler saw just after an event, as a snapshot the same
filter and score code runs on (the base of explain and what-if), on every backend."""

from __future__ import annotations

import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import ValidationError
from schedcache.model.filters import filter_pod
from tests.factories import keyspace, make_node, make_pod

ZONE = "topology.kubernetes.io/zone"


def test_at_shows_the_state_after_an_event_and_the_filters_run_on_it(cache: Cache) -> None:
    cache.add_node(make_node("a1", "1", "8Gi", labels={ZONE: "a"}))
    cache.add_node(make_node("b1", "1", "8Gi", labels={ZONE: "b"}))
    cache.add_node(make_node("a2", "1", "8Gi", labels={ZONE: "a"}))
    cache.add_pod(make_pod("web-0", "a1", "600m", "1Gi"))
    before_fill = cache.last_events(1)[0].id
    cache.assume_pod(make_pod("web-1", "a1", "300m", "1Gi"))
    cache.remove_node("b1")
    last = cache.last_events(1)[0].id

    then = cache.at(before_fill)
    assert [info.name for info in then.node_info_list] == ["a1", "b1", "a2"]  # zones interleaved
    assert [pod.name for pod in then.get("a1").pods] == ["web-0"]
    asking = make_pod("job", "", "300m", "1Gi")
    assert filter_pod(asking, then.get("a1")).fits  # room then...
    now = cache.at(last)
    assert filter_pod(asking, now.get("a1")).reasons == ("Insufficient cpu",)  # ...not now
    assert set(now.node_infos) == {"a1", "a2"}

    live = Snapshot()
    cache.update_snapshot(live)
    for name, info in now.node_infos.items():
        assert info.requested == live.get(name).requested
        assert sorted(p.uid for p in info.pods) == sorted(p.uid for p in live.get(name).pods)


def test_at_takes_any_stream_id_as_a_moment(cache: Cache) -> None:
    """Ids are milliseconds: one between events (or from a clock) is the state as of then."""
    cache.add_node(make_node("a1", "1", "8Gi"))
    assert cache.at("1-0").node_info_list == []  # before anything happened
    assert list(cache.at("99999999999999-0").node_infos) == ["a1"]  # everything so far


@pytest.mark.parametrize("bad", ["garbage", "", "-", "+", "1-2-3", "١٢٣", 123, None, "12\n"])
def test_a_moment_that_is_no_event_id_is_refused_naming_the_field(cache: Cache, bad) -> None:
    """``at``, ``replay(until=...)`` and ``compact(keep=...)`` check their argument first: a
    ValidationError naming it, never a parser's ValueError or Redis' reply, and nothing
    changed."""
    cache.add_node(make_node("n1"))
    cache.checkpoint()
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=r"event_id: .* is not an event id"):
        cache.at(bad)
    if bad is not None:
        with pytest.raises(ValidationError, match=r"until: .* is not an event id"):
            cache.replay(until=bad)
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize("keep", [-1, "x", 1.5, True, 2**63])  # (2**63: found in review)
def test_compact_refuses_a_keep_that_is_no_count(cache: Cache, keep) -> None:
    cache.add_node(make_node("n1"))
    cache.checkpoint()
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=r"keep: .* must be an integer from 0 to 9223372"):
        cache.compact(keep)
    assert keyspace(cache.client, cache.keys.pattern) == before
