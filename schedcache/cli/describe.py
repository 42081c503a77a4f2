"""``schedcache describe node|pod``: kubectl describe's sections for what the cache keeps
(Labels, Taints, Allocatable, Non-terminated Pods, Allocated resources with percentages of
allocatable, Events from the stream). The cache keeps requests, not limits: the Limits columns
keep kubectl's place and say so (``n/a``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from schedcache.cli.completion import complete_kinds, complete_names
from schedcache.cli.eventlines import event_text
from schedcache.cli.get import find_pods, kind_of, namespace_option, not_found
from schedcache.cli.objects import CachedPod, Seen, cached_pods, pod_status, roles
from schedcache.cli.params import Name
from schedcache.cli.printing import table_text
from schedcache.cli.text import node_status, printable
from schedcache.cli.units import age, bytes_text, cpu_text, percent, resource_list
from schedcache.model.nodeinfo import NodeInfo
from schedcache.store.events import Event
from schedcache.store.records import PodRecord

if TYPE_CHECKING:
    from schedcache.cli.settings import Settings

NOT_KEPT = "n/a"


def fields_text(pairs: list[tuple[str, list[str]]]) -> list[str]:
    """``Name:   value`` lines aligned as kubectl's tabwriter does; a multi-value field
    continues on lines indented to the value column."""
    width = max(len(label) + 1 for label, _ in pairs) + 2  # "Label:" and two spaces
    lines = []
    for label, values in pairs:
        shown = values or ["<none>"]
        lines.append(f"{label + ':':<{width}}{printable(shown[0])}".rstrip())
        lines += [" " * width + printable(v) for v in shown[1:]]
    return lines


def labels_text(labels: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(labels.items())]


def indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()] if text else []


def events_section(events: list[Event], now_ms: int) -> list[str]:
    shown = events
    if not shown:
        return ["Events:  <none>"]
    rows = [
        ["Normal", e.type, age(int(e.id.split("-", 1)[0]), now_ms), e.replica or "-", event_text(e)]
        for e in shown
    ]
    dashes = [["----", "------", "----", "----", "-------"]]
    return [
        "Events:",
        *indent(table_text(("Type", "Reason", "Age", "From", "Message"), dashes + rows, False)),
    ]


def described_time(ms: int) -> str:
    """A time as kubectl describe prints it (Go's RFC1123Z), in UTC."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%a, %d %b %Y %H:%M:%S %z")


def describe_node(name: str, info: NodeInfo, seen: Seen, events: list[Event]) -> list[str]:
    node = info.node
    alloc = info.allocatable
    taints = [f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in node.taints] if node else []
    lines = fields_text(
        [
            ("Name", [name]),
            ("Roles", [roles(node)]),
            ("Labels", labels_text(node.labels) if node else []),
            (
                "CreationTimestamp",
                [described_time(node.created_ms)] if node and node.created_ms else [],
            ),
            ("Taints", taints),
            ("Unschedulable", [str(bool(node and node.unschedulable)).lower()]),
            ("Status", [node_status(info)]),
        ]
    )
    lines.append("Allocatable:")
    listed = resource_list(alloc)
    width = max(len(k) for k in listed) + 3
    lines += [f"  {k + ':':<{width}}{v}" for k, v in listed.items()]
    pods = sorted(info.pods, key=lambda p: (p.namespace, p.name))
    lines.append(f"Non-terminated Pods:          ({len(pods)} in total)")
    header = (
        "Namespace",
        "Name",
        "CPU Requests",
        "CPU Limits",
        "Memory Requests",
        "Memory Limits",
        "Age",
    )
    rows = [["-" * len(h) for h in header]]
    for pod in pods:
        cpu, memory = pod.requests.milli_cpu, pod.requests.memory
        rows.append(
            [
                pod.namespace,
                pod.name,
                f"{cpu_text(cpu)} ({percent(cpu, alloc.milli_cpu)})",
                NOT_KEPT,
                f"{bytes_text(memory)} ({percent(memory, alloc.memory)})",
                NOT_KEPT,
                seen.pod_age(pod),
            ]
        )
    lines += indent(table_text(header, rows, False))
    used = info.requested
    lines.append("Allocated resources:")
    lines.append("  (Limits are not kept by the cache: only requests count for scheduling.)")
    resources = [
        ["--------", "--------", "------"],
        [
            "cpu",
            f"{cpu_text(used.milli_cpu)} ({percent(used.milli_cpu, alloc.milli_cpu)})",
            NOT_KEPT,
        ],
        ["memory", f"{bytes_text(used.memory)} ({percent(used.memory, alloc.memory)})", NOT_KEPT],
        [
            "ephemeral-storage",
            f"{bytes_text(used.ephemeral_storage)} "
            f"({percent(used.ephemeral_storage, alloc.ephemeral_storage)})",
            NOT_KEPT,
        ],
        ["pods", f"{len(pods)} ({percent(len(pods), alloc.allowed_pod_number)})", NOT_KEPT],
        *extended_rows(info),
    ]
    lines += indent(table_text(("Resource", "Requests", "Limits"), resources, False))
    return lines + events_section(events, seen.now_ms)


def extended_rows(info: NodeInfo) -> list[list[str]]:
    """kubectl's rows for the node's other resources: hugepages with a percentage of
    allocatable, then extended resources (``nvidia.com/gpu``) as plain amounts, each sorted by
    name; every one the node offers or a pod requests is listed, 0 when nothing asks for it."""
    offered, used = info.allocatable.scalar_resources, info.requested.scalar_resources
    names = sorted({*offered, *used})
    huge = [name for name in names if name.startswith("hugepages-")]
    rows = [
        [
            name,
            f"{bytes_text(used.get(name, 0))} ({percent(used.get(name, 0), offered.get(name, 0))})",
            NOT_KEPT,
        ]
        for name in huge
    ]
    return rows + [[name, str(used.get(name, 0)), NOT_KEPT] for name in names if name not in huge]


def describe_pod(entry: CachedPod, record: PodRecord, seen: Seen) -> list[str]:
    pod = entry.pod
    finished = ", binding finished" if record.binding_finished else ""
    lines = fields_text(
        [
            ("Name", [pod.name]),
            ("Namespace", [pod.namespace]),
            ("Priority", [str(pod.priority)]),
            ("Node", [pod.node_name or "<none>"]),
            ("Labels", labels_text(pod.labels)),
            ("Status", [pod_status(entry)]),
            ("UID", [pod.uid]),
            ("Cache State", [record.state + finished]),
            ("Requests", [f"{k}: {v}" for k, v in resource_list(pod.requests, pods=False).items()]),
            ("Node-Selectors", labels_text(pod.node_selector)),
            ("Tolerations", [":".join(p for p in t if p) for t in pod.tolerations]),
        ]
    )
    if pod.conditions:
        rows = [["----", "------"], *(list(c) for c in pod.conditions)]
        lines += ["Conditions:", *indent(table_text(("Type", "Status"), rows, False))]
    return lines + events_section(list(seen.pod_events.get(pod.uid, ())), seen.now_ms)


@click.command("describe")
@click.argument("kind", metavar="pod|node", callback=kind_of, shell_complete=complete_kinds)
@click.argument("names", metavar="[NAME]...", nargs=-1, type=Name(), shell_complete=complete_names)
@namespace_option
@click.pass_obj
def describe(settings: Settings, kind: str, names: tuple[str, ...], namespace: str | None) -> None:
    """A node or pod as `kubectl describe` shows it: labels, taints, allocatable, the pods on a
    node with their requests (and percentages of allocatable), the totals, and the object's
    newest events from the stream."""
    cache = settings.existing_cache()
    state = cache.dump()
    seen = Seen.read(cache)
    blocks: list[list[str]] = []
    if kind == "node":
        wanted = list(names) or sorted(state.nodes)
        missing = [n for n in wanted if n not in state.nodes]
        for name in wanted:
            if name in state.nodes:
                events = list(seen.node_events.get(name, ()))
                blocks.append(describe_node(name, state.nodes[name], seen, events))
    else:
        entries = cached_pods(state.nodes, state.assumed_pods)
        missing = []
        if names:
            entries, missing = find_pods(entries, names, namespace)
        else:
            entries = [e for e in entries if e.pod.namespace == (namespace or "default")]
        for entry in entries:
            record = cache.get_pod_record(entry.pod.uid)
            blocks.append(describe_pod(entry, record, seen))
    if blocks:
        click.echo("\n\n".join("\n".join(block) for block in blocks))
    if missing:
        not_found(kind, missing)
