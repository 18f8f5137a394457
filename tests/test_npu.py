"""The ``npu`` systolic-array template: SCALE-Sim 3.0.0 agreement, memory model, errors, area."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from accelerators import systolic
from accelerators.base import ENERGY_COMPONENTS
from accelerators.npu import NPU
from accelerators.registry import make_accelerator
from benchmarks.scalesim_reference import all_layers, layer_op, reference_design
from dse.errors import BadInput, InfeasibleDesign
from workloads.ir import Op

REFERENCE = Path(__file__).parent / "data" / "scalesim_reference.json"


def matmul(m, n, k, batch=1, weight_operand=True, b=2, dtype="bf16", name="mm"):
    return Op(name, "matmul", "aten.mm", ((batch, m, k), (k, n)), ((batch, m, n),), dtype, b,
              flops=2 * batch * m * n * k, weight_bytes=k * n * b * (1 if weight_operand else batch),
              activation_bytes_read=batch * m * k * b, activation_bytes_written=batch * m * n * b,
              attrs={"m": m, "n": n, "k": k, "batch": batch, "weight_operand": weight_operand})


def attention(batch=1, heads=8, kv_heads=8, q=512, kv=512, d=64, causal=False, b=2):
    flops = 4 * batch * heads * q * kv * d
    visible = sum(min(i + 1, kv) for i in range(q)) if causal else q * kv
    return Op("attn", "attention", "aten.sdpa", (), (), "bf16", b, flops=flops,
              activation_bytes_read=batch * heads * q * d * b,
              kv_bytes_read=2 * batch * kv_heads * kv * d * b,
              activation_bytes_written=batch * heads * q * d * b,
              attrs={"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q,
                     "kv_len": kv, "head_dim": d, "causal": causal,
                     "causal_flops": flops * visible // (q * kv)})


def vector_op(kind, elements=1 << 20, b=2):
    return Op(kind, kind, f"aten.{kind}", ((elements,),), ((elements,),), "bf16", b,
              activation_bytes_read=elements * b, activation_bytes_written=elements * b,
              attrs={"elements": elements})


# ---------------------------------------------------------------------------- SCALE-Sim agreement
@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


def test_reference_covers_resnet18_and_gemms_in_all_dataflows(reference):
    seen = {(r["layer"], r["dataflow"]) for r in reference["records"]}
    names = [layer["name"] for layer in all_layers()]
    assert sum(1 for layer in all_layers() if layer["kind"] == "conv") == 20   # ResNet-18 convs
    missing = [(n, df) for n in names for df in systolic.DATAFLOWS if (n, df) not in seen]
    assert not missing, f"SCALE-Sim reference lacks {missing}"
    assert all(r["scalesim_stall_cycles"] == 0 for r in reference["records"])


@pytest.mark.parametrize("dataflow", systolic.DATAFLOWS)
def test_compute_cycles_match_scalesim_within_2pct(reference, dataflow):
    layers = {layer["name"]: layer for layer in all_layers()}
    design = reference_design(dataflow)
    errors = {}
    for rec in reference["records"]:
        if rec["dataflow"] != dataflow:
            continue
        ours = design.cost(layer_op(layers[rec["layer"]])).compute_cycles
        errors[rec["layer"]] = abs(ours / rec["scalesim_compute_cycles"] - 1)
    worst = max(errors, key=errors.get)
    print(f"\n{dataflow}: {len(errors)} layers, max |error| {errors[worst]:.4%} ({worst}), "
          f"mean {sum(errors.values()) / len(errors):.4%}")
    assert len(errors) == len(layers)
    assert errors[worst] <= 0.02, f"{worst}: {errors[worst]:.2%} off SCALE-Sim"


def test_fold_formula_by_hand():
    # 64x64x64 on 32x32: 4 folds; WS fold = 64 + 2*32 + 32 - 2 = 158 cycles; OS 64 + 62 = 126.
    assert systolic.gemm_compute_cycles("ws", 32, 32, 64, 64, 64) == 4 * 158 - 1
    assert systolic.gemm_compute_cycles("os", 32, 32, 64, 64, 64) == 4 * 126 - 1
    # IS: Sr = K = 300 (10 folds), Sc = M = 100 (4 folds), T = N = 50.
    assert systolic.gemm_compute_cycles("is", 32, 32, 100, 50, 300) == 40 * (50 + 94) - 1
    # arrays share the folds
    assert systolic.gemm_compute_cycles("ws", 32, 32, 64, 64, 64, arrays=4) == 158 - 1


# ---------------------------------------------------------------------------- the memory model
designs = st.builds(
    lambda rows, cols, df, arrays, kb, bw: NPU(rows=rows, cols=cols, dataflow=df, arrays=arrays,
                                               ifmap_sram_kb=kb, filter_sram_kb=kb,
                                               ofmap_sram_kb=kb, dram_bandwidth_Bps=bw),
    st.sampled_from([8, 32, 128]), st.sampled_from([8, 32, 128]),
    st.sampled_from(systolic.DATAFLOWS), st.sampled_from([1, 4]),
    st.sampled_from([64, 1024, 16384]), st.sampled_from([1e10, 1e12]))


@settings(max_examples=60, deadline=None)
@given(designs, st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096),
       st.integers(1, 4))
def test_latency_at_least_compute_and_dram_time(design, m, n, k, batch):
    op = matmul(m, n, k, batch=batch, weight_operand=batch == 1)
    c = design.cost(op)
    dram_s = c.traffic["dram"] / design.memory.sustained_bandwidth_Bps
    assert c.latency_s >= c.compute_s > 0
    assert c.latency_s >= dram_s * (1 - 1e-12)
    assert c.traffic["dram"] >= op.total_bytes * (1 - 1e-12)   # never below compulsory
    if c.bound == "memory":
        assert c.latency_s == pytest.approx(dram_s, rel=1e-9)
    else:
        from accelerators import systolic
        hw = design.hw
        stall = systolic.psum_chunk_stall_cycles(
            hw.dataflow, hw.rows, hw.cols, m, n, k, hw.ofmap_sram_kb * 1024 / 2, 4, batch,
            hw.arrays) / hw.clock_hz
        assert c.latency_s <= c.compute_s + stall + dram_s * (1 + 1e-12)


def test_gemv_is_bandwidth_bound():
    tpu = NPU("tpu-v1-like")
    op = matmul(1, 4096, 4096, b=1, dtype="int8")
    c = tpu.cost(op)
    assert c.bound == "memory"
    assert c.traffic["dram"] >= 4096 * 4096   # every weight crosses DDR3 once
    # DDR3 sustains 80 % of its 34 GB/s (memory_standards.SUSTAINED_FRACTION)
    assert c.latency_s == pytest.approx(c.traffic["dram"] / (0.8 * 34e9), rel=1e-9)
    # halving the bandwidth doubles it
    slow = NPU("tpu-v1-like", dram_bandwidth_Bps=17e9).cost(op)
    assert slow.latency_s == pytest.approx(2 * c.latency_s, rel=1e-9)
    assert slow.compute_s == c.compute_s


def test_large_gemm_is_compute_bound_on_the_default():
    c = NPU().cost(matmul(4096, 4096, 4096))
    assert c.bound == "compute"
    assert c.latency_s == pytest.approx(c.compute_s, rel=0.01)


def test_operands_that_do_not_fit_are_refetched():
    op = matmul(4096, 4096, 4096)   # A and B 32 MiB each
    big = NPU(ifmap_sram_kb=131072, filter_sram_kb=131072, ofmap_sram_kb=4096).cost(op)
    small = NPU(ifmap_sram_kb=256, filter_sram_kb=256, ofmap_sram_kb=256).cost(op)
    assert big.traffic["dram"] == pytest.approx(op.total_bytes)   # all of A and B fit: once
    assert small.traffic["dram"] > 4 * op.total_bytes             # re-read per tile block
    assert small.compute_s == big.compute_s                        # compute is not affected


def test_batched_matmul_without_shared_weights_costs_batch_gemms():
    design = NPU(arrays=1)
    one = design.cost(matmul(128, 128, 128)).compute_cycles
    eight = design.cost(matmul(128, 128, 128, batch=8, weight_operand=False)).compute_cycles
    assert eight == pytest.approx(8 * (one + 1) - 1)


# ---------------------------------------------------------------------------- other op kinds
def test_attention_runs_on_the_array_and_holds_the_vector_unit():
    design = NPU()
    full, causal = design.cost(attention()), design.cost(attention(causal=True))
    assert full.unit == "array" and full.also_holds == ("vector",)
    assert causal.compute_s < 0.6 * full.compute_s
    assert full.latency_s >= full.compute_s
    gqa = design.cost(attention(kv_heads=1))
    assert gqa.traffic["dram"] < full.traffic["dram"]


def test_vector_ops_passes_and_unknown_ops_never_crash():
    design = NPU(vector_lanes=128)
    ew, norm, sm = (design.cost(vector_op(k)) for k in ("elementwise", "norm", "softmax"))
    assert ew.unit == norm.unit == sm.unit == "vector"
    assert ew.compute_cycles == (1 << 20) / 128
    assert norm.compute_cycles == 3 * ew.compute_cycles
    assert sm.compute_cycles == 4 * ew.compute_cycles
    weird = Op("x", "unknown", "aten.mystery", (), (), "bf16", 2, activation_bytes_read=1000)
    c = design.cost(weird)
    assert c.unit == "vector" and c.latency_s > 0
    assert design.cost(Op("y", "not-a-kind", "?", (), (), "bf16", 2)).latency_s >= 0


@pytest.mark.parametrize("op", [matmul(256, 256, 256), attention(),
                                layer_op(all_layers()[0], 2), vector_op("softmax")],
                         ids=["matmul", "attention", "conv", "softmax"])
def test_energy_positive_by_component(op):
    c = NPU().cost(op)
    for comp in ("compute", "onchip_memory", "offchip_memory"):
        assert c.energy_j[comp] > 0, comp
    assert set(c.energy_j) <= set(ENERGY_COMPONENTS)
    assert c.bytes_by_level["sram"] > 0 and c.bytes_by_level["dram"] == c.traffic["dram"]


def test_int8_is_cheaper_than_bf16():
    op = matmul(1024, 1024, 1024)
    assert (NPU(dtype="int8").cost(op).energy_j["compute"]
            < NPU(dtype="bf16").cost(op).energy_j["compute"])
    assert NPU(dtype="int8").cost(op).traffic["dram"] == pytest.approx(
        NPU(dtype="bf16").cost(op).traffic["dram"] / 2)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("values", [
    {"rows": 0}, {"rows": 2048}, {"cols": 3.5}, {"dataflow": "rs"}, {"dtype": "fp64"},
    {"dram": "sdram"}, {"node_nm": 6}, {"arrays": 0}, {"clock_hz": -1}, {"vector_lanes": "x"},
    {"ifmap_sram_kb": 0}, {"dram_bandwidth_Bps": float("nan")}, {"banks": 4},
])
def test_bad_parameter_values_raise_bad_input(values):
    with pytest.raises(BadInput) as err:
        NPU(**values)
    assert next(iter(values)) in str(err.value)


def test_unknown_preset_is_bad_input():
    with pytest.raises(BadInput, match="preset"):
        NPU("tpu-v9")


def test_tiny_scratchpads_are_infeasible():
    design = NPU(rows=1024, cols=1024, arrays=1, ifmap_sram_kb=2)
    with pytest.raises(InfeasibleDesign, match="ifmap_sram_kb = 2 KiB.*4096 B needed"):
        design.cost(matmul(64, 64, 64))
    with pytest.raises(InfeasibleDesign):
        design.cost(attention())
    assert design.cost(vector_op("elementwise")).latency_s > 0   # the vector unit still works
    with pytest.raises(InfeasibleDesign, match="ofmap"):
        NPU(rows=512, cols=512, arrays=8, ofmap_sram_kb=16).cost(matmul(64, 64, 64))


# ---------------------------------------------------------------------------- area, power, misc
def test_area_and_leakage_grow_with_the_array():
    sizes = [(16, 16), (32, 32), (64, 64), (128, 128), (256, 256), (512, 512)]
    areas = [NPU(rows=r, cols=c).area_mm2() for r, c in sizes]
    assert all(a < b for a, b in zip(areas, areas[1:]))
    assert NPU(arrays=8).area_mm2() > NPU(arrays=1).area_mm2()
    assert NPU(rows=512, cols=512).static_power_w() > NPU(rows=16, cols=16).static_power_w() > 0


def test_resources_and_presets():
    for preset in NPU.PRESETS:
        design = make_accelerator(f"npu:{preset}")
        res = design.resources()
        assert res.units == {"array": 1, "vector": 1}
        # the devices' (a preset that names its devices runs them at their peak, not at
        # dram_bandwidth_Bps), streamed at the standard's sustained share
        assert res.channels == {"dram": design.memory.sustained_bandwidth_Bps}
        assert design.memory.sustained_bandwidth_Bps == pytest.approx(
            design.memory.bandwidth_Bps * design.memory.standard.sustained_fraction)
        assert design.cost(matmul(512, 512, 512)).latency_s > 0
        assert design.area_mm2() > 0
    neupims = NPU("neupims-npu").hw
    assert (neupims.rows, neupims.cols, neupims.arrays, neupims.vector_lanes) == (128, 128, 8, 1024)


def test_cost_is_deterministic():
    """Same op, same design: the same cost (its speed is measured in
    ``benchmarks/cost_speed.py``, never timed in a test)."""
    design = NPU()
    ops = [matmul(64 + i, 256 + 3 * i, 128 + 7 * i, name=f"mm{i}") for i in range(1000)]
    first = [design.cost(op) for op in ops]
    assert first == [NPU().cost(op) for op in ops]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000),
       st.sampled_from([1, 2, 4]), st.integers(10, 26))
def test_tiling_never_worse_with_bigger_scratchpads(m, n, k, b, log2_cap):
    def moved(cap):
        t = systolic.gemm_dram_passes(m, n, k, k * b, k * b, 4, cap, cap, cap, 32, 32, 32)
        assert t is not None and t.a_passes >= 1 and t.b_passes >= 1
        return t.a_passes * m * k + t.b_passes * k * n
    cap = 2.0 ** log2_cap
    assert moved(2 * cap) <= moved(cap)
    if m * k * b <= cap and k * n * b <= cap:   # both operands fit: each read once
        assert moved(cap) == m * k + k * n


def test_partial_sums_over_the_output_scratchpad_stall_ws_but_not_os():
    """WS streams M through each fold: M x cols x 4 B of partial sums must fit half the ofmap
    scratchpad, or M is chunked and each chunk re-pays the fold's fill and drain."""
    from accelerators.npu import NPU
    from workloads.ir import Op
    op = Op(name="g", kind="matmul", target="mm", input_shapes=((4096, 256), (256, 256)),
            output_shapes=((4096, 256),), dtype="int8", bytes_per_element=1,
            flops=2 * 4096 * 256 * 256, weight_bytes=256 * 256, activation_bytes_read=4096 * 256,
            activation_bytes_written=4096 * 256, attrs={"m": 4096, "n": 256, "k": 256, "batch": 1})
    roomy = dict(rows=32, cols=32, arrays=1, dtype="int8", ifmap_sram_kb=4096, filter_sram_kb=4096,
                 dram_bandwidth_Bps=1e13)
    big = NPU(dataflow="ws", ofmap_sram_kb=4096, **roomy).cost(op)
    small = NPU(dataflow="ws", ofmap_sram_kb=64, **roomy).cost(op)
    assert small.compute_cycles == big.compute_cycles          # SCALE-Sim's convention
    # 4096 x 32 x 4 B = 512 KiB of psums; 32 KiB half-scratchpad holds 256 rows -> 16 chunks
    folds = (256 // 32) * (256 // 32)
    assert small.cycles - big.cycles == pytest.approx(folds * 15 * (2 * 32 + 32 - 2), rel=1e-6)
    os_small = NPU(dataflow="os", ofmap_sram_kb=64, **roomy).cost(op)
    os_big = NPU(dataflow="os", ofmap_sram_kb=4096, **roomy).cost(op)
    assert os_small.cycles == pytest.approx(os_big.cycles)
