"""The training report: one training step (:class:`simulators.training.TrainResult`) —
headline numbers, the time breakdown, memory per device by category for every pipeline
stage, what training ``N`` tokens costs, and the pipeline timeline (compute, communication
and bubbles per stage). One self-contained HTML file, built like the other reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.report.design import cards, design_label, kv_list
from dse.report.html import el, plot_text, render_page, write_page
from dse.report.units import axis_title, fmt, prefix_for

#: Colours of the timeline's span categories and of the memory categories.
COLORS = {"forward": "#3b7dd8", "backward": "#e07b39", "bubble": "#d9d9d9", "dp": "#7a5195",
          "optimizer": "#2f9e44", "weights": "#3b7dd8", "gradients": "#e07b39",
          "master_weights": "#7a5195", "optimizer_states": "#bc5090",
          "activations": "#2f9e44", "workspace": "#8d99ae"}


def training_totals(r: Any) -> list[tuple[str, str]]:
    """(label, value) of a training step's headline numbers."""
    rows = [("step time", fmt(r.step_time_s, "s")), ("throughput", fmt(r.tokens_per_s, "tokens/s")),
            ("MFU / HFU", f"{100 * r.mfu:.1f}% / {100 * r.hfu:.1f}%"),
            ("devices", f"{r.devices:,}"),
            ("peak memory per device", f"{fmt(r.peak_memory_bytes, 'B')} of "
                                       f"{fmt(r.memory_capacity_bytes, 'B')}"),
            ("bubble", f"{100 * r.bubble_fraction:.1f}% of the pipeline's time"),
            ("energy per step", fmt(r.energy_per_step_j, "J")),
            ("system cost", fmt(r.system_cost_usd, "US$"))]
    t = r.to_train()
    if t:
        rows += [(f"train {t['tokens']:.3g} tokens", f"{t['time_days']:.3g} days, "
                  f"{fmt(t['cost_usd'], 'US$')}, {t['energy_mwh']:.3g} MWh")]
    return rows


def memory_figure(r: Any):
    import plotly.graph_objects as go
    cats = [c for c in COLORS if c in r.memory[0]]
    stages = [f"stage {i}" for i in range(len(r.memory))]
    f, unit = prefix_for([sum(m.values()) for m in r.memory], "B")
    fig = go.Figure()
    for c in cats:
        fig.add_trace(go.Bar(name=c.replace("_", " "), x=stages, y=[m.get(c, 0.0) / f for m in r.memory],
                             marker_color=COLORS[c]))
    if r.memory_capacity_bytes:
        fig.add_hline(y=r.memory_capacity_bytes / f, line_dash="dash",
                      annotation_text="device memory")
    fig.update_layout(barmode="stack", title="Memory per device by category",
                      yaxis=dict(title=axis_title("memory", unit)), height=380)
    return fig


#: Spans drawn at most; a longer timeline shows the first and last pipeline stages only.
MAX_SPANS = 20000


def timeline_figure(r: Any):
    import plotly.graph_objects as go
    f, unit = prefix_for([r.step_time_s], "s")
    fig = go.Figure()
    by_cat: dict[str, list] = {}
    spans = r.spans
    if len(spans) > MAX_SPANS:
        devs = sorted({d for d, *_ in spans})
        keep = {devs[0], devs[-1]}
        spans = [sp for sp in spans if sp[0] in keep]
    for dev, stream, name, cat, start, end in spans:
        by_cat.setdefault(cat, []).append((f"device {dev} {stream}", name, start, end))
    for cat, rows in by_cat.items():
        fig.add_trace(go.Bar(
            name=cat, orientation="h", y=[plot_text(y) for y, *_ in rows],
            base=[s / f for *_, s, _ in rows], x=[max(e - s, 0.0) / f for *_, s, e in rows],
            marker_color=COLORS.get(cat, "#5f6b7a"), marker_line_width=0, width=0.7,
            customdata=[[plot_text(n), s, e - s] for _, n, s, e in rows],
            hovertemplate="<b>%{customdata[0]}</b><br>start %{customdata[1]:.4~s}s · "
                          "duration %{customdata[2]:.4~s}s<extra></extra>"))
    lanes = len({y for rows in by_cat.values() for y, *_ in rows})
    fig.update_layout(title="Pipeline timeline (compute, communication, bubbles)",
                      barmode="overlay", height=max(260, 150 + 30 * lanes),
                      xaxis=dict(title=axis_title("time", unit)),
                      yaxis=dict(type="category", categoryorder="category descending"))
    return fig


def memory_table(r: Any):
    cats = list(r.memory[0])
    head = el("tr", el("th", "stage"), [el("th", c.replace("_", " ")) for c in cats],
              el("th", "total"))
    body = [el("tr", el("td", str(i)), [el("td", fmt(m[c], "B")) for c in cats],
               el("td", fmt(sum(m.values()), "B"))) for i, m in enumerate(r.memory)]
    return el("div", el("table", el("thead", head), el("tbody", body)), class_="tablewrap")


def training_page(r: Any, title: str | None = None) -> str:
    lay = r.layout
    par = ", ".join(f"{k} {lay[k]}" for k in ("dp", "tp", "pp", "cp", "zero", "chunks")
                    if lay.get(k) not in (None, 1, 0) or k == "dp")
    title = title or f"{r.model} training on {r.devices} x {design_label(r.device)}"
    body = [el("h1", title),
            el("p", f"{par}; {lay['schedule']} schedule, {r.microbatches} micro-batches of "
                    f"{lay['micro_batch']}; recompute {lay['recompute']}; precision "
                    f"{r.precision['name']}; optimizer {r.optimizer['name']} "
                    f"({r.optimizer['impl']})", class_="note"),
            cards(training_totals(r)),
            el("h2", "Where the step's time goes"),
            kv_list([(k.replace("_s", "").replace("_", " "), fmt(v, "s" if k.endswith("_s")
                                                                  else "J"))
                     for k, v in r.breakdown_s.items()]),
            el("h2", "Memory per device"), memory_table(r),
            el("div", id="fig-memory", class_="plot", data_figure="memory"),
            el("h2", "Timeline"),
            el("div", id="fig-timeline", class_="plot", data_figure="timeline")]
    figs = {"memory": memory_figure(r), "timeline": timeline_figure(r)}
    return render_page(title, el("main", *body), figs, {"kind": "training"})


def write_training_report(r: Any, path: str | Path, title: str | None = None) -> Path:
    """Write the training report of ``r`` to ``path`` (one self-contained HTML file)."""
    return write_page(path, training_page(r, title))
