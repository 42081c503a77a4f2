"""Loading real Kubernetes objects into a cache, as kube-scheduler's informers would.

Input is what ``kubectl`` prints: ``kubectl get nodes,pods -o json`` (a ``List``; also
``PodList``/``NodeList`` or single objects), or the stream of ``kubectl get pods --watch -o
json`` (concatenated JSON watch events ``{"type": ADDED|MODIFIED|DELETED, "object": ...}``), as
JSON or YAML, in UTF-8 (UTF-16/32 with a byte order mark, as PowerShell writes, too). Objects
become the informer handlers' commands: bound pods ``add_pod`` / ``update_pod`` / ``remove_pod``
(unbound and terminated pods are not the cache's business, as kube-scheduler's informer
filters them), nodes ``add_node`` / ``update_node`` / ``remove_node``.

Every object is checked and turned into its command before any command is sent, so an invalid
one is reported (position, kind, namespace/name, field, reason) and skipped, never
half-applied, and never stops the objects after it; the cache rejects commands one by one, so a
rejected command does not stop its batch either.

The parser is bounded: YAML goes through libyaml when PyYAML has it, documents nested deeper
than :data:`MAX_DEPTH` or whose aliases would expand past :data:`MAX_ALIAS_NODES` extra nodes
(a "billion laughs" file) are refused before anything is built from them.
"""

from __future__ import annotations

import codecs
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from schedcache import commands
from schedcache.cache import Cache
from schedcache.commands import Command
from schedcache.errors import ValidationError
from schedcache.fetch import fetch_pods
from schedcache.models import Node, Pod

LIST_KINDS = {"List", "PodList", "NodeList"}
TERMINATED = {"Succeeded", "Failed"}
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


@dataclass(frozen=True)
class Skipped:
    """An object the informers would not pass to the cache: ``reason`` is the category the
    summary counts (``pending``, ``terminated``, ...), ``detail`` says more."""

    position: str
    subject: str
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.position} {self.subject}: {self.reason}{detail}"


@dataclass
class LoadReport:
    """What a load did: commands applied by name, and what was skipped, invalid or rejected
    (``invalid`` and ``rejected`` lines start with the object's position and name it)."""

    applied: Counter[str] = field(default_factory=Counter)
    skipped: list[Skipped] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.invalid and not self.rejected

    def skipped_by_reason(self) -> Counter[str]:
        return Counter(item.reason for item in self.skipped)


@dataclass(frozen=True)
class Entry:
    """One object of the input: where it was, the watch event type (LISTED outside watches),
    and ``problem`` when the input around it is already wrong."""

    position: str
    event: str
    object: Any
    problem: str = ""


# -- text and documents ------------------------------------------------------------------------


def decode_input(data: bytes) -> str:
    """The text of a file: UTF-8, or UTF-16/32 with a byte order mark; anything else (a
    binary file) is a :class:`ValidationError` naming the offset of the first bad byte."""
    encoding = "utf-8"
    for bom, name in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom) :], name
            break
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        raise ValidationError(
            "input",
            "",
            f"not {encoding.upper()} text (byte 0x{data[error.start]:02x} at offset "
            f"{error.start}); give kubectl's JSON or YAML output",
        ) from None
    if "\x00" in text:  # valid UTF-8, but neither JSON nor YAML can hold a raw NUL
        raise ValidationError(
            "input", "", "NUL bytes: binary, or UTF-16/32 without a BOM (byte order mark)"
        )
    return text


def parse_documents(text: str | bytes) -> list[Any]:
    """Every top-level value: a JSON stream (concatenated values), else YAML documents."""
    if isinstance(text, bytes):
        text = decode_input(text)
    values = _json_values(text)
    if values is None:
        values = _yaml_documents(text)
        if not all(isinstance(doc, Mapping) for doc in values):
            raise ValidationError("input", "", "expected Kubernetes objects, lists or watch events")
    for number, value in enumerate(values):
        _check_depth(value, f"document {number}")
    return values


def _json_values(text: str) -> list[Any] | None:
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
            raise ValidationError(
                "input", f"offset {index}", f"invalid JSON: {error.msg}"
            ) from None
        return None
    except RecursionError:
        raise _too_deep(f"document {len(values)}") from None


def _yaml_documents(text: str) -> list[Any]:
    _check_yaml_events(text)
    loader = YAML_LOADER(text)  # a SafeLoader: plain YAML types only, never Python objects
    try:
        documents = []
        while loader.check_data():
            document = loader.get_data()
            if document is not None:
                documents.append(document)
        return documents
    except yaml.YAMLError as error:
        raise ValidationError("input", "", f"neither JSON nor YAML: {error}") from None
    except RecursionError:  # pragma: no cover - _check_yaml_events bounds the depth first
        raise _too_deep("document") from None
    finally:
        loader.dispose()


def _check_yaml_events(text: str) -> None:
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
                    raise _too_deep("document")
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
                    size = anchors.get(event.anchor, 1)
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
                        "input",
                        "",
                        f"YAML aliases expand to over {MAX_ALIAS_NODES:,} more nodes than the "
                        "document has; refusing it (expand the aliases, or split the file)",
                    )
    except yaml.YAMLError as error:
        raise ValidationError("input", "", f"neither JSON nor YAML: {error}") from None


def _check_depth(value: Any, where: str) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        if isinstance(item, Mapping):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _too_deep(where: str) -> ValidationError:
    return ValidationError("input", where, f"nested deeper than {MAX_DEPTH} levels")


def entries(documents: list[Any]) -> Iterator[Entry]:
    for number, document in enumerate(documents):
        where = f"document {number}" if len(documents) > 1 else "document"
        if not isinstance(document, Mapping):
            problem = f"expected an object, a list or a watch event, found {_type(document)}"
            yield Entry(where, "LISTED", document, problem)
            continue
        kind = document.get("kind")
        if "type" in document and "object" in document and kind is None:
            yield Entry(f"event {number}", str(document["type"]), document["object"])
        elif isinstance(kind, str) and kind in LIST_KINDS:
            items = document.get("items") or []
            if not isinstance(items, list):
                problem = f"items: must be a list, found {_type(items)}"
                yield Entry(where, "LISTED", document, problem)
                continue
            item_kind = {"PodList": "Pod", "NodeList": "Node"}.get(kind)
            for index, item in enumerate(items):
                if item_kind and isinstance(item, Mapping) and "kind" not in item:
                    item = {**item, "kind": item_kind}
                yield Entry(f"items[{index}]", "LISTED", item)
        else:
            yield Entry(where, "LISTED", document)


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def subject(obj: Any) -> str:
    """``pod <namespace>/<name>``, ``node <name>``, ``<kind> <name>``: what an object calls
    itself, read defensively (the object may be the invalid one)."""
    if not isinstance(obj, Mapping):
        return _type(obj)
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


# -- planning ------------------------------------------------------------------------------------


class Planner:
    """Turns entries into commands, tracking what the cache will hold after each one."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.pod_states: dict[str, str | None] = {}
        self.nodes = {name.decode() for name in cache.client.smembers(cache.keys.nodes)}

    def prefetch(self, pods: list[Pod]) -> None:
        unknown = [pod.uid for pod in pods if pod.uid not in self.pod_states]
        records = fetch_pods(self.cache.client, self.cache.keys, unknown)
        for uid in unknown:
            record = records.get(uid)
            self.pod_states[uid] = record.state if record else None

    def pod_command(self, event: str, pod: Pod) -> Command | tuple[str, str]:
        """The command for a pod event, or (reason, detail) for skipping it. Raises
        ValidationError (and remembers nothing) when the command cannot be built."""
        state = self.pod_states.get(pod.uid)
        if event == "DELETED" or (event == "MODIFIED" and pod.phase in TERMINATED):
            if state is None:
                return ("not in the cache", "")
            command = commands.remove_pod(pod.with_node(""))  # the stored copy wins
            self.pod_states[pod.uid] = None
            return command
        if not pod.node_name:
            return ("pending", "not bound to a node")
        if pod.phase in TERMINATED:
            return ("terminated", pod.phase)
        # add_pod: new, or confirms an assumed pod
        added = state == "added"
        command = commands.update_pod(pod, pod) if added else commands.add_pod(pod)
        self.pod_states[pod.uid] = "added"
        return command

    def node_command(self, event: str, node: Node) -> Command | tuple[str, str]:
        if event == "DELETED":
            if node.name not in self.nodes:
                return ("not in the cache", "")
            self.nodes.discard(node.name)
            return commands.remove_node(node.name)
        command = (
            commands.update_node(None, node) if event == "MODIFIED" else commands.add_node(node)
        )
        self.nodes.add(node.name)
        return command


def decode(entry: Entry) -> Pod | Node | tuple[str, str]:
    """The model for an entry, or (reason, detail) for skipping it; raises ValidationError
    when invalid."""
    if entry.problem:
        raise ValidationError(subject(entry.object), "", entry.problem)
    if entry.event == "BOOKMARK":
        return ("bookmark", "")
    if entry.event not in {"LISTED", "ADDED", "MODIFIED", "DELETED"}:
        raise ValidationError("watch event", "type", f"{entry.event!r} is not a change")
    obj = entry.object
    if not isinstance(obj, Mapping):
        raise ValidationError("object", "", f"must be a mapping, found {_type(obj)}")
    kind = obj.get("kind")
    if kind == "Pod":
        return Pod.from_k8s(obj)
    if kind == "Node":
        return Node.from_k8s(obj)
    return ("not cached", f"kind {kind}")


def load(
    cache: Cache,
    text: str | bytes,
    *,
    batch_size: int = 500,
    progress: Callable[[int], None] | None = None,
) -> LoadReport:
    """Load ``text`` (see the module docstring) into ``cache``."""
    return load_documents(cache, parse_documents(text), batch_size=batch_size, progress=progress)


def load_documents(
    cache: Cache,
    documents: list[Any],
    *,
    batch_size: int = 500,
    progress: Callable[[int], None] | None = None,
) -> LoadReport:
    """Load parsed documents (``parse_documents``) into ``cache``, ``batch_size`` objects per
    batch (at least 1)."""
    if type(batch_size) is not int or batch_size < 1:
        raise ValidationError("load", "batch_size", f"{batch_size!r} must be an integer >= 1")
    all_entries = list(entries(documents))
    report = LoadReport()
    planner = Planner(cache)
    for start in range(0, len(all_entries), batch_size):
        chunk = all_entries[start : start + batch_size]
        planned = _plan(chunk, planner, report)
        batch = cache.batch(chunk_size=min(200, max(1, len(planned))))
        for _, command in planned:
            batch.add(command)
        results = batch.execute() if planned else []
        for (entry, _), result in zip(planned, results, strict=True):
            if result.ok:
                report.applied[result.command.name] += 1
            else:
                report.rejected.append(f"{entry.position}: {result.error}")
        if progress:
            progress(len(chunk))
    return report


def _plan(chunk: list[Entry], planner: Planner, report: LoadReport) -> list[tuple[Entry, Command]]:
    """Every entry of ``chunk`` decoded and turned into its command; the invalid and skipped
    ones go to ``report``. Nothing is sent."""
    decoded: list[tuple[Entry, Pod | Node | tuple[str, str]]] = []
    for entry in chunk:
        try:
            decoded.append((entry, decode(entry)))
        except ValidationError as error:
            report.invalid.append(f"{entry.position}: {error}")
    planner.prefetch([model for _, model in decoded if isinstance(model, Pod)])
    planned: list[tuple[Entry, Command]] = []
    for entry, model in decoded:
        try:
            if isinstance(model, Pod):
                outcome = planner.pod_command(entry.event, model)
            elif isinstance(model, Node):
                outcome = planner.node_command(entry.event, model)
            else:
                outcome = model
        except ValidationError as error:
            report.invalid.append(f"{entry.position}: {error}")
            continue
        if isinstance(outcome, tuple):
            report.skipped.append(Skipped(entry.position, subject(entry.object), *outcome))
        else:
            planned.append((entry, outcome))
    return planned
