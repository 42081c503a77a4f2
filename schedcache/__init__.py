"""schedcache: kube-scheduler's scheduler cache as an event-sourced cache on Redis.

Several scheduler replicas share one cache; every change is one Lua function that validates,
applies and appends an event to a stream, so the history can be replayed and audited.
"""

from __future__ import annotations

from typing import Any

from schedcache import errors
from schedcache.cache import Cache, Dump
from schedcache.errors import BatchFailed
from schedcache.model.nodeinfo import ImageStateSummary, NodeInfo
from schedcache.model.selectors import parse_selector
from schedcache.model.values import Node, Pod, Resource
from schedcache.store.batch import BatchResult, CommandBatch
from schedcache.store.connection import connect
from schedcache.store.events import Event
from schedcache.views.snapshot import Snapshot, SnapshotUpdate

__all__ = [
    "BatchFailed",
    "BatchResult",
    "Cache",
    "CommandBatch",
    "Dump",
    "Event",
    "ImageStateSummary",
    "Node",
    "NodeInfo",
    "Pod",
    "Resource",
    "Snapshot",
    "SnapshotUpdate",
    "connect",
    "errors",
    "load_k8s_file",
    "objects_from_k8s",
    "parse_selector",
]


def __getattr__(name: str) -> Any:
    """The manifest readers, imported on first use: the command line's start-up does not pay
    for them (a plain ``get`` never reads a manifest)."""
    if name in ("load_k8s_file", "objects_from_k8s"):
        from schedcache.model import manifests

        return getattr(manifests, name)
    raise AttributeError(f"module 'schedcache' has no attribute {name!r}")
