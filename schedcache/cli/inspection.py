"""``schedcache dump``, ``events``, ``history``, ``replay``, ``diff``, ``verify``,
``checkpoint`` and ``compact``: looking at a cache.

Names in the output pass through ``cli_render.printable`` (the zone key holds a NUL byte by
construction), so ``schedcache events | grep NodeAdded`` sees text.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from schedcache.cache import Cache, Dump
from schedcache.cli.eventlines import PodNames, event_row
from schedcache.cli.params import (
    Count,
    Duration,
    Name,
    StreamId,
    TextParam,
    text_or_json_option,
)
from schedcache.cli.printing import table_text
from schedcache.cli.render import node_table, print_table, progress
from schedcache.cli.text import plural, printable
from schedcache.cli.units import bytes_text, cpu_text
from schedcache.cli.yamltext import yaml_text
from schedcache.feed.progress import truncated_pods
from schedcache.history.checkpoints import MAX_KEEP_EVENTS, history_start, read_checkpoint_id
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Resource
from schedcache.ops.gangwaits import wait_text, waits_of
from schedcache.sim.explain import explain_events, pod_history, pod_name
from schedcache.store.events import NODE_EVENTS, POD_EVENTS, Event, normal_stream_id
from schedcache.store.nominations import read_nomination, read_victims

EVENT_COLUMNS = ("ID", "TYPE", "AGE", "REPLICA", "OBJECT AND FIELDS")

if TYPE_CHECKING:
    from schedcache.cli.settings import Settings


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


def state_document(
    cache: Cache, nodes: dict[str, NodeInfo], assumed: set[str], generation: int, **extra: Any
) -> dict[str, Any]:
    """``dump`` and ``replay`` as a document for -o json and -o yaml."""
    return {
        "cache": cache.name,
        **extra,
        "generation": generation,
        "nodes": {name: node_info_json(info) for name, info in sorted(nodes.items())},
        "assumed_pods": sorted(assumed),
    }


OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["wide", "json", "yaml"]),
    default=None,
    help="A kubectl-like table (the default, as -o wide), or the whole state as JSON or YAML.",
)


@click.command()
@OUTPUT
@click.pass_obj
def dump(settings: Settings, output: str | None) -> None:
    """Every node entry (ghosts and placeholders too) with its pods, and the assumed pods.

    The table's STATUS is kubectl's: Ready/NotReady/Unknown from the node's Ready condition,
    ",SchedulingDisabled" when cordoned; Ghost (node removed, pods remain) or Placeholder (pods
    before their node) for entries without a node object."""
    cache = settings.existing_cache()
    state = cache.dump()
    _print_state(
        output,
        cache,
        state,
        f"assumed pods: {len(state.assumed_pods)}  generation: {state.generation}",
    )


def _print_state(output: str | None, cache: Cache, state: Dump, footer: str, **extra: Any) -> None:
    if output in ("json", "yaml"):
        document = state_document(cache, state.nodes, state.assumed_pods, state.generation, **extra)
        text = json.dumps(document, indent=2)
        if output == "yaml":
            text = yaml_text(json.loads(text))
        click.echo(text)
        return
    print_table(node_table(state.nodes))
    click.echo(footer)


class FollowTable:
    """``events --follow``'s table: later lines keep the first table's columns, as ``kubectl get
    -w``. The widths start from the header, the first rows and the longest event type; a later
    cell wider than its column (a new replica's longer name) widens it, and the header is
    printed again above that line, so every line lines up under the header above it."""

    def __init__(self, rows: list[list[str]], headers: bool) -> None:
        longest_type = ["", max(POD_EVENTS | NODE_EVENTS, key=len), "", "", ""]
        self.widths = self._widths([list(EVENT_COLUMNS), longest_type, *rows], [0] * 5)
        self.headers = headers
        if headers:
            click.echo(self._line(list(EVENT_COLUMNS)))
        for row in rows:
            click.echo(self._line(row))

    @staticmethod
    def _widths(rows: list[list[str]], widths: list[int]) -> list[int]:
        """``widths`` grown to hold ``rows`` (the last column is free: nothing follows it)."""
        grown = list(widths)
        for row in rows:
            for i, cell in enumerate(row[:-1]):
                grown[i] = max(grown[i], len(printable(cell)))
        return grown

    def _line(self, row: list[str]) -> str:
        cells = [printable(cell).ljust(width) for cell, width in zip(row, self.widths, strict=True)]
        return "   ".join(cells).rstrip()

    def add(self, row: list[str]) -> None:
        widths = self._widths([row], self.widths)
        if widths != self.widths:
            self.widths = widths
            if self.headers:
                click.echo(self._line(list(EVENT_COLUMNS)))
        click.echo(self._line(row))


def since_start(cache: Cache, since: str | None) -> str | None:
    """``--since``: an event id, or an age (``90s``, ``5m``, ``1h``, ``2d``): the XRANGE start
    (exclusive of an id, inclusive of a time)."""
    if since is None:
        return None
    normal = normal_stream_id(since)
    if normal is not None:
        return f"({normal}"
    seconds = Duration(maximum=10 * 365 * 86400.0).convert(since, None, None)
    return f"{int(time.time() * 1000 - seconds * 1000)}-0"


class Since(TextParam):
    """An event id or a duration, checked before anything connects."""

    name = "id|duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if normal_stream_id(text) is not None:
            return text
        try:
            Duration(maximum=10 * 365 * 86400.0).convert(text, param, ctx)
        except click.BadParameter:
            self.fail(
                f"'{printable(value)}' is neither an event id (<milliseconds>-<sequence>, as "
                "`schedcache events` prints them) nor a duration (90s, 5m, 1h, 2d)",
                param,
                ctx,
            )
        return text


@click.command()
@click.option(
    "--since",
    type=Since(),
    default=None,
    help="Start after this event id, or this long ago (5m, 1h, 2d, 90s).",
)
@click.option(
    "--count",
    type=Count("events", min=1, max=MAX_KEEP_EVENTS),  # XREVRANGE COUNT's bound
    default=None,
    help="Show only the last N events.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.option("--no-headers", is_flag=True, help="Leave out the header line.")
@click.pass_obj
def events(
    settings: Settings, since: str | None, count: int | None, follow: bool, no_headers: bool
) -> None:
    """The event stream, one aligned line per event: ID, TYPE, AGE, REPLICA, then the pod
    (namespace/name) or node and the event's fields (uid, node, gen, zone, ...)."""
    cache = settings.existing_cache()
    if count is not None:
        shown = cache.last_events(count)
    else:
        shown = list(cache.events(start=since_start(cache, since)))
    names = PodNames(cache)
    now_ms = int(time.time() * 1000)
    rows = [event_row(event, now_ms, names) for event in shown]
    if follow:
        table = FollowTable(rows, headers=not no_headers)
    else:
        text = table_text(EVENT_COLUMNS, rows, no_headers or not rows)
        if text:
            click.echo(text)
    last = shown[-1].id if shown else ("$" if count is not None or since else "0-0")
    if since and not shown and normal_stream_id(since) is not None:
        last = normal_stream_id(since) or last
    while follow:
        try:
            arrived = cache.wait_for_events(last, timeout=1.0)
        except KeyboardInterrupt:
            return
        now_ms = int(time.time() * 1000)
        for event in arrived:
            table.add(event_row(event, now_ms, names))
            last = event.id


@click.command()
@click.pass_obj
def verify(settings: Settings) -> None:
    """Replay the stream and compare with the live keys, check that Redis cannot evict them
    (maxmemory-policy) and that no cache-wide key was lost; exit status 1 on any difference."""
    cache = settings.existing_cache()
    differences = cache.verify()
    for difference in differences:
        click.echo(printable(difference))
    check = cache.store.eviction()
    if check.evicts:
        click.echo(check.problem(cache.name), err=True)
    elif check.policy is None and settings.is_shared():
        click.echo(f"note: maxmemory-policy not checked: {check.why}", err=True)
    if differences:
        click.echo(plural(len(differences), "difference"), err=True)
        sys.exit(1)
    click.echo(f"consistent: {plural(cache.stream_length(), 'event')} replay to the live state")
    click.echo(f"truncated pod records (stored without labels): {truncated_pods(cache.dump())}")


def replay_until(cache: Cache, until: str | None) -> Dump:
    """The fold up to event ``until`` (included), with a progress bar on a terminal; an id that
    is not in the stream is an error (HistoryCompacted too, reported by the CLI)."""
    with progress(Console(stderr=True), cache.stream_length(), "replaying") as advance:
        state = cache.replay(until=until, progress=advance)
    if until is not None and state.last_id != until:
        raise click.ClickException(f"event {until} is not in the stream of cache {cache.name}")
    return state


@click.command()
@click.option(
    "--until", type=StreamId(), default=None, help="Replay up to this event id (included)."
)
@OUTPUT
@click.pass_obj
def replay(settings: Settings, until: str | None, output: str | None) -> None:
    """The state the stream describes (at --until), shaped like `dump` (and the same table)."""
    cache = settings.existing_cache()
    state = replay_until(cache, until)
    footer = (
        f"assumed pods: {len(state.assumed_pods)}  generation: {state.generation}  "
        f"until: {state.last_id or '-'}"
    )
    _print_state(output, cache, state, footer, until=state.last_id)


@click.group()
def history() -> None:
    """The events of one object."""


@history.command("pod")
@click.argument("ref", metavar="NAMESPACE/NAME|NAME|UID", type=Name())
@click.pass_obj
def history_pod(settings: Settings, ref: str) -> None:
    """Every event of a pod, across nodes (by namespace/name: the pod's latest uid; a bare
    NAME that is no uid is in namespace default).

    A pod neither in the stream nor in the cache is an error; one whose events were compacted
    away prints what is left, with a note on stderr."""
    cache = settings.existing_cache()
    ref = pod_reference(cache, ref)
    uid = pod_uid(cache, ref)
    shown = cache.history(uid) if uid else []
    if not shown and (uid is None or cache.pod_state(uid) is None):
        raise click.ClickException(f"pod {ref} has no events in cache {cache.name}{bare_hint(ref)}")
    print_history(cache, shown)


def pod_reference(cache: Cache, ref: str) -> str:
    """``ref`` as ``pod_uid`` and ``pod_history`` read it: a bare ``NAME`` that is no uid the
    cache or its stream knows, and names a pod of namespace default that they know, is
    ``default/NAME``, as kubectl reads a name without ``-n`` (found in review: `history pod
    web-0` said the pod had no events where `get pod web-0` showed it). Anything else is left
    as given (a uid: a preemptor's nomination is found by it before the pod has events)."""
    if "/" in ref or cache.pod_state(ref) is not None:
        return ref
    events = [event for event in cache.events() if event.uid]
    if any(event.uid == ref for event in events):
        return ref
    named = f"default/{ref}"
    if any(pod_name(event) == named for event in events) or cache.filtered_list(
        lambda pod: pod.full_name == named
    ):
        return named
    return ref


def bare_hint(ref: str) -> str:
    """What an error about ``ref`` adds when it is a bare NAME read as a uid."""
    return "" if "/" in ref else " (read as a uid, or as default/NAME: give NAMESPACE/NAME)"


def pod_uid(cache: Cache, ref: str) -> str | None:
    """The uid ``NAMESPACE/NAME|UID`` means: by name, the pod's latest uid in the stream, else
    in the cache; None when neither knows it."""
    if "/" not in ref:
        return ref
    namespace, name = ref.split("/", 1)
    wanted = f"{namespace or 'default'}/{name}"
    matches = [e.uid for e in cache.events() if e.uid and pod_name(e) == wanted]
    live = cache.filtered_list(lambda p: (p.namespace, p.name) == (namespace, name))
    return matches[-1] if matches else (live[0].uid if live else None)


@click.group()
def explain() -> None:
    """Why an object is where it is (not `kubectl explain`, which documents API fields: this
    replays the claims of a pod against the state each ran on)."""


@explain.command("pod")
@click.argument("ref", metavar="NAMESPACE/NAME|NAME|UID", type=Name())
@text_or_json_option(
    "text: each claim and every node's verdict; json: the same as a list of claims."
)
@click.option(
    "--full",
    is_flag=True,
    help="Search the whole stream, not only from the checkpoint or the pod's latest stay.",
)
@click.pass_obj
def explain_pod(settings: Settings, ref: str, output: str, full: bool) -> None:
    """Each successful claim of a pod, against the state it ran on: every node's fit or
    kube-scheduler's reasons, the chosen node's free CPU and memory before and after, the
    replica, and how the claim ended (confirmed, forgotten, expired, removed) after how long.
    A pod never assumed (only added by an informer) has nothing to explain: an error. With a
    checkpoint, the search starts where the pod's latest stay began (or at the checkpoint for a
    pod it does not hold); --full searches the whole stream. A pod of a pod group waiting for
    its minMember (docs/gangs.md) is shown waiting ("gang: ...", on stderr with -o json), and a
    preemptor's nomination and victims (docs/preemption.md) first, on stderr with -o json."""
    cache = settings.existing_cache()
    ref = pod_reference(cache, ref)
    found = pod_history(cache, ref, full=full)
    claims = explain_events(cache, found.events, found.checkpoint)
    compacted = found.compacted_before
    if compacted:
        click.echo(f"note: the events before {compacted} were compacted away", err=True)
    # A preemptor waiting for its victims (docs/preemption.md); on stderr with -o json, as a
    # gang's wait: stdout keeps the list of claims.
    nomination = read_nomination(cache.store, found.uid or ref)
    if nomination is not None:
        node, until = nomination
        moment = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        to_stderr = output == "json"
        click.echo(
            f"nominated to node {printable(node)} (preemption) until {moment}", err=to_stderr
        )
        victims = read_victims(cache.store, found.uid or ref)
        names = ", ".join(printable(v) for v in victims) or "none"
        click.echo(f"  victims: {names}", err=to_stderr)
    waits = waits_of(cache, ref)  # a member waiting for its pod group (docs/gangs.md)
    for wait in waits:
        click.echo(wait_text(wait, int(time.time() * 1000)), err=output == "json")
    if not claims and (nomination is not None or waits):
        return
    if not claims:
        since = ""
        if found.searched_from and not compacted and not full:
            since = f" since {found.searched_from} (--full searches all)"
        elif found.searched_from:
            since = f" since {found.searched_from}"
        raise click.ClickException(
            f"pod {ref} has no claim (PodAssumed) in cache {cache.name}{since}{bare_hint(ref)}"
        )
    if output == "json":
        click.echo(json.dumps([claim.to_dict() for claim in claims], indent=2))
        return
    for claim in claims:
        after = f" after {claim.assumed_seconds:.3f} s ({claim.ended_by})" if claim.ended_by else ""
        click.echo(
            f"claim {claim.event_id} by {printable(claim.replica)} on {printable(claim.node)}: "
            f"{claim.ended}{after}"
        )
        before, later = claim.free_before, claim.free_after
        click.echo(
            f"  free on {printable(claim.node)}: cpu {cpu_text(before['milli_cpu'])} -> "
            f"{cpu_text(later['milli_cpu'])}, memory {bytes_text(before['memory'])} -> "
            f"{bytes_text(later['memory'])}"
        )
        fitting = [v.node for v in claim.verdicts if v.fits]
        click.echo(f"  {len(fitting)} of {plural(len(claim.verdicts), 'node')} fitted")
        for verdict in claim.verdicts:
            why = "fits" if verdict.fits else "; ".join(verdict.reasons)
            click.echo(f"  {printable(verdict.node)}\t{printable(why)}")


@history.command("node")
@click.argument("name", type=Name())
@click.pass_obj
def history_node(settings: Settings, name: str) -> None:
    """Every event that changed a node (its own and its pods'). A node neither in the stream
    nor in the cache is an error."""
    cache = settings.existing_cache()
    shown = cache.history_of_node(name)
    if not shown and not cache.has_node(name):
        raise click.ClickException(f"node {name} has no events in cache {cache.name}")
    print_history(cache, shown)


def print_history(cache: Cache, shown: list[Event]) -> None:
    """The events in ``events``' aligned columns (without its header line), pods named as
    there, and a note on stderr when older ones were compacted away."""
    names = PodNames(cache)
    now_ms = int(time.time() * 1000)
    text = table_text(EVENT_COLUMNS, [event_row(event, now_ms, names) for event in shown], True)
    if text:
        click.echo(text)
    start = history_start(cache.store)
    if start is not None:
        click.echo(f"note: events before {start} were compacted away", err=True)


@click.command()
@click.pass_obj
def checkpoint(settings: Settings) -> None:
    """Store the replayed state at the stream's last event (written in chunks)."""
    cache = settings.cache()
    click.echo(f"checkpoint at {cache.checkpoint()}")
    settings.note_if_embedded("the checkpoint")


@click.command()
@click.option(
    "--keep",
    type=click.IntRange(0, MAX_KEEP_EVENTS),
    default=0,
    show_default=True,
    help="Events to keep before the checkpoint.",
)
@click.pass_obj
def compact(settings: Settings, keep: int) -> None:
    """Trim the stream before the latest checkpoint; replay stays exact from it. A cache
    without a checkpoint is refused (run `schedcache checkpoint` first)."""
    cache = settings.existing_cache()
    if read_checkpoint_id(cache.store) is None:
        raise click.ClickException(
            f"cache {printable(cache.name)!r} has no checkpoint, so there is nothing to compact "
            "to: run `schedcache checkpoint` first"
        )
    removed = cache.compact(keep=keep)
    left = cache.stream_length()
    click.echo(f"removed {plural(removed, 'event')}; {left} remain{'s' if left == 1 else ''}")
    settings.note_if_embedded("the compaction")


@click.command()
@click.argument("start", metavar="ID_A", type=StreamId())
@click.argument("end", metavar="ID_B", type=StreamId())
@click.pass_obj
def diff(settings: Settings, start: str, end: str) -> None:
    """What changed on which node between two points of the stream (events ID_A and ID_B)."""
    cache = settings.existing_cache()
    old = replay_until(cache, start).nodes
    new = replay_until(cache, end).nodes
    changed = False
    for name in sorted(set(old) | set(new)):
        lines = node_changes(old.get(name), new.get(name))
        if lines:
            changed = True
            click.echo(f"node {printable(name)}")
            for line in lines:
                click.echo(f"  {printable(line)}")
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
    for label, a, b, unit in (
        ("cpu requested", old.requested.milli_cpu, new.requested.milli_cpu, cpu_text),
        ("memory requested", old.requested.memory, new.requested.memory, bytes_text),
        ("cpu allocatable", old.allocatable.milli_cpu, new.allocatable.milli_cpu, cpu_text),
        ("memory allocatable", old.allocatable.memory, new.allocatable.memory, bytes_text),
    ):
        if a != b:
            lines.append(f"{label}: {unit(a)} -> {unit(b)}")
    return lines
