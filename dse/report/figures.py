"""Figures of one simulated design: breakdowns, timeline (Gantt by unit), roofline.

Each builder takes a :class:`simulators.result.Result` and returns a ``plotly.graph_objects``
figure. Axis titles carry units; values are scaled by one SI prefix per axis; hover text prints
each value with its own prefix. User strings (op names, model names) go through
:func:`dse.report.html.plot_text`. Plotly is imported inside the functions so
``import dse.report`` stays light.
"""

from __future__ import annotations

from typing import Any

from dse.report.html import plot_text
from dse.report.roofline import Roofs, op_point
from dse.report.units import axis_title, fmt, prefix_for
from simulators.result import Result

#: One colour per op kind, the same in every figure of a report.
KIND_COLORS = {
    "matmul": "#1f5fbf", "conv": "#12a4b6", "attention": "#e07b00", "elementwise": "#2b9348",
    "norm": "#7b4fb3", "softmax": "#d6479b", "reduction": "#8c564b", "embedding": "#a8a400",
    "hashgrid": "#c0392b", "data_movement": "#5f6b7a", "unknown": "#9aa0ab",
}

#: One colour per energy component [R accelerators/base.py ENERGY_COMPONENTS].
COMPONENT_COLORS = {
    "compute": "#1f5fbf", "onchip_memory": "#2b9348", "offchip_memory": "#e07b00",
    "network": "#7b4fb3", "static": "#9aa0ab",
}


def kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, "#5f6b7a")


def _go():
    import plotly.graph_objects as go
    return go


def kinds_by_time(result: Result) -> list[str]:
    """Op kinds, longest total busy time first (ties by name, so the order is deterministic)."""
    by = result.breakdown_by_kind()
    return sorted(by, key=lambda k: (-by[k]["time_s"], k))


def kind_breakdown(result: Result, title: str = "Latency and energy by op kind"):
    """Two bar charts side by side: busy time per op kind and dynamic energy per op kind."""
    from plotly.subplots import make_subplots
    go = _go()
    by = result.breakdown_by_kind()
    kinds = kinds_by_time(result)
    times = [by[k]["time_s"] for k in kinds]
    energies = [by[k]["energy_j"] for k in kinds]
    tf, tu = prefix_for(times, "s")
    ef, eu = prefix_for(energies, "J")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("busy time (sum over ops)", "dynamic energy"))
    total_t = sum(times) or 1.0
    total_e = sum(energies) or 1.0
    colors = [kind_color(k) for k in kinds]
    fig.add_trace(go.Bar(
        x=[t / tf for t in times], y=kinds, orientation="h", marker_color=colors,
        customdata=[[by[k]["ops"], 100 * t / total_t] for k, t in zip(kinds, times)],
        hovertemplate="%{y}<br>%{x:.4g} " + tu + " (%{customdata[1]:.1f}% of busy time)"
                      "<br>%{customdata[0]} ops<extra></extra>", showlegend=False), 1, 1)
    fig.add_trace(go.Bar(
        x=[e / ef for e in energies], y=kinds, orientation="h", marker_color=colors,
        customdata=[[100 * e / total_e] for e in energies],
        hovertemplate="%{y}<br>%{x:.4g} " + eu + " (%{customdata[0]:.1f}% of dynamic energy)"
                      "<extra></extra>", showlegend=False), 1, 2)
    fig.update_xaxes(title_text=axis_title("busy time", tu), row=1, col=1)
    fig.update_xaxes(title_text=axis_title("energy", eu), row=1, col=2)
    fig.update_yaxes(autorange="reversed", title_text="op kind", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    fig.update_layout(title=title, height=max(300, 90 + 28 * len(kinds)), bargap=0.25)
    return fig


def component_breakdown(result: Result, title: str = "Energy by component and time by unit"):
    """Energy per component (compute, on-chip memory, off-chip memory, network, static) and
    busy time per unit with its busy fraction."""
    from plotly.subplots import make_subplots
    go = _go()
    comps = [c for c, v in result.energy_breakdown_j.items()]
    energies = [result.energy_breakdown_j[c] for c in comps]
    ef, eu = prefix_for(energies, "J")
    total_e = result.energy_j or 1.0
    units = sorted(result.busy_fraction)
    busy = [result.busy_fraction[u] * result.latency_s for u in units]
    tf, tu = prefix_for(busy + [result.latency_s], "s")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("energy by component (incl. static)",
                                        "busy time by unit (end-to-end latency dashed)"))
    fig.add_trace(go.Bar(
        x=[plot_text(c.replace("_", " ")) for c in comps], y=[e / ef for e in energies],
        marker_color=[COMPONENT_COLORS.get(c, "#5f6b7a") for c in comps],
        customdata=[[100 * e / total_e] for e in energies],
        hovertemplate="%{x}<br>%{y:.4g} " + eu + " (%{customdata[0]:.1f}% of total)<extra></extra>",
        showlegend=False), 1, 1)
    fig.add_trace(go.Bar(
        x=[plot_text(u) for u in units], y=[b / tf for b in busy], marker_color="#1f5fbf",
        customdata=[[100 * result.busy_fraction[u]] for u in units],
        text=[f"{100 * result.busy_fraction[u]:.1f}%" for u in units], textposition="auto",
        hovertemplate="unit %{x}<br>busy %{y:.4g} " + tu + "<br>busy %{customdata[0]:.1f}% of the latency"
                      "<extra></extra>", showlegend=False), 1, 2)
    fig.add_hline(y=result.latency_s / tf, line_dash="dash", line_color="#c0392b", row=1, col=2,
                  annotation_text="latency " + fmt(result.latency_s, "s"),
                  annotation_position="top left")
    fig.update_yaxes(title_text=axis_title("energy", eu), row=1, col=1)
    fig.update_yaxes(title_text=axis_title("busy time", tu), row=1, col=2,
                     range=[0, 1.18 * result.latency_s / tf])
    fig.update_xaxes(title_text="component", row=1, col=1)
    fig.update_xaxes(title_text="unit", row=1, col=2)
    fig.update_layout(title=title, height=380, bargap=0.3)
    return fig


def lanes(result: Result) -> list[str]:
    """The timeline row of each op (``result.ops`` order): its unit, or ``unit #i`` when ops
    overlap on a unit with several slots (greedy interval partitioning by start time)."""
    order = sorted(range(len(result.ops)), key=lambda i: (result.ops[i].start_s, result.ops[i].end_s, i))
    lane_end: dict[str, list[float]] = {}
    lane_of = [0] * len(result.ops)
    for i in order:
        r = result.ops[i]
        ends = lane_end.setdefault(r.unit, [])
        for j, end in enumerate(ends):
            if end <= r.start_s + 1e-18:
                ends[j] = r.end_s
                lane_of[i] = j
                break
        else:
            ends.append(r.end_s)
            lane_of[i] = len(ends) - 1
    many = {u for u, ends in lane_end.items() if len(ends) > 1}
    return [f"{r.unit} #{lane_of[i] + 1}" if r.unit in many else r.unit
            for i, r in enumerate(result.ops)]


def timeline(result: Result, title: str = "Timeline by unit"):
    """Gantt chart: one row per unit (per slot when ops overlap), one bar per op, coloured by
    op kind."""
    go = _go()
    rows = lanes(result)
    tf, tu = prefix_for([result.latency_s], "s")
    fig = go.Figure()
    for kind in kinds_by_time(result):
        idx = [i for i, r in enumerate(result.ops) if r.kind == kind]
        ops = [result.ops[i] for i in idx]
        fig.add_trace(go.Bar(
            name=plot_text(kind), orientation="h", y=[plot_text(rows[i]) for i in idx],
            base=[r.start_s / tf for r in ops], x=[max(r.duration_s, 0.0) / tf for r in ops],
            marker_color=kind_color(kind), marker_line_width=0, width=0.7,
            customdata=[[plot_text(r.name), r.start_s, r.duration_s, r.flops, r.bytes,
                         r.energy_j, r.bound] for r in ops],
            hovertemplate=("<b>%{customdata[0]}</b> (" + plot_text(kind) + ", %{customdata[6]}-bound)"
                           "<br>start %{customdata[1]:.4~s}s · duration %{customdata[2]:.4~s}s"
                           "<br>%{customdata[3]:.4~s}FLOP · %{customdata[4]:.4~s}B · "
                           "%{customdata[5]:.4~s}J<extra></extra>")))
    n_rows = len(set(rows))
    fig.update_layout(title=title, barmode="overlay", height=max(260, 150 + 34 * n_rows),
                      legend=dict(title_text="op kind", orientation="h", x=0, y=1.0,
                                  xanchor="left", yanchor="bottom"),
                      title_y=0.97, margin=dict(t=90),
                      xaxis=dict(title=axis_title("time", tu), range=[0, result.latency_s / tf]),
                      yaxis=dict(title="unit", type="category",
                                 categoryorder="category descending"))
    return fig


def roofline(result: Result, roofs: Roofs, title: str = "Roofline"):
    """Each op at (arithmetic intensity, achieved FLOP/s) on log axes, coloured by kind, under
    the design's compute and bandwidth roofs."""
    go = _go()
    pts = [(r, op_point(r)) for r in result.ops]
    shown = [(r, p) for r, p in pts if p is not None]
    rates = [p[1] for _, p in shown] + ([roofs.peak_flops_per_s] if roofs.peak_flops_per_s else [])
    yf, yu = prefix_for(rates, "FLOP/s")
    fig = go.Figure()
    for kind in kinds_by_time(result):
        sel = [(r, p) for r, p in shown if r.kind == kind]
        if not sel:
            continue
        fig.add_trace(go.Scatter(
            name=plot_text(kind), mode="markers", x=[p[0] for _, p in sel],
            y=[p[1] / yf for _, p in sel],
            marker=dict(color=kind_color(kind), size=8, opacity=0.8, line=dict(width=0.5, color="#fff")),
            customdata=[[plot_text(r.name), r.flops, r.bytes, r.duration_s, r.bound] for r, _ in sel],
            hovertemplate=("<b>%{customdata[0]}</b> (" + plot_text(kind) + ", %{customdata[4]}-bound)"
                           "<br>intensity %{x:.4g} FLOP/B · achieved %{y:.4g} " + yu +
                           "<br>%{customdata[1]:.4~s}FLOP · %{customdata[2]:.4~s}B · "
                           "%{customdata[3]:.4~s}s<extra></extra>")))
    xs = [p[0] for _, p in shown]
    if xs:
        x_lo, x_hi = min(xs) / 4, max(xs) * 4
        for k, (channel, bw) in enumerate(sorted(roofs.bandwidths_Bps.items())):
            peak = roofs.peak_flops_per_s
            ridge = peak / bw if peak else x_hi
            lo = min(x_lo, ridge / 4)
            hi = max(x_hi, ridge * 4)
            rx = [lo, ridge, hi] if peak else [lo, hi]
            ry = [bw * lo, peak, peak] if peak else [bw * lo, bw * hi]
            peak_word = "peak" if roofs.peak_source == "template peak" else "best observed"
            label = f"roof: {plot_text(channel)} {fmt(bw, 'B/s')}" + (
                f", {peak_word} {fmt(peak, 'FLOP/s')}" if peak else "")
            fig.add_trace(go.Scatter(
                name=label, mode="lines", x=rx, y=[v / yf for v in ry],
                line=dict(color="#333" if k == 0 else "#8a93a6", width=2, dash="solid" if k == 0 else "dot"),
                hovertemplate=(label + "<br>ridge at %{x:.4g} FLOP/B<extra></extra>") if peak
                else label + "<extra></extra>"))
        if roofs.peak_flops_per_s and not roofs.bandwidths_Bps:
            fig.add_hline(y=roofs.peak_flops_per_s / yf, line_dash="dash",
                          annotation_text="peak " + fmt(roofs.peak_flops_per_s, "FLOP/s"))
    skipped = len(pts) - len(shown)
    sources = "; ".join(s for s in (f"peak: {roofs.peak_source}" if roofs.peak_source else "",
                                    f"bandwidth: {roofs.bandwidth_source}" if roofs.bandwidth_source else "") if s)
    sub = f"{len(shown)} ops with FLOPs and bytes" + (f"; {skipped} without FLOPs or bytes not shown" if skipped else "")
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{sub}. Roofs — {sources}</sup>" if sources else f"{title}<br><sup>{sub}</sup>"),
        height=460, legend=dict(font=dict(size=11)),
        xaxis=dict(title="arithmetic intensity (FLOP/B)", type="log", dtick=1, tickformat="~g"),
        yaxis=dict(title=axis_title("achieved compute", yu), type="log", dtick=1, tickformat="~g"))
    return fig


def design_figures(result: Result, roofs: Roofs) -> dict[str, Any]:
    """The four detail figures of one design, keyed ``by_kind``, ``by_component``,
    ``timeline``, ``roofline``."""
    return {"by_kind": kind_breakdown(result), "by_component": component_breakdown(result),
            "timeline": timeline(result), "roofline": roofline(result, roofs)}
