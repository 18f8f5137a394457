"""Number formats per tensor role (issue 30): exact bytes, capacity and FLOPs against hand
counts, every path (each template, the fast path, populations, serving, studies), the GPU's
datapaths and kernel families, MAC units per format, published quality, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse import api
from dse.errors import BadInput, InfeasibleDesign
from workloads import formats as F
from workloads.footprint import memory_footprint
from workloads.zoo import get_model

# Llama-2-7B at two layers: hand counts below use its widths (d 4096, d_ff 11008, 32 heads of
# 128, vocabulary 32000).
ARCH2 = {"n_layer": 2}
D, FF, V, HD = 4096, 11008, 32000, 128


@pytest.fixture(scope="module")
def decode():
    return api.workload("llama2-7b", phase="decode", batch=4, context=256, arch=ARCH2)


# ------------------------------------------------------------------------------ the table
@pytest.mark.parametrize("name, bits", [
    ("mxfp4", 4.25), ("nvfp4", 4.5), ("int4_g128", 4.125), ("int4_g128_zp", 4.15625),
    ("mxfp8_e4m3", 8.25), ("mxfp6_e2m3", 6.25), ("mxint8", 8.25), ("int4_g32", 4.5),
    ("fp8_e4m3", 8.0), ("bf16", 16.0), ("tf32", 32.0), ("ternary", 2.0), ("fp8", 8.0)])
def test_bits_per_element_include_the_scales(name, bits):
    assert F.get_format(name).bits_per_element == bits


def test_tensor_bytes_pay_a_scale_per_row_block():
    # 4096 x 4096 INT4 in groups of 128 along rows of 4096: 32 fp16 scales per row
    assert F.tensor_bytes(F.get_format("int4_g128"), D * D, D) == D * D // 2 + D * 32 * 2
    # a row of 100 elements is 4 MX blocks (the last one partial): 4 scales, not 3.125
    assert F.tensor_bytes(F.get_format("mxfp4"), 100, 100) == math.ceil((400 + 4 * 8) / 8)
    assert F.tensor_bytes(F.get_format("nvfp4"), 32) == 16 + 2


# ------------------------------------------------------------------------------ the pass
def _weight_elements_per_layer() -> int:
    return 4 * D * D + 3 * D * FF


def test_bytes_and_capacity_follow_each_role_exactly(decode):
    w = F.apply_formats(decode, "weights=int4_g128,activations=fp8_e4m3,kv=nvfp4")
    base = decode.traffic_bytes()
    got = w.traffic_bytes()
    per_layer = 4 * (D * D // 2 + D * (D // 128) * 2) + 3 * (D * FF // 2 + FF * (D // 128) * 2)
    head = V * D * 2                       # the head stays bf16
    norms_rope = base["weights"] - 2 * _weight_elements_per_layer() * 2 - head
    assert got["weights"] == 2 * per_layer + head + norms_rope
    assert got["kv_cache"] == base["kv_cache"] * 4.5 / 16       # every KV tensor in NVFP4
    assert w.flops == decode.flops                               # FLOPs do not change
    # weights stored once: the quantised GEMMs in INT4 g128, the rest (embedding, head,
    # norms) in bf16
    params = decode.params
    quant = 2 * _weight_elements_per_layer()
    assert w.weight_footprint_bytes == 2 * per_layer + (params - quant) * 2
    fp = memory_footprint(w)
    assert fp.kv_cache_bytes == memory_footprint(decode).kv_cache_bytes * 4.5 / 16
    # activations fp8: each linear layer reads its input in one byte, writes bf16
    lin = next(op for op in w.ops if op.kind == "matmul" and op.attrs["n"] == D)
    assert lin.activation_bytes_read == 4 * D and lin.activation_bytes_written == 4 * D * 2
    assert F.op_formats(lin).w.name == "int4_g128" and F.op_formats(lin).a.name == "fp8_e4m3"


def test_tied_head_quantised_keeps_the_embeddings_copy():
    w = api.workload("gpt2", phase="decode", batch=1, context=64, arch={"n_layer": 1})
    tied = F.apply_formats(w, "head=int8")
    table = 50257 * 768
    # GPT-2 ties its head to the token embedding: an int8 head is a second copy of the table
    assert tied.weight_footprint_bytes == w.weight_footprint_bytes + table


def test_formats_all_base_cost_the_same_as_no_formats(decode):
    w = F.apply_formats(decode, "weights=bf16,kv=bf16")
    assert w.traffic_bytes() == decode.traffic_bytes()
    for acc in ("npu", "gpu:h100", "pim", "wafer"):
        dtype = "fp16" if acc == "wafer" else "bf16"
        base = decode if dtype == "bf16" else api.workload(
            "llama2-7b", phase="decode", batch=4, context=256, arch=ARCH2, dtype=dtype)
        r0 = api.simulate(base, accelerator=acc)
        r1 = api.simulate(F.apply_formats(base, "weights=" + dtype), accelerator=acc)
        assert (r1.latency_s, r1.energy_j) == (r0.latency_s, r0.energy_j), acc


# ------------------------------------------------------------------------------ every template
@pytest.mark.parametrize("acc, hw", [
    ("npu", {}), ("npu", {"dtype": "mxfp4"}), ("gpu:h100", {}), ("gpu:b200", {}),
    ("pim", {}), ("npu_pim", {}), ("wafer", {"dtype": "bf16"})])
def test_every_template_runs_formats_and_narrow_weights_save(decode, acc, hw):
    narrow = ("weights=mxfp4,activations=mxfp4,kv=mxfp4,head=mxfp4,attention=mxfp4"
              if hw.get("dtype") == "mxfp4" else "weights=int4_g128,kv=fp8_e4m3")
    r1 = api.simulate(decode, accelerator=acc, hw=hw or None, formats=narrow)
    assert r1.latency_s > 0 and r1.energy_j > 0
    if hw.get("dtype") == "mxfp4":   # against the bf16 array on the 16-bit workload
        r0 = api.simulate(decode, accelerator=acc)
        assert r1.energy_j < r0.energy_j and r1.area_mm2 < r0.area_mm2
    elif acc != "wafer":   # the wafer keeps its weights in SRAM: no traffic to save
        r0 = api.simulate(decode, accelerator=acc, hw=hw or None, formats="weights=bf16")
        assert r1.energy_j < r0.energy_j


def test_neural_graphics_runs_formats():
    w = api.workload("nerf", batch=4096)
    r0 = api.simulate(w, accelerator="neural_graphics")
    r1 = api.simulate(w, accelerator="neural_graphics",
                      formats="weights=fp16,activations=fp16")
    assert r1.latency_s > 0 and r1.energy_j > 0
    assert (r1.latency_s, r1.energy_j) == pytest.approx((r0.latency_s, r0.energy_j))


def test_npu_refuses_what_its_array_and_lanes_cannot_run(decode):
    with pytest.raises(InfeasibleDesign, match="int8 MAC array cannot run activations in bf16"):
        api.simulate(decode, accelerator="npu", hw={"dtype": "int8"}, formats="weights=int8")
    with pytest.raises(InfeasibleDesign, match="number-format MAC unit"):
        api.simulate(decode, accelerator="npu", hw={"dtype": "nvfp4"})


# ------------------------------------------------------------------------------ fast path, populations
def test_fast_path_runs_formats_and_bounds_the_event_engine(decode):
    from accelerators.npu import NPU
    from simulators.engine import simulate
    from simulators.fast import evaluate_many
    w = F.apply_formats(decode, "weights=fp8_e4m3,activations=fp8_e4m3,kv=fp8_e4m3,"
                        "head=fp8_e4m3")
    designs = [NPU(dtype=d) for d in ("bf16", "fp8_e4m3", "mxfp8_e4m3")]
    res = evaluate_many(w, designs)
    for i, d in enumerate(designs):
        assert res.infeasible[i] is None
        one = evaluate_many(w, [d])            # the vectorised batch = one design at a time
        assert res.metrics(i) == pytest.approx(one.metrics(0), rel=1e-12)
        ev = simulate(w, d)                    # no contention: equal; else a lower bound
        assert res.metrics(i)["latency_s"] <= ev.latency_s * (1 + 1e-12)
        assert res.metrics(i)["latency_s"] >= 0.5 * ev.latency_s


def test_population_cost_many_is_the_scalar_cost_bit_for_bit(decode):
    from accelerators import npu_vector
    from accelerators.npu import NPU
    rng = np.random.default_rng(0)
    specs = ["weights=int4_g128,kv=fp8_e4m3",
             "weights=mxfp4,activations=mxfp4,kv=mxfp4,head=mxfp4",
             "weights=nvfp4,activations=nvfp4,attention=fp8_e4m3,kv=fp8_e4m3"]
    dtypes = ["bf16", "int8", "mxfp4", "fp8_e4m3", "nvfp4", "fp32", "mxint8"]
    for spec in specs:
        w = F.apply_formats(decode, spec)
        designs = [NPU(dtype=dtypes[i % len(dtypes)], rows=int(rng.choice([32, 128])),
                       dataflow=str(rng.choice(["ws", "os", "is"]))) for i in range(10)]
        many = npu_vector.cost_many(designs, w.ops)
        for i, d in enumerate(designs):
            for j, op in enumerate(w.ops):
                try:
                    c = d.cost(op)
                except InfeasibleDesign as exc:
                    assert str(many.op_errors(j)[i]) == str(exc)
                    continue
                assert many.op_errors(j)[i] is None
                assert many.latency_s[j, i] == c.latency_s, (spec, d.hw.dtype, op.name)
                assert many.energy_j[j, i] == c.total_energy_j, (spec, d.hw.dtype, op.name)


# ------------------------------------------------------------------------------ serving
def test_serving_kv_capacity_follows_the_kv_format():
    from simulators.iteration_cost import IterationCostModel, Target
    base = api.workload("llama2-7b", phase="decode", batch=1, context=1, arch=ARCH2)
    t = Target(design=api.accelerator("gpu:h100"))
    m16 = IterationCostModel(base, t, 1024)
    m4 = IterationCostModel(F.apply_formats(base, "weights=int4_g128,kv=nvfp4"), t, 1024)
    assert m16.kv_bytes_per_token == 2 * 2 * 32 * HD * 2
    assert m4.kv_bytes_per_token == m16.kv_bytes_per_token * 4.5 / 16
    assert m4.kv_capacity_tokens() > 3 * m16.kv_capacity_tokens()
    r = api.serve("llama2-7b", accelerator="gpu:h100", arch=ARCH2, requests=60, rate=5,
                  formats="weights=int4_g128,kv=nvfp4")
    assert r.kv_cache["bytes_per_token"] == m4.kv_bytes_per_token


# ------------------------------------------------------------------------------ GPU datapaths
def test_gpu_datapaths_and_kernel_families():
    from accelerators.gpu_formats import plan
    g = api.accelerator("gpu:h100")
    f = F.get_format
    assert plan(g.hw, f("fp8_e4m3"), f("fp8_e4m3")) == ("native", "fp8")
    assert plan(g.hw, f("bf16"), f("int4_g128")) == ("fused", "bf16")
    assert "no datapath for activations in fp4_e2m1" in plan(g.hw, f("fp4_e2m1"), f("mxfp4"))
    b = api.accelerator("gpu:b200")
    assert plan(b.hw, f("mxfp4"), f("mxfp4")) == ("native", "fp4")
    assert plan(b.hw, f("mxfp8_e4m3"), f("mxfp4")) == ("native", "fp8")   # kind::f8f6f4
    assert plan(api.accelerator("gpu:a100").hw, f("int4"), f("int4")) == ("native", "int4")


def test_gpu_weight_only_helps_decode_and_fp8_helps_prefill():
    # the micro model's one linear layer is its graph's output: the "head" role
    dec = api.workload("linear", batch=1, arch={"m": 1, "n": 8192, "k": 8192})
    pre = api.workload("linear", batch=1, arch={"m": 8192, "n": 8192, "k": 8192})
    g = api.accelerator("gpu:h100")
    t16 = api.simulate(dec, accelerator=g).latency_s
    t4 = api.simulate(F.apply_formats(dec, "head=int4_g128"), accelerator=g).latency_s
    assert t4 < 0.7 * t16          # a quarter of the bytes, at tinygemm's measured bandwidth
    p16 = api.simulate(pre, accelerator=g).latency_s
    p8 = api.simulate(F.apply_formats(pre, "head=fp8_e4m3,activations=fp8_e4m3"),
                      accelerator=g).latency_s
    assert p8 < 0.75 * p16         # twice the peak on the fp8 datapath
    with pytest.raises(InfeasibleDesign, match="no datapath for activations in nvfp4"):
        api.simulate(pre, accelerator=g, formats="head=nvfp4,activations=nvfp4")


# ------------------------------------------------------------------------------ MAC units
def test_mac_units_per_format():
    from accelerators import mac_formats as M, technology as tech
    for d in M.CLASSIC:
        assert M.mac_energy_j(d, 7) == tech.mac_energy_j(d, 7)
    # INT v.s. FP (Chen et al. 2025): MXINT8 cheaper than MXFP8 in energy and area
    assert M.mac_energy_j("mxint8", 7) < M.mac_energy_j("mxfp8_e4m3", 7)
    assert M.mac_area_mm2("mxint8", 7) < M.mac_area_mm2("mxfp8_e4m3", 7)
    # MX's power-of-two scales cost less than NVFP4's FP8 scales (Chhugani et al. 2026)
    assert M.mac_area_mm2("mxfp4", 7) < M.mac_area_mm2("nvfp4", 7)
    f = F.get_format
    assert M.support("bf16", f("int4_g128")) == "dequant"
    assert M.support("mxfp4", f("mxfp4")) == "native"
    assert M.support("int8", f("int4_g128")) is None
    assert M.support("fp8_e4m3", f("int4")) == "native"


# ------------------------------------------------------------------------------ quality
def test_published_format_quality_refuses_what_it_lacks():
    from dse.quality.format_quality import format_quality
    ref = get_model("llama2-7b").resolve_arch(None)
    q, raw, _ = format_quality("llama2-7b", ref, {"weights": "int4_g128_zp", "kv": "bf16"})
    assert (q, raw) == (pytest.approx(5.47 / 5.60), 5.60)       # AWQ, the best published
    q, raw, _ = format_quality("llama2-7b", ref, {"weights": "int4_g128_zp"}, method="GPTQ")
    assert raw == 5.87
    with pytest.raises(BadInput, match="nothing is interpolated"):
        format_quality("llama2-7b", ref, {"weights": "int4_g128"})
    with pytest.raises(BadInput, match="reference architecture"):
        format_quality("llama2-7b", {**ref, "n_layer": 8}, {"weights": "int4_g128_zp"})


# ------------------------------------------------------------------------------ studies
def test_a_study_searches_formats_and_prunes_what_a_design_cannot_run(tmp_path):
    import yaml
    from dse.study.driver import run_study
    from dse.study.loader import load_study
    spec = {"name": "fmt", "workloads": [{"model": "llama2-7b", "phase": "decode",
                                           "batch": 1, "context": 64, "formats": {"kv": "bf16"}}],
            "accelerators": [{"name": "h100", "template": "gpu", "preset": "h100"},
                             {"name": "a100", "template": "gpu", "preset": "a100"}],
            "search": {"formats": {"weights": ["bf16", "int4_g128_zp"],
                                   "activations": ["bf16", "fp8_e4m3"]}},
            "objectives": ["latency_s"], "constraints": ["quality >= 0.9"],
            "quality": "published", "fidelity": "fast", "sampler": "grid", "trials": 8}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec))
    r = run_study(load_study(p), out=tmp_path / "o", show_progress=False, write_report=False)
    import csv
    rows = list(csv.DictReader(open(r.trials_csv)))
    assert len(rows) == 8 and r.states["FAIL"] == 0
    reasons = " ".join(x["reason"] for x in rows)
    assert "no datapath for activations in fp8_e4m3" in reasons           # A100: no fp8
    assert "nothing is interpolated" in reasons                             # W8A8 not published
    ok = [x for x in rows if x["feasible"] == "True"]
    assert {x["fmt.weights"] for x in ok} == {"bf16", "int4_g128_zp"}


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("argv, fragment", [
    (["--formats", "weights=int4_g100"], "--formats.weights: int4 groups of 32, 64, 128"),
    (["--formats", "weights=mxfp4_b16"], "mxfp4 allows blocks of 32"),
    (["--formats", "wieghts=int4"], "--formats.wieghts: expected a role"),
    (["--formats", "weights=fp5"], "expected a format name"),
    (["--formats", "int4"], "expected role=format pairs"),
])
def test_bad_formats_are_one_line(capsys, argv, fragment):
    from test_bad_input import one_line_error
    one_line_error(capsys, "workload", "gpt2", "--phase", "decode", *argv, expect=(fragment,))


def test_a_gpu_without_fp4_refuses_fp4_activations_in_one_line(capsys):
    from test_bad_input import one_line_error
    one_line_error(capsys, "simulate", "linear", "-a", "gpu:h100", "--formats",
                   "head=mxfp4,activations=mxfp4",
                   expect=("no datapath for activations in mxfp4",))


def test_a_study_with_a_bad_format_is_one_line(tmp_path, capsys):
    from test_bad_input import one_line_error, study_file
    path = study_file(tmp_path, search={"hardware": {"rows": {"choices": [8, 16]}},
                                        "formats": {"weights": ["bf16", "nvfp4_b32"]}})
    one_line_error(capsys, "study", "validate", str(path),
                   expect=("search.formats.weights", "nvfp4 allows blocks of 16"))


@pytest.mark.slow
def test_reproduce_formats_rows_are_within_35_percent():
    from dse.reproduce import run_reproduction
    rows = run_reproduction("formats")
    assert len(rows) == 7
    assert all(r.within() for r in rows), [(r.metric, r.paper, r.ours) for r in rows
                                           if not r.within()]


def test_kernel_family_fit_recovers_known_factors():
    """The fit of benchmarks/format_gemm_fit.py on times the model itself made with known
    factors gives those factors back (the fit's machinery, not the GPU)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import format_gemm_fit as fit
    from accelerators import gpu_formats
    pred = fit.Predictor("NVIDIA H100 80GB HBM3")
    true = dict(gpu_formats.DEFAULT_FAMILY_KNOBS, native_fp8=0.8, fused_compute=0.3,
                fused_memory=0.7, fused_extra_s=5e-6, unfused_passes_group=4.0)
    records = []
    for n, k in ((4096, 4096), (11008, 4096), (8192, 8192)):
        for m in (1, 16, 256, 4096):
            for kern in ("fp8_scaled_mm", "int4_w_tinygemm", "int4_w_dequant_mm"):
                r = {"kernel": kern, "m": m, "m_run": m, "n": n, "k": k}
                r["time_s"] = pred(r, true)
                records.append(r)
    got = fit.fit(records, pred)
    for name in ("native_fp8", "fused_compute", "fused_memory", "unfused_passes_group"):
        assert got[name] == pytest.approx(true[name], rel=1e-3), name
    assert got["fused_extra_s"] == pytest.approx(5e-6, abs=1e-8)


def test_kernel_families_predict_held_out_measured_gemms():
    """The shipped kernel-family factors (fitted on the lent GPU's GEMMs, fit split only)
    predict the held-out shapes of tests/data/format_gemm_h200.json within 15 % median for
    kernels of 50 us or more."""
    import json
    import statistics
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    import format_gemm_fit as fit
    from accelerators import gpu_formats
    raw = json.loads((root / "tests" / "data" / "format_gemm_h200.json").read_text())
    pred = fit.Predictor(raw["device"]["name"])
    knobs = gpu_formats.family_knobs()
    for kernel in ("fp8_scaled_mm", "int8_int_mm", "int4_w_tinygemm", "int4_w_dequant_mm",
                   "fp8_w_dequant_mm"):
        rows = [r for r in raw["measurements"] if r["kernel"] == kernel and not fit.is_fit(r)
                and r["time_s"] >= fit.MIN_REPORT_S and r["n"] == 14336]
        errs = [abs(pred(r, knobs) / r["time_s"] - 1) for r in rows]
        assert rows and statistics.median(errs) <= 0.15, (kernel, statistics.median(errs))
