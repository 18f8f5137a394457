"""The study report: Pareto front, the selected Pareto design's details, the Pareto table,
parallel coordinates, parameter importances, optimisation history, and what could not run."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from dse.report.design import cards, design_label, hardware_rows, totals
from dse.report.html import Markup, el, figure_json, render_page, script_json, write_page
from dse.report.study_data import (FAILED, INFEASIBLE, PARETO, SERVING_KEYS, StudyData,
                                   open_study, read_study, redact, unmet_text)
from dse.report.units import fmt

#: Pareto designs re-simulated for the detail view, at most [E: 30 GPT-2 decode designs
#: re-simulate and draw in about 7 s (benchmarks/report_size.py, "report write")].
MAX_DETAILS = 30

#: Bytes of embedded detail figures, at most: designs past it get no details [E: plotly.js is
#: 4.8 MB and a 1,000-trial study's own figures and hover text about 0.9 MB (measured,
#: benchmarks/report_size.py), so 3.5 MB of details keeps the report under the issue's 10 MB;
#: one design's four figures take 36 kB for GPT-2 decode (173 ops), 134 kB for a LLaMA-2-7B
#: prefill (771 ops)].
DETAILS_BUDGET_BYTES = 3_500_000

#: The detail figures of a design (one iteration's ops) [R dse/report/figures.py]; a serving
#: study's designs show their serving run's instead [R dse/report/serving.py].
DETAIL_FIGURES = ("by_kind", "by_component", "timeline", "roofline")

#: Objective pairs (2-D) and triples (3-D) offered in the Pareto view, at most.
MAX_PAIRS = 15
MAX_TRIPLES = 10


def _pairs(keys: list[str], r: int, cap: int) -> list[tuple[str, ...]]:
    return list(itertools.islice(itertools.combinations(keys, r), cap))


def table(data: StudyData) -> dict[str, Any]:
    """The Pareto designs as a table: column titles, display rows, sort keys, trial numbers."""
    from dse.report.study_figures import metric_unit
    metrics = data.metric_keys
    params = data.param_keys
    cols = ["trial"] + metrics + params  # units are in the cells
    rows, keys, trials = [], [], []
    for t in data.pareto:
        cells = [fmt(t.values.get(k), metric_unit(data, k)) for k in metrics]
        rows.append([str(t.number)] + cells + [fmt(t.params.get(k), data.param_units.get(k, ""))
                                                   for k in params])
        keys.append([t.number] + [t.values.get(k) for k in metrics] + [_key(t.params.get(k)) for k in params])
        trials.append(t.number)
    return {"columns": cols, "rows": rows, "keys": keys, "trials": trials}


def _key(v: Any) -> Any:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else ("" if v is None else str(v))


def details(data: StudyData, max_details: int = MAX_DETAILS,
            resim: Callable[[Any], Any] | None = None,
            budget_bytes: int = DETAILS_BUDGET_BYTES) -> tuple[dict[str, Any], dict[str, Any]]:
    """Re-simulate up to ``max_details`` Pareto designs; return (details by trial number, the
    figures they reference). ``resim(trial_row) -> Resimulated`` (default: from the trial's
    ``design`` user attr) lets the study runner supply its own rebuild of a trial's design.
    A serving study's design shows its serving run (latency distributions, KV cache over
    time) instead of one iteration's ops."""
    from dse.report.figures import design_figures
    from dse.report.resimulate import resimulate_trial
    from dse.report.roofline import roofs_for
    from dse.report.serving import serving_figures, serving_totals
    from simulators.serving import ServingResult
    spec = data.user_attrs.get("dse_spec")
    resim = resim or (lambda row: resimulate_trial(row, spec))
    out: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    used = 0
    for t in data.pareto[:max_details]:
        if used > budget_bytes:
            break
        info = [("status", t.status)] + [(k, fmt(t.values[k], _unit(data, k))) for k in data.metric_keys
                                         if k in t.values]
        # searched parameters that are not hardware (architecture, design choice, assignment);
        # the full hardware follows from the rebuilt design
        info += [(k, fmt(v, data.param_units.get(k, ""))) for k, v in sorted(t.params.items())
                 if not k.startswith("hw.")]
        entry: dict[str, Any] = {"label": f"trial {t.number}", "info": info, "workloads": [],
                                 "error": None}
        sim = resim(t)
        if sim.template is not None:
            entry["label"] = f"trial {t.number} · {design_label(sim.template.describe())}"
            entry["info"] += hardware_rows(sim.template.describe())
        errors = [sim.error] if sim.error else []
        for w, (label, result, error) in enumerate(sim.runs):
            if result is None:
                errors.append(f"{label}: {error}")
                continue
            names = {}
            serving = isinstance(result, ServingResult)
            shown = (serving_figures(result) if serving
                     else design_figures(result, roofs_for(result, sim.template)))
            for name, fig in shown.items():
                key = f"t{t.number}w{w}_{name}"
                figures[key] = fig = figure_json(fig)
                used += len(script_json(fig))
                names[name] = key
            entry["workloads"].append({"label": label, "figures": names, "totals": (
                serving_totals(result) if serving else totals(result))})
        entry["error"] = "; ".join(errors) or None
        out[str(t.number)] = entry
    return out, figures


def _unit(data: StudyData, key: str) -> str:
    from dse.report.study_figures import metric_unit
    return metric_unit(data, key)


def _summary(data: StudyData) -> Markup:
    c = data.counts()
    parts = [("trials", f"{len(data.trials):,}"), ("Pareto designs", f"{c[PARETO]:,}"),
             ("feasible, dominated", f"{c['dominated']:,}"), ("infeasible", f"{c[INFEASIBLE]:,}"),
             ("could not run", f"{c[FAILED]:,}")]
    return cards(parts)


def _objectives_text(data: StudyData) -> str:
    return ", ".join(f"{d} {k}" for k, d in zip(data.objectives, data.directions))


def _failures(data: StudyData) -> Markup | None:
    reasons = Counter(t.reason or "unknown" for t in data.trials if t.status in (FAILED, INFEASIBLE))
    if not reasons:
        return None
    rows = [el("tr", el("td", r), el("td", f"{n:,}")) for r, n in reasons.most_common(50)]
    return el("div", el("table", el("thead", el("tr", el("th", "reason"), el("th", "trials"))),
                        el("tbody", rows)), class_="tablewrap")


def study_page(data: StudyData, study: Any, max_details: int = MAX_DETAILS,
               resim: Callable[[Any], Any] | None = None) -> str:
    """The HTML text of the study report."""
    from dse.report import study_figures as sf
    figs: dict[str, Any] = {}
    metrics = data.objectives if len(data.objectives) >= 2 else data.metric_keys[:3]
    body: list[Any] = [el("h1", f"Study: {data.name}"),
                       el("p", f"objectives: {_objectives_text(data)}"
                               + (f" · storage {data.storage}" if data.storage else ""), class_="note"),
                       _summary(data)]
    unmet = unmet_text(data)
    if unmet:
        body.append(el("p", "No feasible design: " + "; ".join(unmet) + ".", class_="warn"))
    if data.constraints:
        body.append(el("p", "constraints: " + "; ".join(
            c.label(lambda v, k=c.metric: fmt(v, _unit(data, k))) for c in data.constraints),
            class_="note"))
    if data.simulator_versions:
        body.append(el("p", "simulator " + ", ".join(data.simulator_versions), class_="note"))

    # Pareto front ------------------------------------------------------------------------
    body.append(el("h2", "Pareto front"))
    if not data.plotted:
        body.append(el("p", "No trial has objective values yet.", class_="note"))
    else:
        pairs = _pairs(metrics, 2, MAX_PAIRS) if len(metrics) >= 2 else []
        # a serving study: each objective against the serving metrics too
        pairs += [(o, k) for o in data.objectives for k in SERVING_KEYS
                  if k in data.metric_keys and k != o and (o, k) not in pairs
                  and (k, o) not in pairs][:max(0, MAX_PAIRS - len(pairs))]
        body.append(el("p", "Filled red circles: Pareto designs (feasible, not dominated). Blue: "
                            "feasible but dominated. Yellow crosses: infeasible (violate a "
                            "constraint). Dashed lines: constraint thresholds. Hover a point for "
                            "all its parameters and metrics; click a Pareto point to see its details "
                            "below.", class_="note"))
        cols = []
        if pairs:
            names = []
            for x, y in pairs:
                key = f"pareto2d_{x}_{y}"
                figs[key] = sf.pareto_2d(data, x, y)
                names.append((key, f"{x} vs {y}"))
            cols.append(el("div", _switch("fig-pareto2d", "axes", names),
                           el("div", id="fig-pareto2d", class_="plot", data_figure=names[0][0])))
        if len(metrics) >= 3 and len(data.objectives) >= 3:
            names = []
            for x, y, z in _pairs(metrics, 3, MAX_TRIPLES):
                key = f"pareto3d_{x}_{y}_{z}"
                figs[key] = sf.pareto_3d(data, x, y, z)
                names.append((key, f"{x}, {y}, {z}"))
            cols.append(el("div", _switch("fig-pareto3d", "axes", names),
                           el("div", id="fig-pareto3d", class_="plot", data_figure=names[0][0])))
        # side by side: both in the first screen, and the 3-D (WebGL) canvas stays small,
        # which is what costs most without a GPU (software rendering is fill-rate bound)
        body.append(el("div", *cols, class_="grid2") if len(cols) == 2 else cols)

    # selected design -----------------------------------------------------------------------
    det, det_figs = details(data, max_details, resim) if data.pareto else ({}, {})
    figs.update(det_figs)
    body.append(el("h2", "Selected Pareto design"))
    if det:
        n_pareto = len(data.pareto)
        body.append(el("p", f"Details of the first {len(det)} of {n_pareto} Pareto designs (best "
                            f"{data.objectives[0]} first; at most {max_details} designs or "
                            f"{DETAILS_BUDGET_BYTES / 1e6:g} MB of figures), re-simulated from "
                            f"each trial's stored design." if n_pareto > len(det) else
                            "Each Pareto design re-simulated from its trial's stored design.",
                       class_="note"))
        body.append(el("div",
                       el("label", "design ", el("select", [el("option", det[k]["label"], value=k)
                                                            for k in det], id="design-select")),
                       el("label", "workload ", el("select", id="workload-select"), style="display:none"),
                       class_="controls"))
        body.append(el("h3", "", id="detail-title"))
        body.append(el("p", "", id="detail-message", class_="note error"))
        body.append(el("div", el("div", el("h3", "Design"), el("dl", id="detail-design", class_="kv")),
                       el("div", el("h3", "Totals"), el("dl", id="detail-totals", class_="kv")),
                       class_="grid2"))
        for name in dict.fromkeys(n for e in det.values() for w in e["workloads"]
                                  for n in w["figures"]) or DETAIL_FIGURES:
            body.append(el("div", id=f"fig-detail-{name}", class_="plot", data_detail=name))
    else:
        body.append(el("p", "No Pareto design yet.", class_="note"))

    # table ---------------------------------------------------------------------------------
    body.append(el("h2", "Pareto designs"))
    body.append(el("p", "Click a column title to sort; click a row to show that design above.",
                   class_="note"))
    body.append(el("div", el("table", el("thead"), el("tbody"), id="pareto-table"), class_="tablewrap"))

    # the rest ------------------------------------------------------------------------------
    for heading, key, fig in (
            ("Parameters against objectives", "parcoords", sf.parallel_coordinates(data)),
            ("Parameter importances", "importances", sf.param_importances(data, study)),
            ("Optimisation history", "history", sf.history(data))):
        body.append(el("h2", heading))
        if fig is None:
            body.append(el("p", "Not enough completed trials for this view.", class_="note"))
            continue
        figs[key] = fig
        if key == "parcoords":
            body.append(el("p", "One line per trial through its parameters and objectives (each "
                                "axis spans the values seen; \"(log)\": log scale). Hover a vertex "
                                "for the value, click a line to select the design; click a legend "
                                "entry to hide a group.", class_="note"))
        body.append(el("div", id=f"fig-{key}", class_="plot", data_figure=key))
    fails = _failures(data)
    if fails is not None:
        body.append(el("h2", "Infeasible designs and designs that could not run"))
        body.append(fails)
    initial = next(iter(det), None)
    return render_page(f"Study: {data.name}", el("main", *body), figs,
                       {"kind": "study", "details": det, "table": table(data),
                        "initial_design": initial})


def _switch(target: str, label: str, options: list[tuple[str, str]]) -> Markup:
    select = el("select", [el("option", text, value=key) for key, text in options],
                data_switch=target, disabled=len(options) < 2)
    return el("div", el("label", label + " ", select), class_="controls")


def write_study_report(source: Any, out_path: str | Path, study_name: str | None = None,
                       max_details: int = MAX_DETAILS,
                       resim: Callable[[Any], Any] | None = None) -> Path:
    """Write the study report of ``source`` (study output directory, ``.db`` file, storage URL
    or ``optuna.Study``) to ``out_path``."""
    study = open_study(source, study_name)
    storage = "" if hasattr(source, "study_name") else redact(str(source))
    data = read_study(study, storage=storage)
    return write_page(out_path, study_page(data, study, max_details, resim))
