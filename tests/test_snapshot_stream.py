"""Snapshots follow the event stream: a catch-up folds the events since the snapshot's last one
(the fold replay uses) and reads no node, and falls back to generations when the stream cannot
tell it everything (compacted, another stream, too far behind). Every outcome is checked
against a fresh snapshot and the live keys (``assert_matches_fresh``).
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from schedcache import Cache, Pod, Snapshot
from schedcache.errors import CorruptRecord
from schedcache.store.namespaces import sync_namespace
from schedcache.store.reads import FOLLOW_READ
from schedcache.views.snapshot import SnapshotUpdate
from tests.factories import make_node, make_pod, port
from tests.test_snapshot import AFFINITY, assert_matches_fresh

BOTH_APIS = True  # (tests that reach into the sync store take ``make_cache``)


def populated(cache: Cache) -> Snapshot:
    for n in range(3):
        cache.add_node(make_node(f"n{n}", cpu="8", mem="8Gi", labels={"zone": f"z{n % 2}"}))
        for j in range(3):
            cache.add_pod(make_pod(f"p{n}-{j}", f"n{n}", "100m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    return snap


def churn(cache: Cache) -> None:
    """A little of everything: pods come, move and go; a node changes, one leaves (a ghost
    with its pods), one arrives; an affinity pod lands."""
    cache.add_pod(make_pod("new", "n0", "200m", "2Mi"))
    cache.remove_pod(make_pod("p1-0", "n1", "100m", "1Mi"))
    cache.update_pod(
        make_pod("p0-1", "n0", "100m", "1Mi"),
        make_pod("p0-1", "n0", "300m", "1Mi", labels={"v": "2"}),
    )
    cache.update_node(
        make_node("n1", cpu="8", mem="8Gi", labels={"zone": "z1"}),
        make_node("n1", cpu="16", mem="8Gi", labels={"zone": "z1"}),
    )
    cache.remove_node("n2")
    cache.add_node(make_node("n3", cpu="8", mem="8Gi", labels={"zone": "z1"}))
    cache.add_pod(make_pod("aff", "n3", "10m", "1Mi", affinity=AFFINITY))
    cache.assume_pod(make_pod("claimed", "n1", "10m", "1Mi"))


def test_a_snapshot_follows_the_stream_and_equals_a_fresh_one(cache):
    snap = populated(cache)
    assert snap.last_id is not None
    churn(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 8 and report.fell_back == ""
    assert report.rounds == 1
    assert "n2" not in snap.node_infos and [p.uid for p in snap.get("n3").pods] == ["aff"]
    assert [i.name for i in snap.have_pods_with_affinity_list] == ["n3"]
    assert_matches_fresh(cache, snap)


def functions_called(cache: Cache, snap: Snapshot) -> tuple[list[str], SnapshotUpdate]:
    """The functions one ``update_snapshot`` of ``snap`` calls (XRANGE pages are no function
    call), and its report."""
    import schedcache.store.reads as reads

    calls: list[str] = []
    real = reads.answer

    def spy(store, read):
        if read[0] != reads.STREAM_PAGE:  # (the head read's page, sent with it, is none either)
            calls.append("snapshot_delta" if read[0] == FOLLOW_READ else read[0])
        return real(store, read)

    reads.answer = spy
    try:
        report = cache.update_snapshot(snap)
    finally:
        reads.answer = real
    return calls, report


def test_a_catch_up_from_the_stream_reads_no_node(make_cache):
    """What crosses the wire: one head call (which also answers the namespaces' generation,
    docs/constraints.md "Namespace selectors") and XRANGE pages, none of the nodes' pods."""
    cache = make_cache()
    snap = populated(cache)
    for j in range(5):
        cache.add_pod(make_pod(f"more{j}", "n1", "10m", "1Mi"))
    calls, report = functions_called(cache, snap)
    assert calls == ["snapshot_delta"] and report.events == 5
    assert_matches_fresh(cache, snap)


def reads_made(cache: Cache, snap: Snapshot, monkeypatch) -> tuple[list[str], SnapshotUpdate]:
    """Every read one ``update_snapshot`` of ``snap`` sends (functions and XRANGE pages alike:
    what the sync driver answers), and its report."""
    import schedcache.store.reads as reads

    sent: list[str] = []
    real = reads.answer

    def spy(store, read):
        sent.append(read[0])
        return real(store, read)

    with monkeypatch.context() as patch:
        patch.setattr(reads, "answer", spy)
        report = cache.update_snapshot(snap)
    return sent, report


def test_a_catch_up_of_a_few_events_is_one_call(make_cache, monkeypatch):
    """The head read and the page of events after the snapshot's last one go together (one
    round trip): no other read, whether the node tree moved or not (the live count is the
    tree's), or nothing happened."""
    cache = make_cache()
    snap = populated(cache)
    for j in range(5):
        cache.add_pod(make_pod(f"more{j}", "n1", "10m", "1Mi"))
    sent, report = reads_made(cache, snap, monkeypatch)
    assert sent == [FOLLOW_READ] and report.events == 5 and report.fell_back == ""
    assert_matches_fresh(cache, snap)
    cache.add_node(make_node("n9", cpu="8", mem="8Gi", labels={"zone": "z9"}))
    cache.add_pod(make_pod("on9", "n9", "10m", "1Mi"))
    cache.remove_node("n0")
    sent, report = reads_made(cache, snap, monkeypatch)
    assert sent == [FOLLOW_READ] and report.events == 3 and not report.inconsistent
    assert "n9" in snap.node_infos and any("n9" in nodes for nodes in snap.zones.values())
    assert "n0" not in snap.node_infos
    assert_matches_fresh(cache, snap)
    sent, report = reads_made(cache, snap, monkeypatch)  # nothing since
    assert sent == [FOLLOW_READ] and report.events == 0
    assert_matches_fresh(cache, snap)


def test_a_catch_up_past_the_first_page_reads_the_rest_in_pages(make_cache, monkeypatch):
    import schedcache.views.snapshot as snapshot_module

    cache = make_cache()
    snap = populated(cache)
    monkeypatch.setattr(snapshot_module, "STREAM_PAGE_SIZE", 4)
    for j in range(10):
        cache.add_pod(make_pod(f"more{j}", f"n{j % 3}", "10m", "1Mi"))
    cache.remove_node("n2")
    sent, report = reads_made(cache, snap, monkeypatch)
    assert sent == [FOLLOW_READ, "XRANGE", "XRANGE"]  # 4 with the head, then 4 and 3
    assert report.events == 11 and report.fell_back == ""
    assert "n2" not in snap.node_infos and len(snap.get("n0").pods) == 7
    assert_matches_fresh(cache, snap)


def test_events_written_between_the_head_and_its_page_are_the_next_updates(make_cache, monkeypatch):
    """The head read and its page are two commands: a write between them lands in the page
    past the head's last event. The update stops at the head's point (its generation), and
    the next one folds the rest; a page that ends before that point is read on."""
    import schedcache.store.reads as reads

    cache = make_cache()
    snap = populated(cache)
    cache.add_pod(make_pod("before", "n1", "10m", "1Mi"))
    real = reads.answer

    def a_write_between(store, read):
        if read[0] != FOLLOW_READ:
            return real(store, read)
        head, _ = real(store, read)
        cache.add_pod(make_pod("between", "n0", "10m", "1Mi"))
        return head, store.client.xrange(store.keys.events, read[1][1], "+")

    monkeypatch.setattr(reads, "answer", a_write_between)
    report = cache.update_snapshot(snap)
    monkeypatch.undo()
    assert report.events == 1 and report.fell_back == ""
    assert "between" not in {p.uid for p in snap.get("n0").pods}
    assert snap.generation == cache.generation() - 1
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert_matches_fresh(cache, snap)

    cache.add_pod(make_pod("later", "n2", "10m", "1Mi"))

    def a_short_page(store, read):
        if read[0] != FOLLOW_READ:
            return real(store, read)
        head, page = real(store, read)
        return head, page[:1]  # the snapshot's own event only

    monkeypatch.setattr(reads, "answer", a_short_page)
    sent, report = reads_made(cache, snap, monkeypatch)
    assert sent == [FOLLOW_READ, "XRANGE"] and report.events == 1 and report.fell_back == ""
    monkeypatch.undo()
    assert_matches_fresh(cache, snap)


def test_a_snapshot_whose_last_event_was_trimmed_falls_back(make_cache, monkeypatch):
    """Trimmed between updates past the snapshot's last event: the page read with the head
    does not start with it, so the update reads generations (and says so), equal all the
    same."""
    cache = make_cache()
    snap = populated(cache)
    churn(cache)
    last = cache.client.xrevrange(cache.store.keys.events, count=1)[0][0]
    cache.client.xtrim(cache.store.keys.events, minid=last, approximate=False)
    sent, report = reads_made(cache, snap, monkeypatch)
    assert "no longer in the stream" in report.fell_back and report.events == 0
    assert sent[0] == FOLLOW_READ and "snapshot_delta" in sent  # then generations
    assert not report.lost_writes  # (nothing older held either: trimmed, not lost)
    assert_matches_fresh(cache, snap)


def library_loaded(cache: Cache) -> bool:
    listed = cache.client.function_list()  # (a Cluster client's: by node)
    return any(listed.values()) if isinstance(listed, dict) else bool(listed)


def test_a_catch_up_reloads_the_library_when_the_server_lost_it(cache):
    """A catch-up of pods alone calls no function (the plain head, store/plain_head.py): it
    goes on from the stream with the library gone. One the function answers (a node added:
    it sends the node tree) reloads the library as every read does (both APIs)."""
    snap = populated(cache)
    cache.add_pod(make_pod("more", "n1", "10m", "1Mi"))
    cache.client.function_flush()
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert not library_loaded(cache)  # (no function was needed)
    cache.add_node(make_node("n8", cpu="8", mem="8Gi", labels={"zone": "z8"}))  # reloads it
    cache.client.function_flush()
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert library_loaded(cache)
    assert_matches_fresh(cache, snap)


def test_only_an_update_after_a_namespace_changed_reads_the_namespaces(make_cache):
    """The head read carries ``nsgen``: the labels are read when it moved, and only then."""
    cache = make_cache()
    snap = populated(cache)
    cache.run(sync_namespace({"metadata": {"name": "shop", "labels": {"team": "t1"}}}, "5"))
    cache.add_pod(make_pod("more", "n1", "10m", "1Mi"))
    calls, report = functions_called(cache, snap)
    assert calls == ["snapshot_delta", "read_namespaces"] and report.events == 1
    assert snap.pod_index.namespace_labels == {"shop": {"team": "t1"}}
    assert snap.pod_index.namespace_generation == 1
    calls, _ = functions_called(cache, snap)
    assert calls == ["snapshot_delta"]  # unchanged since: no call for them
    assert_matches_fresh(cache, snap)


def test_an_idle_update_reads_no_event(cache):
    snap = populated(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 0 and report.changed_nodes == 0 and report.fell_back == ""
    assert_matches_fresh(cache, snap)


def test_a_compacted_stream_falls_back_to_generations_and_still_equals(cache):
    snap = populated(cache)
    churn(cache)
    cache.checkpoint()
    assert cache.compact() > 0  # the snapshot's last event is gone
    report = cache.update_snapshot(snap)
    assert report.events == 0 and "no longer in the stream" in report.fell_back
    assert_matches_fresh(cache, snap)
    cache.add_pod(make_pod("after", "n1", "10m", "1Mi"))  # and it follows the stream again
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert_matches_fresh(cache, snap)


def test_a_foreign_stream_falls_back_and_still_equals(make_cache):
    """The stream was replaced (another one restored under the cache's key): the snapshot's
    last event is not in it, so the stream tells nothing; generations do."""
    cache = make_cache()
    snap = populated(cache)
    churn(cache)
    events = cache.store.keys.events
    entries = cache.client.xrange(events)
    cache.client.delete(events)
    for _, fields in entries:  # the same events under new ids
        cache.client.xadd(events, fields)
    report = cache.update_snapshot(snap)
    assert "no longer in the stream" in report.fell_back
    assert_matches_fresh(cache, snap)


def test_a_cache_of_another_incarnation_falls_back_and_still_equals(cache):
    snap = populated(cache)
    cache.clear()
    cache.add_node(make_node("n0", cpu="8", mem="8Gi", labels={"zone": "z0"}))
    cache.add_pod(make_pod("other", "n0", "100m", "1Mi"))
    report = cache.update_snapshot(snap)
    assert report.fell_back == "another incarnation" and report.inconsistent
    assert list(snap.node_infos) == ["n0"]
    assert_matches_fresh(cache, snap)


def test_a_snapshot_too_far_behind_reads_the_changed_nodes(cache, monkeypatch):
    import schedcache.views.snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "STREAM_BEHIND_MIN", 3)
    monkeypatch.setattr(snapshot_module, "STREAM_BEHIND_PER_POD", 0.0)
    snap = populated(cache)
    churn(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 0 and report.fell_back.endswith("generations behind")
    assert_matches_fresh(cache, snap)


def test_a_refreshed_snapshot_follows_the_stream_again(make_cache):
    """Refreshed nodes are newer than the snapshot's point of the stream: the next update
    folds the events since that point into its fold state (left there) and projects the
    nodes they touched again, the refreshed ones among them; the others are unchanged."""
    cache = make_cache()
    from schedcache.views.snapshot import refresh_nodes

    snap = populated(cache)
    cache.add_pod(make_pod("new", "n0", "10m", "1Mi"))
    cache.remove_pod(make_pod("p1-1", "n1", "100m", "1Mi"))
    refresh_nodes(cache.store, snap, ["n0", "n1", "n2"])
    assert [p.uid for p in snap.get("n0").pods].count("new") == 1
    cache.add_pod(make_pod("later", "n1", "10m", "1Mi"))
    report = cache.update_snapshot(snap)
    assert report.events == 3 and report.changed_nodes == 2
    assert [p.uid for p in snap.get("n0").pods].count("new") == 1
    assert_matches_fresh(cache, snap)


def test_a_corrupt_event_refuses_the_update_and_leaves_the_snapshot_as_it_was(make_cache):
    """The fold refuses an entry schedcache never writes; the snapshot is untouched, and the
    next update is caught up from generations (the live keys are fine)."""
    cache = make_cache()
    snap = populated(cache)
    before = {name: info.pod_count for name, info in snap.node_infos.items()}
    cache.add_pod(make_pod("new", "n0", "10m", "1Mi"))
    cache.client.xadd(cache.store.keys.events, {"type": "Bogus", "v": "2", "gen": "999"})
    generation = snap.generation
    with pytest.raises(CorruptRecord, match="not an event schedcache writes"):
        cache.update_snapshot(snap)
    assert snap.generation == generation
    assert {name: info.pod_count for name, info in snap.node_infos.items()} == before
    report = cache.update_snapshot(snap)
    assert report.events == 0
    assert_matches_fresh(cache, snap)


@pytest.mark.parametrize("key", ["gen", "treegen", "incarnation", "lastevent", "nsgen", "events"])
def test_a_head_key_of_another_type_refuses_the_update_naming_it(make_cache, key):
    """The head read takes `gen`, `treegen`, `incarnation`, `lastevent` and `nsgen` in one
    MGET, which answers nil for a key of another type: that key is still refused by name (as
    corruption), the snapshot left as it was, and every key as it was."""
    cache = make_cache()
    snap = populated(cache)
    before = {name: info.pod_count for name, info in snap.node_infos.items()}
    generation, seen = snap.generation, snap.last_id
    full = cache.store.keys.prefix + key
    saved = cache.client.dump(full)
    cache.client.delete(full)
    cache.client.rpush(full, "x")
    keys = {k: cache.client.dump(k) for k in cache.client.keys(cache.store.keys.prefix + "*")}
    with pytest.raises(CorruptRecord, match=key):
        cache.update_snapshot(snap)
    assert {
        k: cache.client.dump(k) for k in cache.client.keys(cache.store.keys.prefix + "*")
    } == keys
    assert (snap.generation, snap.last_id) == (generation, seen)
    assert {name: info.pod_count for name, info in snap.node_infos.items()} == before
    cache.client.delete(full)
    if saved is not None:  # (no namespace yet: no `nsgen`)
        cache.client.restore(full, 0, saved)
    report = cache.update_snapshot(snap)
    assert report.fell_back == ""
    assert_matches_fresh(cache, snap)


@given(
    cpu=st.sampled_from(["", "0", "100m", "2"]),
    ports=st.lists(st.sampled_from([80, 8080, 9090]), max_size=3),
    claims=st.lists(st.sampled_from(["a", "b"]), max_size=3),
    affinity=st.booleans(),
    gpus=st.sampled_from(["", "1", "2"]),
)
def test_a_pods_sums_read_from_its_stored_dict_equal_the_pods_own(
    cpu, ports, claims, affinity, gpus
):
    """The fold of a snapshot reads a pod's contribution from its stored dict (without
    building the Pod): it must equal ``pod_contribution`` of the decoded pod."""
    from schedcache.model.aggregates import pod_contribution
    from schedcache.store.fold import data_contribution

    extra: dict = {"ports": [port(p) for p in ports], "pvcs": claims}
    if affinity:
        extra["affinity"] = AFFINITY
    if gpus:
        extra["extended"] = {"example.com/gpu": gpus}
    pod = make_pod("p", "n0", cpu, "1Mi" if cpu else "", **extra)
    assert data_contribution(pod.to_dict()) == pod_contribution(pod)
    assert data_contribution(Pod.from_dict(pod.to_dict()).to_dict()) == pod_contribution(pod)


def test_a_stream_compacted_midway_through_a_catch_up_falls_back_and_still_equals(
    make_cache, monkeypatch
):
    """The first page (read with the head) is folded, then the events the next page starts
    from are trimmed: the update goes on from generations (re-reading every node the folded
    page touched)."""
    import schedcache.store.reads as reads
    import schedcache.views.snapshot as snapshot_module

    cache = make_cache()
    snap = populated(cache)
    churn(cache)
    monkeypatch.setattr(snapshot_module, "STREAM_PAGE_SIZE", 2)
    real = reads.answer
    pages = []

    def trims_after_the_first_page(store, read):
        reply = real(store, read)
        if read[0] == reads.FOLLOW_READ:
            assert len(reply[1]) == 3  # the snapshot's last event and two after it
            pages.append(reply)
            if len(pages) == 1:  # everything but the last event goes
                last = store.client.xrevrange(store.keys.events, count=1)[0][0]
                store.client.xtrim(store.keys.events, minid=last, approximate=False)
        return reply

    monkeypatch.setattr(reads, "answer", trims_after_the_first_page)
    report = cache.update_snapshot(snap)
    assert report.events == 2 and "no longer in the stream" in report.fell_back
    assert_matches_fresh(cache, snap)
    monkeypatch.undo()
    cache.add_pod(make_pod("after", "n1", "10m", "1Mi"))
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert_matches_fresh(cache, snap)


# -- the stream's last id, kept beside it (`lastevent`) -------------------------------------


def stream_last(cache: Cache) -> str:
    entries = cache.client.xrevrange(cache.store.keys.events, count=1)
    return entries[0][0].decode() if entries else ""


def head_last(cache: Cache, snap: Snapshot) -> str:
    """The last event id the snapshots' head read answers (its eighth field; `nsgen` follows)."""
    reply = cache.store.read_function("snapshot_delta", snap.generation, snap.tree_generation, -1)
    return str(reply[7].decode())


def read_nodes_last(cache: Cache) -> str:
    return str(cache.store.read_function("read_nodes", "n0")[-1].decode())


def test_every_write_keeps_the_last_event_id_the_head_read_answers(make_cache):
    """Each command that appends events (one, or several in a batch) leaves `lastevent` at the
    stream's last id, and the head read and sc_read_nodes answer it."""
    cache = make_cache()
    snap = Snapshot()
    assert head_last(cache, snap) == "" and cache.client.get(cache.keys.last_event) is None
    steps = [
        lambda: cache.add_node(make_node("n0", cpu="8", mem="8Gi", labels={"zone": "z0"})),
        lambda: cache.add_pod(make_pod("a", "n0", "100m", "1Mi")),
        lambda: cache.assume_pod(make_pod("b", "n0", "100m", "1Mi")),
        lambda: cache.finish_binding(make_pod("b", "n0", "100m", "1Mi")),
        lambda: cache.remove_pod(make_pod("a", "n0", "100m", "1Mi")),
    ]
    for step in steps:
        step()
        assert cache.client.get(cache.keys.last_event).decode() == stream_last(cache)
        assert head_last(cache, snap) == read_nodes_last(cache) == stream_last(cache)
    before = cache.stream_length()
    with cache.batch() as batch:
        for j in range(3):
            batch.add_pod(make_pod(f"c{j}", "n0", "10m", "1Mi"))
    assert cache.stream_length() == before + 3
    assert cache.client.get(cache.keys.last_event).decode() == stream_last(cache)
    assert head_last(cache, snap) == stream_last(cache)
    cache.clear()
    assert cache.is_empty() and head_last(cache, Snapshot()) == ""


def test_a_cache_written_before_the_key_reads_its_last_event(make_cache):
    """A cache written before `lastevent` existed (or one whose key went): the head read reads
    the stream's last entry instead; snapshots follow the stream as before, and the next write
    brings the key back."""
    cache = make_cache()
    snap = populated(cache)
    churn(cache)
    cache.client.delete(cache.keys.last_event)
    assert head_last(cache, snap) == read_nodes_last(cache) == stream_last(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 8 and report.fell_back == ""
    assert_matches_fresh(cache, snap)
    cache.add_pod(make_pod("later", "n0", "10m", "1Mi"))
    assert cache.client.get(cache.keys.last_event).decode() == stream_last(cache)
    report = cache.update_snapshot(snap)
    assert report.events == 1 and report.fell_back == ""
    assert_matches_fresh(cache, snap)


def test_an_event_appended_by_another_client_is_not_missed(make_cache):
    """The key is a hint: an entry after it (not written by the library) makes the head read
    take the stream's real last entry, so a snapshot never stops short of it."""
    cache = make_cache()
    snap = populated(cache)
    hint = cache.client.get(cache.keys.last_event).decode()
    foreign = cache.client.xadd(cache.store.keys.events, {"type": "Bogus", "v": "2"}).decode()
    assert foreign != hint
    assert head_last(cache, snap) == read_nodes_last(cache) == foreign


def test_compaction_keeps_the_last_event_the_key_names(make_cache):
    cache = make_cache()
    snap = populated(cache)
    churn(cache)
    cache.checkpoint()
    assert cache.compact() > 0
    assert cache.client.get(cache.keys.last_event).decode() == stream_last(cache) != ""
    assert head_last(cache, snap) == stream_last(cache)


@pytest.mark.parametrize("value", ["x", "", "1-2-3", "-1-0"])
def test_a_last_event_key_that_is_no_stream_id_refuses_the_update_naming_it(make_cache, value):
    """Another client's value there is corruption, named; nothing changes (the snapshot and
    every key stay as they were), and the next write heals it."""
    cache = make_cache()
    snap = populated(cache)
    cache.add_pod(make_pod("new", "n0", "10m", "1Mi"))
    cache.client.set(cache.keys.last_event, value)
    generation, seen = snap.generation, snap.last_id
    keys = {k: cache.client.dump(k) for k in cache.client.keys(cache.store.keys.prefix + "*")}
    with pytest.raises(CorruptRecord, match="lastevent: is not a stream id"):
        cache.update_snapshot(snap)
    assert (snap.generation, snap.last_id) == (generation, seen)
    assert {
        k: cache.client.dump(k) for k in cache.client.keys(cache.store.keys.prefix + "*")
    } == keys
    cache.add_pod(make_pod("later", "n0", "10m", "1Mi"))
    assert cache.update_snapshot(snap).events == 2
    assert_matches_fresh(cache, snap)


def test_the_plain_head_answers_what_the_function_answers(make_cache):
    """The catch-up's plain transaction (MULTI, MGET, GET, XRANGE, EXEC: store/plain_head.py)
    answers exactly what ``sc_snapshot_delta``'s head read and its page answer, in every case:
    pods only, a namespace synced (``nsgen`` moved), a node added (the function sends the
    tree), an event appended without the library (the function finds the stream's real end),
    nothing new."""
    import schedcache.store.reads as reads

    cache = make_cache()
    snap = populated(cache)
    store = cache.store
    calls: list[str] = []

    def both() -> tuple[object, object]:
        args = ((snap.generation, snap.tree_generation, -1), snap.last_id, 1001)
        store.plain_heads = True
        plain = reads.answer(store, (FOLLOW_READ, args))
        store.plain_heads = False
        function = reads.answer(store, (FOLLOW_READ, args))
        store.plain_heads = True
        return plain, function

    changes = {
        "nothing": lambda: None,
        "pods": lambda: [cache.add_pod(make_pod(f"x{j}", "n1", "10m", "1Mi")) for j in range(3)],
        "namespace": lambda: cache.run(
            sync_namespace({"metadata": {"name": "shop", "labels": {"team": "t1"}}}, "5")
        ),
        "node": lambda: cache.add_node(make_node("n7", cpu="8", mem="8Gi")),
        "foreign": lambda: cache.client.xadd(cache.keys.events, {"type": "Bogus", "v": "2"}),
    }
    for case, change in changes.items():
        change()
        plain, function = both()
        assert plain == function, case
        calls.append(case)
    assert calls == list(changes)


def test_the_plain_head_calls_no_function_for_pods_and_folds_them(make_cache, monkeypatch):
    """With pods alone since the snapshot, the catch-up sends no FCALL at all."""
    from schedcache.store import pinned

    cache = make_cache()
    snap = populated(cache)
    for j in range(4):
        cache.add_pod(make_pod(f"more{j}", "n2", "10m", "1Mi"))
    sent: list[str] = []
    real = pinned.call

    def spy(server, *commands):
        sent.extend(str(words[0]) for words in commands)
        return real(server, *commands)

    monkeypatch.setattr(pinned, "call", spy)
    if not is_cluster_client(cache):  # (a Cluster client sends its transaction itself)
        report = cache.update_snapshot(snap)
        assert sent == ["MULTI", "MGET", "GET", "XRANGE", "EXEC"]
        assert report.events == 4 and report.fell_back == ""
    else:
        assert cache.update_snapshot(snap).events == 4
    assert_matches_fresh(cache, snap)


def is_cluster_client(cache: Cache) -> bool:
    from schedcache.store.routing import is_cluster

    return is_cluster(cache.client)


@pytest.mark.parametrize("text", ["013", " 13", "+13", "1_3", "13 ", "99999999999999999999"])
def test_a_generation_the_library_would_not_write_is_named_corrupt_by_the_catch_up(
    make_cache, text
):
    """``gen`` holding a number the library never writes is corruption, named, whichever
    path reads it (the plain head took ``int()``'s "013" as 13: review)."""
    cache = make_cache()
    snap = populated(cache)
    cache.add_pod(make_pod("more", "n1", "10m", "1Mi"))
    cache.client.set(cache.keys.generation, text)
    with pytest.raises(CorruptRecord, match="gen"):
        cache.update_snapshot(snap)
