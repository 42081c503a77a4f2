"""schedcache: kube-scheduler's scheduler cache as an event-sourced cache on Redis.

Several scheduler replicas share one cache; every change is one Lua function that validates,
applies and appends an event to a stream, so the history can be replayed and audited.
"""

from schedcache import errors
from schedcache.batch import BatchFailed, BatchResult, CommandBatch
from schedcache.cache import Cache, Dump
from schedcache.connection import connect
from schedcache.events import Event
from schedcache.models import Node, Pod, Resource, load_k8s_file, objects_from_k8s
from schedcache.nodeinfo import ImageStateSummary, NodeInfo
from schedcache.selectors import parse_selector
from schedcache.snapshot import Snapshot, SnapshotUpdate

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
