"""What studies and reports say (issue 27, semantics): a study with no feasible design names
the constraint that cannot be met and by how much; an infeasible point names the constraint it
broke with its value; design tables leave out the parameters a design ignores; one area unit."""

import yaml

from dse import api
from dse.report.design import hardware_rows
from dse.study.driver import run_study
from dse.study.loader import load_study_text

SPEC = {
    "name": "t_unmet", "seed": 3,
    "workloads": [{"model": "linear", "batch": 2}],
    "accelerator": {"template": "npu", "preset": "edge-32x32"},
    "search": {"hardware": {"rows": {"choices": [8, 16]}}},
    "objectives": ["latency_s", "energy_j"],
    "constraints": ["latency_s <= 1e-12", "area_mm2 <= 1000"],
    "sampler": "grid",
    "trials": 2,
}


def test_no_feasible_design_says_which_constraint_and_by_how_much(tmp_path):
    from dse.report import write_study_report
    s = load_study_text(yaml.safe_dump(SPEC))
    r = run_study(s, out=tmp_path / "o", show_progress=False, write_report=False)
    assert r.outcomes["feasible"] == 0
    assert len(r.unmet) == 1 and r.unmet[0].startswith("latency_s<=1e-12 cannot be met")
    assert "latency_s = " in r.unmet[0] and "over" in r.unmet[0]
    html = write_study_report(tmp_path / "o", tmp_path / "r.html").read_text()
    assert "No feasible design: latency_s ≤ 1e-12 cannot be met" in html


def test_each_constraint_met_but_not_together(tmp_path):
    """Rows 16 is faster, rows 8 smaller: bounds each one design meets, none both."""
    w = api.workload("linear", batch=2)
    r8, r16 = (api.simulate(w, accelerator="npu:edge-32x32", hw={"rows": n}) for n in (8, 16))
    assert r16.latency_s < r8.latency_s and r8.area_mm2 < r16.area_mm2
    spec = dict(SPEC, name="t_apart", constraints=[f"latency_s <= {r16.latency_s * 1.0001}",
                                                   f"area_mm2 <= {r8.area_mm2 * 1.0001}"])
    s = load_study_text(yaml.safe_dump(spec))
    r = run_study(s, out=tmp_path / "o", show_progress=False, write_report=False)
    assert r.outcomes["feasible"] == 0
    assert r.unmet[0].startswith("each constraint was met by some design but none met all")


def test_infeasible_point_names_its_constraint_and_value():
    from dse.report.study_data import Constraint
    c = Constraint("latency_s", max=0.005)
    assert c.broken_text(0.0071) == "latency_s ≤ 0.005 (latency_s = 0.0071, 42% over)"
    assert Constraint("quality", min=0.98).broken_text(0.9).endswith("8% under)")


def test_design_table_leaves_out_ignored_parameters():
    """An NPU with counted memory devices ignores its bandwidth target: not shown beside
    an HBM2e x 4 design."""
    d = api.accelerator("npu", {"dram": "hbm2e", "dram_devices": 4})
    rows = dict(hardware_rows(d.describe()))
    assert "dram_bandwidth_Bps" not in rows and rows["dram_devices"] == "4"
    rows = dict(hardware_rows(api.accelerator("npu").describe()))
    assert "dram_bandwidth_Bps" in rows


def test_area_is_written_mm2_one_way():
    from dse.study.objectives import METRICS
    from accelerators.registry import get_template
    assert METRICS["area_mm2"][1] == "mm²"
    units = {p.unit for t in ("npu", "gpu", "pim", "npu_pim", "neural_graphics", "wafer")
             for p in get_template(t).PARAMS}
    assert "mm^2" not in units
