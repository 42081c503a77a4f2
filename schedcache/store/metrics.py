"""Prometheus metrics (served by the workers and ``schedcache metrics``).

Counters are updated by the library as things happen; the cache sizes and the stream length
are read from Redis when Prometheus scrapes (:class:`CacheCollector`), so they are never stale.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from schedcache.store.keys import Keys
from schedcache.store.queued import queue_lengths
from schedcache.store.routing import Client

SNAPSHOT_UPDATE_SECONDS = Histogram(
    "schedcache_snapshot_update_seconds",
    "Time of one update_snapshot call.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SNAPSHOT_INCONSISTENCIES = Counter(
    "schedcache_snapshot_inconsistencies_total",
    "Snapshots found inconsistent with the cache's live nodes and rebuilt in full.",
    ["cache"],
)
SKIPPED_CORRUPT = Counter(
    "schedcache_skipped_corrupt_pods_total",
    "Pods the expiry or lease sweep skipped because their stored record is corrupt.",
    ["cache"],
)
EXPIRED_PODS = Counter(
    "schedcache_expired_pods_total",
    "Assumed pods expired because their confirmation did not come before the deadline.",
    ["cache"],
)
COMMANDS = Counter(
    "schedcache_commands_total",
    "Cache commands by outcome: applied, or rejected (the transition was not allowed).",
    ["command", "result"],
)


FIT_CONFLICTS = Counter(
    "schedcache_fit_conflicts_total",
    "assume_pod calls refused because the node lacked room (by resource), changed since the "
    "replica's snapshot (stale) or was gone (node-missing).",
    ["reason"],
)


PREEMPTION_ATTEMPTS = Counter(
    "schedcache_preemption_attempts_total",
    "DefaultPreemption PostFilter runs of this process (pods no node could take; "
    "kube-scheduler's scheduler_preemption_attempts_total).",
)
PREEMPTION_VICTIMS = Counter(
    "schedcache_preemption_victims_total",
    "Pods this process deleted to make room for a higher-priority pod "
    "(kube-scheduler's scheduler_preemption_victims, summed).",
)
SYNC_EVENTS = Counter(
    "schedcache_sync_events_total",
    "Objects a feeder (schedcache sync) handed to the cache, by result: applied, "
    "dropped_repeated / dropped_stale (another feeder applied it, or something newer, first), "
    "invalid (malformed, skipped), rejected (the cache refused it).",
    ["cache", "resource", "result"],
)
SYNC_RELISTS = Counter(
    "schedcache_sync_relists_total",
    "Full lists of a resource: the first, and each after 410 Gone.",
    ["cache", "resource"],
)
SYNC_WATCH_RESTARTS = Counter(
    "schedcache_sync_watch_restarts_total",
    "Watches that ended (timeout, closed connection) and were resumed.",
    ["cache", "resource"],
)
SYNC_API_ERRORS = Counter(
    "schedcache_sync_api_errors_total",
    "Failed list or watch requests (the API server unreachable or answering an error).",
    ["cache", "resource"],
)
SYNC_APPLY_SECONDS = Histogram(
    "schedcache_sync_apply_seconds",
    "From a watch event's arrival to its command answered by Redis.",
    ["cache", "resource"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


_COMMAND_COUNTERS: dict[tuple[str, bool], Any] = {}


def count_command(command: str, applied: bool) -> None:
    """``schedcache_commands_total`` += 1 (the labelled child is looked up once per pair)."""
    counter = _COMMAND_COUNTERS.get((command, applied))
    if counter is None:
        counter = COMMANDS.labels(command, "applied" if applied else "rejected")
        _COMMAND_COUNTERS[(command, applied)] = counter
    counter.inc()


class StoreReads(Protocol):
    """What the collector reads of a Store (named here rather than imported: store.py counts
    its commands with this module)."""

    @property
    def name(self) -> str: ...
    @property
    def keys(self) -> Keys: ...
    @property
    def client(self) -> Client: ...


class HasStoreReads(Protocol):
    """A ``Cache``, or anything else with a ``store``."""

    @property
    def store(self) -> StoreReads: ...


class CacheCollector(Collector):
    """``schedcache_cache_size{cache,type}`` (kube-scheduler's ``scheduler_cache_size``:
    nodes include ghosts and placeholders), ``schedcache_stream_length{cache}`` and
    ``schedcache_pending_pods{cache,scheduler,queue}`` (the scheduling queue), read at scrape
    time."""

    def __init__(self, cache: HasStoreReads) -> None:
        self.store = cache.store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        keys = self.store.keys
        pipe = self.store.client.pipeline(transaction=False)
        pipe.scard(keys.nodes)
        pipe.scard(keys.pods)
        pipe.scard(keys.assumed)
        pipe.xlen(keys.events)
        nodes, pods, assumed, stream = pipe.execute()
        size = GaugeMetricFamily(
            "schedcache_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            labels=["cache", "type"],
        )
        for kind, value in (("nodes", nodes), ("pods", pods), ("assumed_pods", assumed)):
            size.add_metric([self.store.name, kind], value)
        yield size
        length = GaugeMetricFamily(
            "schedcache_stream_length", "Entries in the cache's event stream.", labels=["cache"]
        )
        length.add_metric([self.store.name], stream)
        yield length
        pending = GaugeMetricFamily(
            "schedcache_pending_pods",
            "Pods in the cache's scheduling queue, per scheduler name and queue (kube-scheduler's "
            "scheduler_pending_pods: active, backoff, unschedulable; and leased to a replica).",
            labels=["cache", "scheduler", "queue"],
        )
        names = {"parked": "unschedulable"}
        for scheduler, states in queue_lengths(self.store.client, keys).items():
            for state, count in states.items():
                pending.add_metric([self.store.name, scheduler, names.get(state, state)], count)
        yield pending


# Gangs (docs/gangs.md).
GANG_CLAIMS = Counter(
    "schedcache_gang_claims_total",
    "Gang claims (a pod group's members claimed all or nothing in one call), by result: "
    "placed, or refused (another replica took the room, or a member's rule broke).",
    ["result"],
)
GANG_WAITS = Counter(
    "schedcache_gang_waits_total",
    "Times a reference scheduler set a group's pod aside because fewer than minMember of the "
    "group's pods were pending (the group holds no room while it waits).",
)
GANG_TIMEOUTS = Counter(
    "schedcache_gang_timeouts_total",
    "Pod groups whose wait passed scheduleTimeoutSeconds: their pods were reported "
    "unschedulable and went back to the queue.",
)
