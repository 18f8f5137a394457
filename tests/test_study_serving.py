"""Studies with a `serving:` section: designs scored by serving a trace, SLO metrics as
constraints, the shipped study valid, and one-line errors."""

import csv
from pathlib import Path

import pytest

from dse.errors import BadInput
from dse.study.driver import run_study
from dse.study.loader import load_study, load_study_text

STUDY = """
name: t_serving
seed: 2
serving:
  model: llama2-7b
  trace: sharegpt
  rate: 20
  requests: 200
  slo_ttft_s: 1.0
  slo_tpot_s: 0.05
accelerators:
  - {name: gpu, template: gpu, preset: h100}
  - {name: npu, template: npu, preset: datacenter-bf16}
search:
  hardware:
    npu.arrays: {choices: [1, 8]}
  architecture:
    n_layer: {choices: [2]}
    d_model: {choices: [512]}
    n_head: {choices: [8]}
    n_kv_head: {choices: [8]}
    d_ff: {choices: [1024]}
    vocab_size: {choices: [1024]}
objectives: [cost_usd, cost_per_mtok_usd]
constraints: ["ttft_p99_s <= 1.0", "tpot_p99_s <= 0.05"]
fidelity: fast
sampler: random
trials: 5
"""


def test_a_serving_study_scores_designs_by_serving(tmp_path):
    s = load_study_text(STUDY)
    assert [o.metric for o in s.objectives] == ["cost_usd", "cost_per_mtok_usd"]
    r = run_study(s, trials=5, out=tmp_path, show_progress=False, write_report=False)
    assert r.states["FAIL"] == 0
    rows = [x for x in csv.DictReader(open(r.trials_csv, newline=""))
            if x["state"] == "COMPLETE"]
    assert rows
    for x in rows:
        for key in ("ttft_p99_s", "tpot_p99_s", "throughput_tok_s", "cost_per_mtok_usd",
                    "goodput_req_s"):
            assert float(x[key]) > 0, key
        assert float(x["ttft_p99_s"]) >= float(x["ttft_p50_s"])
        assert float(x["throughput"]) == float(x["throughput_tok_s"])
        ok = float(x["ttft_p99_s"]) <= 1.0 and float(x["tpot_p99_s"]) <= 0.05
        assert (x["feasible"] == "True") == ok


def test_the_shipped_serving_study_is_valid():
    s = load_study(Path(__file__).resolve().parent.parent / "studies" / "serve_llama_slo.yaml")
    assert s.spec.serving.rate == 20 and s.workloads[0].phase == "decode"
    assert {c.metric for c in s.constraints} == {"ttft_p99_s", "tpot_p99_s", "quality"}
    assert {"design", "arch.n_layer", "hw.npu.arrays"} <= {d.name for d in s.space.dimensions}


@pytest.mark.parametrize("edit, field", [
    (("serving:\n", "workloads: [{model: gpt2}]\nserving:\n"), "serving"),
    (("  rate: 20\n", ""), "serving.rate"),
    (("  requests: 200\n", "  requests: 200\n  scheduler: fifo\n"), "serving.scheduler"),
    (("  requests: 200\n", "  requests: 0\n"), "serving.requests"),
    (("model: llama2-7b", "model: llama9"), "serving.model"),
    (("model: llama2-7b", "model: resnet18"), "serving.model"),
    (('"tpot_p99_s <= 0.05"', '"tpot_p99 <= 0.05"'), "constraints[1]"),
])
def test_bad_serving_sections_are_one_line(edit, field):
    with pytest.raises(BadInput) as exc:
        load_study_text(STUDY.replace(*edit, 1))
    assert str(exc.value).startswith(field), str(exc.value)
    assert "\n" not in str(exc.value)


def test_serving_metrics_need_a_serving_section():
    text = STUDY.replace("serving:\n  model: llama2-7b\n  trace: sharegpt\n  rate: 20\n"
                         "  requests: 200\n  slo_ttft_s: 1.0\n  slo_tpot_s: 0.05\n",
                         "workloads: [{model: llama2-7b, phase: decode, context: 8}]\n")
    with pytest.raises(BadInput, match="objectives"):
        load_study_text(text)


@pytest.mark.slow
def test_the_shipped_serving_study_runs_with_few_trials(tmp_path):
    s = load_study(Path(__file__).resolve().parent.parent / "studies" / "serve_llama_slo.yaml")
    r = run_study(s, trials=3, out=tmp_path, show_progress=False, write_report=False)
    assert r.states["FAIL"] == 0
    rows = list(csv.DictReader(open(r.trials_csv, newline="")))
    done = [x for x in rows if x["state"] == "COMPLETE"]
    assert done, [x["reason"] for x in rows]
    assert all(float(x["throughput_tok_s"]) > 0 for x in done)


def test_a_serving_study_report_shows_each_designs_serving_run(tmp_path):
    """The report's tables and 2-D fronts carry the serving metrics with their units, and a
    Pareto design's details are its serving run (latency distributions, KV cache over time),
    re-simulated at the trial's fidelity: the event-confirmed front of `fidelity: multi`."""
    from dse.report.study_data import SERVING_KEYS
    from tests.test_report import report_blob
    s = load_study_text(STUDY.replace("fidelity: fast", "fidelity: multi")
                        .replace("requests: 200", "requests: 50"))
    r = run_study(s, trials=2, out=tmp_path, show_progress=False)
    assert r.report is not None, r.report_error
    blob = report_blob(r.report.read_text(encoding="utf-8"))
    table = blob["table"]
    # objectives, then the constrained metrics, then the other serving headline metrics
    assert table["columns"][1:6] == ["cost_usd", "cost_per_mtok_usd", *SERVING_KEYS[:3]]
    row = dict(zip(table["columns"], table["rows"][0]))
    assert row["throughput_tok_s"].endswith("tokens/s") and row["goodput_req_s"].endswith(
        "requests/s")
    assert "pareto2d_cost_usd_ttft_p99_s" in blob["figures"]
    assert blob["details"]
    trials = {int(x["number"]): x for x in csv.DictReader(open(r.trials_csv, newline=""))}
    for n, d in blob["details"].items():
        assert d["error"] is None, d["error"]
        (w,) = d["workloads"]
        assert "serving sharegpt at 20 requests/s · 50 requests" in w["label"]
        assert set(w["figures"]) == {"latency_cdf", "occupancy"}
        totals = dict(w["totals"])
        from dse.report.units import fmt
        x = trials[int(n)]
        assert x["fidelity"] == "event"
        assert totals["TTFT p50 / p99"].endswith(fmt(float(x["ttft_p99_s"]), "s"))
        assert totals["throughput"] == fmt(float(x["throughput_tok_s"]), "tokens/s")


def test_a_serving_studys_power_and_edp_are_api_serves(tmp_path):
    """Issue 27: the study stored energy per token / mean latency as the power (10^4 too
    small, so a power constraint never bound). A trial's avg_power_w and edp are now what
    api.serve reports for its design."""
    import optuna

    from dse import api
    s = load_study_text(STUDY)
    r = run_study(s, trials=2, out=tmp_path, show_progress=False, write_report=False)
    st = optuna.load_study(study_name="t_serving", storage=r.storage_url)
    t = next(t for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE)
    described = t.user_attrs["design"]
    name = described["design"]
    d = described["designs"][name]
    searched = {k.split(".", 2)[2]: v for k, v in t.params.items()
                if k.startswith(f"hw.{name}.")}   # what the study set; the rest is the preset
    sv = s.spec.serving
    ref = api.serve("llama2-7b", trace=sv.trace, rate=sv.rate, requests=sv.requests,
                    accelerator=f"{d['template']}:{d['preset']}", hw=searched or None,
                    arch=described["arch"]["llama2-7b"], slo_ttft_s=sv.slo_ttft_s,
                    slo_tpot_s=sv.slo_tpot_s, seed=sv.seed)
    m = t.user_attrs["metrics"]
    assert m["avg_power_w"] == pytest.approx(ref.avg_power_w, rel=1e-9)
    assert m["edp"] == pytest.approx(ref.edp, rel=1e-9)
    assert ref.avg_power_w == pytest.approx(ref.energy_j / ref.span_s)
    assert m["avg_power_w"] > 10   # watts, not energy per token over a request's latency


def test_a_serving_study_passes_its_economics(tmp_path):
    """cost_per_mtok_usd's parameters from the study's serving section: a lower
    utilisation costs more per token."""
    import optuna
    base = run_study(load_study_text(STUDY), trials=1, out=tmp_path / "a",
                     show_progress=False, write_report=False)
    half = STUDY.replace("  slo_tpot_s: 0.05\n",
                         "  slo_tpot_s: 0.05\n  economics: {utilisation: 0.01}\n")
    other = run_study(load_study_text(half), trials=1, out=tmp_path / "b",
                      show_progress=False, write_report=False)
    cost = [optuna.load_study(study_name="t_serving", storage=r.storage_url).trials[0]
            .user_attrs["metrics"]["cost_per_mtok_usd"] for r in (base, other)]
    assert cost[1] > 5 * cost[0]
