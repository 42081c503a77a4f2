"""Audit: the stream replays to the live state, to any point in time, and tampering shows."""

from __future__ import annotations

from schedcache import Cache
from schedcache.sim.demo import run_demo
from tests.factories import make_node, make_pod


def busy_cache(cache: Cache) -> None:
    run_demo(cache, nodes=5, pods=40, replicas=2, seed=4)
    cache.remove_node("node-1")  # a ghost, if pods remain
    cache.add_pod(make_pod("late", "node-9", "100m", "1Mi"))  # a placeholder


def test_replay_of_a_busy_history_equals_the_live_state(cache):
    busy_cache(cache)
    assert cache.verify() == []
    state = cache.replay()
    assert state.last_id == list(cache.events())[-1].id
    assert state.nodes == cache.dump().nodes
    cache.assume_pod(make_pod("claimed", "node-0", "10m", "1Mi"))
    dump = cache.replay()
    assert dump == cache.dump() and dump.assumed_pods == {"claimed"}  # nodes, assumed, generation


def test_replay_until_an_event_gives_the_state_at_that_moment(cache):
    cache.add_node(make_node("n1", "4", "1Gi"))
    cache.add_pod(make_pod("a", "n1", "100m", "1Mi"))
    midpoint = list(cache.events())[-1].id
    at_midpoint = cache.dump()
    cache.add_pod(make_pod("b", "n1", "200m", "1Mi"))
    cache.remove_pod(make_pod("a", "n1"))
    cache.remove_node("n1")
    state = cache.replay(until=midpoint)
    assert state.last_id == midpoint
    assert state.nodes == at_midpoint.nodes
    assert state.generation == at_midpoint.generation
    assert state == at_midpoint


def test_hand_edited_keys_are_reported(cache):
    busy_cache(cache)
    keys = cache.keys
    cache.client.hincrby(keys.node("node-2"), "r:cpu", 7)
    cache.client.srem(keys.assumed, *cache.client.smembers(keys.assumed) or [b"none"])
    differences = [str(d) for d in cache.verify()]
    assert any(d.startswith("node node-2: r:cpu:") for d in differences)
    assert any(d.startswith("node node-2: requested:") for d in differences)


def test_a_pod_moved_between_nodes_by_hand_is_reported(cache):
    cache.add_node(make_node("n1"))
    cache.add_node(make_node("n2"))
    cache.add_pod(make_pod("a", "n1", "100m", "1Mi"))
    placed = cache.client.zscore(cache.keys.node_pods("n1"), "a")
    cache.client.zrem(cache.keys.node_pods("n1"), "a")
    cache.client.zadd(cache.keys.node_pods("n2"), {"a": placed})
    differences = [str(d) for d in cache.verify()]
    assert "pod a: node: expected 'n1', found 'n2'" in differences


def test_a_pod_indexed_under_another_generation_is_reported(cache):
    """Snapshots trust the index's scores to tell which pods they hold: a wrong one is found."""
    cache.add_node(make_node("n1"))
    cache.add_pod(make_pod("a", "n1", "100m", "1Mi"))
    placed = int(cache.client.zscore(cache.keys.node_pods("n1"), "a"))
    cache.client.zadd(cache.keys.node_pods("n1"), {"a": placed + 7})
    differences = [str(d) for d in cache.verify()]
    assert f"pod a: placement generation: expected {placed}, found {placed + 7}" in differences


def test_history_of_a_pod_and_of_a_node(cache):
    cache.add_node(make_node("n1"))
    pod = make_pod("a", "n2", "100m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod)
    cache.add_pod(pod.with_node("n1"))  # confirmed on another node
    cache.remove_pod(pod.with_node(""))
    assert [e.type for e in cache.history(pod)] == [
        "PodAssumed",
        "BindingFinished",
        "PodAdded",
        "PodRemoved",
    ]
    assert [e.type for e in cache.history_of_node("n2")] == [
        "PodAssumed",
        "BindingFinished",
        "PodAdded",
    ]
    assert [e.type for e in cache.history_of_node("n1")] == ["NodeAdded", "PodAdded", "PodRemoved"]


def test_cli_verify_replay_and_history(client, cache_name, monkeypatch):
    import json

    from click.testing import CliRunner

    from schedcache.cli import app as cli_module
    from schedcache.cli.app import main

    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    cache = Cache(client, cache_name)
    try:
        busy_cache(cache)

        def run(*args: str):
            return CliRunner().invoke(main, ["--cache", cache_name, *args])

        assert run("verify").exit_code == 0
        first = next(iter(cache.events())).id
        replayed = json.loads(run("replay", "--until", first, "-o", "json").output)
        assert list(replayed["nodes"]) == ["node-0"] and replayed["until"] == first
        assert run("replay", "--until", "1-1").exit_code == 1
        assert "PodAssumed" in run("history", "pod", "demo/web-1").output
        cache.client.hincrby(cache.keys.node("node-0"), "r:cpu", 1)
        tampered = run("verify")
        assert tampered.exit_code == 1 and "node node-0: r:cpu" in tampered.output
    finally:
        cache.clear()


def test_cli_diff_between_two_events(client, cache_name, monkeypatch):
    from click.testing import CliRunner

    from schedcache.cli import app as cli_module
    from schedcache.cli.app import main

    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    cache = Cache(client, cache_name)
    try:
        cache.add_node(make_node("n1", "4", "1Gi"))
        cache.add_pod(make_pod("a", "n1", "100m", "1Mi"))
        start = list(cache.events())[-1].id
        cache.add_pod(make_pod("b", "n1", "200m", "1Mi"))
        cache.remove_pod(make_pod("a", "n1"))
        end = list(cache.events())[-1].id
        output = CliRunner().invoke(main, ["--cache", cache_name, "diff", start, end]).output
        assert output.splitlines() == [
            "node n1",
            "  + pod node_info_cache_test/b",
            "  - pod node_info_cache_test/a",
            "  cpu requested: 100m -> 200m",  # kubectl's units
        ]
    finally:
        cache.clear()


def test_verify_while_commands_flow_reports_no_false_difference(make_cache):
    """Each live read is compared with the fold at the event it reflects: commands applied
    between the replay and the reads (here, all the time) make no difference."""
    import threading
    import time

    from schedcache.history.verify import compare

    cache, writer = make_cache(), make_cache(replica="writer")
    for n in range(4):
        cache.add_node(make_node(f"n{n}", "64", "64Gi"))
    stop = threading.Event()
    applied = []

    def flow() -> None:
        i = 0
        while not stop.is_set():
            pod = make_pod(f"p{i}", f"n{i % 4}", "10m", "1Mi")
            writer.add_pod(pod)
            if i % 3:
                writer.remove_pod(pod)
            if i % 7 == 0:
                writer.update_node(None, make_node(f"n{i % 4}", "64", f"{64 + i % 2}Gi"))
            applied.append(i)
            i += 1
            time.sleep(0)  # (fakeredis runs in this process: let the reader run too)

    thread = threading.Thread(target=flow, daemon=True)
    thread.start()
    try:
        while len(applied) < 20:  # flowing
            time.sleep(0.01)
        before = len(applied)
        runs = [compare(cache._replay(), cache.store) for _ in range(8)]
        runs += [cache.verify() for _ in range(4)]  # the invariants too
        assert len(applied) > before  # commands flowed while verify ran
    finally:
        stop.set()
        thread.join(10)
    assert runs == [[]] * 12
    assert cache.verify() == []  # and, quiet again, everything holds


def commands_between_the_reads(monkeypatch, between) -> list[int]:
    """Run ``between(try_number)`` just before each of the invariants' reads of a chunk of nodes
    (after the list of their pods was made): a command landing there, every time if need be."""
    from schedcache.history import invariants

    read_chunk, tries = invariants._read_chunk, []

    def raced(store, names, uids):
        tries.append(len(tries))
        between(tries[-1])
        return read_chunk(store, names, uids)

    monkeypatch.setattr(invariants, "_read_chunk", raced)
    return tries


def test_invariants_read_a_pod_placed_or_removed_after_their_lists_were_made(
    make_cache, monkeypatch
):
    """The race CI met on Cluster under load: a pod placed after the invariants listed the pods
    counted on its node and not in the node's totals. The keys and every named pod's record
    are now read at one event, so no false difference is left."""
    from schedcache.history.invariants import invariants

    cache, writer = make_cache(), make_cache(replica="writer")
    cache.add_node(make_node("n0", "64", "64Gi"))
    leaving = make_pod("leaving", "n0", "20m", "2Mi")
    cache.add_pod(leaving)

    def between(attempt: int) -> None:
        if attempt == 0:
            writer.add_pod(make_pod("arrived", "n0", "10m", "1Mi"))
            writer.remove_pod(leaving)
            writer.add_node(make_node("n1", "8", "8Gi"))
            writer.add_pod(make_pod("on-new-node", "n1", "30m", "1Mi"))

    tries = commands_between_the_reads(monkeypatch, between)
    assert invariants(cache.store) == []
    assert tries == [0, 1]  # read again with the pod the first read had not listed
    cache.client.hincrby(cache.keys.node("n1"), "r:cpu", 5)  # and a real fault still shows
    assert [str(d) for d in invariants(cache.store)] == ["node n1: r:cpu: expected 30, found 35"]


def test_invariants_leave_unchecked_only_what_pods_arriving_on_every_read_hide(
    make_cache, monkeypatch
):
    """Pods placed before every read can never be read with their node: those pods and their
    node's totals are left out, and every other node's fault is still reported."""
    from schedcache.history.invariants import COVER_ATTEMPTS, invariants

    cache, writer = make_cache(), make_cache(replica="writer")
    for name in ("busy", "quiet"):
        cache.add_node(make_node(name, "64", "64Gi"))
        cache.add_pod(make_pod(f"first-on-{name}", name, "10m", "1Mi"))
    cache.client.hincrby(cache.keys.node("quiet"), "r:cpu", 3)
    tries = commands_between_the_reads(
        monkeypatch, lambda n: writer.add_pod(make_pod(f"new{n}", "busy", "10m", "1Mi"))
    )
    assert [str(d) for d in invariants(cache.store)] == ["node quiet: r:cpu: expected 10, found 13"]
    assert len(tries) == COVER_ATTEMPTS
    monkeypatch.undo()  # quiet again: the busy node is checked, whole
    cache.client.hincrby(cache.keys.node("busy"), "r:mem", 1)
    assert {(d.subject, d.field) for d in invariants(cache.store)} == {
        ("node quiet", "r:cpu"),
        ("node busy", "r:mem"),
    }


def test_a_pod_moved_between_chunks_while_they_are_read_is_no_difference(make_cache, monkeypatch):
    """Nodes are read a chunk at a time, each at its own event: a pod moved from a node not
    yet read to one already read is seen on none, and the other way on two. Both are read again,
    the suspects alone at one event, before anything is reported; a real fault still shows."""
    from schedcache.history import invariants

    monkeypatch.setattr(invariants, "NODES_PER_POINT", 1)  # a chunk a node: n0, n1, n2
    cache, writer = make_cache(), make_cache(replica="writer")
    for name in ("n0", "n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi"))
    back, forth = make_pod("back", "n2", "10m", "1Mi"), make_pod("forth", "n0", "20m", "1Mi")
    cache.add_pod(back)
    cache.add_pod(forth)
    guard = anti_pod("guard", "n1")
    cache.add_pod(guard)

    def between(attempt: int) -> None:
        if attempt == 1:  # n0 read, n1 and n2 not yet
            writer.remove_pod(back)
            writer.add_pod(make_pod("back", "n0", "10m", "1Mi"))
            writer.remove_pod(forth)
            writer.add_pod(make_pod("forth", "n2", "20m", "1Mi"))
        if attempt == 2:  # n1 read: the chunks' sum of anti-affine pods is one too many now
            writer.remove_pod(guard)

    tries = commands_between_the_reads(monkeypatch, between)
    assert invariants.invariants(cache.store) == []
    assert tries == [0, 1, 2]
    monkeypatch.undo()
    placed = cache.client.zscore(cache.keys.node_pods("n2"), "forth")
    cache.client.zadd(cache.keys.node_pods("n1"), {"forth": placed})  # on two nodes by hand
    cache.client.incr(cache.keys.anti_affine_pods)
    found = {(d.subject, d.field, str(d.actual)) for d in invariants.invariants(cache.store)}
    assert ("pod forth", "nodes", "['n1', 'n2']") in found
    assert ("cache", "antipods", "1") in found


def anti_pod(name: str, node: str):
    """A pod with required anti-affinity: it counts in its node's ``anti`` and ``antipods``."""
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    rules = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return make_pod(name, node, "10m", "1Mi", labels={"app": "guard"}, affinity=rules)
