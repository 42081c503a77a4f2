"""``schedcache sync``: list-watch from an API server (tests/apiserver.py, through the official
client) into the cache, with one and with three feeders, on every backend.

The outcome a user cares about: the cache holds exactly the server's nodes and its assigned,
running pods (compared model by model), ``verify()`` finds the stream and the keys agreeing,
and the stream holds each change once however many feeders delivered it.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import schedcache.cli.app as cli_app
from schedcache import Cache
from schedcache.errors import FitConflict, RetriesExhausted, ValidationError
from schedcache.feed.progress import read_progress
from schedcache.feed.sync import ResourceFeed, Syncer, SyncSettings, api_client, pod_command
from schedcache.model.values import Node, Pod
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL, backend_url, real_client
from tests.factories import keyspace, make_node, make_pod

# Nodes and pods: the feeds these tests count (PodGroups: tests/test_podgroup_sync.py).
FAST = SyncSettings(
    page_size=7,
    watch_timeout=30,
    backoff=0.05,
    max_backoff=0.3,
    progress_every=0.05,
    pod_groups=False,
)
Obj = dict[str, Any]


def node_obj(name: str, cpu: str = "4", zone: str = "z1") -> Obj:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def pod_obj(
    name: str, node: str = "", phase: str = "Running", cpu: str = "100m", uid: str = ""
) -> Obj:
    spec: Obj = {
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]
    }
    if node:
        spec["nodeName"] = node
    metadata: Obj = {"name": name, "namespace": "default"}
    if uid:
        metadata["uid"] = uid
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase},
    }


def expected_state(server: FakeApiServer) -> tuple[dict[str, Node], dict[str, Pod]]:
    """What kube-scheduler's cache holds for the server's objects."""
    nodes = {obj["metadata"]["name"]: Node.from_k8s(obj) for obj in server.objects("Node")}
    pods = {}
    for obj in server.objects("Pod"):
        pod = Pod.from_k8s(obj)
        if pod.node_name and pod.phase not in ("Succeeded", "Failed"):
            pods[pod.uid] = pod
    return nodes, pods


def cached_state(cache: Cache) -> tuple[dict[str, Node], dict[str, Pod]]:
    dump = cache.dump()
    nodes = {name: info.node for name, info in dump.nodes.items() if info.node is not None}
    pods = {pod.uid: pod for info in dump.nodes.values() for pod in info.pods}
    return nodes, pods


def in_step(cache: Cache, server: FakeApiServer, timeout: float = 15.0) -> None:
    """Wait until the cache holds what the server does, then check the stream agrees."""
    deadline = time.monotonic() + timeout
    while cached_state(cache) != expected_state(server):
        if time.monotonic() > deadline:
            cached, expected = cached_state(cache), expected_state(server)
            raise AssertionError(
                f"cache out of step: nodes {sorted(cached[0])} vs {sorted(expected[0])}, "
                f"pods {sorted(p.name for p in cached[1].values())} vs "
                f"{sorted(p.name for p in expected[1].values())}"
            )
        time.sleep(0.02)
    assert cache.verify() == []


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)


def event_counts(cache: Cache) -> Counter[str]:
    return Counter(event.type for event in cache.events())


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


@pytest.fixture
def start_feeders(
    cache: Cache, make_cache: Callable[..., Cache], tmp_path: Path
) -> Iterator[Callable[..., list[Syncer]]]:
    """``start_feeders(server, n)``: n Syncers, each with its own Cache object and API client
    (as n processes would have), started and synced."""
    started: list[Syncer] = []

    def start(server: FakeApiServer, n: int = 1, **settings: Any) -> list[Syncer]:
        kubeconfig = str(server.kubeconfig(tmp_path / f"kubeconfig-{len(started)}"))
        options = {**FAST.__dict__, **settings}
        syncers = []
        for i in range(n):
            feeder = make_cache(replica=f"feeder-{len(started) + i}")
            syncer = Syncer(feeder, api_client(kubeconfig), SyncSettings(**options), f"f{i}")
            started.append(syncer.start())
            syncers.append(syncer)
        for syncer in syncers:
            assert syncer.wait_synced(15), "the first list did not finish"
        return syncers

    yield start
    for syncer in started:
        syncer.stop()


def populate(server: FakeApiServer, nodes: int = 5, pods: int = 30) -> None:
    for i in range(nodes):
        server.create(node_obj(f"n{i}"))
    for i in range(pods):
        phase = "Succeeded" if i % 10 == 9 else "Running"
        server.create(pod_obj(f"p{i}", f"n{i % nodes}" if i % 7 else "", phase))


def churn(server: FakeApiServer) -> None:
    """What a cluster does: binds, finishes, deletes, relabels, adds and removes nodes."""
    server.update(pod_obj("p0", "n1"))  # pending until now: bound
    server.create(pod_obj("q1", "n2", cpu="250m"))
    server.update(pod_obj("p1", "n1", phase="Succeeded"))  # leaves the cache
    server.update(pod_obj("p2", "n2", cpu="300m"))  # resized
    server.delete("Pod", "p3", "default")
    server.update(node_obj("n0", cpu="8", zone="z2"))
    server.create(node_obj("n9"))
    server.create(pod_obj("q2", "n9"))
    server.delete("Pod", "p4", "default")
    server.delete("Node", "n4")  # its pods (p9, p19, p29 ...) stay bound to it: ghost node


@pytest.mark.parametrize("feeders", [1, 3])
def test_a_list_then_a_watch_keep_the_cache_in_step(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]], feeders: int
) -> None:
    populate(server)
    syncers = start_feeders(server, feeders)
    in_step(cache, server)
    assert event_counts(cache) == {"NodeAdded": 5, "PodAdded": 22}
    churn(server)
    in_step(cache, server)
    # Each change once, however many feeders saw it: p0 q1 q2 added, p1 p3 p4 removed, p2
    # updated; n9 added, n0 updated, n4 removed.
    assert event_counts(cache) == {
        "NodeAdded": 6,
        "NodeUpdated": 1,
        "NodeRemoved": 1,
        "PodAdded": 25,
        "PodUpdated": 1,
        "PodRemoved": 3,
    }
    # Every feeder handles every pod change (the first list: 22 running and 5 pending pods,
    # then seven): one applies it, the others' copies are dropped.
    pods = [s.feeds[1].counters for s in syncers]
    eventually(lambda: sum(c.applied + c.dropped for c in pods) == feeders * (22 + 5 + 7))
    assert sum(c.applied for c in pods) == 22 + 5 + 7
    # The pending ones are in the scheduling queue, once each; p0, bound, left it.
    queued = [q.pod.name for q in SchedulingQueue(cache, "default-scheduler").pop(10)]
    assert sorted(queued) == ["p14", "p21", "p28", "p7"]
    progress = {p.resource: p for p in read_progress(cache)}
    assert progress["pods"].version.isdigit() and progress["pods"].age() < 10


@pytest.mark.parametrize(
    ("settings", "queued"),
    [
        ({"queue_for": frozenset({"mine"})}, ["mine"]),
        ({"queue_for": frozenset()}, []),
        ({}, ["default", "mine"]),
    ],
)
def test_pending_pods_are_queued_per_scheduler_name_as_asked(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    settings: dict[str, Any],
    queued: list[str],
) -> None:
    server.create(node_obj("n0"))
    server.create(pod_obj("default"))
    mine = pod_obj("mine")
    mine["spec"]["schedulerName"] = "mine"
    server.create(mine)
    server.create(pod_obj("done", phase="Failed"))  # never queued: it will not run
    start_feeders(server, **settings)
    found = [
        q.pod.name
        for name in ("default-scheduler", "mine")
        for q in SchedulingQueue(cache, name).pop(10)
    ]
    assert sorted(found) == queued
    # Not queued is not listed either: the pod feed of a cache without a queue lists assigned
    # pods only, as before.
    listed = [r for r in server.requests if r.method == "GET" and "/pods" in r.path]
    selectors = {"spec.nodeName!=" in r.query.get("fieldSelector", "") for r in listed}
    assert selectors == {settings.get("queue_for") == frozenset()}


def test_watches_that_end_or_drop_resume_without_a_relist(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    populate(server)
    (syncer,) = start_feeders(server)
    assert server.wait_for_watches(2)
    server.drop_watches()  # cut mid-stream
    server.create(pod_obj("during-drop", "n1"))
    assert server.wait_for_watches_started(4)
    server.end_watches()  # a clean end, as the server's request timeout
    server.update(pod_obj("p2", "n2", cpu="200m"))
    server.delete("Pod", "p5", "default")
    in_step(cache, server)
    # Each feed watched three times (the first, after the drop, after the end) and never
    # listed again. (A drop that lands before the server answered the watch is retried by
    # urllib3 itself, so the feeds' own restart counters may see one fewer.)
    eventually(lambda: server.watches_started >= 6)
    assert [feed.counters.relists for feed in syncer.feeds] == [1, 1]
    assert [feed.counters.api_errors for feed in syncer.feeds] == [0, 0]


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_410_gone_relists_and_removes_what_vanished_meanwhile(
    cache: Cache,
    make_cache: Callable[..., Cache],
    start_feeders: Callable[..., list[Syncer]],
    gone_as_http: bool,
) -> None:
    with FakeApiServer(gone_as_http=gone_as_http) as server:
        populate(server)
        (syncer,) = start_feeders(server)
        in_step(cache, server)
        server.down()  # away: the feeder backs off, the cache stays as it was
        before = cached_state(cache)
        server.delete("Pod", "p5", "default")
        server.delete("Node", "n3")
        server.update(pod_obj("p6", "n1", cpu="500m"))
        server.create(pod_obj("new", "n2"))
        server.delete("Pod", "p7", "default")  # pending, queued: it leaves the queue too
        server.create(pod_obj("pending-new"))
        server.compact()  # the history the feeder would resume from is gone
        time.sleep(0.3)
        assert cached_state(cache) == before
        server.up()
        in_step(cache, server)
        queued = [q.pod.name for q in SchedulingQueue(cache, "default-scheduler").pop(10)]
        assert sorted(queued) == ["p0", "p14", "p21", "p28", "pending-new"]
        assert [feed.counters.relists for feed in syncer.feeds] == [2, 2]
        assert all(feed.counters.api_errors >= 1 for feed in syncer.feeds)
        syncer.stop()


def test_a_list_whose_snapshot_expires_between_pages_starts_over(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    populate(server)
    first_page = ResourceFeed._page
    expired: list[str] = []

    def page(feed: ResourceFeed, token: str | None) -> dict[str, Any]:
        answer = first_page(feed, token)
        if feed.resource == "pods" and not expired:
            # After the first page: p5 goes, and the history the continue token needs too.
            expired.append(server.delete("Pod", "p5", "default")["metadata"]["uid"])
            server.compact()
        return answer

    monkeypatch.setattr(ResourceFeed, "_page", page)
    (syncer,) = start_feeders(server)
    in_step(cache, server)
    assert cache.pod_state(expired[0]) is None
    # One list of pods, started over within itself (the nodes' watch may meet the compaction
    # with a 410 of its own and relist).
    assert syncer.feeds[1].counters.relists == 1
    expired_requests = [
        r for r in server.requests if r.path == "/api/v1/pods" and "continue" in r.query
    ]
    assert expired_requests, "the second page was asked with the expired token"


def test_redis_away_during_a_watch_loses_no_change(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Commands Redis did not take (the retry policy gave up) come again from the watch."""
    populate(server)
    start_feeders(server)
    in_step(cache, server)
    failures = {"left": 3}
    apply_one, apply_batch = ResourceFeed._apply_one, ResourceFeed._apply_batch

    def away(real: Callable[..., None]) -> Callable[..., None]:
        def call(feed: ResourceFeed, arg: Any) -> None:
            if failures["left"] > 0:
                failures["left"] -= 1
                raise RetriesExhausted("Redis did not answer (test)")
            real(feed, arg)

        return call

    monkeypatch.setattr(ResourceFeed, "_apply_one", away(apply_one))
    monkeypatch.setattr(ResourceFeed, "_apply_batch", away(apply_batch))
    for i in range(6):
        server.create(pod_obj(f"while-away-{i}", f"n{i % 3}"))
        time.sleep(0.05)
    server.delete("Pod", "p2", "default")
    in_step(cache, server)
    assert failures["left"] == 0
    assert event_counts(cache)["PodAdded"] == 22 + 6  # each once, though some came twice


def test_a_malformed_object_is_counted_and_skipped_and_the_sync_carries_on(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    server.create(node_obj("n0"))
    server.create(pod_obj("bad-list", "n0", cpu="lots"))
    (syncer,) = start_feeders(server)
    server.create(pod_obj("bad-watch", "n0", cpu="-1"))
    server.create(pod_obj("good", "n0"))
    eventually(lambda: cache.pod_count() >= 1)
    assert [pod.name for pod in cache.list_pods()] == ["good"]
    assert syncer.feeds[1].counters.invalid == 2
    assert syncer.feeds[1].counters.results["invalid"] == 2


def test_one_feeder_dying_loses_nothing(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    populate(server)
    first, second = start_feeders(server, 2)
    in_step(cache, server)
    first.stop()
    churn(server)
    in_step(cache, server)
    assert sum(feed.counters.applied for feed in second.feeds) >= 10


def test_a_bound_pod_confirms_the_assumed_one_and_a_relist_keeps_assumed_pods(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    server.create(node_obj("n0"))
    cache.assume_pod(make_pod("placed", "n0", "100m", "1Mi", uid="uid-placed"))
    cache.assume_pod(make_pod("unbound-yet", "n0", "100m", "1Mi", uid="uid-waiting"))
    start_feeders(server)
    assert cache.pod_state("uid-waiting") == "assumed"  # the list does not speak for it
    server.create(pod_obj("placed", "n0", uid="uid-placed"))  # the binding landed
    eventually(lambda: cache.pod_state("uid-placed") == "added")
    assert cache.pod_state("uid-waiting") == "assumed"
    assert event_counts(cache)["PodAdded"] == 1 and cache.verify() == []


def test_versions_order_each_objects_changes_and_drops_leave_redis_as_it_was(
    cache: Cache,
) -> None:
    cache.run(commands.sync_node(make_node("n0", "4", "8Gi"), "10"))
    pod = make_pod("p", "n0", "100m", "1Mi")
    assert cache.run(commands.sync_pod(pod, "12", present=True))[:2] == [b"applied", b"add"]
    before = keyspace(cache.client, cache.keys.pattern)
    for version in ("12", "11", "9"):  # repeated, then stale
        reply = cache.run(commands.sync_pod(pod.with_node("n0"), version, present=True))
        assert reply[0] == b"dropped" and reply[2] == b"12"
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert cache.run(commands.sync_pod_gone(pod.uid, "20"))[:2] == [b"applied", b"remove"]
    # A late MODIFIED of the deleted pod meets the tombstone.
    late = cache.run(commands.sync_pod(pod, "15", present=True))
    assert late[:2] == [b"dropped", b"stale"] and cache.pod_state(pod) is None
    # Versions compare as numbers, not strings.
    assert cache.run(commands.sync_node(make_node("n0", "8", "8Gi"), "9"))[0] == b"dropped"
    assert cache.run(commands.sync_node(make_node("n0", "8", "8Gi"), "100"))[0] == b"applied"
    kinds = [event.type for event in cache.events()]
    assert kinds == ["NodeAdded", "PodAdded", "PodRemoved", "NodeUpdated"]


def test_a_removal_without_a_version_leaves_a_tombstone_not_a_leak(cache: Cache) -> None:
    cache.run(commands.sync_node(make_node("n0", "4", "8Gi"), "10"))
    pod = make_pod("p", "n0", "100m", "1Mi")
    cache.run(commands.sync_pod(pod, "12", present=True))
    assert cache.client.pttl(cache.keys.pod_version(pod.uid)) == -1  # lives with the pod
    cache.remove_pod(pod)  # the scheduler's own remove, no version
    cache.remove_node("n0")
    for key in (cache.keys.pod_version(pod.uid), cache.keys.node_version("n0")):
        assert 0 < cache.client.pttl(key) <= 3_600_000
    # Still a tombstone: a late copy of the pod's last change does not bring it back.
    assert cache.run(commands.sync_pod(pod, "12", present=True))[0] == b"dropped"


@pytest.mark.parametrize("version", ["", "abc", "-1", "1.5", " 7", None, 12, "9" * 41])
def test_an_unorderable_resource_version_is_refused_before_redis(
    cache: Cache, version: Any
) -> None:
    with pytest.raises(ValidationError, match=r"metadata\.resourceVersion"):
        commands.sync_pod(make_pod("p", "n0", "100m", "1Mi"), version, present=True)
    assert keyspace(cache.client, cache.keys.pattern) == {}


def sync_command(server: FakeApiServer, tmp_path: Path, name: str) -> list[str]:
    """``schedcache sync`` of cache ``name`` on the real Redis, as an operator runs it."""
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    cli = [sys.executable, "-m", "schedcache.cli", "--redis", REAL_REDIS_URL, "--cache", name]
    return [*cli, "sync", "--kubeconfig", kubeconfig]


def start_sync(server: FakeApiServer, tmp_path: Path, name: str) -> subprocess.Popen[str]:
    command = sync_command(server, tmp_path, name)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_the_sync_command_feeds_a_shared_cache_until_a_signal_and_exits_0(
    server: FakeApiServer, tmp_path: Path, stop_signal: int
) -> None:
    """The command as an operator runs it: a process against the real Redis."""
    populate(server, nodes=3, pods=12)
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(real_client(), name)
    process = start_sync(server, tmp_path, name)
    try:
        in_step(cache, server, timeout=30)
        server.create(pod_obj("late", "n1"))
        in_step(cache, server)
        process.send_signal(stop_signal)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "Traceback" not in err and "stopped; nodes: 3 applied" in err
    finally:
        process.kill()
        cache.clear()


# -- issue 29: feeds that never stall or go blind --------------------------------------------


def test_a_list_page_that_sends_nothing_times_out_backs_off_and_recovers(
    cache: Cache, make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: no timeout on list requests, so a stalled list hung the feed with no log,
    back-off or count."""
    populate(server, nodes=2, pods=4)
    server.stall_lists()
    settings = SyncSettings(**{**FAST.__dict__, "list_timeout": 0.3})
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    syncer = Syncer(make_cache(replica="feeder"), api_client(kubeconfig), settings, "f").start()
    try:
        eventually(lambda: all(feed.counters.list_timeouts >= 2 for feed in syncer.feeds))
        assert not syncer.wait_synced(0)
        assert all(feed.counters.api_errors >= 2 for feed in syncer.feeds)
        # One request per timeout (urllib3 would resend a GET three times: 4 timeouts each).
        lists = [r for r in server.requests if r.path == "/api/v1/nodes"]
        assert len(lists) <= syncer.feeds[0].counters.list_timeouts + 1
        server.release_lists()
        assert syncer.wait_synced(15)
        in_step(cache, server)
    finally:
        server.release_lists()
        syncer.stop()


def test_a_refused_connection_is_an_api_error_not_a_list_timeout(
    make_cache: Callable[..., Cache], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: urllib3's NewConnectionError is a ConnectTimeoutError, so an API server that
    refused at once was logged as "a list page sent nothing for 30 s" and counted as a list
    timeout."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    caplog.set_level("WARNING", logger="schedcache.feed.sync")
    cache = make_cache(replica="feeder")
    syncer = Syncer(cache, api_client(str(kubeconfig)), FAST, "f").start()
    try:
        eventually(lambda: all(feed.counters.api_errors >= 2 for feed in syncer.feeds))
    finally:
        syncer.stop()
    assert all(feed.counters.list_timeouts == 0 for feed in syncer.feeds)
    unavailable = [m for m in (r.getMessage() for r in caplog.records) if "unavailable" in m]
    assert unavailable and not any("sent nothing" in message for message in unavailable)
    assert all("unavailable (MaxRetryError: " in message for message in unavailable), unavailable


def test_sigterm_mid_list_exits_within_2_seconds(server: FakeApiServer, tmp_path: Path) -> None:
    """Before: a list the API server is silent on held SIGTERM for 20 s (two joins of 10 s,
    then a thread pool's worker at exit)."""
    populate(server, nodes=2, pods=4)
    server.stall_lists()
    name = f"t-{uuid.uuid4().hex[:12]}"
    process = start_sync(server, tmp_path, name)
    try:
        eventually(lambda: sum(r.path.endswith(("/nodes", "/pods")) for r in server.requests) >= 2)
        time.sleep(0.3)  # both lists are now waiting on the server
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        took = time.monotonic() - sent
        assert process.returncode == 0, err
        assert took < 2.0, f"SIGTERM took {took:.1f} s"
        assert "Traceback" not in err and "stopped;" in err
        assert Cache(real_client(), name).node_count() == 0  # nothing reconciled from no list
    finally:
        process.kill()
        server.release_lists()
        Cache(real_client(), name).clear()


def test_a_malformed_watch_event_is_skipped_counted_and_the_watch_goes_past_it(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    """Before: ``"metadata": "a-string"`` raised before the skip logic, so the watch restarted
    from the same resourceVersion for ever and later events were never applied."""
    server.create(node_obj("n0"))
    (syncer,) = start_feeders(server)
    assert server.wait_for_watches(4)  # nodes, pods, budgets, namespaces
    watches = server.watches_started
    server.emit_raw("Pod", "MODIFIED", {"kind": "Pod", "metadata": "a-string"})
    server.emit_raw("Pod", "ADDED", {"kind": "Pod", "metadata": {"resourceVersion": [1]}})
    server.create(pod_obj("after", "n0"))
    in_step(cache, server)
    pods = syncer.feeds[1].counters
    assert pods.invalid == 2 and pods.results["invalid"] == 2
    assert pods.watch_restarts == 0 and server.watches_started == watches
    assert pods.last_version == str(server.resource_version)


def labelled_pod(name: str, node: str, labels: int, cpu: str) -> Obj:
    obj = pod_obj(name, node, cpu=cpu)
    obj["metadata"]["labels"] = {f"example.com/label-{i}": "v" * 6 for i in range(labels)}
    return obj


def test_a_pod_with_more_labels_than_the_cache_stores_still_counts_on_its_node(
    cache: Cache, server: FakeApiServer, start_feeders: Callable[..., list[Syncer]]
) -> None:
    """Before: a valid pod with 70,000 labels (under etcd's 1.5 MiB) was skipped as invalid:
    invisible to fit, so a fit-checked claim overcommitted its node."""
    server.create(node_obj("n0", cpu="4"))
    server.create(labelled_pod("listed", "n0", 70_000, cpu="2"))
    (syncer,) = start_feeders(server)
    server.create(labelled_pod("watched", "n0", 70_000, cpu="1500m"))
    eventually(lambda: cache.pod_count() == 2)
    pods = {pod.name: pod for pod in cache.list_pods()}
    assert all(pod.truncated and not pod.labels for pod in pods.values())
    assert pods["listed"].requests.milli_cpu == 2000
    assert syncer.feeds[1].counters.truncated == 2 and syncer.feeds[1].counters.invalid == 0
    with pytest.raises(FitConflict):  # 3500m of 4000m taken: 1 cpu more does not fit
        cache.assume_pod(make_pod("claim", "n0", "1", "1Mi"), check_fit=True)
    assert cache.verify() == []


def test_stats_and_verify_show_how_many_pods_are_truncated(
    backend: str,
    client: Any,
    cache: Cache,
    cache_name: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    url = backend_url(backend, request)
    if backend == "fakeredis":  # every embedded connect() is a new server: use the fixture's
        monkeypatch.setattr(cli_app.Settings, "client", lambda self: client)
    cache.run(commands.sync_node(make_node("n0", "4", "8Gi"), "1"))
    big = labelled_pod("big", "n0", 70_000, cpu="1")
    big["metadata"].update(uid="uid-big", resourceVersion="2")
    cache.run(pod_command("ADDED", big))
    cache.run(
        pod_command(
            "ADDED",
            {
                **pod_obj("small", "n0", uid="uid-small"),
                "metadata": {
                    "name": "small",
                    "namespace": "default",
                    "uid": "uid-small",
                    "resourceVersion": "3",
                },
            },
        )
    )

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli_app.main, ["--redis", url, "--cache", cache_name, *args])

    stats = run("stats")
    assert stats.exit_code == 0 and "truncated pods\t1\n" in stats.output, stats.output
    verify = run("verify")
    assert verify.exit_code == 0, verify.output
    assert "truncated pod records (stored without labels): 1" in verify.output


def test_sync_once_exits_1_when_it_skipped_invalid_objects_and_applies_the_rest(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: ``sync --once`` exited 0 after skipping invalid objects, unlike ``load``."""
    server.create(node_obj("n0"))
    server.create(pod_obj("good", "n0"))
    server.create(pod_obj("bad", "n0", cpu="lots"))
    name = f"t-{uuid.uuid4().hex[:12]}"
    command = [*sync_command(server, tmp_path, name), "--once"]
    try:
        once = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert once.returncode == 1, once.stderr
        assert "1 object invalid or rejected" in once.stderr and "Traceback" not in once.stderr
        assert [pod.name for pod in Cache(real_client(), name).list_pods()] == ["good"]
        server.delete("Pod", "bad", "default")
        clean = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert clean.returncode == 0, clean.stderr
    finally:
        Cache(real_client(), name).clear()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--queue-for", "Not_A_Name"], "--queue-for"),
        (["--no-queue", "--queue-for", "mine"], "--no-queue and --queue-for"),
        (["--batch-linger", "2"], "--batch-linger"),
        (["--batch-linger", "-0.01"], "--batch-linger"),
    ],
)
def test_the_sync_command_refuses_a_bad_queue_choice_in_one_line(
    args: list[str], says: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        cli_app.main, ["sync", *args, "--kubeconfig", str(tmp_path / "none"), "--once"]
    )
    assert result.exit_code == 2 and says in result.output
    assert "Traceback" not in result.output


def calls_to_redis(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ops of each of the feeders' calls to Redis (one list a call), from now on."""
    calls: list[list[str]] = []
    apply_one, apply_batch = ResourceFeed._apply_one, ResourceFeed._apply_batch

    def one(feed: ResourceFeed, command: commands.Command) -> None:
        calls.append([str(command.args[1])])
        apply_one(feed, command)

    def batch(feed: ResourceFeed, planned: list[commands.Command]) -> None:
        calls.append([str(command.args[1]) for command in planned])
        apply_batch(feed, planned)

    monkeypatch.setattr(ResourceFeed, "_apply_one", one)
    monkeypatch.setattr(ResourceFeed, "_apply_batch", batch)
    return calls


def queued_then_bound(cache: Cache, server: FakeApiServer, names: list[str]) -> None:
    """Pending pods, queued by the feed, then bound to n0 one after another."""
    for name in names:
        server.create(pod_obj(name, ""))
    eventually(
        lambda: SchedulingQueue(cache, "default-scheduler").lengths()["active"] == len(names)
    )
    for name in names:
        server.bind("default", name, {"target": {"name": "n0"}})


def test_bindings_of_pods_seen_pending_wait_to_share_one_call(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bindings of pods the feed saw pending (a claim's confirmation), watched within
    ``batch_linger`` of each other, are confirmed in one call; any other change of the pods'
    feed (here a pending pod) is sent at once, with what waits before it, in order."""
    server.create(node_obj("n0"))
    start_feeders(server, batch_linger=1.0)
    calls = calls_to_redis(monkeypatch)
    queued_then_bound(cache, server, [f"web-{i}" for i in range(4)])
    eventually(lambda: cache.pod_count() == 4, timeout=5)
    assert calls[-1] == ["set"] * 4
    calls.clear()
    queued_then_bound(cache, server, ["web-4"])
    started = time.monotonic()
    server.create(pod_obj("pending", ""))  # (queued: it ends the wait)
    eventually(lambda: cache.pod_count() == 5, timeout=5)
    assert time.monotonic() - started < 0.9 and calls[-1] == ["set", "queue"]


def test_a_pod_first_seen_assigned_never_waits(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod created bound (a DaemonSet's, a static pod's, another scheduler's placement the
    feed never saw pending) is no confirmation: no claim counts it yet, so it goes at once
    (found in review: waiting, a claim could take its room meanwhile)."""
    server.create(node_obj("n0", cpu="1"))
    start_feeders(server, batch_linger=1.0)
    calls = calls_to_redis(monkeypatch)
    started = time.monotonic()
    server.create(pod_obj("daemon", "n0", cpu="900m"))
    eventually(lambda: cache.pod_count() == 1, timeout=5)
    assert time.monotonic() - started < 0.9 and calls == [["set"]]
    with pytest.raises(FitConflict):
        cache.assume_pod(make_pod("late", "n0", "500m", "1Mi"), check_fit=True)


def test_without_batch_linger_each_binding_goes_alone(
    cache: Cache,
    server: FakeApiServer,
    start_feeders: Callable[..., list[Syncer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.create(node_obj("n0"))
    start_feeders(server, batch_linger=0)
    names = [f"web-{i}" for i in range(3)]
    for name in names:
        server.create(pod_obj(name, ""))
    eventually(lambda: SchedulingQueue(cache, "default-scheduler").lengths()["active"] == 3)
    calls = calls_to_redis(monkeypatch)
    for i, name in enumerate(names):
        server.bind("default", name, {"target": {"name": "n0"}})
        eventually(lambda i=i: cache.pod_count() == i + 1, timeout=5)
    assert calls == [["set"]] * 3
    in_step(cache, server)


@pytest.mark.parametrize("linger", [-0.1, 1.5, float("nan"), True, "0.1"])
def test_a_batch_linger_out_of_bounds_is_refused_by_name(linger: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        SyncSettings(batch_linger=linger)
    assert refused.value.field == "batch_linger"
