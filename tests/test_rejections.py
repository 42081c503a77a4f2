"""A rejected command changes nothing: every key of the cache is compared before and after.

"Nothing" includes the generation counter, the stream and the deadline index.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from schedcache import Cache
from schedcache.errors import CacheError, ValidationError
from schedcache.model.aggregates import NODE_TOTAL_LIMIT, describe_field
from schedcache.store.library import function_name
from tests.factories import keyspace, make_node, make_pod

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

NOW = 1_700_000_000.0

ADDED = make_pod("a", "n1", "100m", "1Mi")
ASSUMED = make_pod("b", "n1", "200m", "1Mi")
ON_GHOST = make_pod("c", "g", "100m", "1Mi")
ON_PLACEHOLDER = make_pod("d", "ph", "100m", "1Mi")


def populate(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "1Gi", images=[(["img"], 10)]))
    cache.add_node(make_node("g", "4", "1Gi"))
    cache.add_pod(ADDED)
    cache.assume_pod(ASSUMED)
    cache.finish_binding(ASSUMED, now=NOW)
    cache.add_pod(ON_GHOST)
    cache.remove_node("g")
    cache.add_pod(ON_PLACEHOLDER)


def raw_fcall(function: str, *args: object) -> Callable[[Cache], object]:
    def call(cache: Cache) -> object:
        return cache.client.fcall(function, 1, cache.keys.prefix, "test", "", *args)

    return call


REJECTED: dict[str, Callable[[Cache], object]] = {
    "assume an assumed pod": lambda c: c.assume_pod(ASSUMED),
    "assume an added pod": lambda c: c.assume_pod(ADDED.with_node("n2")),
    "add a pod twice": lambda c: c.add_pod(ADDED),
    "update an unknown pod": lambda c: c.update_pod(make_pod("z", "n1"), make_pod("z", "n1")),
    "update an assumed pod": lambda c: c.update_pod(ASSUMED, ASSUMED),
    "update on another node": lambda c: c.update_pod(ADDED, ADDED.with_node("n2")),
    "remove an unknown pod": lambda c: c.remove_pod(make_pod("z", "n1")),
    "remove on another node": lambda c: c.remove_pod(ADDED.with_node("n2")),
    "forget an added pod": lambda c: c.forget_pod(ADDED),
    "forget an unknown pod": lambda c: c.forget_pod(make_pod("z", "n1")),
    "forget on another node": lambda c: c.forget_pod(ASSUMED.with_node("n2")),
    "remove an unknown node": lambda c: c.remove_node("nope"),
    "remove a ghost again": lambda c: c.remove_node("g"),
    "remove a placeholder": lambda c: c.remove_node("ph"),
    "assume a pod without node": lambda c: c.assume_pod(make_pod("z", "")),
    "finish binding at a negative time": lambda c: c.finish_binding(ASSUMED, now=-1),
    "cleanup at a non-number": lambda c: c.cleanup_assumed_pods(now="soon"),
    "a rejected command in a batch": lambda c: [
        result.error for result in c.batch().add_pod(ADDED).remove_node("nope").execute()
    ],
    "malformed contribution reaching Lua": raw_fcall(
        function_name("add_pod"), "z", "n1", b"\x80", "r:cpu 100 r:mem lots"
    ),
    "malformed allocatable reaching Lua": raw_fcall(
        function_name("add_node"), "n1", "", b"\x80", 1, "cpu", "1.5", 0
    ),
    "malformed batch": raw_fcall(function_name("batch"), "add_pod", 99, "z"),
    "unknown command in a batch": raw_fcall(function_name("batch"), "flushall", 0),
}


@pytest.mark.parametrize("name", REJECTED, ids=list(REJECTED))
def test_rejected_command_changes_nothing(cache: Cache, name: str):
    populate(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    try:
        outcome = REJECTED[name](cache)
    except (CacheError, redis.ResponseError) as error:
        assert str(error)
    else:
        # Only the batch form reports instead of raising: every command in it was rejected.
        assert outcome and all(isinstance(error, CacheError) for error in outcome)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_finish_binding_of_an_added_pod_changes_nothing(cache: Cache):
    populate(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    cache.finish_binding(ADDED, now=NOW)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_validation_errors_name_the_object_and_field(cache: Cache):
    with pytest.raises(
        ValidationError, match=r"^pod node_info_cache_test/z \(uid z\): spec\.nodeName"
    ):
        cache.assume_pod(make_pod("z", ""))
    with pytest.raises(ValidationError, match=r"now: 'soon' is not a number of seconds"):
        cache.cleanup_assumed_pods(now="soon")


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.add_pod(make_pod("a b", "n1")),
        lambda c: c.add_pod(make_pod("x", "n 1")),
        lambda c: c.remove_node("n 1"),
        lambda c: c.remove_node(""),
    ],
    ids=["uid with space", "node with space", "remove node with space", "remove empty name"],
)
def test_names_that_cannot_be_keys_are_refused_before_redis(cache: Cache, call):
    populate(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match="must be non-empty without whitespace"):
        call(cache)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_node_total_past_64_bits_is_refused_before_any_write(cache: Cache):
    cache.add_node(make_node("n1"))
    cache.add_pod(make_pod("big", "n1", "1", "5Ei"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(
        ValidationError,
        match=r"would push node n1's total requested memory \(bytes\) past about "
        r"9,000,000,000,000,000,000, the cache's bound on a node's total",
    ):
        cache.add_pod(make_pod("big2", "n1", "1", "5Ei"))
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert cache.verify() == []


def test_a_lone_pod_just_under_int64_is_refused_naming_its_request_not_a_hash_field(cache: Cache):
    """The manifest's reader takes int64 (as ParseQuantity caps); a node's total stops short of
    it (Lua's doubles): the refusal names the request as the manifest does, and the bound."""
    cache.add_node(make_node("n1"))
    before = keyspace(cache.client, cache.keys.pattern)
    pod = make_pod("huge", "n1", "9223372036854775", "1Gi")  # 9.22e18 millicores
    with pytest.raises(ValidationError) as refused:
        cache.add_pod(pod)
    message = str(refused.value)
    assert "requested cpu (millicores) past about 9,000,000,000,000,000,000" in message, message
    assert "r:cpu" not in message and "64 bits" not in message
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_the_node_total_bound_is_the_one_lua_enforces():
    lua = (Path(__file__).resolve().parent.parent / "lua" / "_helpers.lua").read_text()
    (bound,) = re.findall(r"^BOUNDS\.TOTAL_LIMIT = (\S+)$", lua, re.M)
    assert float(bound) == NODE_TOTAL_LIMIT


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("r:cpu", "requested cpu (millicores)"),
        ("r:mem", "requested memory (bytes)"),
        ("r:eph", "requested ephemeral-storage (bytes)"),
        ("r:s:nvidia.com/gpu", "requested nvidia.com/gpu"),
        ("z:mem", "non-zero requested memory (bytes)"),
        ("anti", "pods with required anti-affinity"),
        ("x:zone", "required anti-affinity terms by topology key zone"),
        ("p:10.0.0.1|TCP|80", "pods on host port TCP/80 (10.0.0.1)"),
        ("v:default/data", "pods using volume claim default/data"),
        ("odd", "odd"),
    ],
)
def test_node_fields_are_described_as_users_know_them(field: str, named: str):
    assert describe_field(field) == named


def test_huge_allocatable_is_stored_exactly(cache: Cache):
    cache.add_node(make_node("n1", "1", "1E"))
    cache.add_node(make_node("n2", "1", "9007199254740993"))
    assert cache.get_node_info("n1").allocatable.memory == 10**18
    assert cache.get_node_info("n2").allocatable.memory == 9007199254740993
