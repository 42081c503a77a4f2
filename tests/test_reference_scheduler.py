"""The reference scheduler's queue habits, as kube-scheduler's (issue 29, item 8): a pod no node
can take is told why in upstream's words (a ``PodScheduled=False`` condition, reason
``Unschedulable``), backs off 1 s doubling to 10 s, and is retried at once on a cluster change
that could help; with the API server away the pending-pod watch backs off too.

The cache runs on every backend; the API server is tests/apiserver.py through the official
client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from schedcache import Cache
from schedcache.extender.reference import ReferenceScheduler, fit_error
from schedcache.feed.sync import api_client
from schedcache.model.values import Node
from tests.apiserver import FakeApiServer
from tests.factories import make_node, node_manifest, pod_manifest

NS = "default"


def pending(name: str, cpu: str) -> dict[str, Any]:
    manifest = pod_manifest(name, "", cpu, "100Mi", namespace=NS, uid=f"uid-{name}")
    manifest["spec"]["schedulerName"] = "ref"
    return {**manifest, "kind": "Pod"}


def tainted(name: str, cpu: str) -> Node:
    manifest = node_manifest(name, cpu, "8Gi")
    manifest["spec"] = {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    return Node.from_k8s(manifest)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


@pytest.fixture
def start_scheduler(
    server: FakeApiServer, tmp_path: Path
) -> Iterator[Callable[..., ReferenceScheduler]]:
    started: list[tuple[ReferenceScheduler, threading.Thread]] = []

    def start(cache: Cache, **options: Any) -> ReferenceScheduler:
        kubeconfig = str(server.kubeconfig(tmp_path / f"kubeconfig-{len(started)}"))
        scheduler = ReferenceScheduler(cache, api_client(kubeconfig), "ref", **options)
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        started.append((scheduler, thread))
        return scheduler

    yield start
    for scheduler, thread in started:
        scheduler.stop.set()
        thread.join(10)


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)


def condition(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    pod = server.get("Pod", name) or {}
    for found in (pod.get("status") or {}).get("conditions") or []:
        if found.get("type") == "PodScheduled":
            return dict(found)
    return None


@pytest.mark.parametrize(
    ("nodes", "reasons", "expected"),
    [
        (
            12,
            ["Insufficient cpu"] * 3 + ["node(s) had untolerated taint {dedicated: gpu}"] * 9,
            "0/12 nodes are available: 3 Insufficient cpu, "
            "9 node(s) had untolerated taint {dedicated: gpu}.",
        ),
        # Go's sort.Strings on "<count> <reason>": "12 ..." sorts before "3 ...".
        (
            15,
            ["node(s) didn't match Pod's node affinity/selector"] * 3 + ["Too many pods"] * 12,
            "0/15 nodes are available: 12 Too many pods, "
            "3 node(s) didn't match Pod's node affinity/selector.",
        ),
        # One node short of two resources counts in both (upstream's status has two reasons).
        (
            1,
            ["Insufficient cpu", "Insufficient memory"],
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
        ),
        (0, [], "no nodes available to schedule pods"),
    ],
)
def test_the_reasons_read_as_upstreams_fit_error(
    nodes: int, reasons: list[str], expected: str
) -> None:
    assert fit_error(nodes, reasons) == expected


def test_an_unschedulable_pod_is_told_why_and_backs_off_doubling(
    cache: Cache, server: FakeApiServer, start_scheduler: Callable[..., ReferenceScheduler]
) -> None:
    """Before: retried every second for ever, no per-node reasons, nothing told to the pod."""
    cache.add_node(make_node("small", "1", "8Gi"))
    cache.add_node(tainted("gpu", "8"))
    server.create(pending("big", "2"))
    scheduler = start_scheduler(cache, retry_delay=0.2, max_backoff=0.8)
    eventually(lambda: condition(server, "big") is not None)
    found = condition(server, "big")
    assert found is not None
    assert found["status"] == "False" and found["reason"] == "Unschedulable"
    assert found["message"] == (
        "0/2 nodes are available: 1 Insufficient cpu, "
        "1 node(s) had untolerated taint {dedicated: gpu}."
    )
    time.sleep(3.0)
    # 0.2, 0.4, 0.8, 0.8, ... s apart: at most 6 attempts in ~3 s (a fixed 0.2 s: ~15); our
    # own condition patch (a MODIFIED of the pending pod) did not retry it early either.
    assert 3 <= scheduler.unschedulable <= 6, scheduler.unschedulable
    patches = [r for r in server.requests if r.method == "PATCH"]
    assert len(patches) == 1  # the same message is not written again


def test_a_node_added_retries_a_backing_off_pod_at_once(
    cache: Cache, server: FakeApiServer, start_scheduler: Callable[..., ReferenceScheduler]
) -> None:
    cache.add_node(make_node("small", "1", "8Gi"))
    server.create(pending("big", "2"))
    scheduler = start_scheduler(cache, retry_delay=60.0, max_backoff=60.0)
    eventually(lambda: scheduler.unschedulable == 1)
    time.sleep(0.3)
    cache.add_node(make_node("roomy", "4", "8Gi"))
    eventually(lambda: (server.get("Pod", "big") or {})["spec"].get("nodeName") == "roomy", 5)
    eventually(lambda: scheduler.bound == 1)  # counted once finish_binding returned
    assert scheduler.unschedulable == 1


def test_with_the_api_server_down_the_pending_watch_backs_off(
    cache: Cache,
    server: FakeApiServer,
    start_scheduler: Callable[..., ReferenceScheduler],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: a warning every second for as long as the API server was away."""
    server.down()
    with caplog.at_level(logging.WARNING, logger="schedcache.extender.reference"):
        scheduler = start_scheduler(cache)
        time.sleep(4.5)
    warnings = [r for r in caplog.records if "watching pending pods" in r.getMessage()]
    assert 2 <= len(warnings) <= 3 and scheduler.api_errors == len(warnings)  # at 0, 1, 3 s
    server.up()


def test_a_binding_the_api_server_never_answers_forgets_the_claim_and_backs_off(
    cache: Cache, server: FakeApiServer, start_scheduler: Callable[..., ReferenceScheduler]
) -> None:
    """Before: a connection error from the Binding (not an ApiException) left the claim
    assumed and ended the scheduling loop."""
    cache.add_node(make_node("roomy", "4", "8Gi"))
    calls: list[str] = []

    def unreachable(namespace: str, name: str, uid: str, node: str) -> None:
        calls.append(node)
        raise urllib3.exceptions.MaxRetryError(None, "/binding", OSError("connection refused"))  # type: ignore[arg-type]

    scheduler = start_scheduler(cache, retry_delay=0.2, max_backoff=0.4)
    scheduler.binder.bind = unreachable  # type: ignore[method-assign]
    server.create(pending("p", "1"))  # offered once the binder is the unreachable one
    eventually(lambda: len(calls) >= 2)  # tried again: the loop lives on
    assert cache.pod_state("uid-p") is None  # the claim was forgotten each time
    assert cache.get_node_info("roomy").requested.milli_cpu == 0
