"""Loading real Kubernetes objects into a cache, as kube-scheduler's informers would.

Input is what ``kubectl`` prints: ``kubectl get nodes,pods -o json`` (a ``List``; also
``PodList``/``NodeList`` or single objects), or the stream of ``kubectl get pods --watch -o
json`` (concatenated JSON watch events ``{"type": ADDED|MODIFIED|DELETED, "object": ...}``), as
JSON or YAML, in UTF-8 (UTF-16/32 with a byte order mark, as PowerShell writes, too). Objects
become the informer handlers' commands: bound pods ``add_pod`` / ``update_pod`` / ``remove_pod``
(unbound and terminated pods are not the cache's business, as kube-scheduler's informer
filters them: a cached pod read as Succeeded or Failed, in a List or an event, is removed),
nodes ``add_node`` / ``update_node`` / ``remove_node``.

A valid pod the cache cannot store in full (labels past its limit) is stored without its labels
and marked ``truncated``, still counting on its node, as ``sync`` stores it
(:mod:`schedcache.feed.truncation`); the report counts them.

An object the cache already holds exactly as read (a rerun of the same file, or a load that
went on after an interruption) is skipped as ``unchanged``: no command, no event.

Every object is checked and turned into its command before any command is sent, so an invalid
one is reported (position, kind, namespace/name, field, reason) and skipped, never
half-applied, and never stops the objects after it; the cache rejects commands one by one, so a
rejected command does not stop its batch either.

Reading the input (decoding, JSON/YAML documents and their limits, Lists, watch events) is
:mod:`schedcache.model.manifests`; this module decides what of it goes into the cache, and sends it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schedcache.cache import Cache
from schedcache.errors import NodeAlreadyRemoved, ValidationError
from schedcache.feed.reconcile import held, removal
from schedcache.feed.truncation import stored_pod, truncated
from schedcache.model.manifests import Entry, entries, parse_documents, subject, type_name
from schedcache.model.values import Node, Pod
from schedcache.store import commands
from schedcache.store.commands import Command
from schedcache.store.fetch import fetch_node_infos, fetch_pods
from schedcache.store.responses import as_text

TERMINATED = {"Succeeded", "Failed"}
LIST_KIND_OF = {"PodList": "Pod", "NodeList": "Node"}


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
    pruned: Counter[str] = field(default_factory=Counter)  # "nodes"/"pods" removed by prune
    skipped: list[Skipped] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    truncated: int = 0  # pods applied without their labels (more than the cache stores)
    # Commands sent and not yet answered: if the load stops here (Ctrl-C), up to this many
    # more may have been applied than ``applied`` counts.
    in_flight: int = 0

    @property
    def ok(self) -> bool:
        return not self.invalid and not self.rejected

    def skipped_by_reason(self) -> Counter[str]:
        return Counter(item.reason for item in self.skipped)


# -- planning ------------------------------------------------------------------------------------


class Planner:
    """Turns entries into commands, tracking what the cache will hold after each one."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.pod_states: dict[str, str | None] = {}
        self.unheld: set[str] = set()  # pods read and left out: pending or terminated
        self.cut = False  # whether the last pod_command stored the pod without its labels
        self.nodes = {as_text(name) for name in cache.client.smembers(cache.keys.nodes)}
        # What the cache holds (or will, once the planned commands run) of the objects read:
        # an object read again as it is stored is skipped.
        self.stored_pods: dict[str, Pod] = {}
        self.stored_nodes: dict[str, Node | None] = {}

    def prefetch(self, models: list[Pod | Node]) -> None:
        unknown = [m.uid for m in models if isinstance(m, Pod) and m.uid not in self.pod_states]
        records = fetch_pods(self.cache.store, unknown)
        for uid in unknown:
            record = records.get(uid)
            self.pod_states[uid] = record.state if record else None
            if record is not None:
                self.stored_pods[uid] = record.pod
        names = {m.name for m in models if isinstance(m, Node)} - set(self.stored_nodes)
        held_nodes = sorted(names & self.nodes)
        infos = fetch_node_infos(self.cache.store, held_nodes) if held_nodes else {}
        for name in names:
            info = infos.get(name)
            self.stored_nodes[name] = info.node if info is not None else None

    def unchanged_pod(self, pod: Pod) -> bool:
        stored = self.stored_pods.get(pod.uid)
        return stored is not None and stored in (pod, truncated(pod))

    def pod_command(self, event: str, pod: Pod) -> Command | tuple[str, str]:
        """The command for a pod event, or (reason, detail) for skipping it. Raises
        ValidationError (and remembers nothing) when the command cannot be built."""
        state = self.pod_states.get(pod.uid)
        # A terminated pod leaves the cache however it is read (a MODIFIED event or a List),
        # as kube-scheduler's informer drops a pod once it no longer passes its filter.
        if event == "DELETED" or (pod.phase in TERMINATED and state is not None):
            if state is None:
                return ("not in the cache", "")
            command = commands.remove_pod(pod.with_node(""))  # the stored copy wins
            self.pod_states[pod.uid] = None
            self.stored_pods.pop(pod.uid, None)
            return command
        if not pod.node_name:
            self.unheld.add(pod.uid)
            return ("pending", "not bound to a node")
        if pod.phase in TERMINATED:
            self.unheld.add(pod.uid)
            return ("terminated", pod.phase)
        self.unheld.discard(pod.uid)
        # add_pod: new, or confirms an assumed pod
        added = state == "added"
        if added and self.unchanged_pod(pod):
            return ("unchanged", "")
        command, cut = stored_pod(
            pod, (lambda p: commands.update_pod(p, p)) if added else commands.add_pod
        )
        self.pod_states[pod.uid] = "added"
        self.stored_pods[pod.uid] = truncated(pod) if cut else pod
        self.cut = cut
        return command

    def node_command(self, event: str, node: Node) -> Command | tuple[str, str]:
        if event == "DELETED":
            if node.name not in self.nodes:
                return ("not in the cache", "")
            self.nodes.discard(node.name)
            self.stored_nodes[node.name] = None
            return commands.remove_node(node.name)
        if node.name in self.nodes and self.stored_nodes.get(node.name) == node:
            return ("unchanged", "")
        command = (
            commands.update_node(None, node) if event == "MODIFIED" else commands.add_node(node)
        )
        self.nodes.add(node.name)
        self.stored_nodes[node.name] = node
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
        raise ValidationError("object", "", f"must be a mapping, found {type_name(obj)}")
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
    prune: bool = False,
) -> LoadReport:
    """Load ``text`` (see the module docstring) into ``cache``."""
    return load_documents(
        cache, parse_documents(text), batch_size=batch_size, progress=progress, prune=prune
    )


def load_documents(
    cache: Cache,
    documents: list[Any],
    *,
    batch_size: int = 500,
    progress: Callable[[int], None] | None = None,
    prune: bool = False,
    report: LoadReport | None = None,
) -> LoadReport:
    """Load parsed documents (``parse_documents``) into ``cache``, ``batch_size`` objects per
    batch (at least 1). ``report`` (a new one when not given) is filled as batches are
    answered, so a caller that stops the load (Ctrl-C) can say how far it got.

    With ``prune`` the input must be full lists (no watch events): afterwards the cache's
    objects of each kind the input lists (a ``NodeList``/``PodList`` names its kind even when
    empty) that the lists no longer hold are removed, as a relist does. Pending and terminated
    pods are not held (a cached pod listed as terminated goes, with or without ``prune``);
    assumed pods are the
    scheduler's and stay; an invalid object whose name or uid can be read is kept."""
    if type(batch_size) is not int or batch_size < 1:
        raise ValidationError("load", "batch_size", f"{batch_size!r} must be an integer >= 1")
    all_entries = list(entries(documents))
    if prune:
        events = sorted({entry.event for entry in all_entries} - {"LISTED"})
        if events:
            raise ValidationError(
                "load",
                "prune",
                f"needs full lists (kubectl get nodes,pods -o json), not watch events "
                f"({', '.join(events)})",
            )
    report = LoadReport() if report is None else report
    planner = Planner(cache)
    for start in range(0, len(all_entries), batch_size):
        chunk = all_entries[start : start + batch_size]
        planned = _plan(chunk, planner, report)
        batch = cache.batch(chunk_size=min(200, max(1, len(planned))))
        # (before the adds: a full group is sent as it is added, and may land though the
        # batch fails later; found in review: a load that lost Redis in an add said none was)
        report.in_flight = len(planned)
        for _, command, _ in planned:
            batch.add(command)
        results = batch.execute() if planned else []
        for (entry, _, cut), result in zip(planned, results, strict=True):
            if result.ok:
                report.applied[result.command.name] += 1
                report.truncated += cut
            else:
                report.rejected.append(f"{entry.position}: {result.error}")
        report.in_flight = 0
        if progress:
            progress(len(chunk))
    if prune:
        _prune(cache, documents, all_entries, planner, report, batch_size)
    return report


def _prune(
    cache: Cache,
    documents: list[Any],
    listed: list[Entry],
    planner: Planner,
    report: LoadReport,
    batch_size: int,
) -> None:
    """Remove what the lists speak for and no longer hold: pods first (no ghost nodes)."""
    kinds = {
        LIST_KIND_OF.get(str(doc.get("kind")), "") for doc in documents if isinstance(doc, Mapping)
    }
    kinds |= {_kind(entry) for entry in listed}
    # Every listed pod but those read and left out: an unreadable one is kept.
    keep_pods = {_meta(entry.object, "uid") for entry in listed if _kind(entry) == "Pod"}
    keep_pods -= planner.unheld
    keep_nodes = {_meta(entry.object, "name") for entry in listed if _kind(entry) == "Node"}
    for kind, resource, keep in (("Pod", "pods", keep_pods), ("Node", "nodes", keep_nodes)):
        if kind not in kinds:
            continue
        gone = sorted(held(cache, resource) - keep)
        for start in range(0, len(gone), batch_size):
            batch = cache.batch(chunk_size=min(200, batch_size))
            for key in gone[start : start + batch_size]:
                batch.add(removal(resource, key, None))
            for result in batch.execute():
                # A ghost was removed already, kept by pods the lists still hold: nothing to
                # prune (found in review: rejected on every --prune, never exit status 0).
                if result.ok:
                    report.pruned[resource] += 1
                elif not isinstance(result.error, NodeAlreadyRemoved):
                    report.rejected.append(f"prune: {result.error}")


def _kind(entry: Entry) -> str:
    obj = entry.object
    return str(obj.get("kind")) if isinstance(obj, Mapping) else ""


def _meta(obj: Any, name: str) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = metadata.get(name) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


def _plan(
    chunk: list[Entry], planner: Planner, report: LoadReport
) -> list[tuple[Entry, Command, bool]]:
    """Every entry of ``chunk`` decoded and turned into its command, with whether the pod
    was truncated; the invalid and skipped ones go to ``report``. Nothing is sent."""
    decoded: list[tuple[Entry, Pod | Node | tuple[str, str]]] = []
    for entry in chunk:
        try:
            decoded.append((entry, decode(entry)))
        except ValidationError as error:
            report.invalid.append(f"{entry.position}: {error}")
    planner.prefetch([model for _, model in decoded if isinstance(model, Pod | Node)])
    planned: list[tuple[Entry, Command, bool]] = []
    for entry, model in decoded:
        planner.cut = False
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
            planned.append((entry, outcome, planner.cut))
    return planned
