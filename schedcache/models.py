"""The model layer: immutable Pod, Node and Resource values built from Kubernetes manifests.

Only what kube-scheduler's cache keeps is extracted (requests computed the way the scheduler
computes them, host ports, affinity flags, PVC claims, node allocatable, images, taints), so the
Redis layer stores small msgpack-friendly dicts instead of whole manifests. Every manifest error
is a :class:`~schedcache.errors.ValidationError` naming the object and the dotted field path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from schedcache.errors import ValidationError
from schedcache.quantity import parse_quantity, round_away
from schedcache.selectors import label_key_error

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "HostPort",
    "Node",
    "Pod",
    "Resource",
    "is_scalar_resource_name",
    "load_k8s_file",
    "objects_from_k8s",
]

#: Non-zero defaults for containers without a request (pkg/scheduler/util/non_zero.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"

_PROTOCOLS = ("TCP", "UDP", "SCTP")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NON_ZERO_DEFAULTS = {
    "cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    "memory": Fraction(DEFAULT_MEMORY_REQUEST),
}

HostPort = tuple[str, str, int]  # (ip, protocol, port)
INT64_MAX = 2**63 - 1  # Go's int64: resource amounts, image sizes (and Redis' HINCRBY)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # Go's int32: spec.priority
ResourceList = dict[str, Fraction]  # exact quantities, summed before rounding as in Go


def is_scalar_resource_name(name: str) -> bool:
    """kube-scheduler's ``IsScalarResourceName``: the names kept in ``scalar_resources``.

    Extended resources (domain-qualified, outside ``kubernetes.io/``), ``hugepages-*``,
    ``attachable-volumes-*`` and prefixed native resources (containing ``kubernetes.io/``).
    """
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    return label_key_error("requests." + name) is None


# --------------------------------------------------------------------------------------------
# Resource


_EMPTY: Mapping[str, Any] = {}


def _compact(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` without the empty ones (0, "", False, empty containers): ``from_dict``
    restores them as the defaults they are."""
    return {key: value for key, value in fields.items() if value}


@dataclass(frozen=True, slots=True)
class Resource:
    """Integer resource amounts as kube-scheduler's ``framework.Resource`` holds them.

    CPU in millicores, memory and ephemeral storage in bytes, rounded up from quantities.
    """

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar_resources: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (msgpack/JSON friendly); zero amounts are left out."""
        return _compact(
            {
                "milli_cpu": self.milli_cpu,
                "memory": self.memory,
                "ephemeral_storage": self.ephemeral_storage,
                "allowed_pod_number": self.allowed_pod_number,
                "scalar_resources": dict(sorted(self.scalar_resources.items())),
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Resource:
        """Inverse of :meth:`to_dict`; missing keys are 0. (Hot: a snapshot decodes two per
        pod, so plain positional construction.)"""
        get = d.get
        scalars = get("scalar_resources")
        return cls(
            int(get("milli_cpu", 0)),
            int(get("memory", 0)),
            int(get("ephemeral_storage", 0)),
            int(get("allowed_pod_number", 0)),
            {str(k): int(v) for k, v in scalars.items()} if scalars else {},
        )

    def add(self, other: Resource) -> Resource:
        """Field-wise sum (scalar resources merged)."""
        scalars = dict(self.scalar_resources)
        for name, amount in other.scalar_resources.items():
            scalars[name] = scalars.get(name, 0) + amount
        return Resource(
            self.milli_cpu + other.milli_cpu,
            self.memory + other.memory,
            self.ephemeral_storage + other.ephemeral_storage,
            self.allowed_pod_number + other.allowed_pod_number,
            scalars,
        )

    def sub(self, other: Resource) -> Resource:
        """Field-wise difference; scalar resources that become 0 are dropped."""
        scalars = dict(self.scalar_resources)
        for name, amount in other.scalar_resources.items():
            left = scalars.get(name, 0) - amount
            if left:
                scalars[name] = left
            else:
                scalars.pop(name, None)
        return Resource(
            self.milli_cpu - other.milli_cpu,
            self.memory - other.memory,
            self.ephemeral_storage - other.ephemeral_storage,
            self.allowed_pod_number - other.allowed_pod_number,
            scalars,
        )

    @classmethod
    def from_resource_list(
        cls, rl: Any, *, obj: str, field: str, allow_negative: bool = False
    ) -> Resource:
        """A Kubernetes ResourceList (``{"cpu": "100m", ...}``) under scheduler rules.

        Unqualified unknown names (e.g. ``random-invalid-extended-key``) are ignored.
        """
        return _to_resource(_Reader(obj).resource_list(rl, field, allow_negative=allow_negative))


def _to_resource(rl: Mapping[str, Fraction]) -> Resource:
    """Round a summed ResourceList the way ``Resource.Add`` does (MilliValue/Value, round up)."""
    values = {"cpu": 0, "memory": 0, "ephemeral-storage": 0, "pods": 0}
    scalars: dict[str, int] = {}
    for name, amount in rl.items():
        if name == "cpu":
            values[name] = round_away(amount * 1000)
        elif name in values:
            values[name] = round_away(amount)
        elif is_scalar_resource_name(name):
            scalars[name] = round_away(amount)
    return Resource(
        values["cpu"], values["memory"], values["ephemeral-storage"], values["pods"], scalars
    )


def _add_into(total: ResourceList, rl: Mapping[str, Fraction]) -> None:
    for name, amount in rl.items():
        total[name] = total.get(name, Fraction(0)) + amount


def _max_into(total: ResourceList, rl: Mapping[str, Fraction]) -> None:
    for name, amount in rl.items():
        if name not in total or amount > total[name]:
            total[name] = amount


def _pod_requests(
    containers: Iterable[ResourceList],
    init_containers: Iterable[tuple[ResourceList, bool]],
    overhead: ResourceList,
    defaults: Mapping[str, Fraction] | None = None,
) -> ResourceList:
    """``resourcehelper.PodRequests`` (v1.29+): containers + sidecars, max with init, + overhead.

    ``defaults`` fills keys a container does not request (the non-zero computation).
    """

    def effective(rl: ResourceList) -> ResourceList:
        return {**(defaults or {}), **rl}

    reqs: ResourceList = {}
    for rl in containers:
        _add_into(reqs, effective(rl))
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for rl, restartable in init_containers:
        own = effective(rl)
        if restartable:  # a sidecar keeps running: it adds to the pod's steady state
            _add_into(reqs, own)
            _add_into(sidecars, own)
            candidate = dict(sidecars)
        else:  # runs to completion alongside the sidecars started before it
            candidate = dict(own)
            _add_into(candidate, sidecars)
        _max_into(init_max, candidate)
    _max_into(reqs, init_max)
    _add_into(reqs, overhead)
    return reqs


# --------------------------------------------------------------------------------------------
# Manifest reading helpers


class _Reader:
    """Typed reads from a manifest with errors naming ``obj`` and the dotted field path."""

    def __init__(self, obj: str) -> None:
        self.obj = obj.encode(errors="backslashreplace").decode()  # printable even if not UTF-8

    def fail(self, path: str, reason: str) -> ValidationError:
        return ValidationError(self.obj, path, reason)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, "must be a mapping")
        return value

    def seq(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise self.fail(path, "must be a list")
        return list(value)

    def string(self, value: Any, path: str, *, required: bool = False) -> str:
        if value is None or (required and value == ""):
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(value, str):
            raise self.fail(path, "must be a string")
        return self.utf8(value, path)

    def utf8(self, text: str, path: str) -> str:
        """``text`` if it encodes as UTF-8 (a lone surrogate does not: JSON allows "\\ud800")."""
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError as error:
                raise self.fail(
                    path, f"is not valid UTF-8 (lone surrogate at position {error.start})"
                ) from None
        return text

    def integer(
        self, value: Any, path: str, low: int = -INT64_MAX - 1, high: int = INT64_MAX
    ) -> int:
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, "must be an integer")
        if not low <= value <= high:
            raise self.fail(path, f"{value} is outside {low}..{high}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(path, "must be a boolean")
        return value

    def labels(self, value: Any, path: str) -> dict[str, str]:
        out = {}
        for key, val in self.mapping(value, path).items():
            if not isinstance(key, str):
                raise self.fail(path, f"key {json.dumps(key, default=repr)} must be a string")
            self.utf8(key, path)
            out[key] = self.string(val, f"{path}.{key}") if val is not None else ""
        return out

    def resource_list(self, value: Any, path: str, *, allow_negative: bool = False) -> ResourceList:
        out: ResourceList = {}
        for name, raw in self.mapping(value, path).items():
            if not isinstance(name, str):
                raise self.fail(path, f"key {json.dumps(name, default=repr)} must be a string")
            self.utf8(name, path)
            amount = parse_quantity(raw, obj=self.obj, field=f"{path}.{name}")
            if amount < 0 and not allow_negative:
                raise self.fail(f"{path}.{name}", "must not be negative")
            scaled, unit = (amount * 1000, "millicores") if name == "cpu" else (amount, "units")
            if abs(scaled) > INT64_MAX:
                raise self.fail(
                    f"{path}.{name}",
                    f"{_show(raw)} is {round_away(scaled)} {unit}, over the int64 limit "
                    f"{INT64_MAX} the scheduler counts in",
                )
            out[name] = amount
        return out

    def port(self, value: Any, path: str) -> int:
        port = self.integer(value, path)
        if not 1 <= port <= 65535:
            raise self.fail(path, f"port {port} out of range 1-65535")
        return port


def _check_kind(doc: Any, reader: _Reader, kind: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise reader.fail("", "must be a mapping")
    if doc.get("kind") is not None and doc.get("kind") != kind:
        raise reader.fail("kind", f"must be {json.dumps(kind)}, not {_show(doc.get('kind'))}")
    return doc


def _show(value: Any) -> str:
    return json.dumps(value, default=repr)


def _name(doc: Any) -> tuple[str | None, str]:
    """Best-effort (name, namespace) for naming the object in errors."""
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        return None, "default"
    name, namespace = meta.get("name"), meta.get("namespace")
    return (
        name if isinstance(name, str) and name else None,
        namespace if isinstance(namespace, str) and namespace else "default",
    )


# --------------------------------------------------------------------------------------------
# Pod


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

    @property
    def key(self) -> str:
        """The cache key: the UID."""
        return self.uid

    @property
    def full_name(self) -> str:
        """``namespace/name`` for humans."""
        return f"{self.namespace}/{self.name}"

    def with_node(self, node_name: str) -> Pod:
        """A copy bound to ``node_name`` (what assume does to the scheduler's pod copy)."""
        return replace(self, node_name=node_name)

    @classmethod
    def from_k8s(cls, obj: Any) -> Pod:
        """Build from a v1 Pod manifest (parsed JSON/YAML), applying kube-scheduler's rules."""
        name, namespace = _name(obj)
        r = _Reader(f"pod {namespace}/{name}" if name else "pod <unnamed>")
        doc = _check_kind(obj, r, "Pod")
        meta = r.mapping(doc.get("metadata"), "metadata")
        name = r.string(meta.get("name"), "metadata.name", required=True)
        namespace = r.string(meta.get("namespace"), "metadata.namespace") or "default"
        uid = r.string(meta.get("uid"), "metadata.uid", required=True)
        spec = r.mapping(doc.get("spec"), "spec")
        status = r.mapping(doc.get("status"), "status")

        containers = [
            _read_container(r, c, f"spec.containers[{i}]")
            for i, c in enumerate(r.seq(spec.get("containers"), "spec.containers"))
        ]
        inits = [
            _read_container(r, c, f"spec.initContainers[{i}]")
            for i, c in enumerate(r.seq(spec.get("initContainers"), "spec.initContainers"))
        ]
        overhead = r.resource_list(spec.get("overhead"), "spec.overhead")
        regular = [c.requests for c in containers]
        init = [(c.requests, c.sidecar) for c in inits]
        requests = _to_resource(_pod_requests(regular, init, overhead))
        non_zero = _to_resource(_pod_requests(regular, init, overhead, _NON_ZERO_DEFAULTS))
        _check_totals(r, requests, "spec.containers")
        has_affinity, has_required_anti = _read_affinity(r, spec.get("affinity"))
        return cls(
            uid=uid,
            name=name,
            namespace=namespace,
            node_name=r.string(spec.get("nodeName"), "spec.nodeName"),
            labels=r.labels(meta.get("labels"), "metadata.labels"),
            requests=requests,
            non_zero_requests=Resource(milli_cpu=non_zero.milli_cpu, memory=non_zero.memory),
            host_ports=tuple(port for c in containers for port in c.host_ports),
            has_affinity=has_affinity,
            has_required_anti_affinity=has_required_anti,
            pvc_claims=_read_claims(r, spec.get("volumes"), namespace),
            priority=r.integer(spec.get("priority"), "spec.priority", INT32_MIN, INT32_MAX),
            phase=r.string(status.get("phase"), "status.phase"),
            resource_version=r.string(meta.get("resourceVersion"), "metadata.resourceVersion"),
            conditions=_read_conditions(r, status.get("conditions")),
        )

    def to_dict(self) -> dict[str, Any]:
        """msgpack-friendly dict (str/int/bool/list/dict only); empty fields are left out,
        which keeps the copy stored per pod and per event small."""
        return {
            "uid": self.uid,
            "name": self.name,
            "namespace": self.namespace,
            **_compact(
                {
                    "node_name": self.node_name,
                    "labels": dict(self.labels),
                    "requests": self.requests.to_dict(),
                    "non_zero_requests": self.non_zero_requests.to_dict(),
                    "host_ports": [list(p) for p in self.host_ports],
                    "has_affinity": self.has_affinity,
                    "has_required_anti_affinity": self.has_required_anti_affinity,
                    "pvc_claims": list(self.pvc_claims),
                    "priority": self.priority,
                    "phase": self.phase,
                    "resource_version": self.resource_version,
                    "conditions": [list(c) for c in self.conditions],
                }
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Pod:
        """Inverse of :meth:`to_dict` (lists become tuples again). Hot in snapshots: empty
        fields take the cheap path."""
        get = d.get
        ports = get("host_ports")
        conditions = get("conditions")
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
        )


@dataclass
class _Container:
    requests: ResourceList  # after defaulting requests from limits
    host_ports: list[HostPort]
    sidecar: bool  # init container with restartPolicy: Always


def _read_container(r: _Reader, value: Any, path: str) -> _Container:
    c = r.mapping(value, path)
    resources = r.mapping(c.get("resources"), f"{path}.resources")
    limits = r.resource_list(resources.get("limits"), f"{path}.resources.limits")
    requests = r.resource_list(resources.get("requests"), f"{path}.resources.requests")
    ports = []
    for i, p in enumerate(r.seq(c.get("ports"), f"{path}.ports")):
        p = r.mapping(p, f"{path}.ports[{i}]")
        if p.get("containerPort") is not None:
            r.port(p.get("containerPort"), f"{path}.ports[{i}].containerPort")
        ip = r.string(p.get("hostIP"), f"{path}.ports[{i}].hostIP") or "0.0.0.0"
        protocol = r.string(p.get("protocol"), f"{path}.ports[{i}].protocol") or "TCP"
        if protocol not in _PROTOCOLS:
            raise r.fail(f"{path}.ports[{i}].protocol", 'must be one of "TCP", "UDP", "SCTP"')
        if r.integer(p.get("hostPort"), f"{path}.ports[{i}].hostPort") != 0:
            ports.append((ip, protocol, r.port(p.get("hostPort"), f"{path}.ports[{i}].hostPort")))
    restart = r.string(c.get("restartPolicy"), f"{path}.restartPolicy")
    # API defaulting: a request missing for a key that has a limit defaults to the limit.
    return _Container({**limits, **requests}, ports, restart == "Always")


def _check_totals(r: _Reader, total: Resource, path: str) -> None:
    """The pod's summed requests (containers + sidecars, init max, overhead) fit int64 each."""
    amounts = {
        "cpu": total.milli_cpu,
        "memory": total.memory,
        "ephemeral-storage": total.ephemeral_storage,
        **total.scalar_resources,
    }
    for name, amount in amounts.items():
        if abs(amount) > INT64_MAX:
            raise r.fail(path, f"the pod's total {name} request {amount} is over int64")


def _read_affinity(r: _Reader, value: Any) -> tuple[bool, bool]:
    """(has_affinity, has_required_anti_affinity) as NodeInfo.AddPod classifies pods."""
    affinity = r.mapping(value, "spec.affinity")
    pod_affinity = affinity.get("podAffinity")
    anti = affinity.get("podAntiAffinity")
    r.mapping(pod_affinity, "spec.affinity.podAffinity")
    anti_map = r.mapping(anti, "spec.affinity.podAntiAffinity")
    required = r.seq(
        anti_map.get("requiredDuringSchedulingIgnoredDuringExecution"),
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    return pod_affinity is not None or anti is not None, bool(required)


def _read_claims(r: _Reader, value: Any, namespace: str) -> tuple[str, ...]:
    claims = []
    for i, v in enumerate(r.seq(value, "spec.volumes")):
        path = f"spec.volumes[{i}]"
        pvc = r.mapping(v, path).get("persistentVolumeClaim")
        if pvc is not None:
            pvc = r.mapping(pvc, f"{path}.persistentVolumeClaim")
            claim = r.string(
                pvc.get("claimName"), f"{path}.persistentVolumeClaim.claimName", required=True
            )
            claims.append(f"{namespace}/{claim}")
    return tuple(claims)


def _read_conditions(r: _Reader, value: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for i, c in enumerate(r.seq(value, "status.conditions")):
        c = r.mapping(c, f"status.conditions[{i}]")
        kind = r.string(c.get("type"), f"status.conditions[{i}].type", required=True)
        out.append((kind, r.string(c.get("status"), f"status.conditions[{i}].status")))
    return tuple(out)


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
        name, _ = _name(obj)
        r = _Reader(f"node {name}" if name else "node <unnamed>")
        doc = _check_kind(obj, r, "Node")
        meta = r.mapping(doc.get("metadata"), "metadata")
        spec = r.mapping(doc.get("spec"), "spec")
        status = r.mapping(doc.get("status"), "status")
        if status.get("allocatable") is not None:
            allocatable = r.resource_list(status["allocatable"], "status.allocatable")
        else:
            allocatable = r.resource_list(status.get("capacity"), "status.capacity")
        return cls(
            name=r.string(meta.get("name"), "metadata.name", required=True),
            uid=r.string(meta.get("uid"), "metadata.uid"),
            labels=r.labels(meta.get("labels"), "metadata.labels"),
            allocatable=_to_resource(allocatable),
            images=_read_images(r, status.get("images")),
            taints=_read_taints(r, spec.get("taints")),
            unschedulable=r.boolean(spec.get("unschedulable"), "spec.unschedulable"),
            resource_version=r.string(meta.get("resourceVersion"), "metadata.resourceVersion"),
            ready=_read_ready(r, status.get("conditions")),
        )

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
        )


def _read_ready(r: _Reader, value: Any) -> str:
    """The status of the node's ``Ready`` condition (what kubectl's STATUS shows), "" if none."""
    for i, condition in enumerate(r.seq(value, "status.conditions")):
        path = f"status.conditions[{i}]"
        condition = r.mapping(condition, path)
        if r.string(condition.get("type"), f"{path}.type") == "Ready":
            return r.string(condition.get("status"), f"{path}.status")
    return ""


def _read_images(r: _Reader, value: Any) -> tuple[tuple[tuple[str, ...], int], ...]:
    out = []
    for i, img in enumerate(r.seq(value, "status.images")):
        path = f"status.images[{i}]"
        img = r.mapping(img, path)
        names = tuple(
            r.string(n, f"{path}.names[{j}]")
            for j, n in enumerate(r.seq(img.get("names"), f"{path}.names"))
        )
        size = r.integer(img.get("sizeBytes"), f"{path}.sizeBytes", high=INT64_MAX)
        if size < 0:
            raise r.fail(f"{path}.sizeBytes", "must not be negative")
        out.append((names, size))
    return tuple(out)


def _read_taints(r: _Reader, value: Any) -> tuple[tuple[str, str, str], ...]:
    out = []
    for i, t in enumerate(r.seq(value, "spec.taints")):
        path = f"spec.taints[{i}]"
        t = r.mapping(t, path)
        key = r.string(t.get("key"), f"{path}.key", required=True)
        effect = r.string(t.get("effect"), f"{path}.effect", required=True)
        if effect not in _TAINT_EFFECTS:
            raise r.fail(f"{path}.effect", f"{_show(effect)} is not one of {list(_TAINT_EFFECTS)}")
        out.append((key, r.string(t.get("value"), f"{path}.value"), effect))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Documents

_BUILDERS = {"Pod": Pod.from_k8s, "Node": Node.from_k8s}
_LIST_KINDS = {"List": None, "PodList": "Pod", "NodeList": "Node"}


def objects_from_k8s(doc: Any) -> list[Pod | Node]:
    """Pods and nodes from one Pod/Node manifest or a List/PodList/NodeList (``kubectl -o json``).

    Errors inside a list keep the item's object name and prefix the field with ``items[i].``.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError("object", "", "must be a mapping")
    kind = doc.get("kind")
    if kind in _BUILDERS:
        return [_BUILDERS[kind](doc)]
    if kind not in _LIST_KINDS:
        if kind is None:
            raise ValidationError("object", "kind", "is required")
        raise ValidationError("object", "kind", f"unsupported kind {_show(kind)}")
    implied = _LIST_KINDS[kind]
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list | tuple):
        raise ValidationError(kind, "items", "must be a list")
    out: list[Pod | Node] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValidationError(kind, f"items[{i}]", "must be a mapping")
        item_kind = item.get("kind") or implied
        if item_kind is None:
            raise ValidationError(kind, f"items[{i}].kind", "is required")
        if item_kind not in _BUILDERS or (implied and item_kind != implied):
            raise ValidationError(kind, f"items[{i}].kind", f"unsupported kind {_show(item_kind)}")
        try:
            out.append(_BUILDERS[item_kind](item))
        except ValidationError as exc:
            where = f"items[{i}].{exc.field}" if exc.field else f"items[{i}]"
            raise ValidationError(exc.obj, where, exc.reason) from exc
    return out


def load_k8s_file(path_or_text: str | os.PathLike[str]) -> list[Pod | Node]:
    """Parse a JSON or (multi-document) YAML file, or such text, into pods and nodes.

    A ``str`` is read as a path when it is a single line without ``{``, ``[`` or ``:``.
    """
    if isinstance(path_or_text, os.PathLike) or not any(ch in path_or_text for ch in "\n{[:"):
        source = os.fspath(path_or_text)
        text = Path(source).read_text(encoding="utf-8")
    else:
        source, text = "<text>", path_or_text
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ValidationError(source, "", f"not valid JSON or YAML: {exc}") from exc
    return [o for doc in docs if doc is not None for o in objects_from_k8s(doc)]
