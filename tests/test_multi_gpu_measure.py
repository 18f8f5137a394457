"""benchmarks/multi_gpu_measure.py runs end to end on CPU (gloo, tiny sizes) under torchrun,
and its comparison reads what it wrote."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_measures_and_compares(tmp_path):
    script = ROOT / "benchmarks" / "multi_gpu_measure.py"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                          "2", "--master_port", "29517", str(script), "--dry-run", "--out",
                          str(tmp_path), "--layouts", "tp1,tp2,tp1pp2"],
                         capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads((tmp_path / "multi_gpu_measure.json").read_text())
    assert data["world_size"] == 2 and data["backend"] == "gloo"
    kinds = {c["collective"] for c in data["collectives"]}
    assert {"all_reduce", "broadcast", "send_recv"} <= kinds
    assert all(c["time_s"] > 0 and c["busbw_Bps"] > 0 for c in data["collectives"])
    assert {(r["tp"], r["pp"], r["phase"]) for r in data["stack"]} == {
        (tp, pp, phase) for tp, pp in ((1, 1), (2, 1), (1, 2)) for phase in ("prefill", "decode")}
    assert all(r["time_s"] > 0 for r in data["stack"])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from multi_gpu_measure import compare
    res = compare(str(tmp_path / "multi_gpu_measure.json"), "hgx-h200")
    assert len(res["rows"]) == len(data["collectives"]) + len(data["stack"])
    assert len(res["speedups"]) == 2 * len(data["stack"]) // 3     # tp2 and tp1pp2 over tp1
    assert {s["layout"] for s in res["speedups"]} == {"tp2", "tp1pp2"}
    assert all(r["model_s"] > 0 for r in res["rows"])


def test_layouts_parse_and_refuse():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from multi_gpu_measure import parse_layouts
    assert parse_layouts(None, 8) == [(1, 1), (8, 1), (4, 2)]
    assert parse_layouts(None, 2) == [(1, 1), (2, 1)]
    assert parse_layouts("tp1,tp8,tp4pp2", 8) == [(1, 1), (8, 1), (4, 2)]
    for bad in ("tp16", "pp2", "tp4pp3", "tpx"):
        with pytest.raises(SystemExit):
            parse_layouts(bad, 8)


@pytest.mark.parametrize("name, tp", [("multi_gpu_h100x2.json", 2), ("multi_gpu_h100x4.json", 4)])
def test_shipped_h100_measurements_meet_the_stack_targets(name, tp):
    """The measurements on lent machines of two and four NVLink H100s (tests/data): the TP=1
    and TP=N Llama stack rows within 15 % median, the TP speed-up within 15 % (issue 16's
    targets); collectives are reported, not asserted (docs/validation.md)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from multi_gpu_measure import compare
    res = compare(str(ROOT / "tests" / "data" / name), "dgx-h100")
    med = res["median_abs_error"]
    assert med["tp1"] <= 0.15 and med[f"tp{tp}"] <= 0.15 and med["speed-up"] <= 0.15
    assert len(res["speedups"]) == 7


def test_shipped_h200_pipeline_measurements_meet_the_stack_targets():
    """Issue 35 on the GPUs that were lent (8-GPU kinds were withheld): TP=1, TP=2 and a
    two-stage pipeline (TP=1 x PP=2) of the Llama-2-70B-shaped stack on two NVLink H200s,
    each layout within 15 % median, as are the speed-ups over TP=1."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from multi_gpu_measure import compare
    res = compare(str(ROOT / "tests" / "data" / "multi_gpu_h200x2_pp.json"), "hgx-h200")
    med = res["median_abs_error"]
    assert res["layouts"] == ["tp1", "tp2", "tp1pp2"]
    assert med["tp1"] <= 0.15 and med["tp2"] <= 0.15 and med["tp1pp2"] <= 0.15
    assert med["speed-up tp2"] <= 0.15 and med["speed-up tp1pp2"] <= 0.15


def test_shipped_h100x4_pipeline_measurements_meet_the_stack_targets():
    """Issue 35 on four NVLink H100s (8-GPU kinds withheld): TP=1, TP=4, TP=2 x PP=2 and
    TP=1 x PP=4 of the Llama-2-70B-shaped stack, each layout within 15 % median, as are the
    speed-ups over TP=1."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from multi_gpu_measure import compare
    res = compare(str(ROOT / "tests" / "data" / "multi_gpu_h100x4_pp.json"), "dgx-h100")
    med = res["median_abs_error"]
    assert sorted(res["layouts"]) == ["tp1", "tp1pp4", "tp2pp2", "tp4"]
    for layout in res["layouts"]:
        assert med[layout] <= 0.15, (layout, med[layout])
    for layout in set(res["layouts"]) - {"tp1"}:
        assert med[f"speed-up {layout}"] <= 0.15, (layout, med)
