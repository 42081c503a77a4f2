"""A load for the restart, failover and fault tests and ``bench/faults.py``: pods added from a
thread, with what was acknowledged, when, and what callers saw."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import redis

from schedcache import Cache
from schedcache.errors import CacheError, NotReplicated
from schedcache.store.batch import BatchFailed
from tests.factories import make_node, make_pod


@dataclass
class Load:
    """Pods added from a thread until stopped: single commands, and every fifth time a batch
    of 20. ``attempted`` holds every uid sent (acknowledged or not), ``acknowledged`` those
    whose add returned, in order, ``unconfirmed`` those answered with ``NotReplicated``
    (applied, not confirmed by a replica), ``failed`` every other error a caller saw."""

    cache: Cache
    nodes: int = 3
    attempted: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    failed: list[tuple[str, Exception]] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    unconfirmed_times: list[float] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for index in itertools.count():
            if self.stopping.is_set():
                return
            node = f"n{index % self.nodes}"
            uids = [f"b{index}-{i}" for i in range(20)] if index % 5 == 4 else [f"p{index}"]
            self.attempted += uids
            try:
                if len(uids) > 1:
                    with self.cache.batch(chunk_size=10) as batch:
                        for uid in uids:
                            batch.add_pod(make_pod(uid, node, "1m", "1Ki"))
                else:
                    self.cache.add_pod(make_pod(uids[0], node, "1m", "1Ki"))
            except NotReplicated:
                self.unconfirmed += uids
                self.unconfirmed_times.append(time.monotonic())
            except BatchFailed as error:
                if all(isinstance(e, NotReplicated) for _, e in error.failures):
                    self.unconfirmed += uids  # some groups may have been confirmed
                    self.unconfirmed_times.append(time.monotonic())
                else:
                    self.failed.append((f"#{index}", error))
            except (CacheError, redis.RedisError) as error:
                self.failed.append((f"#{index}", error))
            else:
                now = time.monotonic()
                self.acknowledged += uids
                self.ack_times += [now] * len(uids)

    def __enter__(self) -> Load:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)

    def wait_for(self, count: int, timeout: float = 60) -> None:
        """Until ``count`` more pods are acknowledged."""
        deadline = time.monotonic() + timeout
        target = len(self.acknowledged) + count
        while len(self.acknowledged) < target:
            assert time.monotonic() < deadline, f"load stalled: {self.failed[-3:]}"
            time.sleep(0.01)

    def acknowledged_before(self, moment: float) -> list[str]:
        return [uid for uid, t in zip(self.acknowledged, self.ack_times, strict=True) if t < moment]

    def recovery_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the first acknowledgement after it."""
        return min(t for t in self.ack_times if t > moment) - moment

    def writes_resumed_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the first command applied after it (acknowledged, or
        applied but not yet confirmed by a replica)."""
        return min(t for t in self.ack_times + self.unconfirmed_times if t > moment) - moment


def add_nodes(cache: Cache, count: int = 3) -> None:
    for index in range(count):
        cache.add_node(make_node(f"n{index}", "1000", "1000Gi", pods="1000000"))


def applied_twice(cache: Cache) -> list[str]:
    added = Counter(event.uid for event in cache.events() if event.type == "PodAdded")
    return sorted(uid for uid, count in added.items() if uid and count > 1)
