"""GPU baselines that hold across GPUs and software stacks (issue 21): the eager / CUDA-graph
runtimes and host profiles, the op's dtype deciding the datapath, calibrations moved between
chips, the presets' datasheet facts, KV-cache update semantics, and the measurement scripts'
CPU dry run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from accelerators.gpu import DEVICE_PRESETS, GPU, PRESETS, calibration_chip, load_calibration
from accelerators.gpu_efficiency import (DEFAULT_KNOBS, KNOB_TRANSFER, Chip, transfer_knobs)
from accelerators.host_profile import load_host_profile, profile_from_dict
from dse import api
from dse.errors import BadInput
from simulators.engine import simulate
from simulators.fast import evaluate_many
from tests.cli_runner import run_cli
from workloads import ir
from workloads.kv_update import with_kv_update

ROOT = Path(__file__).resolve().parent.parent

#: A synthetic host profile (test data, not a measurement).
PROFILE = {"schema": 1, "kind": "host_profile", "name": "synthetic", "measured": False,
           "dispatch_s": {"*default": 8e-6, "linear": 12e-6, "*norm": 10e-6},
           "view_s": 2e-6, "launch_latency_s": 10e-6, "graph_launch_s": 5e-6, "step_s": 40e-6,
           "source": {"where": "a test"}}


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("host") / "host.json"
    path.write_text(json.dumps(PROFILE))
    return str(path)


def _mm(name, m, n, k, dtype="bf16"):
    b = ir.DTYPE_BYTES[dtype]
    return ir.Op(name=name, kind=ir.MATMUL, target="linear", input_shapes=((m, k), (n, k)),
                 output_shapes=((m, n),), dtype=dtype, bytes_per_element=b,
                 flops=2 * m * n * k, weight_bytes=b * n * k, activation_bytes_read=b * m * k,
                 activation_bytes_written=b * m * n,
                 attrs={"m": m, "n": n, "k": k, "batch": 1, "weight_operand": True})


def _norm(name, rows, width):
    n = rows * width
    return ir.Op(name=name, kind=ir.NORM, target="layer_norm", input_shapes=((rows, width),),
                 output_shapes=((rows, width),), dtype="bf16", bytes_per_element=2, flops=5 * n,
                 activation_bytes_read=2 * n, activation_bytes_written=2 * n,
                 attrs={"elements": n})


def _chain(ops, free=()):
    g = nx.DiGraph()
    for i, op in enumerate(ops):
        g.add_node(op.name, op=op, index=i)
    for a, b in zip(ops, ops[1:]):
        g.add_edge(a.name, b.name, bytes=1)
    return ir.Workload(graph=g, model="chain", phase="forward", dtype="bf16", free_ops=free)


def _mixed():
    """Short kernels (host-bound) between long GEMMs (GPU-bound)."""
    ops = []
    for i in range(6):
        ops.append(_mm(f"big{i}", 4096, 4096, 4096))
        ops += [_norm(f"n{i}_{j}", 4, 64) for j in range(8)]
    return _chain(ops, free=(("view", 20), ("transpose", 10)))


# --------------------------------------------------------------------------------------------
# runtime


def test_eager_is_the_host_device_recurrence_in_engine_and_fast_path(profile_path):
    w = _mixed()
    d = GPU("h200", runtime="eager", host_profile=profile_path)
    kernels = [GPU("h200").cost(op).latency_s for op in w.ops]
    host = load_host_profile(profile_path)
    views = 30 / len(w.ops) * host.view_s
    h = host.step_s + host.launch_latency_s
    end = 0.0
    for op, k in zip(w.ops, kernels):
        h += host.dispatch(op.target, op.kind) + views
        end = max(h, end) + k
    r = simulate(w, d)
    assert r.latency_s == pytest.approx(end, rel=1e-9)
    assert evaluate_many(w, [d]).latency_s[0] == pytest.approx(end, rel=1e-9)
    # the CPU ran ahead during the GEMMs and the GPU starved on the norms
    assert sum(kernels) < r.latency_s < sum(kernels) + h
    assert 0 < r.busy_fraction["sm"] < 1 and set(r.busy_fraction) == {"sm", "host"}
    assert r.energy_breakdown_j["static"] == pytest.approx(d.static_power_w() * r.latency_s)


def test_kernels_and_graphs_runtimes(profile_path):
    w = _mixed()
    kernels = sum(GPU("h200").cost(op).latency_s for op in w.ops)
    assert simulate(w, GPU("h200")).latency_s == pytest.approx(kernels, rel=1e-9)
    g = GPU("h200", runtime="cuda_graphs", host_profile=profile_path)
    want = kernels + PROFILE["graph_launch_s"] + PROFILE["launch_latency_s"]
    assert simulate(w, g).latency_s == pytest.approx(want, rel=1e-9)
    assert evaluate_many(w, [g]).latency_s[0] == pytest.approx(want, rel=1e-9)
    assert GPU("h200").resources().units == {"sm": 1}


def test_eager_limits(tmp_path):
    """No dispatch cost: kernels plus the fixed host time; huge dispatch: the host's time
    plus the last kernel."""
    w = _mixed()
    kernels = [GPU("h200").cost(op).latency_s for op in w.ops]
    free = {**PROFILE, "dispatch_s": {"*default": 0.0}, "view_s": 0.0}
    (tmp_path / "free.json").write_text(json.dumps(free))
    r = simulate(w, GPU("h200", runtime="eager", host_profile=str(tmp_path / "free.json")))
    assert r.latency_s == pytest.approx(sum(kernels) + 50e-6, rel=1e-9)
    slow = {**PROFILE, "dispatch_s": {"*default": 1.0}, "view_s": 0.0}
    (tmp_path / "slow.json").write_text(json.dumps(slow))
    r = simulate(w, GPU("h200", runtime="eager", host_profile=str(tmp_path / "slow.json")))
    assert r.latency_s == pytest.approx(len(w.ops) * 1.0 + 50e-6 + kernels[-1], rel=1e-9)


def test_eager_batched_decode_is_host_bound_at_batch_1_and_less_so_at_64(profile_path):
    walls = {}
    for b in (1, 64):
        w = api.workload("gpt2", phase="decode", batch=b, context=512)
        k = simulate(w, GPU("h200")).latency_s
        e = simulate(w, GPU("h200", runtime="eager", host_profile=profile_path)).latency_s
        walls[b] = (k, e)
        assert e > k
    assert walls[1][1] / walls[1][0] > walls[64][1] / walls[64][0]


@pytest.mark.parametrize("change, fragment", [
    ({"kind": "calibration"}, "not a host profile"),
    ({"schema": 7}, "schema"),
    ({"measured": "yes"}, "measured"),
    ({"dispatch_s": {"linear": 1e-6}}, "*default"),
    ({"dispatch_s": {"*default": float("nan")}}, "dispatch_s.*default"),
    ({"view_s": -1e-6}, "view_s"),
    ({"step_s": "1us"}, "step_s"),
    ({"launch_latency_s": None}, "launch_latency_s"),
    ({"graph_launch_s": float("inf")}, "graph_launch_s"),
])
def test_malformed_host_profile_is_bad_input(tmp_path, change, fragment):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**PROFILE, **change}))  # json writes NaN / Infinity literals
    with pytest.raises(BadInput, match="hw.host_profile") as exc:
        GPU("h200", runtime="eager", host_profile=str(path))
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


def test_runtime_bad_input(tmp_path, capsys):
    with pytest.raises(BadInput, match="hw.runtime"):
        GPU("h200", runtime="compiled")
    with pytest.raises(BadInput, match="hw.host_profile.*needs a host profile"):
        GPU("h200", runtime="eager")
    with pytest.raises(BadInput, match="hw.host_profile"):
        GPU("h200", runtime="eager", host_profile=str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(BadInput, match="not JSON"):
        GPU("h200", runtime="eager", host_profile=str(tmp_path / "bad.json"))
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({**PROFILE, "view_s": float("nan")}))
    for argv in (("--hw", "runtime=eager!"), ("--hw", "runtime=eager", "--hw",
                                                f"host_profile={nan}"),
                 ("--kv-update", "appended")):
        code, out, err = run_cli(capsys, "simulate", "gpt2", "--phase", "decode",
                                 "--context", "64", "-a", "gpu:h200", *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "runtime" in err or "host_profile" in err or "kv_update" in err


def test_results_say_what_the_latency_is(capsys, profile_path):
    code, out, _ = run_cli(capsys, "simulate", "gpt2", "--phase", "decode", "--context", "64",
                           "-a", "gpu:h200")
    assert code == 0 and "kernel time only" in out.replace("\n", " ")
    d = GPU("h200", runtime="eager", host_profile=profile_path).describe()
    assert "wall time" in d["latency_is"] and d["host_profile"]["measured"] is False


def test_host_profile_writer_output_is_what_the_reader_reads(tmp_path):
    from dse.calibrate import host_profile
    prof = host_profile.measure("cpu", calls=5, repeats=2, where="test", log=lambda m: None)
    assert prof["measured"] is False  # a CPU run is never a profile of a GPU host
    p = profile_from_dict(prof, "cpu")
    assert p.dispatch("linear", "matmul") > 0 and p.dispatch("weird", "unknown") > 0
    assert {"*matmul", "*elementwise", "*norm", "*default"} <= set(p.dispatch_s)
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(prof))
    assert GPU("t4", runtime="eager", host_profile=str(path)).host.source["where"] == "test"


# --------------------------------------------------------------------------------------------
# datatypes


def test_the_op_dtype_decides_the_datapath():
    g = GPU("h200")
    fp32 = g.cost(_mm("a", 8192, 8192, 8192, "fp32")).latency_s
    bf16 = g.cost(_mm("a", 8192, 8192, 8192, "bf16")).latency_s
    assert fp32 >= 2 * 8192**3 / 67e12          # no faster than the fp32 datasheet peak
    assert bf16 < fp32 / 8
    with pytest.raises(BadInput, match="hw.dtype.*own dtype"):
        GPU("h200", dtype="fp32")
    # the workload's dtype reaches the GPU from the API and the CLI
    w32 = api.workload("linear", dtype="fp32")
    w16 = api.workload("linear", dtype="bf16")
    assert simulate(w32, g).latency_s > 4 * simulate(w16, g).latency_s


def test_missing_datapaths_fall_back():
    t4, a100 = GPU("t4"), GPU("a100")
    assert t4.model.chip.datapath("bf16") == "fp32" and t4.model.peak("bf16") == 8.1e12
    assert t4.model.chip.datapath("fp16") == "fp16"
    m = (4096, 4096, 4096)
    assert t4.cost(_mm("a", *m, "bf16")).latency_s > 5 * t4.cost(_mm("a", *m, "fp16")).latency_s
    assert a100.model.chip.datapath("fp8") == "fp16"
    assert a100.model.peak("fp8") == 312e12


# --------------------------------------------------------------------------------------------
# presets and calibration transfer


def test_presets_hold_dense_datasheet_peaks():
    h100, pcie, t4 = PRESETS["h100"], PRESETS["h100-pcie"], PRESETS["t4"]
    assert h100["peak_bf16_flops"] == 989e12 and h100["peak_fp8_flops"] == 1979e12  # not sparse
    assert pcie["sms"] == 114 and pcie["peak_bf16_flops"] == 756e12
    assert t4["peak_bf16_flops"] == 0.0 and t4["peak_fp16_flops"] == 65e12
    assert PRESETS["rtx3090"]["peak_fp16_flops"] == 71e12        # fp32 accumulate
    assert PRESETS["rtx4090"]["peak_bf16_flops"] == 165.2e12     # fp32 accumulate
    assert PRESETS["a100-40gb"]["memory_bandwidth_Bps"] == 1.555e12
    assert PRESETS["a100"]["memory_bandwidth_Bps"] == 2.039e12
    assert PRESETS["l40s"]["peak_bf16_flops"] == 362.05e12
    assert PRESETS["mi300x"]["memory_capacity_bytes"] == 205822885888    # rocm-smi, 192 GiB
    # capacity as the driver shows it (nvidia-smi MiB), not the datasheet's GB as 1e9 B
    assert PRESETS["h100"]["memory_capacity_bytes"] == 81559 * 2**20 > 85e9
    assert PRESETS["a100"]["memory_capacity_bytes"] == 80 * 2**30
    assert PRESETS["b200"]["peak_bf16_flops"] == 2.25e15             # dense (4.5 P is sparse)
    for name in PRESETS:
        g = GPU(name)
        assert 0 < g.static_power_w() < g.physical().tdp_w
        assert g.cost(_mm("a", 1, 4096, 4096)).latency_s > 0
    assert set(DEVICE_PRESETS.values()) <= set(PRESETS)


def test_every_knob_has_a_transfer_rule():
    assert set(DEFAULT_KNOBS) <= set(KNOB_TRANSFER)
    assert set(KNOB_TRANSFER.values()) <= {"ratio", "cycles", "per_sm_share", "bytes"}


def test_transfer_is_identity_on_the_same_chip_and_scales_otherwise():
    cal = load_calibration("h200")
    src = calibration_chip(cal)
    h200 = GPU("h200")
    assert src == h200.model.chip                  # the shipped file names its chip
    assert h200.knobs["tensor_efficiency"] == cal["efficiency"]["tensor_efficiency"]
    assert h200.knobs["gemm_launch_s"] == cal["efficiency"]["gemm_launch_s"]
    slow = Chip(sms=66, peak_flops=src.peak_flops, bandwidth_Bps=src.bandwidth_Bps / 4,
                l2_bytes=src.l2_bytes, clock_hz=src.clock_hz / 2)
    knobs, mops = transfer_knobs(cal["efficiency"], cal["memory_ops"], src, slow)
    e = cal["efficiency"]
    assert knobs["tensor_efficiency"] == e["tensor_efficiency"]
    assert knobs["gemm_launch_s"] == pytest.approx(2 * e["gemm_launch_s"])
    assert knobs["sm_bandwidth_Bps"] == pytest.approx(e["sm_bandwidth_Bps"] / 2)
    assert mops["layer_norm"][0] == cal["memory_ops"]["layer_norm"][0]
    assert mops["layer_norm"][2] == pytest.approx(2 * cal["memory_ops"]["layer_norm"][2])


def test_hopper_presets_load_the_h200_calibration_moved_to_their_chip():
    h100, h200 = GPU("h100"), GPU("h200")
    assert h100.hw.calibration == "h200"
    assert h100.knobs["tensor_efficiency"] == h200.knobs["tensor_efficiency"]
    ratio = (3.35e12 / 132) / (4.8e12 / 132)
    assert h100.knobs["sm_bandwidth_Bps"] == pytest.approx(h200.knobs["sm_bandwidth_Bps"] * ratio)
    pcie = GPU("h100-pcie")
    assert pcie.knobs["gemm_launch_s"] == pytest.approx(h200.knobs["gemm_launch_s"] * 1.98 / 1.755)


def test_malformed_calibration_chip_is_bad_input(tmp_path):
    cal = dict(load_calibration("h200"))
    cal["chip"] = {"sms": "many"}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    with pytest.raises(BadInput, match="hw.calibration"):
        GPU("h100", calibration=str(path))


# --------------------------------------------------------------------------------------------
# KV-cache update


def test_kv_update_concat_reads_and_writes_the_whole_cache():
    b, ctx = 2, 64
    inplace = api.workload("gpt2", phase="decode", batch=b, context=ctx)
    concat = api.workload("gpt2", phase="decode", batch=b, context=ctx, kv_update="concat")
    assert inplace.kv_update == "in_place" and concat.kv_update == "concat"
    layer_cache = 2 * b * 12 * ctx * 64                      # bytes of one K (or V) cache
    appends = [(a, c) for a, c in zip(inplace.ops, concat.ops) if a.attrs.get("kv_append")]
    assert len(appends) == 2 * 12
    for a, c in appends:
        assert a.kv_bytes_read == 0 and c.kv_bytes_read == layer_cache
        assert c.kv_bytes_written == layer_cache + a.kv_bytes_written
    assert with_kv_update(concat, "in_place").traffic_bytes() == inplace.traffic_bytes()
    big = dict(phase="decode", batch=64, context=1024)
    slow = simulate(api.workload("llama2-7b", kv_update="concat", **big), GPU("h200")).latency_s
    fast = simulate(api.workload("llama2-7b", **big), GPU("h200")).latency_s
    assert slow > 1.2 * fast
    with pytest.raises(BadInput, match="kv_update"):
        api.workload("gpt2", phase="decode", context=64, kv_update="append")


def test_hf_capture_records_the_dynamic_cache_and_view_ops():
    pytest.importorskip("transformers")
    w = api.workload("x", hf_config=str(ROOT / "tests/data/hf/llama_tiny.json"), seq=16)
    assert w.kv_update == "concat" and w.summary()["kv_update"] == "concat"
    assert sum(c for _, c in w.free_ops) > 0 and w.summary()["free_ops"]


def test_capacity_counts_one_old_layer_cache_while_concatenating():
    from workloads.footprint import memory_footprint
    w = api.workload("llama2-7b", phase="decode", batch=16, context=1024)
    c = with_kv_update(w, "concat")
    assert GPU("h200").check(w) is None and GPU("h200").check(c) is None
    layer = 16 * 32 * 1024 * 128 * 2                     # one layer's K (or V) cache, bf16
    extra = memory_footprint(c).kv_cache_bytes - memory_footprint(w).kv_cache_bytes
    assert extra == layer


# --------------------------------------------------------------------------------------------
# PIM-GPT with an eager T4, and the measurement scripts' dry run


def test_pim_gpt_with_an_eager_t4_baseline(profile_path):
    from dse.reproduce import pim_gpt
    k = pim_gpt.measure("gpt2", None, gpu_hw={"runtime": "kernels", "host_profile": ""})
    e = pim_gpt.measure("gpt2", None, gpu_hw={"runtime": "eager",
                                             "host_profile": profile_path})
    assert e["pim_s"] == k["pim_s"] and e["gpu_s"] > k["gpu_s"]
    assert "unmeasured" in e["gpu_runtime"] and k["gpu_runtime"] == "kernels"


@pytest.mark.slow
def test_shipped_generate_profile_is_fitted_on_the_measured_generate_row():
    """`lent-h100-xeon-generate` is `lent-h100-xeon` with step_s = GPT-2's measured generate
    wall time per token less the eager model's prediction (benchmarks/gpu_baselines.py
    step-profile), and that step is what makes the eager prediction meet the row."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_baselines
    from accelerators.host_profile import load_host_profile
    data = gpu_baselines.generate_step_profile(
        ROOT / "tests/data/h100_baselines", ROOT / "accelerators/host_profiles/lent-h100-xeon.json")
    shipped = load_host_profile("lent-h100-xeon-generate")
    base = load_host_profile("lent-h100-xeon")
    assert shipped.step_s == pytest.approx(data["step_s"], rel=1e-3) and shipped.step_s > 5e-3
    assert base.step_s == 0 and shipped.dispatch_s == base.dispatch_s


@pytest.mark.slow
def test_gpu_baselines_dry_run_and_compare(tmp_path):
    """The one-command measurement runs on CPU at tiny sizes, and the comparison reads it."""
    out = tmp_path / "h200"
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_baselines.py"), "measure", "--out-dir",
           str(out), "--dry-run", "--only", "host", "heldout", "calibration", "zoo"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, timeout=300)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dry_run"] and manifest["sections"]["zoo"]["skipped"]
    for name in ("host", "heldout", "calibration"):
        assert manifest["sections"][name]["rc"] == 0, manifest
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_baselines
    import hf_models
    hf_models.measure(out / "hf_models.json", device="cpu", tiny=True, reps=2, only="gpt2")
    hf = json.loads((out / "hf_models.json").read_text())
    phases = {(r["phase"], r.get("cache")) for r in hf["rows"] if "error" not in r}
    assert phases == {("prefill", None), ("decode", "dynamic"), ("decode", "static"),
                      ("generate", "dynamic")}, hf["rows"]
    # pretend the CPU was an H200 so the comparison picks a preset; fake kernel sums
    manifest["device"]["name"] = "NVIDIA H200"
    (out / "manifest.json").write_text(json.dumps(manifest))
    for r in hf["rows"]:
        r["kernel_sum_s"] = r.get("wall_s")
    (out / "hf_models.json").write_text(json.dumps(hf))
    report = gpu_baselines.compare([str(out)])
    sections = report["gpus"][0]["sections"]
    assert sections["whole models (kernel time), preset"]["count"] == 3
    assert sections["eager wall time, own host"]["count"] == 4
    for sec in sections.values():
        assert all(math.isfinite(r["predicted_s"]) and r["predicted_s"] > 0
                   for r in sec["rows"])
