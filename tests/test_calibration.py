"""The GPU calibration: the fit from the committed H200 measurements reproduces the shipped
file, held-out errors stay within 10%, and the benchmark says clearly when there is no GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dse.calibrate import calibrate_gpu, fit, gpu_bench
from dse.errors import DSEError

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "tests" / "data" / "h200_calibration_raw.json"
SHIPPED = ROOT / "accelerators" / "calibration" / "h200.json"


@pytest.fixture(scope="module")
def raw():
    return json.loads(RAW.read_text())


@pytest.fixture(scope="module")
def shipped():
    return json.loads(SHIPPED.read_text())


def test_raw_file_is_a_real_h200_run(raw):
    assert raw["schema"] == gpu_bench.SCHEMA_VERSION
    assert raw["device"]["name"] == "NVIDIA H200" and raw["device"]["sms"] == 132
    assert not raw["errors"] and not raw["skipped_for_time"]
    kinds = {(r["kind"], r["dtype"]) for r in raw["measurements"]}
    for dtype in ("bf16", "fp16", "fp32", "fp8", "int8"):
        assert ("gemm", dtype) in kinds
    assert ("attention", "bf16") in kinds and ("conv", "bf16") in kinds
    assert all(r["time_s"] > 0 and r["min_s"] <= r["time_s"] <= r["max_s"]
               for r in raw["measurements"])


def test_shipped_file_comes_from_the_committed_raw_data(raw, shipped):
    assert shipped["raw_sha256"] == fit.raw_digest(raw)
    assert shipped["template"] == "gpu" and shipped["holdout_every"] == fit.HOLDOUT_EVERY


@pytest.mark.slow
def test_fit_reproduces_the_shipped_file(raw, shipped):
    refit = fit.fit_calibration(raw)
    for name, value in shipped["efficiency"].items():
        assert refit["efficiency"][name] == pytest.approx(value, rel=1e-3, abs=1e-12), name
    assert set(refit["memory_ops"]) == set(shipped["memory_ops"])
    for name, values in shipped["memory_ops"].items():
        assert refit["memory_ops"][name] == pytest.approx(values, rel=1e-3, abs=1e-12), name
    assert refit["errors"].keys() == shipped["errors"].keys()


def test_heldout_error_within_ten_percent(raw, shipped):
    gemm = fit.heldout_errors(shipped, raw, ["gemm:"])
    attn = fit.heldout_errors(shipped, raw, ["attention_"])
    assert len(gemm) >= 100 and len(attn) >= 15
    assert np.median(gemm) <= 0.10, np.median(gemm)
    assert np.median(attn) <= 0.10, np.median(attn)
    summary = shipped["heldout_error"]
    assert summary["gemm_median"] == pytest.approx(float(np.median(gemm)), abs=1e-4)
    assert summary["attention_cases"] == len(attn)


def test_holdout_split_is_deterministic_and_disjoint():
    cases = [{"i": i} for i in range(10)]
    fit_cases, held = fit.split(cases)
    assert [c["i"] for c in held] == [3, 7]
    assert len(fit_cases) + len(held) == 10 and not {c["i"] for c in held} & {
        c["i"] for c in fit_cases}


def test_measured_ceilings(shipped):
    m = shipped["measured"]
    assert 7.0e14 < m["best_gemm_flops"]["bf16"] < 9.89e14   # below the 989 TFLOP/s datasheet
    assert 3.5e12 < m["best_copy_Bps"] < 4.8e12               # below the 4.8 TB/s datasheet
    assert 0 < m["launch_floor_graph_s"] < 5e-6
    assert m["power_w"]["idle"] < m["power_w"]["copy"] < m["power_w"]["limit"] * 1.05


def test_bench_without_cuda_raises_a_clear_error(monkeypatch, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(gpu_bench.NoCudaGPU, match="needs a CUDA GPU"):
        gpu_bench.require_cuda()
    assert issubclass(gpu_bench.NoCudaGPU, DSEError)
    assert gpu_bench.main(["--out", str(tmp_path / "raw.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: gpu calibration needs a CUDA GPU")
    with pytest.raises(gpu_bench.NoCudaGPU):
        calibrate_gpu(tmp_path / "cal.json")
    assert not (tmp_path / "raw.json").exists()


def test_bench_without_torch_raises_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(gpu_bench.NoCudaGPU, match="torch is not installed"):
        gpu_bench.require_cuda()


def test_bench_case_builders_run_on_cpu(tmp_path):
    """The self-test grid (smallest case of each kind) exercises every builder on the CPU."""
    out = tmp_path / "smoke.json"
    raw = gpu_bench.run_benchmarks(grid="smoke", device="cpu", out=out, log=lambda m: None)
    assert not raw["errors"], raw["errors"]
    sections = {r["section"] for r in raw["measurements"]}
    assert {"copy", "gemm_bf16", "attention_bf16", "memory", "conv", "gemm_fp32"} <= sections
    ops = {r["op"] for r in raw["measurements"] if r["kind"] == "memory"}
    assert set(fit.MEMORY_TARGETS) <= ops
    assert json.loads(out.read_text())["measurements"]
