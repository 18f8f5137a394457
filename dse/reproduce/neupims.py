"""Reproduction of NeuPIMs (Heo et al., ASPLOS 2024) with the ``npu_pim`` template.

Throughput of batched decode (tokens/s) of NeuPIMs over three baselines on GPT-3 7B, 13B and
30B, paper 3x (GPU-only), 2.4x (NPU-only), 1.6x (naive NPU+PIM), and the trend that the gain
over naive NPU+PIM grows with batch size.

Set-up, after NeuPIMs' public configurations [R casys-kaist/NeuPIMs]:

* models split over 4 devices by tensor parallelism (``n_tp`` 4), GPT-3 13B and 30B also
  over 2 pipeline stages (``n_pp`` 2: one stage, half of the layers, is simulated)
  [R configs/model_configs/gpt3-*.json, trace-generator; see ``MODELS``]; every design is
  simulated on one device's share (:func:`workloads.requests.shard_tensor_parallel`), so the
  ratios are per device;
* ShareGPT-like requests (means 80 in / 296 out tokens) as a continuously batched server holds
  them at a random moment, seed 0 (:func:`workloads.requests.steady_state_batch`)
  [P Sec. 8.1], as many as one device holds: the largest of ``BATCH_CANDIDATES`` (512 down to
  256) whose weights and KV cache fit the device's PIM banks (:func:`largest_fitting_batch`).
  512 is the batch of the repository's default run (``brun.sh``: trace
  ``share-gpt2-bs512-ms7B-tp4``) and sub-batch interleaving is enabled only from 256 [R README];
* NeuPIMs: ``npu_pim`` preset ``neupims`` (dual row buffers, sub-batch interleaving, greedy
  channel balancing); naive NPU+PIM: preset ``npu+pim`` (blocked PIM, no interleaving);
  NPU-only: preset ``npu-only`` (the same NPU and 32 HBM2 channels, attention on the NPU);
  GPU-only: ``gpu:a100`` with the 40 GB part's bandwidth and capacity (1.555 TB/s, 40 GB)
  [P Sec. 8.1: A100 40 GB; D].
"""

from __future__ import annotations

from typing import Any

from accelerators.npu_pim import NeuPIMs
from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.requests import SHAREGPT, batched_decode, steady_state_batch

#: Throughput of NeuPIMs over GPU-only, NPU-only and naive NPU+PIM [P abstract, Sec. 8].
PAPER = {"gpu": 3.0, "npu": 2.4, "naive": 1.6}
#: The gain over naive NPU+PIM grows with batch size [P Sec. 8]: as a Spearman rank
#: correlation between batch size and gain, 1.0 = strictly increasing.
PAPER_TREND = 1.0

#: (zoo model, tensor-parallel degree, pipeline stages): 7B and 30B as NeuPIMs'
#: configs/model_configs (TP 4; 30B PP 2) [R]. 13B's config (TP 4, PP 1) does not fit one
#: device's channels at batch 256 under NeuPIMs' page-aligned KV layout with our request
#: lengths (the busiest bank needs 33.6 MiB of 32 MiB); we use TP 4 x PP 2, one of the 13B
#: layouts of the repository's trace generator [R trace-generator/get_distributions.py].
MODELS = (("gpt3-7b", 4, 1), ("gpt3-13b", 4, 2), ("gpt3-30b", 4, 2))
#: Batches tried per model, largest first: the repository's default run uses 512, and
#: NeuPIMs enables sub-batch interleaving only from 256 [R brun.sh, README].
BATCH_CANDIDATES = (512, 448, 384, 320, 256)
TREND_BATCHES = (64, 128, 256, 384)
SEED = 0
DTYPE = "fp16"
#: A100 40 GB: 1.555 TB/s HBM2e, 40 GB [D NVIDIA A100 datasheet].
A100_40GB = {"memory_bandwidth_Bps": 1.555e12, "memory_capacity_bytes": 40e9}


def workload(model: str, batch: int, tp: int, pp: int, seed: int = SEED):
    """One device's share of a decode step serving ``batch`` ShareGPT-like requests."""
    from workloads.zoo import get_model

    reqs = steady_state_batch(SHAREGPT, batch, seed=seed)
    arch = None
    if pp > 1:
        arch = {"n_layer": get_model(model).arch["n_layer"] // pp}
    return batched_decode(model, reqs, dtype=DTYPE, arch=arch, tensor_parallel=tp)


def largest_fitting_batch(model: str, tp: int, pp: int, hw: dict[str, Any] | None = None) -> int:
    """The largest of :data:`BATCH_CANDIDATES` whose share fits one NeuPIMs device (weights
    and page-aligned KV cache in its PIM banks); the smallest candidate if none does (its
    simulation then reports the reason)."""
    design = NeuPIMs("neupims", **(hw or {}))
    for batch in BATCH_CANDIDATES:
        if design.check(workload(model, batch, tp, pp)) is None:
            return batch
    return BATCH_CANDIDATES[-1]


def throughputs(model: str, batch: int, tp: int, pp: int, hw: dict[str, Any] | None = None,
                baselines: bool = True) -> dict[str, float]:
    """Tokens/s of NeuPIMs and the baselines on one device's share."""
    w = workload(model, batch, tp, pp)
    out = {"neupims": simulate(w, NeuPIMs("neupims", **(hw or {}))).throughput,
           "naive": simulate(w, NeuPIMs("npu+pim", **(hw or {}))).throughput}
    if baselines:
        out["npu"] = simulate(w, NeuPIMs("npu-only", **(hw or {}))).throughput
        out["gpu"] = simulate(w, make_accelerator("gpu:a100", A100_40GB)).throughput
    return out


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


def rows(hw: dict[str, Any] | None = None) -> list[Row]:
    """``hw``: overrides applied to every ``npu_pim`` design."""
    out = []
    for model, tp, pp in MODELS:
        batch = largest_fitting_batch(model, tp, pp, hw)
        t = throughputs(model, batch, tp, pp, hw)
        where = f"batch {batch}, TP {tp}" + (f", PP {pp} (one stage)" if pp > 1 else "")
        note = (f"{where}: tokens/s per device NeuPIMs {t['neupims']:.0f}, naive "
                f"{t['naive']:.0f}, NPU-only {t['npu']:.0f}, A100-40GB {t['gpu']:.0f}")
        for key, label in (("gpu", "GPU-only (A100 40GB)"), ("npu", "NPU-only"),
                           ("naive", "naive NPU+PIM")):
            out.append(Row(f"{model}: NeuPIMs throughput over {label}", PAPER[key],
                           t["neupims"] / t[key], note))
    gains = []
    for b in TREND_BATCHES:
        t = throughputs("gpt3-7b", b, 4, 1, hw, baselines=False)
        gains.append(t["neupims"] / t["naive"])
    out.append(Row("gpt3-7b: gain over naive NPU+PIM grows with batch (Spearman rank "
                   "correlation, batch 64-384)", PAPER_TREND,
                   spearman(list(TREND_BATCHES), gains),
                   "gains " + ", ".join(f"batch {b}: {g:.2f}x"
                                        for b, g in zip(TREND_BATCHES, gains))))
    return out
