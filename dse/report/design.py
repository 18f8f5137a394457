"""The one-design report: totals, breakdowns, timeline, roofline of one :class:`Result`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.report.html import Markup, el, render_page, write_page
from dse.report.roofline import roofs_for
from dse.report.units import fmt
from simulators.result import Result


def design_label(accelerator: dict[str, Any]) -> str:
    """``"npu:datacenter-bf16"`` (template and preset) from ``Result.accelerator``."""
    name = str(accelerator.get("template", "?"))
    return name + (f":{accelerator['preset']}" if accelerator.get("preset") else "")


def totals(result: Result) -> list[tuple[str, str]]:
    """(label, formatted value) of the headline numbers, in display order."""
    rows = [("latency", fmt(result.latency_s, "s")), ("energy", fmt(result.energy_j, "J")),
            ("area", fmt(result.area_mm2, "mm²")), ("cost per chip", fmt(result.cost_usd, "US$")),
            ("TDP", fmt(result.tdp_w, "W")), ("average power", fmt(result.avg_power_w, "W")),
            ("energy-delay product", fmt(result.edp, "J·s")),
            ("throughput", fmt(result.throughput, result.throughput_unit))]
    mem = result.memory
    if mem:
        rows.append(("memory", f"{mem['devices']} x {mem['standard']}, "
                     f"{fmt(mem['capacity_bytes'], 'B')}, {fmt(mem['bandwidth_Bps'], 'B/s')}"))
    if result.accelerator.get("dies"):
        rows.append(("dies", f"{result.accelerator['dies']} x "
                     f"{fmt(result.accelerator['die_mm2'], 'mm²')}"))
    rows += [(f"area: {k}", fmt(v, "mm²")) for k, v in result.area_breakdown_mm2.items() if v]
    rows += [(f"cost: {k}", fmt(v, "US$")) for k, v in result.cost_breakdown_usd.items() if v]
    rows += [(f"utilisation {u}", f"{100 * v:.1f}%") for u, v in sorted(result.utilisation.items())]
    flops = sum(r.flops for r in result.ops)
    rows += [("ops", f"{len(result.ops):,}"), ("FLOPs", fmt(flops, "FLOP")),
             ("achieved", fmt(flops / result.latency_s, "FLOP/s") if result.latency_s > 0 else "–")]
    return rows


def hardware_rows(accelerator: dict[str, Any]) -> list[tuple[str, str]]:
    """(parameter, value with unit) of the design's hardware, units from the template."""
    units: dict[str, str] = {}
    try:
        from accelerators.registry import get_template
        units = {p.name: p.unit for p in get_template(accelerator.get("template", "")).PARAMS}
    except Exception:  # template not registered (e.g. a test template): print without units
        units = {}
    return [(k, fmt(v, units.get(k, "")) if isinstance(v, (int, float)) and not isinstance(v, bool)
             else str(v)) for k, v in sorted((accelerator.get("hw") or {}).items())]


def cards(pairs: list[tuple[str, str]]) -> Markup:
    return el("div", [el("div", el("div", k, class_="k"), el("div", v, class_="v"), class_="card")
                      for k, v in pairs], class_="cards")


def kv_list(pairs: list[tuple[str, str]], id: str | None = None) -> Markup:
    return el("dl", [(el("dt", k), el("dd", v)) for k, v in pairs], class_="kv", id=id)


def design_page(result: Result, title: str | None = None, template: Any = None) -> str:
    """The HTML text of the one-design report."""
    from dse.report.figures import design_figures
    label = design_label(result.accelerator)
    title = title or f"{result.model} {result.phase} on {label}"
    figs = design_figures(result, roofs_for(result, template))
    body = el("main",
              el("h1", title),
              el("p", f"simulator {result.simulator_version} · fidelity {result.fidelity} · "
                      f"{result.events:,} events", class_="note"),
              cards(totals(result)),
              el("h2", "Design"), kv_list([("accelerator", label), ("model", result.model),
                                           ("phase", result.phase)] + hardware_rows(result.accelerator)),
              el("h2", "Breakdowns"),
              el("div", id="fig-by_kind", class_="plot", data_figure="by_kind"),
              el("div", id="fig-by_component", class_="plot", data_figure="by_component"),
              el("h2", "Timeline"),
              el("p", "One row per unit; hover a bar for the op. Drag to zoom, double-click to reset.",
                 class_="note"),
              el("div", id="fig-timeline", class_="plot", data_figure="timeline"),
              el("h2", "Roofline"),
              el("div", id="fig-roofline", class_="plot tall", data_figure="roofline"))
    return render_page(title, body, figs, {"kind": "design"})


def write_design_report(result: Result, path: str | Path, title: str | None = None) -> Path:
    """Write the one-design report of ``result`` to ``path`` (one self-contained HTML file)."""
    return write_page(path, design_page(result, title))
