"""One reference scheduler fed by ``sync`` of the fake API server, for the tests of its queue
habits and its binding cycle: the feeder queues the pending pods (and keeps nodes and bound
pods), the scheduler pops them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schedcache import Cache
from schedcache.feed.sync import Syncer, SyncSettings, api_client
from schedcache.scheduler.loop import ReferenceScheduler
from tests.apiserver import FakeApiServer
from tests.factories import node_manifest, pod_manifest

FAST = SyncSettings(watch_timeout=30, backoff=0.05, max_backoff=0.3, progress_every=0.05)


def pending(name: str, cpu: str, scheduler: str = "ref") -> dict[str, Any]:
    """A pending pod of ``scheduler``, as the API server holds it."""
    manifest = pod_manifest(name, "", cpu, "100Mi", namespace="default", uid=f"uid-{name}")
    manifest["spec"]["schedulerName"] = scheduler
    return {**manifest, "kind": "Pod"}


def node(name: str, cpu: str, taint: str = "") -> dict[str, Any]:
    """A node as the API server holds it; ``taint``: a ``dedicated=<taint>:NoSchedule``."""
    manifest = node_manifest(name, cpu, "8Gi")
    if taint:
        manifest["spec"] = {
            "taints": [{"key": "dedicated", "value": taint, "effect": "NoSchedule"}]
        }
    return {**manifest, "kind": "Node"}


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)


@contextmanager
def fed_scheduler(
    cache: Cache,
    server: FakeApiServer,
    tmp_path: Path,
    prepare: Callable[[ReferenceScheduler], None] | None = None,
    **options: Any,
) -> Iterator[ReferenceScheduler]:
    """A feeder of ``server`` into ``cache`` (listed once before this returns) and a reference
    scheduler of ``ref``'s pods on it, in threads; ``prepare`` runs before it starts. Both
    stopped when the block ends, and the cache's lease heartbeat too (the scheduler's claims
    start it; left running, it outlived its test and logged failures into later ones)."""
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    feeder = Syncer(cache, api_client(kubeconfig), FAST, "feed")
    feeder.start()
    scheduler = ReferenceScheduler(cache, api_client(kubeconfig), "ref", **options)
    if prepare is not None:
        prepare(scheduler)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    try:
        assert feeder.wait_synced(30)
        thread.start()
        yield scheduler
    finally:
        scheduler.stop.set()
        thread.join(40)
        feeder.stop()
        cache.close()


@contextmanager
def pending_on_big(names: Sequence[str], cores: str = "64") -> Iterator[FakeApiServer]:
    """A fake API server with one node ``big`` of ``cores`` cores and ``names`` pending (one
    core each, scheduler ``ref``)."""
    with FakeApiServer() as server:
        server.create(node("big", cores))
        for name in names:
            server.create(pending(name, "1"))
        yield server
