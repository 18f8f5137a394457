"""Reports: escaping, the page's self-containment, figure contents, reading studies, the CLI.

The browser-level checks (rendering, console errors, screenshots) are in
``tests/browser/test_report_browser.py``.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path

import networkx as nx
import pytest

from dse.errors import BadInput
from dse.report import html as H
from simulators.engine import simulate
from tests.toy_template import Toy
from workloads.ir import Op, Workload

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.ERROR)

XSS = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(2)><b>b</b>'


# ----------------------------------------------------------------------------- helpers
def toy_result(names=("x", "y", "z"), edges=(("x", "z"),), table=None, flops=100):
    g = nx.DiGraph()
    for i, n in enumerate(names):
        g.add_node(n, op=Op(name=n, kind="matmul" if i % 2 == 0 else "softmax", target="t",
                            input_shapes=(), output_shapes=(), dtype="bf16", bytes_per_element=2,
                            flops=flops, activation_bytes_read=50), index=i)
    for a, b in edges:
        g.add_edge(a, b, bytes=8)
    w = Workload(graph=g, model="toy", phase="forward", dtype="bf16")
    table = table or {"x": ("a", 1e-3, 1e5), "y": ("b", 2e-3, 0), "z": ("a", 0.5e-3, 2e6)}
    return simulate(w, Toy(table))


class Tags(HTMLParser):
    """Collects start tags and their attributes (script/style bodies are CDATA, not parsed)."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags_of(text: str) -> list[tuple[str, dict]]:
    p = Tags()
    p.feed(text)
    return p.tags


def report_blob(text: str) -> dict:
    m = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', text, re.S)
    assert m, "the page has no data blob"
    return json.loads(m.group(1))


def hand_study(rows, directions=("minimize", "minimize"), names=("latency_s", "energy_j"),
               constraints=None, storage=None, study_name="hand"):
    """A study whose trials have the given objective values (None: a failed trial) and user
    attrs; constraint values via Optuna 5's ``set_constraint``."""
    s = optuna.create_study(directions=list(directions), storage=storage, study_name=study_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.set_metric_names(list(names))
    if constraints is not None:
        s.set_user_attr("constraints", constraints)
    for i, (values, attrs, cons) in enumerate(rows):
        t = s.ask()
        t.suggest_int("hw.rows", 1, 1000)
        t.suggest_categorical("hw.dataflow", ["ws", "os"])
        for k, v in (attrs or {}).items():
            t.set_user_attr(k, v)
        for k, v in (cons or {}).items():
            t.set_constraint(k, v)
        if values is None:
            s.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            s.tell(t, list(values))
    return s


# ----------------------------------------------------------------------------- escaping
def test_el_escapes_text_and_attributes_but_not_markup():
    inner = H.el("b", XSS)
    out = H.el("p", XSS, inner, title=XSS_ATTR, data_x="1", hidden=True, gone=None)
    assert "<script>" not in out and "<img" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert 'title="&quot;&gt;&lt;img src=x onerror=alert(2)&gt;&lt;b&gt;b&lt;/b&gt;"' in out
    assert "<b>&lt;script&gt;" in out  # the nested element is kept, its text escaped
    assert ' data-x="1"' in out and " hidden" in out and "gone" not in out


@pytest.mark.parametrize("payload", [XSS, "</script><script>alert(3)</script>", "<!--",
                                     "a\u2028b\u2029c", "&amp; <> ' \""])
def test_script_json_cannot_close_the_script_and_round_trips(payload):
    obj = {"name": payload, "list": [payload, 1.5, None]}
    text = H.script_json(obj)
    assert "<" not in text and ">" not in text and "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == obj


def test_compact_rounds_floats_and_drops_non_finite():
    out = H.compact({"a": 1.234567891, "b": float("nan"), "c": float("inf"), "d": (1, 2.0)})
    assert out == {"a": 1.23457, "b": None, "c": None, "d": [1, 2.0]}


def test_share_arrays_stores_a_repeated_list_once():
    long = list(range(40))
    figs = {"f1": {"data": [{"x": long, "y": [1, 2]}], "layout": {}},
            "f2": {"data": [{"hovertext": long}], "layout": {}},
            "f3": {"data": [{"x": list(range(50))}], "layout": {}}}
    out, shared = H.share_arrays(figs)
    assert shared == [long]
    assert out["f1"]["data"][0]["x"] == {"$shared": 0} == out["f2"]["data"][0]["hovertext"]
    assert out["f1"]["data"][0]["y"] == [1, 2]
    assert out["f3"]["data"][0]["x"] == list(range(50))  # occurs once: kept in place


# ----------------------------------------------------------------------------- the design report
def test_design_report_is_self_contained_with_plotly_inlined_once(tmp_path):
    from dse.report import write_design_report
    from dse.report.html import plotly_js
    r = toy_result()
    path = write_design_report(r, tmp_path / "d.html")
    text = path.read_text(encoding="utf-8")
    js = plotly_js()
    assert text.count(js[:200]) == 1  # the bundle is in the page exactly once
    tags = tags_of(text)
    scripts = [a for t, a in tags if t == "script"]
    assert len(scripts) == 3 and not any("src" in a for a in scripts)
    assert not any(t in ("link", "iframe", "img") for t, _ in tags)
    assert any(t == "meta" and "connect-src 'none'" in a.get("content", "") for t, a in tags)
    blob = report_blob(text)
    assert set(blob["figures"]) == {"by_kind", "by_component", "timeline", "roofline"}
    divs = {a.get("data-figure") for t, a in tags if t == "div" and "data-figure" in a}
    assert divs == set(blob["figures"])


def test_timeline_has_one_bar_per_op_at_its_simulated_time():
    from dse.report.figures import timeline
    r = toy_result()
    fig = timeline(r).to_plotly_json()
    bars = [(t["customdata"][i][0], t["base"][i], t["x"][i]) for t in fig["data"]
            for i in range(len(t["x"]))]
    assert len(bars) == len(r.ops)
    factor = 1e-3  # latency 3.5 ms -> the axis is in ms
    assert "time (ms)" in fig["layout"]["xaxis"]["title"]["text"]
    for rec in r.ops:
        name, base, width = next(b for b in bars if b[0] == rec.name)
        assert base == pytest.approx(rec.start_s / factor)
        assert width == pytest.approx(rec.duration_s / factor)


def test_overlapping_ops_on_one_unit_get_separate_rows():
    from dse.report.figures import lanes

    class TwoSlots(Toy):
        def resources(self):
            from accelerators.base import Resources
            return Resources(units={"a": 2, "b": 1}, channels={"dram": self.hw.bandwidth_Bps})

    g = nx.DiGraph()
    for i, n in enumerate(("p", "q")):
        g.add_node(n, op=Op(name=n, kind="matmul", target="t", input_shapes=(), output_shapes=(),
                            dtype="bf16", bytes_per_element=2, flops=1), index=i)
    r = simulate(Workload(graph=g, model="m", phase="forward", dtype="bf16"),
                 TwoSlots({"p": ("a", 1e-3, 0), "q": ("a", 1e-3, 0)}))
    assert sorted(lanes(r)) == ["a #1", "a #2"]
    assert lanes(toy_result()) == ["a", "b", "a"]


def test_breakdowns_add_up_to_the_result():
    from dse.report.figures import component_breakdown, kind_breakdown
    r = toy_result()
    kinds = kind_breakdown(r).to_plotly_json()["data"]
    time_ms = sum(kinds[0]["x"])
    assert time_ms * 1e-3 == pytest.approx(sum(o.duration_s for o in r.ops), rel=1e-9)
    comp = component_breakdown(r).to_plotly_json()["data"][0]
    factor = {"J": 1, "mJ": 1e-3, "µJ": 1e-6, "nJ": 1e-9}
    unit = re.search(r"%\{y:\.4g\} (\S+)", comp["hovertemplate"]).group(1)
    assert sum(comp["y"]) * factor[unit] == pytest.approx(r.energy_j, rel=1e-9)


def test_roofline_points_and_roofs():
    from dse.report.figures import roofline
    from dse.report.roofline import Roofs, op_point, roofs_for
    r = toy_result()
    # Toy is not registered: roofs come from the data, labelled as observed
    roofs = roofs_for(r)
    assert roofs.peak_source == "best observed compute rate"
    assert roofs.bandwidths_Bps == {"best observed": max(o.bytes / o.duration_s for o in r.ops)}
    # with the design at hand, the bandwidth roof is its channel
    roofs = roofs_for(r, Toy({}, bandwidth_Bps=2e9))
    assert roofs.bandwidths_Bps == {"dram": 2e9} and roofs.bandwidth_source == "template channels"
    fig = roofline(r, roofs).to_plotly_json()
    points = [t for t in fig["data"] if t["mode"] == "markers"]
    assert sum(len(t["x"]) for t in points) == sum(op_point(o) is not None for o in r.ops)
    assert fig["layout"]["xaxis"]["type"] == "log" and "FLOP/B" in fig["layout"]["xaxis"]["title"]["text"]
    roof = next(t for t in fig["data"] if t["mode"] == "lines")
    # the slanted part has slope bandwidth: y/x at the first point = 2e9 FLOP/s per FLOP/B
    unit = re.search(r"\((\S*)FLOP/s\)", fig["layout"]["yaxis"]["title"]["text"]).group(1)
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[unit]
    assert roof["y"][0] * scale / roof["x"][0] == pytest.approx(2e9, rel=1e-5)
    assert isinstance(Roofs(None, ""), Roofs)


def test_peak_hook_of_a_template_is_used():
    from dse.report.roofline import roofs_for

    class WithPeak(Toy):
        def peak_flops_per_s(self):
            return 5e12

    roofs = roofs_for(toy_result(), WithPeak({}))
    assert roofs.peak_flops_per_s == 5e12 and roofs.peak_source == "template peak"


def test_design_report_of_a_real_npu_design(tmp_path):
    from dse import api
    from dse.report import write_design_report
    r = api.simulate("gpt2", "npu", phase="decode", batch=1, context=128)
    text = write_design_report(r, tmp_path / "npu.html").read_text(encoding="utf-8")
    blob = report_blob(text)
    tl = blob["figures"]["timeline"]["data"]
    assert sum(len(t["x"]) if isinstance(t["x"], list) else len(blob["shared"][t["x"]["$shared"]])
               for t in tl) == len(r.ops)
    roof = [t for t in blob["figures"]["roofline"]["data"] if t["mode"] == "lines"]
    # the NPU's DRAM channel: 600 GB/s of HBM2 streamed at HBM's sustained 88.6 %
    assert len(roof) == 1 and "dram 531.6 GB/s" in roof[0]["name"]
    assert "gpt2 decode on npu:datacenter-bf16" in text


# ----------------------------------------------------------------------------- reading studies
def test_statuses_pareto_and_constraints_from_set_constraint():
    rows = [
        ((1.0, 5.0), {}, {"avg_power_w<=10": -1.0}),      # Pareto
        ((2.0, 2.0), {}, {"avg_power_w<=10": -1.0}),      # Pareto
        ((3.0, 3.0), {}, {"avg_power_w<=10": -1.0}),      # dominated by (2, 2)
        ((0.5, 0.5), {}, {"avg_power_w<=10": 4.0}),       # infeasible (would dominate all)
        (None, {"infeasible_reason": "ifmap too small"}, None),  # could not run
        ((2.0, 2.0), {}, {"avg_power_w<=10": -2.0}),      # duplicate of a Pareto point: Pareto
    ]
    from dse.report.study_data import DOMINATED, FAILED, INFEASIBLE, PARETO, read_study
    data = read_study(hand_study(rows))
    assert [t.status for t in data.trials] == [PARETO, PARETO, DOMINATED, INFEASIBLE, FAILED, PARETO]
    assert data.trials[4].reason == "ifmap too small"
    # thresholds parsed from the constraint's name, for drawing
    assert [(c.metric, c.max, c.min) for c in data.constraints] == [("avg_power_w", 10.0, None)]
    assert [t.number for t in data.pareto] == [0, 1, 5]


def test_maximised_objectives_and_thresholds_from_user_attr():
    from dse.report.study_data import PARETO, read_study
    rows = [((1.0, 100.0), {"avg_power_w": 5.0}, None),
            ((2.0, 300.0), {"avg_power_w": 5.0}, None),   # slower but more throughput: Pareto
            ((2.0, 200.0), {"avg_power_w": 5.0}, None),   # dominated by the one above
            ((0.1, 900.0), {"avg_power_w": 50.0}, None)]  # violates power <= 10 W
    s = hand_study(rows, directions=("minimize", "maximize"), names=("latency_s", "throughput"),
                   constraints=[{"metric": "avg_power_w", "max": 10.0}])
    data = read_study(s)
    assert [t.status == PARETO for t in data.trials] == [True, True, False, False]
    assert data.trials[3].status == "infeasible" and "avg_power_w" in data.trials[3].reason


def test_pareto_matches_brute_force_on_random_points():
    from dse.report.study_data import DOMINATED, PARETO, TrialRow, mark_pareto
    rng = random.Random(3)
    rows = [TrialRow(i, "COMPLETE", {"a": rng.randint(0, 9), "b": rng.randint(0, 9),
                                     "c": rng.random()}, {}, status=DOMINATED) for i in range(300)]
    mark_pareto(rows, ["a", "b", "c"], ["minimize", "maximize", "minimize"])

    def dominates(p, q):
        s = [(p.values["a"], q.values["a"]), (-p.values["b"], -q.values["b"]), (p.values["c"], q.values["c"])]
        return all(x <= y for x, y in s) and any(x < y for x, y in s)
    expect = {r.number for r in rows if not any(dominates(o, r) for o in rows)}
    assert {r.number for r in rows if r.status == PARETO} == expect


def test_open_study_errors_are_one_line_bad_inputs(tmp_path):
    from dse.report.study_data import open_study
    with pytest.raises(BadInput, match="study output directory"):
        open_study(tmp_path / "missing")
    with pytest.raises(BadInput, match="holding study.db"):
        open_study(tmp_path)
    assert not (tmp_path / "study.db").exists()  # nothing was created by looking
    url = f"sqlite:///{tmp_path / 'two.db'}"
    hand_study([((1, 1), {}, None)], storage=url, study_name="a")
    hand_study([((1, 1), {}, None)], storage=url, study_name="b")
    with pytest.raises(BadInput, match="several studies; pick one of a, b"):
        open_study(url)
    with pytest.raises(BadInput, match="expected one of a, b"):
        open_study(url, "c")
    assert open_study(url, "b").study_name == "b"


def test_storage_url_in_the_report_hides_the_password():
    from dse.report.study_data import redact
    assert redact("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"


# ----------------------------------------------------------------------------- the study report
@pytest.fixture(scope="module")
def npu_study():
    from tests.browser.fixtures import make_study
    return make_study(n_trials=24, seed=1)


def test_study_report_has_every_view_and_pareto_details(tmp_path, npu_study):
    from dse.report import write_study_report
    from dse.report.study_data import read_study
    data = read_study(npu_study)
    text = write_study_report(npu_study, tmp_path / "s.html", max_details=3).read_text(encoding="utf-8")
    blob = report_blob(text)
    figs = blob["figures"]
    pairs = list(itertools.combinations(data.objectives, 2))
    assert {f"pareto2d_{x}_{y}" for x, y in pairs} <= set(figs)
    assert "pareto3d_latency_s_energy_j_area_mm2" in figs
    assert {"parcoords", "importances", "history"} <= set(figs)
    # details: the first 3 Pareto designs, each re-simulated with its four figures
    pareto = data.pareto
    assert list(blob["details"]) == [str(t.number) for t in pareto[:3]]
    for n, d in blob["details"].items():
        assert d["error"] is None and len(d["workloads"]) == 1
        assert set(d["workloads"][0]["figures"]) == {"by_kind", "by_component", "timeline", "roofline"}
        trial = next(t for t in pareto if str(t.number) == n)
        latency = dict(d["workloads"][0]["totals"])["latency"]
        from dse.report.units import fmt
        assert latency == fmt(trial.values["latency_s"], "s")  # re-simulation reproduces the trial
    assert blob["table"]["trials"] == [t.number for t in pareto]
    assert blob["initial_design"] == str(pareto[0].number)
    # every point of the 2-D front carries its trial number and a hover text naming all params
    fig = figs[f"pareto2d_{pairs[0][0]}_{pairs[0][1]}"]
    n_points = 0
    for trace in fig["data"]:
        hover = trace["hovertext"]
        hover = blob["shared"][hover["$shared"]] if isinstance(hover, dict) else hover
        for h in hover:
            assert all(p in h for p in data.param_keys) and "latency_s" in h
        n_points += len(hover)
    assert n_points == len(data.plotted)


def test_study_report_escapes_hostile_names(tmp_path):
    from dse.report import write_study_report
    from tests.browser.fixtures import make_study
    s = make_study(n_trials=6, seed=2, name=XSS, param_prefix=XSS_ATTR + ".")
    text = write_study_report(s, tmp_path / "x.html", max_details=1).read_text(encoding="utf-8")
    assert XSS not in text and XSS_ATTR not in text and "<img" not in text
    assert "<title>Study: &lt;script&gt;alert(1)&lt;/script&gt;</title>" in text
    body_tags = tags_of(text.split("<body>", 1)[1])
    assert [t for t, _ in body_tags].count("script") == 3
    # Plotly renders a subset of HTML in titles, labels and hover text: every user string in a
    # figure must reach it escaped (shown literally), never as tags
    blob = report_blob(text)
    strings = list(_strings(blob["figures"])) + list(_strings(blob["shared"]))
    assert not [x for x in strings if "<img" in x or "<script" in x or "<b>b</b>" in x]
    assert any("&lt;img src=x onerror=alert(2)&gt;&lt;b&gt;b&lt;/b&gt;" in x for x in strings)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_report_from_a_study_directory_and_the_cli(tmp_path):
    import typer
    from typer.testing import CliRunner
    from dse.report.cli import report_command
    rows = [((1.0, 2.0), {"latency_s": 1.0, "energy_j": 2.0}, None),
            ((2.0, 1.0), {"latency_s": 2.0, "energy_j": 1.0}, None),
            ((3.0, 3.0), {}, None)]
    hand_study(rows, storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="dir-study")
    app = typer.Typer()
    app.command()(report_command)
    app.command("other")(lambda: None)  # two commands, so the name `report-command` is needed
    runner = CliRunner()
    res = runner.invoke(app, ["report-command", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "report.html"
    assert out.is_file() and f"report: {out}" in res.output
    blob = report_blob(out.read_text(encoding="utf-8"))
    # the hand study stores no design: the detail view says why instead of failing
    assert all("no design" in d["error"] for d in blob["details"].values())
    res = runner.invoke(app, ["report-command", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
                              "--study", "dir-study", "-o", str(tmp_path / "b.html")])
    assert res.exit_code == 0 and (tmp_path / "b.html").is_file()
    res = runner.invoke(app, ["report-command"])
    assert isinstance(res.exception, BadInput)


def test_importing_dse_report_is_light():
    code = ("import sys, dse.report; "
            "print(sorted(m for m in ('plotly', 'optuna', 'torch', 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, check=True)
    assert out.stdout.strip() == "[]"


def test_detail_designs_stop_at_the_size_budget(npu_study):
    from dse.report.study import details
    from dse.report.study_data import read_study
    data = read_study(npu_study)
    assert len(data.pareto) >= 2
    det, figs = details(data, max_details=30, budget_bytes=1)  # the first design passes it
    assert list(det) == [str(data.pareto[0].number)] and len(figs) == 4


def test_axis_labels_wrap_without_cutting_entities():
    from dse.report.study_figures import wrap
    assert wrap("hw.dram_bandwidth_Bps (TB/s)") == "hw.dram_<br>bandwidth_Bps<br>(TB/s)"
    assert wrap("latency (ms)") == "latency (ms)"
    out = wrap("&lt;" * 20, width=16)
    assert out.replace("<br>", "") == "&lt;" * 20 and out.split("<br>")[0] == "&lt;" * 16


def test_resimulates_designs_stored_the_way_dse_study_stores_them():
    from dse.report.resimulate import resimulate_trial
    from dse.report.study_data import TrialRow
    spec = {"workloads": [{"model": "gpt2", "name": "dec", "phase": "decode", "batch": 2,
                           "context": 64, "dtype": "bf16", "weight": 4.0}]}
    design = {"designs": {"npu": {"template": "npu", "preset": "datacenter-bf16",
                                  "hw": {"rows": 32, "cols": 64}}},
              "arch": {"dec": {"n_layer": 2}}}
    sim = resimulate_trial(TrialRow(0, "COMPLETE", {}, {}, design=design), spec)
    assert sim.error is None and sim.template.hw.rows == 32
    (label, result, error), = sim.runs
    assert error is None and label.startswith("dec: gpt2 decode") and "×4 per step" in label
    from dse import api
    direct = api.simulate("gpt2", api.accelerator("npu:datacenter-bf16", {"rows": 32, "cols": 64}),
                          phase="decode", batch=2, context=64, arch={"n_layer": 2})
    assert result.latency_s == pytest.approx(direct.latency_s, rel=1e-12)
    no_spec = resimulate_trial(TrialRow(0, "COMPLETE", {}, {}, design=design), None)
    assert "dse_spec" in no_spec.error


def test_report_of_a_study_run_by_dse_study(tmp_path):
    driver = pytest.importorskip("dse.study.driver")
    from dse.cli import main
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: tiny\nseed: 0\nworkloads:\n  - {model: gpt2, phase: decode, batch: 4, context: 128}\n"
        "accelerator: {template: npu, preset: datacenter-bf16}\n"
        "search:\n  hardware:\n    rows: {choices: [32, 64, 128]}\n    cols: {choices: [32, 64, 128]}\n"
        "    arrays: {choices: [1, 2, 4]}\n"
        "objectives: [latency_s, area_mm2]\nconstraints: ['avg_power_w <= 100']\n"
        "sampler: random\ntrials: 8\n")
    out = tmp_path / "run"
    try:
        main(["study", "run", str(spec), "--out", str(out), "--no-progress"])
    except SystemExit as exc:  # the study CLI's own contract; report what it said
        pytest.skip(f"dse study run exited with {exc.code}")
    assert hasattr(driver, "run_study")
    html = out / "report.html"
    assert html.is_file(), "dse study run did not write report.html"
    from dse.report.study_data import open_study, read_study
    data = read_study(open_study(out))
    assert [(c.metric, c.max) for c in data.constraints] == [("avg_power_w", 100.0)]
    assert data.metric_units.get("throughput") == "tokens/s"
    blob = report_blob(html.read_text(encoding="utf-8"))
    assert blob["details"], "no Pareto design was re-simulated"
    from dse.report.units import fmt
    for n, d in blob["details"].items():
        assert d["error"] is None, d["error"]
        trial = next(t for t in data.trials if str(t.number) == n)
        assert dict(d["workloads"][0]["totals"])["latency"] == fmt(trial.values["latency_s"], "s")
