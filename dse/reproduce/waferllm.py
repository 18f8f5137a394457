"""Reproduction of WaferLLM (He et al., OSDI 2025) with the ``wafer`` template (``wse2`` preset)
against the ``gpu`` template's ``a100`` preset.

Every figure of the paper's evaluation the tool can be asked [P Sec. 7, Tables 2-6]:

* Table 2, end-to-end throughput per request (TPR = output tokens over prefill + decode time)
  of LLaMA3-8B (prefill on 660 x 660 cores, decode on 360 x 360) and LLaMA2-13B (750 x 750,
  375 x 375; its 4K context limit lifted, as the paper did) for 2048/128, 4096/128, 2048/2048
  and 4096/4096 input/output tokens, and one A100's (SGLang);
* Table 3, prefill TPR of a 4,096-token prompt on 480 x 480, 600 x 600 and 720 x 720 cores;
  Table 4, decode TPR at 4K context on 420 x 420, 540 x 540 and 660 x 660 cores, for
  LLaMA3-8B, LLaMA2-13B, CodeLLaMA-34B and QWen2-72B (the last two "a subset of layers,
  scaled": we do the same, since neither fits the wafer);
* Table 5, the longest decode output the KV cache holds with shift-based and concatenated
  caches (Table 2's regions);
* Table 6, MeshGEMV [1,16K]x[16K,16K] and [1,32K]x[32K,32K] on WSE-2 and on one A100;
  Sec. 7.3, MeshGEMV ~4.6x over the Cerebras default GEMV (pipeline all-reduce); Sec. 7.2,
  MeshGEMM ~17 % fewer cycles than SUMMA / Cannon on 8K GEMMs; Abstract, MeshGEMM 2-3x over
  SUMMA and Cannon.

Placement: weights and KV cache spread over the whole fabric, each layer computing on a region
of its phase's size (``placement: spread``, :mod:`accelerators.wafer`), the shift-based KV
cache. One constant is fitted: ``vector_op_cycles`` (the issue cost of one vector instruction of
a local tile product) on Table 3's LLaMA3-8B 720 x 720 prefill row, flagged ``fitted``; every
other row predicts from it. docs/validation.md (wafer section) says where they miss.
"""

from __future__ import annotations

from typing import Any

from accelerators import mesh_algorithms as mesh
from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.build import build_workload

#: Table 6 [P]: GEMV times, ms: MeshGEMV on WSE-2 and cuBLAS on one A100.
PAPER_GEMV_MS = {16384: {"wse2": 0.0012, "a100": 0.336}, 32768: {"wse2": 0.00203, "a100": 1.231}}
#: Sec. 7.3: MeshGEMV over the Cerebras default GEMV (pipeline all-reduce), ~4.6x.
PAPER_MESHGEMV_OVER_PIPELINE = 4.6
#: Sec. 1: MeshGEMV 4-8x over Cerebras's optimized GEMV (micro-benchmarks).
PAPER_MESHGEMV_OVER_CEREBRAS = (4.0, 8.0)
#: Sec. 7.2: MeshGEMM keeps over 70 % computational efficiency near the hardware limit; SUMMA
#: and Cannon fall below 50 % on 720 x 720 cores (the paragraph's example: GEMM 2K).
PAPER_MESHGEMM_EFFICIENCY = (0.70, 1.0)
PAPER_BASELINE_EFFICIENCY = (0.0, 0.50)
#: The one row ``vector_op_cycles`` is fitted on (Table 3): (model, region side).
FIT_ROW = ("llama3-8b", 720)
#: Abstract / Sec. 1: MeshGEMM 2-3x over SUMMA and Cannon.
PAPER_MESHGEMM_SPEEDUP = (2.0, 3.0)
#: Sec. 7.2: on 8K GEMMs MeshGEMM takes ~17 % fewer cycles than SUMMA and Cannon.
PAPER_MESHGEMM_8K = 1.0 / (1.0 - 0.17)
#: Table 2 [P]: end-to-end TPR (tokens/s per request), (input, output) -> WSE-2 and one A100.
PAPER_E2E = {
    "llama3-8b": {(2048, 128): (764.4, 34.8), (4096, 128): (604.4, 31.1),
                  (2048, 2048): (2370.3, 36.5), (4096, 4096): (2459.0, 78.4)},
    "llama2-13b": {(2048, 128): (473.9, 20.4), (4096, 128): (414.0, 17.1),
                   (2048, 2048): (1690.3, 21.1), (4096, 4096): (1826.0, 47.9)},
}
#: Table 2's regions [P Sec. 7.1]: (prefill side, decode side).
E2E_REGIONS = {"llama3-8b": (660, 360), "llama2-13b": (750, 375)}
#: Table 3 [P]: prefill TPR of a 4,096-token prompt, by region side; one A100 (SGLang).
PAPER_PREFILL = {"llama3-8b": {480: 20320.6, 600: 25037.2, 720: 27686.5},
                 "llama2-13b": {480: 13685.1, 600: 16854.2, 720: 17498.3},
                 "codellama-34b": {480: 5471.4, 600: 7540.1, 720: 8526.0},
                 "qwen2-72b": {480: 2785.2, 600: 3775.5, 720: 4421.6}}
PAPER_PREFILL_A100 = {"llama3-8b": 13988.3, "llama2-13b": 7805.1}
#: Table 4 [P]: decode TPR at 4K context, by region side; one A100 (SGLang).
PAPER_DECODE = {"llama3-8b": {420: 2699.9, 540: 2501.5, 660: 2243.3},
                "llama2-13b": {420: 2039.2, 540: 1899.4, 660: 1739.8},
                "codellama-34b": {420: 1450.8, 540: 1407.7, 660: 1359.2},
                "qwen2-72b": {420: 839.7, 540: 824.3, 660: 787.1}}
PAPER_DECODE_A100 = {"llama3-8b": 78.9, "llama2-13b": 48.7, "codellama-34b": 26.1}
#: Table 5 [P]: longest decode output the KV cache holds (Table 2's regions).
PAPER_KV_TOKENS = {"llama3-8b": {"shift": 137548, "concat": 382},
                   "llama2-13b": {"shift": 6168, "concat": 16}}

#: Tables 6-8 [P]: A100 / WSE-2 energy ratio (one A100). The paper's ratios are the speedup
#: times the two chips' rated powers (0.336 / 0.0012 / 37.5 = 7.47: "37x the power").
PAPER_ENERGY_GEMV = {16384: 7.47, 32768: 16.17}
PAPER_ENERGY_PREFILL = {"llama3-8b": 0.05, "llama2-13b": 0.06}
PAPER_ENERGY_DECODE = {"llama3-8b": 0.92, "llama2-13b": 1.13}
#: Sec. 7.1: prefill TPR scale-up from 480 x 480 to 720 x 720 cores.
PAPER_PREFILL_SCALEUP = {"llama3-8b": 1.4, "qwen2-72b": 1.6}

WAFER = "wafer:wse2"
GPU = "gpu:a100"
CONTEXT = 4096
DTYPE = "fp16"
#: Zoo models and architectures: LLaMA2-13B with the 4K limit lifted [P Sec. 7], CodeLLaMA-34B
#: and QWen2-72B as llama2-70b's definition with their published shapes [D Hugging Face
#: configs: CodeLlama-34b (48 layers, d 8192, 64 heads, 8 KV heads, d_ff 22016, vocab 32000);
#: Qwen2-72B (80 layers, d 8192, 64 / 8 heads, d_ff 29568, vocab 152064; its q/k/v biases
#: left out)].
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3-8b": ("llama3-8b", {"max_seq": 16384}),
    "llama2-13b": ("llama2-13b", {"max_seq": 16384}),
    "codellama-34b": ("llama2-70b", {"n_layer": 48, "d_ff": 22016, "max_seq": 16384}),
    "qwen2-72b": ("llama2-70b", {"n_layer": 80, "d_ff": 29568, "vocab_size": 152064,
                                 "max_seq": 16384}),
}
#: Layers simulated for the models that do not fit the wafer, the result scaled to all layers
#: (the paper's method for these two [P Sec. 7.1]).
SUBSET_LAYERS = 8


def _regions(prefill: int | None = None, decode: int | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    if prefill:
        out.update(prefill_region_width=prefill, prefill_region_height=prefill)
    if decode:
        out.update(decode_region_width=decode, decode_region_height=decode)
    return out


def _workload(label: str, phase: str, layers: int | None = None, **kw):
    model, arch = MODELS[label]
    arch = dict(arch)
    if layers:
        arch["n_layer"] = layers
    return build_workload(model, phase=phase, batch=1, dtype=DTYPE, arch=arch, **kw)


def _per_request(label: str, phase: str, hw: dict, **kw) -> tuple[float, str]:
    """Seconds of one ``phase`` step of ``label`` on the wafer (a subset of layers scaled to
    all when the whole model does not fit), and how it was run."""
    full_layers = MODELS[label][1].get("n_layer") or build_workload(
        MODELS[label][0], phase="decode", batch=1, context=8, dtype=DTYPE).arch["n_layer"]
    w = _workload(label, phase, **kw)
    design = make_accelerator(WAFER, hw)
    if design.check(w) is None:
        return simulate(w, design).latency_s, "whole model"
    part = _workload(label, phase, layers=SUBSET_LAYERS, **kw)
    t = simulate(part, design).latency_s
    return t * full_layers / SUBSET_LAYERS, f"{SUBSET_LAYERS} of {full_layers} layers, scaled"


def _linear(n: int, m: int = 1):
    return build_workload("linear", phase="forward", batch=1, dtype=DTYPE,
                          arch={"m": m, "k": n, "n": n, "bias": False})


def _latency(workload, spec: str, hw: dict | None = None) -> float:
    return simulate(workload, make_accelerator(spec, hw)).latency_s


def gemv_rows(hw: dict | None = None) -> list[Row]:
    """Table 6 and Sec. 7.3. ``hw``: overrides of the ``wse2`` preset (every row function
    takes them)."""
    rows = []
    for n, paper in PAPER_GEMV_MS.items():
        w = _linear(n)
        wafer, gpu = _latency(w, WAFER, hw), _latency(w, GPU)
        name = f"GEMV [1,{n // 1024}K]x[{n // 1024}K,{n // 1024}K] fp16"
        rows.append(Row(f"{name}: WSE-2 MeshGEMV time (ms)", paper["wse2"], wafer * 1e3,
                        "750 x 750, K-tree (K=2)", source="Sec. 7.5, Table 6"))
        rows.append(Row(f"{name}: one A100 time (ms)", paper["a100"], gpu * 1e3,
                        "gpu template, a100 preset", source="Sec. 7.5, Table 6"))
        rows.append(Row(f"{name}: WSE-2 speedup over one A100", paper["a100"] / paper["wse2"],
                        gpu / wafer, "the two rows above", source="Sec. 7.5, Table 6"))
    w = _linear(32768)
    t = {a: _latency(w, WAFER, {**(hw or {}), "allreduce": a}) for a in ("ktree", "pipeline")}
    rows.append(Row("MeshGEMV (K-tree) speedup over the pipeline all-reduce GEMV (Cerebras "
                    "default), [1,32K]x[32K,32K] on 750 x 750", PAPER_MESHGEMV_OVER_PIPELINE,
                    t["pipeline"] / t["ktree"],
                    f"K-tree {t['ktree'] * 1e6:.2f} us, pipeline {t['pipeline'] * 1e6:.2f} us; "
                    "the paper's 4.6x is over its Figure 10's sizes", source="Sec. 7.3"))
    rows.append(Row("MeshGEMV speedup over Cerebras's GEMV (pipeline all-reduce), "
                    "[1,32K]x[32K,32K] on 750 x 750", PAPER_MESHGEMV_OVER_CEREBRAS,
                    t["pipeline"] / t["ktree"], "the row above against the introduction's range",
                    source="Sec. 1"))
    return rows


def gemm_rows(hw: dict | None = None) -> list[Row]:
    """MeshGEMM against Cannon and SUMMA: a whole LLaMA3-8B prefill (the paper's GEMM sizes
    are plotted, not tabulated) and one 8K GEMM on 720 x 720 cores."""
    w = _workload("llama3-8b", "prefill", seq=CONTEXT)
    t = {a: _latency(w, WAFER, {**(hw or {}), "gemm_algorithm": a})
         for a in ("meshgemm", "cannon", "summa")}
    rows = [Row(f"MeshGEMM speedup over {name} (LLaMA3-8B 4K-prompt prefill, 750x750)",
                PAPER_MESHGEMM_SPEEDUP, t[algo] / t["meshgemm"],
                f"prefill {t['meshgemm'] * 1e3:.1f} ms with MeshGEMM, "
                f"{t[algo] * 1e3:.1f} ms with {name}", source="Abstract; Sec. 7.2, Fig. 9")
            for algo, name in (("cannon", "Cannon"), ("summa", "SUMMA"))]
    g = _linear(8192, m=8192)
    region = {**(hw or {}), **_regions(prefill=720)}
    t8 = {a: _latency(g, WAFER, {**region, "gemm_algorithm": a})
          for a in ("meshgemm", "cannon", "summa")}
    for algo, name in (("cannon", "Cannon"), ("summa", "SUMMA")):
        rows.append(Row(f"MeshGEMM speedup over {name}, 8K GEMM on 720 x 720",
                        PAPER_MESHGEMM_8K, t8[algo] / t8["meshgemm"],
                        f"{t8['meshgemm'] * 1e3:.2f} ms MeshGEMM, {t8[algo] * 1e3:.2f} ms "
                        f"{name}; the paper: ~17 % fewer cycles", source="Sec. 7.2"))
    f = make_accelerator(WAFER, region).fabric
    for algo, name in (("meshgemm", "MeshGEMM"), ("cannon", "Cannon"), ("summa", "SUMMA")):
        c = mesh.gemm(f, algo, 2048, 2048, 2048, 720, 720)
        rows.append(Row(f"{name} computational efficiency (local compute over all cycles), "
                        "2K GEMM on 720 x 720", PAPER_MESHGEMM_EFFICIENCY if algo == "meshgemm"
                        else PAPER_BASELINE_EFFICIENCY, c.compute_cycles / c.cycles,
                        f"{c.cycles:.0f} cycles, {c.compute_cycles:.0f} computing",
                        source="Sec. 7.2"))
    return rows


def e2e_rows(hw: dict | None = None) -> list[Row]:
    """Table 2: TPR = output tokens / (prefill + decode time), WaferLLM's regions; decode
    steps at every context from ``api.generate``'s interpolation."""
    from dse import api

    rows = []
    for label, cases in PAPER_E2E.items():
        p, d = E2E_REGIONS[label]
        design_hw = {**(hw or {}), **_regions(p, d)}
        model, arch = MODELS[label]
        for (n_in, n_out), (paper_wse, paper_gpu) in cases.items():
            g = api.generate(model, input_len=n_in, output_len=n_out, batch=1,
                             accelerator=WAFER, hw=design_hw, arch=arch, dtype=DTYPE)
            tpr = n_out / g.e2e_s
            rows.append(Row(f"{label} {n_in}/{n_out}: end-to-end TPR on WSE-2 (tokens/s)",
                            paper_wse, tpr, f"prefill {p}x{p} TTFT {g.ttft_s * 1e3:.1f} ms, "
                            f"decode {d}x{d} TPOT {g.tpot_s * 1e6:.0f} us",
                            source="Sec. 7.1, Table 2"))
            if (n_in, n_out) == (2048, 128):
                a = api.generate(model, input_len=n_in, output_len=n_out, batch=1,
                                 accelerator=GPU, arch=arch, dtype=DTYPE)
                rows.append(Row(f"{label} {n_in}/{n_out}: end-to-end TPR on one A100 "
                                "(tokens/s)", paper_gpu, n_out / a.e2e_s,
                                f"TTFT {a.ttft_s * 1e3:.1f} ms, TPOT {a.tpot_s * 1e3:.2f} ms",
                                source="Sec. 7.1, Table 2"))
    return rows


def _wafer_tpr_rows(paper_table: dict, phase: str, hw: dict | None) -> list[Row]:
    """Tables 3 and 4: the wafer's TPR of one ``phase`` (a 4K prompt, or a decode step at 4K
    context) on each region side."""
    rows = []
    prefill = phase == "prefill"
    for label, by_side in paper_table.items():
        for side, paper in by_side.items():
            region = _regions(prefill=side) if prefill else _regions(decode=side)
            t, how = _per_request(label, phase, {**(hw or {}), **region},
                                  **({"seq": CONTEXT} if prefill else {"context": CONTEXT}))
            what = "prefill TPR, 4K prompt" if prefill else "decode TPR, 4K context"
            fitted = prefill and (label, side) == FIT_ROW
            rows.append(Row(f"{label} {what}, {side}x{side} (tokens/s)", paper,
                            (CONTEXT if prefill else 1) / t,
                            how + ("; vector_op_cycles fitted on this row" if fitted else ""),
                            source=f"Sec. 7.1, Table {3 if prefill else 4}", fitted=fitted))
    return rows


def prefill_rows(hw: dict | None = None) -> list[Row]:
    """Table 3: prefill TPR (prompt tokens / prefill time) of a 4K prompt."""
    rows = _wafer_tpr_rows(PAPER_PREFILL, "prefill", hw)
    for label, paper in PAPER_PREFILL_A100.items():
        w = _workload(label, "prefill", seq=CONTEXT)
        rows.append(Row(f"{label} prefill TPR, 4K prompt, one A100 (tokens/s)", paper,
                        CONTEXT / _latency(w, GPU), "gpu template, a100 preset",
                        source="Sec. 7.5, Table 7"))
    return rows


def decode_rows(hw: dict | None = None) -> list[Row]:
    """Table 4: decode TPR at 4K context."""
    rows = _wafer_tpr_rows(PAPER_DECODE, "decode", hw)
    for label, paper in PAPER_DECODE_A100.items():
        w = _workload(label, "decode", context=CONTEXT)
        a100 = make_accelerator(GPU)
        note = "gpu template, a100 preset"
        if a100.check(w) is not None:
            w = _workload(label, "decode", layers=SUBSET_LAYERS, context=CONTEXT)
            layers = MODELS[label][1].get("n_layer", 48)
            t = _latency(w, GPU) * layers / SUBSET_LAYERS
            note += f", {SUBSET_LAYERS} of {layers} layers scaled"
        else:
            t = _latency(w, GPU)
        rows.append(Row(f"{label} decode TPR, 4K context, one A100 (tokens/s)", paper, 1 / t,
                        note, source="Sec. 7.5, Tables 4 and 8"))
    return rows


def kv_rows(hw: dict | None = None) -> list[Row]:
    """Table 5: the longest decode output (tokens) the KV cache holds on Table 2's regions,
    shift-based and concatenated."""
    rows = []
    for label, paper in PAPER_KV_TOKENS.items():
        _, d = E2E_REGIONS[label]
        w = _workload(label, "decode", context=1)
        tokens = {}
        for kind in ("shift", "concat"):
            design = make_accelerator(WAFER, {**(hw or {}), **_regions(decode=d),
                                              "kv_cache": kind})
            tokens[kind] = design.kv_capacity_tokens(w)
            rows.append(Row(f"{label} KV cache capacity, {kind} (tokens)", paper[kind],
                            tokens[kind], f"{d}x{d} decode regions over the fabric",
                            source="Sec. 7.4, Table 5"))
        rows.append(Row(f"{label} KV capacity, shift over concat", paper["shift"]
                        / paper["concat"], tokens["shift"] / max(tokens["concat"], 1),
                        "the two rows above", source="Sec. 7.4"))
    return rows


def _energy_row(metric: str, paper: float, w, wafer_hw: dict, source: str,
                fitted: bool = False) -> Row:
    """A100 / WSE-2 energy of ``w`` the paper's way (rated power x time, both chips) and, in the
    note, the templates' activity-based energy."""
    a = simulate(w, make_accelerator(WAFER, wafer_hw))
    g = simulate(w, make_accelerator(GPU))
    rated = (g.tdp_w * g.latency_s) / (a.tdp_w * a.latency_s)
    return Row(metric, paper, rated,
               f"rated power x time ({g.tdp_w:.0f} W, {a.tdp_w:.0f} W); activity-based energy "
               f"ratio {g.energy_j / a.energy_j:.3g}", source=source, fitted=fitted)


def energy_rows(hw: dict | None = None) -> list[Row]:
    """Tables 6-8: A100 / WSE-2 energy ratios against one A100."""
    hw = hw or {}
    rows = [_energy_row(f"GEMV [1,{n // 1024}K]x[{n // 1024}K,{n // 1024}K]: A100 / WSE-2 "
                        "energy ratio", paper, _linear(n), hw, "Sec. 7.5, Table 6")
            for n, paper in PAPER_ENERGY_GEMV.items()]
    for label, paper in PAPER_ENERGY_PREFILL.items():
        rows.append(_energy_row(f"{label} prefill, 4K prompt, 720x720: A100 / WSE-2 energy "
                                "ratio", paper, _workload(label, "prefill", seq=CONTEXT),
                                {**hw, **_regions(prefill=720)}, "Sec. 7.5, Table 7",
                                fitted=(label, 720) == FIT_ROW))
    for label, paper in PAPER_ENERGY_DECODE.items():
        rows.append(_energy_row(f"{label} decode, 4K context, 420x420: A100 / WSE-2 energy "
                                "ratio", paper, _workload(label, "decode", context=CONTEXT),
                                {**hw, **_regions(decode=420)}, "Sec. 7.5, Table 8"))
    return rows


def rows(hw: dict | None = None) -> list[Row]:
    prefill = prefill_rows(hw)
    return (gemv_rows(hw) + gemm_rows(hw) + e2e_rows(hw) + prefill + scaleup_rows(prefill)
            + decode_rows(hw) + kv_rows(hw) + energy_rows(hw))


def scaleup_rows(prefill: list[Row]) -> list[Row]:
    """Sec. 7.1: prefill TPR from 480 x 480 to 720 x 720 cores, from the Table 3 rows."""
    by_metric = {r.metric: r.ours for r in prefill}
    out = []
    for label, paper in PAPER_PREFILL_SCALEUP.items():
        tpr = {side: by_metric[f"{label} prefill TPR, 4K prompt, {side}x{side} (tokens/s)"]
               for side in (480, 720)}
        out.append(Row(f"{label} prefill scale-up, 480x480 to 720x720 cores", paper,
                       tpr[720] / tpr[480], "the Table 3 rows", source="Sec. 7.1"))
    return out


def fit_vector_op_cycles(lo: float = 0.0, hi: float = 64.0, iters: int = 12) -> float:
    """The ``wse2`` preset's ``vector_op_cycles``: the value at which :data:`FIT_ROW`'s prefill
    TPR (Table 3) equals the paper's, by bisection (TPR falls as the cost rises). Every other
    row is a prediction from it."""
    label, side = FIT_ROW
    target = PAPER_PREFILL[label][side]

    def tpr(v: float) -> float:
        t, _ = _per_request(label, "prefill", {"vector_op_cycles": v, **_regions(prefill=side)},
                            seq=CONTEXT)
        return CONTEXT / t

    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tpr(mid) > target else (lo, mid)
    return round((lo + hi) / 2, 1)


def sensitivity(param: str = "beta_cycles", values: tuple = (10.0, 20.0, 40.0)) -> None:
    """Print the ratio (ours / paper) of the GEMV and decode rows for each value of one
    ``wse2`` parameter (default: PLMR beta, the estimate they depend on most)."""
    table = {v: gemv_rows({param: v}) + decode_rows({param: v}) for v in values}
    print("metric | " + " | ".join(f"{param}={v:g}" for v in values))
    for i, row in enumerate(table[values[0]]):
        print(row.metric + " | " + " | ".join(
            f"{table[v][i].ours:.4g} ({table[v][i].ratio:.2f})" for v in values))
