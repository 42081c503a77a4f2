"""Prometheus metrics of the library (served by the workers and ``schedcache metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
EXPIRED_PODS = Counter(
    "schedcache_expired_pods_total",
    "Assumed pods expired because their confirmation did not come before the deadline.",
    ["cache"],
)
