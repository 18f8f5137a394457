"""The physical-cost model (issue 15): memory systems, capacity, die, shoreline, cost, power."""

import math
from dataclasses import replace

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from accelerators import physical
from accelerators.capacity import capacity_problem
from accelerators.memory_standards import (MEMORY_STANDARDS, MemorySystem, devices_for_bandwidth,
                                           get_standard, memory_system)
from accelerators.npu import NPU
from accelerators.registry import make_accelerator, template_names
from dse.errors import BadInput
from tests.cli_runner import run_cli
from workloads.build import build_workload
from workloads.footprint import memory_footprint
from workloads.ir import Op, Workload

STANDARDS = sorted(MEMORY_STANDARDS)


@settings(max_examples=80, deadline=None)
@given(std=st.sampled_from(STANDARDS), rows=st.sampled_from([8, 32, 128]),
       node=st.sampled_from([4, 7, 16, 28]), data=st.data())
def test_more_devices_never_lower_area_or_cost(std, rows, node, data):
    top = MEMORY_STANDARDS[std].max_devices
    n = data.draw(st.integers(1, top - 1))
    few = NPU(dram=std, dram_devices=n, rows=rows, cols=rows, node_nm=node).physical()
    more = NPU(dram=std, dram_devices=n + 1, rows=rows, cols=rows, node_nm=node).physical()
    # the chiplet count is the one that costs least, so cost never falls; area may (a
    # pad-limited die may split into smaller ones), but not at a pinned count
    assert more.cost_usd >= few.cost_usd * (1 - 1e-12)
    pinned = [NPU(dram=std, dram_devices=k, rows=rows, cols=rows, node_nm=node,
                  chiplets=few.dies).physical() for k in (n, n + 1)]
    if pinned[1].problem is None:
        assert pinned[1].area_mm2 >= pinned[0].area_mm2
    assert more.memory.capacity_bytes > few.memory.capacity_bytes
    assert more.memory.bandwidth_Bps > few.memory.bandwidth_Bps


def test_bandwidth_is_realised_by_the_fewest_devices_and_reported():
    d = NPU(dram="hbm3", dram_bandwidth_Bps=2.0e12)   # 819.2 GB/s per stack -> 3 stacks
    assert d.memory.devices == 3 == devices_for_bandwidth(get_standard("hbm3"), 2.0e12)
    assert d.memory.bandwidth_Bps == 2.0e12            # the interface runs at what was asked
    assert d.physical().memory.to_dict() == {"standard": "hbm3", "devices": 3,
                                             "capacity_bytes": 48 * 2**30,   # 3 x 16 GiB
                                             "bandwidth_Bps": 2.0e12}
    explicit = NPU(dram="hbm3", dram_devices=3)
    assert explicit.memory.bandwidth_Bps == pytest.approx(3 * 819.2e9)


def test_the_issue_design_pays_for_its_memory():
    """Issue 15's optimum: a 1.59 mm^2 die with ~7 HBM2E stacks. Its PHYs and their die edge
    now make it over a hundred mm^2 of silicon (chiplets on an interposer, the least silicon
    that gives seven stacks their edge) that costs accordingly."""
    d = NPU(rows=8, cols=8, dram="hbm2e", dram_bandwidth_Bps=2.95e12)
    p = d.physical()
    std = get_standard("hbm2e")
    assert p.memory.devices == 7 and p.problem is None
    assert p.area_breakdown_mm2["memory_phy"] >= 7 * std.phy_area_mm2
    d2d = p.memory.bandwidth_Bps / physical.D2D_BYTES_PER_S_PER_MM if p.dies > 1 else 0
    edge = (physical.MEMORY_EDGE_FRACTION * p.dies * 4 * p.die_mm2 ** 0.5
            - 2 * (p.dies - 1) * d2d)   # the dies give the stacks and host link their edge
    assert edge >= 7 * std.shoreline_mm + physical.HOST_INTERFACES["pcie4x16"][2] - 1e-9
    assert p.area_mm2 > 150 and p.cost_usd > 4 * NPU(rows=8, cols=8).physical().cost_usd


def test_shoreline_infeasibility_names_both_lengths():
    std = get_standard("gddr6")
    mem = MemorySystem(std, 400, 2, 400 * std.bandwidth_Bps)
    fp = physical.Floorplan(node_nm=7, compute_mm2=10, sram_mm2=10, peak_dynamic_w=10,
                            leakage_w=1, memory=mem)
    problem = physical.assess(fp).problem
    assert problem and f"{400 * std.shoreline_mm + 5:.1f} mm of die edge" in problem
    assert "offer" in problem and " mm of edge" in problem
    assert "package takes at most 16" in problem


def test_reticle_splits_into_chiplets_with_die_to_die_cost():
    one = physical.Floorplan(node_nm=7, compute_mm2=500, sram_mm2=0, peak_dynamic_w=100,
                             leakage_w=5, memory=memory_system("hbm3", 4, 0, 0),
                             control_overhead=0.5, dies=1)   # 750 mm^2 on die: one reticle
    two = replace(one, compute_mm2=900, dies=2)
    a, b = physical.assess(one), physical.assess(two)
    assert a.dies == 1 and b.dies == 2 and b.die_mm2 <= physical.RETICLE_MM2
    assert b.d2d_j_per_byte > 0 and b.memory_energy_j_per_byte > a.memory_energy_j_per_byte
    too_big = physical.assess(replace(one, compute_mm2=20 * physical.RETICLE_MM2, dies=0))
    assert too_big.problem and "most a package joins" in too_big.problem
    pinned = physical.assess(replace(two, dies=1))   # 1,350 mm^2 cannot be one die
    assert pinned.problem and "(the pinned chiplet count) do not fit" in pinned.problem
    assert "858 mm² reticle" in pinned.problem and "2 dies of " in pinned.problem


def test_the_chiplet_count_is_the_one_that_costs_least_unless_pinned():
    """Issue 27: a 1,200 mm^2 design at 5 nm costs 25-30 % less in 4-6 dies than in the fewest
    (two); the count is chosen by cost, shown in results, and a user may pin it."""
    fp = physical.Floorplan(node_nm=5, compute_mm2=800, sram_mm2=0, peak_dynamic_w=300,
                            leakage_w=10, memory=memory_system("hbm3", 4, 0, 0),
                            control_overhead=0.5)   # 1,200 mm^2 of logic
    free = physical.assess(fp)
    each = {n: physical.assess(replace(fp, dies=n)) for n in range(1, physical.MAX_CHIPLETS + 1)}
    costs = {n: p.cost_usd for n, p in each.items() if p.problem is None}
    assert min(costs) == 2                      # the fewest dies that fit the reticle
    assert free.dies == min(costs, key=costs.get) >= 3
    assert free.cost_usd == pytest.approx(min(costs.values()))
    silicon = lambda p: p.cost_usd - p.cost_breakdown_usd["memory"]
    assert silicon(free) < 0.9 * silicon(each[2])
    d = NPU(rows=256, cols=256, arrays=8, node_nm=5, dram="hbm3", dram_devices=4)
    assert d.describe()["dies"] == d.physical().dies
    assert NPU(rows=256, cols=256, arrays=8, node_nm=5, dram="hbm3", dram_devices=4,
               chiplets=3).physical().dies == 3


def test_power_density_limit_is_checked():
    fp = physical.Floorplan(node_nm=7, compute_mm2=50, sram_mm2=0, peak_dynamic_w=500,
                            leakage_w=1, memory=None, host_interface="none")
    p = physical.assess(fp)
    assert p.problem and "W/mm²" in p.problem and p.tdp_w == pytest.approx(501)


def test_yield_and_cost_follow_die_size():
    assert physical.die_yield(100, 7) > physical.die_yield(800, 7) > 0
    assert physical.dies_per_wafer(100) > 4 * physical.dies_per_wafer(800) > 0
    assert physical.die_cost_usd(800, 7) > 8 * physical.die_cost_usd(100, 7)
    assert physical.die_cost_usd(100, 5) > physical.die_cost_usd(100, 28)


def _footprint_workload() -> Workload:
    return build_workload("gpt2", phase="decode", batch=2, context=256, dtype="bf16")


def test_capacity_is_exact_at_the_boundary():
    w = _footprint_workload()
    need = memory_footprint(w).total_bytes
    assert capacity_problem(w, need, 2, "x") is None
    reason = capacity_problem(w, need - 1, 2, "the test memory")
    assert reason and "weights" in reason and "KV cache" in reason and "the test memory" in reason
    # another element size scales every part
    assert capacity_problem(w, 2 * need, 4, "x") is None
    assert capacity_problem(w, 2 * need - 1, 4, "x") is not None


def test_peak_live_activations_follow_liveness():
    g = nx.DiGraph()
    mk = lambda n, wr: Op(name=n, kind="elementwise", target="t", input_shapes=(), output_shapes=(),
                          dtype="bf16", bytes_per_element=2, activation_bytes_read=0,
                          activation_bytes_written=wr)
    # a -> b -> c and a -> c: a's 100 B stay alive until c has run
    for i, (n, wr) in enumerate([("a", 100), ("b", 10), ("c", 1)]):
        g.add_node(n, op=mk(n, wr), index=i)
    g.add_edge("a", "b", bytes=100)
    g.add_edge("b", "c", bytes=10)
    g.add_edge("a", "c", bytes=100)
    w = Workload(graph=g, model="t", phase="forward", dtype="bf16")
    # while c runs, a (read by c) and b are alive and c writes: 100 + 10 + 1
    assert memory_footprint(w).activation_bytes == 100 + 10 + 1


@pytest.mark.parametrize("template, hw", [("npu:edge-32x32", {}),
                                         ("neural_graphics", {"gpu": "rtx3090"})])
def test_templates_that_lacked_a_capacity_check_have_one(template, hw):
    w = build_workload("llama2-13b", phase="decode", batch=8, context=1024)  # 26 GB of weights
    reason = make_accelerator(template, hw).check(w)
    assert reason and "needs" in reason and "holds" in reason


def test_every_template_reports_area_breakdown_cost_and_tdp():
    for name in template_names():
        d = make_accelerator(name)
        p = d.physical()
        assert p is not None, name
        for key in ("compute", "sram", "memory_phy", "io_other"):
            assert key in p.area_breakdown_mm2, (name, key)
        assert d.area_mm2() == pytest.approx(p.area_mm2)
        assert p.cost_usd > 0 and p.tdp_w > 0 and math.isfinite(p.cost_usd)


def test_result_and_metrics_carry_the_physical_fields():
    from dse import api
    r = api.simulate("linear", accelerator="npu:edge-32x32")
    d = r.to_dict(ops=False)
    for key in ("area_breakdown_mm2", "cost_usd", "cost_breakdown_usd", "tdp_w", "memory"):
        assert key in d
    assert d["memory"]["standard"] == "lpddr4" and d["memory"]["devices"] == 1
    assert r.metrics()["cost_usd"] == pytest.approx(sum(d["cost_breakdown_usd"].values()))
    assert sum(d["area_breakdown_mm2"].values()) == pytest.approx(r.area_mm2)


def test_gpu_capacity_cannot_exceed_its_devices():
    with pytest.raises(BadInput, match="hw.memory_capacity_bytes"):
        make_accelerator("gpu:h100", {"memory_capacity_bytes": 100e9})


@pytest.mark.parametrize("hw, field", [
    (["dram=hbm9"], "hw.dram"),
    (["dram_devices=40"], "hw.dram_devices"),
    (["dram=hbm2", "dram_devices=20"], "hw.dram_devices"),
    (["dram_device_gb=3"], "hw.dram_device_gb"),
])
def test_memory_outside_the_table_is_one_line_and_exit_2(capsys, hw, field):
    args = ["simulate", "linear", "--accelerator", "npu"]
    for h in hw:
        args += ["--hw", h]
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "expected" in lines[0]


def test_the_simulated_channel_runs_at_the_memory_systems_bandwidth():
    from dse import api
    from simulators.engine import simulate
    from simulators.fast import evaluate_many
    # a GEMV with 128 MiB of weights: memory-bound on any of these designs
    w = api.workload("linear", batch=1, arch={"m": 1, "n": 8192, "k": 8192})
    one = NPU(dram="hbm3", dram_devices=1, arrays=8, dataflow="os")
    four = NPU(dram="hbm3", dram_devices=4, arrays=8, dataflow="os")
    hbm = get_standard("hbm3").sustained_fraction     # the standard's sustained share
    assert one.resources().channels["dram"] == pytest.approx(hbm * 819.2e9)
    assert four.resources().channels["dram"] == pytest.approx(hbm * 4 * 819.2e9)
    slow, fast = simulate(w, one).latency_s, simulate(w, four).latency_s
    assert fast < 0.5 * slow      # the bandwidth the devices give is what the channel runs at
    assert evaluate_many(w, [four]).latency_s[0] == pytest.approx(fast, rel=1e-9)


def test_one_sustained_bandwidth_rule_per_memory_standard():
    """Issue 27: NPUs streamed DRAM at 100 % of the pins, GPUs at 85 %; every template now
    streams at its memory standard's sustained share."""
    from accelerators.gpu import GPU
    from accelerators.npu_pim import NeuPIMs
    from accelerators.pim import PIM
    hbm = get_standard("hbm3").sustained_fraction
    assert {s.sustained_fraction for n, s in MEMORY_STANDARDS.items()
            if n.startswith("hbm")} == {hbm}
    assert hbm == pytest.approx(GPU("h200").knobs["bandwidth_efficiency"], abs=1e-3)
    npu = NPU(dram="hbm3", dram_devices=2)
    assert npu.resources().channels["dram"] == pytest.approx(2 * 819.2e9 * hbm)
    mi300x = GPU("mi300x")    # uncalibrated (the A100 now has its own calibration)
    assert mi300x.model.copy_Bps == pytest.approx(mi300x.hw.memory_bandwidth_Bps * hbm)
    d = NeuPIMs()
    assert d.resources().channels["dram"] == pytest.approx(d.pin_Bps * hbm)
    p = PIM()
    assert p.resources().channels["bus"] == pytest.approx(
        p.pin_Bps * get_standard("gddr6").sustained_fraction)


def test_h100_cost_against_a_published_bill_of_materials_and_shown_in_results(tmp_path):
    """Issue 27: the H100 preset within +-35 % of the ~$3,320 public estimate (Raymond James,
    2023), its breakdown and chiplet count in the result JSON and the design report."""
    from dse import api
    from dse.calibrate.published_chips import COST_ESTIMATES
    from dse.report import write_design_report
    est = next(e for e in COST_ESTIMATES if e.accelerator == "gpu:h100")
    h100 = make_accelerator("gpu:h100").physical()
    assert h100.cost_usd == pytest.approx(est.cost_usd, rel=0.35)
    assert h100.cost_breakdown_usd["memory"] == pytest.approx(80 * 15.0)   # HBM3 ~$15/GB
    r = api.simulate("gpt2", accelerator="gpu:h100", phase="decode", batch=1, context=128)
    d = r.to_dict()
    assert d["cost_breakdown_usd"] == pytest.approx(dict(h100.cost_breakdown_usd))
    assert d["accelerator"]["dies"] == 1
    text = write_design_report(r, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "cost: memory" in text and "cost: package" in text
