"""The GPU kernel-time model: closed-form time of one kernel on a CUDA-class GPU.

Pure arithmetic over a :class:`Chip` (datasheet numbers) and a dict of efficiency knobs (the
numbers ``dse.calibrate.fit`` fits from measurements; :data:`DEFAULT_KNOBS` otherwise). The
``gpu`` template and the calibration fit both call these functions, so a fitted calibration
predicts exactly what the template then reports. Every function is O(1): at most
``len(GEMM_TILES) x len(SPLIT_K)`` candidate launch configurations are scored.

Kernels (times in s, bytes in B, rates in FLOP/s or B/s):

* GEMM ``C[batch, m, n] = A[batch, m, k] B[batch, k, n]`` on tensor cores (fp32 on the CUDA
  cores): every output tile ``tm x tn`` of :data:`GEMM_TILES` is one thread block; with
  ``tiles = ceil(m/tm) ceil(n/tn) batch`` blocks (times the split-K factor ``s``) on ``sms``
  multiprocessors the kernel runs ``waves = ceil(tiles s / sms)`` waves, each as long as one
  tile takes on one SM (wave and tile quantisation, :func:`gemm_waves`). A tile's rate falls
  with its size as ``1 / (1 + tile_cost (1/tm + 1/tn))``; operands far larger than the L2 cost
  ``l2_spill_efficiency``. The kernel cannot beat its compulsory bytes over the achievable
  bandwidth, nor over ``sm_bandwidth_Bps`` per active thread block (a skinny GEMM with few
  blocks cannot pull the whole bandwidth). The best configuration wins (what cuBLAS's
  heuristics approximate), plus a fixed ``gemm_launch_s`` and a mid-size ramp. ``m = 1`` is a
  GEMV: bandwidth-bound. Leading dimensions that are not 16-byte multiples fall back to slower
  kernels: rate and bandwidth times ``align{8,4,2}_compute`` / ``align{8,4,2}_memory``.
* Attention, prefill (flash style): one block per ``attention_q_block`` query rows per head
  streams all keys (K/V read once per query block, from L2 when they fit); each query-key score
  costs the two GEMMs' ``2 (d + dv)`` FLOPs at ``attention_efficiency`` of the dense peak plus
  ``attention_score_s`` per score per SM (softmax); non-causal: waves of equal blocks; causal
  (blocks stop at the diagonal, about half the work): total work over the SMs plus
  ``attention_causal_tail`` times the longest block. Decode (few query rows per KV head):
  bandwidth-bound over the KV cache, split-KV blocks of at least ``decode_split_keys`` keys,
  each streaming at ``decode_sm_bandwidth_Bps``.
* Convolution: 1x1 stride-1 convolutions whose planes are 16-byte aligned are GEMMs
  ``k x (h w) x c`` per image (``conv1x1_efficiency``); the rest are implicit GEMMs
  (``n p q x k x c r s``, :data:`CONV_TILE` tiles, the K loop in one block) at
  ``conv_efficiency`` of the GEMM rate, with the NCHW <-> NHWC transforms cuDNN runs around them
  and a penalty for channel counts that are not 16-byte aligned. fp32 convolutions run as TF32.
* Bandwidth-bound kernels (elementwise, norm, softmax, reduction, embedding, data movement):
  ``mem_floor_s + extra + ramp + row latency + (bytes + rows x row_elements x element bytes) /
  (bandwidth x bandwidth_efficiency x op efficiency)`` with the per-operator numbers of
  :data:`DEFAULT_MEMORY_OPS` (calibrated per ATen operator; :data:`MEMORY_OP_ALIASES` maps
  related operators onto calibrated ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

#: Output tiles (rows x columns) of the tensor-core GEMM kernels considered, largest first: the
#: CTA tiles of CUTLASS 3 / cuBLAS Hopper kernels (e.g. ``nvjet_sm90_tst_256x128`` seen in the
#: profile of a 4096^3 bf16 GEMM on the H200, tests/data/h200_calibration_raw.json) [R, D].
GEMM_TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (64, 32))

#: Split-K factors considered when the output has too few tiles to fill the SMs [E, cuBLAS
#: uses split-K and stream-K for skinny shapes; seen: ``splitKreduce_kernel`` in the profile of
#: a 1 x 4096 x 4096 GEMV on the H200].
SPLIT_K = (1, 2, 4, 8, 16)

#: Smallest K slice a split-K block is given (elements) [E].
SPLIT_K_MIN = 256

#: Alignment classes (bytes) of a leading dimension; 16 B is what TMA / wgmma kernels need.
ALIGN_CLASSES = (16, 8, 4, 2)

#: Efficiency knobs and their defaults. Defaults are datasheet-only estimates [E] for a
#: recent NVIDIA data-centre GPU running cuBLAS / cuDNN / PyTorch eager kernels; a calibration
#: file replaces them with fitted values (``dse calibrate gpu``). Units in the names.
DEFAULT_KNOBS: dict[str, float] = {
    # fraction of the datasheet dense peak that a large, aligned GEMM sustains per dtype [E:
    # cuBLAS on A100/H100 typically reaches 70-85% of dense tensor peak on random data]
    "tensor_efficiency": 0.75,      # bf16 / fp16
    "fp8_efficiency": 0.70,
    "int8_efficiency": 0.65,
    "fp32_efficiency": 0.75,        # CUDA-core fp32 (tf32 off, PyTorch's default)
    "tile_cost": 24.0,              # elements: tile rate = 1 / (1 + tile_cost (1/tm + 1/tn))
    "fp32_tile_cost": 64.0,         # the same for CUDA-core fp32 kernels [E]
    "sm_bandwidth_Bps": 60e9,       # operand bytes one SM streams from HBM per s [E]
    "l2_spill_efficiency": 0.9,     # GEMM rate factor once A + B far exceed the L2 [E]
    "tile_overhead_s": 1.0e-6,      # per wave: prologue / epilogue of a tile [E]
    "gemm_launch_s": 3.0e-6,        # fixed time of a GEMM kernel (launch, ramp, tail) [E]
    "splitk_overhead_s": 1.5e-6,    # extra reduction of a split-K GEMM [E]
    "gemm_bandwidth_efficiency": 0.85,  # of bandwidth, for GEMM operand streaming [E]
    "gemm_ramp_s": 2.0e-6,          # extra latency of a mid-size memory-bound GEMM [E]
    "gemm_ramp_bytes": 8.0e6,       # operand bytes at which that ramp saturates, B [E]
    "gemv_unaligned_memory": 0.7,   # bandwidth factor of an m = 1 GEMV with unaligned rows [E]
    "align8_compute": 0.5, "align4_compute": 0.3, "align2_compute": 0.15,     # [E]
    "align8_memory": 0.8, "align4_memory": 0.6, "align2_memory": 0.5,         # [E]
    # attention
    "attention_efficiency": 0.6,    # of dense peak, for the two GEMMs of flash attention [E]
    "attention_score_s": 1.0e-12,   # per query-key score per SM: softmax work [E]
    "attention_tile_s": 1.0e-6,     # per (query block, head) tile [E]
    "attention_launch_s": 4.0e-6,   # fixed time of an attention kernel [E]
    "attention_q_block": 128.0,     # query rows per block (flash attention 2/3) [R]
    "attention_causal_tail": 1.0,   # causal: work / SMs + tail x the longest block [E]
    "decode_launch_s": 4.0e-6,      # fixed time of a decode attention kernel [E]
    "decode_bandwidth_efficiency": 0.9,   # of bandwidth, streaming K/V [E]
    "decode_block_s": 1.0e-6,       # per (batch, head, split) block [E]
    "decode_split_keys": 512.0,     # keys per split-KV block at least [E]
    "decode_sm_bandwidth_Bps": 40e9,  # K/V bytes one decode block streams per s [E]
    # convolution
    "conv_efficiency": 0.4,         # implicit GEMM rate relative to the GEMM rate [E]
    "conv1x1_efficiency": 0.8,      # 1x1 stride-1 convolution (a GEMM) relative to a GEMM [E]
    "conv_small_channel_efficiency": 0.2,  # extra factor when channels are not 16 B aligned [E]
    "conv_launch_s": 6.0e-6,        # fixed time of an implicit-GEMM convolution [E]
    "conv_transform": 1.0,          # 1: NCHW tensors are transformed to NHWC and back [E]
    # bandwidth-bound kernels
    "bandwidth_efficiency": 0.85,   # of datasheet bandwidth, for a large copy [E]
    "mem_floor_s": 2.0e-6,          # a minimal kernel's time, back to back [E]
    "mem_ramp_s": 1.0e-6,           # extra latency of a mid-size transfer (filling the pipes)
    "mem_ramp_bytes": 1.0e6,        # size at which the ramp saturates, B
    # a copy by PyTorch's scalar (non-vectorized) kernels, e.g. ``cat`` of a strided view:
    # elements each SM copies per cycle. 0.655 TB/s incremental for bf16 caches of 6-100 MB on
    # an H200 (132 SMs, 1.98 GHz) = 1.25 [fitted on the microbenchmark rows of
    # tests/data/hf_decode_profile_h200.json (``micro``, ``cat strided``), bf16; the whole-model
    # rows of that file and of tests/data/h100_baselines/hf_models.json are not fitted:
    # ``python benchmarks/hf_decode_profile.py --compare FILE``]
    "scalar_copy_elements_per_sm_cycle": 1.25,
}

#: Output tile (rows x columns) of cuDNN's implicit-GEMM convolution kernels [R: the H200
#: profile shows ``sm80_xmma_fprop_implicit_gemm_..._tilesize64x64x64`` for a 3x3 bf16 conv].
CONV_TILE = (64, 64)

#: Per-ATen-operator model of bandwidth-bound kernels: (efficiency relative to a copy, per-row
#: overhead in elements, extra fixed latency s, latency per element of one row s). Defaults
#: [E]; calibrated per operator. Keys are ``Op.target`` names; ``*kind`` keys are the
#: fallbacks per op kind. ``copy`` is the reference (efficiency 1 by definition).
DEFAULT_MEMORY_OPS: dict[str, tuple[float, float, float, float]] = {
    "copy": (1.0, 0.0, 0.0, 0.0),
    "*elementwise": (0.95, 0.0, 2e-7, 0.0), "*norm": (0.6, 512.0, 1.5e-6, 5e-10),
    "*softmax": (0.45, 512.0, 1.5e-6, 3e-10), "*reduction": (0.5, 0.0, 1e-6, 3e-10),
    "*embedding": (0.85, 0.0, 5e-7, 0.0), "*data_movement": (0.8, 0.0, 2e-7, 0.0),
    "*unknown": (0.8, 0.0, 5e-7, 0.0), "*hashgrid": (0.3, 0.0, 2e-6, 0.0),
    # ``cat`` with a strided input (:func:`memory_target`): PyTorch's scalar
    # ``CatArrayBatchedCopy`` instead of ``CatArrayBatchedCopy_vectorized``, bound by the SMs'
    # element rate, not by DRAM (``scalar_copy_elements_per_sm_cycle``; the same copy is as slow
    # on an H100 as on an H200)
    "cat:strided": (1.0, 0.0, 2e-7, 0.0),
}


#: ATen operators costed like a calibrated one (same kernel family) [E].
MEMORY_OP_ALIASES = {
    "native_layer_norm": "layer_norm", "group_norm": "layer_norm",
    "native_group_norm": "layer_norm", "instance_norm": "layer_norm",
    "_native_batch_norm_legit_no_training": "batch_norm", "native_batch_norm": "batch_norm",
    "_batch_norm_with_update": "batch_norm", "_softmax": "softmax", "log_softmax": "softmax",
    "_log_softmax": "softmax", "mean": "sum", "amax": "sum", "amin": "sum", "max": "sum",
    "min": "sum", "var": "sum", "std": "sum", "var_mean": "sum", "logsumexp": "sum",
    "max_pool2d_with_indices": "max_pool2d", "max_pool1d": "max_pool2d",
    "avg_pool2d": "max_pool2d", "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "adaptive_avg_pool1d": "adaptive_avg_pool2d", "sub": "add", "rsub": "add", "div": "add",
    "add_": "add", "mul_": "mul", "where": "add", "masked_fill": "mul", "relu_": "relu",
    "silu_": "silu", "gelu_": "gelu", "tanh": "silu", "sigmoid": "silu", "exp": "silu",
    "index_select": "embedding", "gather": "embedding", "concat": "cat", "stack": "cat",
    "clone": "contiguous", "copy_": "copy", "_to_copy": "copy",
    "concat:strided": "cat:strided", "stack:strided": "cat:strided",
}


#: The datapath an op of a dtype falls back to when the chip has none for it (its peak is 0):
#: fp8 and int8 GEMMs are dequantised to fp16 [E: PyTorch's ``_scaled_mm`` / ``_int_mm`` need
#: the tensor-core types; a model quantised for them runs fp16 kernels elsewhere]; bf16 and
#: fp16 without tensor cores run on the fp32 CUDA cores [E: e.g. bf16 on a T4 (Turing has no
#: bf16 tensor cores) is emulated through fp32 math].
DATAPATH_FALLBACK = {"fp8": "fp16", "int8": "fp16", "bf16": "fp32", "fp16": "fp32"}


@dataclass(frozen=True)
class Chip:
    """Datasheet numbers the model needs: SMs, dense peak FLOP/s per dtype (0: no datapath for
    that dtype, see :data:`DATAPATH_FALLBACK`), DRAM B/s, L2 B, and the SM boost clock Hz (0:
    unknown; it converts calibrated times to cycles when a calibration moves to another chip,
    :func:`transfer_knobs`)."""

    sms: int
    peak_flops: Mapping[str, float]
    bandwidth_Bps: float
    l2_bytes: float
    clock_hz: float = 0.0

    def datapath(self, dtype: str) -> str:
        """The dtype whose datapath runs an op in ``dtype`` on this chip: ``dtype`` itself
        where its peak is positive, else its fallback (:data:`DATAPATH_FALLBACK`)."""
        seen = dtype
        while self.peak_flops.get(seen, 0.0) <= 0.0 and seen in DATAPATH_FALLBACK:
            seen = DATAPATH_FALLBACK[seen]
        return seen


def alignment_bytes(elements: int, bytes_per_element: int) -> int:
    """The alignment class (16, 8, 4 or 2 B) of a leading dimension of ``elements``."""
    nbytes = int(elements) * int(bytes_per_element)
    for a in ALIGN_CLASSES:
        if nbytes % a == 0:
            return a
    return 2


def gemm_waves(m: int, n: int, batch: int, tile: tuple[int, int], sms: int,
               split: int = 1) -> tuple[int, int, float]:
    """(thread blocks, waves, wave efficiency) of a GEMM cut into ``tile`` output tiles (times
    ``split`` K slices) on ``sms`` SMs: ``tiles = ceil(m/tm) ceil(n/tn) batch split``,
    ``waves = ceil(tiles / sms)``, efficiency ``tiles / (waves sms)``."""
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1]) * batch * split
    waves = math.ceil(tiles / sms)
    return tiles, waves, tiles / (waves * sms) if waves else 1.0


@dataclass
class KernelModel:
    """Kernel times on ``chip`` with efficiency ``knobs`` (missing ones take defaults) and
    per-operator memory models ``memory_ops``. Results are memoised per shape."""

    chip: Chip
    knobs: Mapping[str, float] = field(default_factory=dict)
    memory_ops: Mapping[str, Any] = field(default_factory=dict)
    tiles: tuple[tuple[int, int], ...] = GEMM_TILES

    def __post_init__(self):
        k = dict(DEFAULT_KNOBS)
        k.update({name: float(v) for name, v in self.knobs.items()})
        self.k = k
        mops = dict(DEFAULT_MEMORY_OPS)
        for name, v in self.memory_ops.items():
            vals = tuple(float(x) for x in v) + (0.0, 0.0, 0.0, 0.0)
            mops[name] = vals[:4]
        mops["copy"] = (1.0,) + mops["copy"][1:]
        self.mops = mops
        self.copy_Bps = self.chip.bandwidth_Bps * k["bandwidth_efficiency"]
        self._cache: dict[tuple, tuple[float, float, float]] = {}

    # -- rates ---------------------------------------------------------------------------

    def dtype_efficiency(self, dtype: str) -> float:
        """Fraction of the peak a large GEMM in ``dtype`` sustains on its datapath."""
        key = {"bf16": "tensor_efficiency", "fp16": "tensor_efficiency",
               "fp8": "fp8_efficiency", "int8": "int8_efficiency",
               "fp32": "fp32_efficiency"}[self.chip.datapath(dtype)]
        return self.k[key]

    def peak(self, dtype: str) -> float:
        """Datasheet dense peak of the datapath that runs ``dtype`` on this chip, FLOP/s."""
        return self.chip.peak_flops[self.chip.datapath(dtype)]

    def sustained_flops(self, dtype: str) -> float:
        """The FLOP/s a large aligned GEMM sustains (peak x dtype efficiency)."""
        return self.peak(dtype) * self.dtype_efficiency(dtype)

    def conv_flops(self, dtype: str) -> float:
        """Sustained FLOP/s of cuDNN convolutions: fp32 convolutions run as TF32 on the tensor
        cores (PyTorch's default ``torch.backends.cudnn.allow_tf32 = True`` [R]; dense TF32
        peak = half the fp16 peak on A100/H100/H200 [D]), other dtypes as their GEMMs."""
        if dtype == "fp32":
            return 0.5 * self.peak("fp16") * self.k["tensor_efficiency"]
        return self.sustained_flops(dtype)

    def tile_rate(self, tm: int, tn: int, dtype: str = "bf16") -> float:
        """Relative rate of a ``tm x tn`` tile (1 for the largest of ``GEMM_TILES``)."""
        c = self.k["fp32_tile_cost" if self.chip.datapath(dtype) == "fp32" else "tile_cost"]
        ref = 1.0 / GEMM_TILES[0][0] + 1.0 / GEMM_TILES[0][1]
        return (1.0 + c * ref) / (1.0 + c * (1.0 / tm + 1.0 / tn))

    # -- GEMM ----------------------------------------------------------------------------

    def gemm(self, m: int, n: int, k: int, batch: int, dtype: str, bytes_hbm: float | None = None,
             align: int | None = None, rate_factor: float = 1.0) -> tuple[float, float, float]:
        """(latency_s, compute_s, memory_s) of one GEMM. ``bytes_hbm`` defaults to the
        compulsory A + B + C bytes; ``align`` to the alignment (B) of the k and n leading
        dimensions; ``rate_factor`` scales the compute rate (convolutions)."""
        if min(m, n, batch) <= 0:   # an empty GEMM (a zero-size dimension): a launch only
            return (self.k["gemm_launch_s"], 0.0, 0.0)
        key = ("gemm", m, n, k, batch, dtype, bytes_hbm, align, rate_factor)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        es = _bytes(dtype)
        out_es = {"fp8": 2, "int8": 4}.get(dtype, es)
        if bytes_hbm is None:
            bytes_hbm = batch * ((m * k + k * n) * es + m * n * out_es)
        if align is None:
            align = min(alignment_bytes(k, es), alignment_bytes(n, out_es))
        kn = self.k
        ramp = kn["gemm_ramp_s"] * min(1.0, bytes_hbm / kn["gemm_ramp_bytes"])
        bw = self.chip.bandwidth_Bps * kn["gemm_bandwidth_efficiency"]
        if m == 1:  # GEMV kernels: bandwidth-bound, mildly hurt by unaligned rows
            a_m = 1.0 if align >= 16 else kn["gemv_unaligned_memory"]
            mem_s = ramp + bytes_hbm / (bw * a_m)
            compute = 2.0 * batch * n * k / (self.sustained_flops(dtype) * rate_factor)
            out = (kn["gemm_launch_s"] + max(mem_s, compute), compute, mem_s)
            self._cache[key] = out
            return out
        a_c = 1.0 if align >= 16 else kn[f"align{align}_compute"]
        a_m = 1.0 if align >= 16 else kn[f"align{align}_memory"]
        sms = self.chip.sms
        # operands that do not fit in L2 are re-fetched from HBM: linear from L2 / 2 to 2 L2
        spill = (batch * (m * k + k * n) * es / self.chip.l2_bytes - 0.5) / 1.5
        l2_factor = 1.0 - (1.0 - kn["l2_spill_efficiency"]) * min(1.0, max(0.0, spill))
        rate_sm = self.sustained_flops(dtype) * a_c * rate_factor * l2_factor / sms
        sm_bw = kn["sm_bandwidth_Bps"] * a_m
        best = math.inf
        best_compute = best_mem = 0.0
        for tm, tn in self.tiles:
            tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
            tile_s_per_k = 2.0 * tm * tn / (rate_sm * self.tile_rate(tm, tn, dtype))
            for s in SPLIT_K:
                if s > 1 and (tiles * s > sms or k / s < SPLIT_K_MIN):
                    break
                waves = gemm_waves(m, n, batch, (tm, tn), sms, s)[1]
                compute = waves * (tile_s_per_k * math.ceil(k / s) + kn["tile_overhead_s"])
                # few thread blocks cannot pull the whole bandwidth (per-SM limit)
                mem_s = ramp + bytes_hbm / min(bw * a_m, min(tiles * s, sms) * sm_bw)
                extra = 0.0
                if s > 1:  # fp32 partial sums written and reduced
                    extra = kn["splitk_overhead_s"] + 8.0 * s * m * n * batch / self.copy_Bps
                t = max(compute, mem_s) + extra
                if t < best:
                    best, best_compute, best_mem = t, compute, mem_s
        out = (kn["gemm_launch_s"] + best, best_compute, best_mem)
        self._cache[key] = out
        return out

    # -- attention -----------------------------------------------------------------------

    def attention(self, batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int,
                  head_dim: int, causal: bool, dtype: str, value_dim: int | None = None,
                  kv_shared: bool = False) -> tuple[float, float, float]:
        """(latency_s, compute_s, memory_s) of scaled-dot-product attention; ``kv_shared``:
        the values are a prefix of the keys' rows (MLA over its latent cache), read once."""
        key = ("attn", batch, heads, kv_heads, q_len, kv_len, head_dim, causal, dtype, value_dim,
               kv_shared)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        kn = self.k
        es = _bytes(dtype)
        dv = value_dim or head_dim
        kv_heads = kv_heads or heads
        q_bytes = es * batch * heads * q_len * (head_dim + dv)          # Q read, O written
        kv_row = head_dim if kv_shared else head_dim + dv
        kv_bytes = es * batch * kv_heads * kv_len * kv_row              # K and V read once
        sms = self.chip.sms
        qb = int(kn["attention_q_block"])
        if is_decode(heads, kv_heads, q_len):
            bw = self.chip.bandwidth_Bps * kn["decode_bandwidth_efficiency"]
            mem_s = (q_bytes + kv_bytes) / bw
            units = batch * kv_heads
            splits = max(1, min(sms // max(units, 1),
                                math.ceil(kv_len / kn["decode_split_keys"])))
            waves = math.ceil(units * splits / sms)
            block_bytes = es * kv_len * kv_row / splits
            compute = waves * (kn["decode_block_s"] + block_bytes / kn["decode_sm_bandwidth_Bps"])
            out = (kn["decode_launch_s"] + max(compute, mem_s), compute, mem_s)
        else:
            rate_sm = self.peak(dtype) * kn["attention_efficiency"] / sms
            per_score = 2.0 * (head_dim + dv) / rate_sm + kn["attention_score_s"]
            nqb = math.ceil(q_len / qb)
            tiles = batch * heads * nqb
            if causal:  # top-left aligned: block j sees keys [0, (j + 1) qb)
                full = min(nqb, kv_len // qb)  # blocks whose diagonal lies inside kv_len
                keys_sum = qb * full * (full + 1) / 2 + (nqb - full) * kv_len
                tile_max = kn["attention_tile_s"] + qb * min(kv_len, nqb * qb) * per_score
                work = tiles * kn["attention_tile_s"] + batch * heads * qb * keys_sum * per_score
                compute = work / sms + kn["attention_causal_tail"] * tile_max
            else:
                tile = kn["attention_tile_s"] + qb * kv_len * per_score
                compute = math.ceil(tiles / sms) * tile
            l2_fit = kv_bytes / (batch * kv_heads) <= self.chip.l2_bytes / 4
            # a wave of up to `sms` query blocks of one head sweeps K/V together: one HBM read
            # per wave (the L2 shares the tiles in flight), once when a head's K/V fit the L2
            kv_reads = 1 if (l2_fit or nqb == 1) else math.ceil(nqb / sms)
            mem_s = (q_bytes + kv_bytes * kv_reads) / self.copy_Bps
            out = (kn["attention_launch_s"] + max(compute, mem_s), compute, mem_s)
        self._cache[key] = out
        return out

    # -- convolution ---------------------------------------------------------------------

    def conv(self, n: int, c: int, h: int, w: int, k: int, r: int, s: int, p: int, q: int,
             stride: int, padding: int, groups: int, dtype: str) -> tuple[float, float, float]:
        """(latency_s, compute_s, memory_s) of a 2-D convolution on NCHW tensors."""
        key = ("conv", n, c, h, w, k, r, s, p, q, stride, padding, groups, dtype)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        kn = self.k
        es = _bytes(dtype)
        in_b, out_b = es * n * c * h * w, es * n * k * p * q
        w_b = es * k * (c // groups) * r * s
        cg = c // groups
        small_c = 1.0 if alignment_bytes(cg, es) >= 16 else kn["conv_small_channel_efficiency"]
        if (r == 1 and s == 1 and stride == 1 and groups == 1
                and alignment_bytes(h * w, es) >= 16):  # a plain GEMM on NCHW planes
            tf32 = self.conv_flops(dtype) / self.sustained_flops(dtype)
            out = self.gemm(k, h * w, c, n, dtype, bytes_hbm=in_b + out_b + w_b, align=16,
                            rate_factor=kn["conv1x1_efficiency"] * small_c * tf32)
            self._cache[key] = out
            return out
        g_m, g_n, g_k = n * p * q, k // groups, cg * r * s
        tm, tn = CONV_TILE
        rate_sm = (self.conv_flops(dtype) * kn["conv_efficiency"] * small_c / self.chip.sms)
        tiles = math.ceil(g_m / tm) * math.ceil(g_n / tn) * groups
        compute = math.ceil(tiles / self.chip.sms) * 2.0 * tm * tn * g_k / rate_sm
        mem = (in_b + out_b + w_b) / (self.chip.bandwidth_Bps * kn["gemm_bandwidth_efficiency"])
        transform = 0.0
        if kn["conv_transform"] > 0:  # input and output NCHW <-> NHWC, each read + written
            transform = kn["conv_transform"] * (
                self.memory(2 * in_b, "*data_movement")[0]
                + self.memory(2 * out_b, "*data_movement")[0])
        out = (kn["conv_launch_s"] + max(compute, mem) + transform, compute, mem)
        self._cache[key] = out
        return out

    # -- bandwidth-bound kernels -----------------------------------------------------------

    def memory_op(self, target: str, kind: str) -> tuple[float, float, float, float]:
        """(efficiency relative to a copy, per-row overhead elements, extra latency s,
        latency per element of a row s) of an operator (``<target>:strided``: see
        :func:`memory_target`; an operator without a strided entry falls back to its own)."""
        base = target.split(":")[0]
        return (self.mops.get(target) or self.mops.get(MEMORY_OP_ALIASES.get(target, ""))
                or self.mops.get(base) or self.mops.get(MEMORY_OP_ALIASES.get(base, ""))
                or self.mops.get("*" + kind) or self.mops["*unknown"])

    def memory(self, nbytes: float, target: str, kind: str = "unknown", rows: int = 0,
               width: int = 0, bytes_per_element: int = 2) -> tuple[float, float]:
        """(latency_s, memory_s) of a bandwidth-bound kernel moving ``nbytes`` B (``rows`` rows
        of ``width`` elements for row-wise operators)."""
        eff, row_elems, extra_s, row_s = self.memory_op(target, kind)
        kn = self.k
        work = nbytes + rows * row_elems * bytes_per_element
        mem_s = work / (self.copy_Bps * eff)
        if target.endswith(":strided") and self.chip.clock_hz > 0:   # scalar copy: SM-bound
            rate = (self.chip.sms * self.chip.clock_hz * bytes_per_element
                    * kn["scalar_copy_elements_per_sm_cycle"])
            mem_s = max(mem_s, work / rate)
        ramp = kn["mem_ramp_s"] * min(1.0, nbytes / kn["mem_ramp_bytes"])
        latency = kn["mem_floor_s"] + extra_s + (row_s * width if rows else 0.0)
        return latency + ramp + mem_s, mem_s


def memory_target(op) -> str:
    """The memory-op entry that costs ``op``: its ATen target, or ``<target>:strided`` for a
    ``cat`` with a strided input (``attrs["strided_inputs"]``, set by the capture)."""
    return f"{op.target}:strided" if op.attrs.get("strided_inputs") else op.target


def is_decode(heads: int, kv_heads: int, q_len: int) -> bool:
    """Attention with too few query rows per KV head to fill a 64-row block: decode kernels."""
    return q_len * max(1, heads // max(kv_heads, 1)) <= 32


def _bytes(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}[dtype]


# --------------------------------------------------------------------------------------------
# Moving a calibration to another chip

#: How each knob moves from the chip it was calibrated on to another chip (the datasheet is the
#: chip; the knobs are the kernels): ``ratio`` knobs are fractions of a datasheet number or
#: counts of elements and carry over unchanged; ``cycles`` knobs are times of work done by the
#: SMs or the GPU front end and scale with the inverse SM clock; ``per_sm_share`` knobs are
#: bandwidths one thread block reaches, scaled with the chip's bandwidth per SM; ``bytes`` knobs
#: carry over unchanged [E: the rules are hypotheses the cross-GPU validation checks; see
#: docs/validation.md, gpu section].
KNOB_TRANSFER: dict[str, str] = {
    **{k: "ratio" for k in (
        "tensor_efficiency", "fp8_efficiency", "int8_efficiency", "fp32_efficiency",
        "tile_cost", "fp32_tile_cost", "l2_spill_efficiency", "gemm_bandwidth_efficiency",
        "gemv_unaligned_memory", "align8_compute", "align4_compute", "align2_compute",
        "align8_memory", "align4_memory", "align2_memory", "attention_efficiency",
        "attention_q_block", "attention_causal_tail", "decode_bandwidth_efficiency",
        "decode_split_keys", "conv_efficiency", "conv1x1_efficiency",
        "conv_small_channel_efficiency", "conv_transform", "bandwidth_efficiency",
        "scalar_copy_elements_per_sm_cycle")},
    **{k: "cycles" for k in (
        "tile_overhead_s", "gemm_launch_s", "splitk_overhead_s", "gemm_ramp_s",
        "attention_score_s", "attention_tile_s", "attention_launch_s", "decode_launch_s",
        "decode_block_s", "conv_launch_s", "mem_floor_s", "mem_ramp_s")},
    "sm_bandwidth_Bps": "per_sm_share", "decode_sm_bandwidth_Bps": "per_sm_share",
    "gemm_ramp_bytes": "bytes", "mem_ramp_bytes": "bytes",
}


def transfer_factor(rule: str, src: Chip, dst: Chip) -> float:
    """The factor a knob of ``rule`` (:data:`KNOB_TRANSFER`) is multiplied by from ``src`` to
    ``dst``; 1 where a chip lacks the number the rule needs (clock 0)."""
    if rule == "cycles" and src.clock_hz > 0 and dst.clock_hz > 0:
        return src.clock_hz / dst.clock_hz
    if rule == "per_sm_share":
        return (dst.bandwidth_Bps / dst.sms) / (src.bandwidth_Bps / src.sms)
    return 1.0


def transfer_knobs(knobs: Mapping[str, float], memory_ops: Mapping[str, Any], src: Chip,
                   dst: Chip, rules: Mapping[str, str] | None = None
                   ) -> tuple[dict[str, float], dict[str, tuple[float, ...]]]:
    """Knobs and per-operator memory models calibrated on ``src``, moved to ``dst`` by
    ``rules`` (default :data:`KNOB_TRANSFER`; a knob without a rule carries over unchanged).
    A memory operator's efficiency is a ratio, its extra and per-element latencies cycles.
    Identity when ``src == dst``."""
    rules = {**KNOB_TRANSFER, **(rules or {})}
    out = {k: float(v) * transfer_factor(rules.get(k, "ratio"), src, dst)
           for k, v in knobs.items()}
    cyc = transfer_factor("cycles", src, dst)
    mops = {}
    for name, v in memory_ops.items():
        vals = tuple(float(x) for x in v) + (0.0, 0.0, 0.0, 0.0)
        mops[name] = (vals[0], vals[1], vals[2] * cyc, vals[3] * cyc)
    return out, mops
