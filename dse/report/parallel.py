"""Parallel coordinates of a study, drawn in SVG (plain Plotly scatter lines).

Plotly's own ``parcoords`` trace is WebGL: in a browser without a GPU (headless Chromium in CI,
software rendering) a page with it took 3.2-3.8 CPU-seconds for 100-1,000 lines against 1.5 for
the same 1,000 lines in SVG and 1.3 for a trivial chart (``benchmarks/report_size.py
--webgl-costs``; docs/report.md). So
each axis is drawn here: values normalised to [0, 1] per axis (log-scaled when a numeric axis
spans more than ``LOG_SPAN``), categories evenly spaced, tick labels with units as annotations.
One line per plotted trial, coloured by status (Pareto / dominated / infeasible, Pareto on top);
hovering a vertex shows the trial and that axis's value; clicking selects the design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dse.report.html import plot_text
from dse.report.study_data import DOMINATED, INFEASIBLE, PARETO, StudyData
from dse.report.units import fmt, metric_name, unit_of

#: A numeric axis is log-scaled when max / min exceeds this (all values positive) [E].
LOG_SPAN = 1e2

#: Tick labels per numeric axis.
TICKS = 5

#: Line style per status; Pareto lines drawn last, on top.
LINE = {DOMINATED: dict(color="rgba(127,156,201,0.45)", width=1),
        INFEASIBLE: dict(color="rgba(224,160,0,0.6)", width=1),
        PARETO: dict(color="#c0392b", width=2.2)}
LEGEND = {PARETO: "Pareto", DOMINATED: "feasible, dominated", INFEASIBLE: "infeasible"}


@dataclass
class Axis:
    """One axis: title, each trial's position in [0, 1] (None: no value), tick marks, and
    each trial's value as text (for hover)."""

    title: str
    pos: list[float | None]
    ticks: list[tuple[float, str]]
    text: list[str]


def numeric_axis(title: str, values: list[float | None], unit: str) -> Axis:
    """Positions of numbers on a linear or log axis, ticks labelled with the unit."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    lo, hi = (min(present), max(present)) if present else (0.0, 1.0)
    log = lo > 0 and hi / lo > LOG_SPAN
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    inv = (lambda u: 10 ** u) if log else (lambda u: u)
    a, b = f(lo), f(hi)
    span = b - a

    def pos(v):
        if v is None or not math.isfinite(v):
            return None
        return 0.5 if span == 0 else (f(v) - a) / span

    ticks = [(0.5, fmt(lo, unit))] if span == 0 else [
        (k / (TICKS - 1), fmt(inv(a + span * k / (TICKS - 1)), unit)) for k in range(TICKS)]
    suffix = " (log)" if log else ""
    return Axis(title + suffix, [pos(v) for v in values], ticks,
                [fmt(v, unit) if v is not None else "–" for v in values])


def category_axis(title: str, values: list[Any]) -> Axis:
    """Categories evenly spaced, sorted by their text."""
    cats = sorted({str(v) for v in values if v is not None})
    at = {c: (0.5 if len(cats) == 1 else i / (len(cats) - 1)) for i, c in enumerate(cats)}
    return Axis(title, [at[str(v)] if v is not None else None for v in values],
                [(at[c], c) for c in cats], ["–" if v is None else str(v) for v in values])


def axes_of(data: StudyData) -> list[Axis]:
    """One axis per parameter, then one per objective."""
    rows = data.plotted
    out = []
    for k in data.param_keys:
        vals = [t.params.get(k) for t in rows]
        if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in vals):
            out.append(numeric_axis(k, [None if v is None else float(v) for v in vals],
                                    data.param_units.get(k, "")))
        else:
            out.append(category_axis(k, vals))
    for k in data.objectives:
        unit = data.metric_units.get(k) or unit_of(k)
        direction = "↓" if data.directions[data.objectives.index(k)] == "minimize" else "↑"
        name = metric_name(k)
        out.append(numeric_axis(f"{name} {direction}" if name != k else f"{k} {direction}",
                                [t.values.get(k) for t in rows], unit))
    return out


def parallel_coordinates(data: StudyData, title: str = "Parameters against objectives"):
    """The figure (None when no trial has objective values)."""
    import plotly.graph_objects as go
    from dse.report.study_figures import label_lines, wrap
    rows = data.plotted
    if not rows:
        return None
    axes = axes_of(data)
    n = len(axes)
    fig = go.Figure()
    for status in (DOMINATED, INFEASIBLE, PARETO):
        idx = [i for i, t in enumerate(rows) if t.status == status]
        if not idx:
            continue
        xs, ys, cd = [], [], []
        for i in idx:
            for j, ax in enumerate(axes):
                xs.append(j)
                ys.append(ax.pos[i])
                cd.append([rows[i].number, f"{plot_text(ax.title)} = {plot_text(ax.text[i])}"])
            xs.append(None)
            ys.append(None)
            cd.append(None)
        fig.add_trace(go.Scatter(
            x=xs, y=ys, customdata=cd, mode="lines", line=LINE[status], connectgaps=False,
            name=f"{LEGEND[status]} ({len(idx)})",
            hovertemplate="trial %{customdata[0]} · " + status + "<br>%{customdata[1]}<extra></extra>"))
    titles = [wrap(plot_text(a.title)) for a in axes]
    shapes = [dict(type="line", xref="x", yref="y", x0=j, x1=j, y0=0, y1=1,
                   line=dict(color="#8a93a6", width=1)) for j in range(n)]
    notes = []
    for j, ax in enumerate(axes):
        for p, text in ax.ticks:
            notes.append(dict(x=j, y=p, xref="x", yref="y", text=plot_text(text), showarrow=False,
                              xanchor="right", xshift=-3, font=dict(size=10, color="#5b6270"),
                              bgcolor="rgba(255,255,255,0.7)"))
        notes.append(dict(x=j, y=0, xref="x", yref="y", text=titles[j], showarrow=False,
                          yanchor="top", yshift=-8, font=dict(size=12)))
    lines = max(label_lines(t) for t in titles)
    fig.update_layout(
        title=title, height=470 + 16 * lines, shapes=shapes, annotations=notes,
        hovermode="closest", legend=dict(title_text="trials", orientation="h", x=0, y=1.02,
                                         xanchor="left", yanchor="bottom"),
        margin=dict(l=90, r=40, t=110, b=40 + 17 * lines),
        xaxis=dict(range=[-0.6, n - 0.6], showgrid=False, zeroline=False, showticklabels=False,
                   fixedrange=True),
        yaxis=dict(range=[-0.03, 1.03], showgrid=False, zeroline=False, showticklabels=False,
                   fixedrange=True))
    return fig
