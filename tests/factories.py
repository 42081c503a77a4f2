"""Builders of v1 manifests for tests, shaped like upstream's ``makeBasePod`` helpers.

Tests go through ``Pod.from_k8s`` / ``Node.from_k8s`` so they exercise the same path as users.
"""

from __future__ import annotations

from typing import Any

import redis

from schedcache import Node, Pod

UPSTREAM_NAMESPACE = "node_info_cache_test"


def pod_manifest(
    name: str,
    node: str = "node",
    cpu: str = "",
    mem: str = "",
    *,
    extended: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    uid: str | None = None,
    namespace: str = UPSTREAM_NAMESPACE,
    labels: dict[str, str] | None = None,
    ephemeral: str = "",
    conditions: list[dict[str, str]] | None = None,
    pvcs: list[str] | None = None,
    affinity: dict[str, Any] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """A pod with one container; like upstream, cpu and memory are set only if cpu is given."""
    requests: dict[str, str] = {}
    if cpu:
        requests.update(cpu=cpu, memory=mem)
    if ephemeral:
        requests["ephemeral-storage"] = ephemeral
    requests.update(extended or {})
    container: dict[str, Any] = {"name": "container", "image": "pause"}
    if requests:
        container["resources"] = {"requests": requests}
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    if pvcs:
        spec["volumes"] = [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}}
            for i, claim in enumerate(pvcs)
        ]
    if affinity:
        spec["affinity"] = affinity
    if priority is not None:
        spec["priority"] = priority
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or name},
        "spec": spec,
    }
    if labels:
        manifest["metadata"]["labels"] = labels
    if conditions:
        manifest["status"] = {"conditions": conditions}
    return manifest


def make_pod(name: str, node: str = "node", cpu: str = "", mem: str = "", **kwargs: Any) -> Pod:
    return Pod.from_k8s(pod_manifest(name, node, cpu, mem, **kwargs))


def port(host_port: int, ip: str = "", protocol: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containerPort": host_port, "hostPort": host_port}
    if ip:
        spec["hostIP"] = ip
    if protocol:
        spec["protocol"] = protocol
    return spec


def node_manifest(
    name: str,
    cpu: str = "1000m",
    mem: str = "100m",
    *,
    pods: str = "110",
    extended: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    images: list[tuple[list[str], int]] | None = None,
    ephemeral: str = "",
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": mem, "pods": pods, **(extended or {})}
    if ephemeral:
        allocatable["ephemeral-storage"] = ephemeral
    status: dict[str, Any] = {
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    if images:
        status["images"] = [{"names": names, "sizeBytes": size} for names, size in images]
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "status": status}


def make_node(name: str, cpu: str = "1000m", mem: str = "100m", **kwargs: Any) -> Node:
    return Node.from_k8s(node_manifest(name, cpu, mem, **kwargs))


def keyspace(client: redis.Redis, pattern: str) -> dict[bytes, Any]:
    """Every key matching ``pattern`` with its full value, to compare before and after."""
    state: dict[bytes, Any] = {}
    for key in client.scan_iter(match=pattern, count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            value: Any = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "set":
            value = client.smembers(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = client.xrange(key)
        else:
            value = client.dump(key)
        state[key] = (kind, value)
    return state


ZONE_LABEL = "topology.kubernetes.io/zone"


def zone_spread_pod(name: str, node: str, skew: int = 1, app: str = "s", **policy: str) -> Pod:
    """A pod labelled ``app`` spread by zone among pods of its ``app`` (DoNotSchedule;
    ``policy``: nodeAffinityPolicy / nodeTaintsPolicy)."""
    manifest = pod_manifest(name, node, labels={"app": app})
    manifest["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": skew,
            "topologyKey": ZONE_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
            **policy,
        }
    ]
    return Pod.from_k8s(manifest)


def caught_up(cache: Any) -> Any:
    """A fresh snapshot of ``cache``: what a replica decides on."""
    from schedcache import Snapshot

    snap = Snapshot()
    cache.update_snapshot(snap)
    return snap
