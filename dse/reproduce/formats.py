"""Reproduction of published results on number formats (issue 30), each against its source:

* **COMET** (Liu et al., "COMET: Towards Practical W4A4KV4 LLMs Serving", arXiv 2410.12168,
  abstract): on one A100-80G-SXM4, the W4Ax kernel is 2.88x cuBLAS (fp16) at kernel level,
  and COMET serves 2.02x the throughput of TensorRT-LLM end to end. Ours: the ``gpu:a100``
  preset (int4 tensor cores, 1,248 TOPS dense) running a Llama-2-7B MLP GEMM of 4,096 tokens
  with INT4 weights and activations in groups of 128 (COMET's FMPQ blocks) against bf16; and
  decode steps of Llama-2-7B at batch 64 and 1,024 tokens of context with W4A4KV4 against
  16-bit (TensorRT-LLM's baseline here taken as its fp16 engine [E: the abstract does not say]).
* **MR-GPTQ / QuTLASS** (Egiazarian et al., "Bridging the Gap Between Promise and Performance
  for Microscaling FP4 Quantization", arXiv 2509.23202, abstract): on a B200, speed-ups over
  FP16 of up to 3.6x layer-wise and 2.2x end to end. Ours: the ``gpu:b200`` preset, NVFP4
  weights and activations, the best of Llama-3-8B's linear layers at 1 to 8,192 tokens; end to
  end the generation (512 prompt, 256 output tokens, batch 32) of Llama-3-8B. (Their RTX 5090
  rows need a preset the template does not have.)
* **INT v.s. FP** (Chen et al., arXiv 2510.25602, ICML 2026, abstract): at 8 bits with MX
  blocks of 32, MXINT8 is more hardware-efficient than MXFP8 (the paper's table of energy and
  area could not be read here: the rows check the direction, ours against "below 1").
* **MXFP4 against NVFP4** (Chhugani et al., "Unveiling the Potential of Quantization with
  MXFP4", ICML 2026, abstract): MX's power-of-two scales save 12 % of tensor-core area.
  Ours: :mod:`accelerators.mac_formats`' per-MAC area, block scale units included.

No constant of the models is fitted to these rows: the GPU kernel families come from
``benchmarks/format_gemm_fit.py`` on H100 measurements, the MAC units from Horowitz's 45 nm
components. docs/validation.md ("Number formats") explains the misses.
"""

from __future__ import annotations

from accelerators import mac_formats as M
from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.build import build_workload
from workloads.formats import apply_formats

#: Llama-3-8B linear layers (N, K): q/o, k/v (grouped), MLP up, down.
LLAMA3_LAYERS = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))
TOKENS = (1, 16, 128, 1024, 4096, 8192)


def _gemm_s(design, m: int, n: int, k: int, formats: str | None) -> float:
    w = build_workload("linear", batch=1, arch={"m": m, "n": n, "k": k})
    if formats:
        w = apply_formats(w, formats)   # the micro model's one linear layer is its "head"
    return simulate(w, design).latency_s


def _decode_s(design, model: str, batch: int, context: int, formats: str | None) -> float:
    w = build_workload(model, phase="decode", batch=batch, context=context)
    if formats:
        w = apply_formats(w, formats)
    return simulate(w, design).latency_s


def rows() -> list[Row]:
    out: list[Row] = []
    a100 = make_accelerator("gpu:a100")
    w4a4 = "head=int4_g128,activations=int4_g128"
    kernel = _gemm_s(a100, 4096, 11008, 4096, None) / _gemm_s(a100, 4096, 11008, 4096, w4a4)
    out.append(Row("COMET W4Ax kernel speed-up over cuBLAS fp16, A100", 2.88, kernel,
                   "Llama-2-7B MLP up-projection, 4,096 tokens, INT4 g128 weights and "
                   "activations on the A100's int4 tensor cores (fused group dequant)"))
    full = "weights=int4_g128,activations=int4_g128,kv=int4_g128"
    e2e = (_decode_s(a100, "llama2-7b", 64, 1024, None)
           / _decode_s(a100, "llama2-7b", 64, 1024, full))
    out.append(Row("COMET W4A4KV4 serving throughput over TensorRT-LLM fp16, A100", 2.02, e2e,
                   "Llama-2-7B decode steps, batch 64, 1,024 tokens of context; the head and "
                   "attention queries stay 16-bit"))
    b200 = make_accelerator("gpu:b200")
    nv = "head=nvfp4,activations=nvfp4"
    best = max(_gemm_s(b200, m, n, k, None) / _gemm_s(b200, m, n, k, nv)
               for n, k in LLAMA3_LAYERS for m in TOKENS)
    out.append(Row("MR-GPTQ NVFP4 layer-wise speed-up over fp16, B200 (up to)", 3.6, best,
                   "best over Llama-3-8B's linear layers at 1-8,192 tokens, NVFP4 weights and "
                   "activations on the block-scaled fp4 tensor cores"))
    from simulators.generation import generate
    from simulators.iteration_cost import Target
    base = build_workload("llama3-8b", phase="decode", batch=1, context=1)
    t = Target(design=b200)
    g16 = generate(base, t, 512, 256, 32)
    g4 = generate(apply_formats(base, "weights=nvfp4,activations=nvfp4"), t, 512, 256, 32)
    out.append(Row("MR-GPTQ NVFP4 end-to-end speed-up over fp16, B200 (up to)", 2.2,
                   g4.tokens_per_s / g16.tokens_per_s,
                   "Llama-3-8B generation, 512 prompt + 256 output tokens, batch 32; the "
                   "paper's batch and lengths are not in its abstract [E]"))
    e_int, e_fp = M.mac_energy_j("mxint8", 7), M.mac_energy_j("mxfp8_e4m3", 7)
    a_int, a_fp = M.mac_area_mm2("mxint8", 7), M.mac_area_mm2("mxfp8_e4m3", 7)
    out.append(Row("INT v.s. FP: MXINT8 / MXFP8 MAC energy (below 1)", (0.0, 1.0), e_int / e_fp,
                   f"per MAC, block scales included: {e_int * 1e15:.1f} / {e_fp * 1e15:.1f} fJ "
                   "at 7 nm (accelerators.mac_formats)"))
    out.append(Row("INT v.s. FP: MXINT8 / MXFP8 MAC area (below 1)", (0.0, 1.0), a_int / a_fp,
                   f"per MAC: {a_int * 1e6:.0f} / {a_fp * 1e6:.0f} um^2 at 7 nm"))
    mx, nvf = M.mac_area_mm2("mxfp4", 7), M.mac_area_mm2("nvfp4", 7)
    out.append(Row("MXFP4 / NVFP4 tensor-core area (12 % saved)", 0.88, mx / nvf,
                   f"per MAC: {mx * 1e6:.0f} / {nvf * 1e6:.0f} um^2 at 7 nm; NVFP4's FP8 scales "
                   "need a multiplier where MX adds exponents"))
    return out
