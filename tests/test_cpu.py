"""The ``cpu`` template: rates, the per-op roofline, the floorplan and bad input."""

import pytest

from accelerators.cpu import CPU
from accelerators.registry import make_accelerator
from dse.errors import BadInput
from simulators.engine import simulate
from workloads import ir
from workloads.build import build_workload
from workloads.ir import Op


def op(kind=ir.MATMUL, flops=0, weight=0, act=0, dtype="fp32"):
    return Op(name="x", kind=kind, target="t", input_shapes=((1024,),),
              output_shapes=((1024,),), dtype=dtype, bytes_per_element=ir.DTYPE_BYTES[dtype],
              flops=flops, weight_bytes=weight, activation_bytes_read=act,
              activation_bytes_written=act, attrs={"elements": 1024})


def test_xeon_gold_6154_datasheet_rates():
    c = make_accelerator("cpu:xeon-gold-6154")
    # 18 cores x 16 fp32 lanes x 2 FLOP x 2 FMA units x 2.7 GHz
    assert c.peak_flops("fp32") == pytest.approx(18 * 16 * 2 * 2 * 2.7e9)
    assert c.peak_flops("bf16") == c.peak_flops("fp32")          # no bf16 FMA on Skylake-SP
    assert c.memory.bandwidth_Bps == pytest.approx(6 * 8 * 2.666e9)   # six DDR4-2666 channels
    assert CPU("xeon-8480").peak_flops("bf16") == 2 * CPU("xeon-8480").peak_flops("fp32")


def test_roofline_per_op():
    c = CPU()
    gemv = c.cost(op(flops=2 * 4096 * 4096, weight=4 * 4096 * 4096))    # weights stream
    assert gemv.bound == "memory"
    assert gemv.latency_s == pytest.approx(c.hw.op_overhead_s + 4 * 4096 ** 2 / c.dram_Bps)
    gemm = c.cost(op(flops=2 * 4096 ** 3, weight=4 * 4096 ** 2))
    # at the sustained GEMM rate the FLOPs alone burn the dynamic budget, so the weights'
    # stream tips it into the power limit by under 1 %
    assert gemm.bound == "power"
    assert gemm.compute_s == pytest.approx(2 * 4096 ** 3 / (c.peak_flops() * 0.8))
    assert gemm.compute_s < gemm.latency_s - c.hw.op_overhead_s < 1.01 * gemm.compute_s
    small = c.cost(op(ir.ELEMENTWISE, act=4096))                  # in cache: no DRAM bytes
    assert small.traffic == {} and small.latency_s >= c.hw.op_overhead_s
    big = c.cost(op(ir.ELEMENTWISE, act=64 * 2**20))               # spills the L3
    assert big.traffic["dram"] == 2 * 64 * 2**20
    assert all(v >= 0 for v in gemm.energy_j.values()) and gemm.total_energy_j > 0


def test_decode_step_is_weight_bound_and_physical():
    w = build_workload("gpt2", phase="decode", batch=1, context=128, dtype="fp32")
    c = CPU()
    r = simulate(w, c)
    floor = w.params * 4 / c.memory.bandwidth_Bps           # every weight once at peak DRAM
    assert r.latency_s > floor
    assert r.avg_power_w <= c.hw.tdp_w
    p = c.physical()
    assert p.problem is None and 300 < p.area_mm2 < 900 and p.cost_usd > 0
    assert c.static_power_w() == c.hw.idle_power_w


def test_bad_input_names_the_field():
    with pytest.raises(BadInput, match="hw.dram_data_rate_gbps"):
        CPU(dram_data_rate_gbps=4.0)                           # DDR4 tops out at 3.2 Gb/s
    with pytest.raises(BadInput, match="hw.cores_on_die"):
        CPU(cores=20, cores_on_die=10)
    with pytest.raises(BadInput, match="hw.simd_bits"):
        CPU(simd_bits=1024)


def test_the_tdp_limits_power_on_every_datapath():
    """A bf16 GEMM at the 8480's doubled bf16 rate costs half an fp32 FLOP's energy (the
    package at TDP either way); an op whose energy its roofline time cannot pay runs
    power-limited; every run stays within the TDP."""
    c = CPU("xeon-8480")
    for dtype in ("fp32", "bf16"):
        r = simulate(build_workload("gpt2", phase="prefill", batch=2, seq=256, dtype=dtype), c)
        assert r.avg_power_w <= c.hw.tdp_w * (1 + 1e-9)
    f32, b16 = (c.cost(op(flops=2 * 4096 ** 3, dtype=d)) for d in ("fp32", "bf16"))
    assert b16.energy_j["compute"] == pytest.approx(f32.energy_j["compute"] / 2)
    dyn = c.hw.tdp_w - c.hw.idle_power_w
    both = c.cost(op(flops=2 * 4096 ** 3, weight=2 * 4096 ** 3 // 64))  # compute ~ stream
    assert both.bound == "power"
    assert both.latency_s - c.hw.op_overhead_s == pytest.approx(both.total_energy_j / dyn)


def test_power_and_dot_products_are_not_free():
    """The TDP must pay for the FLOPs at the most efficient datasheet's energy per FLOP; idle
    power covers the silicon's leakage; dot-product units take area; DRAM streams at most at
    the standard's sustained share."""
    with pytest.raises(BadInput, match="hw.tdp_w"):
        CPU(tdp_w=60.0)                                   # 18 cores at 2.7 GHz for 20 W
    with pytest.raises(BadInput, match="hw.tdp_w"):
        CPU(clock_hz=4.0e9)                               # more FLOPs under the same 200 W
    with pytest.raises(BadInput, match="hw.idle_power_w"):
        CPU(idle_power_w=0.0)
    assert CPU(bf16_dot=True).physical().area_mm2 > CPU().physical().area_mm2
    assert CPU(int8_dot=True).physical().area_mm2 > CPU().physical().area_mm2
    fast = CPU(stream_efficiency=1.0)
    assert fast.dram_Bps == pytest.approx(fast.memory.sustained_bandwidth_Bps)
