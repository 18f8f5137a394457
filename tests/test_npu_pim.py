"""The ``npu_pim`` (NeuPIMs) template and the batched-decode request tools."""

import json

import numpy as np
import pytest

from accelerators import dram_timing as dt
from accelerators.npu import NPU
from accelerators.npu_pim import KV_CHANNELS, NeuPIMs, double_buffered_cycles
from dse.errors import BadInput, InfeasibleDesign
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads import ir
from workloads.requests import (ALPACA, SHAREGPT, Request, attention_kv_lens, batched_decode,
                                requests_from, shard_tensor_parallel, split_batch,
                                steady_state_batch, with_kv_lengths)


def arch(d=1024, layers=2):
    return dict(n_layer=layers, d_model=d, n_head=d // 128, d_ff=4 * d, vocab_size=1000,
                max_seq=4096)


def step(kv_contexts, d=1024, layers=2):
    reqs = [Request(c, 50, 0) for c in kv_contexts]
    return batched_decode("gpt2", reqs, arch=arch(d, layers))


@pytest.fixture(scope="module")
def balanced():
    """256 requests of ~600 tokens on a d=1024 model: NPU and PIM work are comparable."""
    return step([600 - 10 * (i % 7) for i in range(256)])


# ----------------------------------------------------------------------------- requests
def test_distributions_have_the_published_means():
    rng = np.random.default_rng(1)
    for dist in (SHAREGPT, ALPACA):
        ins, outs = dist.sample(200_000, rng)
        assert ins.mean() == pytest.approx(dist.mean_input, rel=0.05)
        assert outs.mean() == pytest.approx(dist.mean_output, rel=0.05)
        assert ins.min() >= 1 and outs.min() >= 1 and (ins + outs).max() <= dist.max_len


def test_steady_state_batch_is_deterministic_and_length_biased():
    a = steady_state_batch("sharegpt", 128, seed=3)
    assert a == steady_state_batch("sharegpt", 128, seed=3)
    assert a != steady_state_batch("sharegpt", 128, seed=4)
    assert all(0 <= r.generated < r.output_len for r in a)
    big = steady_state_batch("sharegpt", 4000, seed=0)
    # a slot is held longer by a long request: the mean output length exceeds the dataset's
    assert np.mean([r.output_len for r in big]) > 1.3 * SHAREGPT.mean_output
    with pytest.raises(BadInput):
        steady_state_batch("nope", 4)
    with pytest.raises(BadInput):
        steady_state_batch("alpaca", 0)


def test_request_lists():
    reqs = requests_from([(10, 5), (3, 4, 2)])
    assert [r.context for r in reqs] == [10, 5]
    with pytest.raises(BadInput):
        requests_from([(0, 5)])
    with pytest.raises(BadInput):
        Request(4, 4, 4)


def test_per_request_kv_lengths_and_sub_batches_conserve_work(balanced):
    w = balanced
    att = [op for op in w.ops if op.kind == ir.ATTENTION]
    lens = attention_kv_lens(att[0])
    assert len(lens) == 256 and lens[0] == 601
    b = att[0].bytes_per_element
    assert att[0].kv_bytes_read == sum(lens) * 1024 * 2 * b
    halves = split_batch(w, [list(range(0, 256, 2)), list(range(1, 256, 2))])
    assert len(halves) == 2 * len(w)
    for kind in (ir.ATTENTION, ir.MATMUL):
        flops = sum(op.flops for op in w.ops if op.kind == kind)
        assert sum(op.flops for op in halves.ops if op.kind == kind) == pytest.approx(
            flops, rel=1e-3)
    weights = sum(op.weight_bytes for op in w.ops if op.kind == ir.MATMUL)
    assert sum(op.weight_bytes for op in halves.ops if op.kind == ir.MATMUL) == 2 * weights
    with pytest.raises(BadInput):
        split_batch(w, [[0, 1]])
    with pytest.raises(BadInput):
        with_kv_lengths(w, [5])


def test_tensor_parallel_shard_divides_weights_heads_and_kv(balanced):
    w = balanced
    s = shard_tensor_parallel(w, 4)
    mm = lambda x: sum(op.weight_bytes for op in x.ops if op.kind == ir.MATMUL)
    kv = lambda x: sum(op.kv_bytes_read for op in x.ops if op.kind == ir.ATTENTION)
    assert mm(s) == pytest.approx(mm(w) / 4, rel=1e-3)
    assert kv(s) == pytest.approx(kv(w) / 4, rel=1e-3)
    assert {op.attrs["heads"] for op in s.ops if op.kind == ir.ATTENTION} == {2}
    norms = lambda x: sum(op.flops for op in x.ops if op.kind == ir.NORM)
    assert norms(s) == norms(w)                                     # replicated
    with pytest.raises(BadInput):
        shard_tensor_parallel(w, 3)


# ----------------------------------------------------------------------------- NeuPIMs
def test_attention_runs_on_the_pim_gemms_on_the_npu(balanced):
    r = simulate(balanced, NeuPIMs("neupims"))
    by_kind = {}
    for o in r.ops:
        by_kind.setdefault(o.kind, set()).add(o.unit)
    assert by_kind["attention"] == {"pim"} and by_kind["matmul"] == {"array"}
    assert by_kind["softmax"] == {"vector"}
    assert r.throughput > 0 and r.throughput_unit == "tokens/s"


def test_pim_attention_latency_is_the_busiest_channel(balanced):
    d = NeuPIMs("npu+pim")
    planned = d.plan(balanced)
    qk = next(op for op in planned.ops if op.attrs.get("part") == "logits")
    per, total = d.channel_cycles(qk, "logits")
    lens = attention_kv_lens(qk)
    chans = qk.attrs[KV_CHANNELS]
    for c in range(d.hw.channels):
        expect = sum(dt.gemv_stream(d.geom, d.timing, dt.Gemv(s, 1024, segment=128), 1).cycles
                     for s, ch in zip(lens, chans) if ch == c)
        assert per[c] == pytest.approx(expect)
    assert d.cost(qk).latency_s == pytest.approx(max(per) * 1e-9)


def test_dual_row_buffers_beat_blocked_mode(balanced):
    dual = simulate(balanced, NeuPIMs("neupims")).throughput
    blocked = simulate(balanced, NeuPIMs("interleaving-only")).throughput
    assert dual > 1.1 * blocked
    # without interleaving only the GWRITE row switch of the blocked mode differs: small, > 0
    a = simulate(balanced, NeuPIMs("npu+pim")).throughput
    b = simulate(balanced, NeuPIMs("dual-buffers-only")).throughput
    assert 1.0 < b / a < 1.1


def test_single_row_buffer_pays_a_row_switch_per_gwrite():
    g1 = dt.PimGeometry(channels=1, ranks=2, banks=32, macs_per_bank=16, page_bytes=1024,
                        buffer_bytes=1024, dot_cycles=2, element_bytes=2, gwrite_row_switch=True)
    g2 = dt.PimGeometry(**{**g1.__dict__, "gwrite_row_switch": False})
    gemv = dt.Gemv(rows=64, cols=4096)
    s1, s2 = dt.gemv_stream(g1, dt.HBM2, gemv), dt.gemv_stream(g2, dt.HBM2, gemv)
    assert s1.passes == s2.passes == 8
    per_pass = (dt.HBM2.trcd + dt.HBM2.trp) * dt.HBM2.refresh_factor
    assert s1.cycles - s2.cycles == pytest.approx(s1.passes * per_pass)
    assert NeuPIMs("npu+pim").geom.gwrite_row_switch and not NeuPIMs().geom.gwrite_row_switch


def test_ablation_presets_follow_the_papers_order():
    naive = NeuPIMs("npu+pim").hw
    assert (naive.row_buffers, naive.load_balancing, naive.sub_batch_interleaving) == \
        (1, "round_robin", False)
    assert NeuPIMs("dual-buffers-only").hw.row_buffers == 2
    assert NeuPIMs("dual-buffers+balancing").hw.load_balancing == "greedy"
    assert NeuPIMs().hw.sub_batch_min_requests == 256


def test_interleaving_only_from_its_threshold(balanced):
    d = NeuPIMs("neupims", sub_batch_min_requests=257)
    assert d.assignment(balanced)[0] is None             # 256 requests: not interleaved
    assert NeuPIMs("neupims").assignment(balanced)[0] is not None


def test_compute_utilisation(balanced):
    d = NeuPIMs("neupims")
    r = simulate(balanced, d)
    u = d.compute_utilisation(r)
    array = sum(o.compute_cycles for o in r.ops if o.unit == "array") / d.hw.clock_hz
    assert u["npu"] == pytest.approx(array / r.latency_s)
    assert 0 < u["pim"] <= r.utilisation["pim"] + 1e-9 and 0 < u["npu"] <= 1
    # round robin leaves channels idle: the mean channel is less busy than the busiest
    rr = NeuPIMs("dual-buffers-only")
    q = simulate(balanced, rr)
    assert rr.compute_utilisation(q)["pim"] < q.utilisation["pim"]


def test_blocked_pim_occupies_the_memory_channels(balanced):
    d = NeuPIMs("npu+pim")
    qk = next(op for op in d.plan(balanced).ops if op.attrs.get("part") == "logits")
    c = d.cost(qk)
    assert c.traffic["dram"] == pytest.approx(c.latency_s * d.bandwidth_Bps)
    free = NeuPIMs("dual-buffers-only").cost(qk)
    assert free.traffic["dram"] < 0.1 * c.traffic["dram"]     # only GWRITE + RDRESULT
    assert free.latency_s < c.latency_s < 1.1 * free.latency_s   # + the GWRITE row switches


def test_sub_batch_interleaving_helps_when_npu_and_pim_work_compare(balanced):
    on = simulate(balanced, NeuPIMs("neupims")).throughput
    off = simulate(balanced, NeuPIMs("dual-buffers+balancing")).throughput
    assert on > 1.1 * off
    r = simulate(balanced, NeuPIMs("neupims"))
    # busy fractions adding up to more than 1: the NPU and the PIM work at the same time
    assert r.busy_fraction["array"] + r.busy_fraction["pim"] > 1.1


def test_greedy_load_balancing_helps_on_skewed_lengths():
    # long requests at indices 0, 32 and 1, 33: round robin puts two on channels 0 and 1
    ctx = [1900 if i in (0, 1, 32, 33) else 60 for i in range(64)]
    w = step(ctx)
    attention = lambda lb: simulate(w, NeuPIMs("npu+pim", load_balancing=lb)) \
        .breakdown_by_kind()["attention"]["time_s"]
    assert attention("greedy") < 0.7 * attention("round_robin")
    d = NeuPIMs("npu+pim", load_balancing="greedy")
    qk = next(op for op in d.plan(w).ops if op.attrs.get("part") == "logits")
    chans = qk.attrs[KV_CHANNELS]
    assert len({chans[i] for i in (0, 1, 32, 33)}) == 4


def test_npu_only_preset_uses_no_pim(balanced):
    r = simulate(balanced, NeuPIMs("npu-only"))
    assert {o.unit for o in r.ops} <= {"array", "vector"}
    assert r.throughput < simulate(balanced, NeuPIMs("neupims")).throughput


def test_a_prompts_attention_runs_on_the_npu():
    """NeuPIMs offloads decode GEMVs only: a prompt's attention (many queries per request) is
    a GEMM and stays on the NPU, as the npu-only design runs it (NeuPIMs' simulator computes
    the initiation phase's logits "in NPU")."""
    from workloads.build import build_workload
    prefill = build_workload("gpt2", phase="prefill", batch=1, seq=256, arch=arch(512, 2))
    d = NeuPIMs("neupims")
    assert not any(d.on_pim(op) for op in prefill.ops)
    r = simulate(prefill, d)
    assert "pim" not in {o.unit for o in r.ops}
    assert r.latency_s == pytest.approx(simulate(prefill, NeuPIMs("npu-only")).latency_s)
    decode = build_workload("gpt2", phase="decode", batch=4, context=256, arch=arch(512, 2))
    assert "pim" in {o.unit for o in simulate(decode, d).ops}


def test_pim_hardware_is_paid_for_only_where_used():
    """NPU-only has plain HBM2 (no lanes, no PIM power in the TDP); the second row buffer
    costs a page of latches per bank (SRAM bits at the PIM node)."""
    from accelerators import technology as tech
    from accelerators.pim import DRAM_GBIT_PER_MM2
    full, blocked, plain = (NeuPIMs(p).physical() for p in ("neupims", "npu+pim", "npu-only"))
    assert plain.area_breakdown_mm2.get("pim_logic", 0.0) == 0.0
    assert plain.area_mm2 < blocked.area_mm2 < full.area_mm2
    assert plain.tdp_w < blocked.tdp_w and plain.cost_usd < blocked.cost_usd
    hw = NeuPIMs("neupims").hw
    latches = hw.channels * hw.banks_per_channel * tech.sram_area_mm2(hw.page_bytes,
                                                                      hw.pim_node_nm)
    assert full.area_mm2 - blocked.area_mm2 == pytest.approx(latches, rel=1e-9)
    cells_gbit = hw.channels * hw.channel_capacity_gib * 2**30 * 8 / 1e9
    cells_mm2 = cells_gbit / DRAM_GBIT_PER_MM2["hbm2"]
    assert 0.0005 < latches / cells_mm2 < 0.01   # a fraction of a per cent of the cells


def test_serving_a_neupims_at_low_load_is_its_generation(tmp_path):
    """One request at a time: serving's TTFT and TPOT are a generation's (batch 1, both
    simulated as events), the decode attention on the PIM, the prompt on the NPU."""
    from dse import api
    arch = {"n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 8, "d_ff": 1024,
            "vocab_size": 1024, "max_seq": 4096}
    trace = tmp_path / "sparse.csv"
    trace.write_text("arrival_s,input_len,output_len\n"
                     + "".join(f"{10.0 * i},200,40\n" for i in range(4)))
    kw = dict(accelerator="npu_pim:neupims", arch=arch, fidelity="event")
    r = api.serve("llama2-7b", trace=str(trace), **kw)
    g = api.generate("llama2-7b", 200, 40, 1, **kw)
    assert r.completed == 4 and r.max_running == 1
    assert r.ttft_s["p50"] == pytest.approx(g.ttft_s, rel=0.01)
    assert r.tpot_s["p50"] == pytest.approx(g.tpot_s, rel=0.01)


def test_double_buffered_weights_by_hand(balanced):
    d = NeuPIMs()
    op = next(op for op in balanced.ops if op.kind == ir.MATMUL and op.attrs["n"] == 1024
              and op.attrs["k"] == 1024)
    # 8 x 8 folds of 128 x 128 over 8 arrays, each max(256 rows, 128) cycles, fill + drain once
    assert double_buffered_cycles(op, d.hw) == 8 * 256 + 128 + 128 - 2
    fast = d.cost(op)
    slow = NeuPIMs(npu_weight_double_buffering=False).cost(op)
    assert fast.compute_s < slow.compute_s and fast.latency_s <= slow.latency_s
    assert slow.latency_s == pytest.approx(NPU("neupims-npu").cost(op).latency_s)
    # the logic the energy tables leave out draws its power for the op's time, not the
    # serial folds' (a 7-row array's decode step drew 54 W against its 49 W TDP before)
    active_w = d.npu._active_w["array"]
    assert (slow.energy_j["compute"] - fast.energy_j["compute"]
            == pytest.approx(active_w * (slow.latency_s - fast.latency_s)))
    small = NeuPIMs("npu+pim", rows=7, attention_on="npu")
    r = simulate(balanced, small)
    assert r.avg_power_w <= small.physical().tdp_w


def test_over_capacity_is_infeasible_with_a_reason(balanced):
    with pytest.raises(InfeasibleDesign, match="GiB"):
        simulate(balanced, NeuPIMs(channels=2, channel_capacity_gib=1 / 64, macs_per_bank=1,
                                   dtype="int8"))


def test_parameters_are_checked():
    with pytest.raises(BadInput):
        NeuPIMs(row_buffers=3)
    with pytest.raises(BadInput):
        NeuPIMs(load_balancing="random")
    with pytest.raises(BadInput, match="ranks"):
        NeuPIMs(ranks=3)
    d = NeuPIMs()
    assert d.pin_Bps == pytest.approx(32 * 32e9)                  # 32 HBM2 channels
    assert d.npu.hw.dram_bandwidth_Bps == pytest.approx(d.pin_Bps)
    assert d.bandwidth_Bps == pytest.approx(d.pin_Bps * 0.886)     # HBM's sustained share
    assert d.area_mm2() > d.npu.area_mm2() and d.static_power_w() > 0


# ----------------------------------------------------------------------------- reproduction
def test_reproduction_json_schema(monkeypatch, capsys):
    from dse import cli
    from dse.reproduce import neupims
    small = lambda model, batch, tp, pp, seed=0, dataset="sharegpt": step(
        [(200 if dataset == "sharegpt" else 40) + i for i in range(batch)], 512, 1)
    monkeypatch.setattr(neupims, "workload", small)
    monkeypatch.setattr(neupims, "MODELS", (("gpt3-7b", 4, 1),))
    monkeypatch.setattr(neupims, "BATCHES", (16, 32))
    monkeypatch.setattr(neupims, "UTILISATION_AT", ("gpt3-7b", "sharegpt", 32))
    cli.main(["reproduce", "neupims", "--json"])
    data = json.loads(capsys.readouterr().out)
    rows = data["rows"]
    assert len(rows) == 3 + 2 + 2 + 4 + 1 + 2 + 4
    assert all(set(r) >= {"metric", "paper", "ours", "ratio", "source"} for r in rows)
    assert data["summary"] == {"predictions": len(rows), "fitted": 0,
                               "within": sum(r["within_35pct"] for r in rows)}
    for r in rows:
        if isinstance(r["paper"], list):
            assert r["within_35pct"] == (r["paper"][0] <= r["ours"] <= r["paper"][1])
        else:
            assert r["ratio"] == pytest.approx(r["ours"] / r["paper"])


def test_spearman():
    from dse.reproduce.neupims import spearman
    assert spearman([1, 2, 3, 4], [0.7, 0.8, 1.0, 1.5]) == 1.0
    assert spearman([1, 2, 3, 4], [0.8, 0.7, 1.0, 1.5]) == pytest.approx(0.8)


#: Rows of `dse reproduce neupims` known to fall outside the paper's figure (see
#: docs/validation.md, "dse reproduce neupims", for why).
NEUPIMS_KNOWN_MISSES = {
    "NeuPIMs throughput over GPU-only (A100 40GB), mean over the grid",
    "NeuPIMs throughput over NPU-only, mean over the grid",
    # the calibrated A100 (Vidur's measured GEMMs) is faster than the paper's GPU-only
    # baseline; docs/validation.md, "Why the misses"
    "GPU-only throughput over NPU-only, mean over the grid",
    "gpt3-30b sharegpt: NeuPIMs over naive NPU+PIM (largest batch)",
    "gpt3-30b alpaca: NeuPIMs over naive NPU+PIM (largest batch)",
    "gpt3-7b sharegpt: dual row buffers alone over naive NPU+PIM, mean over batches",
    "gpt3-30b sharegpt batch 256: NPU compute utilisation of NeuPIMs (%)",
}


@pytest.mark.slow
def test_neupims_reproduction_tolerance():
    from dse.reproduce import neupims
    rows = neupims.rows()
    assert len(rows) == 22 and all(isinstance(r, Row) for r in rows)
    for r in rows:
        assert r.within() != (r.metric in NEUPIMS_KNOWN_MISSES), (r.metric, r.ours, r.ratio)
    by = {r.metric: r for r in rows}
    # orderings the paper reports: NeuPIMs beats naive NPU+PIM at every model's largest batch
    assert all(r.ours > 1 for m, r in by.items() if "(largest batch)" in m)
    assert by["gpt3-7b sharegpt: dual row buffers alone over naive NPU+PIM, mean over "
              "batches"].ours > 1.0
