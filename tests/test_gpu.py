"""The ``gpu`` template: roofline bounds, datasheet peaks, memory-bound GEMV, wave quantisation,
parameter validation, capacity, energy and speed."""

from __future__ import annotations

import math
import random

import networkx as nx
import pytest

from accelerators import gpu as gpu_mod, technology as tech
from accelerators.gpu import GPU, PRESETS, load_calibration, shipped_calibrations
from accelerators.npu import NPU
from accelerators.gpu_efficiency import GEMM_TILES, KernelModel, alignment_bytes, gemm_waves
from accelerators.registry import get_template, make_accelerator
from dse.errors import BadInput, InfeasibleDesign
from simulators.engine import simulate
from workloads import ir
from workloads.ir import Op, Workload

DATASHEET = ("a100", "h100", "h200")


def matmul(m, n, k, batch=1, dtype="bf16", name="mm"):
    b = ir.DTYPE_BYTES[dtype]
    return Op(name=name, kind=ir.MATMUL, target="linear",
              input_shapes=((batch, m, k), (k, n)), output_shapes=((batch, m, n),),
              dtype=dtype, bytes_per_element=b, flops=2 * batch * m * n * k,
              weight_bytes=b * k * n * (1 if batch == 1 else batch),
              activation_bytes_read=b * batch * m * k, activation_bytes_written=b * batch * m * n,
              attrs={"m": m, "n": n, "k": k, "batch": batch, "weight_operand": True})


def attention(b, h, hkv, sq, skv, d, causal, dtype="bf16", decode=False):
    e = ir.DTYPE_BYTES[dtype]
    flops = 4 * b * h * sq * skv * d
    causal_flops = flops * (sq + 1) // (2 * sq) if causal else flops
    kv = e * b * hkv * skv * d * 2
    return Op(name="attn", kind=ir.ATTENTION, target="scaled_dot_product_attention",
              input_shapes=((b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)),
              output_shapes=((b, h, sq, d),), dtype=dtype, bytes_per_element=e, flops=flops,
              activation_bytes_read=e * b * h * sq * d + (0 if decode else kv),
              kv_bytes_read=kv if decode else 0, activation_bytes_written=e * b * h * sq * d,
              attrs={"batch": b, "heads": h, "kv_heads": hkv, "q_len": sq, "kv_len": skv,
                     "head_dim": d, "value_dim": d, "causal": causal,
                     "causal_flops": causal_flops})


def vector(kind, target, shape, reads=1, dtype="bf16"):
    e = ir.DTYPE_BYTES[dtype]
    n = math.prod(shape)
    return Op(name=target, kind=kind, target=target, input_shapes=(shape,) * reads,
              output_shapes=(shape,), dtype=dtype, bytes_per_element=e, flops=n,
              activation_bytes_read=e * n * reads, activation_bytes_written=e * n,
              attrs={"elements": n})


def conv(n, c, h, k, r, stride, pad):
    p = (h + 2 * pad - r) // stride + 1
    e = 2
    return Op(name="conv", kind=ir.CONV, target="conv2d",
              input_shapes=((n, c, h, h), (k, c, r, r)), output_shapes=((n, k, p, p),),
              dtype="bf16", bytes_per_element=e, flops=2 * n * k * p * p * c * r * r,
              weight_bytes=e * k * c * r * r, activation_bytes_read=e * n * c * h * h,
              activation_bytes_written=e * n * k * p * p,
              attrs={"n": n, "c": c, "h": h, "w": h, "k": k, "r": r, "s": r, "p": p, "q": p,
                     "stride": [stride, stride], "padding": [pad, pad], "groups": 1,
                     "gemm_m": n * p * p, "gemm_n": k, "gemm_k": c * r * r})


def sample_ops(seed=0, count=120):
    rng = random.Random(seed)
    ops = [matmul(1, 4096, 4096), matmul(16384, 16384, 16384), matmul(1, 50257, 768),
           matmul(4095, 4095, 4095), matmul(7, 11008, 4096, batch=3),
           attention(1, 32, 32, 2048, 2048, 128, True), attention(8, 32, 8, 1, 4096, 128, False,
                                                                    decode=True),
           attention(4, 12, 12, 197, 197, 64, False), conv(32, 256, 56, 64, 1, 1, 0),
           conv(1, 3, 224, 64, 7, 2, 3), conv(8, 512, 14, 512, 3, 2, 1),
           vector(ir.NORM, "layer_norm", (512, 768)), vector(ir.SOFTMAX, "softmax", (64, 4096)),
           vector(ir.ELEMENTWISE, "add", (1 << 24,), reads=2),
           vector(ir.EMBEDDING, "embedding", (2048, 4096)),
           vector(ir.DATA_MOVEMENT, "cat", (8, 32, 1, 128)), vector(ir.UNKNOWN, "weird", (10,))]
    for _ in range(count):
        m, n, k = (int(2 ** rng.uniform(0, 14)) for _ in range(3))
        ops.append(matmul(m, n, k, batch=rng.choice((1, 1, 4)),
                          dtype=rng.choice(("bf16", "fp16", "fp32", "fp8", "int8"))))
    return ops


@pytest.fixture(scope="module")
def presets():
    return {p: make_accelerator(f"gpu:{p}") for p in PRESETS}


def test_registered_and_describes():
    assert get_template("gpu") is GPU
    g = make_accelerator("gpu")
    assert g.preset == "h200" and g.hw.calibration == "h200"
    d = g.describe()
    assert d["calibration_device"] == "NVIDIA H200" and "tensor_efficiency" in d["efficiency"]
    assert "h200" in shipped_calibrations()


@pytest.mark.parametrize("preset", list(PRESETS))
def test_no_op_faster_than_its_roofline(presets, preset):
    g = presets[preset]
    for op in sample_ops():
        c = g.cost(op)  # each op in its own dtype, at its datapath's peak
        flops = op.attrs.get("causal_flops", op.flops) if op.kind == ir.ATTENTION else op.flops
        if op.kind not in (ir.MATMUL, ir.CONV, ir.ATTENTION):
            flops = 0  # vector FLOPs run on CUDA cores, not the tensor peak
        bound = max(flops / g.model.peak(op.dtype), op.total_bytes / g.hw.memory_bandwidth_Bps)
        assert c.latency_s >= bound * (1 - 1e-9), (preset, op.name, op.attrs)
        assert c.latency_s > 0 and 0 <= c.compute_s <= c.latency_s
        assert c.unit == "sm" and c.traffic["hbm"] == pytest.approx(op.total_bytes)


@pytest.mark.parametrize("preset", DATASHEET)
def test_large_gemm_reproduces_the_datasheet_peak_within_the_modelled_efficiency(presets,
                                                                                  preset):
    g = presets[preset]
    op = matmul(16384, 16384, 16384)
    achieved = op.flops / g.cost(op).latency_s
    sustained = g.hw.peak_bf16_flops * g.knobs["tensor_efficiency"]
    assert achieved <= g.hw.peak_bf16_flops
    # a large aligned GEMM runs at the dtype efficiency, less only wave/tile/L2 quantisation
    assert 0.85 * sustained <= achieved <= 1.0001 * sustained, (achieved, sustained)


def test_calibrated_h200_matches_its_measured_large_gemm(presets):
    """The 8192^3 bf16 GEMM ran at 686.7 TFLOP/s on the H200 (tests/data raw file)."""
    op = matmul(8192, 8192, 8192)
    achieved = op.flops / presets["h200"].cost(op).latency_s
    assert achieved == pytest.approx(686.7e12, rel=0.10)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_gemv_is_memory_bound(presets, preset):
    g = presets[preset]
    small, big = matmul(1, 8192, 8192), matmul(1, 16384, 8192)
    cs, cb = g.cost(small), g.cost(big)
    assert cs.bound == "memory" and cb.bound == "memory"
    floor = g.knobs["gemm_launch_s"]
    ratio = (cb.latency_s - floor) / (cs.latency_s - floor)
    assert ratio == pytest.approx(2.0, rel=0.1)  # time follows the bytes
    achieved_bw = small.total_bytes / cs.latency_s
    assert achieved_bw <= g.hw.memory_bandwidth_Bps


def test_decode_attention_is_memory_bound_and_prefill_compute_bound(presets):
    g = presets["h200"]
    dec = g.cost(attention(32, 32, 32, 1, 8192, 128, False, decode=True))
    pre = g.cost(attention(4, 32, 32, 4096, 4096, 128, False))
    assert dec.bound == "memory" and pre.bound == "compute"
    causal = g.cost(attention(4, 32, 32, 4096, 4096, 128, True))
    assert 0.45 < causal.latency_s / pre.latency_s < 0.75  # causal: about half the work


def test_wave_quantisation():
    assert gemm_waves(256 * 12, 128 * 11, 1, (256, 128), 132) == (132, 1, 1.0)
    tiles, waves, eff = gemm_waves(256 * 7, 128 * 19, 1, (256, 128), 132)
    assert (tiles, waves) == (133, 2) and eff == pytest.approx(133 / 264)
    # with one tile shape (no smaller tile to fall back on), 133 tiles take ~2 waves
    g = make_accelerator("gpu:h100")
    one_tile = KernelModel(g.model.chip, g.knobs, tiles=(GEMM_TILES[0],))
    t132 = one_tile.gemm(256, 128, 8192, 132, "bf16")[1]
    t133 = one_tile.gemm(256, 128, 8192, 133, "bf16")[1]
    assert t133 / t132 == pytest.approx(2.0, rel=0.02)
    # the full model may pick smaller tiles, but never pays less than the 132-tile time
    assert g.model.gemm(256, 128, 8192, 133, "bf16")[0] >= g.model.gemm(256, 128, 8192, 132,
                                                                          "bf16")[0]


def test_unaligned_leading_dimension_is_slower():
    g = make_accelerator("gpu:h200")
    assert alignment_bytes(4096, 2) == 16 and alignment_bytes(4095, 2) == 2
    aligned = g.cost(matmul(4096, 4096, 4096))
    odd = g.cost(matmul(4096, 4096, 4095))
    assert odd.latency_s > 2 * aligned.latency_s


def test_memory_ops_use_calibrated_bandwidth():
    g = make_accelerator("gpu:h200")
    big = vector(ir.ELEMENTWISE, "add", (1 << 28,), reads=2)
    c = g.cost(big)
    measured = 368.17e-6  # add of 2^28 bf16 elements on the H200 (raw file)
    assert c.latency_s == pytest.approx(measured, rel=0.05)
    tiny = g.cost(vector(ir.ELEMENTWISE, "relu", (16,)))
    assert tiny.latency_s == pytest.approx(1.45e-6, rel=0.15)  # the kernel floor


@pytest.mark.parametrize("values", [
    {"sms": 0}, {"tensor_efficiency": 1.5}, {"dtype": "fp64"}, {"calibration": "nope"},
    {"memory_power_fraction": 0.8}, {"memory_bandwidth_Bps": -1}, {"no_such_param": 1},
    {"memory_kind": "sram"},
])
def test_bad_params_raise_badinput(values):
    with pytest.raises(BadInput):
        GPU("h100", **values)


def test_bad_preset_and_calibration_files(tmp_path):
    with pytest.raises(BadInput):
        GPU("no-such-gpu")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput):
        GPU("h100", calibration=str(bad))
    other = tmp_path / "other.json"
    other.write_text('{"template": "npu", "efficiency": {}}')
    with pytest.raises(BadInput):
        load_calibration(str(other))


def test_calibration_precedence(tmp_path):
    cal = load_calibration("h200")
    h200 = GPU("h200")
    assert h200.knobs["tensor_efficiency"] == pytest.approx(cal["efficiency"]["tensor_efficiency"])
    assert h200.knobs["mem_floor_s"] == pytest.approx(cal["efficiency"]["mem_floor_s"])
    # a value set by hand beats the file; the launch floor shifts every fixed kernel time
    tuned = GPU("h200", tensor_efficiency=0.5, launch_overhead_s=3e-6)
    assert tuned.knobs["tensor_efficiency"] == 0.5
    assert tuned.knobs["mem_floor_s"] == pytest.approx(3e-6)
    assert tuned.knobs["gemm_launch_s"] - tuned.knobs["mem_floor_s"] == pytest.approx(
        cal["efficiency"]["gemm_launch_s"] - cal["efficiency"]["mem_floor_s"])
    # no calibration: datasheet and the estimated defaults only
    plain = GPU("h200", calibration="")
    assert plain.knobs["tensor_efficiency"] == plain.hw.tensor_efficiency
    # a file by path works like the shipped name
    path = tmp_path / "mine.json"
    path.write_text((__import__("json").dumps(cal)))
    assert GPU("h100", calibration=str(path)).knobs["tensor_efficiency"] == pytest.approx(
        cal["efficiency"]["tensor_efficiency"])


def _workload(params, kv_bytes, model="fake"):
    g = nx.DiGraph()
    op = attention(1, 32, 32, 1, 4096, 128, False, decode=True)
    op = Op(**{**{f: getattr(op, f) for f in op.__dataclass_fields__}, "kv_bytes_read": kv_bytes})
    g.add_node(op.name, op=op, index=0)
    return Workload(graph=g, model=model, phase="decode", dtype="bf16", params=params)


def test_capacity_check():
    w = _workload(params=7_000_000_000, kv_bytes=8e9)  # 14 GB of weights + 8 GB of KV cache
    reason = make_accelerator("gpu:t4").check(w)
    assert reason and "holds 16.1 GB" in reason and "KV cache 8 GB" in reason   # 15,360 MiB
    assert make_accelerator("gpu:h200").check(w) is None
    huge = _workload(params=74_000_000_000, kv_bytes=4e9)  # 148 GB of weights
    assert "holds 151 GB" in make_accelerator("gpu:h200").check(huge)     # 143,771 MiB
    from dse.errors import InfeasibleDesign
    with pytest.raises(InfeasibleDesign):
        simulate(huge, make_accelerator("gpu:h200"))


def test_energy_is_bottom_up_like_every_template(presets):
    """Issue 27: one energy method. A GPU op's energy is the technology tables' (a tensor-core
    MAC of its dtype and its register-file operands, DRAM bytes at the memory standard's
    energy, L2 bytes at the L2's) plus the uncounted logic's power for the kernel's time; static
    power is leakage plus the memory's background; the TDP is the same model at full rate."""
    for name in DATASHEET:
        g = presets[name]
        node = g.hw.node_nm
        rf_j = tech.sram_energy_j_per_byte(gpu_mod.RF_BANK_BYTES, node)
        assert g.energy_per_flop_j("bf16") == pytest.approx(
            (tech.mac_energy_j("bf16", node) + gpu_mod.RF_BYTES_PER_TENSOR_MAC * rf_j) / 2)
        phys = g.physical()
        gemm = g.cost(matmul(8192, 8192, 8192))
        flops = 2 * 8192 ** 3
        path = g.model.chip.datapath("bf16")
        assert gemm.energy_j["compute"] == pytest.approx(
            flops * g.energy_per_flop_j(path) + phys.active_w * gemm.latency_s)
        assert gemm.energy_j["offchip_memory"] == pytest.approx(
            gemm.traffic["hbm"] * g.memory.energy_j_per_byte)
        copy = g.cost(vector(ir.DATA_MOVEMENT, "copy", (1 << 28,)))
        for c in (gemm, copy):   # a busy chip stays under its modelled TDP
            assert c.total_energy_j / c.latency_s + g.static_power_w() <= phys.tdp_w
        assert set(gemm.energy_j) <= {"compute", "onchip_memory", "offchip_memory"}
        assert g.static_power_w() == pytest.approx(phys.static_w)
        assert phys.static_w == pytest.approx(
            g.floorplan().leakage_w + g.memory.static_w)
        assert g.area_mm2() == g.physical().area_mm2
        assert g.resources().units == {"sm": 1}
    # the same MAC and the same SRAM cost the same on an npu at the node
    h = presets["h200"]
    assert tech.mac_energy_j("bf16", h.hw.node_nm) == NPU(node_nm=4)._mac_j


def test_simulator_reproduces_the_sum_of_op_latencies(presets):
    g = presets["h200"]
    graph = nx.DiGraph()
    ops = [matmul(128, 4096, 4096, name="a"), vector(ir.NORM, "layer_norm", (128, 4096)),
           matmul(128, 11008, 4096, name="c")]
    for i, op in enumerate(ops):
        graph.add_node(op.name, op=op, index=i)
    graph.add_edge("a", "layer_norm", bytes=1)
    graph.add_edge("layer_norm", "c", bytes=1)
    w = Workload(graph=graph, model="chain", phase="forward", dtype="bf16")
    r = simulate(w, g)
    assert r.latency_s == pytest.approx(sum(g.cost(op).latency_s for op in ops), rel=1e-9)


def test_datasheet_h100_is_consistent_with_the_calibrated_h200(presets):
    h100, h200 = presets["h100"], presets["h200"]
    compute = matmul(8192, 8192, 8192)
    memory = matmul(1, 16384, 8192)
    r_compute = h100.cost(compute).latency_s / h200.cost(compute).latency_s
    r_memory = h100.cost(memory).latency_s / h200.cost(memory).latency_s
    assert 0.8 < r_compute < 1.25                     # same SMs and tensor cores
    assert 1.2 < r_memory < 1.9                       # 4.8 / 3.35 = 1.43 more bandwidth


def test_cost_is_deterministic_across_designs():
    """A second design of the same preset costs every op the same (speed: see
    ``benchmarks/cost_speed.py``; no timing in tests)."""
    ops = sample_ops(seed=1, count=1000)
    first = [make_accelerator("gpu:h200").cost(op) for op in ops]
    assert first == [make_accelerator("gpu:h200").cost(op) for op in ops]


def test_context_idle_power_floors_the_static_power_not_the_busy_power():
    """A GPU holding a CUDA context idles in P0 (the T4: 26 W on nvidia-smi, against 13.6 W of
    modelled leakage and GDDR6 background): that is its static power, so an eager run's host
    gaps cost it; a busy kernel's power is unchanged (the measured idle already holds the
    clocked logic's idle share, which the kernel's uncounted-logic term stops paying)."""
    from workloads.build import build_workload
    t4, bare = make_accelerator("gpu:t4"), make_accelerator("gpu:t4", {"context_idle_w": 0.0})
    assert t4.hw.context_idle_w == 26.0 and bare.static_power_w() < 26.0
    assert t4.static_power_w() == 26.0
    extra = 26.0 - bare.static_power_w()
    assert t4._energy["active_w"] == pytest.approx(bare._energy["active_w"] - extra)
    w = build_workload("gpt2", phase="decode", batch=1, context=512, dtype="fp16")
    busy, busy_bare = simulate(w, t4), simulate(w, bare)    # runtime kernels: always busy
    assert busy.energy_j == pytest.approx(busy_bare.energy_j, rel=1e-6)
    eager = {"runtime": "eager", "host_profile": "lent-h100-xeon-generate"}
    r = simulate(w, make_accelerator("gpu:t4", eager))
    r_bare = simulate(w, make_accelerator("gpu:t4", {**eager, "context_idle_w": 0.0}))
    idle_s = r.latency_s - busy.latency_s
    assert idle_s > 0
    assert r.energy_j - r_bare.energy_j == pytest.approx(extra * idle_s, rel=1e-3)
    assert r.energy_j / r.latency_s >= 26.0
    # a floor below the modelled static changes nothing
    low = make_accelerator("gpu:t4", {"context_idle_w": 1.0})
    assert low.static_power_w() == bare.static_power_w()
    assert low._energy["active_w"] == bare._energy["active_w"]
    # an idle board drawing more than its leakage, background and clocked logic is infeasible
    # (the floors benchmark drew 3,726 W on a 472 W design, then 1,332 W on a 1,340 W B200
    # whose busy power then passed its TDP)
    with pytest.raises(InfeasibleDesign, match="context_idle_w"):
        simulate(w, make_accelerator("gpu:t4", {"context_idle_w": 60.0}))
