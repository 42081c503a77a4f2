"""Rendering for the command line with rich: the node table, summaries, progress bars. Every
cell goes through :func:`printable` (:mod:`schedcache.cli.text`); tables get
:class:`rich.text.Text` cells, which rich never parses as markup or emoji codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from schedcache.cli.text import node_status, printable
from schedcache.cli.units import bytes_text, cpu_text
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import ZONE_LABEL

if TYPE_CHECKING:
    from schedcache.sim.simulation import SimulationReport


def cell(value: object) -> Text:
    """A table cell that rich shows literally (no markup, no emoji codes)."""
    return Text(printable(value))


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
