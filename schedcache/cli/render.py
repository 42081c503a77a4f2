"""Rendering for the command line: names made safe to print, the node table, progress bars.

Everything the CLI prints that came from a user, a manifest or Redis (node, pod and zone names,
error messages, event fields) goes through :func:`printable` first. Kubernetes names are not
guaranteed to be tame by the time they reach us: the zone key is ``region:\\0:zone`` by
construction (as upstream's ``GetZoneKey``), and a manifest can carry control characters,
terminal escape sequences, lone surrogates or rich markup (``a[/]``). Printed raw they make
``grep`` call the output binary, rewrite the user's terminal, crash the encoder or crash rich.
Tables get :class:`rich.text.Text` cells, which rich never parses as markup or emoji codes.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from schedcache.cli.units import bytes_text, cpu_text
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import ZONE_LABEL, Node
from schedcache.sim.simulation import SimulationReport

# Unicode categories never printed as they are: controls (C0, DEL, C1), format characters
# (bidi overrides, zero-width joiners), surrogates (unencodable), line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """``str(value)`` with every control, format or surrogate character escaped as Python
    writes it (``\\x00``, ``\\x1b``, ``\\u202e``, ``\\udc80``): one line, plain text, safe for
    a terminal, ``grep`` and any encoder."""
    text = str(value)
    if text.isprintable():  # the common case, in C
        return text
    return "".join(
        _escape(c) if c != " " and unicodedata.category(c) in _UNPRINTABLE else c for c in text
    )


def one_line(value: object) -> str:
    """An error message as one printable line: line breaks become ``; `` (a YAML error spans
    several lines), everything else as :func:`printable`."""
    lines = [line.strip() for line in str(value).splitlines()]
    return printable("; ".join(line for line in lines if line))


def zone_text(value: str) -> str:
    """A zone key (``region:\\x00:zone``, upstream's ``GetZoneKey``) as a person writes it:
    ``region/zone``."""
    return value.replace(":\x00:", "/")


def cell(value: object) -> Text:
    """A table cell that rich shows literally (no markup, no emoji codes)."""
    return Text(printable(value))


# -- node status, as kubectl prints it -------------------------------------------------------


def node_status(info: NodeInfo) -> str:
    """STATUS of ``kubectl get nodes`` for a live node: the Ready condition (``Ready``,
    ``NotReady``, ``Unknown`` when it is missing or unknown) and ``,SchedulingDisabled`` for a
    cordoned node. An entry without a node object is a ``Ghost`` (removed, pods remain) or a
    ``Placeholder`` (pods arrived before their node)."""
    node = info.node
    if node is None:
        return "Ghost" if info.allocatable.milli_cpu else "Placeholder"
    status = ready_condition(node)
    return f"{status},SchedulingDisabled" if node.unschedulable else status


def ready_condition(node: Node) -> str:
    """``Ready``/``NotReady`` from the node's ``Ready`` condition; ``Unknown`` when it is
    unknown or missing (never a guessed ``Ready``)."""
    return {"True": "Ready", "False": "NotReady"}.get(node.ready, "Unknown")


def zone_of(info: NodeInfo) -> str:
    if info.node is None:
        return ""
    return info.node.labels.get(ZONE_LABEL, "")


def node_table(nodes: Mapping[str, NodeInfo], title: str | None = None) -> Table:
    """The kubectl-like table of ``dump -o wide``, ``replay -o wide`` and the demo."""
    table = Table(box=None, pad_edge=False, title=cell(title) if title else None)
    for column in ("NAME", "STATUS", "ZONE", "PODS", "CPU", "MEMORY", "PORTS", "GEN"):
        table.add_column(column)
    for name, info in sorted(nodes.items(), key=lambda item: (len(item[0]), item[0])):
        alloc, used = info.allocatable, info.requested
        table.add_row(
            cell(name),
            cell(node_status(info)),
            cell(zone_of(info) or "<none>"),  # the zone label, not the zone key
            f"{len(info.pods)}/{alloc.allowed_pod_number}",
            f"{cpu_text(used.milli_cpu)}/{cpu_text(alloc.milli_cpu)}",
            f"{bytes_text(used.memory)}/{bytes_text(alloc.memory)}",
            str(len(info.used_ports)),
            str(info.generation),
        )
    return table


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` wide enough that no row wraps (pipes and files have no width)."""
    (console or Console(width=200)).print(table)


# -- progress ---------------------------------------------------------------------------------


@contextmanager
def progress(console: Console, total: int | None, what: str) -> Iterator[Callable[[int], None]]:
    """A transient progress bar on ``console`` while the block runs, only on a terminal (to a
    pipe or file a bar is noise, and rich would leave a blank line). Yields ``advance(n)``."""
    if not console.is_terminal:
        yield lambda _n: None
        return
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def summary_table(title: str, rows: list[tuple[str, Any]], caption: str | None = None) -> Table:
    """A two-column ``what | value`` table (the demo's summaries)."""
    table = Table(title=title, show_header=False, caption=caption)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in rows:
        table.add_row(cell(what), cell(value))
    return table


def replica_table(report: SimulationReport) -> Table:
    """One row per replica process of ``demo --redis``."""
    table = Table(title=f"{len(report.replicas)} replica processes, {report.mode} claims")
    for column in ("replica", "claimed", "conflicts", "unschedulable", "seconds"):
        table.add_column(column, justify="left" if column == "replica" else "right")
    for replica in report.replicas:
        table.add_row(
            cell(replica.replica),
            str(replica.claimed),
            str(replica.conflicts),
            str(replica.unschedulable),
            f"{replica.seconds:.2f}",
        )
    return table
