"""Times are finite, non-negative and bounded, so a deadline (now + ttl, in ms) stays exact in
Lua's doubles and in the int64 of the pod record: ``commands.MAX_NOW`` / ``MAX_TTL``.

A ttl of ``sys.maxsize`` used to wrap the deadline to -2**63 and expire a bound pod at once.
Every refusal is a :class:`ValidationError` naming the field, with the cache's keys unchanged.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import pytest
import redis

from schedcache import Cache, connect
from schedcache.errors import ValidationError
from schedcache.store.commands import MAX_NOW, MAX_TIMEOUT, MAX_TTL, Arg
from schedcache.store.retry import RetryPolicy
from tests.factories import keyspace, make_node, make_pod

NOW = 1_700_000_000.0
POD = make_pod("p", "n1", "100m", "1Mi")
BAD_SECONDS = [sys.maxsize, 1e16, math.nan, math.inf, -math.inf, -1, "30", True, None]


def populate(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "1Gi"))
    cache.assume_pod(POD)


@pytest.mark.parametrize("option", ["ttl", "lease_ttl", "wait_timeout"])
@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_cache_refuses_times_out_of_range(
    client: redis.Redis, cache_name: str, make_cache: Callable[..., Cache], option, value
):
    make_cache(replica="r")  # the cache exists, with its keys
    populate(make_cache(replica="r"))
    before = keyspace(client, f"{{{cache_name}}}:*")
    with pytest.raises(ValidationError, match=rf"^cache {cache_name}: {option}: ") as error:
        Cache(client, cache_name, replica="r", **{option: value})
    assert error.value.field == option
    assert keyspace(client, f"{{{cache_name}}}:*") == before


@pytest.mark.parametrize("value", [1e30, sys.maxsize, MAX_NOW + 1, math.nan, math.inf, -0.5])
def test_finish_binding_and_cleanup_refuse_a_bad_now(cache: Cache, value):
    populate(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=r"^pod .*\(uid p\): now: "):
        cache.finish_binding(POD, now=value)
    with pytest.raises(ValidationError, match=r"^cleanup_assumed_pods: now: "):
        cache.cleanup_assumed_pods(now=value)
    with pytest.raises(ValidationError, match=r": now: "):
        cache.batch().finish_binding(POD, now=value)
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert cache.is_assumed_pod(POD)


def test_the_largest_now_and_ttl_give_exact_deadlines(make_cache: Callable[..., Cache]):
    """At the bounds the deadline (up to 1.1e13 ms) is stored exactly, and a pod expires at its
    deadline, not a millisecond early (the old overflow stored -2**63 and expired it at once)."""
    cache = make_cache(ttl=MAX_TTL)
    populate(cache)
    last = make_pod("q", "n1", "100m", "1Mi")
    cache.assume_pod(last)
    cache.finish_binding(POD, now=MAX_NOW)
    cache.finish_binding(last, now=MAX_NOW - MAX_TTL - 0.001)
    assert cache.get_pod_record(POD).deadline_ms == int((MAX_NOW + MAX_TTL) * 1000)
    assert cache.get_pod_record(last).deadline_ms == int(MAX_NOW * 1000) - 1
    assert cache.cleanup_assumed_pods(now=MAX_NOW - 0.001) == []  # strictly after, as upstream
    assert cache.cleanup_assumed_pods(now=MAX_NOW) == ["q"]
    assert cache.is_assumed_pod(POD)
    assert cache.verify() == []


def test_a_huge_ttl_is_refused_before_any_pod_can_expire(
    client: redis.Redis, make_cache: Callable[..., Cache], cache_name: str
):
    """The issue's scenario: ``Cache(r, ttl=sys.maxsize)`` no longer exists to expire pods."""
    cache = make_cache()
    populate(cache)
    cache.finish_binding(POD, now=NOW)
    with pytest.raises(ValidationError, match=r"ttl: 9223372036854775807 is outside 0\.\.1e\+09"):
        Cache(client, cache_name, ttl=sys.maxsize)
    assert cache.cleanup_assumed_pods(now=NOW + 1) == []
    assert cache.is_assumed_pod(POD)


@pytest.mark.parametrize("field", ["within", "first_delay", "max_delay"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 91.0, "1", True])
def test_retry_policy_refuses_non_finite_negative_or_too_long_delays(field, value):
    with pytest.raises(ValidationError, match=rf"^retry policy: {field}: "):
        RetryPolicy(**{field: value})


@pytest.mark.parametrize("field", ["timeout", "connect_timeout"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -1, MAX_TIMEOUT + 1, "5"])
def test_connect_refuses_bad_timeouts_before_connecting(field, value):
    with pytest.raises(ValidationError, match=rf"^connect: {field}: "):
        connect("redis://127.0.0.1:1/0", **{field: value})  # nothing listens: never reached


# What a client other than schedcache's could send where the functions take milliseconds (or a
# sweep's limit): tonumber() takes all of these, and each once got past the checks, some after
# the first write (sc_assume_pod's lease went to SET PX after the pod was written: a pod record
# without its event, its node's totals raised).
RAW_BAD_MS = ["0.5", "1e3", "0x10", " 1", "-1", "inf", "nan", "1e300", "99999999999999999999"]


def _raw_calls(pod_args: tuple[Arg, ...], bad: str) -> list[tuple[str, list[Arg]]]:
    """(function, arguments) with ``bad`` in one time or limit argument each."""
    uid, node, blob, contribution = pod_args
    return [
        ("assume_pod", [uid, node, blob, contribution, "", "", bad]),  # lease ms
        ("finish_binding", ["p", "", bad]),  # ttl ms
        ("finish_binding", ["p", bad, "1000"]),  # now ms
        ("cleanup_assumed_pods", [bad, "10"]),
        ("cleanup_assumed_pods", ["", bad]),  # limit
        ("forget_lapsed", [bad]),  # limit
        ("queue_pop", ["ref", "h", bad, "1", "0"]),  # lease ms
        ("queue_pop", ["ref", "h", "1000", "1", bad]),  # parked ms
        ("queue_pop", ["ref", "h", "1000", "1", "0", bad]),  # now ms
        ("queue_retry", ["ref", "h", "q", "error", "", bad, "1", "1"]),  # back-off ms
        ("queue_retry", ["ref", "h", "q", "error", "", "1", bad, "1"]),  # longest back-off ms
        ("queue_retry", ["ref", "h", "q", "error", "", "1", "1", bad]),  # parked ms
    ]


@pytest.mark.parametrize("bad", RAW_BAD_MS)
def test_the_functions_refuse_raw_times_and_limits_that_are_not_bounded_integers(
    cache: Cache, bad: str
) -> None:
    from schedcache.store import commands
    from schedcache.store.library import function_name

    populate(cache)
    pending = make_pod("q", "", "100m", "1Mi")
    cache.run(commands.sync_pod_pending(pending, "ref", "7"))
    fresh = make_pod("fresh", "n1", "100m", "1Mi")
    pod_args = commands.assume_pod(fresh).args[:4]
    before = keyspace(cache.client, cache.keys.pattern)
    for function, args in _raw_calls(pod_args, bad):
        with pytest.raises(redis.ResponseError, match=r"^BADARG ") as error:
            cache.client.fcall(function_name(function), 1, cache.keys.prefix, "r", "", *args)
        assert keyspace(cache.client, cache.keys.pattern) == before, (function, args, error)
    assert cache.verify() == []


def test_a_sweep_limit_past_the_worker_s_largest_batch_is_refused(cache: Cache) -> None:
    """``schedcache worker expiry --batch`` takes at most MAX_BATCH: so do the functions."""
    from schedcache.ops.expiry import MAX_BATCH
    from schedcache.store.library import function_name

    populate(cache)
    call = cache.client.fcall
    most, more = str(MAX_BATCH), str(MAX_BATCH + 1)
    assert call(function_name("cleanup_assumed_pods"), 1, cache.keys.prefix, "r", "", "", most)
    for function, args in [("cleanup_assumed_pods", ["", more]), ("forget_lapsed", [more])]:
        with pytest.raises(redis.ResponseError, match=r"^BADARG limit"):
            call(function_name(function), 1, cache.keys.prefix, "r", "", *args)
