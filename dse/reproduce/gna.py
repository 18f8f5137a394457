"""Reproduction of Generalized Neighborhood Attention (Hassani et al., arXiv 2504.16922, 2025)
with the ``gpu`` template's ``h100`` and ``b200`` presets.

Paper values: NATTEN's published profiles [R: SHI-Labs/NATTEN docs/profiler.md, "Hopper and
Blackwell examples"]: the speed-up of NATTEN's Hopper / Blackwell FNA kernel over cuDNN dense
attention on the same GPU, token permute excluded, for

* 1-D, 32K tokens, 1 head of 128, window 2048: neighbourhood, stride 256, blocked (stride 2048);
* FLUX-like 2-D 256x256, 24 heads, window 80x80: neighbourhood, stride 16x16;
* HunyuanVideo-like 3-D 30x48x80, 24 heads, window 18x24x24: neighbourhood, stride 16x8x8;

the FLOP-bound speed-up of each (dense pairs over attended pairs), the paper's end-to-end
speed-up on B200 (28-46 %, abstract), and attention's share of a HunyuanVideo step measured
by the STA paper (what bounds the end-to-end gain).

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
#: End-to-end speed-up on B200 over the paper's three models [P abstract: 28 % to 46 %].
PAPER_E2E = (1.28, 1.46)
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
                        "dense pairs / attended pairs, exact"))
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
                    " ms)"))
    return rows


def dense_and_gna_step(model: str, device: str) -> tuple[float, float, float]:
    """(dense s, GNA s, attention share of the dense step) of one transformer step of a zoo
    diffusion model, GNA in every layer with the model's default pattern. The GPU runs one
    kernel at a time, so a step is the sum of its ops' times (what the event simulation gives
    with nothing to overlap; summed here because the physical model refuses the B200's
    package, docs/validation.md)."""
    gpu = design(device, 128 if model == "hunyuan-dit" or device == "h100" else 256)
    times, share = {}, 0.0
    for attention in ("dense", "gna"):
        w = build_workload(model, dtype=DTYPE, arch={"attention": attention})
        costs = gpu.costs(gpu.plan(w))
        times[attention] = sum(c.latency_s for c in costs)
        if attention == "dense":
            share = sum(c.latency_s for op, c in zip(w.ops, costs)
                        if op.kind == "attention") / times["dense"]
    return times["dense"], times["gna"], share


def e2e_rows() -> list[Row]:
    rows = []
    for model in ("flux-dit", "hunyuan-dit"):
        dense, sparse, share = dense_and_gna_step(model, "b200")
        rows.append(Row(f"{model}: end-to-end step speed-up on B200 (GNA in every layer)",
                        PAPER_E2E, dense / sparse,
                        f"dense {dense:.2f} s (attention {share:.0%}), GNA {sparse:.2f} s; "
                        "the paper keeps dense attention in part of the steps/layers"))
    dense, _, share = dense_and_gna_step("hunyuan-dit", "h100")
    rows.append(Row("hunyuan-dit dense: attention share of a step on H100",
                    PAPER_HUNYUAN_ATTENTION_SHARE, share,
                    f"dense step {dense:.1f} s; STA measured 800 of 945 s (FA3, whole "
                    "inference)"))
    return rows


def rows() -> list[Row]:
    return kernel_rows() + e2e_rows()
