"""The ``pim`` template and the DRAM-PIM command-stream model (accelerators/dram_timing.py)."""

import json
import math

import pytest

from accelerators import dram_timing as dt, technology as tech
from accelerators.memory_standards import get_standard
from accelerators.pim import (DRAM_GBIT_PER_MM2, PIM, PIM_DIE_MAX_GROWTH, pim_peak_w,
                              split_attention)
from accelerators.registry import make_accelerator
from dse.errors import BadInput, InfeasibleDesign
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads import ir
from workloads.build import build_workload

TINY_GPT = dict(n_layer=2, d_model=256, n_head=4, d_ff=1024, vocab_size=1000, max_seq=2048)


def hbm2_geometry(**kw):
    base = dict(channels=32, ranks=2, banks=32, macs_per_bank=16, page_bytes=1024,
                buffer_bytes=1024, dot_cycles=2, element_bytes=2)
    base.update(kw)
    return dt.PimGeometry(**base)


# ----------------------------------------------------------------------------- command model
def test_tile_latency_matches_hand_calculation_and_neupims_estimate():
    g = hbm2_geometry()
    # 16 banks per rank -> 4 ACT commands, 3 tFAW windows; 32 DOTs x tCCD_L; tRP
    assert dt.activate_cycles(g, dt.HBM2) == 3 * 30
    assert dt.tile_cycles(g, dt.HBM2, 32) == 90 + (14 + 32 * 2) + 14 == 182
    # NeuPIMs' own latency estimator uses 184 cycles per tile [R trace-generator]
    assert dt.tile_cycles(g, dt.HBM2, 32) == pytest.approx(184, rel=0.02)
    # tRAS dominates a tile with few DOTs
    assert dt.tile_cycles(g, dt.HBM2, 1) == 90 + 34 + 14
    gd = dt.PimGeometry(channels=16, ranks=1, banks=16, macs_per_bank=16, page_bytes=2048,
                        buffer_bytes=2048, dot_cycles=1, element_bytes=2)
    assert dt.tile_cycles(gd, dt.GDDR6, 64) == 3 * 22 + (16 + 64) + 16


def test_gemv_on_one_bank_by_hand():
    g = dt.PimGeometry(channels=1, ranks=1, banks=1, macs_per_bank=16, page_bytes=256,
                       buffer_bytes=256, dot_cycles=1, element_bytes=2)
    t = dt.HBM2
    s = dt.gemv_stream(g, t, dt.Gemv(rows=4, cols=64))
    # 4 rows x 64 bf16 = 512 B -> 2 pages; 4 x 64 / 16 = 16 DOTs; one pass (128 B input)
    assert (s.passes, s.tiles, s.dots) == (1, 2, 16)
    tiles = 2 * (0 + t.trp) + max(2 * t.trcd + 16 * 1, 2 * t.tras)      # no tFAW: 1 bank
    gwrite = t.cwl + 2 * t.burst_cycles + t.twr                          # 128 B = 2 bursts
    readout = t.cl + 1 * t.burst_cycles                                   # 4 results x 2 B
    assert s.cycles == pytest.approx((tiles + gwrite + readout) * t.trefi / (t.trefi - t.trfc))
    assert s.column_bytes == 16 * 32 and s.macs == 16 * 16
    assert s.gwrite_bytes == 128 and s.readout_bytes == 8


def test_gemv_vectors_share_a_tile_when_the_buffer_holds_them():
    g = dt.PimGeometry(channels=1, ranks=1, banks=1, macs_per_bank=16, page_bytes=256,
                       buffer_bytes=512, dot_cycles=1, element_bytes=2)
    one = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=4, cols=64))
    four = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=4, cols=64, vectors=4))
    assert four.tiles == one.tiles            # 4 x 128 B of inputs fit the 512 B buffer
    assert four.dots == 4 * one.dots
    eight = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=4, cols=64, vectors=8))
    assert eight.passes == 2 * four.passes and eight.tiles == 2 * four.tiles


def test_partition_every_bank_computes_and_uneven_split_costs_the_busiest_bank():
    g = hbm2_geometry(channels=4, banks=8, ranks=1)
    even = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=4 * 8 * 16, cols=512))
    assert even.bank_activations == even.tiles * 4 * 8              # every bank opens rows
    assert even.macs == pytest.approx(4 * 8 * 16 * 512)             # exactly the work
    odd = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=4 * 8 * 16 + 1, cols=512))
    assert odd.tiles == even.tiles + 1 and odd.cycles > even.cycles
    assert dt.bank_footprint_bytes(g, dt.Gemv(4 * 8 * 16, 512)) == 16 * 1024
    assert dt.bank_footprint_bytes(g, dt.Gemv(4 * 8 * 16 + 1, 512)) == 17 * 1024


def test_few_rows_split_columns_across_channels():
    g = hbm2_geometry(channels=16, banks=16, ranks=1)
    few = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=16, cols=4096))
    one_channel = dt.gemv_stream(g, dt.HBM2, dt.Gemv(rows=16, cols=4096), channels=1)
    assert few.cycles < one_channel.cycles / 8     # 16 channels share the reduction
    assert few.macs == pytest.approx(16 * 4096)


def test_block_stream_spreads_heads_over_channels():
    g = hbm2_geometry(channels=8, banks=32)
    gemv = dt.Gemv(rows=128, cols=300)
    single = dt.gemv_stream(g, dt.HBM2, gemv, 1)
    heads8 = dt.block_stream(g, dt.HBM2, gemv, 8)
    heads16 = dt.block_stream(g, dt.HBM2, gemv, 16)
    assert heads8.cycles == pytest.approx(single.cycles)           # one head per channel
    assert heads16.cycles == pytest.approx(2 * single.cycles)      # two rounds
    assert heads16.macs == pytest.approx(16 * single.macs)


def test_geometry_problems_and_bad_timing():
    assert dt.PimGeometry(1, 1, 1, 16, 16, 64, 1, 2).problem()           # page < one DOT
    assert dt.PimGeometry(1, 1, 1, 16, 64, 16, 1, 2).problem()           # buffer < one DOT
    with pytest.raises(BadInput):
        dt.PimGeometry(0, 1, 1, 16, 64, 64, 1, 2)
    with pytest.raises(BadInput, match="tRAS"):
        PIM(tras_cycles=4)
    with pytest.raises(BadInput, match="ranks"):
        PIM(ranks=3)


# ----------------------------------------------------------------------------- template
def test_weight_gemv_op_costs_its_command_stream():
    w = build_workload("linear", phase="forward", batch=1, dtype="bf16",
                       arch={"m": 1, "k": 2048, "n": 4096, "bias": False})
    p = PIM()
    r = simulate(w, p)
    s = dt.gemv_stream(p.geom, p.timing, dt.Gemv(rows=4096, cols=2048))
    assert r.latency_s == pytest.approx(s.cycles * 1e-9)
    assert r.ops[0].unit == "pim"
    # energy: activations + in-bank reads + bus + MACs, all positive
    e = r.energy_breakdown_j
    assert e["offchip_memory"] > 0 and e["compute"] > 0
    assert e["offchip_memory"] >= s.bank_activations * dt.act_energy_j(2048)


def test_decode_step_splits_attention_and_runs_nonlinear_ops_on_the_asic():
    w = build_workload("gpt2", phase="decode", batch=1, context=300, dtype="bf16",
                       arch=TINY_GPT)
    p = PIM()
    planned = p.plan(w)
    kinds = [op.attrs.get("part") for op in planned.ops if op.kind == ir.ATTENTION]
    assert kinds == ["logits", "attend"] * TINY_GPT["n_layer"]
    kv = sum(op.kv_bytes_read for op in w.ops)
    assert sum(op.kv_bytes_read for op in planned.ops) == kv
    r = simulate(w, p)
    units = {o.kind: o.unit for o in r.ops}
    assert units["matmul"] == "pim" and units["norm"] == "asic"
    assert units["softmax"] == "asic" and units["attention"] == "pim"
    # GEMVs run one at a time; only a few small ASIC ops overlap them
    pim = sum(o.duration_s for o in r.ops if o.unit == "pim")
    assert pim <= r.latency_s <= sum(o.duration_s for o in r.ops) * (1 + 1e-9)
    assert r.latency_s == pytest.approx(sum(o.duration_s for o in r.ops), rel=1e-2)
    assert p.area_mm2() > 0 and p.static_power_w() > 0


def test_longer_context_costs_more_attention():
    p = PIM()
    times = []
    for ctx in (100, 700, 1500):
        w = build_workload("gpt2", phase="decode", batch=1, context=ctx, arch=TINY_GPT)
        times.append(simulate(w, p).breakdown_by_kind()["attention"]["time_s"])
    # GWRITE / readout / one tile per GEMV are fixed; the tiles grow with the context
    assert times[0] < times[1] < times[2] and times[2] > 2 * times[0]


def test_more_channels_are_faster():
    w = build_workload("gpt2", phase="decode", batch=1, context=256, arch=TINY_GPT)
    slow = simulate(w, PIM(channels=4)).latency_s
    fast = simulate(w, PIM(channels=16)).latency_s
    assert fast < slow / 2


def test_model_over_capacity_is_infeasible_with_a_reason():
    w = build_workload("gpt2", phase="decode", batch=1, context=512, dtype="bf16")
    with pytest.raises(InfeasibleDesign, match=r"gpt2 needs 269 MB .* holds 134 MB"):
        simulate(w, PIM(channels=1, channel_capacity_gib=0.125, macs_per_bank=2))
    assert PIM().check(w) is None          # 16 x 0.5 GiB hold GPT-2 small


def test_mapping_the_banks_cannot_hold_is_infeasible():
    # 17 rows of 600 kB over 16 banks: the busiest bank holds 2 rows = 1.2 MB, more than a bank
    # of a 16 MiB channel (1 MiB), although the matrix (10.2 MB) fits the channel (int8 lanes,
    # one per bank: the PIM logic of so small a DRAM must stay within its die)
    w = build_workload("linear", phase="forward", batch=1, dtype="int8",
                       arch={"m": 1, "k": 600000, "n": 17, "bias": False})
    p = PIM(channels=1, banks_per_channel=16, channel_capacity_gib=1 / 64, dtype="int8",
            macs_per_bank=1)
    reason = p.check(w)
    assert reason and "busiest bank" in reason


def test_unusable_geometry_is_infeasible_not_a_crash():
    w = build_workload("linear", phase="forward", batch=1, arch={"m": 1, "k": 64, "n": 64,
                                                                  "bias": False})
    with pytest.raises(InfeasibleDesign, match="page_bytes"):
        simulate(w, PIM(page_bytes=64, macs_per_bank=64))


def test_unsplit_attention_is_still_costed():
    w = build_workload("gpt2", phase="decode", batch=1, context=64, arch=TINY_GPT)
    p = PIM()
    att = next(op for op in w.ops if op.kind == ir.ATTENTION)
    whole = p.cost(att)
    parts = split_attention(w)
    pieces = [p.cost(op) for op in parts.ops if op.name.startswith(att.name + ".")]
    assert whole.latency_s == pytest.approx(sum(c.latency_s for c in pieces))


# ----------------------------------------------------------------------------- reproduction
def test_reproduction_json_schema(monkeypatch, capsys):
    from dse import cli
    from dse.reproduce import pim_gpt
    monkeypatch.setattr(pim_gpt, "models", lambda: [("gpt2", "gpt2", None)])
    cli.main(["reproduce", "pim-gpt", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"rows", "summary"} and len(data["rows"]) == 2 + 2 + 3
    for row in data["rows"][:4]:
        assert {"metric", "paper", "ours", "ratio", "source"} <= set(row)
        assert isinstance(row["paper"], list) and len(row["paper"]) == 2
        assert math.isfinite(row["ours"]) and row["ours"] > 1
        low, high = row["paper"]
        assert row["within_35pct"] == (low <= row["ours"] <= high)
        expect = 1.0 if low <= row["ours"] <= high else row["ours"] / (
            low if row["ours"] < low else high)
        assert row["ratio"] == pytest.approx(expect)
    assert "over CPU" in data["rows"][2]["metric"]


#: Rows of `dse reproduce pim-gpt` known to fall outside the paper's ranges, and why: the
#: paper's T4 and Xeon numbers are framework wall times far from either chip's roofline
#: (docs/validation.md, pim section).
PIM_GPT_KNOWN_MISSES = {"token-generation speedup over T4", "energy efficiency over T4",
                        "token-generation speedup over CPU", "energy efficiency over CPU",
                        "resnet18: operations per parameter"}
#: ... except the T4 speed-ups of the small and medium models, inside the range once the T4
#: runs Hugging Face generate with the per-token Python measured on our GPT-2 generate row.
PIM_GPT_T4_WITHIN = {"gpt2", "gpt2-medium", "gpt3-small", "gpt3-medium"}


@pytest.mark.slow
def test_pim_gpt_reproduction_tolerance():
    from dse.reproduce import pim_gpt
    rows = pim_gpt.rows()
    assert len(rows) == 35 and all(isinstance(r, Row) for r in rows)
    for r in rows:
        known = any(r.metric.endswith(m) for m in PIM_GPT_KNOWN_MISSES) and not (
            r.metric.split(":")[0] in PIM_GPT_T4_WITHIN and "speedup over T4" in r.metric)
        assert r.within() != known, (r.metric, r.ours, r.ratio)
    # the speedup shrinks from the smallest to the largest models, as the paper's range spans
    speed = {r.metric.split(":")[0]: r.ours for r in rows if "speedup over T4" in r.metric}
    assert speed["gpt2"] > speed["gpt2-xl"] and speed["gpt3-small"] > speed["gpt3-xl"]
    # PIM beats both baselines on every model, the CPU by more than the GPU
    cpu = {r.metric.split(":")[0]: r.ours for r in rows if "speedup over CPU" in r.metric}
    assert all(cpu[m] > speed[m] > 1 for m in speed)


# --- issue 27: PIM logic is not free -------------------------------------------------------

def test_pim_logic_costs_die_area_price_and_power():
    """In-bank MACs take DRAM die area (reported as ``pim_logic``), raise the DRAM's price by
    that area and draw power at full rate that the TDP counts; more lanes, more of each."""
    few, many = PIM("pim-gpt", macs_per_bank=4), PIM("pim-gpt", macs_per_bank=16)
    pf, pm = few.physical(), many.physical()
    assert 0 < pf.area_breakdown_mm2["pim_logic"] < pm.area_breakdown_mm2["pim_logic"]
    assert pm.area_breakdown_mm2["pim_logic"] == pytest.approx(
        4 * pf.area_breakdown_mm2["pim_logic"])
    assert pf.cost_breakdown_usd["memory"] < pm.cost_breakdown_usd["memory"]
    # the price is by area: 16 lanes per bank make the 8 Gb GDDR6 dies 25 % bigger
    # (DRAM is priced per binary gigabyte: a "1 GB" device holds 2**30 bytes)
    plain = many.hw.channels * many.hw.channel_capacity_gib * \
        get_standard("gddr6").price_usd_per_gb
    assert pm.cost_breakdown_usd["memory"] == pytest.approx(plain * 1.25)
    assert pf.tdp_w < pm.tdp_w
    leak = tech.leakage_w(pm.area_breakdown_mm2["pim_logic"] - pf.area_breakdown_mm2["pim_logic"],
                          0, many.hw.asic_node_nm)
    assert pm.tdp_w - pf.tdp_w == pytest.approx(
        pim_peak_w(many.hw, many.timing, 2, many._mac_j, many._act_j)
        - pim_peak_w(few.hw, few.timing, 2, few._mac_j, few._act_j) + leak)


@pytest.mark.parametrize("template", ["pim:pim-gpt", "npu_pim:neupims"])
def test_average_power_stays_within_the_tdp(template):
    """Issue 27: pim designs reported average power above their TDP (42.8 W vs 27.9 W) because
    the TDP left out the in-bank reads and row activations."""
    w = build_workload("gpt2", phase="decode", batch=4, context=512, dtype="bf16")
    d = make_accelerator(template)
    r = simulate(w, d)
    assert r.energy_j / r.latency_s <= d.physical().tdp_w


@pytest.mark.parametrize("template, hw", [("pim", {"macs_per_bank": 64}),
                                         ("npu_pim", {"macs_per_bank": 37})])
def test_pim_logic_beyond_a_dram_die_is_infeasible_naming_both(template, hw):
    d = make_accelerator(template, hw)
    logic = d.pim_logic()
    assert logic.growth > PIM_DIE_MAX_GROWTH
    reason = d.physical().problem
    per = logic.devices
    assert reason and f"{logic.area_mm2 / per:,.1f} mm²" in reason
    room = (PIM_DIE_MAX_GROWTH - 1) * logic.cell_bits / 1e9 / DRAM_GBIT_PER_MM2[logic.kind]
    assert f"{room / per:,.1f} mm²" in reason
    w = build_workload("gpt2", phase="decode", batch=1, context=128, dtype="bf16")
    assert d.check(w) == reason


def test_a_study_prunes_pim_logic_a_dram_die_cannot_hold(tmp_path):
    from dse.study.driver import run_study
    from dse.study.loader import load_study_text
    text = """
name: t_pim_logic
seed: 0
workloads:
  - {model: gpt2, phase: decode, batch: 1, context: 128, dtype: bf16}
accelerator: {template: pim, preset: pim-gpt}
search:
  hardware:
    macs_per_bank: {choices: [4, 8, 16, 64]}
objectives: [latency_s]
trials: 6
"""
    r = run_study(load_study_text(text), out=tmp_path / "o", show_progress=False,
                  write_report=False)
    import csv
    with open(r.trials_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    pruned = [x for x in rows if x["state"] == "PRUNED"]
    assert pruned and all("PIM logic" in x["reason"] and "mm²" in x["reason"] for x in pruned)
    assert any(x["state"] == "COMPLETE" for x in rows)
