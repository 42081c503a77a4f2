"""Pods the cache cannot store in full, as ``sync`` and ``load`` both store them.

The API server accepts a pod up to etcd's 1.5 MiB; the cache reads back less (see
:mod:`schedcache.store.records`). A valid pod over that limit because of its labels is stored
without them and marked ``truncated``: left out, it would be invisible to fit and a claim could
overcommit its node. Its requests, ports, node and scheduling terms are kept (what fit and the
inter-pod rules read of it, docs/constraints.md); a selector cannot match it by label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from schedcache.errors import ValidationError
from schedcache.model.values import Pod
from schedcache.store.commands import Command


def truncated(pod: Pod) -> Pod:
    """``pod`` without its labels, marked truncated: what fit needs (requests, ports, node)
    is kept; a selector cannot match it by label (documented in docs/sync.md)."""
    return dataclasses.replace(pod, labels={}, truncated=True)


def stored_pod(pod: Pod, build: Callable[[Pod], Command]) -> tuple[Command, bool]:
    """``build(pod)`` and False; or, when the pod is too large for the cache because of its
    labels, ``build(truncated(pod))`` and True. Any other ValidationError is raised."""
    try:
        return build(pod), False
    except ValidationError as error:
        if not pod.labels or not (error.field == "" or error.field.startswith("metadata.labels")):
            raise
    return build(truncated(pod)), True
