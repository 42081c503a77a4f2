"""A snapshot reading changed nodes in chunks fetches the next chunk while it decodes one
(schedcache/store/reads.py): the same snapshot as reading them one after the other, errors
raised where the reads were asked for, and no reading thread left behind."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from schedcache import Cache, Snapshot
from schedcache.errors import CorruptRecord
from schedcache.store import fetch
from schedcache.store.reads import Ahead, run_reads
from schedcache.views.snapshot import INLINE_NODES
from tests.factories import make_node, make_pod
from tests.test_snapshot import AFFINITY, assert_matches_fresh

NODES = INLINE_NODES + 2 * fetch.NODES_PER_CALL + 7  # more than inline: chunks and a part


def readers() -> list[threading.Thread]:
    """The reading threads still running, after they had a few seconds to end (one stopped
    early finishes the read it is in, then ends)."""
    deadline = time.monotonic() + 5
    while True:
        running = [t for t in threading.enumerate() if t.name == "schedcache-read-ahead"]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.02)


@pytest.fixture
def many_nodes(cache: Cache) -> Cache:
    with cache.batch(chunk_size=500) as batch:
        for i in range(NODES):
            batch.add_node(make_node(f"n{i:03d}", cpu="8", mem="8Gi"))
        for i in range(0, NODES, 3):
            batch.add_pod(make_pod(f"p{i}", f"n{i:03d}", "10m", "1Mi"))
    return cache


def test_a_chunked_build_and_catch_up_match_a_fresh_snapshot(many_nodes: Cache):
    snap = Snapshot()
    report = many_nodes.update_snapshot(snap)
    assert report.changed_nodes == NODES and snap.num_nodes() == NODES
    assert_matches_fresh(many_nodes, snap)
    with many_nodes.batch(chunk_size=500) as batch:  # a catch-up that reads chunks again
        for i in range(1, NODES, 2):
            batch.add_pod(make_pod(f"q{i}", f"n{i:03d}", "10m", "1Mi"))
    report = many_nodes.update_snapshot(snap)
    assert report.changed_nodes > INLINE_NODES
    assert_matches_fresh(many_nodes, snap)
    assert readers() == []


def test_the_reads_come_in_the_order_asked_whatever_the_driver(many_nodes: Cache):
    names = [f"n{i:03d}" for i in range(NODES)]
    seen: list[str] = []

    def each_chunk(entries: list) -> None:
        seen.extend(entry[0].decode() for entry in entries)

    run_reads(many_nodes.store, fetch.node_entries_reads(names, None, each_chunk))
    assert seen == names  # one chunk after the other, as read one by one
    steps = fetch.node_entries_reads(names)
    first = next(steps)
    assert isinstance(first, Ahead) and len(first.reads) == -(-NODES // fetch.NODES_PER_CALL)


def test_a_read_refused_ahead_is_raised_and_its_thread_ends(many_nodes: Cache):
    last = f"n{NODES - 1:03d}"  # the newest node: in the last chunk
    many_nodes.add_pod(make_pod("bad", last, "10m", "1Mi"))
    key = many_nodes.keys.pod("bad")
    many_nodes.client.delete(key)
    many_nodes.client.sadd(key, "not a pod record")
    with pytest.raises(CorruptRecord, match="bad"):
        many_nodes.update_snapshot(Snapshot())
    assert readers() == []


def test_a_chunk_that_fails_to_decode_stops_the_reads_ahead(many_nodes: Cache):
    many_nodes.client.hset(many_nodes.keys.node("n000"), "r:cpu", "lots")  # the first chunk
    with pytest.raises(CorruptRecord, match="n000"):
        many_nodes.update_snapshot(Snapshot())
    assert readers() == []


def test_a_read_not_announced_next_is_read_as_asked(many_nodes: Cache):
    first, second = ("read_nodes", ("n000",)), ("read_nodes", ("n001",))

    def reads():  # announces two reads, then asks the second first
        yield Ahead((first, second))
        late = yield second
        early = yield first
        return late[0][0], early[0][0]

    assert run_reads(many_nodes.store, reads()) == (b"n001", b"n000")
    assert readers() == []


def test_an_update_broken_off_midway_leaves_the_snapshot_as_it_was(many_nodes: Cache, monkeypatch):
    snap = Snapshot()
    many_nodes.update_snapshot(snap)
    generation = snap.generation
    held = {name: sorted(p.uid for p in info.pods) for name, info in snap.node_infos.items()}
    with many_nodes.batch(chunk_size=500) as batch:  # more changed nodes than fit inline
        for i in range(NODES):
            node = f"n{i:03d}"
            if i % 2:
                batch.add_pod(make_pod(f"aff{i}", node, "10m", "1Mi", affinity=AFFINITY))
            else:
                batch.add_pod(make_pod(f"pvc{i}", node, "10m", "1Mi", pvcs=[f"claim{i}"]))
    store = many_nodes.store
    read = store.read_function
    chunks: list[str] = []

    def breaks_on_the_third_chunk(name: str, *args: object) -> object:
        if name == "read_node_deltas":
            chunks.append(name)
            if len(chunks) == 3:
                raise redis.TimeoutError("the server stopped answering")
        return read(name, *args)

    monkeypatch.setattr(store, "read_function", breaks_on_the_third_chunk)
    snap.last_id = None  # caught up from generations, in chunks (not by following the stream)
    with pytest.raises(redis.TimeoutError):
        many_nodes.update_snapshot(snap)
    assert snap.generation == generation  # as it was: no node of the first chunks in it
    assert {n: sorted(p.uid for p in i.pods) for n, i in snap.node_infos.items()} == held
    assert snap.used_pvc_set == set() and snap.have_pods_with_affinity_list == []
    monkeypatch.undo()
    many_nodes.update_snapshot(snap)  # the caller tries again: it catches up whole
    assert_matches_fresh(many_nodes, snap)
    assert len(snap.used_pvc_set) == len(range(0, NODES, 2))
    assert len(snap.have_pods_with_affinity_list) == len(range(1, NODES, 2))
    assert readers() == []
