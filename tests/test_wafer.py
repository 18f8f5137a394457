"""The ``wafer`` template and its PLMR closed forms (accelerators/mesh_algorithms.py)."""

import math
from dataclasses import replace

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from accelerators import mesh_algorithms as mesh, physical
from accelerators.registry import make_accelerator
from accelerators.wafer import Wafer
from dse.errors import BadInput, InfeasibleDesign
from simulators.engine import simulate
from workloads.build import build_workload
from workloads.ir import Op, Workload

# A hand-checkable fabric: alpha 1 cycle/hop, beta 10 cycles/stage, 2 elements/cycle per link,
# 2 MACs/cycle, 22 routing paths.
F = mesh.Fabric(alpha_cycles=1.0, beta_cycles=10.0, link_elems_per_cycle=2.0,
                macs_per_cycle=2.0, routing_paths=22, relay=True)


# --- PLMR formulas by hand ---------------------------------------------------------------------

def test_plmr_latency_by_hand():
    assert mesh.plmr_latency_cycles(F, hops=5, stages=3) == 5 * 1 + 3 * 10
    # worst case across a 4 x 3 region with two routing stages: alpha (W + H) + beta r
    assert mesh.worst_case_latency_cycles(F, 4, 3, 2) == 1 * (4 + 3) + 10 * 2


def test_ktree_levels_and_stages_by_hand():
    assert mesh.ktree_segments(16, 2) == [4, 4]
    assert mesh.ktree_stages(16, 2) == 2 + 2
    # K = 1 is a two-sided chain to the middle: ceil(15 / 2) stages
    assert mesh.ktree_stages(16, 1) == 8
    # 750 cores, K = 2: fan-in 28, then 27 roots: 14 + 13 stages ~ K * 750^(1/K) / 2 = 27.4
    assert mesh.ktree_segments(750, 2) == [28, 27]
    assert mesh.ktree_stages(750, 2) == 27
    assert mesh.ktree_stages(1, 2) == 0


def test_allreduce_costs_by_hand():
    # 16 cores, 8 elements per core (4 cycles to stream at 2 elements/cycle)
    k = mesh.allreduce(F, "ktree", 16, 8, k=2)
    # reduce: level 1 chain 2 hops x 1, level 2 chain 2 hops x 4 apart = 10; broadcast 8 hops
    assert (k.hops, k.stages) == (18, 5)
    assert k.cycles == 18 * 1 + 5 * 10 + 2 * 4
    p = mesh.allreduce(F, "pipeline", 16, 8)
    assert (p.hops, p.stages) == (30, 16)  # 2N hops, N stages
    assert p.cycles == 30 + 160 + 8
    r = mesh.allreduce(F, "ring", 16, 8)
    assert r.cycles == 30 * (2 * 1 + 10 + 1 / 2)  # 2(n-1) steps of 2 hops, 1 stage, 1 element
    assert mesh.allreduce(F, "ktree", 1, 8).cycles == 0


@pytest.mark.parametrize("n", [16, 100, 750])
def test_ktree_beats_pipeline_beats_ring(n):
    costs = {a: mesh.allreduce(F, a, n, 16).cycles for a in mesh.ALLREDUCE_ALGORITHMS}
    assert costs["ktree"] < costs["pipeline"] < costs["ring"]


def test_ktree_advantage_grows_with_the_line():
    gain = [mesh.allreduce(F, "pipeline", n, 16).cycles / mesh.allreduce(F, "ktree", n, 16).cycles
            for n in (16, 100, 750)]
    assert gain[0] < gain[1] < gain[2]


def test_gemm_ordering_when_communication_matters():
    # 4K x 4K x 4K on a 720 x 720 grid: tiles of 6, so latency decides each step
    c = {a: mesh.gemm(F, a, 4096, 4096, 4096, 720, 720).cycles for a in mesh.GEMM_ALGORITHMS}
    assert c["meshgemm"] < c["cannon"] < c["summa"]


def test_gemm_converges_when_compute_bound():
    # 16K^3 on a 64 x 64 grid: 256^3 MACs per step dwarf every shift, so the algorithms tie
    c = {a: mesh.gemm(F, a, 16384, 16384, 16384, 64, 64).cycles for a in ("meshgemm", "cannon")}
    assert c["cannon"] == pytest.approx(c["meshgemm"], rel=0.02)


def test_gemm_macs_and_meshgemm_step_by_hand():
    g = mesh.gemm(F, "meshgemm", 8, 8, 8, 4, 4)
    assert g.macs == 8 * 8 * 8
    # 4 steps, tiles 2x2 (A) and 2x2 (B): step compute 2*2*2/2 = 4 cycles, shift 2 + 10 + 2 = 14
    # alignment ceil(4/2) = 2 shifts of 14; then 4 + 3 * max(4, 14)
    assert g.cycles == 2 * 14 + 4 + 3 * 14


def test_gemv_is_local_work_plus_allreduce():
    g = mesh.gemv(F, 1, 1024, 1024, 16, 16, "ktree", 2)
    local = 64 * 64 / 2
    assert g.cycles == pytest.approx(local + mesh.allreduce(F, "ktree", 16, 64, 2).cycles)
    assert g.macs == 1024 * 1024


# --- routing-path limit ------------------------------------------------------------------------

def test_routing_limit_relays_or_is_infeasible():
    tight = mesh.Fabric(1.0, 10.0, 2.0, 2.0, routing_paths=4, relay=True,
                        summa_broadcast="relay")
    # SUMMA with a route per root on 8 x 8 needs 16 paths per core: 4 relay stages per broadcast
    s = mesh.gemm(tight, "summa", 64, 64, 64, 8, 8)
    assert s.paths == 16 and s.relay_factor == 4
    roomy = replace(F, summa_broadcast="relay")
    assert s.cycles > mesh.gemm(roomy, "summa", 64, 64, 64, 8, 8).cycles
    # MeshGEMM needs O(1) paths (6): still over 4, so it relays twice as well
    assert mesh.gemm(tight, "meshgemm", 64, 64, 64, 8, 8).relay_factor == 2
    strict = mesh.Fabric(1.0, 10.0, 2.0, 2.0, routing_paths=4, relay=False,
                         summa_broadcast="relay")
    with pytest.raises(InfeasibleDesign, match="routing paths"):
        mesh.gemm(strict, "summa", 64, 64, 64, 8, 8)
    with pytest.raises(InfeasibleDesign, match="routing paths"):
        mesh.allreduce(strict, "ktree", 64, 4, k=4)  # 5 paths at the root


def test_switched_summa_needs_constant_paths_and_one_stage_more_than_cannon():
    # re-pointing O(1) routes at each step's root: Cannon's paths, one routing stage more a step
    s = mesh.gemm(F, "summa", 4096, 4096, 4096, 720, 720)
    c = mesh.gemm(F, "cannon", 4096, 4096, 4096, 720, 720)
    assert s.paths == c.paths and s.relay_factor == 1
    assert s.stages == c.stages + 720 * mesh.SUMMA_SWITCH_STAGES
    relayed = mesh.gemm(replace(F, summa_broadcast="relay"), "summa", 4096, 4096, 4096, 720, 720)
    assert c.cycles < s.cycles < relayed.cycles


def test_template_reports_routing_infeasibility():
    w = build_workload("linear", arch={"m": 64, "k": 256, "n": 256}, dtype="fp16")
    relay = {"gemm_algorithm": "summa", "summa_broadcast": "relay"}
    ok = make_accelerator("wafer:wse-1k", relay)
    assert ok.check(w) is None
    assert make_accelerator("wafer:wse-1k", {"gemm_algorithm": "summa", "relay": False}).check(
        w) is None  # switched SUMMA fits the routing limit
    strict = make_accelerator("wafer:wse-1k", {**relay, "relay": False})
    reason = strict.check(w)
    assert reason and "routing paths" in reason
    with pytest.raises(InfeasibleDesign, match="routing paths"):
        simulate(w, strict)
    # relaying costs time
    relayed = simulate(w, ok).latency_s
    roomy = simulate(w, make_accelerator("wafer:wse-1k", {**relay, "routing_paths_per_core": 128}))
    assert relayed > roomy.latency_s


# --- capacity ---------------------------------------------------------------------------------

def test_capacity_infeasible_with_reason():
    # 8192 x 4096 fp16 weights = 64 MiB on 1,024 cores of 48 KB (48 MiB in all)
    w = build_workload("linear", arch={"m": 1, "k": 8192, "n": 4096}, dtype="fp16")
    t = make_accelerator("wafer:wse-1k")
    reason = t.check(w)
    assert reason and "KiB per core" in reason and "weights" in reason and "48 KiB" in reason
    with pytest.raises(InfeasibleDesign, match="KiB per core"):
        simulate(w, t)
    # the same weights fit with 128 KB per core
    assert make_accelerator("wafer:wse-1k", {"sram_per_core_kb": 128}).check(w) is None


def test_memory_per_core_counts_weights_kv_and_reserve():
    w = build_workload("linear", arch={"m": 1, "k": 4096, "n": 4096}, dtype="fp16")
    need = make_accelerator("wafer:wse-1k").memory_per_core(w)
    assert need["weights"] == pytest.approx(4096 * 4096 * 2 / 1024)  # 128 x 128 tile per core
    assert need["kv_cache"] == 0
    assert need["reserved"] == 6 * 1024


# --- the template on workloads -----------------------------------------------------------------

def _op(name, kind, **attrs):
    return Op(name=name, kind=kind, target=name, input_shapes=(), output_shapes=(),
              dtype="fp16", bytes_per_element=2, attrs=attrs)


def _workload(ops, phase="decode"):
    g = nx.DiGraph()
    for i, op in enumerate(ops):
        g.add_node(op.name, op=op, index=i)
    for a, b in zip(ops, ops[1:]):
        g.add_edge(a.name, b.name, bytes=0)
    return Workload(graph=g, model="hand", phase=phase, dtype="fp16", params=0)


def test_decode_gemv_cost_is_the_closed_form():
    t = make_accelerator("wafer:wse2")
    op = _op("proj", "matmul", m=1, n=4096, k=4096, batch=1, weight_operand=True)
    c = t.op_cost(op, "decode")
    expect = mesh.gemv(t.fabric, 1, 4096, 4096, 750, 750, "ktree", 2).cycles / 1.1e9
    assert c.latency_s == pytest.approx(expect)
    assert c.unit == "region"
    # the engine reproduces the cost exactly when nothing contends
    r = simulate(_workload([op]), t)
    assert r.latency_s == pytest.approx(c.latency_s)


def test_shift_based_kv_append_is_constant_in_context():
    t = make_accelerator("wafer:wse2")
    a = _op("cat", "data_movement", elements=1024, kv_append=True)
    assert t.op_cost(a, "decode").latency_s < 30 / 1.1e9  # one neighbour shift
    short = _op("att", "attention", batch=1, heads=32, kv_heads=8, q_len=1, kv_len=1024,
                head_dim=128, causal=False)
    long = _op("att", "attention", batch=1, heads=32, kv_heads=8, q_len=1, kv_len=4096,
               head_dim=128, causal=False)
    assert t.op_cost(long, "decode").latency_s > t.op_cost(short, "decode").latency_s


def test_cost_independent_of_core_count_in_events():
    op = _op("proj", "matmul", m=1, n=4096, k=4096, batch=1, weight_operand=True)
    w = _workload([op, _op("n", "norm", elements=4096)])
    small = simulate(w, make_accelerator("wafer:wse-1k"))
    big = simulate(w, make_accelerator("wafer:wse2"))
    assert small.events == big.events  # one process per op, whatever the core count


def test_region_orientation_of_rectangular_decode_is_the_slower():
    t = make_accelerator("wafer:wse2", {"decode_region_width": 700, "decode_region_height": 100})
    op = _op("proj", "matmul", m=1, n=4096, k=4096, batch=1, weight_operand=True)
    c = t.op_cost(op, "decode").latency_s * 1.1e9
    a = mesh.gemv(t.fabric, 1, 4096, 4096, 700, 100, "ktree", 2).cycles
    b = mesh.gemv(t.fabric, 1, 4096, 4096, 100, 700, "ktree", 2).cycles
    assert c == pytest.approx(max(a, b))


def test_decode_allreduce_choice_orders_the_step():
    w = build_workload("linear", arch={"m": 1, "k": 8192, "n": 8192}, dtype="fp16")
    t = {a: simulate(w, make_accelerator("wafer:wse2", {"allreduce": a})).latency_s
         for a in mesh.ALLREDUCE_ALGORITHMS}
    assert t["ktree"] < t["pipeline"] < t["ring"]


# --- presets, validation, power ----------------------------------------------------------------

def test_wse2_preset():
    t = make_accelerator("wafer:wse2")
    assert t.cores == 757 * 996
    assert t.hw.sram_per_core_kb == 48 and t.hw.clock_hz == 1.1e9
    # its area comes from a core's parts and fits the largest rectangle of a 300-mm wafer
    assert t.physical().problem is None and t.area_mm2() <= physical.WAFER_USABLE_MM2
    assert t.peak_power_w() < t.hw.tdp_w
    assert make_accelerator("wafer:wse-1k").cores == 1024


def test_wse2_datapath_sram_bandwidth_and_area_match_cerebras():
    """Issue 27: WSE-2 computes four fp16 FMACs per core per cycle (Cerebras, Hot Chips 34):
    ~7.5 PFLOP/s fp16 on 850,000 cores (the 757 x 996 fabric in use gives 6.6), its SRAM
    ~20 PB/s, and its area within 10 % of the published 46,225 mm^2."""
    t = make_accelerator("wafer:wse2")
    assert t.fabric.macs_per_cycle == 4
    assert t.peak_flops == pytest.approx(7.5e15, rel=0.15)
    assert t.sram_bandwidth_Bps == pytest.approx(20e15, rel=0.15)
    assert t.area_mm2() == pytest.approx(46225, rel=0.10)
    assert t.describe()["derived"]["peak_flops"] == t.peak_flops
    # power: the WSE-2 draws ~15 kW (37 A100s of 400 W, WaferLLM); the model, bottom-up with
    # the one fitted uncounted-logic term, within 35 %
    assert t.physical().tdp_w == pytest.approx(14800, rel=0.35)
    assert t.peak_power_w() == t.physical().tdp_w < t.hw.tdp_w


def test_a_mesh_beyond_the_usable_rectangle_is_infeasible_naming_both_areas():
    """Issue 27: a wafer-scale design is checked against the largest rectangle inside the
    300-mm disc less its edge exclusion (43,808 mm^2), not the whole disc (70,686 mm^2)."""
    assert physical.WAFER_USABLE_MM2 == pytest.approx((300 - 2 * 2) ** 2 / 2)
    t = make_accelerator("wafer:wse2", {"sram_per_core_kb": 96})
    need = t.area_mm2()
    assert physical.WAFER_USABLE_MM2 < need < math.pi * 150 ** 2
    w = build_workload("linear", arch={"m": 1, "k": 256, "n": 256}, dtype="fp16")
    reason = t.check(w)
    assert reason and f"{need:,.0f} mm^2" in reason
    assert f"{physical.WAFER_USABLE_MM2:,.0f} mm^2" in reason


@settings(max_examples=60, deadline=None)
@given(w=st.integers(8, 4096), h=st.integers(8, 4096), kb=st.floats(8, 1024))
def test_every_buildable_wafer_fits_the_usable_rectangle(w, h, kb):
    t = Wafer("wse2", mesh_width=w, mesh_height=h, sram_per_core_kb=kb,
              prefill_region_width=min(w, 750), prefill_region_height=min(h, 750),
              decode_region_width=min(w, 750), decode_region_height=min(h, 750))
    p = t.physical()
    too_big = "largest rectangle" in (p.problem or "")
    assert too_big == (p.area_mm2 > physical.WAFER_USABLE_MM2)


def test_wafer_cost_is_by_area_with_yield_under_redundancy():
    """Cost is the design's share of the wafer over the yield its spare cores give: WSE-2's
    12.7 % spares absorb its ~40 expected defects (yield 1); a mesh without spares would
    almost never yield; half the area costs half as much."""
    wse2 = make_accelerator("wafer:wse2").physical()
    area = wse2.area_mm2
    assert physical.wafer_yield(area, 7, spare_cores=96_000) == pytest.approx(1.0)
    assert physical.wafer_yield(area, 7, spare_cores=0) < 1e-3
    assert 0.5 < physical.wafer_yield(area, 7, spare_cores=45) < 0.99
    full = physical.WAFER_PRICE_USD[7] * area / physical.WAFER_USABLE_MM2
    assert wse2.cost_breakdown_usd["dies"] == pytest.approx(full)
    assert physical.wafer_cost_usd(area / 2, 7, 48_000) == pytest.approx(full / 2)
    assert physical.wafer_cost_usd(area, 7, 0) > 1000 * full


def test_bad_input_is_one_clear_line():
    with pytest.raises(BadInput, match="decode_region_width"):
        make_accelerator("wafer:wse-1k", {"decode_region_width": 64})
    with pytest.raises(BadInput, match="gemm_algorithm"):
        make_accelerator("wafer:wse2", {"gemm_algorithm": "strassen"})
    with pytest.raises(BadInput, match="reserved_sram_per_core_kb"):
        Wafer("wse2", reserved_sram_per_core_kb=64)


def test_peak_power_over_budget_is_infeasible():
    w = build_workload("linear", arch={"m": 1, "k": 256, "n": 256}, dtype="fp16")
    t = make_accelerator("wafer:wse-1k", {"tdp_w": 5.0})
    reason = t.check(w)
    assert reason and "tdp_w" in reason
    assert t.peak_power_w() > 5.0


def test_energy_and_area_positive_and_deterministic():
    w = build_workload("linear", arch={"m": 1, "k": 2048, "n": 2048}, dtype="fp16")
    t = make_accelerator("wafer:wse-1k")
    a, b = simulate(w, t), simulate(w, t)
    assert a.to_dict() == b.to_dict()
    assert a.energy_breakdown_j["compute"] > 0 and a.energy_breakdown_j["network"] > 0
    assert a.energy_breakdown_j["static"] == pytest.approx(t.static_power_w() * a.latency_s)
    assert math.isfinite(a.area_mm2) and a.area_mm2 > 0


# --- the LLaMA3-8B decode step (zoo) and the reproduction ------------------------------------

@pytest.mark.slow
def test_llama3_decode_on_wse2_and_capacity_limit():
    w = build_workload("llama3-8b", phase="decode", batch=1, context=4096, dtype="fp16")
    t = make_accelerator("wafer:wse2")
    r = simulate(w, t)
    assert 1000 < r.throughput < 10000  # tokens/s per request, paper 2,700
    small = make_accelerator("wafer:wse2", {"decode_region_width": 500,
                                            "decode_region_height": 500})
    reason = small.check(w)
    assert reason and "500 x 500" in reason and "weights" in reason


@pytest.mark.slow
def test_reproduction_shape_and_tolerance():
    pytest.importorskip("accelerators.gpu")
    from dse.reproduce import run_reproduction
    rows = run_reproduction("waferllm")
    assert len(rows) == 9
    for row in rows:
        assert math.isfinite(row.ours) and row.ours > 0
        d = row.to_dict()
        assert set(d) == {"metric", "paper", "ours", "ratio", "within_35pct", "note"}
    # orderings: the wafer beats the A100; MeshGEMM beats Cannon and SUMMA; K-tree beats both
    assert all(r.ours > 1 for r in rows if "speedup" in r.metric)
    # tolerance: every row within +-35% of the paper (or inside its range), except MeshGEMM's
    # speedups over Cannon and SUMMA: with the WSE-2's four fp16 FMACs per core (issue 27) the
    # whole-prefill ratio is ~5.8x against the paper's 2-3x GEMMs (docs/validation.md, wafer);
    # they must still favour MeshGEMM by at least the paper's range and stay bounded
    gemm = [r for r in rows if r.metric.startswith("MeshGEMM speedup over")]
    assert len(gemm) == 2 and all(2.0 <= r.ours <= 8.0 for r in gemm), gemm
    off = [(r.metric, r.ratio) for r in rows if not r.within() and r not in gemm]
    assert not off, off


def test_study_file_matches_the_study_schema():
    spec_mod = pytest.importorskip("dse.study.spec")
    yaml = pytest.importorskip("yaml")
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "studies" / "wafer_llama3.yaml"
    spec = spec_mod.StudySpec.model_validate(yaml.safe_load(path.read_text()))
    assert spec.accelerator.template == "wafer"
    params = Wafer.params()
    for key, rng in spec.search.hardware.items():
        p = params[key]
        assert p.low <= rng["low"] < rng["high"] <= p.high
