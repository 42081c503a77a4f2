"""The cache's pods and nodes as kubectl shows them: v1-shaped objects (for ``-o json|yaml``,
``jsonpath``, ``custom-columns``, ``--sort-by``) and the rows of ``kubectl get``.

The cache keeps what kube-scheduler reads, not whole objects: no container statuses, IPs,
images of a pod, kubelet versions. Those columns keep kubectl's names and print ``<none>`` or
``<unknown>`` as kubectl does for a missing value. READY counts the containers the feed last
saw ready, as kubectl does. AGE is the time since the object's creationTimestamp, kept in its
record by the feed (so it survives ``compact``); for an object that came without one (or a
record written before it was kept), since its first event still in the stream. What only the
cache knows (a pod's state: assumed or added, binding finished, deadline) is under
``status.schedcache``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schedcache.cache import Cache
from schedcache.cli.units import age, resource_list
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Node, Pod
from schedcache.store.events import Event

ROLE_PREFIX = "node-role.kubernetes.io/"
EVENTS_KEPT = 20  # describe lists an object's newest events, as kubectl lists recent ones
AGE_EVENTS = 200_000  # longest stream read for AGE (about 4 s); `worker compact` keeps it short
POD_COLUMNS = ("NAME", "READY", "STATUS", "RESTARTS", "AGE")
POD_WIDE = ("IP", "NODE", "NOMINATED NODE", "READINESS GATES")
NODE_COLUMNS = ("NAME", "STATUS", "ROLES", "AGE", "VERSION")
NODE_WIDE = ("INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME")


@dataclass
class CachedPod:
    """A pod as the cache holds it: the pod, and whether it is only assumed."""

    pod: Pod
    assumed: bool


@dataclass
class Seen:
    """When each pod (by uid) and node (by name) first appears in the stream, in ms."""

    pods: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    now_ms: int = 0
    # The newest events of each pod (by uid) and node, for describe's Events.
    pod_events: dict[str, deque[Event]] = field(default_factory=dict)
    node_events: dict[str, deque[Event]] = field(default_factory=dict)

    def pod_age(self, pod: Pod) -> str:
        """AGE of ``pod``: from its creationTimestamp, else from its first event."""
        return age(pod.created_ms or self.pods.get(pod.uid), self.now_ms)

    def node_age(self, name: str, node: Node | None) -> str:
        """AGE of node ``name``: from its creationTimestamp, else from its first event."""
        created = node.created_ms if node is not None else 0
        return age(created or self.nodes.get(name), self.now_ms)

    @classmethod
    def now(cls) -> Seen:
        """No stream read: enough when every object shown has its creationTimestamp."""
        return cls(now_ms=int(time.time() * 1000))

    @classmethod
    def read(cls, cache: Cache) -> Seen:
        """One pass over the stream; none over a stream longer than AGE_EVENTS (every AGE
        then ``<unknown>``, describe without Events): reading costs about 20 µs an event."""
        seen = cls.now()
        if cache.stream_length() > AGE_EVENTS:
            return seen
        for event in cache.events():
            ms = int(event.id.split("-", 1)[0])
            if event.uid:
                seen.pods.setdefault(event.uid, ms)
                seen.pod_events.setdefault(event.uid, deque(maxlen=EVENTS_KEPT)).append(event)
            elif event.node and event.type.startswith("Node"):
                seen.nodes.setdefault(event.node, ms)
            for node in {event.node, event.fields.get("from")} - {None}:
                seen.node_events.setdefault(str(node), deque(maxlen=EVENTS_KEPT)).append(event)
        return seen


def cached_pods(nodes: dict[str, NodeInfo], assumed: set[str]) -> list[CachedPod]:
    """Every pod on every node entry, with its assumed flag."""
    return [CachedPod(pod, pod.uid in assumed) for info in nodes.values() for pod in info.pods]


def pod_status(entry: CachedPod) -> str:
    """STATUS: ``Assumed`` for a claim not yet confirmed by the informer (kubectl would show
    the pod Pending), else the phase the informer saw."""
    if entry.assumed:
        return "Assumed"
    return entry.pod.phase or "<unknown>"


def pod_object(entry: CachedPod, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """A v1 Pod of what the cache keeps."""
    pod = entry.pod
    metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    if pod.created_ms:
        metadata["creationTimestamp"] = timestamp(pod.created_ms)
    if pod.labels:
        metadata["labels"] = dict(pod.labels)
    if pod.resource_version:
        metadata["resourceVersion"] = pod.resource_version
    spec: dict[str, Any] = {"nodeName": pod.node_name, "priority": pod.priority}
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [
            {k: v for k, v in zip(("key", "operator", "value", "effect"), t, strict=True) if v}
            for t in pod.tolerations
        ]
    spec["resources"] = {"requests": resource_list(pod.requests, pods=False)}
    status: dict[str, Any] = {}
    if pod.phase:
        status["phase"] = pod.phase
    if pod.conditions:
        status["conditions"] = [{"type": t, "status": s} for t, s in pod.conditions]
    status["schedcache"] = state or {"state": "assumed" if entry.assumed else "added"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def timestamp(ms: int) -> str:
    """RFC 3339 in UTC to the second, as the API server writes ``creationTimestamp``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(name: str, info: NodeInfo) -> dict[str, Any]:
    """A v1 Node of what the cache keeps (an entry without a node object: its name, and
    ``status.schedcache.entry`` Ghost or Placeholder)."""
    node = info.node
    metadata: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}
    if node is not None:
        if node.uid:
            metadata["uid"] = node.uid
        if node.created_ms:
            metadata["creationTimestamp"] = timestamp(node.created_ms)
        if node.labels:
            metadata["labels"] = dict(node.labels)
        if node.resource_version:
            metadata["resourceVersion"] = node.resource_version
        if node.taints:
            spec["taints"] = [
                {k: v for k, v in zip(("key", "value", "effect"), t, strict=True) if v}
                for t in node.taints
            ]
        if node.unschedulable:
            spec["unschedulable"] = True
        status["allocatable"] = resource_list(node.allocatable)
        if node.ready:
            status["conditions"] = [{"type": "Ready", "status": node.ready}]
    status["schedcache"] = {
        "entry": "Node"
        if node is not None
        else ("Ghost" if info.allocatable.milli_cpu else "Placeholder"),
        "pods": len(info.pods),
        "requested": resource_list(info.requested, pods=False),
        "generation": info.generation,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def as_list(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """kubectl's ``-o json`` of several objects (or none): a v1 List, its keys in kubectl's
    order (sorted, as Go writes a map)."""
    return {
        "apiVersion": "v1",
        "items": list(items),
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


def roles(node: Node | None) -> str:
    """ROLES: the ``node-role.kubernetes.io/<role>`` labels (``kubernetes.io/role`` too)."""
    if node is None:
        return "<none>"
    found = {key[len(ROLE_PREFIX) :] for key in node.labels if key.startswith(ROLE_PREFIX)}
    if node.labels.get("kubernetes.io/role"):
        found.add(node.labels["kubernetes.io/role"])
    return ",".join(sorted(r for r in found if r)) or "<none>"


def pod_row(entry: CachedPod, seen: Seen, wide: bool) -> list[str]:
    """``kubectl get pods`` columns. READY is ready containers of all, as the feed last saw
    them (``<unknown>`` for a record that does not say); RESTARTS and IP are not kept."""
    pod = entry.pod
    row = [
        pod.name,
        f"{pod.ready_containers}/{pod.containers}" if pod.containers else "<unknown>",
        pod_status(entry),
        "<unknown>",
        seen.pod_age(pod),
    ]
    if wide:
        row += ["<none>", pod.node_name or "<none>", "<none>", "<none>"]
    return row


def node_row(name: str, info: NodeInfo, status: str, seen: Seen, wide: bool) -> list[str]:
    """``kubectl get nodes`` columns; VERSION and the wide columns are not kept."""
    row = [name, status, roles(info.node), seen.node_age(name, info.node), "<unknown>"]
    if wide:
        row += ["<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]
    return row
