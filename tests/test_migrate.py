"""``schedcache migrate``: a cache written by schema 1 (node pod sets) brought to schema 2
(pod sets scored by placement generation), on every backend.

A schema-1 cache is made by writing one with this code and turning each node's sorted set
back into the plain set schema 1 kept: that is exactly the difference between the two.
"""

from __future__ import annotations

import pytest

from schedcache import Cache
from schedcache.errors import CorruptRecord, ValidationError
from schedcache.store.migrate import migrate
from schedcache.views.snapshot import Snapshot
from tests.factories import keyspace, make_node, make_pod


def as_schema_1(cache: Cache) -> int:
    """Turn every node pod index of ``cache`` into a schema-1 set; returns how many."""
    client, keys = cache.client, cache.keys
    turned = 0
    for name in client.smembers(keys.nodes):
        # Schema 1 also kept the node's generation in its hash.
        client.hset(
            keys.node(name.decode()), "gen", int(client.zscore(keys.node_generations, name))
        )
        index = keys.node_pods(name.decode())
        uids = client.zrange(index, 0, -1)
        if uids:
            client.delete(index)
            client.sadd(index, *uids)
            turned += 1
    return turned


def content(cache: Cache) -> dict:
    """Every key of the cache but the remembered replies of commands (``cmd:<id>``, which
    expire: they let a resent migrate call be answered, not applied, again)."""
    state = keyspace(cache.client, f"{cache.keys.prefix}*")
    return {k: v for k, v in state.items() if b"}:cmd:" not in k}


def fill(cache: Cache, nodes: int = 12, pods_per_node: int = 5) -> None:
    batch = cache.batch()
    for n in range(nodes):
        batch.add_node(make_node(f"n{n}", cpu="64", mem="64Gi"))
    for n in range(nodes):
        for j in range(pods_per_node):
            batch.add_pod(make_pod(f"p{n}-{j}", f"n{n}", "10m", "1Mi"))
    batch.execute()
    # A placeholder (pods before their node) and an assumed pod: every kind of node entry.
    cache.add_pod(make_pod("early", "later-node", "10m", "1Mi"))
    cache.assume_pod(make_pod("guess", "n0", "10m", "1Mi"))


def test_a_schema_1_cache_is_refused_then_migrated_to_the_same_content(cache):
    fill(cache)
    before = content(cache)
    expected = cache.dump()
    assert as_schema_1(cache) == 13

    # A command on an unconverted node says what to do, and writes nothing.
    schema_1 = content(cache)
    with pytest.raises(CorruptRecord, match=r"nodepods:n1.*schedcache migrate"):
        cache.add_pod(make_pod("new", "n1", "10m", "1Mi"))
    assert content(cache) == schema_1

    assert migrate(cache.store, nodes_per_call=5) == 13
    assert content(cache) == before
    assert cache.dump() == expected
    assert cache.verify() == []
    assert migrate(cache.store) == 0  # nothing left to convert

    cache.add_pod(make_pod("new", "n1", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert [p.uid for p in snap.get("n1").pods][-1] == "new"


def test_a_slice_with_a_corrupt_record_converts_nothing_of_it(cache):
    fill(cache, nodes=3)
    as_schema_1(cache)
    cache.client.set(cache.keys.pod("p1-2"), b"not a record")
    schema_1 = content(cache)
    with pytest.raises(CorruptRecord, match=r"pod:p1-2.*malformed header"):
        migrate(cache.store, nodes_per_call=1000)
    assert content(cache) == schema_1


def test_a_listed_pod_without_a_record_is_named(cache):
    fill(cache, nodes=2)
    as_schema_1(cache)
    cache.client.delete(cache.keys.pod("p0-1"))
    with pytest.raises(CorruptRecord, match=r"nodepods:n0.*p0-1, which has no record"):
        migrate(cache.store)


@pytest.mark.parametrize("size", [0, 1001, -1, True, 2.5, "10"])
def test_a_bad_slice_size_is_refused_before_anything_is_sent(cache, size):
    with pytest.raises(ValidationError, match="nodes_per_call"):
        migrate(cache.store, nodes_per_call=size)


def test_migrating_an_empty_cache_converts_nothing(cache):
    assert migrate(cache.store) == 0
    assert keyspace(cache.client, f"{cache.keys.prefix}*") == {}
