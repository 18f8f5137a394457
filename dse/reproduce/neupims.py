"""Reproduction of NeuPIMs (Heo et al., ASPLOS 2024) with the ``npu_pim`` template.

Every figure of the paper's text the tool can be asked [P arXiv 2403.00579, Sec. 1, 8.2]:
throughput of batched decode over GPU-only, NPU-only and naive NPU+PIM (averaged over the
paper's grid of models, datasets and batch sizes, Fig. 12, and its range across models and
datasets), naive NPU+PIM over NPU-only, the ablation of Fig. 13 (dual row buffers, greedy
balancing, sub-batch interleaving across batch sizes), ShareGPT against Alpaca, and Table 4's
NPU and PIM utilisation.

Set-up, after NeuPIMs' public configurations [R casys-kaist/NeuPIMs]:

* models split over 4 devices by tensor parallelism (``n_tp`` 4), GPT-3 13B and 30B also
  over 2 pipeline stages (``n_pp`` 2: one stage, half of the layers, is simulated)
  [R configs/model_configs/gpt3-*.json, trace-generator; see ``MODELS``]; every design is
  simulated on one device's share (:func:`workloads.requests.shard_tensor_parallel`), so the
  ratios are per device;
* ShareGPT-like (means 80 in / 296 out tokens) and Alpaca-like (12 / 56) requests as a
  continuously batched server holds them at a random moment, seed 0
  (:func:`workloads.requests.steady_state_batch`) [P Sec. 8.1], batch sizes 64-512
  [P Fig. 12] where the device's PIM banks hold the weights and the page-aligned KV cache
  (the others are left out of the grid, and the note says which);
* NeuPIMs: ``npu_pim`` preset ``neupims`` (dual row buffers, greedy channel balancing,
  sub-batch interleaving from batch 256 on, as its repository runs it [R README.md]); naive NPU+PIM: preset ``npu+pim`` (blocked PIM, no interleaving,
  round-robin channels [P Sec. 8.1]); NPU-only: preset ``npu-only`` (the same NPU and 32 HBM2
  channels, attention on the NPU); GPU-only: ``gpu:a100-40gb`` (1.555 TB/s, 40 GB; its
  GEMMs load the A100 calibration fitted on Vidur's measured A100 profiles)
  [P Sec. 8.1: A100 40 GB; D].

Nothing here is fitted: every number is the templates' as they are.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from accelerators.npu_pim import NeuPIMs
from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.requests import batched_decode, steady_state_batch

#: Throughput of NeuPIMs over GPU-only, NPU-only and naive NPU+PIM [P abstract, Sec. 8.2].
PAPER = {"gpu": 3.0, "npu": 2.4, "naive": 1.6}
#: NeuPIMs over naive NPU+PIM "adding 13% to 3x throughput across models and datasets"
#: [P Sec. 8.2].
PAPER_RANGE = (1.13, 3.0)
#: Naive NPU+PIM over NPU-only, "an average 1.5x improvement" [P Sec. 8.2].
PAPER_NAIVE_OVER_NPU = 1.5
#: Dual row buffers alone over NPU+PIM: "an average 69.7% throughput improvement"
#: [P Sec. 8.2, Fig. 13: GPT3-7B, ShareGPT].
PAPER_DRB_GAIN = 1.697
#: "At batch size 256 or larger, NeuPIMs achieves the highest throughput" [P Sec. 8.2].
PAPER_SBI_FROM_BATCH = 256
#: Table 4 (GPT3-30B, batch 256, ShareGPT) and Sec. 1: NPU and PIM compute utilisation, %.
PAPER_UTILISATION = {("npu+pim", "npu"): 28.0, ("neupims", "npu"): 64.9,
                     ("neupims", "pim"): 26.4, ("npu+pim", "pim"): 17.0}
#: Sec. 8.2, Table 5: NeuPIMs draws 1.8x NPU-only's memory power (DRAMsim3's Micron model)
#: "while providing 2.4x speedup, corresponding to a 25% energy reduction".
PAPER_MEMORY_POWER = 1.8
PAPER_MEMORY_ENERGY = 0.75

#: (zoo model, tensor-parallel degree, pipeline stages): 7B and 30B as NeuPIMs'
#: configs/model_configs (TP 4; 30B PP 2) [R]. 13B's config (TP 4, PP 1) does not fit one
#: device's channels at batch 256 under NeuPIMs' page-aligned KV layout with our request
#: lengths (the busiest bank needs 33.6 MiB of 32 MiB); we use TP 4 x PP 2, one of the 13B
#: layouts of the repository's trace generator [R trace-generator/get_distributions.py].
MODELS = (("gpt3-7b", 4, 1), ("gpt3-13b", 4, 2), ("gpt3-30b", 4, 2))
DATASETS = ("sharegpt", "alpaca")
#: Batch sizes of the paper's Fig. 12 and 13.
BATCHES = (64, 128, 256, 384, 512)
#: Table 4's configuration.
UTILISATION_AT = ("gpt3-30b", "sharegpt", 256)
SEED = 0
DTYPE = "fp16"
#: The paper's GPU-only baseline, an A100 40 GB [P Sec. 8.1]: the preset (datasheet, and the
#: calibration of accelerators/calibration/a100.json).
GPU_BASELINE = "gpu:a100-40gb"
#: Designs run at every point of the grid, and the ablation's (7B, ShareGPT only).
GRID_DESIGNS = ("neupims", "npu+pim", "npu-only", "gpu")
ABLATION = ("dual-buffers-only", "dual-buffers+balancing", "interleave-always")


def workload(model: str, batch: int, tp: int, pp: int, seed: int = SEED,
             dataset: str = "sharegpt"):
    """One device's share of a decode step serving ``batch`` requests of ``dataset``."""
    from workloads.zoo import get_model

    reqs = steady_state_batch(dataset, batch, seed=seed)
    arch = None
    if pp > 1:
        arch = {"n_layer": get_model(model).arch["n_layer"] // pp}
    return batched_decode(model, reqs, dtype=DTYPE, arch=arch, tensor_parallel=tp)


def _design(name: str, hw: dict[str, Any] | None):
    if name == "gpu":
        return make_accelerator(GPU_BASELINE, {})
    if name == "interleave-always":   # NeuPIMs with sub-batches at every batch size
        return NeuPIMs("neupims", **{**(hw or {}), "sub_batch_min_requests": 2})
    preset = {"naive": "npu+pim", "npu": "npu-only"}.get(name, name)
    return NeuPIMs(preset, **(hw or {}))


def fits(model: str, dataset: str, batch: int, hw: dict[str, Any] | None = None) -> bool:
    """Whether one NeuPIMs device holds the share's weights and page-aligned KV cache."""
    tp, pp = _layout(model)
    return NeuPIMs("neupims", **(hw or {})).check(
        workload(model, batch, tp, pp, dataset=dataset)) is None


def _layout(model: str) -> tuple[int, int]:
    return next((tp, pp) for m, tp, pp in MODELS if m == model)


def run_point(model: str, dataset: str, batch: int, designs, hw: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """Tokens/s per device of each of ``designs`` (and the NPU / PIM compute utilisation of
    the ``npu_pim`` ones) at one point of the grid."""
    tp, pp = _layout(model)
    w = workload(model, batch, tp, pp, dataset=dataset)
    out: dict[str, Any] = {}
    for name in designs:
        d = _design(name, hw)
        r = simulate(w, d)
        out[name] = r.throughput
        mem = r.energy_breakdown_j.get("offchip_memory", 0.0)
        out[(name, "memory_power_w")] = mem / r.latency_s
        out[(name, "memory_energy_per_token_j")] = mem / (r.throughput * r.latency_s)
        if isinstance(d, NeuPIMs):
            out[(name, "utilisation")] = d.compute_utilisation(r)
    return out


def _grid(hw_items: tuple) -> dict[tuple[str, str, int], dict[str, Any]]:
    hw = dict(hw_items) or None
    grid = {}
    for model, _, _ in MODELS:
        for dataset in DATASETS:
            for batch in BATCHES:
                if not fits(model, dataset, batch, hw):
                    continue
                designs = GRID_DESIGNS
                if (model, dataset) == ("gpt3-7b", "sharegpt"):
                    designs = designs + ABLATION
                grid[(model, dataset, batch)] = run_point(model, dataset, batch, designs, hw)
    return grid


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation of two equally long lists without ties."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0] * len(v)
        for rank, i in enumerate(order):
            r[i] = rank
        return r
    n = len(xs)
    d2 = sum((a - b) ** 2 for a, b in zip(ranks(xs), ranks(ys)))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))


def _where(points) -> str:
    by: dict[tuple[str, str], list[int]] = {}
    for model, dataset, batch in points:
        by.setdefault((model, dataset), []).append(batch)
    return "; ".join(f"{m} {d} batch {','.join(map(str, b))}" for (m, d), b in by.items())


def rows(hw: dict[str, Any] | None = None) -> list[Row]:
    """``hw``: overrides applied to every ``npu_pim`` design."""
    grid = _grid(tuple(sorted((hw or {}).items())))
    out = []
    where = _where(grid)
    gain = {k: v["neupims"] / v["npu+pim"] for k, v in grid.items()}

    # headline: averages over the paper's grid (Fig. 12)
    for key, label in (("gpu", "GPU-only (A100 40GB)"), ("npu-only", "NPU-only"),
                       ("npu+pim", "naive NPU+PIM")):
        ratios = [v["neupims"] / v[key] for v in grid.values()]
        out.append(Row(f"NeuPIMs throughput over {label}, mean over the grid", 
                       PAPER[{"npu-only": "npu", "npu+pim": "naive"}.get(key, key)],
                       mean(ratios), f"{len(ratios)} points ({where}); range "
                       f"{min(ratios):.2f}-{max(ratios):.2f}", source="Abstract; Sec. 8.2, Fig. 12"))

    # the range across models and datasets, at each one's largest batch that fits
    for model, _, _ in MODELS:
        for dataset in DATASETS:
            batches = [b for (m, d, b) in grid if (m, d) == (model, dataset)]
            if not batches:
                continue
            b = max(batches)
            v = grid[(model, dataset, b)]
            note = (f"batch {b}: tokens/s per device NeuPIMs {v['neupims']:.0f}, naive "
                    f"{v['npu+pim']:.0f}, NPU-only {v['npu-only']:.0f}, A100-40GB {v['gpu']:.0f}; "
                    "gain at every batch " + ", ".join(
                        f"{bb}: {gain[(model, dataset, bb)]:.2f}x" for bb in sorted(batches)))
            out.append(Row(f"{model} {dataset}: NeuPIMs over naive NPU+PIM (largest batch)",
                           PAPER_RANGE, gain[(model, dataset, b)], note,
                           source="Sec. 8.2 ('13% to 3x across models and datasets')"))

    naive_npu = [v["npu+pim"] / v["npu-only"] for v in grid.values()]
    out.append(Row("naive NPU+PIM throughput over NPU-only, mean over the grid",
                   PAPER_NAIVE_OVER_NPU, mean(naive_npu),
                   f"range {min(naive_npu):.2f}-{max(naive_npu):.2f}", source="Sec. 8.2"))
    gpu_npu = [v["gpu"] / v["npu-only"] for v in grid.values()]
    out.append(Row("GPU-only throughput over NPU-only, mean over the grid",
                   PAPER["npu"] / PAPER["gpu"], mean(gpu_npu),
                   f"range {min(gpu_npu):.2f}-{max(gpu_npu):.2f}; the paper: 'marginal "
                   "differences', and 2.4x / 3x of its headline", source="Sec. 8.2; Abstract"))

    # ablation (Fig. 13: GPT3-7B, ShareGPT)
    abl = sorted((b, v) for (m, d, b), v in grid.items() if (m, d) == ("gpt3-7b", "sharegpt"))
    if abl:
        batches = [b for b, _ in abl]
        drb = [v["dual-buffers-only"] / v["npu+pim"] for _, v in abl]
        out.append(Row("gpt3-7b sharegpt: dual row buffers alone over naive NPU+PIM, mean over "
                       "batches", PAPER_DRB_GAIN, mean(drb),
                       "gains " + ", ".join(f"{b}: {g:.3f}x" for b, g in zip(batches, drb)),
                       source="Sec. 8.2, Fig. 13"))
        helps = [v["dual-buffers+balancing"] > v["dual-buffers-only"] for _, v in abl]
        out.append(Row("gpt3-7b sharegpt: greedy min-load bin packing helps (share of batches)",
                       1.0, sum(helps) / len(helps), f"batches {batches}",
                       source="Sec. 8.2, Fig. 13 ('always helps')"))
        sbi = [b for b, v in abl if v["interleave-always"] > v["dual-buffers+balancing"]]
        first = min(sbi) if sbi else float("inf")
        out.append(Row("gpt3-7b sharegpt: smallest batch where sub-batch interleaving pays",
                       PAPER_SBI_FROM_BATCH, first,
                       "NeuPIMs over DRB + GMLBP: " + ", ".join(
                           f"{b}: {v['interleave-always'] / v['dual-buffers+balancing']:.2f}x"
                           for b, v in abl), source="Sec. 8.2, Fig. 13"))
        out.append(Row("gpt3-7b sharegpt: gain over naive NPU+PIM grows with batch (Spearman "
                       "rank correlation)", 1.0,
                       spearman(batches, [gain[("gpt3-7b", "sharegpt", b)] for b in batches]),
                       "gains " + ", ".join(f"{b}: {gain[('gpt3-7b', 'sharegpt', b)]:.2f}x"
                                            for b in batches), source="Sec. 8.2, Fig. 12-13"))

    pairs = [(m, b) for (m, d, b) in grid if d == "sharegpt" and (m, "alpaca", b) in grid]
    if pairs:
        larger = [gain[(m, "sharegpt", b)] > gain[(m, "alpaca", b)] for m, b in pairs]
        out.append(Row("gain over naive larger on ShareGPT than on Alpaca (share of model x "
                       "batch)", 1.0, sum(larger) / len(larger), f"{len(pairs)} pairs",
                       source="Sec. 8.2"))

    for key, paper, what in (("memory_power_w", PAPER_MEMORY_POWER, "memory power"),
                             ("memory_energy_per_token_j", PAPER_MEMORY_ENERGY,
                              "memory energy per token")):
        ratios = [v[("neupims", key)] / v[("npu-only", key)] for v in grid.values()]
        out.append(Row(f"NeuPIMs {what} over NPU-only, mean over the grid", paper,
                       sum(ratios) / len(ratios),
                       f"DRAM energy (reads, writes, activations, in-bank MACs, background) "
                       f"over {len(ratios)} points", source="Sec. 8.2, Table 5"))

    if UTILISATION_AT in grid:
        v = grid[UTILISATION_AT]
        m, d, b = UTILISATION_AT
        for (design, side), paper in PAPER_UTILISATION.items():
            u = v[(design, "utilisation")][side] * 100
            label = "NeuPIMs" if design == "neupims" else "naive NPU+PIM"
            out.append(Row(f"{m} {d} batch {b}: {side.upper()} compute utilisation of "
                           f"{label} (%)", paper, u,
                           "NPU: systolic-array compute time, PIM: command-stream time, over "
                           "the step", source="Sec. 8.2, Table 4" if paper != 17.0 else "Sec. 1"))
    return out
