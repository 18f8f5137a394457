"""Reproduction of PIM-GPT (Wu, Wang, Lu; arXiv 2310.09385, npj Unconventional Computing 2024)
with the ``pim`` template (``pim-gpt`` preset) against the ``gpu`` template's ``t4`` preset.

Rows, for each of the 8 GPT models (GPT-2 small/medium/large/XL from the zoo; GPT-3
small/medium/large/XL sizes built from the zoo's ``gpt2`` definition with ``arch`` overrides):

* token-generation speedup over the GPU, paper 41-137x across the 8 models;
* energy efficiency (GPU energy per token / PIM energy per token), paper 123-383x (journal
  version; the arXiv v1 abstract says 339-1085x);
* the same two over the CPU (an Intel Xeon Gold 6154, the ``cpu`` template's
  ``xeon-gold-6154`` preset running the workload in fp32, PyTorch's CPU default, plus the same
  generate loop's per-token Python as the T4's, at the package's idle power), paper
  631-1074x and 320-602x (journal; v1: 890-1632x energy) [P abstract];
* Fig. 1's text: GPT3-XL has 1.15 billion parameters and 2.1 operations per parameter per
  generated token, ResNet-18 48.4 [P npj 2024, Sec. 1].

A range row passes only inside the range.

Token generation: batch 1, decode steps generating tokens 1..1024 after a one-token prompt.
Both designs' per-token latency and energy are affine in the context length (weights are read
once per token, the KV cache grows linearly), so the mean over those steps equals the value at
the mean context, 512 tokens, which is what we simulate. The GPU runs the same captured
workload (fp16).

The T4 baseline is the ``gpu`` template's ``t4`` preset run as Hugging Face ``generate`` in
PyTorch eager (the paper timed a framework, not tuned kernels): each op's host dispatch from the
shipped measured host profile ``lent-h100-xeon`` (the lent H100 machine's Xeon host, not the
paper's T4 host, which the paper does not describe beyond the card), overlapped with the
kernels, plus the profile ``lent-h100-xeon-generate``'s ``step_s``: the generation loop's and
the model's own Python per token, 10.5 ms, calibrated on OUR measurement of Hugging Face
``generate`` of GPT-2 on that machine (13.7 ms per token measured, 3.2 ms of it the per-op
dispatch the eager model already predicts; ``python benchmarks/gpu_baselines.py step-profile``,
``tests/data/h100_baselines/hf_models.json``). ``rows(gpu_hw=...)`` (CLI: ``dse reproduce
pim-gpt --gpu-hw host_profile=lent-h100-xeon`` for no per-token Python, ``runtime=kernels``
for tuned kernels) overrides it. Nothing is fitted to the paper.

Energy per token, each side as the tool counts it (docs/validation.md, pim-gpt section):

* PIM-GPT: the PIM-DRAM's row activations, in-bank reads and MACs, the bus transfers, the host
  ASIC's vector work and buffer, and the static power (the DRAM's background and the ASIC's
  leakage) for the token's time;
* T4: the board (no host): the kernels' MACs, DRAM and L2 bytes and uncounted logic, and for
  the whole wall time the board's idle power with a CUDA context held (the ``t4`` preset's
  ``context_idle_w``, 26 W measured on nvidia-smi in P0; an eager run's GPU waits on its host
  in P0);
* CPU: the package and its DRAM: per FLOP and per DRAM byte at the 200 W TDP's dynamic budget,
  the package's idle power for the wall time (the per-token Python included).
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
#: Speedup and energy efficiency over the CPU [P npj 2024 abstract; v1: 890-1632x energy].
PAPER_CPU_SPEEDUP = (631.0, 1074.0)
PAPER_CPU_ENERGY = (320.0, 602.0)
#: Fig. 1's text [P npj 2024, Sec. 1]: GPT3-XL parameters and operations per parameter of a
#: generated token; ResNet-18's operations per parameter.
PAPER_GPT3_XL_PARAMS = 1.15e9
PAPER_OPS_PER_PARAM = {"gpt3-xl": 2.1, "resnet18": 48.4}

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
#: The T4 as Hugging Face generate in PyTorch eager: the shipped measured host profile with the
#: per-token Python measured on our GPT-2 generate row (module docstring) [M].
GPU_HW = {"runtime": "eager", "host_profile": "lent-h100-xeon-generate"}
CPU = "cpu:xeon-gold-6154"
#: PyTorch runs on the CPU in fp32 by default.
CPU_DTYPE = "fp32"


def _arch(label: str) -> dict[str, Any]:
    """Zoo ``gpt2`` overrides of a GPT-3 size."""
    a = GPT3_SIZES[label]
    return {**a, "d_ff": 4 * a["d_model"], "max_seq": 2048}


def models() -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(label, zoo model, arch overrides)`` of the 8 PIM-GPT models."""
    out: list[tuple[str, str, dict[str, Any] | None]] = [(m, m, None) for m in GPT2_MODELS]
    out += [(label, "gpt2", _arch(label)) for label in GPT3_SIZES]
    return out


def measure(model: str, arch: dict[str, Any] | None, hw: dict[str, Any] | None = None,
            gpu_hw: dict[str, Any] | None = None) -> dict[str, float]:
    """Per-token latency (s) and energy (J) of PIM-GPT, the T4 and the CPU on one model."""
    w = build_workload(model, phase="decode", batch=1, context=CONTEXT, dtype=DTYPE, arch=arch)
    pim = simulate(w, PIM("pim-gpt", **(hw or {})))
    design = make_accelerator(GPU, {**GPU_HW, **(gpu_hw or {})})
    gpu = simulate(w, design)
    runtime = design.hw.runtime
    if design.host is not None:
        runtime += f", host profile {design.host.name} measured at " + str(
            design.host.source.get("where") if design.host.measured else "nowhere (unmeasured)")
    w32 = build_workload(model, phase="decode", batch=1, context=CONTEXT, dtype=CPU_DTYPE,
                         arch=arch)
    cpu_design = make_accelerator(CPU)
    cpu = simulate(w32, cpu_design)
    # the CPU baseline runs the same generate loop: its per-token Python (the host profile's
    # step_s, 0 without one) on the package at idle power (a lower bound: one busy core)
    step_s = design.host.step_s if design.host is not None else 0.0
    cpu_s = cpu.latency_s + step_s
    cpu_j = cpu.energy_j + step_s * cpu_design.hw.idle_power_w
    return {"pim_s": pim.latency_s, "pim_j": pim.energy_j, "gpu_s": gpu.latency_s,
            "gpu_j": gpu.energy_j, "cpu_s": cpu_s, "cpu_j": cpu_j,
            "params": w.params, "flops": w.flops, "gpu_runtime": runtime}


def rows(hw: dict[str, Any] | None = None, gpu_hw: dict[str, Any] | None = None) -> list[Row]:
    """``hw``: overrides of the ``pim-gpt`` preset; ``gpu_hw``: of the T4 (eager by default)."""
    out = []
    cpu_rows = []
    source = "Abstract (npj 2024)"
    for label, model, arch in models():
        m = measure(model, arch, hw, gpu_hw)
        note = (f"{m['params'] / 1e6:.0f}M params, context {CONTEXT}: PIM "
                f"{m['pim_s'] * 1e3:.3f} ms / {m['pim_j'] * 1e3:.2f} mJ per token "
                f"({m['pim_j'] / m['pim_s']:.1f} W), T4 {m['gpu_s'] * 1e3:.3f} ms / "
                f"{m['gpu_j'] * 1e3:.1f} mJ ({m['gpu_j'] / m['gpu_s']:.1f} W; "
                f"{m['gpu_runtime']})")
        out.append(Row(f"{label}: token-generation speedup over T4", PAPER_SPEEDUP,
                       m["gpu_s"] / m["pim_s"], note, source=source))
        out.append(Row(f"{label}: energy efficiency over T4", PAPER_ENERGY,
                       m["gpu_j"] / m["pim_j"], note, source=source))
        cnote = (f"Xeon Gold 6154, fp32: {m['cpu_s'] * 1e3:.2f} ms / {m['cpu_j'] * 1e3:.0f} mJ "
                 f"per token ({m['cpu_j'] / m['cpu_s']:.0f} W); PIM {m['pim_s'] * 1e3:.3f} ms / "
                 f"{m['pim_j'] * 1e3:.2f} mJ")
        cpu_rows.append(Row(f"{label}: token-generation speedup over CPU", PAPER_CPU_SPEEDUP,
                            m["cpu_s"] / m["pim_s"], cnote, source=source))
        cpu_rows.append(Row(f"{label}: energy efficiency over CPU", PAPER_CPU_ENERGY,
                            m["cpu_j"] / m["pim_j"], cnote, source=source))
    out += cpu_rows
    xl = build_workload("gpt2", phase="decode", batch=1, context=CONTEXT, dtype=DTYPE,
                        arch=_arch("gpt3-xl"))
    out.append(Row("gpt3-xl: parameters", PAPER_GPT3_XL_PARAMS, xl.params,
                   "GPT-3 XL as built here (d_model 2048, 24 layers, 16 heads of 128)",
                   source="Sec. 1, Fig. 1 (npj 2024)"))
    out.append(Row("gpt3-xl: operations per parameter of a generated token",
                   PAPER_OPS_PER_PARAM["gpt3-xl"], xl.flops / xl.params,
                   f"FLOPs of one decode step at context {CONTEXT} over parameters",
                   source="Sec. 1, Fig. 1 (npj 2024)"))
    r18 = build_workload("resnet18", batch=1, dtype=DTYPE)
    out.append(Row("resnet18: operations per parameter", PAPER_OPS_PER_PARAM["resnet18"],
                   r18.flops / r18.params, "one 224 x 224 image (the zoo's; the paper's text "
                   "states no input size), FLOPs over parameters, the unit of the GPT3-XL "
                   "row's 2.1 (2 per weight MAC)", source="Sec. 1, Fig. 1 (npj 2024)"))
    return out
