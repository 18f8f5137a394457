"""Time of a block-sparse fused attention kernel on a GPU: the ``sparse_attention`` op.

The kernel is the flash-attention kernel of :meth:`KernelModel.attention` that visits only the
(query block, key block) tiles the pattern needs (:func:`workloads.gna.op_tiles` counts them
exactly): one thread block per (batch, head, query block) of ``block_q`` queries walks its
visited key blocks of ``block_kv`` keys.

* A visited tile costs what a dense tile does: ``block_q x block_kv`` scores at the two GEMMs'
  ``2 (d + dv)`` FLOPs each (``attention_efficiency`` of the dense peak) plus
  ``attention_score_s`` of softmax per score, per SM; a query block adds ``attention_tile_s``
  (load Q, write O). Padding and masked-out pairs of a visited tile are computed and thrown
  away, which is why FLOP sparsity is not speed-up.
* A masked tile also evaluates the mask for each of its scores on the CUDA cores:
  ``mask_ops`` integer operations per score (the op's ``mask_ops``: the traced mask's
  operations) at one operation per FP32 lane per cycle (``peak_fp32_flops / 2`` per chip, the
  lanes of an FMA [D: H100 / B200 SMs have 128 FP32 lanes]). Which tiles are masked is the
  kernel's choice, ``mask_policy``: ``partial_tiles`` masks the partly needed tiles only
  (flex_attention's full / partial block lists [R: torch ``BlockMask``]); ``whole_problem``
  masks every visited tile unless no tile needs a mask (NATTEN's FNA kernels carry one
  ``is_fully_block_sparse`` flag per problem [R: SHI-Labs/NATTEN csrc, FNA mainloops]).
* Thread blocks fill the SMs in waves: ``compute = max(ceil(blocks / sms) x mean block time,
  longest block)``, which is the dense kernel's ``waves x tile`` when every block is alike.
* Memory: Q read and O written once; K and V once when one head's K/V fit a quarter of the
  L2, else once per wave of query blocks (the blocks in flight share tiles through the L2;
  the dense kernel's rule), at most once per visit.
* Kernel overheads (``kernel``): ``fna`` (NATTEN's FNA kernels: none beyond the above);
  ``flex`` (torch's Triton flex_attention): a visited tile also pays ``tile_s`` (the block
  list's indirection, its loads not overlapped with the previous tile's math), a query block
  ``q_block_s`` more prologue / epilogue, a masked tile ``masked_tile_s``; fitted on half of
  the project's H100 measurements (``benchmarks/gna_flex_attention.py fit``,
  :data:`FLEX_OVERHEADS_FILE`) and reported on the other half (docs/validation.md, GNA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import json
from functools import lru_cache
from pathlib import Path

from accelerators.gpu_efficiency import KernelModel
from workloads.gna import TileCounts, op_tiles
from workloads.ir import DTYPE_BYTES

MASK_POLICIES = ("partial_tiles", "whole_problem")
#: Block-sparse attention kernels: ``fna`` (NATTEN's), ``flex`` (torch flex_attention).
SPARSE_KERNELS = ("fna", "flex")
#: The flex_attention overheads fitted by ``benchmarks/gna_flex_attention.py fit`` [M: fitted
#: on half of tests/data/gna_flex_h100.json; the file names the cases].
FLEX_OVERHEADS_FILE = Path(__file__).resolve().parent / "calibration" / "flex_attention.json"
OVERHEAD_KEYS = ("q_block_s", "tile_s", "masked_tile_s")


@lru_cache(maxsize=1)
def flex_overheads() -> dict[str, float]:
    """The fitted per-query-block, per-tile and per-masked-tile overheads of flex_attention, s
    (per thread block on one SM)."""
    data = json.loads(FLEX_OVERHEADS_FILE.read_text())
    return {k: float(data["overheads"][k]) for k in OVERHEAD_KEYS}


def kernel_overheads(kernel: str) -> Mapping[str, float] | None:
    """The extra per-block / per-tile times of ``kernel`` (None for ``fna``)."""
    return flex_overheads() if kernel == "flex" else None


@dataclass(frozen=True)
class SparseAttentionTime:
    """Kernel time split (s), the FLOPs the kernel executes (visited tiles, 2 per MAC), the
    masked tiles (per attention map) and the tile counts."""

    latency_s: float
    compute_s: float
    memory_s: float
    executed_flops: float
    masked_tiles: int
    tiles: TileCounts

    def details(self) -> dict[str, Any]:
        """What the result JSON shows for the op: the tiles of one attention map (one batch
        entry and head), the masked ones, and the two speed-up bounds."""
        return {**self.tiles.to_dict(), "masked_tiles": self.masked_tiles}


def masked_tiles(tiles: TileCounts, policy: str) -> int:
    """Tiles of one attention map that evaluate the mask under ``policy``."""
    if policy == "whole_problem":
        return 0 if tiles.fully_block_sparse else tiles.visited
    return tiles.partial


def sparse_attention_time(model: KernelModel, attrs: Mapping[str, Any], dtype: str,
                          block_q: int, block_kv: int, policy: str,
                          lane_ops_per_s: float,
                          overheads: Mapping[str, float] | None = None) -> SparseAttentionTime:
    """Time of one ``sparse_attention`` op (its ``attrs``) on ``model``'s chip, ``block_q`` x
    ``block_kv`` tiles, masking ``policy``, ``lane_ops_per_s`` CUDA-core operations per second
    on the whole chip, the kernel's ``overheads`` (:func:`kernel_overheads`; module
    docstring)."""
    kn = model.k
    tiles = op_tiles(attrs, block_q, block_kv)
    bq, bkv = tiles.block_q, tiles.block_kv
    batch, heads = int(attrs.get("batch", 1)), int(attrs["heads"])
    kv_heads = int(attrs.get("kv_heads") or heads)
    d = int(attrs["head_dim"])
    dv = int(attrs.get("value_dim") or d)
    sms = model.chip.sms
    rate_sm = model.peak(dtype) * kn["attention_efficiency"] / sms
    tile_s = bq * bkv * (2.0 * (d + dv) / rate_sm + kn["attention_score_s"])
    masked = masked_tiles(tiles, policy)
    mask_tile_s = bq * bkv * float(attrs.get("mask_ops", 0) or 0) / (lane_ops_per_s / sms)
    over = overheads or {}
    tile_s += over.get("tile_s", 0.0)
    mask_tile_s += over.get("masked_tile_s", 0.0)
    block_s = kn["attention_tile_s"] + over.get("q_block_s", 0.0)
    maps = batch * heads
    blocks = maps * tiles.q_blocks
    work = maps * (tiles.q_blocks * block_s + tiles.visited * tile_s + masked * mask_tile_s)
    longest = block_s + tiles.max_visited * (
        tile_s + (mask_tile_s if masked else 0.0))
    compute = max(math.ceil(blocks / sms) * work / blocks, longest) if blocks else 0.0

    es = DTYPE_BYTES[dtype]
    q_len, kv_len = int(attrs["q_len"]), int(attrs["kv_len"])
    q_bytes = es * maps * q_len * (d + dv)
    kv_bytes = es * batch * kv_heads * kv_len * (d + dv)
    fits = kv_bytes / max(1, batch * kv_heads) <= model.chip.l2_bytes / 4
    visits = tiles.visited / max(1, math.ceil(kv_len / bkv))
    reads = 1.0 if fits else max(1.0, min(visits, math.ceil(tiles.q_blocks / sms)))
    memory = (q_bytes + kv_bytes * reads) / model.copy_Bps
    latency = kn["attention_launch_s"] + max(compute, memory)
    executed = 2.0 * maps * tiles.visited * bq * bkv * (d + dv)
    return SparseAttentionTime(latency, compute, memory, executed, masked, tiles)

