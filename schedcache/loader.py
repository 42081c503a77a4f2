"""Loading real Kubernetes objects into a cache, as kube-scheduler's informers would.

Input is what ``kubectl`` prints: ``kubectl get nodes,pods -o json`` (a ``List``; also
``PodList``/``NodeList`` or single objects), or the stream of ``kubectl get pods --watch -o
json`` (concatenated JSON watch events ``{"type": ADDED|MODIFIED|DELETED, "object": ...}``), as
JSON or YAML. Objects become the informer handlers' commands: bound pods ``add_pod`` /
``update_pod`` / ``remove_pod`` (unbound and terminated pods are not the cache's business, as
kube-scheduler's informer filters them), nodes ``add_node`` / ``update_node`` / ``remove_node``.
Commands are sent in batches; an invalid object is reported with its position and skipped,
never half-applied.
"""

from __future__ import annotations

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


@dataclass
class LoadReport:
    """What a load did: commands applied by name, and what was skipped, invalid or rejected."""

    applied: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.invalid and not self.rejected


@dataclass(frozen=True)
class Entry:
    """One object of the input: where it was, the watch event type (LISTED outside watches)."""

    position: str
    event: str
    object: Any


def parse_documents(text: str) -> list[Any]:
    """Every top-level value: a JSON stream (concatenated values), else YAML documents."""
    decoder = json.JSONDecoder()
    values, index = [], 0
    try:
        while True:
            while index < len(text) and text[index].isspace():
                index += 1
            if index == len(text):
                return values
            value, index = decoder.raw_decode(text, index)
            values.append(value)
    except json.JSONDecodeError as json_error:
        if values:  # JSON that broke off: not YAML either
            raise ValidationError(
                "input", f"offset {index}", f"invalid JSON: {json_error.msg}"
            ) from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise ValidationError("input", "", f"neither JSON nor YAML: {error}") from None
    if not all(isinstance(doc, Mapping) for doc in documents):
        raise ValidationError("input", "", "expected Kubernetes objects, lists or watch events")
    return documents


def entries(documents: list[Any]) -> Iterator[Entry]:
    for number, document in enumerate(documents):
        where = f"document {number}" if len(documents) > 1 else "document"
        if not isinstance(document, Mapping):
            yield Entry(where, "INVALID", document)
        elif "type" in document and "object" in document and "kind" not in document:
            yield Entry(f"event {number}", str(document["type"]), document["object"])
        elif document.get("kind") in LIST_KINDS:
            items = document.get("items") or []
            item_kind = {"PodList": "Pod", "NodeList": "Node"}.get(document["kind"])
            for index, item in enumerate(items):
                if item_kind and isinstance(item, Mapping) and "kind" not in item:
                    item = {**item, "kind": item_kind}
                yield Entry(f"items[{index}]", "LISTED", item)
        else:
            yield Entry(where, "LISTED", document)


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

    def pod_command(self, event: str, pod: Pod) -> Command | str:
        """The command for a pod event, or why it is skipped."""
        state = self.pod_states.get(pod.uid)
        if event == "DELETED" or (event == "MODIFIED" and pod.phase in TERMINATED):
            if state is None:
                return "not in the cache"
            self.pod_states[pod.uid] = None
            return commands.remove_pod(pod.with_node(""))  # the stored copy wins
        if not pod.node_name:
            return "not bound to a node"
        if pod.phase in TERMINATED:
            return f"terminated ({pod.phase})"
        self.pod_states[pod.uid] = "added"
        if state == "added":
            return commands.update_pod(pod, pod)
        return commands.add_pod(pod)  # new, or confirms an assumed pod

    def node_command(self, event: str, node: Node) -> Command | str:
        if event == "DELETED":
            if node.name not in self.nodes:
                return "not in the cache"
            self.nodes.discard(node.name)
            return commands.remove_node(node.name)
        self.nodes.add(node.name)
        if event == "MODIFIED":
            return commands.update_node(None, node)
        return commands.add_node(node)


def decode(entry: Entry) -> Pod | Node | str:
    """The model for an entry, or why it is skipped; raises ValidationError when invalid."""
    if entry.event == "BOOKMARK":
        return "bookmark"
    if entry.event not in {"LISTED", "ADDED", "MODIFIED", "DELETED"}:
        raise ValidationError("watch event", "type", f"{entry.event!r} is not a change")
    obj = entry.object
    if not isinstance(obj, Mapping):
        raise ValidationError("object", "", "must be a mapping")
    kind = obj.get("kind")
    if kind == "Pod":
        return Pod.from_k8s(obj)
    if kind == "Node":
        return Node.from_k8s(obj)
    return f"kind {kind} is not cached"


def load(
    cache: Cache,
    text: str,
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
    """Load parsed documents (``parse_documents``) into ``cache``."""
    all_entries = list(entries(documents))
    report = LoadReport()
    planner = Planner(cache)
    for start in range(0, len(all_entries), batch_size):
        chunk = all_entries[start : start + batch_size]
        decoded: list[tuple[Entry, Pod | Node | str]] = []
        for entry in chunk:
            try:
                decoded.append((entry, decode(entry)))
            except ValidationError as error:
                report.invalid.append(f"{entry.position}: {error}")
        planner.prefetch([model for _, model in decoded if isinstance(model, Pod)])
        batch = cache.batch(chunk_size=200)
        positions = []
        for entry, model in decoded:
            if isinstance(model, Pod):
                planned = planner.pod_command(entry.event, model)
            elif isinstance(model, Node):
                planned = planner.node_command(entry.event, model)
            else:
                planned = model
            if isinstance(planned, str):
                report.skipped.append(f"{entry.position}: {planned}")
            else:
                batch.add(planned)
                positions.append(entry.position)
        for position, result in zip(positions, batch.execute(), strict=True):
            if result.ok:
                report.applied[result.command.name] += 1
            else:
                report.rejected.append(f"{position}: {result.error}")
        if progress:
            progress(len(chunk))
    return report
