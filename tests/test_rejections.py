"""A rejected command changes nothing: every key of the cache is compared before and after.

"Nothing" includes the generation counter, the stream and the deadline index.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from schedcache import Cache
from schedcache.errors import CacheError, ValidationError
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
    with pytest.raises(ValidationError, match="would push node n1's total r:mem past 64 bits"):
        cache.add_pod(make_pod("big2", "n1", "1", "5Ei"))
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert cache.verify() == []


def test_huge_allocatable_is_stored_exactly(cache: Cache):
    cache.add_node(make_node("n1", "1", "1E"))
    cache.add_node(make_node("n2", "1", "9007199254740993"))
    assert cache.get_node_info("n1").allocatable.memory == 10**18
    assert cache.get_node_info("n2").allocatable.memory == 9007199254740993
