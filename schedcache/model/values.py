"""The model layer: immutable Pod, Node and Resource values, as the scheduler cache keeps them.

Only what kube-scheduler's cache keeps is held (requests computed the way the scheduler computes
them, host ports, affinity flags, PVC claims, node allocatable, images, taints), so the Redis
layer stores small msgpack-friendly dicts instead of whole manifests. Reading them from
Kubernetes manifests is :mod:`schedcache.model.reading`'s job (``from_k8s`` hands it the
class); resource amounts and term types live below both, in :mod:`schedcache.model.resources`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from schedcache.model.podterms import (
    PodAffinityTerm,
    SpreadConstraint,
    WeightedTerm,
    terms_from_list,
    terms_to_list,
    weighted_from_list,
    weighted_to_list,
)
from schedcache.model.reading import read_node, read_pod
from schedcache.model.resources import (
    MAX_NODE_IMAGES as MAX_NODE_IMAGES,  # re-exported: a node's limits, named from here too
)
from schedcache.model.resources import (
    MAX_NODE_RESOURCES as MAX_NODE_RESOURCES,
)
from schedcache.model.resources import (
    HostPort,
    NodeSelectorTerm,
    Requirement,
    Resource,
    Toleration,
)

__all__ = ["Node", "Pod", "Resource"]  # Resource: where most callers have it from

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"

_EMPTY: Mapping[str, Any] = {}


def _compact(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` without the empty ones (0, "", False, empty containers): ``from_dict``
    restores them as the defaults they are."""
    return {key: value for key, value in fields.items() if value}


# --------------------------------------------------------------------------------------------
# Pod


def _terms(stored: Any) -> tuple[NodeSelectorTerm, ...]:
    def part(requirements: Any) -> tuple[Requirement, ...]:
        return tuple((k, op, tuple(v)) for k, op, v in requirements)

    return tuple((part(expressions), part(fields)) for expressions, fields in stored)


@dataclass(frozen=True, slots=True)
class Pod:
    """What the scheduler cache keeps of a pod; keyed by UID as upstream does since 2018."""

    uid: str
    name: str
    namespace: str = "default"
    node_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    requests: Resource = field(default_factory=Resource)
    non_zero_requests: Resource = field(default_factory=Resource)  # milli_cpu and memory only
    host_ports: tuple[HostPort, ...] = ()
    has_affinity: bool = False
    has_required_anti_affinity: bool = False
    pvc_claims: tuple[str, ...] = ()
    priority: int = 0
    phase: str = ""
    resource_version: str = ""
    conditions: tuple[tuple[str, str], ...] = ()
    # What kube-scheduler's filters read: (key, operator, value, effect) per toleration; the
    # nodeSelector; the required node affinity's terms (ORed), each (matchExpressions,
    # matchFields) of (key, operator, values).
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    # Stored without its labels (more than the cache reads back): still counted on its node.
    truncated: bool = False
    # What the inter-pod plugins and the scores read (schedcache.model.podterms): containers'
    # images, required and preferred pod (anti-)affinity, topology spread, preferred node
    # affinity as (weight, term).
    images: tuple[str, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    # What kubectl's READY and AGE show: ready containers of all (sidecars included), as the
    # feed last saw them (0 of 0: not known, e.g. a record written before they were kept), and
    # metadata.creationTimestamp in ms since the epoch (0: not known).
    ready_containers: int = 0
    containers: int = 0
    created_ms: int = 0
    # metadata.deletionTimestamp is set: PodTopologySpread counts it no more (as upstream).
    terminating: bool = False
    # spec.preemptionPolicy is Never (DefaultPreemption leaves other pods alone for it), and
    # status.startTime in ms since the epoch (0: not started; preemption's tie-break).
    preempt_never: bool = False
    started_ms: int = 0

    @property
    def has_inter_pod_rules(self) -> bool:
        """Required rules that depend on other pods' places (a claim must re-check them)."""
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or any(c.when_unsatisfiable == "DoNotSchedule" for c in self.spread_constraints)
        )

    @property
    def key(self) -> str:
        """The cache key: the UID."""
        return self.uid

    @property
    def full_name(self) -> str:
        """``namespace/name`` for humans."""
        return f"{self.namespace}/{self.name}"

    def with_node(self, node_name: str) -> Pod:
        """A copy bound to ``node_name`` (what assume does to the scheduler's pod copy).
        Positional, as ``dataclasses.replace`` costs twice as much (a what-if makes one per
        placement)."""
        values = [getattr(self, name) for name in _POD_FIELDS]
        values[_NODE_NAME] = node_name
        return Pod(*values)

    @classmethod
    def from_k8s(cls, obj: Any) -> Pod:
        """Build from a v1 Pod manifest (parsed JSON/YAML), applying kube-scheduler's rules."""
        return read_pod(obj, cls)

    def to_dict(self) -> dict[str, Any]:
        """msgpack-friendly dict (str/int/bool/list/dict only); empty fields (0, "", False,
        empty containers) are left out, which keeps the copy stored per pod and per event
        small; :meth:`from_dict` restores them as the defaults they are. (Hot: once per pod
        command, so each field is tested rather than built and then dropped.) ``node_name``
        comes last: the same pod on other nodes (a claim's ranked candidates) differs from its
        msgpack only in the last bytes, so only those travel (store/commands.py)."""
        d: dict[str, Any] = {"uid": self.uid, "name": self.name, "namespace": self.namespace}
        if self.labels:
            d["labels"] = dict(self.labels)
        requests = self.requests.to_dict()
        if requests:
            d["requests"] = requests
        non_zero = self.non_zero_requests.to_dict()
        if non_zero:
            d["non_zero_requests"] = non_zero
        if self.host_ports:
            d["host_ports"] = [list(p) for p in self.host_ports]
        if self.has_affinity:
            d["has_affinity"] = self.has_affinity
        if self.has_required_anti_affinity:
            d["has_required_anti_affinity"] = self.has_required_anti_affinity
        if self.pvc_claims:
            d["pvc_claims"] = list(self.pvc_claims)
        if self.priority:
            d["priority"] = self.priority
        if self.phase:
            d["phase"] = self.phase
        if self.resource_version:
            d["resource_version"] = self.resource_version
        if self.conditions:
            d["conditions"] = [list(c) for c in self.conditions]
        if self.tolerations:
            d["tolerations"] = [list(t) for t in self.tolerations]
        if self.node_selector:
            d["node_selector"] = dict(self.node_selector)
        if self.required_node_affinity:
            d["node_affinity"] = [
                [[[k, op, list(v)] for k, op, v in part] for part in term]
                for term in self.required_node_affinity
            ]
        if self.truncated:
            d["truncated"] = True
        if self.images:
            d["images"] = list(self.images)
        if self.pod_affinity:
            d["pod_affinity"] = terms_to_list(self.pod_affinity)
        if self.pod_anti_affinity:
            d["pod_anti_affinity"] = terms_to_list(self.pod_anti_affinity)
        if self.preferred_pod_affinity:
            d["preferred_pod_affinity"] = weighted_to_list(self.preferred_pod_affinity)
        if self.preferred_pod_anti_affinity:
            d["preferred_pod_anti_affinity"] = weighted_to_list(self.preferred_pod_anti_affinity)
        if self.spread_constraints:
            d["spread"] = [c.to_list() for c in self.spread_constraints]
        if self.terminating:
            d["terminating"] = True
        if self.preferred_node_affinity:
            d["preferred_node_affinity"] = [
                [weight, [[[k, op, list(v)] for k, op, v in part] for part in term]]
                for weight, term in self.preferred_node_affinity
            ]
        if self.containers:
            d["containers"] = [self.ready_containers, self.containers]
        if self.created_ms:
            d["created"] = self.created_ms
        if self.preempt_never:
            d["preempt_never"] = True
        if self.started_ms:
            d["started"] = self.started_ms
        if self.node_name:
            d["node_name"] = self.node_name
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Pod:
        """Inverse of :meth:`to_dict` (lists become tuples again). Hot in snapshots: empty
        fields take the cheap path."""
        get = d.get
        ports = get("host_ports")
        conditions = get("conditions")
        tolerations = get("tolerations")
        affinity = get("node_affinity")
        images = get("images")
        required_affinity = get("pod_affinity")
        required_anti = get("pod_anti_affinity")
        preferred_affinity = get("preferred_pod_affinity")
        preferred_anti = get("preferred_pod_anti_affinity")
        spread = get("spread")
        preferred_node = get("preferred_node_affinity")
        ready, containers = get("containers") or (0, 0)
        return cls(
            d["uid"],
            d["name"],
            get("namespace", "default"),
            get("node_name", ""),
            dict(get("labels") or ()),
            Resource.from_dict(get("requests") or _EMPTY),
            Resource.from_dict(get("non_zero_requests") or _EMPTY),
            tuple((ip, proto, int(port)) for ip, proto, port in ports) if ports else (),
            bool(get("has_affinity", False)),
            bool(get("has_required_anti_affinity", False)),
            tuple(get("pvc_claims") or ()),
            int(get("priority", 0)),
            get("phase", ""),
            get("resource_version", ""),
            tuple((t, s) for t, s in conditions) if conditions else (),
            tuple((k, op, v, e) for k, op, v, e in tolerations) if tolerations else (),
            dict(get("node_selector") or ()),
            _terms(affinity) if affinity else (),
            bool(get("truncated", False)),
            tuple(images) if images else (),
            terms_from_list(required_affinity) if required_affinity else (),
            terms_from_list(required_anti) if required_anti else (),
            weighted_from_list(preferred_affinity) if preferred_affinity else (),
            weighted_from_list(preferred_anti) if preferred_anti else (),
            tuple(SpreadConstraint.from_list(c) for c in spread) if spread else (),
            tuple((int(w), _terms([t])[0]) for w, t in preferred_node) if preferred_node else (),
            int(ready),
            int(containers),
            int(get("created", 0)),
            bool(get("terminating", False)),
            bool(get("preempt_never", False)),
            int(get("started", 0)),
        )


# --------------------------------------------------------------------------------------------
# Node


@dataclass(frozen=True, slots=True)
class Node:
    """What the scheduler cache keeps of a node: allocatable, images, taints, zone labels."""

    name: str
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: Resource = field(default_factory=Resource)
    images: tuple[tuple[tuple[str, ...], int], ...] = ()  # (names, sizeBytes)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    unschedulable: bool = False
    resource_version: str = ""
    ready: str = ""  # status of the Ready condition ("True", "False", "Unknown"; "" if none)
    created_ms: int = 0  # metadata.creationTimestamp, ms since the epoch (0: not known)

    @property
    def zone_key(self) -> str:
        """``GetZoneKey``: region + ":\\x00:" + zone, beta labels first; "" if neither is set."""
        labels = self.labels
        # As upstream: a beta label that is present wins, even when empty.
        zone = labels[BETA_ZONE_LABEL] if BETA_ZONE_LABEL in labels else labels.get(ZONE_LABEL, "")
        region = (
            labels[BETA_REGION_LABEL]
            if BETA_REGION_LABEL in labels
            else labels.get(REGION_LABEL, "")
        )
        if not zone and not region:
            return ""
        return f"{region}:\x00:{zone}"

    @classmethod
    def from_k8s(cls, obj: Any) -> Node:
        """Build from a v1 Node manifest; allocatable falls back to capacity when absent."""
        return read_node(obj, cls)

    def to_dict(self) -> dict[str, Any]:
        """msgpack-friendly dict (str/int/bool/list/dict only); empty fields are left out."""
        return {
            "name": self.name,
            **_compact(
                {
                    "uid": self.uid,
                    "labels": dict(self.labels),
                    "allocatable": self.allocatable.to_dict(),
                    "images": [[list(names), size] for names, size in self.images],
                    "taints": [list(t) for t in self.taints],
                    "unschedulable": self.unschedulable,
                    "resource_version": self.resource_version,
                    "ready": self.ready,
                    "created": self.created_ms,
                }
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Node:
        """Inverse of :meth:`to_dict` (lists become tuples again)."""
        return cls(
            name=d["name"],
            uid=d.get("uid", ""),
            labels=dict(d.get("labels") or {}),
            allocatable=Resource.from_dict(d.get("allocatable") or {}),
            images=tuple((tuple(names), int(size)) for names, size in d.get("images", ())),
            taints=tuple((k, v, e) for k, v, e in d.get("taints", ())),
            unschedulable=bool(d.get("unschedulable", False)),
            resource_version=d.get("resource_version", ""),
            ready=d.get("ready", ""),
            created_ms=int(d.get("created", 0)),
        )


_POD_FIELDS = tuple(f.name for f in fields(Pod))
_NODE_NAME = _POD_FIELDS.index("node_name")
