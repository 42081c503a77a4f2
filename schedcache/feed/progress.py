"""A feed's progress in the cache: each resource's newest resourceVersion, when, and by whom.

Kept apart from :mod:`schedcache.feed.sync` so ``schedcache stats`` can show it without the
``kube`` extra installed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from schedcache.cache import Cache, Dump
from schedcache.feed.reconcile import RESOURCES
from schedcache.store.responses import as_text


@dataclass(frozen=True)
class Progress:
    """The newest resourceVersion a feeder reached for one resource, when, and which feeder."""

    resource: str
    version: str
    at: float  # seconds since the epoch
    by: str

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)


def record_progress(cache: Cache, resource: str, version: str, by: str, now: float) -> bool:
    """Write a feed's progress to the cache's ``sync`` hash (last writer wins: every feeder
    writes, so the hash shows that the cache is fed while any feeder runs). Whether the hash
    lacked the resource's progress until this write (``HSET`` counts the fields it created):
    one command, so it tells of the server that took the write, where :func:`progress_lost`'s
    read before it may have met the server before a restart (found in CI: a read answered
    by Redis before it restarted empty, the write by the empty one, which then held the
    progress again and the loss went unseen)."""
    created = cache.client.hset(
        cache.keys.sync,
        mapping={
            f"{resource}:rv": version,
            f"{resource}:at": round(now * 1000),
            f"{resource}:by": by,
        },
    )
    return int(created) > 0


def progress_lost(cache: Cache, resource: str, by: str, written: str) -> bool:
    """Whether Redis lost the progress ``by`` last wrote (``written``, "" for none): the
    ``sync`` hash lacks it, or still names ``by`` with an older resourceVersion, so Redis came
    back with fewer writes (an older RDB or AOF, a restore, a lagging replica, a restart
    without persistence) and the changes the feeder applied before it may be gone too. Another
    feeder's newer write in between hides it (each feeder checks its own), never a false
    alarm: a feeder's progress only grows."""
    if not written:
        return False
    stored = cache.client.hmget(cache.keys.sync, [f"{resource}:rv", f"{resource}:by"])
    version, writer = (as_text(value) if value is not None else None for value in stored)
    if version is None:
        return True
    return writer == by and _rv_order(version) < _rv_order(written)


def _rv_order(version: str) -> tuple[int, str]:
    return (len(version), version)  # decimal resourceVersions: longer is newer


def read_progress(cache: Cache) -> list[Progress]:
    """Each resource's progress from the ``sync`` hash (none when nothing ever synced)."""
    fields = {as_text(k): as_text(v) for k, v in cache.client.hgetall(cache.keys.sync).items()}
    found = []
    for resource in RESOURCES:
        version = fields.get(f"{resource}:rv")
        at = fields.get(f"{resource}:at", "")
        if version is None or not at.isdigit():
            continue
        found.append(Progress(resource, version, int(at) / 1000, fields.get(f"{resource}:by", "")))
    return found


def truncated_pods(dump: Dump) -> int:
    """How many pods the cache holds without their labels (``sync`` stored them truncated:
    more labels than the cache reads back); ``stats`` and ``verify`` show it."""
    return sum(pod.truncated for info in dump.nodes.values() for pod in info.pods)
