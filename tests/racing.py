"""Reference scheduler replicas racing on one cache, fed by a ``sync`` of the fake API server:
what the end-to-end scheduling tests share (start, wait for the feed, stop everything)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from schedcache import Cache
from schedcache.feed.sync import Syncer, SyncSettings, api_client
from schedcache.scheduler.loop import ReferenceScheduler


@contextmanager
def racing_schedulers(
    make_cache: Callable[..., Cache],
    kubeconfig: str,
    count: int,
    scheduler_name: str = "ref",
    **options: Any,
) -> Iterator[list[ReferenceScheduler]]:
    """``count`` replicas scheduling ``scheduler_name``'s pods, each in a thread, once a feeder
    has listed the cluster (``options``: the replicas' own); all stopped (and the feeder) when
    the block ends."""
    feeder = Syncer(make_cache(replica="feed"), api_client(kubeconfig), SyncSettings())
    feeder.start()
    try:
        assert feeder.wait_synced(30)
        replicas = [
            ReferenceScheduler(
                make_cache(replica=f"{scheduler_name}-{i}"),
                api_client(kubeconfig),
                scheduler_name,
                **{"retry_delay": 0.2, **options},
            )
            for i in range(count)
        ]
        threads = [threading.Thread(target=r.run, daemon=True) for r in replicas]
        for thread in threads:
            thread.start()
        try:
            yield replicas
        finally:
            for r in replicas:
                r.stop.set()
            for thread in threads:
                thread.join(10)
    finally:
        feeder.stop()
