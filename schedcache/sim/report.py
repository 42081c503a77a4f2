"""``whatif --html``: one self-contained page to look at rather than read.

Per node CPU and memory utilisation before the moment and after each outcome (what happened,
then each policy), nodes in node-tree order; the nodes ranked from fullest to emptiest; per
zone the same; and the summary table. The charts are SVG drawn here, in Python: no script and
no plotting library in the page (plotly's JavaScript made a page for 6 nodes weigh 4.8 MB),
so it opens offline, prints, and weighs what its bars do. Hovering a bar shows its value.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from schedcache.sim.whatif import WhatIf

# One colour per outcome, the same in every chart.
PALETTE = ("#9e9e9e", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#17becf")
# Kept for callers that catch it: the page needs no optional package any more.
MISSING = "whatif --html could not write the page"

Series = tuple[str, str, Sequence[float]]  # name, colour, one value per category

BAR = 12  # px per bar
GAP = 10  # px between groups of bars
HEIGHT = 220  # px of the plotting area
LEFT, BOTTOM, TOP = 80, 80, 10  # margins: axis and (slanted) category labels


def write_report(result: WhatIf, path: str | Path) -> None:
    """Write the page to ``path``."""
    Path(path).write_text(page(result), encoding="utf-8")


def time_of(stream_id: str) -> str:
    """A stream id (``<ms>-<seq>``, the Redis server's clock) as a time a person reads:
    ``2026-11-28 16:57:03.123 UTC``; the id itself where it is not one."""
    milliseconds, _, _ = stream_id.partition("-")
    try:
        when = datetime.fromtimestamp(int(milliseconds) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return stream_id
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} UTC"


def page(result: WhatIf) -> str:
    """The whole page: title, summary table, legend and the four charts."""
    columns = [("before", result.before)] + [(o.policy, o.after) for o in result.outcomes]
    colours = {name: PALETTE[i % len(PALETTE)] for i, (name, _) in enumerate(columns)}
    nodes = list(result.before.nodes)
    zones = list(result.before.zones)

    def per(what: str, keys: list[str], zone: bool = False) -> list[Series]:
        out: list[Series] = []
        for name, usage in columns:
            table = usage.zones if zone else usage.nodes
            out.append((name, colours[name], [getattr(table[k], what) for k in keys]))
        return out

    ranked: list[Series] = [
        (name, colour, sorted(values, reverse=True)) for name, colour, values in per("cpu", nodes)
    ]
    charts = [
        bars("CPU requested / allocatable, per node (node-tree order)", nodes, per("cpu", nodes)),
        bars("Memory requested / allocatable, per node", nodes, per("memory", nodes)),
        lines("CPU share of each node, nodes sorted from fullest to emptiest", len(nodes), ranked),
        bars("CPU requested / allocatable, per zone", zones, per("cpu", zones, zone=True)),
    ]
    when = time_of(result.at)
    title = f"schedcache what-if: {len(result.pods)} pods after {when}"
    legend = "".join(
        f'<li><span style="background:{colour}"></span>{html.escape(name)}</li>'
        for name, colour in colours.items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 12px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}figure{{margin:1.5em 0;overflow-x:auto}}
figcaption{{font-weight:bold;margin-bottom:.3em}}svg text{{font-size:11px;fill:#333}}
#legend{{list-style:none;padding:0}}#legend li{{display:inline-block;margin-right:1.5em}}
#legend span{{display:inline-block;width:12px;height:12px;margin-right:.4em}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>The cluster as it was just after event <code>{html.escape(result.at)}</code> ({when}):
{len(nodes)} nodes; each policy placed the pods claimed after it. "placed elsewhere" counts the
pods a policy put on another node than the one they were claimed on.</p>
{summary(result)}
<ul id="legend">{legend}</ul>
{"".join(charts)}
</body></html>
"""


def summary(result: WhatIf) -> str:
    rows = []
    for outcome in result.outcomes:
        differ = "" if outcome.policy == "actual" else str(len(result.differing(outcome.policy)))
        cluster = outcome.after.cluster
        cells = (
            outcome.policy,
            outcome.placed,
            len(outcome.unschedulable),
            differ,
            outcome.after.nodes_in_use,
            f"{cluster.cpu:.1%}",
            f"{cluster.memory:.1%}",
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = ("policy", "placed", "not placed", "placed elsewhere", "nodes used", "cpu", "memory")
    header = "".join(f"<th>{h}</th>" for h in head)
    return f'<table id="summary"><tr>{header}</tr>{"".join(rows)}</table>'


def _top(series: Sequence[Series]) -> float:
    """The y axis' top: 100 %, or more when something is over (a whole number of quarters)."""
    highest = max((v for _, _, values in series for v in values), default=0.0)
    quarters = 4
    while quarters / 4 < highest:
        quarters += 1
    return quarters / 4


def _axes(width: int, top: float) -> list[str]:
    """Horizontal grid lines with percentage labels, every 25 %."""
    out = []
    steps = round(top * 4)
    for step in range(steps + 1):
        y = TOP + HEIGHT - HEIGHT * step / steps
        out.append(
            f'<line x1="{LEFT}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{25 * step}%</text>'
        )
    return out


def _figure(caption: str, width: int, body: list[str]) -> str:
    height = TOP + HEIGHT + BOTTOM
    return (
        f"<figure><figcaption>{html.escape(caption)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        f"{''.join(body)}</svg></figure>"
    )


def bars(caption: str, categories: list[str], series: Sequence[Series]) -> str:
    """Grouped bars: one group per category, one bar per series, a tooltip on each."""
    group = BAR * len(series) + GAP
    width = LEFT + group * len(categories) + GAP
    top = _top(series)
    body = _axes(width, top)
    for index, category in enumerate(categories):
        x0 = LEFT + GAP + group * index
        for number, (name, colour, values) in enumerate(series):
            value = values[index]
            height = HEIGHT * max(value, 0.0) / top
            tip = html.escape(f"{category}, {name}: {value:.1%}")
            body.append(
                f'<rect class="bar" x="{x0 + BAR * number}" y="{TOP + HEIGHT - height:.1f}" '
                f'width="{BAR - 1}" height="{height:.1f}" fill="{colour}"><title>{tip}</title>'
                "</rect>"
            )
        middle = x0 + BAR * len(series) / 2
        body.append(
            f'<text x="{middle:.1f}" y="{TOP + HEIGHT + 12}" text-anchor="end" '
            f'transform="rotate(-45 {middle:.1f} {TOP + HEIGHT + 12})">'
            f"{html.escape(category)}</text>"
        )
    return _figure(caption, max(width, 320), body)


def lines(caption: str, count: int, series: Sequence[Series]) -> str:
    """One line per series over positions 1..count (ranked values)."""
    step = max(BAR, min(40, 600 // max(count, 1)))
    width = LEFT + GAP + step * max(count - 1, 1) + GAP
    top = _top(series)
    body = _axes(width, top)
    for name, colour, values in series:
        points = " ".join(
            f"{LEFT + GAP + step * i},{TOP + HEIGHT - HEIGHT * max(v, 0.0) / top:.1f}"
            for i, v in enumerate(values)
        )
        body.append(
            f'<polyline class="line" points="{points}" fill="none" stroke="{colour}" '
            f'stroke-width="2"><title>{html.escape(name)}</title></polyline>'
        )
    for i in range(count):
        if count <= 40 or i % (count // 20) == 0:
            x = LEFT + GAP + step * i
            body.append(
                f'<text x="{x}" y="{TOP + HEIGHT + 14}" text-anchor="middle">{i + 1}</text>'
            )
    return _figure(caption, max(width, 320), body)
