"""``whatif --html``: one self-contained page to look at rather than read.

Per node CPU and memory utilisation before the moment and after each outcome (what happened,
then each policy), nodes in node-tree order; per zone the same; and the summary table. Plotly
draws it; its JavaScript is written into the page, so it opens offline (no CDN).
"""

from __future__ import annotations

import html
from pathlib import Path

from schedcache.sim.whatif import WhatIf

# One colour per outcome, the same in every plot (plotly's default cycles per trace).
PALETTE = ("#9e9e9e", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#17becf")
MISSING = "whatif --html needs plotly: pip install 'schedcache[whatif]'"


def write_report(result: WhatIf, path: str | Path) -> None:
    """Write the page to ``path``."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError as error:
        raise ImportError(MISSING) from error

    columns = [("before", result.before)] + [(o.policy, o.after) for o in result.outcomes]
    nodes = list(result.before.nodes)
    zones = list(result.before.zones)
    figure = make_subplots(
        rows=4,
        cols=1,
        subplot_titles=(
            "CPU requested / allocatable, per node (node-tree order)",
            "Memory requested / allocatable, per node",
            "CPU share of each node, nodes sorted from fullest to emptiest",
            "CPU requested / allocatable, per zone",
        ),
        vertical_spacing=0.07,
    )
    for number, (name, usage) in enumerate(columns):
        style = dict(name=name, legendgroup=name, marker_color=PALETTE[number % len(PALETTE)])
        cpu = [usage.nodes[n].cpu for n in nodes]
        memory = [usage.nodes[n].memory for n in nodes]
        figure.add_trace(go.Bar(x=nodes, y=cpu, **style), row=1, col=1)
        figure.add_trace(go.Bar(x=nodes, y=memory, showlegend=False, **style), row=2, col=1)
        ranked = sorted(cpu, reverse=True)
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(ranked) + 1)),
                y=ranked,
                mode="lines",
                name=name,
                legendgroup=name,
                showlegend=False,
                line_color=style["marker_color"],
            ),
            row=3,
            col=1,
        )
        zone_cpu = [usage.zones[z].cpu for z in zones]
        figure.add_trace(go.Bar(x=zones, y=zone_cpu, showlegend=False, **style), row=4, col=1)
    figure.update_yaxes(tickformat=".0%", rangemode="tozero")
    figure.update_layout(barmode="group", height=1500, margin=dict(t=40, b=40))
    plot = figure.to_html(include_plotlyjs=True, full_html=False, div_id="whatif-plot")
    Path(path).write_text(_page(result, plot), encoding="utf-8")


def _page(result: WhatIf, plot: str) -> str:
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
    title = f"schedcache what-if at {result.at}: {len(result.pods)} pods"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 12px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>{len(result.before.nodes)} nodes, held as they were at the moment; "placed elsewhere" counts
the pods a policy put on another node than the one they were claimed on.</p>
<table id="summary"><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>{"".join(rows)}</table>
{plot}
</body></html>
"""
