"""The serving report (dse serve --report, dse.report.write_serving_report) and the rate sweep
(dse serve --rates, api.serve_sweep): figures and their contents, determinism, one-line
errors. The browser-level check of the page is in tests/browser/test_report_browser.py."""

import json

import numpy as np
import pytest

from dse import api
from dse.errors import BadInput
from dse.report.serving_figures import CDF_POINTS, cdf_points
from tests.cli_runner import run_cli
from tests.test_report import report_blob

ARCH = {"n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 8, "d_ff": 1024,
        "vocab_size": 1024, "max_seq": 4096}
#: A tiny model on an H200 serving short (Alpaca-like) requests: a run takes well under 1 s.
KW = dict(accelerator="gpu:h200", arch=ARCH, trace="alpaca", requests=60, seed=1,
          slo_ttft_s=2.5e-4, slo_tpot_s=1e-3)
ARCH_ARGS = [a for k, v in ARCH.items() if k != "max_seq" for a in ("--arch", f"{k}={v}")]


@pytest.fixture(scope="module")
def sweep():
    return api.serve_sweep("llama2-7b", [1600, 100, 400], **KW)


def _traces(fig, shared=()):
    """Traces by name, lists stored once in the page (``{"$shared": i}``) put back."""
    return {t.get("name"): {k: shared[v["$shared"]] if isinstance(v, dict) and "$shared" in v
                            else v for k, v in t.items()} for t in fig["data"]}


def test_report_has_percentiles_distributions_occupancy_and_rate_sweep(tmp_path, sweep):
    from dse.report import write_serving_report
    r = sweep.results[-1]
    path = write_serving_report(r, tmp_path / "s.html", sweep)
    text = path.read_text(encoding="utf-8")
    blob = report_blob(text)
    assert blob["kind"] == "serving"
    figs = blob["figures"]
    assert set(figs) == {"latency_cdf", "occupancy", "rate_sweep"}
    for name in figs:
        assert f'data-figure="{name}"' in text
    # the CDFs: every completed request's TTFT / TPOT / E2E, ending at 100 % at the largest
    lat = r.latencies()
    cdf = _traces(figs["latency_cdf"], blob["shared"])
    for key, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end-to-end")):
        t = cdf[name]
        assert len(t["x"]) == len(lat[key]) == r.completed and t["y"][-1] == 1.0
        assert t["x"] == sorted(t["x"])
        scale = t["x"][-1] / lat[key].max()            # one SI prefix per axis
        assert np.allclose(np.array(t["x"]) / scale, np.sort(lat[key]), rtol=1e-5)
        p99 = cdf[f"{name} percentiles"]
        assert p99["y"] == [0.5, 0.9, 0.99]
        assert p99["x"][2] / scale == pytest.approx(getattr(r, f"{key}_s")["p99"], rel=1e-5)
    # SLO lines: the TTFT SLO lies among the TTFTs and is drawn; the TPOT SLO is far beyond
    # every TPOT and is named instead of squeezing the curve
    shapes = figs["latency_cdf"]["layout"]["shapes"]
    assert any(s.get("line", {}).get("dash") == "dash" for s in shapes)
    assert any("beyond the axis" in a["text"] and "1 ms" in a["text"]
               for a in figs["latency_cdf"]["layout"]["annotations"])
    occ = _traces(figs["occupancy"], blob["shared"])
    assert {"KV occupancy", "running (the decode batch)", "waiting (queue)"} == set(occ)
    assert max(occ["running (the decode batch)"]["y"]) <= r.max_running
    assert len(occ["waiting (queue)"]["y"]) == len(r.kv_cache["timeline_s"])
    rs = _traces(figs["rate_sweep"])
    assert rs["throughput"]["x"] == [100, 400, 1600]
    assert rs["throughput"]["y"][1] * 1e3 == pytest.approx(sweep.results[1].throughput_tok_s,
                                                           rel=1e-5)   # ktokens/s
    assert len(rs["p99 TTFT"]["y"]) == len(rs["p99 TPOT"]["y"]) == 3
    for word in ("Latency percentiles", "TTFT p50 / p99", "cost per million tokens",
                 "goodput (met the SLOs)", "preemptions", "Throughput against arrival rate"):
        assert word in text


def test_a_report_is_replaced_whole(tmp_path, sweep):
    from dse.report import write_serving_report
    path = tmp_path / "s.html"
    path.write_text("old")
    write_serving_report(sweep.results[0], path)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["s.html"]   # no temporary file left
    assert "rate_sweep" not in report_blob(path.read_text(encoding="utf-8"))["figures"]


def test_sweep_is_the_same_trace_scaled_and_deterministic(sweep):
    assert sweep.rates == [100.0, 400.0, 1600.0]
    a, b = sweep.results[0].per_request, sweep.results[1].per_request
    assert a["input_len"] == b["input_len"] and a["output_len"] == b["output_len"]
    assert np.allclose(np.array(a["arrival_s"]), 4 * np.array(b["arrival_s"]))
    again = api.serve_sweep("llama2-7b", "400,100,1600", **KW)
    assert again.rows() == sweep.rows()
    one = api.serve("llama2-7b", rate=400, **KW)
    assert one.metrics() == sweep.results[1].metrics()


def test_cdf_points_keep_the_tail():
    x, y = cdf_points(np.arange(10_000, 0, -1) * 1e-3)
    assert len(x) <= CDF_POINTS and x[-1] == 10.0 and y[-1] == 1.0 and x[0] == 1e-3
    assert list(cdf_points(np.array([3.0, 1.0])) [1]) == [0.5, 1.0]


def test_queue_and_batch_over_time_are_counted(sweep):
    for r in sweep.results:
        q = r.queue
        assert len(q["timeline_s"]) == len(q["running"]) == len(q["waiting"]) > 0
        assert q["timeline_s"] == r.kv_cache["timeline_s"]
        assert min(q["waiting"]) >= 0 and 0 < max(q["running"]) <= r.max_running
        assert q["running"][-1] == 0      # the last sample: every request has finished
    # the busiest rate runs more requests at once than the quietest
    assert max(sweep.results[-1].queue["running"]) > max(sweep.results[0].queue["running"])


def test_cli_rates_report_and_json(tmp_path, capsys):
    out = tmp_path / "r.html"
    trace = tmp_path / "t.json"
    code, stdout, err = run_cli(capsys, "serve", "llama2-7b", "-a", "gpu:h200", *ARCH_ARGS,
                                "--trace", "alpaca", "--requests", "40", "--rates", "400,100",
                                "--report", str(out), "--chrome-trace", str(trace), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    assert [row["rate_req_s"] for row in d["sweep"]["rows"]] == [100, 400]
    assert d["completed"] == 40 and "@400/s" in d["trace"]   # without --rate: the highest
    assert d["sweep"]["rows"][1]["ttft_p99_s"] == d["ttft_s"]["p99"]
    figs = report_blob(out.read_text(encoding="utf-8"))["figures"]
    assert set(figs) == {"latency_cdf", "occupancy", "rate_sweep"}
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == d["iterations"]
    assert any(e["name"] == "requests" and e["ph"] == "C" for e in events)
    code, stdout, err = run_cli(capsys, "serve", "llama2-7b", "-a", "gpu:h200", *ARCH_ARGS,
                                "--trace", "alpaca", "--requests", "40", "--rates", "400,100",
                                "--rate", "250")
    assert code == 0, err
    assert "against the arrival rate" in stdout and "@250/s" in stdout


@pytest.mark.parametrize("rates", ["5,,10", "0", "ten", "-1,5", "", "nan", "1e12",
                                   ",".join(["1"] * 33)])
def test_bad_rates_are_one_line_exit_2(capsys, rates):
    code, out, err = run_cli(capsys, "serve", "llama2-7b", "-a", "gpu:h200", "--rates", rates)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "--rates" in err and "Traceback" not in err, err


def test_bad_report_path_and_api_rates(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run_cli(capsys, "serve", "llama2-7b", "-a", "gpu:h200", *ARCH_ARGS,
                             "--trace", "alpaca", "--rate", "100", "--requests", "5",
                             "--report", str(blocker / "r.html"))
    assert code == 2 and err.count("\n") == 1 and "--report" in err, err
    for bad in ([], [1, True], [float("inf")], 5, None):
        with pytest.raises(BadInput, match="^rates"):
            api.serve_sweep("llama2-7b", bad, **KW)
    with pytest.raises(BadInput, match="^rate"):
        api.serve_sweep("llama2-7b", [1], rate=2, **KW)
