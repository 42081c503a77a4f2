"""Snapshot deltas carry only the pods placed since the snapshot's generation (schema 2's
pod index scored by placement generation); the rest come from the snapshot's own copy.

Each test checks the outcome a scheduler sees (the snapshot equals a fresh one) and, where the
point is cost, what crossed the wire. A snapshot follows the stream when it can
(tests/test_snapshot_stream.py); ``from_generations`` makes the next update take this path, as
it does after a compaction.
"""

from __future__ import annotations

from schedcache import Cache, Snapshot
from schedcache.views.snapshot import INLINE_NODES
from tests.factories import make_node, make_pod
from tests.test_snapshot import assert_matches_fresh


def delta_entries(cache: Cache, snap: Snapshot) -> dict[str, list[bytes]]:
    """The pod records ``sc_snapshot_delta`` sends for each changed node."""
    reply = cache.store.read_function(
        "snapshot_delta", snap.generation, snap.tree_generation, INLINE_NODES
    )
    return {entry[0].decode(): entry[2] for entry in reply[5]}


def from_generations(snap: Snapshot) -> Snapshot:
    """The next update is caught up from generations, not from the stream."""
    snap.last_id = None
    return snap


def test_a_changed_node_sends_only_its_new_pods(cache):
    cache.add_node(make_node("n0", cpu="64", mem="64Gi"))
    cache.add_node(make_node("n1", cpu="64", mem="64Gi"))
    with cache.batch() as batch:
        for j in range(20):
            batch.add_pod(make_pod(f"p{j}", "n0", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.add_pod(make_pod("new", "n0", "10m", "1Mi"))
    cache.remove_pod(make_pod("p3", "n0", "10m", "1Mi"))
    sent = delta_entries(cache, snap)
    assert list(sent) == ["n0"]
    assert [raw.split(b"\n")[0].split(b" ")[1] for raw in sent["n0"]] == [b"n0"]  # one record
    assert b"new" in sent["n0"][0]
    cache.update_snapshot(snap)
    uids = [p.uid for p in snap.get("n0").pods]
    assert "p3" not in uids and uids[-1] == "new" and len(uids) == 20
    assert_matches_fresh(cache, snap)


def test_pods_never_read_are_kept_undecoded_across_deltas(cache, monkeypatch):
    import schedcache.store.fetch as fetch
    import schedcache.store.fold as fold

    decoded: list[bytes] = []
    real = fetch.record_pod
    monkeypatch.setattr(fetch, "record_pod", lambda raw: decoded.append(raw) or real(raw))
    real_object = fold.decode_object  # (the pods the snapshot's fold state holds)
    monkeypatch.setattr(
        fold, "decode_object", lambda *args: decoded.append(args[0]) or real_object(*args)
    )
    cache.add_node(make_node("n0", cpu="64", mem="64Gi"))
    for j in range(5):
        cache.add_pod(make_pod(f"p{j}", "n0", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.add_pod(make_pod("p5", "n0", "10m", "1Mi"))
    cache.update_snapshot(from_generations(snap))  # the five older come from the snapshot
    cache.add_pod(make_pod("p6", "n0", "10m", "1Mi"))
    cache.update_snapshot(from_generations(snap))
    assert decoded == []
    assert [p.uid for p in snap.get("n0").pods] == [f"p{j}" for j in range(7)]
    assert len(decoded) == 7
    assert_matches_fresh(cache, snap)


def test_a_placeholder_that_becomes_a_node_shows_its_earlier_pods(cache):
    """The snapshot's fold state holds the placeholder's pods (it never showed them): the
    delta completes the node from there, in one round."""
    cache.add_node(make_node("n0"))
    cache.add_pod(make_pod("early", "late", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert "late" not in snap.node_infos
    cache.add_pod(make_pod("second", "late", "10m", "1Mi"))
    cache.add_node(make_node("late"))
    report = cache.update_snapshot(from_generations(snap))
    assert [p.uid for p in snap.get("late").pods] == ["early", "second"]
    assert report.rounds == 1
    assert_matches_fresh(cache, snap)


def test_a_removed_node_that_returns_shows_the_pods_it_kept(cache):
    cache.add_node(make_node("n0"))
    cache.add_pod(make_pod("stays", "n0", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.remove_node("n0")  # a ghost: its pod stays in the cache
    cache.update_snapshot(snap)
    assert "n0" not in snap.node_infos
    cache.add_node(make_node("n0"))
    cache.update_snapshot(snap)
    assert [p.uid for p in snap.get("n0").pods] == ["stays"]
    assert_matches_fresh(cache, snap)


def test_a_pod_updated_in_place_is_sent_again(cache):
    cache.add_node(make_node("n0"))
    cache.add_pod(make_pod("a", "n0", "10m", "1Mi"))
    cache.add_pod(make_pod("b", "n0", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    old = make_pod("a", "n0", "10m", "1Mi")
    cache.update_pod(old, make_pod("a", "n0", "20m", "1Mi", labels={"v": "2"}))
    assert len(delta_entries(cache, snap)["n0"]) == 1
    cache.update_snapshot(snap)
    assert {p.uid: p.labels for p in snap.get("n0").pods} == {"a": {"v": "2"}, "b": {}}
    assert_matches_fresh(cache, snap)


def test_a_snapshot_far_behind_reads_node_deltas_in_chunks(cache, monkeypatch):
    """More changed nodes than fit inline are read in chunks, and still only their new pods."""
    import schedcache.views.snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "INLINE_NODES", 2)
    for n in range(5):
        cache.add_node(make_node(f"n{n}", cpu="64", mem="64Gi"))
        for j in range(4):
            cache.add_pod(make_pod(f"p{n}-{j}", f"n{n}", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    for n in range(5):
        cache.add_pod(make_pod(f"new{n}", f"n{n}", "10m", "1Mi"))
    cache.remove_pod(make_pod("p2-0", "n2", "10m", "1Mi"))
    calls = []
    real = cache.store.read_function

    def spy(name, *args):
        reply = real(name, *args)
        calls.append((name, reply))
        return reply

    monkeypatch.setattr(cache.store, "read_function", spy)
    cache.update_snapshot(from_generations(snap))
    chunked = [reply for name, reply in calls if name == "read_node_deltas"]
    assert chunked, [name for name, _ in calls]
    records = [len(entry[2]) for reply in chunked for entry in reply[:-2]]
    assert records == [1] * 5
    assert [p.uid for p in snap.get("n2").pods] == ["p2-1", "p2-2", "p2-3", "new2"]
    assert_matches_fresh(cache, snap)


def test_a_node_changed_by_its_pods_alone_keeps_its_node_object(cache):
    cache.add_node(make_node("n0", cpu="64", mem="64Gi", labels={"tier": "a"}))
    cache.add_node(make_node("n1", cpu="64", mem="64Gi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    node = snap.get("n0").node
    cache.add_pod(make_pod("p", "n0", "10m", "1Mi"))
    cache.update_snapshot(snap)
    assert snap.get("n0").node is node  # not decoded again: its stored object is the same
    assert_matches_fresh(cache, snap)
    cache.update_node(node, make_node("n0", cpu="64", mem="64Gi", labels={"tier": "b"}))
    cache.update_snapshot(snap)
    assert snap.get("n0").node.labels == {"tier": "b"}
    assert_matches_fresh(cache, snap)
    cache.remove_node("n0")  # a ghost (its pod stays): gone from the snapshot, and so its object
    cache.update_snapshot(snap)
    assert "n0" not in snap.node_infos and "n0" not in snap.node_objects
    cache.add_node(make_node("n0", cpu="64", mem="64Gi", labels={"tier": "c"}))
    cache.update_snapshot(snap)
    assert snap.get("n0").node.labels == {"tier": "c"}
    assert_matches_fresh(cache, snap)
