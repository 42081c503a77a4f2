"""The reference scheduler's binding cycle runs off the scheduling loop (issue 34, item 3): the
next pod is placed and claimed while a Binding is still waiting for the API server, on a
snapshot that counts the first claim; the claims are finished when their Bindings answer. On
every backend; the API server is tests/apiserver.py through the official client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedcache import Cache
from schedcache.scheduler.loop import ReferenceScheduler
from tests.apiserver import FakeApiServer
from tests.scheduling import eventually, fed_scheduler, node, pending


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def test_the_next_pod_is_claimed_while_a_binding_waits(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: bind, then finish_binding, then the next pod: one slow Binding held the loop."""
    server.create(node("a", "2"))
    server.create(node("b", "2"))
    release = threading.Event()
    binds: list[str] = []

    def slow_first(scheduler: ReferenceScheduler) -> None:
        bind = scheduler.binder.bind

        def slow(namespace: str, name: str, uid: str, node: str) -> None:
            binds.append(name)
            if name == "first":
                release.wait(30)
            bind(namespace, name, uid, node)

        scheduler.binder.bind = slow  # type: ignore[method-assign]

    try:
        with fed_scheduler(cache, server, tmp_path, prepare=slow_first) as scheduler:
            server.create(pending("first", "1500m"))
            eventually(lambda: binds == ["first"])
            server.create(pending("second", "1500m"))
            # Claimed and handed to the pool while the first Binding still waits; the
            # snapshot counted the first claim: the second pod went to the other node.
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
