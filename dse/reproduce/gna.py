"""Reproduction of Generalized Neighborhood Attention (Hassani et al., arXiv 2504.16922, 2025)
with the ``gpu`` template's ``h100`` and ``b200`` presets.

Paper values: NATTEN's published profiles [R: SHI-Labs/NATTEN docs/profiler.md, "Hopper and
Blackwell examples"]: the speed-up of NATTEN's Hopper / Blackwell FNA kernel over cuDNN dense
attention on the same GPU, token permute excluded, for

* 1-D, 32K tokens, 1 head of 128, window 2048: neighbourhood, stride 256, blocked (stride 2048);
* FLUX-like 2-D 256x256, 24 heads, window 80x80: neighbourhood, stride 16x16;
* HunyuanVideo-like 3-D 30x48x80, 24 heads, window 18x24x24: neighbourhood, stride 16x8x8;

the FLOP-bound speed-up of each (dense pairs over attended pairs); the paper's end-to-end
configurations on B200 (Table 5: HunyuanVideo with GNA in all 50 steps at 58 % and 91 %
sparsity; Sec. 4.2 and 5: in 35 of 50 steps; Table 6: FLUX-1.dev at 4K in 19 of 28 steps),
their self-attention runtimes and GNA's share of the workload; and attention's share of a
HunyuanVideo step measured by the STA paper.

Ours: the dense attention op and the GNA op (zoo ``sdpa`` and ``gna``) costed by the same
template, so a row is one op's time over the other's. Tiles as NATTEN ran them: Hopper
128 x 128 (2-D and 3-D layouts tiled 16x8 and 2x8x8), Blackwell 256 query x 128 key tokens
(FLUX queries tiled 16x16) [R: profiler.md]; masking ``whole_problem`` (NATTEN's FNA kernels
mask every tile unless the problem is fully block-sparse [R: NATTEN csrc]). Both GPUs use the
shipped H200 calibration for the kernel efficiencies (the H100 is the same GH100 die; the
B200's SMs are costed with the same per-SM softmax work, its peaks are the datasheet's): no
constant here is fitted to these rows. docs/validation.md (GNA section) explains the misses.
"""

from __future__ import annotations

import math
from typing import Any

from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from workloads.build import build_workload
from workloads.gna import GNAConfig, parse_shape

#: NATTEN profiles [R docs/profiler.md]: (case, variant) -> speed-up over cuDNN without the
#: token permute, per device.
PAPER_SPEEDUP = {
    ("1d", "neighbourhood"): {"h100": 8.3, "b200": 7.3},
    ("1d", "stride 256"): {"h100": 12.6, "b200": 11.4},
    ("1d", "blocked"): {"h100": 13.3, "b200": 11.1},
    ("flux", "neighbourhood"): {"h100": 6.0, "b200": 5.0},
    ("flux", "stride 16x16"): {"h100": 12.3, "b200": 10.5},
    ("hunyuan", "neighbourhood"): {"h100": 3.6, "b200": 3.2},
    ("hunyuan", "stride 16x8x8"): {"h100": 12.1, "b200": 10.4},
}
#: FLOP-bound speed-ups quoted with the profiles [R docs/profiler.md].
PAPER_FLOP_BOUND = {"1d": 16.0, "flux": 10.2, "hunyuan": 11.1}
#: Attention's share of HunyuanVideo inference on an H100 with FlashAttention-3, 720p 5 s
#: video, the 30x48x80 latent: 800 of 945 s [P: Zhang et al., "Fast Video Generation with
#: Sliding Tile Attention", ICML 2025, abstract]. It bounds what sparse attention can save.
PAPER_HUNYUAN_ATTENTION_SHARE = 800.0 / 945.0

#: The three problems: grid, window, heads, tiled layout's tile per device (None: row-major),
#: and the variants' strides.
CASES: dict[str, dict[str, Any]] = {
    "1d": {"grid": "32768", "window": "2048", "heads": 1, "tiles": None,
           "strides": {"neighbourhood": "1", "stride 256": "256", "blocked": "2048"}},
    "flux": {"grid": "256x256", "window": "80x80", "heads": 24,
             "tiles": {"h100": ("16x8", "16x8"), "b200": ("16x8", "16x16")},
             "strides": {"neighbourhood": "1", "stride 16x16": "16x16"}},
    # Blackwell: NATTEN pads 30 frames to a 4x8x8 query tile; our tiles must divide the grid,
    # so the B200 runs 2x8x8 query tiles of 128 tokens (docs/validation.md)
    "hunyuan": {"grid": "30x48x80", "window": "18x24x24", "heads": 24,
                "tiles": {"h100": ("2x8x8", "2x8x8"), "b200": ("2x8x8", "2x8x8")},
                "strides": {"neighbourhood": "1", "stride 16x8x8": "16x8x8"}},
}

#: Per device: preset and the kernel's tile (query, key tokens) [R: NATTEN docs].
DEVICES = {"h100": ("gpu:h100", 128, 128), "b200": ("gpu:b200", 256, 128)}
HEAD_DIM = 128
DTYPE = "bf16"


def design(device: str, block_q: int | None = None):
    """The GPU of ``device`` as the rows cost it."""
    spec, bq, bkv = DEVICES[device]
    return make_accelerator(spec, {"calibration": "h200", "attention_block_q": block_q or bq,
                                   "attention_block_kv": bkv,
                                   "attention_mask_policy": "whole_problem"})


def _tokens(grid: str) -> int:
    return GNAConfig.parse(grid).tokens


def op_speedup(case: str, variant: str, device: str) -> tuple[float, dict[str, Any]]:
    """Dense attention time over GNA op time (token permute excluded), and the GNA op's
    details (tiles, bounds, times)."""
    c = CASES[case]
    n, heads = _tokens(c["grid"]), c["heads"]
    arch: dict[str, Any] = {"grid": c["grid"], "window": c["window"],
                            "stride": c["strides"][variant], "heads": heads,
                            "head_dim": HEAD_DIM}
    block_q = None
    if c["tiles"]:
        arch.update(layout="tiled", tile=c["tiles"][device][0], q_tile=c["tiles"][device][1])
        block_q = math.prod(parse_shape(arch["q_tile"], "q_tile"))   # one query tile a block
    gpu = design(device, block_q)
    dense = build_workload("sdpa", dtype=DTYPE, arch={"b": 1, "h": heads, "sq": n, "skv": n,
                                                      "d": HEAD_DIM, "causal": False,
                                                      "kv_heads": heads})
    sparse = build_workload("gna", dtype=DTYPE, arch=arch)
    dense_s = gpu.cost(dense.ops[0]).latency_s
    op = next(o for o in sparse.ops if o.kind == "sparse_attention")
    cost = gpu.cost(op)
    permute_s = sum(gpu.cost(o).latency_s for o in sparse.ops if o is not op)
    return dense_s / cost.latency_s, {**cost.details, "dense_s": dense_s,
                                      "sparse_s": cost.latency_s, "permute_s": permute_s}


def kernel_rows() -> list[Row]:
    rows = []
    for case, c in CASES.items():
        cfg = GNAConfig.parse(c["grid"], c["window"])
        rows.append(Row(f"{case} {c['grid']} window {c['window']}: FLOP-bound speed-up",
                        PAPER_FLOP_BOUND[case], (cfg.tokens ** 2) / cfg.attended_pairs(),
                        "dense pairs / attended pairs, exact",
                        source="NATTEN docs/profiler.md; GNA Sec. 3"))
        for variant in c["strides"]:
            for device in DEVICES:
                ours, d = op_speedup(case, variant, device)
                rows.append(Row(
                    f"{case} {variant}: {device.upper()} speed-up over dense",
                    PAPER_SPEEDUP[(case, variant)][device], ours,
                    f"{d['block_q']}x{d['block_kv']} tiles: {d['kv_blocks_full']} full + "
                    f"{d['kv_blocks_partial']} partial ({d['masked_tiles']} masked), block "
                    f"bound {d['block_bound_speedup']:.2f}x; dense {d['dense_s'] * 1e3:.3f} ms,"
                    f" GNA {d['sparse_s'] * 1e3:.3f} ms (+ permute {d['permute_s'] * 1e3:.3f}"
                    " ms)", source="NATTEN docs/profiler.md (GNA Sec. 4.1)"))
    return rows


#: Table 5 [P Sec. 4.2]: HunyuanVideo (30x48x80 tokens) on B200 with sparsity in all 50
#: diffusion steps: (window, stride) -> actual end-to-end speed-up over self attention.
PAPER_HUNYUAN_ALL_STEPS = {("30x40x40", "1x1x1"): 1.15, ("30x40x40", "30x40x40"): 1.28,
                           ("30x40x40", "1x32x8"): 1.53, ("18x24x24", "1x1x1"): 1.73,
                           ("18x24x24", "18x24x24"): 2.00, ("18x24x24", "16x8x8"): 2.23}
#: Table 5's FLOP-wise analytical end-to-end speed-ups, by window (58.3 % and 91 % sparsity).
PAPER_HUNYUAN_FLOPWISE = {"30x40x40": 1.55, "18x24x24": 2.23}
#: Self-attention runtimes on B200, s [P Tables 5 and 6]: HunyuanVideo, 50 steps; FLUX-1.dev at
#: 4K, 28 steps (whole generation: text encoders and VAE decode too, :data:`PIPELINE_ONCE`).
PAPER_SA_RUNTIME_S = {"hunyuan-dit": 628.0, "flux-dit": 129.0}
#: Sec. 4.2 and 5: HunyuanVideo with window 18x24x24, stride 16x8x8 in 35 of 50 steps (the
#: first 15 keep self attention): 1.63x realised, GNA's share ~42 % of the workload.
PAPER_HUNYUAN_SCHEDULE = {"window": "18x24x24", "stride": "16x8x8", "dense_steps": 15,
                          "steps": 50, "speedup": 1.63, "gna_share": 0.42}
#: Table 6 and Sec. 4.3: FLUX-1.dev at 4K (256x256), window 80x80 in 19 of 28 steps (the first
#: 9 keep self attention): stride -> actual speed-up; FLOP-wise bound 1.46x, GNA's share ~35 %.
PAPER_FLUX_SCHEDULE = {"window": "80x80", "dense_steps": 9, "steps": 28,
                       "speedups": {"1x1": 1.37, "16x1": 1.40, "16x16": 1.45},
                       "flopwise": 1.46, "gna_share": 0.35}


#: What each pipeline runs once per generation besides its DiT steps: (zoo model, build
#: arguments). HunyuanVideo [R: Tencent/HunyuanVideo ``hyvideo/constants.py``,
#: ``hyvideo/text_encoder``]: its MLLM text encoder (llava-llama-3-8b: Llama 3 8B sizes; the
#: prompt padded to ``text_len`` 256 after the 95-token ``dit-llm-encode-video`` template, all
#: 32 layers run, hidden states taken 2 from the end), CLIP-L on 77 tokens, the causal 3-D VAE
#: decoder of the 30x96x160 latent. FLUX.1-dev [R: black-forest-labs/flux ``sampling.py``,
#: ``cli.py``]: T5 v1.1 XXL on 512 tokens, CLIP-L on 77, the VAE decoder of the 512x512
#: latent. Neither runs classifier-free guidance (HunyuanVideo's released sampler uses the
#: embedded guidance, ``cfg_scale`` 1; FLUX.1-dev is guidance-distilled), so each encoder runs
#: once per prompt and each step is one transformer pass at batch 1.
PIPELINE_ONCE: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "hunyuan-dit": (("hunyuan-vae-decoder", {}), ("llama3-8b", {"phase": "prefill", "seq": 351}),
                    ("clip-text", {"seq": 77})),
    "flux-dit": (("flux-vae-decoder", {}), ("t5-encoder", {"seq": 512}),
                 ("clip-text", {"seq": 77})),
}


def once_per_generation(model: str, gpu) -> tuple[dict[str, float], float]:
    """(seconds of each part ``model``'s pipeline runs once per generation, their FLOPs in
    all) on ``gpu``, each part captured from its zoo model and costed op by op like a step."""
    seconds, flops = {}, 0.0
    for part, kwargs in PIPELINE_ONCE[model]:
        s, f, _ = step_time(gpu, build_workload(part, dtype=DTYPE, **kwargs))
        seconds[part], flops = s, flops + f
    return seconds, flops


def _once_note(parts: dict[str, float]) -> str:
    return "generation = DiT steps + " + ", ".join(f"{p} {s:.3g} s" for p, s in parts.items())


def dit_steps(model: str, device: str) -> tuple[Any, Any, Any]:
    """``(gpu, dense step workload, GNA step workload)`` of a zoo diffusion transformer
    (``flux-dit``, ``hunyuan-dit``) on ``device``: the same model captured with self attention
    and with GNA (its default pattern; :func:`step_time` re-patterns it)."""
    gpu = design(device, 128 if model == "hunyuan-dit" or device == "h100" else 256)
    dense = build_workload(model, dtype=DTYPE, arch={"attention": "dense"})
    sparse = build_workload(model, dtype=DTYPE, arch={"attention": "gna"})
    return gpu, dense, sparse


def step_time(gpu, workload) -> tuple[float, float, float]:
    """``(s, FLOPs, attention s)`` of one transformer step: the GPU runs one kernel at a time,
    so a step is the sum of its ops' times (what the event simulation gives with nothing to
    overlap; summed because the physical model refuses the B200's package,
    docs/validation.md)."""
    costs = gpu.costs(gpu.plan(workload))
    attention = sum(c.latency_s for op, c in zip(workload.ops, costs)
                    if op.kind in ("attention", "sparse_attention"))
    return sum(c.latency_s for c in costs), float(workload.flops), attention


def schedule_speedup(dense: float, sparse: float, dense_steps: int, steps: int,
                     once: float = 0.0) -> float:
    """Whole-generation speed-up when the first ``dense_steps`` of ``steps`` keep self
    attention and the rest run GNA (steps otherwise identical); ``once``: what the pipeline
    runs once per generation (text encoders, VAE decode), in the same unit."""
    return ((steps * dense + once)
            / (dense_steps * dense + (steps - dense_steps) * sparse + once))


def e2e_rows() -> list[Row]:
    """Whole-model rows: the paper's end-to-end configurations (Tables 5 and 6, Sec. 4.2-5),
    each step costed by the same model as the kernel rows; a generation is its DiT steps plus
    what the pipeline runs once (:data:`PIPELINE_ONCE`), in time and in FLOPs."""
    from workloads.sparse_attention import with_gna_pattern

    rows = []
    src5, src6 = "Sec. 4.2, Table 5", "Sec. 4.3, Table 6"
    # HunyuanVideo on B200
    gpu, dense_w, gna_w = dit_steps("hunyuan-dit", "b200")
    dense_s, dense_f, attn_s = step_time(gpu, dense_w)
    parts, once_f = once_per_generation("hunyuan-dit", gpu)
    once_s, held = sum(parts.values()), _once_note(parts)
    n = 50
    rows.append(Row("hunyuan-dit: self-attention generation time on B200, 50 steps (s)",
                    PAPER_SA_RUNTIME_S["hunyuan-dit"], n * dense_s + once_s,
                    f"{dense_s:.2f} s per DiT step, attention {attn_s / dense_s:.0%}; {held}",
                    source=src5))
    per_window: dict[str, tuple[float, float]] = {}
    for (window, stride), paper in PAPER_HUNYUAN_ALL_STEPS.items():
        w = with_gna_pattern(gna_w, window=window, stride=stride)
        s, f, _ = step_time(gpu, w)
        per_window.setdefault(window, (s, f))
        rows.append(Row(f"hunyuan-dit window {window} stride {stride}: end-to-end speed-up on "
                        "B200, GNA in all 50 steps", paper,
                        schedule_speedup(dense_s, s, 0, n, once_s),
                        f"step {dense_s:.2f} s dense, {s:.2f} s GNA; {held}", source=src5))
    for window, paper in PAPER_HUNYUAN_FLOPWISE.items():
        _, f = per_window[window]
        rows.append(Row(f"hunyuan-dit window {window}: FLOP-wise end-to-end speed-up, all "
                        "steps", paper, schedule_speedup(dense_f, f, 0, n, once_f),
                        f"FLOPs of the dense generation over the GNA one (once per generation:"
                        f" {once_f / 1e15:.2f} PFLOP)", source=src5))
    h = PAPER_HUNYUAN_SCHEDULE
    s, f, _ = step_time(gpu, with_gna_pattern(gna_w, window=h["window"], stride=h["stride"]))
    rows.append(Row(f"hunyuan-dit window {h['window']} stride {h['stride']}, GNA in "
                    f"{h['steps'] - h['dense_steps']} of {h['steps']} steps: end-to-end "
                    "speed-up on B200", h["speedup"],
                    schedule_speedup(dense_s, s, h["dense_steps"], h["steps"], once_s),
                    f"first 15 steps keep self attention; {held}", source="Sec. 4.2, Sec. 5"))
    gna_share = (h["steps"] - h["dense_steps"]) * attn_s / (h["steps"] * dense_s + once_s)
    rows.append(Row("hunyuan-dit: GNA's share of the generation (attention of the GNA steps)",
                    h["gna_share"], gna_share, "attention time of the 35 GNA steps over the "
                    f"dense generation's time; {held}", source="Sec. 4.2"))

    # FLUX-1.dev at 4K on B200
    gpu, dense_w, gna_w = dit_steps("flux-dit", "b200")
    dense_s, dense_f, attn_s = step_time(gpu, dense_w)
    parts, once_f = once_per_generation("flux-dit", gpu)
    once_s, held = sum(parts.values()), _once_note(parts)
    fl = PAPER_FLUX_SCHEDULE
    rows.append(Row("flux-dit: self-attention generation time on B200 at 4K, 28 steps (s)",
                    PAPER_SA_RUNTIME_S["flux-dit"], fl["steps"] * dense_s + once_s,
                    f"{dense_s:.2f} s per DiT step, attention {attn_s / dense_s:.0%}; {held}",
                    source=src6))
    for stride, paper in fl["speedups"].items():
        s, f, _ = step_time(gpu, with_gna_pattern(gna_w, window=fl["window"], stride=stride))
        rows.append(Row(f"flux-dit window {fl['window']} stride {stride}, GNA in 19 of 28 steps:"
                        " end-to-end speed-up on B200", paper,
                        schedule_speedup(dense_s, s, fl["dense_steps"], fl["steps"], once_s),
                        f"step {dense_s:.2f} s dense, {s:.2f} s GNA; {held}", source=src6))
    flops_bound = schedule_speedup(dense_f, f, fl["dense_steps"], fl["steps"], once_f)
    rows.append(Row("flux-dit window 80x80, GNA in 19 of 28 steps: FLOP-wise end-to-end bound",
                    fl["flopwise"], flops_bound, "FLOPs of the dense generation over the "
                    f"scheduled one (once per generation: {once_f / 1e15:.2f} PFLOP)",
                    source=src6))
    rows.append(Row("flux-dit: GNA's share of the generation (attention of the GNA steps)",
                    fl["gna_share"], (fl["steps"] - fl["dense_steps"]) * attn_s
                    / (fl["steps"] * dense_s + once_s), "attention time of the 19 GNA steps "
                    f"over the dense generation's time; {held}", source="Sec. 4.3"))

    gpu, dense_w, _ = dit_steps("hunyuan-dit", "h100")
    dense_s, _, attn_s = step_time(gpu, dense_w)
    parts, _ = once_per_generation("hunyuan-dit", gpu)
    rows.append(Row("hunyuan-dit dense: attention share of a generation on H100, 50 steps",
                    PAPER_HUNYUAN_ATTENTION_SHARE, n * attn_s / (n * dense_s + sum(parts.values())),
                    f"dense step {dense_s:.1f} s; {_once_note(parts)}; STA measured 800 of 945 s "
                    "(FA3, whole inference)", source="STA (Zhang et al. 2025), abstract"))
    return rows


def rows() -> list[Row]:
    return kernel_rows() + e2e_rows()
