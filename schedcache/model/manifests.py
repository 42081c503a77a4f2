"""Reading Kubernetes manifests: kubectl's JSON/YAML text into documents, and pod and node
manifests into :class:`~schedcache.model.values.Pod` and
:class:`~schedcache.model.values.Node` values.

One reader serves every entry point (``schedcache load``, :func:`load_k8s_file`,
``Pod.from_k8s``), so the same limits and the same errors apply wherever a manifest comes in.

Only what kube-scheduler's cache keeps is extracted (requests computed the way the scheduler
computes them, host ports, affinity flags, PVC claims, node allocatable, images, taints), so the
Redis layer stores small msgpack-friendly dicts instead of whole manifests. Every manifest error
is a :class:`~schedcache.errors.ValidationError` naming the object and the dotted field path.

The document reader is bounded: YAML goes through libyaml when PyYAML has it, documents nested
deeper than :data:`MAX_DEPTH` or whose aliases would expand past :data:`MAX_ALIAS_NODES` extra
nodes (a "billion laughs" file) are refused before anything is built from them.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from schedcache.errors import ValidationError
from schedcache.model.podterms import read_inter_pod_rules
from schedcache.model.quantity import parse_quantity, round_away
from schedcache.model.values import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    MAX_NODE_IMAGES,
    HostPort,
    Node,
    NodeSelectorTerm,
    Pod,
    Requirement,
    Resource,
    Toleration,
    is_scalar_resource_name,
)

__all__ = [
    "LIST_KINDS",
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "YAML_LOADER",
    "Entry",
    "decode_input",
    "entries",
    "load_k8s_file",
    "objects_from_k8s",
    "parse_documents",
    "read_node",
    "read_pod",
    "resource_from_list",
    "subject",
    "type_name",
]

# The kinds of kubectl's lists, and the kind each implies for items that leave it out.
LIST_KINDS: dict[str, str | None] = {"List": None, "PodList": "Pod", "NodeList": "Node"}
# Nesting of any document: Kubernetes objects (managedFields included) stay under 30 levels.
MAX_DEPTH = 100
# Nodes that YAML aliases may add to a document beyond its own (an anchor used twice adds its
# size once more): plenty for hand-written anchors, far below an exponential alias bomb.
MAX_ALIAS_NODES = 100_000
# libyaml's parser when PyYAML was built with it (about 3x faster), else the pure-Python one.
YAML_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE: it starts with the same bytes
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_PROTOCOLS = ("TCP", "UDP", "SCTP")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NON_ZERO_DEFAULTS = {
    "cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    "memory": Fraction(DEFAULT_MEMORY_REQUEST),
}

INT64_MAX = 2**63 - 1  # Go's int64: resource amounts, image sizes (and Redis' HINCRBY)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # Go's int32: spec.priority
ResourceList = dict[str, Fraction]  # exact quantities, summed before rounding as in Go


@dataclass(frozen=True)
class Entry:
    """One object of the input: where it was, the watch event type (LISTED outside watches),
    and ``problem`` when the input around it is already wrong."""

    position: str
    event: str
    object: Any
    problem: str = ""


# --------------------------------------------------------------------------------------------
# Text and documents


def decode_input(data: bytes, source: str = "input") -> str:
    """The text of a file: UTF-8, or UTF-16/32 with a byte order mark; anything else (a
    binary file) is a :class:`ValidationError` naming ``source`` and the offset of the first
    bad byte."""
    encoding = "utf-8"
    for bom, name in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom) :], name
            break
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        raise ValidationError(
            source,
            "",
            f"not {encoding.upper()} text (byte 0x{data[error.start]:02x} at offset "
            f"{error.start}); give kubectl's JSON or YAML output",
        ) from None
    if "\x00" in text:  # valid UTF-8, but neither JSON nor YAML can hold a raw NUL
        raise ValidationError(
            source, "", "NUL bytes: binary, or UTF-16/32 without a BOM (byte order mark)"
        )
    return text


def parse_documents(
    text: str | bytes, *, source: str = "input", require_objects: bool = True
) -> list[Any]:
    """Every top-level value: a JSON stream (concatenated values), else YAML documents.

    Errors name ``source``. With ``require_objects``, YAML whose documents are not all mappings
    is refused as a whole: any sentence parses as a YAML string, so it is not a Kubernetes file
    with one bad object. Without it the caller judges each document (and names the bad one).
    """
    if isinstance(text, bytes):
        text = decode_input(text, source)
    values = _json_values(text, source)
    if values is None:
        values = _yaml_documents(text, source)
        if require_objects and not all(isinstance(doc, Mapping) for doc in values):
            raise ValidationError(source, "", "expected Kubernetes objects, lists or watch events")
    for number, value in enumerate(values):
        _check_depth(value, f"document {number}", source)
    return values


def _json_values(text: str, source: str) -> list[Any] | None:
    """The values of a JSON stream, or None when ``text`` does not start as JSON."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    index = 0
    try:
        while True:
            while index < len(text) and text[index].isspace():
                index += 1
            if index == len(text):
                return values
            value, index = decoder.raw_decode(text, index)
            values.append(value)
    except json.JSONDecodeError as error:
        if values:  # JSON that broke off: not YAML either
            raise ValidationError(source, f"offset {index}", f"invalid JSON: {error.msg}") from None
        return None
    except RecursionError:
        raise _too_deep(f"document {len(values)}", source) from None


def _yaml_documents(text: str, source: str) -> list[Any]:
    """The YAML documents of ``text`` but the empty ones, checked for depth and aliases first."""
    _check_yaml_events(text, source)
    loader = YAML_LOADER(text)  # a SafeLoader: plain YAML types only, never Python objects
    try:
        documents = []
        while loader.check_data():
            document = loader.get_data()
            if document is not None:
                documents.append(document)
        return documents
    except yaml.YAMLError as error:
        raise _not_json_or_yaml(source, error) from None
    except RecursionError:  # pragma: no cover - _check_yaml_events bounds the depth first
        raise _too_deep("document", source) from None
    finally:
        loader.dispose()


def _check_yaml_events(text: str, source: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH or whose aliases would expand past
    MAX_ALIAS_NODES, from the parser's events alone: nothing recursive (libyaml's composer is,
    and a deep enough document overflows the C stack) and nothing expanded runs before."""
    depth = 0
    sizes: list[int] = []  # expanded nodes of each open collection
    anchors: dict[str, int] = {}  # expanded size of each anchored node
    opened: list[str | None] = []  # the anchor of each open collection
    own = expanded = 0
    try:
        for event in yaml.parse(text, Loader=YAML_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep("document", source)
                sizes.append(1)
                opened.append(event.anchor)
                own += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                size, anchor = sizes.pop(), opened.pop()
                if anchor is not None:
                    anchors[anchor] = size
                if sizes:
                    sizes[-1] += size
                else:
                    expanded += size
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                if isinstance(event, yaml.AliasEvent):
                    size = anchors.get(event.anchor or "", 1)
                else:
                    size, own = 1, own + 1
                    if event.anchor is not None:
                        anchors[event.anchor] = 1
                if sizes:
                    sizes[-1] += size
                else:
                    expanded += size
                if (sum(sizes) if sizes else 0) + expanded - own > MAX_ALIAS_NODES:
                    raise ValidationError(
                        source,
                        "",
                        f"YAML aliases expand to over {MAX_ALIAS_NODES:,} more nodes than the "
                        "document has; refusing it (expand the aliases, or split the file)",
                    )
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):  # libyaml >= 0.2.6 stops at 1,000 levels itself
            raise _too_deep("document", source) from None
        raise _not_json_or_yaml(source, error) from None


def _check_depth(value: Any, where: str, source: str) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where, source)
        if isinstance(item, Mapping):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _too_deep(where: str, source: str) -> ValidationError:
    return ValidationError(source, where, f"nested deeper than {MAX_DEPTH} levels")


def _not_json_or_yaml(source: str, error: yaml.YAMLError) -> ValidationError:
    return ValidationError(
        source, "", f"not valid JSON or YAML (neither JSON nor YAML parses it): {error}"
    )


def list_items(document: Mapping[str, Any]) -> list[Any] | None:
    """The items of a List/PodList/NodeList (none when ``items`` is absent), each given the
    kind its list implies when it has none (kubectl leaves ``kind`` out of a PodList's items);
    None when ``items`` is not a list."""
    items = document.get("items")
    if items is None:
        return []
    if not isinstance(items, list | tuple):
        return None
    implied = LIST_KINDS[document["kind"]]
    if implied is None:
        return list(items)
    return [
        {**item, "kind": implied} if isinstance(item, Mapping) and "kind" not in item else item
        for item in items
    ]


def entries(documents: list[Any]) -> Iterator[Entry]:
    """The objects of parsed documents, in order: single objects, the items of lists, and the
    objects of watch events (each with its event type); what is wrong around an object (not a
    mapping, ``items`` not a list) comes as its ``problem``."""
    for number, document in enumerate(documents):
        where = f"document {number}" if len(documents) > 1 else "document"
        if not isinstance(document, Mapping):
            problem = f"expected an object, a list or a watch event, found {type_name(document)}"
            yield Entry(where, "LISTED", document, problem)
            continue
        kind = document.get("kind")
        if "type" in document and "object" in document and kind is None:
            yield Entry(f"event {number}", str(document["type"]), document["object"])
        elif isinstance(kind, str) and kind in LIST_KINDS:
            items = list_items(document)
            if items is None:
                problem = f"items: must be a list, found {type_name(document['items'])}"
                yield Entry(where, "LISTED", document, problem)
                continue
            for index, item in enumerate(items):
                yield Entry(f"items[{index}]", "LISTED", item)
        else:
            yield Entry(where, "LISTED", document)


def type_name(value: Any) -> str:
    """What a value is, in JSON's words where it has them (``null``), for messages."""
    return "null" if value is None else type(value).__name__


def subject(obj: Any) -> str:
    """``pod <namespace>/<name>``, ``node <name>``, ``<kind> <name>``: what an object calls
    itself, read defensively (the object may be the invalid one)."""
    if not isinstance(obj, Mapping):
        return type_name(obj)
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in LIST_KINDS:
        return kind
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    name = name if isinstance(name, str) and name else "<unnamed>"
    namespace = meta.get("namespace")
    label = kind.lower() if isinstance(kind, str) and kind else "object"
    if kind == "Pod":
        return f"pod {namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"
    if isinstance(namespace, str) and namespace:
        return f"{label} {namespace}/{name}"
    return f"{label} {name}"


# --------------------------------------------------------------------------------------------
# Resources


def resource_from_list(rl: Any, *, obj: str, field: str, allow_negative: bool = False) -> Resource:
    """A Kubernetes ResourceList (``{"cpu": "100m", ...}``) under scheduler rules, for
    :meth:`Resource.from_resource_list`.

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


def read_pod(obj: Any) -> Pod:
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
    labels = r.labels(meta.get("labels"), "metadata.labels")
    rules = read_inter_pod_rules(r.obj, spec, labels)
    return Pod(
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
    )


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
            raise r.fail(f"{path}.operator", f"{_show(operator)} is not Exists or Equal")
        value_ = r.string(t.get("value"), f"{path}.value")
        if operator == "Exists" and value_:
            raise r.fail(f"{path}.value", "must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise r.fail(f"{path}.operator", "must be Exists when key is empty")
        effect = r.string(t.get("effect"), f"{path}.effect")
        if effect and effect not in _TAINT_EFFECTS:
            raise r.fail(f"{path}.effect", f"{_show(effect)} is not one of {list(_TAINT_EFFECTS)}")
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
            raise r.fail(f"{where}.operator", f"{_show(operator)} is not one of {known}")
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
    image = r.string(c.get("image"), f"{path}.image")
    return _Container({**limits, **requests}, ports, restart == "Always", image)


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


def read_node(obj: Any) -> Node:
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
    return Node(
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
            raise r.fail(f"{path}.effect", f"{_show(effect)} is not one of {list(_TAINT_EFFECTS)}")
        out.append((key, r.string(t.get("value"), f"{path}.value"), effect))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Pods and nodes from documents

_BUILDERS: dict[str, Callable[[Any], Pod | Node]] = {"Pod": read_pod, "Node": read_node}


def objects_from_k8s(doc: Any) -> list[Pod | Node]:
    """Pods and nodes from one Pod/Node manifest or a List/PodList/NodeList (``kubectl -o json``).

    Errors inside a list keep the item's object name and prefix the field with ``items[i].``.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError("object", "", "must be a mapping")
    kind = doc.get("kind")
    if kind in _BUILDERS:
        return [_BUILDERS[kind](doc)]
    if not isinstance(kind, str) or kind not in LIST_KINDS:
        if kind is None:
            raise ValidationError("object", "kind", "is required")
        raise ValidationError("object", "kind", f"unsupported kind {_show(kind)}")
    implied = LIST_KINDS[kind]
    items = list_items(doc)
    if items is None:
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

    A ``str`` is read as a path when it is a single line without ``{``, ``[`` or ``:``. The
    text goes through :func:`parse_documents`, as ``schedcache load``'s does (same encodings,
    limits and errors, naming the path or ``<text>``); :func:`objects_from_k8s` judges each
    document, so a document that is not an object is named as such.
    """
    data: str | bytes
    if isinstance(path_or_text, os.PathLike) or not any(ch in path_or_text for ch in "\n{[:"):
        source = os.fspath(path_or_text)
        data = Path(source).read_bytes()
    else:
        source, data = "<text>", path_or_text
    docs = parse_documents(data, source=source, require_objects=False)
    return [o for doc in docs if doc is not None for o in objects_from_k8s(doc)]
