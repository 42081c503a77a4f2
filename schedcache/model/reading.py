"""Reading one v1 Pod or Node manifest (parsed JSON/YAML) under kube-scheduler's rules: the
requests as the scheduler computes them, host ports, affinity, tolerations, PVC claims, node
allocatable, images, taints. Every error is a :class:`~schedcache.errors.ValidationError`
naming the object and the dotted field path.

``Pod.from_k8s`` and ``Node.from_k8s`` (:mod:`schedcache.model.values`) call :func:`read_pod`
and :func:`read_node` with their own class, which builds the value: so this module needs only
the resource types below it, and values.py and this module do not import each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from typing import Any, TypeVar

from schedcache.errors import ValidationError
from schedcache.model.podterms import read_inter_pod_rules
from schedcache.model.quantity import MAX_QUANTITY, parse_quantity, past_int64, round_away
from schedcache.model.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    MAX_NODE_IMAGES,
    HostPort,
    NodeSelectorTerm,
    Requirement,
    Resource,
    Toleration,
    is_scalar_resource_name,
)

__all__ = ["read_node", "read_pod", "resource_from_list", "show", "type_name"]

P = TypeVar("P")
N = TypeVar("N")

_PROTOCOLS = ("TCP", "UDP", "SCTP")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NON_ZERO_DEFAULTS = {
    "cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    "memory": Fraction(DEFAULT_MEMORY_REQUEST),
}

INT64_MAX = 2**63 - 1  # Go's int64: resource amounts, image sizes (and Redis' HINCRBY)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # Go's int32: spec.priority
ResourceList = dict[str, Fraction]  # exact quantities, summed before rounding as in Go


# --------------------------------------------------------------------------------------------
# Resources


def resource_from_list(rl: Any, *, obj: str, field: str, allow_negative: bool = False) -> Resource:
    """A Kubernetes ResourceList (``{"cpu": "100m", ...}``) under scheduler rules; ``obj``
    and ``field`` name it in errors.

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
            cpu = name == "cpu"
            scaled, unit = (amount * 1000, "millicores") if cpu else (amount, "units")
            if not cpu and abs(amount) >= MAX_QUANTITY and past_int64(raw):
                # Capped as it is read (parse_quantity): the manifest's figure is lost, and
                # the cap itself passes for an amount (found in review: memory "1e30" read
                # as 9223372036854775807 bytes, a node's allocatable silently, a pod's request
                # refused by the cache as pushing an empty node past its bound; CPU's was
                # invalid, below).
                raise self.fail(
                    f"{path}.{name}",
                    f"{show(raw)} is more than {INT64_MAX} {unit}, over the int64 limit the "
                    "scheduler counts in",
                )
            if abs(scaled) > INT64_MAX:
                # A quantity past int64 is capped there as it is read (parse_quantity, as
                # ParseQuantity): its figure would be the cap's, not the manifest's (found in
                # review: "1e400" read as 9223372036854775807000 millicores).
                size = (
                    f"more than {INT64_MAX} {unit}"
                    if abs(amount) >= MAX_QUANTITY
                    else f"{round_away(scaled)} {unit}"
                )
                raise self.fail(
                    f"{path}.{name}",
                    f"{show(raw)} is {size}, over the int64 limit {INT64_MAX} the scheduler "
                    "counts in",
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
        raise reader.fail("kind", f"must be {json.dumps(kind)}, not {show(doc.get('kind'))}")
    return doc


def type_name(value: Any) -> str:
    """What a value is, in JSON's words where it has them (``null``), for messages."""
    return "null" if value is None else type(value).__name__


def show(value: Any) -> str:
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


def read_pod(obj: Any, make: Callable[..., P]) -> P:
    """``make(uid=..., name=..., ...)`` (``Pod``) from a v1 Pod manifest (parsed JSON/YAML),
    applying kube-scheduler's rules."""
    name, namespace = _name(obj)
    r = _Reader(f"pod {namespace}/{name}" if name else "pod <unnamed>")
    doc = _check_kind(obj, r, "Pod")
    meta = r.mapping(doc.get("metadata"), "metadata")
    name = r.string(meta.get("name"), "metadata.name", required=True)
    namespace = r.string(meta.get("namespace"), "metadata.namespace") or "default"
    uid = r.string(meta.get("uid"), "metadata.uid", required=True)
    spec = r.mapping(doc.get("spec"), "spec")
    status = r.mapping(doc.get("status"), "status")

    # The pod's summed requests, kept by the quantities' text (a Deployment's pods share them):
    # exact sums of fractions cost most of a pod's reading. A text read once without error
    # reads the same again, so a kept sum skips only checks the text passed already.
    key = _requests_key(spec)
    summed = _SUMS.get(key) if key is not None else None
    containers = [
        _read_container(r, c, f"spec.containers[{i}]", summed is None)
        for i, c in enumerate(r.seq(spec.get("containers"), "spec.containers"))
    ]
    inits = [
        _read_container(r, c, f"spec.initContainers[{i}]", summed is None)
        for i, c in enumerate(r.seq(spec.get("initContainers"), "spec.initContainers"))
    ]
    if summed is None:
        overhead = r.resource_list(spec.get("overhead"), "spec.overhead")
        regular = [c.requests for c in containers]
        init = [(c.requests, c.sidecar) for c in inits]
        requests = _to_resource(_pod_requests(regular, init, overhead))
        non_zero = _to_resource(_pod_requests(regular, init, overhead, _NON_ZERO_DEFAULTS))
        _check_totals(r, requests, "spec.containers")
        if key is not None:
            if len(_SUMS) >= MAX_SUMS_KEPT:
                _SUMS.clear()
            _SUMS[key] = (requests, non_zero)
    else:
        requests, non_zero = summed
        if requests.scalar_resources:  # (frozen, but its dict is each pod's own)
            requests = replace(requests, scalar_resources=dict(requests.scalar_resources))
    has_affinity, has_required_anti = _read_affinity(r, spec.get("affinity"))
    labels = r.labels(meta.get("labels"), "metadata.labels")
    rules = read_inter_pod_rules(r.obj, spec, labels)
    return make(
        uid=uid,
        name=name,
        namespace=namespace,
        node_name=r.string(spec.get("nodeName"), "spec.nodeName"),
        labels=labels,
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
        tolerations=_read_tolerations(r, spec.get("tolerations")),
        node_selector=r.labels(spec.get("nodeSelector"), "spec.nodeSelector"),
        required_node_affinity=_read_node_affinity(r, spec.get("affinity")),
        images=tuple(c.image for c in inits + containers if c.image),
        pod_affinity=rules.pod_affinity,
        pod_anti_affinity=rules.pod_anti_affinity,
        preferred_pod_affinity=rules.preferred_pod_affinity,
        preferred_pod_anti_affinity=rules.preferred_pod_anti_affinity,
        spread_constraints=rules.spread_constraints,
        preferred_node_affinity=_read_preferred_node_affinity(r, spec.get("affinity")),
        ready_containers=_read_ready_containers(r, status, {c.name for c in inits if c.sidecar}),
        containers=len(containers) + sum(c.sidecar for c in inits),
        created_ms=_read_created(r, meta),
        terminating=bool(meta.get("deletionTimestamp")),
        preempt_never=_read_preemption_policy(r, spec) == "Never",
        started_ms=_read_created(r, status, "startTime", "status.startTime"),
    )


#: Summed requests kept by their quantities' text (read_pod): dropped whole when full.
MAX_SUMS_KEPT = 4096
_SUMS: dict[tuple[Any, ...], tuple[Resource, Resource]] = {}


def _requests_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a pod's summed requests depend on, as hashable text: each container's requests
    and limits, each init container's and its restartPolicy, the overhead; None for anything
    but strings there (a quantity given as a number, a malformed field: read in full)."""
    key: list[Any] = []
    for field in ("containers", "initContainers"):
        items = spec.get(field)
        if items is None:
            key.append(None)
            continue
        if type(items) is not list:
            return None
        key.append(len(items))
        for c in items:
            if type(c) is not dict:
                return None
            resources = c.get("resources")
            if resources is None:
                resources = {}
            elif type(resources) is not dict:
                return None
            for part in ("requests", "limits"):
                amounts = _text_items(resources.get(part))
                if amounts is None:
                    return None
                key.append(amounts)
            if field == "initContainers":
                policy = c.get("restartPolicy")
                if policy is not None and type(policy) is not str:
                    return None
                key.append(policy)
    overhead = _text_items(spec.get("overhead"))
    if overhead is None:
        return None
    key.append(overhead)
    return tuple(key)


def _text_items(amounts: Any) -> tuple[str, ...] | None:
    """A resource list's names and quantities as one flat tuple; None unless all are text."""
    if amounts is None:
        return ()
    if type(amounts) is not dict:
        return None
    out: list[str] = []
    for name, quantity in amounts.items():
        if type(name) is not str or type(quantity) is not str:
            return None
        out += (name, quantity)
    return tuple(out)


def _read_preemption_policy(r: _Reader, spec: Mapping[str, Any]) -> str:
    """``spec.preemptionPolicy``: ``PreemptLowerPriority`` (the default) or ``Never``."""
    policy = r.string(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
    if policy not in ("", "PreemptLowerPriority", "Never"):
        raise r.fail(
            "spec.preemptionPolicy", f"{show(policy)} is not PreemptLowerPriority or Never"
        )
    return policy


_TOLERATION_OPERATORS = ("", "Exists", "Equal")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_NODE_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _read_tolerations(r: _Reader, value: Any) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(r.seq(value, "spec.tolerations")):
        path = f"spec.tolerations[{i}]"
        t = r.mapping(item, path)
        key = r.string(t.get("key"), f"{path}.key")
        operator = r.string(t.get("operator"), f"{path}.operator")
        if operator not in _TOLERATION_OPERATORS:
            raise r.fail(f"{path}.operator", f"{show(operator)} is not Exists or Equal")
        value_ = r.string(t.get("value"), f"{path}.value")
        if operator == "Exists" and value_:
            raise r.fail(f"{path}.value", "must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise r.fail(f"{path}.operator", "must be Exists when key is empty")
        effect = r.string(t.get("effect"), f"{path}.effect")
        if effect and effect not in _TAINT_EFFECTS:
            raise r.fail(f"{path}.effect", f"{show(effect)} is not one of {list(_TAINT_EFFECTS)}")
        if t.get("tolerationSeconds") is not None:
            r.integer(t.get("tolerationSeconds"), f"{path}.tolerationSeconds")
        out.append((key, operator or "Equal", value_, effect))
    return tuple(out)


def _read_node_affinity(r: _Reader, value: Any) -> tuple[NodeSelectorTerm, ...]:
    """The required node affinity's terms (ORed); none when the pod has no such affinity."""
    affinity = r.mapping(value, "spec.affinity")
    node_affinity = r.mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return ()
    selector = r.mapping(required, _NODE_AFFINITY)
    terms = r.seq(selector.get("nodeSelectorTerms"), f"{_NODE_AFFINITY}.nodeSelectorTerms")
    if not terms:  # the API refuses it; upstream's matcher then matches no node
        return (((), ()),)  # one empty term: matches nothing
    out = []
    for i, item in enumerate(terms):
        path = f"{_NODE_AFFINITY}.nodeSelectorTerms[{i}]"
        term = r.mapping(item, path)
        expressions = _read_requirements(
            r, term.get("matchExpressions"), f"{path}.matchExpressions"
        )
        fields = _read_requirements(r, term.get("matchFields"), f"{path}.matchFields")
        for j, (key, operator, values) in enumerate(fields):
            if key != "metadata.name" or operator not in ("In", "NotIn") or len(values) != 1:
                raise r.fail(
                    f"{path}.matchFields[{j}]",
                    "only metadata.name with In or NotIn and exactly one value is supported",
                )
        out.append((expressions, fields))
    return tuple(out)


_PREFERRED_NODE = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


def _read_preferred_node_affinity(
    r: _Reader, value: Any
) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    """NodeAffinity's score input: (weight, term) per preferred scheduling term."""
    affinity = r.mapping(value, "spec.affinity")
    node_affinity = r.mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    out = []
    for i, item in enumerate(
        r.seq(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), _PREFERRED_NODE)
    ):
        path = f"{_PREFERRED_NODE}[{i}]"
        weighted = r.mapping(item, path)
        weight = r.integer(weighted.get("weight"), f"{path}.weight")
        if not 1 <= weight <= 100:
            raise r.fail(f"{path}.weight", f"{weight} must be in [1, 100]")
        term = r.mapping(weighted.get("preference"), f"{path}.preference")
        expressions = _read_requirements(
            r, term.get("matchExpressions"), f"{path}.preference.matchExpressions"
        )
        fields = _read_requirements(r, term.get("matchFields"), f"{path}.preference.matchFields")
        out.append((weight, (expressions, fields)))
    return tuple(out)


def _read_requirements(r: _Reader, value: Any, path: str) -> tuple[Requirement, ...]:
    out = []
    for i, item in enumerate(r.seq(value, path)):
        where = f"{path}[{i}]"
        requirement = r.mapping(item, where)
        key = r.string(requirement.get("key"), f"{where}.key", required=True)
        operator = r.string(requirement.get("operator"), f"{where}.operator", required=True)
        if operator not in _SELECTOR_OPERATORS:
            known = list(_SELECTOR_OPERATORS)
            raise r.fail(f"{where}.operator", f"{show(operator)} is not one of {known}")
        values = tuple(
            r.string(v, f"{where}.values[{k}]")
            for k, v in enumerate(r.seq(requirement.get("values"), f"{where}.values"))
        )
        if operator in ("In", "NotIn") and not values:
            raise r.fail(f"{where}.values", f"must not be empty for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise r.fail(f"{where}.values", f"must be empty for {operator}")
        if operator in ("Gt", "Lt") and (len(values) != 1 or not _is_integer(values[0])):
            raise r.fail(f"{where}.values", f"must be one integer for {operator}")
        out.append((key, operator, values))
    return tuple(out)


def _is_integer(text: str) -> bool:
    return text.lstrip("-").isdigit() and len(text) <= 19


@dataclass
class _Container:
    requests: ResourceList  # after defaulting requests from limits
    host_ports: list[HostPort]
    sidecar: bool  # init container with restartPolicy: Always
    image: str = ""
    name: str = ""


def _read_container(r: _Reader, value: Any, path: str, resources_too: bool = True) -> _Container:
    """``resources_too`` False: its requests are summed already (read_pod's kept sums)."""
    c = r.mapping(value, path)
    limits: ResourceList = {}
    requests: ResourceList = {}
    if resources_too:
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
    image = r.string(c.get("image"), f"{path}.image")
    name = r.string(c.get("name"), f"{path}.name")
    return _Container({**limits, **requests}, ports, restart == "Always", image, name)


def _read_ready_containers(r: _Reader, status: Mapping[str, Any], sidecars: set[str]) -> int:
    """kubectl's READY count: containers ready and running, and sidecars (init containers
    with ``restartPolicy: Always``, named in ``sidecars``) ready."""
    ready = 0
    for field in ("containerStatuses", "initContainerStatuses"):
        for i, item in enumerate(r.seq(status.get(field), f"status.{field}")):
            path = f"status.{field}[{i}]"
            entry = r.mapping(item, path)
            if not r.boolean(entry.get("ready"), f"{path}.ready"):
                continue
            if field == "initContainerStatuses":
                ready += r.string(entry.get("name"), f"{path}.name") in sidecars
            elif r.mapping(entry.get("state"), f"{path}.state").get("running") is not None:
                ready += 1
    return ready


def _read_created(
    r: _Reader,
    meta: Mapping[str, Any],
    key: str = "creationTimestamp",
    path: str = "metadata.creationTimestamp",
) -> int:
    """``metadata.creationTimestamp`` (or another time: ``key`` at ``path``; RFC 3339, as the
    API server writes it; a YAML reader may have made it a datetime already) in ms since the
    epoch; 0 when absent."""
    value = meta.get(key)
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise r.fail(path, f"{show(value)} is not an RFC 3339 time") from None
    if not isinstance(value, datetime):
        raise r.fail(path, f"must be an RFC 3339 time string, found {type_name(value)}")
    if value.tzinfo is None:
        raise r.fail(path, f"{value.isoformat()} has no time zone (RFC 3339 needs one)")
    return int(value.timestamp() * 1000)


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


def read_node(obj: Any, make: Callable[..., N]) -> N:
    """``make(name=..., ...)`` (``Node``) from a v1 Node manifest; allocatable falls back to
    capacity when absent."""
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
    return make(
        name=r.string(meta.get("name"), "metadata.name", required=True),
        uid=r.string(meta.get("uid"), "metadata.uid"),
        labels=r.labels(meta.get("labels"), "metadata.labels"),
        allocatable=_to_resource(allocatable),
        images=_read_images(r, status.get("images")),
        taints=_read_taints(r, spec.get("taints")),
        unschedulable=r.boolean(spec.get("unschedulable"), "spec.unschedulable"),
        resource_version=r.string(meta.get("resourceVersion"), "metadata.resourceVersion"),
        ready=_read_ready(r, status.get("conditions")),
        created_ms=_read_created(r, meta),
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
    """The node's images, up to MAX_NODE_IMAGES names in all (the rest is left out)."""
    out = []
    taken = 0
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
        if names and taken >= MAX_NODE_IMAGES:
            break
        names = names[: MAX_NODE_IMAGES - taken]
        taken += len(names)
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
            raise r.fail(f"{path}.effect", f"{show(effect)} is not one of {list(_TAINT_EFFECTS)}")
        out.append((key, r.string(t.get("value"), f"{path}.value"), effect))
    return tuple(out)
