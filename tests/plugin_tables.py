"""Builders for the plugin tables ported from kube-scheduler (its ``st.MakePod()`` and
``cache.NewSnapshot`` in small): pods from manifests (so the reader is exercised too), nodes
with labels, and one filter run over a whole snapshot."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from schedcache.model.nodeinfo import ImageStateSummary, NodeInfo
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.result import FilterResult
from schedcache.model.reading import resource_from_list
from schedcache.model.values import Node, Pod, Resource

_UIDS = itertools.count()

Term = tuple[str, str, str, list[str]]  # operator, label key, topology key, values


def term(op: str, key: str, topology: str, values: list[str] | None = None) -> Term:
    return (op, key, topology, values or [])


def _term(t: Term) -> dict[str, Any]:
    op, key, topology, values = t
    expression: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expression["values"] = values
    return {"labelSelector": {"matchExpressions": [expression]}, "topologyKey": topology}


def make_pod(
    name: str = "",
    namespace: str = "",
    labels: dict[str, str] | None = None,
    node: str = "",
    affinity: list[Term] | None = None,
    anti: list[Term] | None = None,
    raw_affinity: list[dict[str, Any]] | None = None,
    raw_anti: list[dict[str, Any]] | None = None,
    spread: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    uid: str = "",
    requests: list[dict[str, str]] | None = None,
    images: list[str] | None = None,
) -> Pod:
    containers: list[dict[str, Any]] = [
        {"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests or [])
    ] or [{"name": "c"}]
    for i, image in enumerate(images or []):
        if i >= len(containers):
            containers.append({"name": f"c{i}"})
        containers[i]["image"] = image
    spec: dict[str, Any] = {"containers": containers}
    if node:
        spec["nodeName"] = node
    section: dict[str, Any] = {}
    required = [_term(t) for t in affinity or []] + (raw_affinity or [])
    if required:
        section["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    required_anti = [_term(t) for t in anti or []] + (raw_anti or [])
    if required_anti:
        section["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": required_anti
        }
    if section:
        spec["affinity"] = section
    if spread:
        spec["topologySpreadConstraints"] = spread
    if node_selector:
        spec["nodeSelector"] = node_selector
    metadata: dict[str, Any] = {"name": name or "p", "uid": uid or f"uid-{next(_UIDS)}"}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    return Pod.from_k8s({"metadata": metadata, "spec": spec})


def make_node(
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: Resource | None = None,
    **kwargs: Any,
) -> Node:
    big = Resource(64000, 2**40, 0, 110)
    return Node(name, labels=dict(labels or {}), allocatable=allocatable or big, **kwargs)


def capacity(cpu: str, memory: str) -> Resource:
    """``st.MakeNode().Capacity({"cpu": ..., "memory": ...})``."""
    return resource_from_list({"cpu": cpu, "memory": memory}, obj="node", field="capacity")


def snapshot(pods: list[Pod], nodes: list[Node]) -> list[NodeInfo]:
    """``cache.NewSnapshot``: each node with the pods that name it, their requests summed, and
    the image states (size, number of nodes holding it)."""
    spread: dict[str, int] = {}
    for n in nodes:
        for image in {name for names, _ in n.images for name in names}:
            spread[image] = spread.get(image, 0) + 1
    infos = []
    for n in nodes:
        mine = [p for p in pods if p.node_name == n.name]
        requested, non_zero = Resource(), Resource()
        for p in mine:
            requested, non_zero = requested.add(p.requests), non_zero.add(p.non_zero_requests)
        images = {
            image: ImageStateSummary(size, spread[image])
            for names, size in n.images
            for image in names
        }
        infos.append(
            NodeInfo(n.name, n, mine, requested, non_zero, n.allocatable, image_states=images)
        )
    return infos


#: Upstream's Namespaces in its InterPodAffinity tables (filtering_test.go, scoring_test.go).
NAMESPACES = {
    "subteam1.team1": {"team": "team1"},
    "subteam2.team1": {"team": "team1"},
    "subteam1.team2": {"team": "team2"},
    "subteam2.team2": {"team": "team2"},
}


def statuses(
    plugin: Callable[[Cycle, NodeInfo], FilterResult | None],
    pod: Pod,
    infos: list[NodeInfo],
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> list[tuple[str, ...] | None]:
    """Per node, None (Success) or (code, reason) as upstream's framework.Status reads;
    ``namespaces``: the cluster's Namespaces' labels (upstream's tables' by default)."""
    cycle = Cycle(pod, infos, namespaces=NAMESPACES if namespaces is None else namespaces)
    out: list[tuple[str, ...] | None] = []
    for info in infos:
        result = plugin(cycle, info)
        if result is None:
            out.append(None)
        else:
            code = "UnschedulableAndUnresolvable" if result.unresolvable else "Unschedulable"
            out.append((code, *result.reasons))
    return out
