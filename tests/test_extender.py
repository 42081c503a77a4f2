"""``schedcache extender``: kube-scheduler's extender protocol over HTTP on the shared cache, on
every backend. Requests are shaped as kube-scheduler sends them (Go field names: the extender
structs carry no JSON tags) and as older tools do (lower-case keys)."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from redis import Redis

from schedcache import Cache
from schedcache.extender import protocol, service
from schedcache.extender.service import UNKNOWN_NODE, Extender
from schedcache.feed.sync import api_client
from schedcache.model.values import Node, Pod
from schedcache.scheduler.binder import ApiBinder
from tests.apiserver import FakeApiServer
from tests.conftest import real_client
from tests.extender_server import RunningExtender, extender_process
from tests.factories import keyspace, make_node, node_manifest, pod_manifest
from tests.racing import racing_schedulers

NS = "team"


def tainted(name: str, cpu: str, taints: list[dict[str, str]], **kwargs: Any) -> dict[str, Any]:
    manifest = node_manifest(name, cpu, "8Gi", **kwargs)
    manifest["spec"] = {"taints": taints}
    return manifest


def pending(name: str, cpu: str = "500m", **spec: Any) -> dict[str, Any]:
    manifest = pod_manifest(name, "", cpu, "100Mi", namespace=NS, uid=f"uid-{name}")
    manifest["spec"].update(spec)
    return manifest


@pytest.fixture
def extender(cache: Cache) -> Iterator[RunningExtender]:
    cache.add_node(make_node("roomy", "4", "8Gi"))
    cache.add_node(make_node("small", "200m", "8Gi"))
    cache.add_node(
        Node.from_k8s(tainted("gpu", "4", [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]))
    )
    with RunningExtender(Extender(cache), "/scheduler") as server:
        yield server


def test_filter_with_node_names_answers_in_go_field_names(extender: RunningExtender) -> None:
    status, answer = extender.post(
        "filter", {"Pod": pending("web"), "NodeNames": ["roomy", "small", "gpu", "gone"]}
    )
    assert status == 200
    assert answer["NodeNames"] == ["roomy"] and answer["Nodes"] is None
    assert answer["FailedNodes"] == {"small": "Insufficient cpu"}
    assert answer["FailedAndUnresolvableNodes"] == {
        "gpu": "node(s) had untolerated taint {gpu: yes}",
        "gone": UNKNOWN_NODE,
    }
    assert answer["Error"] == ""


def test_filter_reads_keys_in_any_case_and_full_node_lists(extender: RunningExtender) -> None:
    toleration = [{"key": "gpu", "operator": "Exists"}]
    nodes = {"items": [node_manifest(n, "4", "8Gi") for n in ("roomy", "small", "gpu")]}
    status, answer = extender.post(
        "filter", {"pod": pending("ml", tolerations=toleration), "NODES": nodes}
    )
    assert status == 200 and answer["NodeNames"] is None
    assert [item["metadata"]["name"] for item in answer["Nodes"]["items"]] == ["roomy", "gpu"]
    assert answer["FailedNodes"] == {"small": "Insufficient cpu"}  # the cache's copy decides


def test_prioritize_prefers_the_emptier_node(extender: RunningExtender) -> None:
    status, answer = extender.post(
        "prioritize", {"Pod": pending("web", "100m"), "NodeNames": ["roomy", "small", "gone"]}
    )
    assert status == 200
    scores = {entry["Host"]: entry["Score"] for entry in answer}
    assert set(scores) == {"roomy", "small", "gone"}
    assert 0 <= scores["small"] < scores["roomy"] <= 10 and scores["gone"] == 0


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"NodeNames": ["roomy"]}',
        b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": ["roomy"]}',
        b'{"Pod": {"metadata": {"name": "x", "uid": "u"}}, "NodeNames": "roomy"}',
        b'{"Pod": {"metadata": {"name": "x", "uid": "u"}}}',
    ],
)
def test_malformed_requests_get_400_and_the_server_keeps_serving(
    extender: RunningExtender, cache: Cache, body: bytes
) -> None:
    before = keyspace(cache.client, cache.keys.pattern)
    status, answer = extender.post("filter", None, raw=body)
    assert status == 400 and answer["Error"].startswith("filter: ")
    status, answer = extender.post("bind", None, raw=b'{"PodName": "x"}')
    assert status == 400 and "PodNamespace" in answer["Error"]
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert extender.get("/healthz") == (200, "ok\n")
    assert extender.post("filter", {"Pod": pending("ok"), "NodeNames": ["roomy"]})[0] == 200


# -- bind ---------------------------------------------------------------------------------


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def bound_extender(cache: Cache, server: FakeApiServer, tmp_path: Path) -> Extender:
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    return Extender(cache, ApiBinder(api_client(kubeconfig)))


def binding(name: str, node: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": NS, "PodUID": f"uid-{name}", "Node": node}


def test_bind_claims_in_the_cache_then_binds_through_the_api(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "1", "8Gi"))
    for name in ("a", "b", "c"):
        api_server.create(pending(name, "400m"))
    with RunningExtender(bound_extender(cache, api_server, tmp_path)) as extender:
        for name in ("a", "b"):
            extender.post("filter", {"Pod": pending(name, "400m"), "NodeNames": ["n1"]})
            assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
        # c was never filtered here (another replica did): read from the API server.
        before = keyspace(cache.client, cache.keys.pattern)
        status, answer = extender.post("bind", binding("c", "n1"))
        assert status == 200 and "cpu" in answer["Error"]  # 400m more does not fit in 1
        assert keyspace(cache.client, cache.keys.pattern) == before  # nothing written
    assert [api_server.get("Pod", n, NS)["spec"].get("nodeName") for n in "abc"] == [
        "n1",
        "n1",
        None,
    ]
    assert cache.pod_state("uid-a") == "assumed" and cache.pod_state("uid-c") is None
    assert cache.get_pod_record("uid-a").binding_finished
    assert cache.verify() == []


def test_a_failed_binding_forgets_the_claim(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Another scheduler binds the pod between the extender's read and its Binding: 409."""
    cache.add_node(make_node("n1", "1", "8Gi"))
    api_server.create(pending("a", "400m"))
    served = bound_extender(cache, api_server, tmp_path)
    binder = served.binder
    assert isinstance(binder, ApiBinder)
    real_bind = binder.bind

    def raced(namespace: str, name: str, uid: str, node: str) -> None:
        api_server.update(
            {**pending("a", "400m"), "spec": {**pending("a")["spec"], "nodeName": "n9"}}
        )
        real_bind(namespace, name, uid, node)

    binder.bind = raced  # type: ignore[method-assign]
    with RunningExtender(served) as extender:
        status, answer = extender.post("bind", binding("a", "n1"))  # 409: already bound
        assert status == 200 and "binding pod team/a" in answer["Error"]
        assert "409" in answer["Error"]
    assert cache.pod_state("uid-a") is None and cache.get_node_info("n1").requested.milli_cpu == 0


def pod_reads(server: FakeApiServer) -> list[str]:
    """The pods the API server was asked for by name (GETs of one pod)."""
    prefix = f"/api/v1/namespaces/{NS}/pods/"
    return [
        r.path.removeprefix(prefix)
        for r in server.requests
        if r.method == "GET" and r.path.startswith(prefix) and "/" not in r.path[len(prefix) :]
    ]


def node_of(server: FakeApiServer, name: str) -> str | None:
    obj = server.get("Pod", name, NS)
    assert obj is not None
    node: str | None = obj["spec"].get("nodeName")
    return node


def from_filter(cache: Cache, server: FakeApiServer, tmp_path: Path) -> Extender:
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    return Extender(
        cache,
        ApiBinder(api_client(kubeconfig)),
        scheduler_names=frozenset({"default-scheduler"}),
        bind_pod_from_filter=True,
    )


def test_a_bind_after_filter_claims_the_filtered_pod_without_reading_it(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """--bind-pod-from-filter: kube-scheduler binds the pod it filtered; two clients' pods in
    flight at once (filter a, filter b, then their binds) are each bound without a GET."""
    cache.add_node(make_node("n1", "1", "8Gi"))
    for name in ("a", "b"):
        api_server.create(pending(name, "400m"))
    with RunningExtender(from_filter(cache, api_server, tmp_path)) as extender:
        for name in ("a", "b"):
            extender.post("filter", {"Pod": pending(name, "400m"), "NodeNames": ["n1"]})
            extender.post("prioritize", {"Pod": pending(name, "400m"), "NodeNames": ["n1"]})
        for name in ("a", "b"):
            assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
    assert pod_reads(api_server) == []
    assert [node_of(api_server, n) for n in "ab"] == ["n1", "n1"]
    assert cache.pod_state("uid-a") == cache.pod_state("uid-b") == "assumed"
    assert cache.get_node_info("n1").requested.milli_cpu == 800
    assert cache.verify() == []


def test_a_bind_with_no_prior_filter_still_reads_the_pod_and_binds(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """A pod another replica filtered, one pushed out of the kept pods, one of over 256
    labels, one of over 64 KiB of JSON, one whose bind is retried (its kept copy was taken):
    each is read, then bound."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    crowded = pending("crowded", "100m")
    crowded["metadata"]["labels"] = {f"l{i}": "v" for i in range(300)}
    large = pending("large", "100m")
    large["metadata"]["annotations"] = {"note": "x" * service.KEPT_POD_BYTES}
    for manifest in (pending("other", "100m"), crowded, large, pending("retried", "100m")):
        api_server.create(manifest)
    for i in range(service.FILTERED_PODS + 1):
        api_server.create(pending(f"p{i}", "10m"))
    with RunningExtender(from_filter(cache, api_server, tmp_path)) as extender:
        for i in range(service.FILTERED_PODS + 1):
            extender.post("filter", {"Pod": pending(f"p{i}", "10m"), "NodeNames": ["n1"]})
        extender.post("filter", {"Pod": crowded, "NodeNames": ["n1"]})
        extender.post("filter", {"Pod": large, "NodeNames": ["n1"]})
        extender.post("filter", {"Pod": pending("retried", "100m"), "NodeNames": ["n1"]})
        for name in ("other", "p0", "p64", "crowded", "large"):  # p64 kept, p0 pushed out
            assert extender.post("bind", binding(name, "n1")) == (200, {"Error": ""})
        api_server.update({**pending("retried"), "spec": {"nodeName": "n9"}})  # raced
        _, answer = extender.post("bind", binding("retried", "n1"))
        assert "409" in answer["Error"]  # the kept copy was unbound: the Binding refused
        _, answer = extender.post("bind", binding("retried", "n1"))
        assert "already bound" in answer["Error"]  # read this time
    # (the 409's own read: was it this bind that landed?)
    assert pod_reads(api_server) == ["other", "p0", "crowded", "large", "retried", "retried"]
    for name in ("other", "p0", "p64", "crowded", "large"):
        assert node_of(api_server, name) == "n1"
    assert cache.pod_state("uid-retried") is None
    assert cache.verify() == []


def test_a_kept_pod_is_checked_as_the_api_servers_would_be(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The kept pod answers for the bind's name and namespace only, and its schedulerName
    must be served."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    with RunningExtender(from_filter(cache, api_server, tmp_path)) as extender:
        theirs = pending("a", "1", schedulerName="other")
        extender.post("filter", {"Pod": theirs, "NodeNames": ["n1"]})
        before = keyspace(cast(Redis, cache.client), cache.keys.pattern)
        _, answer = extender.post("bind", binding("a", "n1"))
        assert "schedulerName" in answer["Error"]
        extender.post("filter", {"Pod": pending("a", "1"), "NodeNames": ["n1"]})
        _, answer = extender.post("bind", {**binding("a", "n1"), "PodName": "b"})
        assert "not found" in answer["Error"]  # another name: read, and absent
        assert keyspace(cast(Redis, cache.client), cache.keys.pattern) == before
    assert pod_reads(api_server) == ["b"]


def test_three_clients_binding_concurrently_never_overfill_a_node(
    cache: Cache, make_cache: Callable[..., Cache], api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Three kube-scheduler replicas, each with its own extender (and Cache object), place
    2,000 pods of 100m on 50 nodes of 2 CPUs (room for 1,000): every pod that fits is bound
    exactly once, the rest found no node, no node holds more than it has."""
    nodes = [f"n{i:02}" for i in range(50)]
    for name in nodes:
        cache.add_node(make_node(name, "2", "8Gi"))
    pods = [f"p{i:04}" for i in range(2000)]
    for name in pods:
        api_server.create(pending(name, "100m"))
    replicas = [make_cache(replica=f"replica-{i}") for i in range(3)]
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def schedule(extender: RunningExtender, mine: list[str]) -> None:
        for name in mine:
            while True:  # as kube-scheduler: a conflict sends the pod round again
                args = {"Pod": pending(name, "100m"), "NodeNames": nodes}
                _, answer = extender.post("filter", args)
                if not answer["NodeNames"]:
                    result = "unschedulable"
                    break
                _, ranked = extender.post("prioritize", {**args, "NodeNames": answer["NodeNames"]})
                best = max(ranked, key=lambda entry: entry["Score"])["Host"]
                _, bound = extender.post("bind", binding(name, best))
                if not bound["Error"]:
                    result = "bound"
                    break
                with lock:
                    outcomes["conflicts"] += 1
            with lock:
                outcomes[result] += 1

    servers = [RunningExtender(bound_extender(c, api_server, tmp_path)) for c in replicas]
    for server in servers:
        server.__enter__()
    try:
        threads = [
            threading.Thread(target=schedule, args=(server, pods[i::3]))
            for i, server in enumerate(servers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    placed = Counter(obj["spec"].get("nodeName") for obj in api_server.objects("Pod"))
    assert outcomes["bound"] == 1000 and outcomes["unschedulable"] == 1000, outcomes
    assert placed[None] == 1000 and all(placed[name] == 20 for name in nodes)
    for name in nodes:
        info = cache.get_node_info(name)
        assert info.requested.milli_cpu == info.allocatable.milli_cpu == 2000
        assert len(info.pods) == placed[name]
    assert cache.verify() == []


# -- the reference scheduler ---------------------------------------------------------------


def test_three_reference_schedulers_place_2000_pods_on_50_nodes_exactly_once(
    cache: Cache, make_cache: Callable[..., Cache], api_server: FakeApiServer, tmp_path: Path
) -> None:
    """50 nodes of 4 CPUs, 2,000 pods of 100m: exactly the room there is. Three replicas race
    for it on their own snapshots; a feed confirms the bindings."""
    for i in range(50):
        api_server.create({**node_manifest(f"n{i:02}", "4", "64Gi"), "kind": "Node"})
    for i in range(2000):
        api_server.create(pending(f"p{i:04}", "100m", schedulerName="ref"))
    kubeconfig = str(api_server.kubeconfig(tmp_path / "kubeconfig"))
    with racing_schedulers(make_cache, kubeconfig, 3) as replicas:
        deadline = time.monotonic() + 240
        while sum(r.bound for r in replicas) < 2000 and time.monotonic() < deadline:
            time.sleep(0.2)
        while cache.pod_count() < 2000 or cache.dump().assumed_pods:
            assert time.monotonic() < deadline, "the feed did not confirm every binding"
            time.sleep(0.2)
    assert sum(r.bound for r in replicas) == 2000
    placed = Counter(obj["spec"]["nodeName"] for obj in api_server.objects("Pod"))
    assert sum(placed.values()) == 2000 and set(placed.values()) == {40}  # every node full
    for i in range(50):
        info = cache.get_node_info(f"n{i:02}")
        assert info.requested.milli_cpu == info.allocatable.milli_cpu == 4000
        assert len(info.pods) == 40
    assert cache.verify() == []


def test_the_extender_command_serves_until_sigterm_and_exits_0(tmp_path: Path) -> None:
    """The command as an operator runs it, against the real Redis."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(real_client(), name)
    cache.add_node(make_node("n1", "1", "8Gi"))
    process, port = extender_process(name, "--no-api", "--url-prefix", "/s")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    assert r.read() == b"ok\n"
                    break
            except OSError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.1)
        body = json.dumps({"Pod": pending("web"), "NodeNames": ["n1"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/s/filter", data=body)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["NodeNames"] == ["n1"]
        bind = json.dumps(binding("web", "n1")).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/s/bind", data=bind)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read()) == {"Error": ""}
        assert cache.pod_state("uid-web") == "assumed"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "Traceback" not in err
    finally:
        process.kill()
        cache.clear()


@pytest.mark.parametrize("prefix", ["/scheduler", "scheduler/", "http://127.0.0.1:8888/scheduler"])
def test_the_url_prefix_may_be_a_path_or_the_configurations_whole_url(
    cache: Cache, prefix: str
) -> None:
    from schedcache.extender.server import make_app

    app = make_app(Extender(cache), prefix)
    paths = {resource.canonical for resource in app.router.resources()}
    assert {"/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind"} <= paths


@pytest.mark.parametrize(
    "answer",
    [
        [],
        [{"Host": "node-1", "Score": 10}, {"Host": 'n\u00e9"\\\n\u2028', "Score": 0}],
        [{"Host": f"node-{i}", "Score": i % 11} for i in range(5000)],
        {"NodeNames": ["a", "b\u00e9"], "FailedNodes": {"c": "why"}, "Error": ""},
        {"Error": "pod team/x: refused"},
    ],
)
def test_answers_are_written_byte_for_byte_as_json_dumps_writes_them(answer: Any) -> None:
    """prioritize's list has its own writer (4x faster at 5,000 hosts): same bytes, any name."""
    assert protocol.encode(answer) == json.dumps(answer, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "scores",
    [
        {},
        {"node-1": 10, 'n\u00e9"\\\n\u2028': 0, "x" * 300: 7},
        {f"node-{i}": i % 11 for i in range(5000)},
        {"a": 11, "b": -1, "c": 10**20},  # outside 0-10: written, not taken from the table
    ],
)
def test_scores_are_written_as_the_host_priority_list_json_dumps_writes(
    scores: dict[str, int],
) -> None:
    """prioritize's answer is written straight from its scores: the bytes of its
    HostPriorityList through json.dumps, in the scores' order."""
    expected = json.dumps(protocol.host_priorities(scores), separators=(",", ":")).encode()
    assert protocol.encode_scores(scores) == expected
    assert protocol.encode_scores(scores) == protocol.encode(protocol.host_priorities(scores))
    if all(type(v) is int and 0 <= v <= protocol.MAX_SCORE for v in scores.values()):
        # From each host's start (the columns' rows: Extender.prioritize_answer)
        # From the hosts' pieces kept (Extender._host_items): the same bytes, twice, the
        # pieces as they were (a kept template is not written into).
        items = protocol.host_items(list(map(protocol.host_start, scores)))
        kept = list(items)
        for _ in range(2):
            assert protocol.encode_items(items, list(scores.values())) == expected
        assert items == kept


@pytest.mark.parametrize(
    "names",
    [
        [],
        ["n1"],
        ["n1", "n2", "n1"],
        ['n\u00e9"\\', "x" * 300],
        ["a\0b", "c"],  # a NUL in a name: written, not kept (it would join as a, b, c)
        ["a", "b", "c"],
        [f"node-{i}" for i in range(5000)],  # over what is kept: written
    ],
)
def test_a_filter_that_passed_every_name_is_written_as_encode_writes_it(names: list[str]) -> None:
    """filter's answer when every name passed is written from the names' JSON kept
    (protocol.AllPassed): the bytes of its ExtenderFilterResult through encode, twice over (the
    second from what was kept), and a list that joins as another kept one answers its own."""
    args = protocol.FilterArgs(Pod.from_k8s(pod_manifest("p", "", "1m", "1Mi")), names, False, [])
    expected = protocol.encode(protocol.filter_result(args, list(names), {}, {}))
    passed = protocol.AllPassed()
    assert passed.encode(["a\0b", "c"]) != passed.encode(["a", "b", "c"])
    assert passed.encode(names) == expected
    assert passed.encode(list(names)) == expected
    assert len(passed.kept) <= 3
    for i in range(passed.KEPT + 5):
        passed.encode([f"n{i}"])
    assert len(passed.kept) == passed.KEPT  # the newest only


def test_filter_answers_of_long_name_lists_are_kept_within_kept_chars_all_together() -> None:
    """Lists of 5,000 names as clouds write them are kept (each ~400 KiB with its answer);
    lists of 253-character names (~2.5 MiB with their answers) only the newest, the keys
    and answers kept never over KEPT_CHARS; each answers its own names."""
    passed = protocol.AllPassed()
    cloud = [f"ip-10-0-{i // 256}-{i % 256}.eu-west-1.compute.internal" for i in range(5000)]
    first = passed.encode(cloud)
    assert passed.encode(list(cloud)) is first  # kept
    longest = [[f"{j}-{i:05}".ljust(253, "x") for i in range(5000)] for j in range(5)]
    for names in longest * 2:
        assert json.loads(passed.encode(names))["NodeNames"] == names
        assert passed.kept.size == sum(len(k) + len(v) for k, v in passed.kept.items())
        assert passed.kept.size <= passed.KEPT_CHARS
    assert 0 < len(passed.kept) < len(longest)


def test_prioritize_scores_on_its_filters_snapshot_and_catches_up_for_another_pod(
    cache: Cache, make_cache: Callable[..., Cache], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler filters and scores one cycle on one snapshot: a pod's prioritize right
    after its filter reads nothing more from Redis; another pod's sees every claim since."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "4", "8Gi"))
    extender = Extender(cache)
    reads: list[int] = []
    update = cache.update_snapshot

    def counted(snap: Any) -> Any:
        reads.append(1)
        return update(snap)

    monkeypatch.setattr(cache, "update_snapshot", counted)

    def args(name: str) -> protocol.FilterArgs:
        manifest = pod_manifest(name, "", "100m", "100Mi", uid=f"uid-{name}")
        return protocol.filter_args({"Pod": manifest, "NodeNames": ["n1", "n2"]})

    extender.filter(args("a"))
    before = {e["Host"]: e["Score"] for e in extender.prioritize(args("a"))}
    assert len(reads) == 1 and before["n1"] == before["n2"]
    other = make_cache(replica="other")
    other.assume_pod(Pod.from_k8s(pod_manifest("big", "n1", "3", "6Gi", uid="uid-big")))
    after = {e["Host"]: e["Score"] for e in extender.prioritize(args("b"))}
    assert len(reads) == 2 and after["n1"] < after["n2"]


def test_prioritize_reuses_filters_reading_of_the_same_pod_only() -> None:
    """kube-scheduler sends one pod to filter, then the same to prioritize: the second
    reading is the first's (issue 43: reading a pod cost 15x writing its JSON); a pod that
    differs in any field is read afresh."""
    manifest = pod_manifest("web", "", "500m", "1Gi")
    filtered = protocol.filter_args({"Pod": manifest, "NodeNames": ["n1"]})
    again = protocol.filter_args({"pod": json.loads(json.dumps(manifest)), "nodeNames": ["n2"]})
    assert again.pod is filtered.pod
    changed = json.loads(json.dumps(manifest))
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    other = protocol.filter_args({"Pod": changed, "NodeNames": ["n1"]})
    assert other.pod is not filtered.pod and other.pod.requests.milli_cpu == 2000
    assert other.pod == Pod.from_k8s(changed) and filtered.pod == Pod.from_k8s(manifest)
