"""Figures of one serving run (:class:`simulators.serving.ServingResult`) and of a rate sweep
(:class:`simulators.serving.RateSweep`).

* :func:`latency_cdfs` — the empirical CDF of TTFT, TPOT and end-to-end latency over the
  completed requests, with p50 / p90 / p99 marked and the SLOs (when given) as dashed lines;
* :func:`occupancy` — KV-cache occupancy and the requests running and waiting over time;
* :func:`rate_sweep` — throughput (output tokens/s) and p99 TTFT / TPOT against the arrival
  rate, SLOs dashed.

Axis titles carry units, scaled by one SI prefix per axis as in :mod:`dse.report.figures`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.report.units import axis_title, fmt, prefix_for

#: Points kept of each CDF [E: 1,000 steps are finer than the plot's pixels; the largest
#: value (the tail) is always kept].
CDF_POINTS = 1000

#: (key of ServingResult.latencies(), title, key of ServingResult.slo).
LATENCIES = (("ttft", "TTFT", "ttft_s"), ("tpot", "TPOT", "tpot_s"), ("e2e", "end-to-end", None))

#: An SLO more than this many times the largest latency is named, not drawn [E: the
#: distribution would take less than half the axis].
SLO_OFF_AXIS = 2.0

#: A rate axis spanning more than this ratio is drawn on a log scale [E].
LOG_SPAN = 20

_PCT_COLORS = {"p50": "#2b9348", "p90": "#e07b00", "p99": "#c0392b"}


def cdf_points(values: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction of requests at or below each), at most ``points`` of them
    evenly spaced in rank, the largest always among them."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return x, x
    idx = np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(int))
    return x[idx], (idx + 1) / n


def latency_cdfs(result: Any, title: str = "Latency distributions (CDF over completed requests)"):
    """Three CDFs side by side: TTFT, TPOT, end-to-end latency; SLOs as dashed lines."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    lat = result.latencies()
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07,
                        subplot_titles=[t for _, t, _ in LATENCIES])
    for col, (key, name, slo_key) in enumerate(LATENCIES, start=1):
        values = lat[key]
        slo = (result.slo or {}).get(slo_key) if slo_key else None
        factor, unit = prefix_for([float(values.max())] if len(values) else [], "s")
        x, y = cdf_points(values)
        fig.add_trace(go.Scatter(
            name=name, x=(x / factor).tolist(), y=y.tolist(), mode="lines",
            line=dict(shape="hv", width=2),
            hovertemplate=name + " %{x:.4g} " + unit + "<br>%{y:.1%} of requests at or below"
                          "<extra></extra>", showlegend=False), 1, col)
        pct = getattr(result, f"{key}_s")
        marks = [k for k in ("p50", "p90", "p99") if pct.get(k) is not None
                 and np.isfinite(pct[k])]
        if marks:
            fig.add_trace(go.Scatter(
                name=f"{name} percentiles", x=[pct[k] / factor for k in marks],
                y=[int(k[1:]) / 100 for k in marks], mode="markers+text",
                text=marks, textposition="middle left",
                marker=dict(size=8, color=[_PCT_COLORS[k] for k in marks]),
                hovertemplate="%{text} " + name + " %{x:.4g} " + unit + "<extra></extra>",
                showlegend=False), 1, col)
        if slo and len(values) and slo > SLO_OFF_AXIS * values.max():
            # a line that far out would squeeze the distribution into the axis' first pixels
            fig.add_annotation(text=f"SLO {fmt(slo, 's')}: beyond the axis", showarrow=False,
                               x=0.98, y=0.04, xanchor="right", font=dict(color="#c0392b"),
                               xref=f"x{col if col > 1 else ''} domain",
                               yref=f"y{col if col > 1 else ''} domain")
        elif slo:
            fig.add_vline(x=slo / factor, line_dash="dash", line_color="#c0392b", row=1, col=col,
                          annotation_text="SLO " + fmt(slo, "s"),
                          annotation_position="bottom right")
        fig.update_xaxes(title_text=axis_title(name, unit), row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=1, col=col,
                         title_text="requests at or below" if col == 1 else None)
    n = len(lat["e2e"])
    fig.update_layout(title=f"{title}<br><sup>{n:,} completed requests; TPOT over the "
                            f"{len(lat['tpot']):,} with more than one output token</sup>",
                      height=400, margin=dict(t=90))
    return fig


def occupancy(result: Any, title: str = "KV cache, running and waiting requests over time"):
    """KV-cache occupancy (% of the blocks) and, when the result has them, the requests
    running (the decode batch) and waiting, against simulated time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    kv = result.kv_cache
    q = result.queue or {}
    both = bool(q.get("timeline_s"))
    fig = make_subplots(rows=2 if both else 1, cols=1, shared_xaxes=True, vertical_spacing=0.1)
    t = kv["timeline_s"]
    tf, tu = prefix_for(t, "s")
    fig.add_trace(go.Scatter(
        name="KV occupancy", x=[v / tf for v in t], y=[100 * v for v in kv["occupancy"]],
        mode="lines", line=dict(color="#1f5fbf"),
        hovertemplate="%{x:.4g} " + tu + "<br>KV cache %{y:.1f}% full<extra></extra>"), 1, 1)
    fig.update_yaxes(title_text="KV cache (% of blocks)", range=[0, 105], row=1, col=1)
    if both:
        qt = [v / tf for v in q["timeline_s"]]
        for key, name, color in (("running", "running (the decode batch)", "#2b9348"),
                                 ("waiting", "waiting (queue)", "#e07b00")):
            fig.add_trace(go.Scatter(
                name=name, x=qt, y=q[key], mode="lines", line=dict(color=color),
                hovertemplate="%{x:.4g} " + tu + "<br>" + name + " %{y}<extra></extra>"), 2, 1)
        fig.update_yaxes(title_text="requests", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=axis_title("simulated time", tu), row=2 if both else 1, col=1)
    fig.update_layout(title=f"{title}<br><sup>{len(t):,} samples; KV capacity "
                            f"{kv['capacity_tokens']:,} tokens in {kv['blocks']:,} blocks of "
                            f"{kv['block_size']}, peak {100 * kv['peak_occupancy']:.1f}%</sup>",
                      height=520 if both else 340, margin=dict(t=90),
                      legend=dict(orientation="h", x=0, y=-0.18, xanchor="left", yanchor="top"))
    return fig


def rate_sweep(sweep: Any, slo: dict[str, float | None] | None = None,
               title: str = "Throughput and tail latency against the arrival rate"):
    """Output tokens/s, p99 TTFT and p99 TPOT against the arrival rate (requests/s), side by
    side; SLOs dashed."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    rows = sweep.rows()
    rates = [r["rate_req_s"] for r in rows]
    slo = slo or {}
    panels = (("throughput_tok_s", "throughput", "tokens/s", None),
              ("ttft_p99_s", "p99 TTFT", "s", slo.get("ttft_s")),
              ("tpot_p99_s", "p99 TPOT", "s", slo.get("tpot_s")))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=[name for _, name, _, _ in panels])
    for col, (key, name, unit, limit) in enumerate(panels, start=1):
        ys = [r[key] for r in rows]
        factor, shown = prefix_for(ys + ([limit] if limit else []), unit)
        fig.add_trace(go.Scatter(
            name=name, x=rates, y=[y / factor if y is not None else None for y in ys],
            mode="lines+markers", showlegend=False,
            customdata=[[r["throughput_req_s"], r["preemptions"], r["rejected"]] for r in rows],
            hovertemplate="rate %{x:.4g} requests/s<br>" + name + " %{y:.4g} " + shown
                          + "<br>%{customdata[0]:.4g} requests/s completed · "
                            "%{customdata[1]} preemptions · %{customdata[2]} rejected"
                            "<extra></extra>"), 1, col)
        if limit:
            fig.add_hline(y=limit / factor, line_dash="dash", line_color="#c0392b", row=1,
                          col=col, annotation_text="SLO " + fmt(limit, "s"),
                          annotation_position="top left")
        fig.update_yaxes(title_text=axis_title(name, shown), rangemode="tozero", row=1, col=col)
        fig.update_xaxes(title_text="arrival rate (requests/s)", row=1, col=col,
                         type="log" if rates[-1] > LOG_SPAN * rates[0] else "linear")
    fig.update_layout(title=title, height=380)
    return fig
