"""``schedcache whatif``: what other placement policies would have done at a moment."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from schedcache.cli.params import StreamId, text_or_json_option
from schedcache.cli.render import cell, print_table
from schedcache.cli.text import plural, printable, zone_text
from schedcache.errors import ValidationError
from schedcache.history.checkpoints import stream_id
from schedcache.model.manifests import load_k8s_file
from schedcache.model.values import Pod

if TYPE_CHECKING:
    from schedcache.cache import Cache
    from schedcache.cli.settings import Settings
    from schedcache.sim.gang import WaitingGroup
    from schedcache.sim.whatif import WhatIf

# (numpy is a base dependency: only a broken install gets here; --html draws its own SVG)
WHATIF_MISSING = "schedcache whatif needs numpy: pip install 'schedcache[whatif]'"
SHOWN = 20  # differing placements listed in the text output


@click.command("whatif")
@click.option("--at", "at", type=StreamId(), required=True, help="The moment: an event id.")
@click.option(
    "--until",
    type=StreamId(),
    help="Place only the pods claimed up to this event (default: to the stream's end).",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    metavar="NAME|MODULE:FUNCTION",
    help="A policy to compare (repeatable): least-allocated, most-allocated, or a callable "
    "(snapshot, pod) -> node name or None, as module:function or path/file.py:function. "
    "Default: both built-ins.",
)
@click.option(
    "--pods",
    "pods_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Pending pods to place (JSON or YAML manifests); default: the pods claimed after --at.",
)
@text_or_json_option(
    "text: the tables; json: every placement, reason and utilisation (docs/whatif.md)."
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write a self-contained page with the utilisation plots.",
)
@click.pass_obj
def whatif(
    settings: Settings,
    at: str,
    until: str | None,
    policies: tuple[str, ...],
    pods_file: str | None,
    output: str,
    html_path: str | None,
) -> None:
    """Replay the cache to --at, place the pending pods with each policy on a scratch copy of
    the cluster as it was then, and compare with what happened: placements that differ, pods
    unschedulable under each, per-node and per-zone utilisation."""
    try:
        import numpy  # noqa: F401  # the built-in policies score on numpy arrays

        from schedcache.sim.gang import waiting_groups
        from schedcache.sim.policies import BUILT_IN, load_policy
        from schedcache.sim.whatif import what_if
    except ImportError:
        raise click.ClickException(WHATIF_MISSING) from None
    if html_path == "":
        raise click.BadParameter("must name a file", param_hint="--html")
    if html_path:
        _check_html_path(html_path)
    chosen = {spec: load_policy(spec) for spec in policies} if policies else dict(BUILT_IN)
    pods = _pods(pods_file) if pods_file else None
    cache = settings.existing_cache()
    _check_in_stream(cache, "--at", at)
    if until is not None and stream_id(until) <= stream_id(at):
        raise click.ClickException(f"--until {until} is not after --at {at}")
    with contextlib.redirect_stdout(sys.stderr):  # what a policy prints stays out of -o json
        result = what_if(cache, at, chosen, pods, until)
    waits = waiting_groups(cache, cache.at(at))
    if not result.pods:
        window = f"between {at} and {until}" if until else f"after {at}"
        waiting = f"; {_waits_line(waits)}" if waits else ""
        raise click.ClickException(f"no pods to place: none was claimed {window}{waiting}")
    if html_path:
        from schedcache.sim.report import MISSING, write_report

        try:
            write_report(result, html_path)
        except ImportError:
            raise click.ClickException(MISSING) from None
        except OSError as error:
            reason = error.strerror or str(error)
            raise click.ClickException(f"--html {printable(html_path)}: {reason}") from None
    if output == "json":
        click.echo(
            json.dumps({**result.to_dict(), "gang_waits": [w.to_dict() for w in waits]}, indent=2)
        )
    else:
        _print(result)
        _print_waits(waits, at)
    if html_path:
        click.echo(f"report written to {printable(html_path)}", err=output == "json")


def _check_in_stream(cache: Cache, option: str, event_id: str) -> None:
    """A moment before the stream's first event or after its last is an error naming both:
    before the start the replay would be an empty cluster, after the end nothing to place."""
    first = next(iter(cache.events(count=1)), None)
    last = cache.last_events(1)
    if first is None or not last:
        raise click.ClickException(f"cache {cache.name} has no events: nothing to replay")
    start, end = first.id, last[0].id
    if not stream_id(start) <= stream_id(event_id) <= stream_id(end):
        side = "before the first" if stream_id(event_id) < stream_id(start) else "after the last"
        raise click.ClickException(
            f"{option} {event_id} is {side} event of cache {cache.name}: its stream runs from "
            f"{start} to {end}"
        )


def _pods(path: str) -> list[Pod]:
    try:
        objects = load_k8s_file(Path(path))
    except ValidationError as error:
        raise click.ClickException(f"--pods {printable(path)}: {error}") from None
    nodes = [o for o in objects if not isinstance(o, Pod)]
    if nodes:
        raise click.ClickException(f"{printable(path)}: --pods takes pods only, not nodes")
    pods = [o for o in objects if isinstance(o, Pod)]
    if not pods:
        raise click.ClickException(f"{printable(path)}: no pods in the file")
    names: dict[str, str] = {}
    for pod in pods:
        if pod.uid in names:
            raise click.ClickException(
                f"{printable(path)}: uid {printable(pod.uid)} is both {printable(names[pod.uid])} "
                f"and {printable(pod.full_name)}"
            )
        names[pod.uid] = pod.full_name
    return pods


def _check_html_path(path: str) -> None:
    """A usage error, before the replay (which may take a while), for an ``--html`` path that
    cannot be a file to write: one that ends in a separator, or whose directory does not exist
    or is no directory (found in review: a bare errno after the whole replay; ``newdir/``
    written as a file named ``newdir``)."""
    shown = printable(path)
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise click.BadParameter(f"{shown}: must name a file, not a directory", param_hint="--html")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        why = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise click.BadParameter(
            f"{shown}: its directory {printable(parent)} {why}", param_hint="--html"
        )


def _print(result: WhatIf) -> None:
    before = result.before
    click.echo(
        f"what-if at {result.at}: {plural(len(result.pods), 'pod')} on "
        f"{plural(len(before.nodes), 'node')} "
        f"(before: cpu {before.cluster.cpu:.1%}, memory {before.cluster.memory:.1%}, "
        f"{plural(before.cluster.pods, 'pod')})"
    )
    summary = Table(box=None, pad_edge=False)
    for column in ("POLICY", "PLACED", "NOT PLACED", "ELSEWHERE", "NODES USED", "CPU", "MEM"):
        summary.add_column(column)
    for outcome in result.outcomes:
        elsewhere = "-" if outcome.policy == "actual" else len(result.differing(outcome.policy))
        cluster = outcome.after.cluster
        summary.add_row(
            cell(outcome.policy),
            str(outcome.placed),
            str(len(outcome.unschedulable)),
            str(elsewhere),
            str(outcome.after.nodes_in_use),
            f"{cluster.cpu:.1%}",
            f"{cluster.memory:.1%}",
        )
    print_table(summary)
    zones = Table(box=None, pad_edge=False, title="cpu / memory per zone")
    zones.add_column("ZONE")
    columns = [("before", before)] + [(o.policy, o.after) for o in result.outcomes]
    for name, _ in columns:
        zones.add_column(printable(name).upper())
    for zone in before.zones:
        cells = [f"{u.zones[zone].cpu:.0%} / {u.zones[zone].memory:.0%}" for _, u in columns]
        zones.add_row(cell(zone_text(zone)), *cells)
    print_table(zones)
    for outcome in result.outcomes:
        unschedulable = outcome.unschedulable
        if unschedulable:
            pods = plural(len(unschedulable), "pod")
            click.echo(f"{outcome.policy}: {pods} unschedulable, first:")
            for uid in unschedulable[:SHOWN]:
                why = outcome.reasons.get(uid) or "no reason recorded"
                click.echo(f"  {printable(result.pods[uid])}\t{printable(why)}")
                chosen = outcome.preemptions.get(uid)
                if chosen and chosen["node"]:
                    victims = ", ".join(chosen["victims"]) or "none"
                    line = f"preemption: node {chosen['node']}, evicting {victims}"
                    click.echo(f"    {printable(line)}")
                elif chosen:
                    click.echo(f"    {printable(chosen['message'])}")
    for outcome in result.outcomes[1:]:
        differing = result.differing(outcome.policy)
        if differing:
            pods = plural(len(differing), "pod")
            click.echo(f"{outcome.policy}: {pods} placed elsewhere, first:")
            actual = result.outcomes[0].placements
            for uid in differing[:SHOWN]:
                mine = outcome.placements[uid] or f"unschedulable ({outcome.reasons[uid]})"
                click.echo(
                    f"  {printable(result.pods[uid])}\t{printable(actual.get(uid) or '-')}"
                    f" -> {printable(mine)}"
                )


def _waits_line(waits: list[WaitingGroup]) -> str:
    names = ", ".join(printable(w.group) for w in waits)
    return f"{len(waits)} pod groups wait for members, claiming nothing: {names}"


def _print_waits(waits: list[WaitingGroup], at: str) -> None:
    """The pod groups waiting for members (docs/gangs.md): how many are pending of
    ``minMember``, and whether those pending would fit, placed together, at ``at``."""
    if not waits:
        return
    click.echo(f"gang waits (holding no room); would the pending members fit together at {at}:")
    for wait in waits:
        wanted = "?" if wait.min_member is None else str(wait.min_member)
        short = "" if wait.min_member is not None else " (no PodGroup in the cache)"
        fits = "yes" if wait.fits else f"no: {wait.why}"
        click.echo(
            f"  {printable(wait.group)}\t{len(wait.pending)}/{wanted} members pending{short}"
            f"\tfits: {printable(fits)}"
        )
