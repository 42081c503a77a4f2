"""Faults, measured: pods added under load (single commands and batches of 20) while the
connection is cut (``tests/tcp_proxy.py``), the server is killed or stopped and restarted, or
a cluster / Sentinel primary fails over. Per scenario: commands acknowledged, applied, applied
but unconfirmed by a replica (``NotReplicated``), acknowledged but lost, applied twice, errors
the callers saw, and times from the fault: to a replica's promotion (failovers), to the next
applied command, and to the next acknowledgement (with ``wait_replicas=1`` that waits for the
promoted primary to have a replica again); medians over the cuts, or over the repeats of a
restart or failover.

The tests (``tests/test_faults.py``, ``tests/test_durability.py``, ``tests/test_failover.py``)
assert the guarantees; this shows the numbers behind them. Needs the real Redis of
``SCHEDCACHE_TEST_REDIS_URL`` for the proxy scenarios and ``redis-server`` / ``redis-cli`` for
the others. ``python -m bench.faults [--long]`` (``--long``: more commands, three repeats).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.common import print_table, write_results
from schedcache import Cache, connect
from schedcache.store.retry import RetryPolicy
from tests.conftest import real_client
from tests.load import Load, add_nodes, applied_twice
from tests.servers import Cluster, SentinelGroup, wait_until
from tests.tcp_proxy import FaultyProxy, Point
from tests.test_durability import restart_under_load
from tests.test_faults import CUT_RATE, FAULT_RETRY, target

FAILOVER_RETRY = RetryPolicy(attempts=100, within=30.0, max_delay=0.5)
COLUMNS = [
    "scenario",
    "acknowledged",
    "applied",
    "applied, unconfirmed",
    "lost",
    "applied twice",
    "errors seen by callers",
    "promoted after s",
    "writes resume s",
    "acknowledged again s",
]


@dataclass
class Outcome:
    scenario: str
    acknowledged: int
    applied: int
    unconfirmed: int
    lost: int
    twice: int
    errors: int
    recovery: float  # to the next acknowledgement
    resumed: float  # to the next applied command, confirmed or not
    promoted: float | None = None  # to the replica's promotion (failovers)

    def row(self) -> list[object]:
        return [
            self.scenario,
            self.acknowledged,
            self.applied,
            self.unconfirmed,
            self.lost,
            self.twice,
            self.errors,
            "-" if self.promoted is None else f"{self.promoted:.3f}",
            f"{self.resumed:.3f}",
            f"{self.recovery:.3f}",
        ]


class Frozen:
    """What ``outcome`` needs of a cache, read while its server is still up."""

    def __init__(self, cache: Cache) -> None:
        self.stored = {pod.uid for pod in cache.list_pods()}
        self.twice = applied_twice(cache)


def outcome(
    scenario: str,
    loads: list[Load],
    caches: list[Frozen],
    recoveries: list[float],
    resumptions: list[float] | None = None,
    promotions: list[float] | None = None,
) -> Outcome:
    """Sums over the repeats (one load and cache each), the median times."""
    acknowledged = applied = unconfirmed = lost = twice = errors = 0
    for load, cache in zip(loads, caches, strict=True):
        stored = cache.stored
        acknowledged += len(load.acknowledged)
        applied += len(stored & set(load.attempted))
        unconfirmed += len(load.unconfirmed)
        lost += len(set(load.acknowledged) - stored)
        twice += len(cache.twice)
        errors += len(load.failed)
    median = statistics.median(recoveries) if recoveries else float("nan")
    resumed = statistics.median(resumptions) if resumptions else median
    promoted = statistics.median(promotions) if promotions else None
    return Outcome(
        scenario, acknowledged, applied, unconfirmed, lost, twice, errors, median, resumed, promoted
    )


def proxy_cuts(point: Point, pods: int) -> Outcome:
    """The load through a proxy cutting a quarter of the requests at ``point``."""
    proxy = FaultyProxy(*target(), points=(point,), seed=7)
    name = f"bench-faults-{uuid.uuid4().hex[:8]}"
    client = redis.Redis(port=proxy.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    cache = Cache(client, name, replica="bench", retry=FAULT_RETRY, lease_ttl=0)
    observer = Cache(real_client(), name)
    try:
        add_nodes(cache)
        proxy.rate = CUT_RATE
        with Load(cache) as load:
            load.wait_for(pods, timeout=300)
        proxy.rate = 0.0
        recoveries = [load.recovery_after(t) for t in proxy.cut_times if t < load.ack_times[-1]]
        return outcome(f"proxy cuts {point}", [load], [Frozen(observer)], recoveries)
    finally:
        proxy.close()
        observer.clear()


def restarts(scenario: str, fsync: str, sig: int, repeats: int, pods: int) -> Outcome:
    loads: list[Load] = []
    caches: list[Frozen] = []
    recoveries: list[float] = []
    for _ in range(repeats):
        with (
            tempfile.TemporaryDirectory() as directory,
            restart_under_load(Path(directory), fsync, sig, pods, pods // 2) as run,
        ):
            restart, load, cache = run
            # Counted while the server runs; the cache object is gone with it afterwards.
            loads.append(load)
            caches.append(Frozen(cache))
            recoveries.append(restart.recovery)
    return outcome(scenario, loads, caches, recoveries)


def primary_port(group: Cluster | SentinelGroup, key: str) -> int:
    return group.primary_of(key).port if isinstance(group, Cluster) else group.primary().port


def one_failover(
    kind: str, directory: Path, pods: int
) -> tuple[Load, Frozen, tuple[float, float, float]]:
    """SIGKILL of the primary holding the cache under load, ``wait_replicas=1``; the killed
    server is started again once the failover is seen (it rejoins as a replica)."""
    group: Cluster | SentinelGroup
    if kind == "cluster":
        group = Cluster(directory, node_timeout=1000)
    else:
        group = SentinelGroup(directory, replicas=1, sentinels=1, down_after=1000)
    group.start()
    try:
        cache = Cache(
            connect(group.url), "failover", replica="r1", retry=FAILOVER_RETRY, wait_replicas=1
        )
        add_nodes(cache)
        key = cache.keys.prefix
        port = primary_port(group, key)
        primary = next(s for s in group.servers if s.port == port)
        with Load(cache) as load:
            load.wait_for(pods)
            killed_at = time.monotonic()
            primary.kill()
            wait_until(lambda: primary_port(group, key) != port, 30, "a replica takes over")
            promoted = time.monotonic() - killed_at
            primary.start()
            load.wait_for(pods)
        times = (load.recovery_after(killed_at), load.writes_resumed_after(killed_at), promoted)
        return load, Frozen(cache), times
    finally:
        group.stop()


def failovers(scenario: str, kind: str, repeats: int, pods: int) -> Outcome:
    loads: list[Load] = []
    caches: list[Frozen] = []
    recoveries: list[float] = []
    resumptions: list[float] = []
    promotions: list[float] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as directory:
            load, frozen, (recovery, resumed, promoted) = one_failover(kind, Path(directory), pods)
        loads.append(load)
        caches.append(frozen)
        recoveries.append(recovery)
        resumptions.append(resumed)
        promotions.append(promoted)
    return outcome(scenario, loads, caches, recoveries, resumptions, promotions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="more commands, three repeats")
    options = parser.parse_args()
    repeats, pods = (3, 5000) if options.long else (1, 1000)
    outcomes = [proxy_cuts(point, pods) for point in ("before", "after", "mid")]
    outcomes += [
        restarts("SIGKILL, appendfsync always", "always", signal.SIGKILL, repeats, pods),
        restarts("SIGKILL, appendfsync everysec", "everysec", signal.SIGKILL, repeats, pods),
        restarts("SIGTERM, appendfsync everysec", "everysec", signal.SIGTERM, repeats, pods),
        failovers("cluster primary SIGKILL", "cluster", repeats, pods // 5),
        failovers("Sentinel failover", "sentinel", repeats, pods // 5),
    ]
    print_table("Faults (pods added under load)", COLUMNS, [o.row() for o in outcomes])
    path = write_results(
        "faults",
        {"long": options.long, "repeats": repeats, "outcomes": [asdict(o) for o in outcomes]},
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
