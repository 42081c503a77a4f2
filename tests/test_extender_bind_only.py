"""The bind-only profile (deploy/overlays/bind-only, docs/extender.md "Profiles"):
kube-scheduler filters and scores in process and calls the extender's bind alone, so the
extender sees a pod for the first time at its bind, with no filter call to have built its
snapshot. The claim still keeps every rule across replicas; a refused one is an ``Error`` that
kube-scheduler treats as a failed bind (it forgets the pod and retries it)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from schedcache import Cache
from schedcache.extender.service import Extender
from schedcache.feed.sync import api_client
from schedcache.scheduler.binder import ApiBinder
from tests.apiserver import FakeApiServer
from tests.extender_server import RunningExtender
from tests.factories import keyspace, make_node, pod_manifest
from tests.test_deploy import render, scheduler_configuration

NS = "team"
OVERLAY = "deploy/overlays/bind-only"


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def binder(server: FakeApiServer, tmp_path: Path) -> ApiBinder:
    return ApiBinder(api_client(str(server.kubeconfig(tmp_path / "kubeconfig"))))


def pending(name: str, cpu: str, **extra: Any) -> dict[str, Any]:
    return pod_manifest(name, "", cpu, "100Mi", namespace=NS, uid=f"uid-{name}", **extra)


def binding(name: str, node: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": NS, "PodUID": f"uid-{name}", "Node": node}


def refused_then_bound(server: RunningExtender, cache: Cache, name: str, reason: str) -> None:
    """The bind of ``name`` onto n1 is refused for ``reason`` and writes nothing; the pod's
    next cycle (kube-scheduler's retry) binds it onto n2."""
    before = keyspace(cache.client, cache.keys.pattern)
    status, answer = server.post("bind", binding(name, "n1"))
    assert status == 200 and reason in answer["Error"]
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert server.post("bind", binding(name, "n2")) == (200, {"Error": ""})


def test_two_replicas_binding_onto_one_node_claim_it_once_and_the_refused_pod_retries(
    make_cache: Callable[..., Cache], api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Two kube-scheduler replicas, each with its extender, both chose n1 (room for one pod)
    on their own caches: one bind lands, the other is refused, writes nothing, and the same
    pod's next cycle binds it elsewhere."""
    a, b = make_cache(replica="extender-a"), make_cache(replica="extender-b")
    a.add_node(make_node("n1", "4", "8Gi"))
    a.add_node(make_node("n2", "4", "8Gi"))
    for name in ("p1", "p2"):
        api_server.create(pending(name, "3"))
    with (
        RunningExtender(Extender(a, binder(api_server, tmp_path))) as first,
        RunningExtender(Extender(b, binder(api_server, tmp_path))) as second,
    ):
        assert first.post("bind", binding("p1", "n1")) == (200, {"Error": ""})
        refused_then_bound(second, b, "p2", "no longer has room: cpu")
    assert api_server.get("Pod", "p1", NS)["spec"]["nodeName"] == "n1"
    assert api_server.get("Pod", "p2", NS)["spec"]["nodeName"] == "n2"
    assert [a.get_node_info(n).requested.milli_cpu for n in ("n1", "n2")] == [3000, 3000]


def test_a_bind_without_a_filter_keeps_existing_pods_anti_affinity(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The extender's snapshot was never built (no filter call): a plain pod's claim still
    meets a placed pod's required anti-affinity toward it, judged when Redis asks for it."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, "4", "8Gi", labels={"kubernetes.io/hostname": name}))
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    guard = pending(
        "guard",
        "100m",
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )
    api_server.create(guard)
    api_server.create(pending("web", "100m", labels={"app": "web"}))
    with RunningExtender(Extender(cache, binder(api_server, tmp_path))) as server:
        assert server.post("bind", binding("guard", "n1")) == (200, {"Error": ""})
        refused_then_bound(server, cache, "web", "anti-affinity")
    assert api_server.get("Pod", "web", NS)["spec"]["nodeName"] == "n2"


def test_the_overlay_hands_kube_scheduler_only_the_bind() -> None:
    objects = render(OVERLAY)
    (extender,) = scheduler_configuration(objects)["extenders"]
    assert extender["bindVerb"] == "bind"
    assert not extender.get("filterVerb") and not extender.get("prioritizeVerb")
    assert extender["ignorable"] is False  # a bind that cannot be claimed must fail
    # The same sidecar as the full profile, where the configuration says it is.
    full = scheduler_configuration(render("deploy/overlays/redis-single"))["extenders"][0]
    assert extender["urlPrefix"] == full["urlPrefix"]
    # Only the configuration differs from redis-single's objects (and its name's hash).
    assert same_but_configuration(objects) == same_but_configuration(
        render("deploy/overlays/redis-single")
    )


def same_but_configuration(objects: list[dict[str, Any]]) -> str:
    """The objects as text, without the scheduler's ConfigMap, its hashed name made plain."""
    text = json.dumps([o for o in objects if o["kind"] != "ConfigMap"], sort_keys=True)
    return re.sub(r"schedcache-scheduler-config-[a-z0-9]+", "schedcache-scheduler-config", text)
