"""The bind's pod served from the pending pods' watch (schedcache/extender/pending.py), on every
backend, against the list/watch/binding test API server with the official client: a watched
pod is bound without an API GET, and whatever the watch lags behind is handled as before."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from redis import Redis

from schedcache import Cache
from schedcache.extender import pending as pending_module
from schedcache.extender import protocol
from schedcache.extender.pending import PendingPods
from schedcache.extender.service import Extender
from schedcache.feed.sync import api_client
from schedcache.scheduler.binder import ApiBinder
from tests.apiserver import FakeApiServer
from tests.conftest import real_client
from tests.extender_server import RunningExtender, extender_process
from tests.factories import keyspace, make_node
from tests.scheduling import eventually
from tests.test_extender import NS, binding, node_of, pending, pod_reads


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def watching(
    cache: Cache,
    server: FakeApiServer,
    tmp_path: Path,
    stale_after: float = pending_module.STALE_AFTER,
    **options: Any,
) -> tuple[Extender, PendingPods]:
    """An extender whose binds read the pending pods' watch (started; listed on return)."""
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    api = api_client(kubeconfig)
    watch = PendingPods(api, frozenset({"default-scheduler"}), stale_after=stale_after).start()
    eventually(watch.current)
    served = Extender(
        cache,
        ApiBinder(api),
        scheduler_names=frozenset({"default-scheduler"}),
        pending=watch,
        **options,
    )
    return served, watch


def binds_from(source: str) -> float:
    value = REGISTRY.get_sample_value("schedcache_extender_bind_pods_total", {"source": source})
    return value or 0.0


def pod_lists(server: FakeApiServer) -> int:
    """Lists (not watches) of the unscheduled pods."""
    return sum(
        1
        for r in server.requests
        if r.method == "GET"
        and r.path == "/api/v1/pods"
        and r.query.get("fieldSelector", "").startswith("spec.nodeName=")
        and r.query.get("watch") not in ("true", "1")
    )


def test_a_watched_pod_is_bound_without_reading_it_and_leaves_the_watch(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Pods listed before the extender started and pods added after: each bind claims the
    API server's pod with no GET and binds it; bound, it leaves the watch."""
    cache.add_node(make_node("n1", "1", "8Gi"))
    api_server.create(pending("a", "400m"))
    served, watch = watching(cache, api_server, tmp_path)
    try:
        api_server.create(pending("b", "400m"))
        api_server.create(pending("c", "400m"))
        eventually(lambda: watch.get("uid-c") is not None)
        counted = binds_from("watch"), binds_from("api")
        with RunningExtender(served) as extender:
            for name in ("a", "b"):
                assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
            before = keyspace(cast(Redis, cache.client), cache.keys.pattern)
            status, answer = extender.post("bind", binding("c", "n1"))  # 1.2 cpu > 1
            assert status == 200 and "cpu" in answer["Error"]
            assert keyspace(cast(Redis, cache.client), cache.keys.pattern) == before
        assert pod_reads(api_server) == []
        assert (binds_from("watch"), binds_from("api")) == (counted[0] + 3, counted[1])
        assert [node_of(api_server, n) for n in "abc"] == ["n1", "n1", None]
        assert cache.pod_state("uid-a") == cache.pod_state("uid-b") == "assumed"
        assert cache.get_node_info("n1").requested.milli_cpu == 800
        eventually(lambda: watch.get("uid-a") is None and watch.get("uid-b") is None)
        assert watch.get("uid-c") is not None  # still pending: kept
        api_server.delete("Pod", "c", NS)
        eventually(lambda: watch.get("uid-c") is None)
        assert watch.pods == {} and watch.bytes == 0
        assert cache.verify() == []
    finally:
        watch.close()


def test_the_watched_pod_is_the_api_servers_not_the_filter_callers(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """With --bind-pod-from-filter as well, the watch's copy comes first: a /filter caller
    that sent the pod with 100m cannot have the API server's 8-cpu pod claimed on 4 cpus."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("big", "8"))
    api_server.create(pending("small", "1"))
    served, watch = watching(cache, api_server, tmp_path, bind_pod_from_filter=True)
    try:
        with RunningExtender(served) as extender:
            extender.post("filter", {"Pod": pending("big", "100m"), "NodeNames": ["n1"]})
            _, answer = extender.post("bind", binding("big", "n1"))
            assert "cpu" in answer["Error"]
            extender.post("filter", {"Pod": pending("small", "1"), "NodeNames": ["n1"]})
            assert extender.post("bind", binding("small", "n1")) == (200, {"Error": ""})
        assert served.decoded == {}  # the filter's copies were taken all the same
        assert pod_reads(api_server) == []
        assert node_of(api_server, "big") is None and node_of(api_server, "small") == "n1"
        assert cache.get_node_info("n1").requested.milli_cpu == 1000
    finally:
        watch.close()


def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods a filter or prioritize call decoded from its body (LastPod)."""
    seen: list[str] = []
    read_sized = protocol.LAST_POD.read_sized

    def counting(raw_pod: Any) -> Any:
        seen.append(raw_pod["metadata"]["name"])
        return read_sized(raw_pod)

    monkeypatch.setattr(protocol.LAST_POD, "read_sized", counting)
    return seen


def test_a_filter_calls_pod_at_the_watched_version_is_the_watchs_copy(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter or prioritize call whose pod has a watched pod's uid and resourceVersion (as
    kube-scheduler sends its informer's copy) is answered on the watch's copy, not decoded
    again: the same answers as the body decoded; a body that claims that version with other
    content is judged as the API server's object at that version; a newer version (the watch
    stale) and a body without one are decoded from the body. Nothing is kept for them."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_node(make_node("n2", "1", "8Gi"))
    api_server.create(pending("a", "2"))
    api_server.create(pending("b", "500m"))
    served, watch = watching(cache, api_server, tmp_path)
    try:
        held = api_server.get("Pod", "a", NS)
        assert held is not None and held["metadata"]["resourceVersion"]
        kept = dict(watch.pods)
        bare = {**held, "metadata": {**held["metadata"]}}
        del bare["metadata"]["resourceVersion"]
        request = {"Pod": held, "NodeNames": ["n1", "n2", "n3"]}
        seen = decodes(monkeypatch)
        with RunningExtender(served) as extender:
            answers = [extender.post(verb, request) for verb in ("filter", "prioritize")]
            assert seen == []  # neither call decoded the body
            protocol.LAST_POD.last = None
            fresh = {"Pod": bare, "NodeNames": ["n1", "n2", "n3"]}
            assert [extender.post(verb, fresh) for verb in ("filter", "prioritize")] == answers
            assert seen == ["a", "a"]  # decoded (the body has no resourceVersion)
            status, filtered = answers[0]
            assert status == 200 and filtered["NodeNames"] == ["n1"]
            assert set(filtered["FailedNodes"]) == {"n2"}
            assert answers[1] == (200, [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 8},
                                        {"Host": "n3", "Score": 0}])  # fmt: skip
            # The caller says 100m at the watched version: the API server's 2 cpu are judged.
            lying = {**held, "spec": pending("a", "100m")["spec"]}
            _, answer = extender.post("filter", {"Pod": lying, "NodeNames": ["n1", "n2"]})
            assert answer["NodeNames"] == ["n1"] and set(answer["FailedNodes"]) == {"n2"}
            assert seen == ["a", "a"]
            # A newer version the (stopped) watch has not seen: decoded from the body.
            watch.close()
            changed = api_server.update({**held, "spec": pending("a", "100m")["spec"]})
            assert changed["metadata"]["resourceVersion"] != held["metadata"]["resourceVersion"]
            _, answer = extender.post("filter", {"Pod": changed, "NodeNames": ["n1", "n2"]})
            assert answer["NodeNames"] == ["n1", "n2"] and seen == ["a", "a", "a"]
            # A uid the watch does not hold, and one of a kept pod at another version.
            for uid, version in (("uid-nobody", "1"), ("uid-b", "999999")):
                stranger = {**held, "metadata": {**held["metadata"], "uid": uid,
                                                 "resourceVersion": version}}  # fmt: skip
                _, answer = extender.post("filter", {"Pod": stranger, "NodeNames": ["n2"]})
                assert answer["FailedNodes"] == {"n2": "Insufficient cpu"}
            assert seen == ["a", "a", "a", "a", "a"]
        assert watch.pods == kept  # the calls kept nothing
    finally:
        watch.close()


def test_a_pod_changed_behind_a_lagging_watch_is_handled_as_before(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The watch stopped (its copies stale, still served): a pod recreated with another uid
    is read (uid differs) and bound; the old uid's bind is refused by the Binding's uid
    precondition; a pod bound elsewhere meanwhile gets the Binding's 409; a pod deleted
    meanwhile the Binding's 404; each refused bind forgets its claim."""
    cache.add_node(make_node("n1", "8", "8Gi"))
    for name in ("recreated", "raced", "gone"):
        api_server.create(pending(name, "1"))
    served, watch = watching(cache, api_server, tmp_path)
    watch.close()  # no more events: what it holds goes stale
    assert watch.current() and watch.get("uid-raced") is not None
    api_server.delete("Pod", "recreated", NS)
    api_server.create({**pending("recreated", "1"), "metadata": {"name": "recreated",
                       "namespace": NS, "uid": "uid-recreated-2"}})  # fmt: skip
    api_server.update({**pending("raced", "1"), "spec": {"nodeName": "n9"}})
    api_server.delete("Pod", "gone", NS)
    with RunningExtender(served) as extender:
        new = {**binding("recreated", "n1"), "PodUID": "uid-recreated-2"}
        assert extender.post("bind", new) == (200, {"Error": ""})
        _, answer = extender.post("bind", binding("recreated", "n1"))  # the old uid
        assert "409" in answer["Error"]
        _, answer = extender.post("bind", binding("raced", "n1"))
        assert "409" in answer["Error"]
        _, answer = extender.post("bind", binding("gone", "n1"))
        assert "404" in answer["Error"]
    # the new uid's read; the 409s' own reads (was it this bind that landed?)
    assert pod_reads(api_server) == ["recreated", "recreated", "raced"]
    assert node_of(api_server, "recreated") == "n1" and node_of(api_server, "raced") == "n9"
    assert cache.pod_state("uid-recreated-2") == "assumed"
    for uid in ("uid-recreated", "uid-raced", "uid-gone"):
        assert cache.pod_state(uid) is None
    assert cache.get_node_info("n1").requested.milli_cpu == 1000
    assert cache.verify() == []


def test_pods_beyond_the_bounds_or_undecodable_are_read_and_refused_as_before(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod of over POD_BYTES of JSON, one past PENDING_PODS, one of another scheduler and
    one that cannot be decoded are not kept: their binds GET the pod, as without the watch."""
    monkeypatch.setattr(pending_module, "PENDING_PODS", 3)
    cache.add_node(make_node("n1", "64", "64Gi"))
    for name in ("p0", "p1"):
        api_server.create(pending(name, "100m"))
    large = pending("large", "100m")
    large["metadata"]["annotations"] = {"note": "x" * pending_module.POD_BYTES}
    api_server.create(large)
    api_server.create(pending("theirs", "100m", schedulerName="other"))
    broken = pending("broken", "100m")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    api_server.create(broken)
    served, watch = watching(cache, api_server, tmp_path)
    try:
        api_server.create(pending("p2", "100m"))
        api_server.create(pending("p3", "100m"))  # the fourth kept: over the cap
        eventually(lambda: watch.get("uid-p2") is not None and watch.counters["full"] == 1)
        assert set(watch.pods) == {"uid-p0", "uid-p1", "uid-p2"}
        with RunningExtender(served) as extender:
            for name in ("p0", "p1", "p2", "p3", "large"):
                assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
            _, answer = extender.post("bind", binding("theirs", "n1"))
            assert "schedulerName" in answer["Error"]
            _, answer = extender.post("bind", binding("broken", "n1"))
            assert answer["Error"].startswith("pod team/broken: ") and "lots" in answer["Error"]
        assert pod_reads(api_server) == ["p3", "large", "theirs", "broken"]
        assert watch.counters["too_large"] == 1 and watch.counters["undecodable"] == 1
        for name in ("p0", "p1", "p2", "p3", "large"):
            assert node_of(api_server, name) == "n1"
        assert cache.pod_state("uid-theirs") is None and cache.pod_state("uid-broken") is None
    finally:
        watch.close()


def test_a_cut_watch_resumes_and_a_410_or_a_long_outage_relists(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """A dropped watch resumes from its resourceVersion (no relist); a compacted history (410)
    relists; an API server away for longer than stale_after makes binds read (the watch
    serves nothing), and relists once back. Pods created meanwhile are kept each time."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    served, watch = watching(cache, api_server, tmp_path, stale_after=0.3)
    try:
        assert pod_lists(api_server) == 1
        api_server.drop_watches()
        api_server.create(pending("after-cut", "100m"))
        eventually(lambda: watch.get("uid-after-cut") is not None)
        assert pod_lists(api_server) == 1
        assert api_server.wait_for_watches(1)
        with watch.lock:  # a pod whose deletion the watch missed: only a relist removes it
            watch.pods["uid-missed"] = watch.pods["uid-after-cut"]
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        api_server.emit_raw("Pod", "ERROR", status)
        api_server.create(pending("after-410", "100m"))
        eventually(lambda: watch.get("uid-after-410") is not None)
        eventually(lambda: watch.get("uid-missed") is None)
        assert pod_lists(api_server) == 2
        lists = pod_lists(api_server)
        api_server.down()
        eventually(lambda: not watch.current())
        assert watch.get("uid-after-cut") is None  # binds read the pod now
        api_server.create(pending("during-outage", "100m"))
        api_server.up()
        eventually(lambda: watch.get("uid-during-outage") is not None, timeout=20)
        assert pod_lists(api_server) == lists + 1  # relisted, not resumed
        with RunningExtender(served) as extender:
            for name in ("after-cut", "after-410", "during-outage"):
                assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
        assert pod_reads(api_server) == []
        assert cache.verify() == []
    finally:
        watch.close()


def test_binds_before_the_first_list_read_the_pod(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The API server's list stalls: binds GET their pod meanwhile and are bound."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "100m"))
    kubeconfig = str(api_server.kubeconfig(tmp_path / "kubeconfig"))
    api = api_client(kubeconfig)
    api_server.stall_lists()
    watch = PendingPods(api).start()
    try:
        eventually(lambda: pod_lists(api_server) == 1)
        with RunningExtender(Extender(cache, ApiBinder(api), pending=watch)) as extender:
            assert extender.post("bind", binding("a", "n1")) == (200, {"Error": ""})
        assert not watch.current() and pod_reads(api_server) == ["a"]
        assert node_of(api_server, "a") == "n1"
    finally:
        api_server.release_lists()
        watch.close()


def bind_through(port: int, name: str) -> dict[str, Any]:
    body = json.dumps(binding(name, "n1")).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/bind", data=body)
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


@pytest.mark.parametrize("flags", [(), ("--no-pending-watch",)])
def test_the_command_watches_pending_pods_unless_told_not_to(
    api_server: FakeApiServer, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """``schedcache extender --kubeconfig`` lists and watches the pending pods and binds from
    them (no GET); ``--no-pending-watch`` lists nothing and GETs."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(real_client(), name)
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("late", "100m"))
    kubeconfig = str(api_server.kubeconfig(tmp_path / "kubeconfig"))
    process, port = extender_process(name, "--kubeconfig", kubeconfig, *flags)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.1)
        if not flags:
            eventually(lambda: pod_lists(api_server) == 1 and api_server.open_watches == 1)
        else:
            time.sleep(1.0)  # time enough for a list, were one made
        assert bind_through(port, "late") == {"Error": ""}
        assert pod_lists(api_server) == (0 if flags else 1)
        assert pod_reads(api_server) == (["late"] if flags else [])
        assert node_of(api_server, "late") == "n1"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "Traceback" not in err
    finally:
        process.kill()
        cache.clear()


# -- bounds and staleness found by review (a stranger's pods, a hung watch, a relist) ---------


def pod_list_queries(server: FakeApiServer) -> list[dict[str, str]]:
    """The query of every list (not watch) of pods, in order."""
    return [
        dict(r.query)
        for r in server.requests
        if r.method == "GET" and r.path == "/api/v1/pods" and r.query.get("watch") != "true"
    ]


def test_one_served_scheduler_is_selected_by_the_api_server(
    api_server: FakeApiServer, tmp_path: Path
) -> None:
    """With one scheduler name the list and the watch select it on the server
    (``spec.schedulerName``): another scheduler's pending pods, which a stranger can create
    and leave pending for ever, are never sent to the extender."""
    api_server.create(pending("mine", "100m"))
    other = pending("theirs", "100m")
    other["spec"]["schedulerName"] = "someone-else"
    api_server.create(other)
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api, frozenset({"default-scheduler"})).start()
    try:
        eventually(lambda: watch.get("uid-mine") is not None)
        selectors = {q.get("fieldSelector") for q in pod_list_queries(api_server)}
        assert selectors == {"spec.nodeName=,spec.schedulerName=default-scheduler"}
        assert watch.get("uid-theirs") is None and watch.counters["undecodable"] == 0
    finally:
        watch.close()


def test_a_list_page_past_its_byte_bound_is_read_again_a_pod_at_a_time(
    api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of pods larger than PAGE_BYTES is not read whole (a stranger's 500 pods of
    1.5 MiB held ~3 GiB at a list): the same pods are listed again one a page, and every one
    within the bounds is kept."""
    monkeypatch.setattr(pending_module, "PAGE_BYTES", 8 * 1024)
    for i in range(6):
        manifest = pending(f"p{i}", "100m")
        manifest["metadata"]["annotations"] = {"pad": "x" * 3000}  # ~3.5 KB each: 2 a page
        api_server.create(manifest)
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api).start()
    try:
        eventually(watch.current)
        assert all(watch.get(f"uid-p{i}") is not None for i in range(6))
        assert watch.counters["large_pages"] == 1
        limits = [q.get("limit") for q in pod_list_queries(api_server)]
        assert limits[0] == str(pending_module.PAGE_SIZE) and limits[1:] == ["1"] * 6
    finally:
        watch.close()


def test_a_silent_watch_stops_serving_until_it_hears_again(
    api_server: FakeApiServer, tmp_path: Path
) -> None:
    """A watch connection that hangs without closing (a black-holed load balancer) sends
    nothing, not even bookmarks: past ``idle_after`` binds read their pod (before, the copies
    were served until the read timeout, ~6 minutes); the next line serves them again."""
    api_server.create(pending("a", "100m"))
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api, idle_after=0.5).start()
    try:
        eventually(lambda: watch.get("uid-a") is not None)
        eventually(lambda: not watch.current(), timeout=5)
        assert watch.get("uid-a") is None
        api_server.create(pending("b", "100m"))
        eventually(lambda: watch.get("uid-b") is not None)
        assert watch.get("uid-a") is not None
    finally:
        watch.close()


def test_a_relist_drops_the_kept_pods_first(api_server: FakeApiServer, tmp_path: Path) -> None:
    """A 410 relists: the pods kept before are dropped at once (binds read their pod while it
    lists), so the old set and the new one are never held together."""
    api_server.create(pending("a", "100m"))
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api).start()
    try:
        eventually(lambda: watch.get("uid-a") is not None)
        assert api_server.wait_for_watches(1)
        api_server.stall_lists()
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        api_server.emit_raw("Pod", "ERROR", status)
        eventually(lambda: not watch.current())
        assert watch.pods == {} and watch.bytes == 0 and watch.get("uid-a") is None
        api_server.release_lists()
        eventually(lambda: watch.get("uid-a") is not None)
    finally:
        api_server.release_lists()
        watch.close()


def test_a_healthy_silent_watch_resumes_at_its_read_timeout_without_relisting(
    api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Nothing to say (no pending pod changes, no bookmark: a real API server promises none):
    past ``idle_after`` it serves nothing, and at its read timeout it resumes from its version
    rather than relisting every pod (second review: it relisted every ~75 s)."""
    api_server.create(pending("a", "100m"))
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api, idle_after=0.5).start()
    try:
        eventually(lambda: watch.get("uid-a") is not None)
        eventually(lambda: watch.counters["watch_restarts"] >= 1, timeout=20)
        assert watch.counters["relists"] == 1
        api_server.create(pending("b", "100m"))
        eventually(lambda: watch.get("uid-b") is not None)
        assert watch.get("uid-a") is not None
    finally:
        watch.close()


@pytest.mark.parametrize("name", ["a,metadata.namespace=x", "Ref", "a..b", ""])
def test_a_scheduler_name_that_is_no_dns_subdomain_is_refused(name: str) -> None:
    """It goes into the watch's field selector (a comma adds a term) and queue key names."""
    from click.testing import CliRunner

    from schedcache.cli.app import main

    for command in (["extender", "--no-api"], ["scheduler"]):
        result = CliRunner().invoke(main, [*command, "--scheduler-name", name])
        assert result.exit_code == 2, result.output
        assert "--scheduler-name" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("name", ["a,metadata.namespace=x", "Ref", "a..b", "", 7])
def test_the_watchs_python_api_refuses_a_scheduler_name_by_name(name: Any) -> None:
    """``PendingPods(scheduler_names=...)`` (the library, not the CLI) puts a single name into
    its field selector too: refused by name before anything is asked (stop 47's note)."""
    from schedcache.errors import ValidationError

    with pytest.raises(ValidationError) as refused:
        PendingPods(None, frozenset({name}))  # type: ignore[arg-type]
    assert refused.value.field == "scheduler_names"
    assert PendingPods(None, frozenset({"my-scheduler"})).selector.endswith(  # type: ignore[arg-type]
        "spec.schedulerName=my-scheduler"
    )


def test_a_watch_that_ends_at_once_is_asked_again_after_a_pause(
    api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that ends every watch at once, without a line: the next watch waits, doubling
    from 0.5 s (it was asked again at once, in a loop: third review)."""
    calls: list[float] = []

    def ends_at_once(self: PendingPods, version: str) -> int:
        calls.append(time.monotonic())
        return 0

    monkeypatch.setattr(PendingPods, "watch", ends_at_once)
    api = api_client(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    watch = PendingPods(api).start()
    try:
        eventually(lambda: len(calls) >= 1)
        time.sleep(2.0)
        assert 2 <= len(calls) <= 4, len(calls)  # 0 s, 0.5 s, 1.5 s (then 3.5 s)
    finally:
        watch.close()


def one_watched_pod(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> tuple[Extender, PendingPods, dict[str, Any]]:
    """Node n1, pending pod ``a`` watched by a served extender, and the API server's copy."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    served, watch = watching(cache, api_server, tmp_path)
    held = api_server.get("Pod", "a", NS)
    assert held is not None
    return served, watch, held


def test_a_body_at_the_watched_version_but_no_pods_shape_is_refused_as_before(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """A body that claims a watched pod's uid and resourceVersion stands for that object only
    when it is shaped as a pod (metadata, spec and status objects, containers a list of
    objects): else it is refused 400 as before (review: it was judged as the watch's pod)."""
    served, watch, held = one_watched_pod(cache, api_server, tmp_path)
    try:
        bad_bodies = (
            {**held, "spec": {**held["spec"], "containers": "not a list"}},
            {**held, "spec": {**held["spec"], "containers": ["not an object"]}},
            {**held, "spec": "garbage"},
            {**held, "status": "garbage"},
        )
        with RunningExtender(served) as extender:
            for bad in bad_bodies:
                for verb in ("filter", "prioritize"):
                    protocol.LAST_POD.last = None
                    status, _ = extender.post(verb, {"Pod": bad, "NodeNames": ["n1"]})
                    assert status == 400, (verb, bad)
    finally:
        watch.close()


def test_a_nominated_body_is_decoded_so_the_nomination_held_is_the_judged_pods(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nomination a filter call holds is read from its body (status.nominatedNodeName):
    such a body is decoded, not taken as the watch's copy, so the pod judged and the
    nomination held come from the same object (review: the watch's pod was judged and the
    body's nomination held)."""
    from schedcache.store.nominations import read_nomination

    served, watch, held = one_watched_pod(cache, api_server, tmp_path)
    try:
        seen = decodes(monkeypatch)
        nominated = {**held, "status": {"nominatedNodeName": "n1"}}
        served.filter(served.filter_args({"Pod": nominated, "NodeNames": ["n1"]}))
        assert seen == ["a"]  # decoded from the body
        assert read_nomination(cache.store, held["metadata"]["uid"]) is not None
    finally:
        watch.close()
