"""schedcache: kube-scheduler's scheduler cache as an event-sourced cache on Redis.

Several scheduler replicas share one cache; every change is one Lua function that validates,
applies and appends an event to a stream, so the history can be replayed and audited.

The public names are imported on first use (``schedcache.Cache``, ``from schedcache import
Cache``): importing the package itself costs nothing, so the command line, whose console
scripts start in ``schedcache.cli``, answers a Ctrl-C from its first moment instead of
printing a traceback from the middle of an import (found in review).
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # (not typing's: importing typing costs the start-up window ~8 ms)
if TYPE_CHECKING:
    from typing import Any

    from schedcache import errors
    from schedcache.cache import Cache, Dump
    from schedcache.errors import BatchFailed
    from schedcache.model.manifests import load_k8s_file, objects_from_k8s
    from schedcache.model.nodeinfo import ImageStateSummary, NodeInfo
    from schedcache.model.selectors import parse_selector
    from schedcache.model.values import Node, Pod, Resource
    from schedcache.store.batch import BatchResult, CommandBatch
    from schedcache.store.connection import connect
    from schedcache.store.events import Event
    from schedcache.views.snapshot import Snapshot, SnapshotUpdate

# Each public name and the module it lives in.
_HOMES = {
    "BatchFailed": "schedcache.errors",
    "BatchResult": "schedcache.store.batch",
    "Cache": "schedcache.cache",
    "CommandBatch": "schedcache.store.batch",
    "Dump": "schedcache.cache",
    "Event": "schedcache.store.events",
    "ImageStateSummary": "schedcache.model.nodeinfo",
    "Node": "schedcache.model.values",
    "NodeInfo": "schedcache.model.nodeinfo",
    "Pod": "schedcache.model.values",
    "Resource": "schedcache.model.values",
    "Snapshot": "schedcache.views.snapshot",
    "SnapshotUpdate": "schedcache.views.snapshot",
    "connect": "schedcache.store.connection",
    "load_k8s_file": "schedcache.model.manifests",
    "objects_from_k8s": "schedcache.model.manifests",
    "parse_selector": "schedcache.model.selectors",
}

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


# The subpackages, which `import schedcache` used to import with the public names (found in
# review: `schedcache.store.connection.EMBEDDED` after a bare `import schedcache` failed).
_SUBPACKAGES = frozenset({"aio", "cli", "extender", "feed", "history", "model", "ops", "scheduler"})
_SUBPACKAGES |= {"sim", "store", "views"}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept here); a subpackage
    with the modules the public names come from, as an eager import gave them."""
    if name == "errors":
        value: Any = import_module("schedcache.errors")
    elif name in _HOMES:
        value = getattr(import_module(_HOMES[name]), name)
    elif name in _SUBPACKAGES:
        for home in sorted(set(_HOMES.values())):
            import_module(home)
        value = import_module(f"schedcache.{name}")
    else:
        raise AttributeError(f"module 'schedcache' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's own (``__name__``...), not this file's helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
