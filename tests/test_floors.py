"""Floors on every path (simulators/floors.py): no result may beat a first-principles bound.

A fixed-seed sample of random (design, workload) pairs per template and path
(``benchmarks/floors.py`` runs 10,000 per template and path), and regression tests for the
paths that were found below a floor.
"""

import math
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import floors as bench  # noqa: E402  (benchmarks/floors.py)
from dse import api  # noqa: E402
from dse.errors import DSEError  # noqa: E402
from simulators import floors as fl  # noqa: E402
from simulators.engine import simulate  # noqa: E402
from simulators.fast import evaluate_many  # noqa: E402

#: Pairs per (template, path) in the default run (the whole file stays under ~40 s).
PAIRS = {"event": 2, "fast": 2, "population": 1, "pairs": 1, "generation": 1, "serving": 1,
         "system": 1, "training": 1}


def _workload(model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return api.workload(model, **kw)


#: Violations of the physical model left open, as (template, quantity): none since issue 27's
#: part B (the pim's in-bank logic in its TDP, the wafer's usable rectangle, one bottom-up
#: energy method for the gpu). A pair out of this set fails its test.
KNOWN: set[tuple[str, str]] = set()
#: Per (template, path): pairs whose result was checked, and violations (KNOWN ones too).
CHECKED: dict[tuple[str, str], bench.Tally] = {}


def _sample(template: str, path: str) -> bench.Tally:
    """A hypothesis-driven sample of ``PAIRS[path]`` random (design, workload) pairs of the
    quick pool (derandomized: the same pairs every run); the pairs are drawn by
    ``benchmarks/floors.py``'s own generators from hypothesis' random source, so a failing
    pair shrinks. Asserts no violation outside KNOWN."""
    if (template, path) in CHECKED:
        return CHECKED[(template, path)]
    total = bench.Tally()
    bench._POOL[0] = bench.QUICK

    @settings(max_examples=PAIRS[path], derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(rng=st.randoms(use_true_random=False))
    def one(rng):
        t = bench.Tally()
        try:
            bench.RUNNERS[path](template, rng, t)
        except DSEError:
            t.refused += 1
        total.checked += t.checked
        total.violations += t.violations
        bad = [v for v in t.violations if (template, v.quantity) not in KNOWN]
        assert not bad, "\n".join(map(str, bad[:5]))
    one()
    CHECKED[(template, path)] = total
    return total


@pytest.mark.parametrize("path", bench.PATHS)
@pytest.mark.parametrize("template", bench.TEMPLATES)
def test_no_path_beats_a_floor(template, path):
    if template not in bench.ONLY.get(path, {template}):
        pytest.skip(f"{path}: {template} designs take another path")
    _sample(template, path)


def test_sample_is_not_empty():
    """The sample checks results on every path (a run that refuses every pair checks
    nothing)."""
    checked = {p: sum(_sample(t, p).checked for t in bench.TEMPLATES
                      if t in bench.ONLY.get(p, {t})) for p in bench.PATHS}
    assert all(n > 0 for n in checked.values()), checked


def test_fast_path_counts_shared_units():
    """Regression: ops on parallel branches (Q, K, V projections; gate and up) run one at a
    time on the NPU's array, but the fast path took the critical path and reported less
    than the array's busy time (gpt2 decode: 0.943 ms against a 1.026 ms floor)."""
    w = _workload("gpt2", phase="decode", batch=4, context=256)
    d = api.accelerator("npu")
    for vectorised in (True, False):
        fast = evaluate_many(w, [d] * 70, vectorised=vectorised)   # 70: the numpy cost_many
        f = fl.floors(w, d)
        assert fast.latency_s[0] >= f.latency_s["busy@array"] * (1 - 1e-12)
        assert not fl.check_fast(fast, w, [d])
    event = simulate(w, d)
    assert fast.latency_s[0] <= event.latency_s * (1 + 1e-12)
    assert fast.latency_s[0] >= 0.99 * event.latency_s


def test_moe_iteration_routes_its_tokens():
    """Regression: a serving iteration of T tokens scaled a moe op's FLOPs but kept its
    one-token routing (2 experts' weights, one token's GEMMs), so generation and serving of
    MoE models beat the FLOP floor by 42 %. Now it equals the captured step of batch T."""
    from workloads.iteration import scale_tokens
    from workloads.composite import parts
    base = _workload("mixtral-8x7b", phase="decode", batch=1, context=1, arch={"n_layer": 1})
    cap = _workload("mixtral-8x7b", phase="decode", batch=64, context=1, arch={"n_layer": 1})
    moe = [op for op in scale_tokens(base, 64).ops if op.kind == "moe"][0]
    ref = [op for op in cap.ops if op.kind == "moe"][0]
    assert moe.flops == ref.flops and moe.weight_bytes == ref.weight_bytes
    assert moe.attrs["experts_touched"] == pytest.approx(ref.attrs["experts_touched"])
    assert sum(n * p.flops for n, p in parts(moe)) == pytest.approx(moe.flops, rel=1e-3)


@pytest.mark.parametrize("dtype", ["fp32", "fp8"])
def test_a_gpus_hungriest_datapath_stays_within_its_tdp(dtype):
    """The L40S's fp32 CUDA cores (peak x fp32 FMA energy, ~3x its fp16 tensor MACs') on GNA's
    sparse attention drew 375 W against a TDP of 358 W that counted the fp16 tensor MACs
    only; a design declaring an fp8 peak far beyond its SMs drew past its TDP too
    (benchmarks/floors.py, population path, issue 27). The TDP takes the hungriest
    datapath at its peak, and an impossible peak overheats the die (infeasible)."""
    from accelerators.gpu import GPU
    w = _workload("gna", dtype=dtype)
    d = GPU("l40s")
    r = evaluate_many(w, [d])
    assert r.infeasible[0] is None
    assert r.energy_j[0] / r.latency_s[0] <= d.physical().tdp_w
    assert d.datapath_power_w() < d.physical().tdp_w
    fast = GPU("l4", peak_fp8_flops=5.85e15)   # 24x what its 58 SMs do
    assert "W/mm²" in evaluate_many(w, [fast]).infeasible[0]


def test_a_moe_step_in_number_formats_keeps_its_bytes_per_weight():
    """An iteration re-routes a moe op's tokens (workloads.moe.with_tokens) and re-counted its
    weight bytes at the base dtype's 2 bytes, not the fp8 format's 1: Mixtral's batch-4
    step read 2x the weights it has, and the fast path (right) was 35 % below that floor
    (benchmarks/floors.py, generation path, issue 27)."""
    from accelerators.npu import NPU
    from workloads.iteration import iteration_workload
    base = _workload("mixtral-8x7b", phase="decode", batch=1, context=1, dtype="bf16",
                     arch={"n_layer": 1}, formats="weights=fp8_e4m3,activations=fp8_e4m3")
    w = iteration_workload(base, [65] * 4)
    moe = next(op for op in w.ops if op.kind == "moe")
    a = moe.attrs
    assert moe.weight_bytes == pytest.approx(a["experts_touched"] * a["params_per_expert"],
                                             rel=1e-6)   # fp8: one byte per weight
    d = NPU("tpu-v4i")
    r = evaluate_many(w, [d])
    assert not fl.floors(w, d).check("fast", float(r.latency_s[0]), float(r.energy_j[0]))


def test_bytes_in_number_formats_are_not_rescaled_by_the_floor():
    """An op in number formats moves its own bytes (every template costs it so); the floors
    rescaled them to the design's dtype too (bf16 pim on an fp8 workload: mxfp4 weights
    counted at 2x), and flagged a right fast path 31 % below a wrong energy floor
    (benchmarks/floors.py, serving path, issue 27)."""
    from accelerators.registry import get_template
    w = _workload("llama3-8b", phase="decode", batch=1, context=64, dtype="fp8",
                  arch={"n_layer": 1}, formats="weights=mxfp4,kv=fp8_e4m3")
    d = get_template("pim")()
    assert d.hw.dtype == "bf16" and fl.element_scale(w, d) == 2
    f = fl.floors(w, d)
    level = d.peaks(w.dtype).resident
    read = sum(op.weight_bytes + op.kv_bytes_read for op in w.ops)
    assert f.latency_s[f"bytes@{level.name}"] <= read / level.bandwidth_Bps * (1 + 1e-12)
    r = evaluate_many(w, [d])
    assert not f.check("fast", float(r.latency_s[0]), float(r.energy_j[0]))


def test_floors_catch_a_result_below_them():
    """The check is not vacuous: a result at 90 % of the largest floor is reported, with
    the floor's name; an energy below the energy floor and a power above the TDP too."""
    w = _workload("gpt2", phase="decode", batch=4, context=256)
    d = api.accelerator("npu")
    f = fl.floors(w, d)
    name = max(f.latency_s, key=f.latency_s.get)
    lat = f.latency_floor_s * 0.9
    v = f.check("test", lat, f.energy_floor_j(lat) * 2)
    assert [x.name for x in v if x.quantity == "latency_s"] == [name]
    assert v[0].margin == pytest.approx(-0.1)
    v = f.check("test", f.latency_floor_s, 0.5 * f.energy_floor_j(f.latency_floor_s))
    assert [x.quantity for x in v] == ["energy_j"]
    v = f.check("test", f.latency_floor_s, 2 * f.tdp_w * f.latency_floor_s)
    assert [x.quantity for x in v] == ["avg_power_w"]


def test_work_floors_from_first_principles():
    """The FLOP and byte floors are the workload's work over the design's peaks, by hand."""
    w = _workload("gpt2", phase="decode", batch=1, context=128)
    d = api.accelerator("npu")
    hw = d.hw
    peak = 2 * hw.rows * hw.cols * hw.arrays * hw.clock_hz + 2 * hw.vector_lanes * hw.clock_hz
    flops = sum(fl.real_flops(op) for op in w.ops)
    f = fl.work_floors(w, d)
    assert f.latency_s["flops"] == pytest.approx(flops / peak)
    onchip = (hw.ifmap_sram_kb + hw.filter_sram_kb + hw.ofmap_sram_kb) * 1024
    read = sum(op.weight_bytes + op.kv_bytes_read for op in w.ops)
    assert f.latency_s["bytes@dram"] == pytest.approx(
        max(read - onchip, 0) / d.memory.bandwidth_Bps)


def test_design_checks():
    """Area is the sum of its parts and within the reticle; the cost at least the silicon
    at perfect yield; a wafer beyond the largest rectangle a wafer holds is reported."""
    d = api.accelerator("gpu:h100")
    assert not fl.design_violations(d)
    assert fl.WAFER_RECTANGLE_MM2 == pytest.approx(45_000)
    wafer = api.accelerator("wafer", {"mesh_width": 1000, "mesh_height": 1000,
                                      "prefill_region_width": 100,
                                      "prefill_region_height": 100,
                                      "decode_region_width": 100, "decode_region_height": 100})
    if wafer.physical().problem is None:   # still built: the floors say why it cannot be
        v = fl.design_violations(wafer)
        assert any(x.name == "wafer rectangle" for x in v)


def test_collective_bytes_floor():
    """A device of an all-reduce among p moves at least 2 (p-1)/p of the buffer (sent plus
    received), whatever the algorithm."""
    assert fl.collective_device_bytes("all_reduce", 8.0, 4) == pytest.approx(12.0)
    assert fl.collective_device_bytes("all_gather", 8.0, 4) == pytest.approx(6.0)
    assert fl.collective_device_bytes("send_recv", 8.0, 2) == 8.0
    assert fl.collective_device_bytes("all_reduce", 8.0, 1) == 0.0


def test_margin():
    assert fl.margin(2.0, 1.0) == pytest.approx(1.0)
    assert fl.margin(0.5, 1.0) == pytest.approx(-0.5)
    assert fl.margin(0.5, 1.0, ceiling=True) == pytest.approx(1.0)
    assert fl.margin(0.0, 0.0) == math.inf
    assert not fl.broken(1.0, 1.0 + 1e-12)


def test_busy_fraction_and_compute_utilisation():
    """Issue 27: `utilisation` was busy time (99.9 % shown at 5.6 % of peak FLOP/s). A
    result now has both: the busy fraction per unit, and the FLOPs done per second over the
    design's peak, which the FLOP floor keeps at most 1."""
    w = _workload("gpt2", phase="decode", batch=1, context=128)
    d = api.accelerator("npu")
    r = simulate(w, d)
    peak = sum(d.peaks(w.dtype).flops_per_s.values())
    flops = sum(fl.real_flops(op) for op in w.ops)
    assert r.compute_utilisation == pytest.approx(flops / r.latency_s / peak)
    assert 0 < r.compute_utilisation < 0.05 < r.busy_fraction["array"] <= 1
    d = r.to_dict(ops=False)
    assert "busy_fraction" in d and "compute_utilisation" in d and "utilisation" not in d


def test_a_pim_asic_does_at_most_one_fma_per_lane_and_cycle():
    """Found at 10,000 pairs: the host ASIC counted a hash-grid op's lane operations by its
    output elements, 8x fewer than its FLOPs need; NeRF on pim fell 15 % below flops@asic."""
    from accelerators.registry import make_accelerator
    w = api.workload("nerf")
    d = make_accelerator("pim", {"asic_lanes": 1, "asic_clock_hz": 1e9})
    peak = d.peaks(w.dtype).flops_per_s["asic"]
    for op in w.ops:
        c = d.cost(op)
        if c.unit == "asic":
            assert c.latency_s >= op.flops / peak * (1 - 1e-9), op.name
    r = evaluate_many(w, [d])
    assert not fl.check_fast(r, w, [d], "fast")


def test_a_wafer_region_holds_what_its_phase_stores():
    """Found at 10,000 pairs: with ``placement: region`` a prefill step's weights live on the
    prefill region, but the capacity floor read the (smaller) decode region's; and an
    ``mxfp8_e4m3`` wafer keeps a bf16 workload in one byte an element, as its layout counts."""
    from accelerators.registry import make_accelerator
    w = api.workload("llama3-8b", phase="prefill", batch=2, seq=64, dtype="fp32",
                     arch={"n_layer": 1})
    d = make_accelerator("wafer:wse2", {"placement": "region", "prefill_region_width": 750,
                                        "prefill_region_height": 750,
                                        "decode_region_width": 750,
                                        "decode_region_height": 51})
    assert d.check(w) is None
    assert d.memory_capacity_for(w) > d.memory_capacity_bytes()
    assert not fl.check_fast(evaluate_many(w, [d]), w, [d], "fast")
    mx = make_accelerator("wafer:wse-1k", {"dtype": "mxfp8_e4m3"})
    assert mx.element_bytes(api.workload("bert-base", arch={"n_layer": 1})) == 1


# ----------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def gpt2_train():
    from workloads.train_build import zoo_train_workload
    return zoo_train_workload("gpt2", batch=1, seq=128, dtype="bf16", arch={"n_layer": 2})


@pytest.mark.parametrize("template", bench.TEMPLATES)
def test_a_training_step_respects_its_floors(template, gpt2_train):
    """Found when training joined the floors benchmark: the optimizer's element-wise kernels
    (AdamW: ~10 FLOPs per parameter over ~16 B of states read and written) ran at one
    operation per element on the wafer (22 ns for 750 MFLOP, below its FLOP floor) and on
    the NGPC's vector lanes without touching DRAM (7.7 us for 1.5 GB of states); a PIM's MFU
    peak was an 8192-cubed GEMM's rate, which its GEMVs beat (HFU 1.43). Every template's
    default design now meets every training floor, the optimizer's alone included."""
    from simulators.training import simulate_training
    d = api.accelerator(template)
    lay = {"micro_batch": 1, "global_batch": 2}
    r = simulate_training(gpt2_train, d, lay, precision="mixed")
    vs, m = fl.check_training(r, gpt2_train, d, lay, "mixed")
    assert not vs, "\n".join(map(str, vs))
    assert 0 < r.mfu <= r.hfu <= 1 and m >= 0


def test_training_floors_catch_a_step_below_them(gpt2_train):
    """The training check is not vacuous: the same step with its spans, step time and
    energy cut to a thousandth breaks the blocks', optimizer's, compute stream's and energy
    floors."""
    from dataclasses import replace
    from simulators.training import simulate_training
    d = api.accelerator("gpu:h100")
    lay = {"micro_batch": 1}
    r = simulate_training(gpt2_train, d, lay)
    spans = [(dev, st, n, cat, b, b + (e - b) / 1e3) for dev, st, n, cat, b, e in r.spans]
    cut = replace(r, spans=spans, step_time_s=r.step_time_s / 1e3,
                  energy_per_step_j=r.energy_per_step_j / 1e3)
    names = {v.name for v in fl.check_training(cut, gpt2_train, d, lay)[0]}
    assert {"optimizer", "blocks", "compute stream", "energy"} <= names


def test_element_wise_work_outside_a_frame_reads_and_writes_dram():
    """NGPC streams a frame's points through its NFPs, but an element-wise op of a workload
    run as it is (an optimizer step, a language model) reads its operands from DRAM and
    writes its results back; a frame's own ops are unchanged (dse reproduce ngpc)."""
    from workloads import ir
    from workloads.ir import Op
    d = api.accelerator("neural_graphics")
    n = 50_000_000
    op = Op(name="adam", kind=ir.ELEMENTWISE, target="adamw", input_shapes=((n,),),
            output_shapes=((n,),), dtype="fp16", bytes_per_element=2, flops=10 * n,
            activation_bytes_read=8 * n, activation_bytes_written=6 * n,
            attrs={"elements": n})
    c = d.cost(op)
    assert c.traffic["dram"] == 14 * n
    assert c.latency_s >= 14 * n / d.dram_bandwidth_Bps
    streamed = d.cost(op.with_attrs(ngpc_streamed=True))
    assert "dram" not in streamed.traffic and streamed.latency_s < c.latency_s


def test_a_design_stores_tensors_in_its_datapath_format():
    """A template's element size is its datapath format's whole bytes, as its cost model
    rescales a workload (an mxfp6 NGPC keeps a bf16 tensor in one byte), not the workload's."""
    from accelerators.registry import make_accelerator
    w = _workload("bert-base", arch={"n_layer": 1})
    assert make_accelerator("neural_graphics", {"dtype": "mxfp6_e2m3"}).element_bytes(w) == 1
    assert make_accelerator("npu", {"dtype": "fp32"}).element_bytes(w) == 4


def test_a_gpu_element_wise_op_takes_its_flops_at_the_sms_peak():
    """The gpu costed element-wise ops by their bytes alone: with a drawn fp32 peak of 42.8
    GFLOP/s (a T4 has no bf16 datapath, so its bf16 work runs there) AdamW's update took 17 ms
    against a 36 ms FLOP floor (benchmarks/floors.py --paths training --seed 1). Datasheet
    parts stay bandwidth-bound."""
    from accelerators.registry import make_accelerator
    from workloads import ir
    from workloads.ir import Op
    n = 10_000_000
    op = Op(name="adam", kind=ir.ELEMENTWISE, target="adamw", input_shapes=((n,),),
            output_shapes=((n,),), dtype="bf16", bytes_per_element=2, flops=14 * n,
            activation_bytes_read=8 * n, activation_bytes_written=6 * n, attrs={"elements": n})
    slow = make_accelerator("gpu:t4", {"peak_fp32_flops": 4.28e10})
    c = slow.cost(op)
    assert c.latency_s >= 14 * n / slow.sm_peak("bf16") and c.bound == "compute"
    t4 = make_accelerator("gpu:t4")
    assert t4.cost(op).bound == "memory"


def test_a_cpu_streams_an_optimizers_states_from_dram():
    """The cpu kept an op's activations in the L3 whenever they fit it, so an optimizer pass
    over one block's states moved no DRAM byte in a drawn 0.3-1 GB L3 although the step's
    states do not fit it (7 of 6,830 cpu training steps 19-49 % under the optimizer's floor:
    benchmarks/floors.py --paths training --pairs 10000 --seed 3). They stream like the
    weights now; a forward op's activations that fit the L3 stay there."""
    from accelerators.registry import make_accelerator
    from workloads import ir
    from workloads.ir import Op
    n = 20_000_000
    op = Op(name="adam", kind=ir.ELEMENTWISE, target="adamw", input_shapes=((n,),),
            output_shapes=((n,),), dtype="fp32", bytes_per_element=4, flops=14 * n,
            activation_bytes_read=16 * n, activation_bytes_written=12 * n,
            attrs={"elements": n, "pass": "opt"})
    cpu = make_accelerator("cpu:xeon-8480", {"l3_mb": 1000.0})
    assert cpu.cost(op).traffic["dram"] == 28 * n
    assert "dram" not in cpu.cost(op.with_attrs(**{"pass": "fwd"})).traffic
