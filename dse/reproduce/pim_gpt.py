"""Reproduction of PIM-GPT (Wu, Wang, Lu; arXiv 2310.09385, npj Unconventional Computing 2024)
with the ``pim`` template (``pim-gpt`` preset) against the ``gpu`` template's ``t4`` preset.

Rows, for each of the 8 GPT models (GPT-2 small/medium/large/XL from the zoo; GPT-3
small/medium/large/XL sizes built from the zoo's ``gpt2`` definition with ``arch`` overrides):

* token-generation speedup over the GPU, paper 41-137x across the 8 models;
* energy efficiency (GPU energy per token / PIM energy per token), paper 123-383x (journal
  version; the arXiv v1 abstract says 339-1085x).

Token generation: batch 1, decode steps generating tokens 1..1024 after a one-token prompt.
Both designs' per-token latency and energy are affine in the context length (weights are read
once per token, the KV cache grows linearly), so the mean over those steps equals the value at
the mean context, 512 tokens, which is what we simulate. The GPU runs the same captured
workload (fp16).

The T4 baseline is the ``gpu`` template's ``t4`` preset. By default it reports kernel time
(``runtime: kernels``); ``rows(gpu_hw={"runtime": "eager", "host_profile": FILE})`` (CLI:
``dse reproduce pim-gpt --gpu-hw runtime=eager --gpu-hw host_profile=FILE``) makes it PyTorch
eager wall time: each op's host dispatch from a measured host profile, overlapped with the
kernels. The profile is measured on whatever machine ran ``python -m
dse.calibrate.host_profile`` (the lent H100/H200 machines' CPUs, not the paper's T4 host,
which the paper does not describe beyond the card); nothing is fitted to the paper.
"""

from __future__ import annotations

from typing import Any

from accelerators.pim import PIM
from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.build import build_workload

#: Token-generation speedup of PIM-GPT over the GPU across its 8 models [P abstract].
PAPER_SPEEDUP = (41.0, 137.0)
#: Energy efficiency over the GPU across the 8 models [P npj Unconv. Computing 2024 abstract;
#: the arXiv v1 abstract gives 339-1085x].
PAPER_ENERGY = (123.0, 383.0)

#: GPT-3 sizes [P Brown et al. 2020, Table 2.1: n_layers, d_model, n_heads]. GPT-3 XL's table
#: row (d_model 2048, 24 heads of 128) is inconsistent (24 x 128 = 3072); we keep the head size
#: 128 and d_model 2048, i.e. 16 heads. d_ff = 4 d_model, context 2048 [P].
GPT3_SIZES = {
    "gpt3-small": dict(n_layer=12, d_model=768, n_head=12),      # 125M
    "gpt3-medium": dict(n_layer=24, d_model=1024, n_head=16),    # 350M
    "gpt3-large": dict(n_layer=24, d_model=1536, n_head=16),     # 760M
    "gpt3-xl": dict(n_layer=24, d_model=2048, n_head=16),        # 1.3B
}
GPT2_MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")

#: Mean context of generating 1024 tokens after a one-token prompt, tokens.
CONTEXT = 512
DTYPE = "fp16"
GPU = "gpu:t4"


def models() -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(label, zoo model, arch overrides)`` of the 8 PIM-GPT models."""
    out: list[tuple[str, str, dict[str, Any] | None]] = [(m, m, None) for m in GPT2_MODELS]
    for label, a in GPT3_SIZES.items():
        out.append((label, "gpt2", {**a, "d_ff": 4 * a["d_model"], "max_seq": 2048}))
    return out


def measure(model: str, arch: dict[str, Any] | None, hw: dict[str, Any] | None = None,
            gpu_hw: dict[str, Any] | None = None) -> dict[str, float]:
    """Per-token latency (s) and energy (J) of PIM-GPT and the T4 on one model."""
    w = build_workload(model, phase="decode", batch=1, context=CONTEXT, dtype=DTYPE, arch=arch)
    pim = simulate(w, PIM("pim-gpt", **(hw or {})))
    design = make_accelerator(GPU, gpu_hw)
    gpu = simulate(w, design)
    runtime = design.hw.runtime
    if design.host is not None:
        runtime += f", host profile {design.host.name} measured at " + str(
            design.host.source.get("where") if design.host.measured else "nowhere (unmeasured)")
    return {"pim_s": pim.latency_s, "pim_j": pim.energy_j, "gpu_s": gpu.latency_s,
            "gpu_j": gpu.energy_j, "params": w.params, "gpu_runtime": runtime}


def rows(hw: dict[str, Any] | None = None, gpu_hw: dict[str, Any] | None = None) -> list[Row]:
    """``hw``: overrides of the ``pim-gpt`` preset; ``gpu_hw``: of the ``t4`` preset."""
    out = []
    for label, model, arch in models():
        m = measure(model, arch, hw, gpu_hw)
        note = (f"{m['params'] / 1e6:.0f}M params, context {CONTEXT}: PIM "
                f"{m['pim_s'] * 1e3:.3f} ms / {m['pim_j'] * 1e3:.2f} mJ per token, T4 "
                f"{m['gpu_s'] * 1e3:.3f} ms / {m['gpu_j'] * 1e3:.1f} mJ ({m['gpu_runtime']})")
        out.append(Row(f"{label}: token-generation speedup over T4", PAPER_SPEEDUP,
                       m["gpu_s"] / m["pim_s"], note))
        out.append(Row(f"{label}: energy efficiency over T4", PAPER_ENERGY,
                       m["gpu_j"] / m["pim_j"], note))
    return out
