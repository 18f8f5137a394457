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
    assert gemm.bound == "compute"
    assert gemm.compute_s == pytest.approx(2 * 4096 ** 3 / (c.peak_flops() * 0.8))
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
