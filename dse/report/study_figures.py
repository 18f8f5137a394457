"""Figures of a study: Pareto front (2-D and 3-D), parallel coordinates, parameter importances,
optimisation history.

Pareto, dominated and infeasible trials are told apart by colour and marker; constraint
thresholds are drawn on the axes they bound. Every point's hover text lists all its parameters
and metrics; its ``customdata`` is its trial number (the page selects that design on click).
"""

from __future__ import annotations

import warnings
from typing import Any

from dse.quality import source_text
from dse.report.html import plot_text
from dse.report.study_data import DOMINATED, INFEASIBLE, PARETO, StudyData, TrialRow
from dse.report.units import axis_title, fmt, metric_name, prefix_for, unit_of

#: Marker style per status: Pareto designs stand out; dominated ones recede; infeasible ones
#: are crosses.
STYLE = {
    PARETO: dict(color="#c0392b", size=10, symbol="circle", line=dict(width=1, color="#5a0f08")),
    DOMINATED: dict(color="#7f9cc9", size=6, symbol="circle", opacity=0.7),
    INFEASIBLE: dict(color="#e0a000", size=7, symbol="x", opacity=0.8),
}

#: Legend names per status.
LEGEND = {PARETO: "Pareto (over all objectives)", DOMINATED: "feasible, dominated",
          INFEASIBLE: "infeasible (violates a constraint)"}

#: Log axes when a metric spans more than this ratio (max / min, all positive) [E].
LOG_SPAN = 1e3


def _go():
    import plotly.graph_objects as go
    return go


def metric_unit(data: StudyData, key: str) -> str:
    """A metric's unit: the one the trials stored (``<key>_unit`` user attrs), else by name."""
    return data.metric_units.get(key) or unit_of(key)


def metric_axis(data: StudyData, key: str, rows: list[TrialRow]) -> dict[str, Any]:
    """Scale factor, axis title and axis type ("linear"/"log") of a metric over ``rows``."""
    vals = [t.values[key] for t in rows if key in t.values]
    unit = metric_unit(data, key)
    factor, shown = prefix_for(vals, unit)
    pos = [v for v in vals if v > 0]
    log = bool(vals) and len(pos) == len(vals) and max(pos) / min(pos) > LOG_SPAN
    direction = ""
    if key in data.objectives:
        direction = " ↓" if data.directions[data.objectives.index(key)] == "minimize" else " ↑"
    title = plot_text(axis_title(metric_name(key) if key != metric_name(key) else key, shown)) + direction
    return {"factor": factor, "title": title, "type": "log" if log else "linear", "unit": unit}


def hover_texts(data: StudyData, rows: list[TrialRow]) -> list[str]:
    """One hover text per trial: status, reason, every objective and metric, every param."""
    keys = data.metric_keys
    units = {k: metric_unit(data, k) for k in keys}
    out = []
    for t in rows:
        lines = [f"<b>trial {t.number}</b> · {t.status} · {plot_text(t.fidelity)} simulation"]
        if t.reason:
            lines.append(plot_text(_clip(t.reason)))
        rated = [(w, q) for w, q in ((t.design or {}).get("quality") or {}).items()
                 if isinstance(q, dict)]
        for label, stored in rated:
            where = f" ({label})" if len(rated) > 1 else ""
            lines.append(plot_text(f"quality source{where}: {source_text(stored)}"))
        for k in keys:
            if k in t.values:
                lines.append(f"{plot_text(k)} = {fmt(t.values[k], units[k])}")
        for k in sorted(t.params):
            lines.append(f"{plot_text(k)} = {plot_text(fmt(t.params[k], data.param_units.get(k, '')))}")
        out.append("<br>".join(lines))
    return out


def _clip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _groups(data: StudyData) -> list[tuple[str, list[TrialRow]]]:
    return [(s, [t for t in data.plotted if t.status == s]) for s in (DOMINATED, INFEASIBLE, PARETO)]


def pareto_2d(data: StudyData, x: str, y: str, title: str = "Pareto front"):
    """Scatter of metric ``x`` against ``y``, one trace per status, constraint lines drawn."""
    go = _go()
    rows = data.plotted
    ax, ay = metric_axis(data, x, rows), metric_axis(data, y, rows)
    fig = go.Figure()
    for status, group in _groups(data):
        group = [t for t in group if x in t.values and y in t.values]
        if not group:
            continue
        if status == PARETO:  # a staircase through the front, in x order
            group = sorted(group, key=lambda t: (t.values[x], t.values[y]))
        fig.add_trace(go.Scatter(
            name=f"{LEGEND[status]} ({len(group)})", mode="markers",
            x=[t.values[x] / ax["factor"] for t in group], y=[t.values[y] / ay["factor"] for t in group],
            marker=STYLE[status], customdata=[t.number for t in group],
            hovertext=hover_texts(data, group), hoverinfo="text"))
    for c in data.constraints:
        for axis, a in (("x", ax), ("y", ay)):
            if c.metric != (x if axis == "x" else y):
                continue
            for bound, word in ((c.max, "≤"), (c.min, "≥")):
                if bound is None:
                    continue
                label = f"{plot_text(c.metric)} {word} {fmt(bound, a['unit'])}"
                line = dict(color="#b03a2e", width=1.5, dash="dash")
                if axis == "x":
                    fig.add_shape(type="line", xref="x", yref="paper", x0=bound / a["factor"],
                                  x1=bound / a["factor"], y0=0, y1=1, line=line,
                                  label=dict(text=label, textangle=-90, textposition="end",
                                             font=dict(size=11, color="#b03a2e"), xanchor="right"))
                else:
                    fig.add_shape(type="line", xref="paper", yref="y", y0=bound / a["factor"],
                                  y1=bound / a["factor"], x0=0, x1=1, line=line,
                                  label=dict(text=label, textposition="end",
                                             font=dict(size=11, color="#b03a2e"), yanchor="bottom"))
    fig.update_layout(
        title=title, height=540, hovermode="closest",
        legend=dict(orientation="h", x=0, y=-0.2, xanchor="left", yanchor="top"),
        margin=dict(b=135),
        xaxis=dict(title=ax["title"], type=ax["type"]), yaxis=dict(title=ay["title"], type=ay["type"]))
    return fig


def pareto_3d(data: StudyData, x: str, y: str, z: str, title: str = "Pareto front (3-D)"):
    """3-D scatter of three metrics, one trace per status; constraint thresholds on these axes
    drawn as translucent planes."""
    go = _go()
    rows = data.plotted
    axes = {k: metric_axis(data, k, rows) for k in (x, y, z)}
    fig = go.Figure()
    for status, group in _groups(data):
        group = [t for t in group if all(k in t.values for k in (x, y, z))]
        if not group:
            continue
        style = dict(STYLE[status])
        style["size"] = {PARETO: 6, DOMINATED: 3, INFEASIBLE: 4}[status]
        style.pop("line", None)
        if style["symbol"] == "x":  # 3-D markers are font glyphs; "◆" is in every common font
            style["symbol"] = "diamond"
        fig.add_trace(go.Scatter3d(
            name=f"{LEGEND[status]} ({len(group)})", mode="markers",
            x=[t.values[x] / axes[x]["factor"] for t in group],
            y=[t.values[y] / axes[y]["factor"] for t in group],
            z=[t.values[z] / axes[z]["factor"] for t in group],
            marker=style, customdata=[t.number for t in group],
            hovertext=hover_texts(data, group), hoverinfo="text"))
    ranges = {}
    for k in (x, y, z):
        vals = [t.values[k] / axes[k]["factor"] for t in rows if k in t.values]
        ranges[k] = (min(vals), max(vals)) if vals else (0.0, 1.0)
    for c in data.constraints:
        if c.metric not in (x, y, z):
            continue
        for bound in (c.max, c.min):
            if bound is None:
                continue
            fig.add_trace(_plane(go, c, bound, (x, y, z), axes, ranges))
    scene = {f"{a}axis": dict(title=dict(text=axes[k]["title"]), type=axes[k]["type"])
             for a, k in zip("xyz", (x, y, z))}
    fig.update_layout(title=title, height=540,
                      legend=dict(orientation="h", x=0, y=0, xanchor="left", yanchor="top"),
                      scene=dict(**scene, aspectmode="cube",
                                 camera=dict(eye=dict(x=1.6, y=1.6, z=0.9))),
                      margin=dict(l=0, r=0, t=50, b=90))
    return fig


def _plane(go, c, bound, keys, axes, ranges):
    """A translucent rectangle at ``metric = bound`` spanning the other two axes."""
    k = keys.index(c.metric)
    v = bound / axes[c.metric]["factor"]
    coords = []
    for i, key in enumerate(keys):
        lo, hi = ranges[key]
        coords.append([v] * 4 if i == k else None)
    others = [i for i in range(3) if i != k]
    (a0, a1), (b0, b1) = ranges[keys[others[0]]], ranges[keys[others[1]]]
    coords[others[0]] = [a0, a1, a1, a0]
    coords[others[1]] = [b0, b0, b1, b1]
    word = "≤" if bound == c.max else "≥"
    name = f"{plot_text(c.metric)} {word} {fmt(bound, axes[c.metric]['unit'])}"
    return go.Mesh3d(x=coords[0], y=coords[1], z=coords[2], i=[0, 0], j=[1, 2], k=[2, 3],
                     color="#c0392b", opacity=0.15, name=name, showlegend=True,
                     hovertemplate=name + "<extra></extra>")


#: Characters per line of a parallel-coordinates axis label [E: ~7 px per character at 12 px,
#: axes ~130 px apart with ten axes on a 1,300 px page].
LABEL_CHARS = 16


def wrap(text: str, width: int = LABEL_CHARS) -> str:
    """Break a label into lines of at most ``width`` characters (Plotly's ``<br>``), after
    ``.``, ``_`` or a space where possible, else anywhere; an HTML entity (from
    :func:`~dse.report.html.plot_text`) counts as one character and is never cut."""
    lines: list[list[str]] = [[]]
    for piece in _pieces(text):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append([])
        for atom in piece:
            if len(lines[-1]) >= width:
                lines.append([])
            lines[-1].append(atom)
    return "<br>".join("".join(line).rstrip() for line in lines if line)


def _atoms(text: str) -> list[str]:
    """Characters, with each ``&...;`` entity as one."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "&":
            end = text.find(";", i)
            if 0 < end - i <= 10:
                out.append(text[i:end + 1])
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return out


def _pieces(text: str) -> list[list[str]]:
    """Runs of atoms, each ending after a ``.``, ``_`` or space."""
    out, cur = [], []
    for atom in _atoms(text):
        cur.append(atom)
        if atom in "._ ":
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def label_lines(label: str) -> int:
    return label.count("<br>") + 1


def parallel_coordinates(data: StudyData, title: str = "Parameters against objectives"):
    """See :mod:`dse.report.parallel` (SVG, not Plotly's WebGL ``parcoords``)."""
    from dse.report.parallel import parallel_coordinates as draw
    return draw(data, title)


def param_importances(data: StudyData, study, title: str = "Parameter importances"):
    """PED-ANOVA importance (Optuna's default evaluator) of each parameter for each objective,
    over the completed trials; None when Optuna cannot compute them (too few trials)."""
    import optuna
    go = _go()
    if len(data.plotted) < 4 or not data.param_keys:
        return None
    per_obj: dict[str, dict[str, float]] = {}
    for i, (name, direction) in enumerate(zip(data.objectives, data.directions)):
        sign = 1.0 if direction == "minimize" else -1.0
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                per_obj[name] = optuna.importance.get_param_importances(
                    study, target=lambda t, i=i, s=sign: s * t.values[i])
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue
    if not per_obj:
        return None
    params = sorted({p for imp in per_obj.values() for p in imp},
                    key=lambda p: (-max(imp.get(p, 0.0) for imp in per_obj.values()), p))
    fig = go.Figure()
    for name, imp in per_obj.items():
        fig.add_trace(go.Bar(name=plot_text(name), orientation="h", y=[plot_text(p) for p in params],
                             x=[imp.get(p, 0.0) for p in params],
                             hovertemplate="%{y}: %{x:.3f} of " + plot_text(name) + "'s importance<extra></extra>"))
    fig.update_layout(title=title, barmode="group", height=max(300, 120 + 26 * len(params) * max(1, len(per_obj)) // 2),
                      xaxis=dict(title="importance (share of the objective's total, PED-ANOVA)", range=[0, 1]),
                      yaxis=dict(title="parameter", autorange="reversed"),
                      legend=dict(title_text="objective"))
    return fig


def history(data: StudyData, title: str = "Optimisation history"):
    """Each objective against trial number, with the best feasible value so far."""
    from plotly.subplots import make_subplots
    go = _go()
    rows = sorted(data.plotted, key=lambda t: t.number)
    if not rows:
        return None
    n = len(data.objectives)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.08 if n > 1 else 0.0)
    for i, (k, direction) in enumerate(zip(data.objectives, data.directions), start=1):
        a = metric_axis(data, k, rows)
        for status, color in ((DOMINATED, STYLE[DOMINATED]["color"]), (PARETO, STYLE[PARETO]["color"]),
                              (INFEASIBLE, STYLE[INFEASIBLE]["color"])):
            group = [t for t in rows if t.status == status]
            if not group:
                continue
            fig.add_trace(go.Scatter(
                x=[t.number for t in group], y=[t.values[k] / a["factor"] for t in group],
                mode="markers", name=status, legendgroup=status, showlegend=(i == 1),
                marker=dict(color=color, size=5, symbol=STYLE[status]["symbol"]),
                customdata=[t.number for t in group],
                hovertemplate="trial %{x}<br>" + a["title"] + ": %{y:.4g}<extra>" + status + "</extra>"), i, 1)
        best, xs, ys = None, [], []
        better = (lambda u, v: u < v) if direction == "minimize" else (lambda u, v: u > v)
        for t in rows:
            if t.status == INFEASIBLE:
                continue
            v = t.values[k]
            if best is None or better(v, best):
                best = v
            xs.append(t.number)
            ys.append(best / a["factor"])
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(shape="hv", color="#1f2430", width=1.5),
                                     name="best feasible so far", legendgroup="best", showlegend=(i == 1),
                                     hovertemplate="after trial %{x}: best %{y:.4g}<extra></extra>"), i, 1)
        fig.update_yaxes(title_text=a["title"], type=a["type"], row=i, col=1)
    fig.update_xaxes(title_text="trial number", row=n, col=1)
    fig.update_layout(title=title, height=200 + 230 * n, hovermode="closest")
    return fig
