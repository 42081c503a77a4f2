"""What is read back from Redis is msgpack only, decoded within limits: a value that is not what
schedcache writes (hand-edited, truncated, hostile, too large) raises ``CorruptRecord`` naming
the key or event, and nothing is decoded past the limit. Writers refuse what readers would
refuse, so an oversized pod is a ``ValidationError`` that leaves Redis as it was.
"""

from __future__ import annotations

import msgpack
import pytest

from schedcache import Cache
from schedcache.errors import CorruptRecord, ValidationError
from schedcache.store.events import MAX_PAYLOAD, OBJECT_LIMITS, Limits, pack, unpack
from tests.factories import keyspace, make_node, make_pod


def _store_pod_record(cache: Cache, uid: str, blob: bytes) -> None:
    """Replace the msgpack part of a stored pod record, keeping its header."""
    key = cache.keys.pod(uid)
    header = cache.client.get(key).partition(b"\n")[0]
    cache.client.set(key, header + b"\n" + blob)


@pytest.fixture
def placed(cache: Cache) -> Cache:
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(make_pod("p1", "n1", "100m", "1Mi"))
    return cache


def test_a_pod_too_large_to_read_back_is_refused_and_nothing_changes(cache: Cache):
    cache.add_node(make_node("n1", "4", "8Gi"))
    labels = {f"key-{index:06d}": "v" * 60 for index in range(20000)}  # ~1.4 MiB of labels
    huge = make_pod("huge", "n1", "100m", "1Mi", labels=labels)
    before = keyspace(cache.client, cache.keys.pattern)
    refused = (
        r"pod node_info_cache_test/huge \(uid huge\): its msgpack is \d+ bytes, over the 1048576"
    )
    with pytest.raises(ValidationError, match=refused):
        cache.add_pod(huge)
    with pytest.raises(ValidationError, match="huge"), cache.batch() as batch:
        batch.add_pod(huge)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_pod_record_that_is_not_msgpack_is_named_by_its_key(placed: Cache):
    _store_pod_record(placed, "p1", b"\xc1 not msgpack")
    key = placed.keys.pod("p1")
    with pytest.raises(CorruptRecord, match=rf"pod record {key} \(added on node n1") as error:
        placed.get_pod("p1")
    assert "not a valid schedcache msgpack value" in error.value.reason
    with pytest.raises(CorruptRecord, match=key):
        placed.list_pods()


def test_an_oversized_value_is_refused_before_it_is_decoded(placed: Cache):
    _store_pod_record(placed, "p1", msgpack.packb({"name": "x" * (MAX_PAYLOAD + 1)}))
    with pytest.raises(CorruptRecord, match=r"over the 1048576-byte limit; not decoded"):
        placed.get_pod("p1")


def test_a_record_with_a_broken_header_is_named(placed: Cache):
    key = placed.keys.pod("p1")
    placed.client.set(key, b"added n1\n" + pack({"name": "p1"}))
    with pytest.raises(CorruptRecord, match=rf"pod record {key}.*malformed header"):
        placed.get_pod("p1")


def test_msgpack_of_the_wrong_shape_is_named_not_a_key_error(placed: Cache):
    _store_pod_record(placed, "p1", pack({"unexpected": 1}))
    with pytest.raises(CorruptRecord, match="not what schedcache stores"):
        placed.get_pod("p1")


def test_a_corrupt_node_object_is_named_when_a_snapshot_reads_it(placed: Cache):
    placed.client.hset(placed.keys.node("n1"), "blob", b"\x93\x01")  # truncated array
    with pytest.raises(CorruptRecord, match=r"node n1 \(its stored object\)"):
        placed.get_node_info("n1")


def test_a_malformed_event_is_named_by_its_id_when_replayed(placed: Cache):
    placed.client.xadd(placed.keys.events, {"type": "PodAdded", "uid": "p9"})  # no node
    with pytest.raises(CorruptRecord, match=r"event \d+-\d+ \(PodAdded, uid p9\): not an"):
        placed.replay()


def test_a_corrupt_event_payload_is_named_when_it_is_decoded(placed: Cache):
    event = next(e for e in placed.events() if e.type == "PodAdded")
    fields = {"type": "PodAdded", "uid": "p9", "node": "n1", "gen": "99", "data": b"\xc1"}
    placed.client.xadd(placed.keys.events, fields)
    corrupt = list(placed.events())[-1]
    with pytest.raises(CorruptRecord, match=rf"event {corrupt.id} \(PodAdded, uid p9, node n1\)"):
        _ = corrupt.data
    with pytest.raises(CorruptRecord, match="replayed pod placed on node n1"):
        placed.replay()
    assert event.data["uid"] == "p1"  # the good ones still decode


def test_a_missing_checkpoint_chunk_is_named(placed: Cache):
    placed.checkpoint()
    meta = placed.client.hgetall(f"{placed.keys.prefix}checkpoint")
    chunk = f"{meta[b'prefix'].decode()}0"
    placed.client.delete(chunk)
    with pytest.raises(CorruptRecord, match=rf"checkpoint chunk {chunk}: missing"):
        placed.replay()


def test_extension_types_and_non_string_map_keys_are_refused():
    with pytest.raises(CorruptRecord, match="pod x"):
        unpack(msgpack.packb(msgpack.ExtType(1, b"code")), "pod x")
    with pytest.raises(CorruptRecord):
        unpack(msgpack.packb({1: "a"}))
    with pytest.raises(CorruptRecord, match="expected a msgpack blob"):
        unpack("text")  # type: ignore[arg-type]


def test_collections_longer_than_the_limit_are_refused():
    small = Limits(max_bytes=OBJECT_LIMITS.max_bytes, max_str=100, max_items=10)
    assert unpack(pack({"items": list(range(10))}), limits=small) == {"items": list(range(10))}
    with pytest.raises(CorruptRecord):
        unpack(msgpack.packb({"items": list(range(11))}), limits=small)
    with pytest.raises(CorruptRecord):
        unpack(msgpack.packb({"name": "x" * 101}), limits=small)


def test_a_large_checkpoint_is_split_into_chunks_within_the_limit(cache: Cache, monkeypatch):
    """A chunk of ``CHUNK`` pods that would exceed the chunk limit is halved until it fits,
    and reads back the same."""
    from schedcache.history import checkpoints
    from schedcache.store import events

    cache.add_node(make_node("n1", "100", "100Gi", pods=1000))
    with cache.batch() as batch:
        for index in range(40):
            batch.add_pod(make_pod(f"p{index}", "n1", "1m", "1Ki"))
    monkeypatch.setattr(
        checkpoints, "CHUNK_LIMITS", Limits(max_bytes=4000, max_str=MAX_PAYLOAD, max_items=1000)
    )
    monkeypatch.setattr(events, "CHUNK_LIMITS", checkpoints.CHUNK_LIMITS)
    cache.checkpoint()
    meta = cache.client.hgetall(f"{cache.keys.prefix}checkpoint")
    assert int(meta[b"chunks"]) > 3  # nodes, images and the pods in several pieces
    assert cache.replay().nodes == cache.dump().nodes
