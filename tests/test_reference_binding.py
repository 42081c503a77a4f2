"""The reference scheduler's binding cycle runs off the scheduling loop (issue 34, item 3): the
next pod is placed and claimed while a Binding is still waiting for the API server, on a
snapshot that counts the first claim; the claims are finished when their Bindings answer. On
every backend; the API server is tests/apiserver.py through the official client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from schedcache import Cache
from schedcache.extender.reference import ReferenceScheduler
from schedcache.feed.sync import api_client
from tests.apiserver import FakeApiServer
from tests.factories import make_node, pod_manifest


def pending(name: str, cpu: str) -> dict[str, Any]:
    manifest = pod_manifest(name, "", cpu, "100Mi", namespace="default", uid=f"uid-{name}")
    manifest["spec"]["schedulerName"] = "ref"
    return {**manifest, "kind": "Pod"}


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def test_the_next_pod_is_claimed_while_a_binding_waits(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: bind, then finish_binding, then the next pod: one slow Binding held the loop."""
    cache.add_node(make_node("a", "2", "8Gi"))
    cache.add_node(make_node("b", "2", "8Gi"))
    scheduler = ReferenceScheduler(
        cache, api_client(str(server.kubeconfig(tmp_path / "kubeconfig"))), "ref"
    )
    release = threading.Event()
    binds: list[str] = []
    bind = scheduler.binder.bind

    def slow_first(namespace: str, name: str, uid: str, node: str) -> None:
        binds.append(name)
        if name == "first":
            release.wait(30)
        bind(namespace, name, uid, node)

    scheduler.binder.bind = slow_first  # type: ignore[method-assign]
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        server.create(pending("first", "1500m"))
        eventually(lambda: binds == ["first"])
        server.create(pending("second", "1500m"))
        # Claimed and handed to the pool while the first Binding still waits; the snapshot
        # counted the first claim: the second pod went to the other node.
        eventually(lambda: scheduler.bound == 1, timeout=5)
        assert not release.is_set() and binds == ["first", "second"]
        assert cache.pod_state("uid-first") == "assumed"
        nodes = {cache.get_pod_record(f"uid-{n}").node for n in ("first", "second")}
        assert nodes == {"a", "b"}
        release.set()
        eventually(lambda: scheduler.bound == 2)
        assert {(server.get("Pod", n) or {})["spec"].get("nodeName") for n in binds} == nodes
    finally:
        release.set()
        scheduler.stop.set()
        thread.join(40)
