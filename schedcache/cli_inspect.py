"""``schedcache dump``, ``get pod`` and ``events``: looking at a cache."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from schedcache.errors import CacheError
from schedcache.events import Event, decode_entry
from schedcache.models import Resource
from schedcache.nodeinfo import NodeInfo

if TYPE_CHECKING:
    from schedcache.cli import Settings


def resource_json(resource: Resource) -> dict[str, Any]:
    return resource.to_dict()


def node_info_json(info: NodeInfo) -> dict[str, Any]:
    return {
        "node": info.node.to_dict() if info.node else None,
        "ghost": info.node is None,
        "generation": info.generation,
        "pods": [f"{pod.namespace}/{pod.name}" for pod in info.pods],
        "requested": resource_json(info.requested),
        "non_zero_requested": resource_json(info.non_zero_requested),
        "allocatable": resource_json(info.allocatable),
        "used_ports": sorted(f"{ip}:{port}/{protocol}" for ip, protocol, port in info.used_ports),
        "pvc_ref_counts": dict(sorted(info.pvc_ref_counts.items())),
        "image_states": {
            image: {"size": state.size, "num_nodes": state.num_nodes}
            for image, state in sorted(info.image_states.items())
        },
    }


@click.command()
@click.option(
    "-o",
    "--output",
    type=click.Choice(["json", "wide"]),
    default="json",
    show_default=True,
    help="JSON, or a kubectl-like table.",
)
@click.pass_obj
def dump(settings: Settings, output: str) -> None:
    """Every node entry (ghosts and placeholders too) with its pods, and the assumed pods."""
    cache = settings.cache()
    state = cache.dump()
    if output == "json":
        document = {
            "cache": cache.name,
            "generation": state.generation,
            "nodes": {name: node_info_json(info) for name, info in sorted(state.nodes.items())},
            "assumed_pods": sorted(state.assumed_pods),
        }
        click.echo(json.dumps(document, indent=2))
        return
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "STATUS", "ZONE", "PODS", "CPU", "MEMORY", "PORTS", "GEN"):
        table.add_column(column)
    for name, info in sorted(state.nodes.items()):
        status = (
            "Ready" if info.node else ("Ghost" if info.allocatable.milli_cpu else "Placeholder")
        )
        zone = info.node.labels.get("topology.kubernetes.io/zone", "") if info.node else ""
        alloc, used = info.allocatable, info.requested
        table.add_row(
            name,
            status,
            zone or "<none>",
            f"{len(info.pods)}/{alloc.allowed_pod_number}",
            f"{used.milli_cpu}m/{alloc.milli_cpu}m",
            f"{used.memory >> 20}Mi/{alloc.memory >> 20}Mi",
            str(len(info.used_ports)),
            str(info.generation),
        )
    Console(width=200).print(table)
    click.echo(f"assumed pods: {len(state.assumed_pods)}  generation: {state.generation}")


@click.group()
def get() -> None:
    """Show one object."""


@get.command("pod")
@click.argument("ref", metavar="NAMESPACE/NAME|UID")
@click.pass_obj
def get_pod(settings: Settings, ref: str) -> None:
    """A pod's cache record as JSON: state, node, binding, deadline and the pod."""
    cache = settings.cache()
    if "/" in ref:
        namespace, name = ref.split("/", 1)
        matches = cache.filtered_list(lambda p: (p.namespace, p.name) == (namespace, name))
        if not matches:
            raise click.ClickException(f"pod {ref} is not in cache {cache.name}")
        uid = matches[0].uid
    else:
        uid = ref
    try:
        record = cache.get_pod_record(uid)
    except KeyError as error:
        raise click.ClickException(str(error)) from None
    click.echo(
        json.dumps(
            {
                "state": record.state,
                "node": record.node,
                "binding_finished": record.binding_finished,
                "deadline_ms": record.deadline_ms,
                "generation": record.generation,
                "contribution": record.contribution,
                "pod": record.pod.to_dict(),
            },
            indent=2,
        )
    )


def event_line(event: Event) -> str:
    subject = event.uid or event.node or ""
    extra = " ".join(
        f"{key}={value}" for key, value in sorted(event.fields.items()) if key not in ("uid",)
    )
    return f"{event.id}  {event.type:<15} {event.replica or '-':<14} {subject}  {extra}".rstrip()


@click.command()
@click.option("--since", default=None, metavar="ID", help="Start after this stream id.")
@click.option("--count", default=None, type=int, help="Show only the last N events.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.pass_obj
def events(settings: Settings, since: str | None, count: int | None, follow: bool) -> None:
    """The event stream, one line per event: id, type, replica, pod or node, fields."""
    cache = settings.cache()
    if count is not None:
        history = reversed(cache.client.xrevrange(cache.keys.events, count=count))
        shown = [decode_entry(entry_id, raw) for entry_id, raw in history]
    else:
        shown = list(cache.events(start=f"({since}" if since else None))
    last = since or "0-0"
    for event in shown:
        click.echo(event_line(event))
        last = event.id
    if count is not None and not shown:
        last = "$"
    while follow:
        try:
            reply = cache.client.xread({cache.keys.events: last}, block=1000, count=500)
        except KeyboardInterrupt:
            return
        for _, entries in reply or []:
            for entry_id, raw in entries:
                event = decode_entry(entry_id, raw)
                click.echo(event_line(event))
                last = event.id


@click.command()
@click.pass_obj
def verify(settings: Settings) -> None:
    """Replay the stream and compare with the live keys; exit status 1 on any difference."""
    cache = settings.cache()
    differences = cache.verify()
    for difference in differences:
        click.echo(str(difference))
    if differences:
        click.echo(f"{len(differences)} differences", err=True)
        sys.exit(1)
    click.echo(f"consistent: {cache.stream_length()} events replay to the live state")


@click.command()
@click.option("--until", default=None, metavar="ID", help="Replay up to this event (included).")
@click.option(
    "-o", "--output", type=click.Choice(["json", "wide"]), default="json", show_default=True
)
@click.pass_obj
def replay(settings: Settings, until: str | None, output: str) -> None:
    """The state the stream describes (at --until), shaped like `dump`."""
    cache = settings.cache()
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("replaying", total=cache.stream_length())
        state = cache.replay(until=until, progress=lambda n: bar.advance(task, n))
    if until is not None and state.last_id != until:
        raise click.ClickException(f"event {until} is not in the stream of cache {cache.name}")
    nodes = state.node_infos()
    if output == "json":
        document = {
            "cache": cache.name,
            "until": state.last_id,
            "generation": state.generation,
            "nodes": {name: node_info_json(info) for name, info in sorted(nodes.items())},
            "assumed_pods": sorted(state.assumed_pods),
        }
        click.echo(json.dumps(document, indent=2))
        return
    for name, info in sorted(nodes.items()):
        status = "Ready" if info.node else "Ghost"
        click.echo(f"{name}\t{status}\t{len(info.pods)} pods\t{info.requested.milli_cpu}m")


@click.group()
def history() -> None:
    """The events of one object."""


@history.command("pod")
@click.argument("ref", metavar="NAMESPACE/NAME|UID")
@click.pass_obj
def history_pod(settings: Settings, ref: str) -> None:
    """Every event of a pod (by uid), across nodes."""
    cache = settings.cache()
    uid = ref
    if "/" in ref:
        namespace, name = ref.split("/", 1)
        matches = [
            e.uid
            for e in cache.events()
            if e.uid
            and isinstance(e.data, dict)
            and (e.data.get("namespace"), e.data.get("name")) == (namespace, name)
        ]
        if not matches:
            raise click.ClickException(f"pod {ref} has no events in cache {cache.name}")
        uid = matches[-1]
    for event in cache.history(uid):
        click.echo(event_line(event))


@history.command("node")
@click.argument("name")
@click.pass_obj
def history_node(settings: Settings, name: str) -> None:
    """Every event that changed a node (its own and its pods')."""
    cache = settings.cache()
    for event in cache.history_of_node(name):
        click.echo(event_line(event))


@click.command()
@click.pass_obj
def checkpoint(settings: Settings) -> None:
    """Store the replayed state at the stream's last event (written in chunks)."""
    cache = settings.cache()
    click.echo(f"checkpoint at {cache.checkpoint()}")


@click.command()
@click.option("--keep", default=0, show_default=True, help="Events to keep before the checkpoint.")
@click.pass_obj
def compact(settings: Settings, keep: int) -> None:
    """Trim the stream before the latest checkpoint; replay stays exact from it."""
    cache = settings.cache()
    try:
        removed = cache.compact(keep=keep)
    except CacheError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"removed {removed} events; {cache.stream_length()} remain")


@click.command()
@click.argument("start", metavar="ID_A")
@click.argument("end", metavar="ID_B")
@click.pass_obj
def diff(settings: Settings, start: str, end: str) -> None:
    """What changed on which node between two points of the stream (events ID_A and ID_B)."""
    cache = settings.cache()
    before, after = cache.replay(until=start), cache.replay(until=end)
    old, new = before.node_infos(), after.node_infos()
    changed = False
    for name in sorted(set(old) | set(new)):
        lines = node_changes(old.get(name), new.get(name))
        if lines:
            changed = True
            click.echo(f"node {name}")
            for line in lines:
                click.echo(f"  {line}")
    if not changed:
        click.echo(f"no node changed between {start} and {end}")


def node_changes(old: NodeInfo | None, new: NodeInfo | None) -> list[str]:
    if old is None:
        return ["added" if new and new.node else "appeared (pods before their node)"]
    if new is None:
        return ["gone"]
    lines = []
    if (old.node is None) != (new.node is None):
        lines.append("removed, pods remain (ghost)" if new.node is None else "node object set")
    old_pods = {f"{p.namespace}/{p.name}" for p in old.pods}
    new_pods = {f"{p.namespace}/{p.name}" for p in new.pods}
    lines += [f"+ pod {name}" for name in sorted(new_pods - old_pods)]
    lines += [f"- pod {name}" for name in sorted(old_pods - new_pods)]
    for label, a, b in (
        ("cpu requested", old.requested.milli_cpu, new.requested.milli_cpu),
        ("memory requested", old.requested.memory, new.requested.memory),
        ("cpu allocatable", old.allocatable.milli_cpu, new.allocatable.milli_cpu),
    ):
        if a != b:
            lines.append(f"{label}: {a} -> {b}")
    return lines
