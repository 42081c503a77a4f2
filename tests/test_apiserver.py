"""FakeApiServer checked with the official ``kubernetes`` client, as ``schedcache sync`` uses it.

Every test talks to the server only through ``kubernetes.client.CoreV1Api`` and
``kubernetes.watch.Watch`` (typed models, or raw JSON with ``_preload_content=False``), so a
passing suite means the client accepts our protocol unchanged.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

kubernetes = pytest.importorskip("kubernetes")

import urllib3  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from tests.apiserver import FakeApiServer  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ACTIVE = "status.phase!=Succeeded,status.phase!=Failed"


def pod(name: str, node: str = "", phase: str = "Pending", namespace: str = "default") -> dict:
    """A minimal pod the client's models accept (they require spec.containers)."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def core_api(server: FakeApiServer, tmp_path: Path) -> client.CoreV1Api:
    """A CoreV1Api configured from the server's kubeconfig, not touching global config."""
    api_client = config.new_client_from_config(config_file=str(server.kubeconfig(tmp_path / "kc")))
    return client.CoreV1Api(api_client)


@pytest.fixture
def v1(server: FakeApiServer, tmp_path: Path) -> client.CoreV1Api:
    return core_api(server, tmp_path)


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def after_watch_opens(server: FakeApiServer, fn: Callable[[], None], n: int = 1) -> None:
    """Run fn once n watches are open: a generator only connects on its first next()."""

    def run() -> None:
        assert server.wait_for_watches(n)
        fn()

    in_thread(run)


# ------------------------------------------------------------------ get, list, config


def test_load_kube_config_accepts_the_written_file(server: FakeApiServer, tmp_path: Path) -> None:
    server.create(node("n1"))
    path = server.kubeconfig(tmp_path / "config")
    saved = client.Configuration.get_default_copy()
    try:
        config.load_kube_config(config_file=str(path))
        assert client.CoreV1Api().read_node("n1").metadata.name == "n1"
    finally:
        client.Configuration.set_default(saved)
    assert server.requests[-1].path == "/api/v1/nodes/n1"


def test_get_and_missing_objects(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    server.create(pod("p1", namespace="ns1"))
    got = v1.read_namespaced_pod("p1", "ns1")
    assert got.metadata.resource_version == str(server.resource_version)
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("p1", "other")
    assert e.value.status == 404
    assert json.loads(e.value.body)["reason"] == "NotFound"
    with pytest.raises(ApiException) as e:
        v1.read_node("nope")
    assert e.value.status == 404


def test_a_wrong_token_is_401(server: FakeApiServer, tmp_path: Path) -> None:
    v1 = core_api(server, tmp_path)
    server.token = "rotated"
    with pytest.raises(ApiException) as e:
        v1.list_node()
    assert e.value.status == 401


def test_the_example_cluster_lists_through_the_typed_models(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    items = json.loads((EXAMPLES / "kubectl-cluster.json").read_text())["items"]
    for obj in items:
        server.create(obj)
    nodes = v1.list_node()
    pods = v1.list_pod_for_all_namespaces()
    assert len(nodes.items) + len(pods.items) == len(items)
    assert pods.metadata.resource_version == str(server.resource_version)
    assert all(p.kind is None for p in pods.items), "list items carry no kind, like the real one"
    ns = items[-1]["metadata"]["namespace"]
    in_ns = v1.list_namespaced_pod(ns)
    assert {p.metadata.namespace for p in in_ns.items} == {ns}


def test_pages_are_one_snapshot_even_when_objects_change(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    for i in range(10):
        server.create(pod(f"p{i}"))
    first = v1.list_pod_for_all_namespaces(limit=4)
    rv = first.metadata.resource_version
    assert first.metadata.remaining_item_count == 6
    server.update(pod("p7", phase="Running"))  # changed, deleted, added between pages
    server.delete("Pod", "p8", "default")
    server.create(pod("p99"))
    pages = [first]
    while pages[-1].metadata._continue:
        pages.append(
            v1.list_pod_for_all_namespaces(limit=4, _continue=pages[-1].metadata._continue)
        )
    assert [len(p.items) for p in pages] == [4, 4, 2]
    assert {p.metadata.resource_version for p in pages} == {rv}
    items = [i for p in pages for i in p.items]
    assert [i.metadata.name for i in items] == [f"p{i}" for i in range(10)]
    assert {i.status.phase for i in items} == {"Pending"}, "p7 as it was at the list's rv"
    fresh = v1.list_pod_for_all_namespaces()
    assert "p99" in {i.metadata.name for i in fresh.items}
    assert int(fresh.metadata.resource_version) == int(rv) + 3


def test_nodes_page_too(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    for i in range(5):
        server.create(node(f"n{i}"))
    page = v1.list_node(limit=2)
    names = [n.metadata.name for n in page.items]
    while page.metadata._continue:
        page = v1.list_node(limit=2, _continue=page.metadata._continue)
        names += [n.metadata.name for n in page.items]
    assert names == [f"n{i}" for i in range(5)]


def test_an_expired_continue_token_is_410(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    for i in range(5):
        server.create(pod(f"p{i}"))
    first = v1.list_pod_for_all_namespaces(limit=2)
    server.create(pod("late"))
    server.compact()
    with pytest.raises(ApiException) as e:
        v1.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    assert e.value.status == 410
    body = json.loads(e.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Expired", 410)
    assert body["message"].startswith("The provided continue parameter is too old")


def test_field_selectors_informers_use(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    server.create(pod("bound", node="n1", phase="Running"))
    server.create(pod("other", node="n2", phase="Running"))
    server.create(pod("pending"))
    server.create(pod("done", node="n1", phase="Succeeded"))
    server.create(pod("failed", node="n1", phase="Failed"))

    def names(selector: str) -> set[str]:
        pods = v1.list_pod_for_all_namespaces(field_selector=selector)
        return {p.metadata.name for p in pods.items}

    assert names("spec.nodeName=n1") == {"bound", "done", "failed"}
    assert names("spec.nodeName!=") == {"bound", "other", "done", "failed"}
    assert names("spec.nodeName=") == {"pending"}
    assert names(ACTIVE) == {"bound", "other", "pending"}
    assert names(f"spec.nodeName=n1,{ACTIVE}") == {"bound"}
    page = v1.list_pod_for_all_namespaces(field_selector=ACTIVE, limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    assert page.metadata.remaining_item_count is None, "not set under a selector (as real)"
    # spec.schedulerName is selectable (defaulted as the real server defaults it); a field the
    # real server does not select on answers 400.
    assert names("spec.nodeName=,spec.schedulerName=default-scheduler") == {"pending"}
    assert names("spec.schedulerName=x") == set()
    with pytest.raises(ApiException) as e:
        v1.list_pod_for_all_namespaces(field_selector="spec.dnsPolicy=x")
    assert e.value.status == 400


# ------------------------------------------------------------------ watch


def test_watch_sees_changes_in_order_then_a_bookmark(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("old"))
    rv = v1.list_pod_for_all_namespaces().metadata.resource_version
    server.create(pod("p1"))
    server.update(pod("p1", phase="Running"))

    def live() -> None:
        server.delete("Pod", "p1", "default")
        server.bookmark()

    after_watch_opens(server, live)
    w = watch.Watch()
    seen = []
    for event in w.stream(
        v1.list_pod_for_all_namespaces,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["raw_object"]["metadata"]["resourceVersion"]))
        if event["type"] == "BOOKMARK":
            w.stop()
    rvs = [int(v) for _, v in seen]
    assert [t for t, _ in seen] == ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    assert rvs == [int(rv) + 1, int(rv) + 2, int(rv) + 3, int(rv) + 3]
    assert w.resource_version == str(int(rv) + 3), "the client tracks the bookmark's rv"
    query = server.requests[-1].query
    assert query["watch"] == "true" and query["allowWatchBookmarks"] == "true"
    assert query["resourceVersion"] == rv and query["timeoutSeconds"] == "5"


def test_typed_watch_events_carry_models(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    server.create(node("n1"))
    events = list(watch.Watch().stream(v1.list_node, resource_version="1", timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"]
    assert isinstance(events[0]["object"], client.V1Node)
    assert events[0]["object"].kind == "Node"


def test_watch_from_zero_starts_with_the_current_state(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("a"))
    server.create(pod("b"))
    events = list(watch.Watch().stream(v1.list_pod_for_all_namespaces, timeout_seconds=1))
    assert sorted((e["type"], e["object"].metadata.name) for e in events) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_watch_ends_cleanly_after_timeout_seconds(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    start = time.monotonic()
    events = list(
        watch.Watch().stream(
            v1.list_node, resource_version=str(server.resource_version), timeout_seconds=1
        )
    )
    assert events == []
    assert 0.9 < time.monotonic() - start < 3
    # The client sees the stream end as the server thread finishes it: that thread forgets the
    # watch a moment later (asserting at once failed under a loaded CI run).
    assert wait_until(lambda: server.open_watches == 0, 2.0)


def test_periodic_bookmarks(tmp_path: Path) -> None:
    with FakeApiServer(bookmark_interval=0.2) as server:
        v1 = core_api(server, tmp_path)
        rv = str(server.resource_version)
        events = list(
            watch.Watch().stream(
                v1.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1
            )
        )
        assert 2 <= len(events) <= 6
        assert {e["type"] for e in events} == {"BOOKMARK"}
        assert events[0]["raw_object"] == {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": rv},
        }
        no_bookmarks = list(
            watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=1)
        )
        assert no_bookmarks == [], "only watches that allow bookmarks get them"


def test_a_pod_leaving_the_selector_is_deleted(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    rv = str(server.resource_version)
    server.create(pod("p1", node="n1"))
    server.update(pod("p1", node="n1", phase="Running"))
    server.update(pod("p1", node="n1", phase="Succeeded"))  # leaves ACTIVE
    server.create(pod("p2", node="n2", phase="Failed"))  # never matches
    server.update(pod("p2", node="n2", phase="Running"))  # enters ACTIVE
    events = list(
        watch.Watch().stream(
            v1.list_pod_for_all_namespaces,
            resource_version=rv,
            field_selector=ACTIVE,
            timeout_seconds=1,
            deserialize=False,
        )
    )
    seen = [
        (e["type"], e["object"]["metadata"]["name"], e["object"]["status"]["phase"]) for e in events
    ]
    assert seen == [
        ("ADDED", "p1", "Pending"),
        ("MODIFIED", "p1", "Running"),
        ("DELETED", "p1", "Running"),  # previous content, as the real watch cache sends
        ("ADDED", "p2", "Running"),
    ]
    assert events[2]["object"]["metadata"]["resourceVersion"] == str(int(rv) + 3)


def test_namespaced_watch_sees_only_its_namespace(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    rv = str(server.resource_version)
    server.create(pod("a", namespace="ns1"))
    server.create(pod("b", namespace="ns2"))
    events = list(
        watch.Watch().stream(v1.list_namespaced_pod, "ns1", resource_version=rv, timeout_seconds=1)
    )
    assert [e["object"].metadata.name for e in events] == ["a"]
    assert server.requests[-1].path == "/api/v1/namespaces/ns1/pods"


def test_watch_from_a_compacted_rv_raises_410_from_the_error_event(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p1"))
    old = str(server.resource_version)
    server.create(pod("p2"))
    server.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as e:
        list(w.stream(v1.list_pod_for_all_namespaces, resource_version=old, timeout_seconds=2))
    assert e.value.status == 410
    assert e.value.reason == f"Expired: too old resource version: {old} ({server.resource_version})"
    assert len([r for r in server.requests if r.query.get("watch")]) == 1


def test_without_timeout_the_client_retries_a_410_event_once_then_raises(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p1"))
    old = str(server.resource_version)
    server.create(pod("p2"))
    server.compact()
    with pytest.raises(ApiException) as e:
        list(watch.Watch().stream(v1.list_pod_for_all_namespaces, resource_version=old))
    assert e.value.status == 410
    watches = [r for r in server.requests if r.query.get("watch")]
    assert [r.query["resourceVersion"] for r in watches] == [old, old], "retried, same rv"


def test_watch_from_a_compacted_rv_as_http_410(tmp_path: Path) -> None:
    with FakeApiServer(gone_as_http=True) as server:
        v1 = core_api(server, tmp_path)
        server.create(node("n1"))
        server.create(node("n2"))
        server.compact()
        with pytest.raises(ApiException) as e:
            list(watch.Watch().stream(v1.list_node, resource_version="2", timeout_seconds=2))
        assert e.value.status == 410
        assert json.loads(e.value.body)["reason"] == "Expired"
        assert server.watches_started == 0


def test_bad_integers_are_400(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as e:
        list(watch.Watch().stream(v1.list_node, resource_version="abc", timeout_seconds=1))
    assert e.value.status == 400


def test_watch_from_the_compacted_rv_itself_is_fine(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(node("n1"))
    rv = server.compact()
    server.create(node("n2"))
    events = list(watch.Watch().stream(v1.list_node, resource_version=str(rv), timeout_seconds=1))
    assert [e["object"].metadata.name for e in events] == ["n2"]


class Watcher:
    """A pod watch consumed on a thread: its raw events so far, and what ended it."""

    def __init__(self, v1: client.CoreV1Api, deserialize: bool = False, **kwargs: Any) -> None:
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self._thread = in_thread(lambda: self._run(v1, deserialize, kwargs))

    def _run(self, v1: client.CoreV1Api, deserialize: bool, kwargs: dict[str, Any]) -> None:
        stream = watch.Watch().stream
        try:
            for e in stream(v1.list_pod_for_all_namespaces, deserialize=deserialize, **kwargs):
                self.events.append({"type": e["type"], "object": e.get("raw_object", e["object"])})
        except Exception as exc:
            self.error = exc

    def wait_events(self, n: int, timeout: float = 5.0) -> bool:
        return wait_until(lambda: len(self.events) >= n, timeout)

    def join(self, timeout: float = 10.0) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def names(self) -> list[str]:
        return [e["object"]["metadata"]["name"] for e in self.events]


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_drop_watches_cuts_streams_and_the_client_raises(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    """Recorded behaviour: a stream cut mid-chunk makes the client raise urllib3's
    ProtocolError('Response ended prematurely'), not return, with or without timeout_seconds
    (the client's own retry is only for 410 ERROR events)."""
    rv = str(server.resource_version)
    server.create(pod("p1"))
    watchers = [
        Watcher(v1, resource_version=rv, timeout_seconds=30),
        Watcher(v1, resource_version=rv),
    ]
    assert all(w.wait_events(1) for w in watchers)
    assert server.drop_watches() == 2
    for w in watchers:
        assert w.join()
        assert [e["type"] for e in w.events] == ["ADDED"]
        assert isinstance(w.error, urllib3.exceptions.ProtocolError), repr(w.error)
    assert wait_until(lambda: server.open_watches == 0, 5)


@pytest.mark.parametrize("deserialize", [True, False])
def test_a_cleanly_ended_watch_is_resumed_by_the_client_without_timeout(
    server: FakeApiServer, v1: client.CoreV1Api, deserialize: bool
) -> None:
    """Recorded behaviour: without timeout_seconds, Watch.stream re-watches by itself when the
    server ends the stream cleanly; with it, the generator just returns. The re-watch starts at
    the last rv seen ONLY when it deserializes: with deserialize=False the client never updates
    its resource_version, so it re-watches from the first rv and replays events (duplicates)."""
    rv = str(server.resource_version)
    server.create(pod("p1"))
    w = Watcher(v1, deserialize=deserialize, resource_version=rv)
    assert w.wait_events(1)
    assert server.end_watches() == 1
    assert server.wait_for_watches_started(2)  # the client came back on its own
    watches = [r.query["resourceVersion"] for r in server.requests if r.query.get("watch")]
    assert watches == [rv, str(int(rv) + 1) if deserialize else rv]
    server.create(pod("p2"))
    expected = ["p1", "p2"] if deserialize else ["p1", "p1", "p2"]
    assert w.wait_events(len(expected))
    server.down()  # cuts the resumed watch: ProtocolError, no retry
    assert w.join()
    assert w.names() == expected
    assert isinstance(w.error, urllib3.exceptions.ProtocolError), repr(w.error)


def test_a_watcher_behind_a_compaction_gets_an_error_event(server: FakeApiServer) -> None:
    """Server-side unit check (the race cannot be forced through a client): events a watch has
    not sent yet are lost to compact(), so it must end with a 410 ERROR, not skip them."""
    from tests.apiserver import Selector

    rv = server.resource_version
    with socket.socket() as unused:
        w = server.start_watch("Pod", unused, {"resourceVersion": str(rv)})
        server.create(pod("p1"))
        server.compact()
        events = server.next_events(w, Selector(), deadline=None)
        assert events is not None
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
        assert server.next_events(w, Selector(), deadline=None) is None
        server.end_watch(w)


def test_watches_sharing_an_event_each_get_their_selectors_view(server: FakeApiServer) -> None:
    """An event is encoded once per field selector and shared by every watch with that
    selector: a bound pod is a DELETED to each pending-pod watch, a MODIFIED to the others."""
    from tests.apiserver import parse_field_selector

    server.create(pod("p1"))
    rv = str(server.resource_version)
    pending, everything = parse_field_selector("spec.nodeName="), parse_field_selector("")
    assigned = parse_field_selector("spec.nodeName!=")
    with socket.socket() as unused:
        views = [
            (server.start_watch("Pod", unused, {"resourceVersion": rv}), selector)
            for selector in (pending, everything, pending, assigned)
        ]
        server.bind("default", "p1", {"target": {"name": "n1"}})
        seen = []
        for w, selector in views:
            events = server.next_events(w, selector, deadline=time.monotonic() + 1) or []
            seen.append([(e["type"], e["object"]["spec"].get("nodeName")) for e in events])
            server.end_watch(w)
    assert seen == [
        [("DELETED", None)],  # its last content as pending, at the bind's rv
        [("MODIFIED", "n1")],
        [("DELETED", None)],
        [("ADDED", "n1")],
    ]


def test_down_refuses_connections_and_up_serves_again(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(node("n1"))
    v1.list_node()
    port = server.port
    server.down()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as e:
        v1.list_node(_request_timeout=2)
    assert "Connection refused" in str(e.value)
    server.up()
    assert server.port == port
    assert [n.metadata.name for n in v1.list_node().items] == ["n1"]


# ------------------------------------------------------------------ binding


def binding(pod_name: str, node_name: str) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod_name),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node_name),
    )


def test_binding_sets_the_node_and_emits_modified(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p1"))
    rv = str(server.resource_version)
    resp = v1.create_namespaced_binding("default", binding("p1", "n1"), _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert server.requests[-1][:2] == ("POST", "/api/v1/namespaces/default/bindings")
    assert v1.read_namespaced_pod("p1", "default").spec.node_name == "n1"
    events = list(
        watch.Watch().stream(v1.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=1)
    )
    assert [(e["type"], e["object"].spec.node_name) for e in events] == [("MODIFIED", "n1")]


def test_pod_binding_subresource_conflict_and_missing_pod(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p1", namespace="ns"))
    resp = v1.create_namespaced_pod_binding("p1", "ns", binding("p1", "n2"), _preload_content=False)
    assert resp.status == 201
    assert server.requests[-1][:2] == ("POST", "/api/v1/namespaces/ns/pods/p1/binding")
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_binding("p1", "ns", binding("p1", "n3"), _preload_content=False)
    assert e.value.status == 409
    assert json.loads(e.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_binding("ns", binding("nope", "n1"))
    assert e.value.status == 404
    assert server.get("Pod", "p1", "ns")["spec"]["nodeName"] == "n2"


def test_a_binding_leaves_earlier_events_and_watchers_copies_as_they_were(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    """A bind shares the unchanged parts of the pod with its previous version (no deep copy):
    the history must still hold the pending pod, and a pending-pod watch its DELETED."""
    rv = str(server.resource_version)
    server.create(pod("p1"))
    v1.create_namespaced_pod_binding("p1", "default", binding("p1", "n1"), _preload_content=False)
    everything = list(
        watch.Watch().stream(
            v1.list_pod_for_all_namespaces,
            resource_version=rv,
            timeout_seconds=1,
            deserialize=False,
        )
    )
    pending = list(
        watch.Watch().stream(
            v1.list_pod_for_all_namespaces,
            resource_version=rv,
            field_selector="spec.nodeName=",
            timeout_seconds=1,
            deserialize=False,
        )
    )
    assert [(e["type"], e["object"]["spec"].get("nodeName")) for e in everything] == [
        ("ADDED", None),
        ("MODIFIED", "n1"),
    ]
    assert [e["object"]["metadata"]["resourceVersion"] for e in everything] == [
        str(int(rv) + 1),
        str(int(rv) + 2),
    ]
    # The pod leaves the selection: its previous content, stamped with the bind's rv.
    assert [(e["type"], e["object"]["spec"].get("nodeName")) for e in pending] == [
        ("ADDED", None),
        ("DELETED", None),
    ]
    assert pending[1]["object"]["metadata"]["resourceVersion"] == str(int(rv) + 2)
    assert server.get("Pod", "p1")["spec"]["nodeName"] == "n1"


def test_answers_on_a_kept_alive_connection_do_not_wait_for_delayed_acks(
    server: FakeApiServer,
) -> None:
    """Headers and body went out in two writes with Nagle's algorithm on: to a client that
    sends each request in one write (http.client, the bench's capacity client), every answer
    on a kept-alive connection waited ~40 ms for the client's delayed ACK (22 binds/s). The
    official client, which writes headers and body apart, did not show it."""
    for i in range(40):
        server.create(pod(f"p{i}"))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    start = time.perf_counter()
    for i in range(40):
        body = json.dumps({"metadata": {"name": f"p{i}"}, "target": {"name": "n1"}})
        connection.request("POST", f"/api/v1/namespaces/default/pods/p{i}/binding", body, headers)
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())["status"]) == (201, "Success")
    seconds = time.perf_counter() - start
    connection.close()
    assert seconds < 1.0, f"40 binds took {seconds:.2f} s"  # 40 x 40 ms = 1.6 s at the least
    assert all(server.get("Pod", f"p{i}")["spec"]["nodeName"] == "n1" for i in range(40))


def raw_exchange(server: FakeApiServer, request: bytes) -> bytes:
    """Send ``request`` as is, read until the server closes or 1 s of silence."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=1) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return answer


def test_headers_are_read_by_any_case_and_bad_requests_answered_as_http_server_did(
    server: FakeApiServer,
) -> None:
    """The server reads headers without http.server's email parser: names in any case, the
    connection kept alive on HTTP/1.1 and closed on ``Connection: close`` and HTTP/1.0, and a
    malformed request line or too many header lines answered 400 / 431."""
    server.create(pod("p0"))
    get = b"GET /api/v1/namespaces/default/pods/p0 HTTP/1.1\r\nhost: x\r\n"
    auth = f"aUtHoRiZaTiOn: Bearer {server.token}\r\n".encode()
    two = raw_exchange(server, get + auth + b"\r\n" + get + auth + b"connection: close\r\n\r\n")
    assert two.count(b"HTTP/1.1 200 OK") == 2 and two.count(b'"name":"p0"') == 2
    old = raw_exchange(server, get.replace(b"HTTP/1.1", b"HTTP/1.0") + auth + b"\r\n")
    assert old.startswith(b"HTTP/1.1 200 OK")  # and then closed: raw_exchange returned
    assert raw_exchange(server, get + b"\r\n").startswith(b"HTTP/1.1 401")  # no token
    # (No status line, as http.server answers a request line it cannot read: as HTTP/0.9.)
    assert b"Error code: 400" in raw_exchange(server, b"GET /x HTTP/9\r\n\r\n")
    flood = get + b"".join(b"x-%d: y\r\n" % i for i in range(101)) + b"\r\n"
    assert raw_exchange(server, flood).startswith(b"HTTP/1.1 431")
    assert server.get("Pod", "p0")["spec"].get("nodeName") is None  # nothing changed


def test_many_clients_connecting_at_once_are_all_answered(server: FakeApiServer) -> None:
    """Eight scheduler replicas with 16 binding threads each connect at once; with
    socketserver's backlog of 5, connections past it were reset at their first request."""
    clients = 128
    start = threading.Barrier(clients)
    answers: list[bytes] = []
    request = (
        f"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()

    def ask() -> None:
        start.wait(10)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        answers.append(data.split(b"\r\n", 1)[0])

    threads = [in_thread(ask) for _ in range(clients)]
    for thread in threads:
        thread.join(30)
    assert answers == [b"HTTP/1.1 200 OK"] * clients


def test_typed_binding_reply(server: FakeApiServer, v1: client.CoreV1Api) -> None:
    """Recorded behaviour: the typed call deserializes the 201 Status as a V1Binding; whatever
    it returns or raises, the bind happened. Extenders should pass _preload_content=False."""
    server.create(pod("p1"))
    try:
        outcome: Any = v1.create_namespaced_binding("default", binding("p1", "n1"))
    except Exception as e:  # recorded, not required
        outcome = e
    print(f"typed create_namespaced_binding -> {type(outcome).__name__}: {outcome!r}"[:300])
    assert server.get("Pod", "p1")["spec"]["nodeName"] == "n1"


# ------------------------------------------------------------------ raw JSON, scale


def test_raw_list_and_watch_with_preload_content_false(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p1"))
    resp = v1.list_pod_for_all_namespaces(limit=500, _preload_content=False)
    body = json.loads(resp.data)
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in body["items"]] == ["p1"]
    assert "kind" not in body["items"][0]
    rv = body["metadata"]["resourceVersion"]
    server.create(pod("p2"))
    stream = v1.list_pod_for_all_namespaces(
        watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    assert stream.headers["Transfer-Encoding"] == "chunked"
    lines = [json.loads(line) for line in watch.watch.iter_resp_lines(stream)]
    stream.release_conn()
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in lines] == [
        ("ADDED", "Pod", "p2")
    ]


def small_pod(i: int) -> dict:
    return pod(f"p{i:06d}", node=f"n{i % 5000}", phase="Running", namespace=f"ns{i % 50}")


def test_timing_150000_pods_raw_in_pages_of_500(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    start = time.perf_counter()
    for i in range(150_000):
        server.create(small_pod(i))
    loaded = time.perf_counter()
    count, pages, token = 0, 0, None
    while True:
        resp = v1.list_pod_for_all_namespaces(limit=500, _continue=token, _preload_content=False)
        body = json.loads(resp.data)
        count += len(body["items"])
        pages += 1
        token = body["metadata"].get("continue")
        if not token:
            break
    fetched = time.perf_counter()
    assert (count, pages) == (150_000, 300)
    print(
        f"\n150,000 pods: loaded into the server in {loaded - start:.2f}s; "
        f"raw client fetch, {pages} pages of 500: {fetched - loaded:.2f}s"
    )


# -- issue 29: what the feed and the reference scheduler need of the fake ---------------------


def test_a_strategic_merge_patch_of_pod_status_merges_conditions_by_type(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(pod("p"))
    running = {"type": "Initialized", "status": "True"}
    v1.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [running]}},
        _content_type="application/strategic-merge-patch+json",
    )
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    v1.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [scheduled]}},
        _content_type="application/strategic-merge-patch+json",
    )
    conditions = (server.get("Pod", "p") or {})["status"]["conditions"]
    assert conditions == [running, scheduled]
    with pytest.raises(ApiException) as missing:
        v1.patch_namespaced_pod_status(
            "q", "default", {"status": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert missing.value.status == 404
    with pytest.raises(ApiException) as json_patch:
        v1.patch_namespaced_pod_status(
            "p", "default", [{"op": "add"}], _content_type="application/json-patch+json"
        )
    assert json_patch.value.status == 415


def test_stalled_lists_send_nothing_until_released_and_watches_still_flow(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    server.create(node("n1"))
    server.stall_lists()
    with pytest.raises((urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.MaxRetryError)):
        v1.list_node(_request_timeout=(1, 0.3), _preload_content=False)
    stream = v1.list_node(
        watch=True, resource_version="0", timeout_seconds=1, _preload_content=False
    )
    assert b'"ADDED"' in stream.read()
    server.release_lists()
    assert [n.metadata.name for n in v1.list_node().items] == ["n1"]


def test_emit_raw_sends_a_malformed_event_to_selector_watches_in_rv_order(
    server: FakeApiServer, v1: client.CoreV1Api
) -> None:
    version = server.resource_version
    raw_rv = server.emit_raw("Pod", "MODIFIED", {"metadata": "a-string"})
    server.create(pod("after", node="n1", phase="Running"))
    stream = v1.list_pod_for_all_namespaces(
        watch=True,
        resource_version=str(version),
        field_selector="spec.nodeName!=",
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in stream.read().splitlines() if line.strip()]
    assert events[0] == {"type": "MODIFIED", "object": {"metadata": "a-string"}}
    assert events[1]["object"]["metadata"]["resourceVersion"] == str(raw_rv + 1)
