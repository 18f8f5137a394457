"""Closed-form cycle, SRAM-access and DRAM-traffic formulas of a systolic array running a GEMM.

Pure functions of integers, O(1) per call (no loop over tiles), used by :mod:`accelerators.npu`.

GEMM convention: ``C[M, N] = A[M, K] @ B[K, N]``; A is the *ifmap* operand (activations; for a
convolution its im2col matrix: M = output pixels, K = r*s*c), B the *filter* operand (weights,
N = filters), C the *ofmap*.

Compute cycles follow the convention of SCALE-Sim 3.0.0 (Samajdar et al., ISPASS 2020; v3:
Raj et al., arXiv 2504.15377) [R scalesim-project/scale-sim-v3, ``compute/systolic_compute_*.py``],
re-derived here from its demand matrices, not copied. The operand matrices are mapped onto the
array as spatial rows ``Sr``, spatial columns ``Sc`` and a temporal dimension ``T``:

========  =====  =====  =====  ==================================
dataflow   Sr     Sc     T      cycles of one fold (R x C array)
========  =====  =====  =====  ==================================
``os``     M      N      K      T + R + C - 2
``ws``     K      N      M      T + 2R + C - 2
``is``     K      M      N      T + 2R + C - 2
========  =====  =====  =====  ==================================

OS: each PE accumulates one output; K operand pairs stream in for T cycles, skewed over R - 1
rows and C - 1 columns. WS/IS: R cycles load the stationary operand, then T vectors stream
through with R - 1 + C - 1 cycles of skew and drain. A layer takes ``ceil(Sr/R) * ceil(Sc/C)``
folds run back to back; SCALE-Sim reports the index of the last cycle (0-based), i.e. one less
than the count of cycles, which we keep so that the numbers compare exactly.
"""

from __future__ import annotations

import math
from typing import NamedTuple

DATAFLOWS = ("ws", "os", "is")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def spatio_temporal(dataflow: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """``(Sr, Sc, T)`` of a GEMM of ``m x k`` by ``k x n`` under ``dataflow``."""
    if dataflow == "ws":
        return k, n, m
    if dataflow == "os":
        return m, n, k
    if dataflow == "is":
        return k, m, n
    raise ValueError(f"dataflow must be one of {DATAFLOWS}, got {dataflow!r}")


def fold_cycles(dataflow: str, rows: int, cols: int, t: int) -> int:
    """Cycles of one fold (one array-sized tile of the stationary/spatial operands)."""
    if dataflow == "os":
        return t + rows + cols - 2
    return t + 2 * rows + cols - 2


def folds(dataflow: str, rows: int, cols: int, m: int, n: int, k: int) -> tuple[int, int]:
    """``(row folds, column folds)``: how many array tiles cover Sr and Sc."""
    sr, sc, _ = spatio_temporal(dataflow, m, n, k)
    return _cdiv(sr, rows), _cdiv(sc, cols)


def gemm_compute_cycles(dataflow: str, rows: int, cols: int, m: int, n: int, k: int,
                        gemms: int = 1, arrays: int = 1) -> int:
    """Cycles of ``gemms`` independent ``m x k @ k x n`` GEMMs with no memory stall.

    The ``gemms * folds`` folds are shared round-robin by ``arrays`` identical arrays, so the
    op takes ``ceil(gemms * folds / arrays)`` fold times. With ``gemms = arrays = 1`` this is
    SCALE-Sim's "Total Cycles" with no stall.
    """
    if min(m, n, k, gemms) <= 0:
        return 0
    sr, sc, t = spatio_temporal(dataflow, m, n, k)
    total_folds = gemms * _cdiv(sr, rows) * _cdiv(sc, cols)
    return _cdiv(total_folds, arrays) * fold_cycles(dataflow, rows, cols, t) - 1


def psum_chunk_stall_cycles(dataflow: str, rows: int, cols: int, m: int, n: int, k: int,
                            psum_capacity_bytes: float, acc_bytes: int, gemms: int = 1,
                            arrays: int = 1) -> int:
    """Extra cycles when the partial sums of one fold do not fit the output scratchpad.

    In WS and IS the temporal dimension T streams through a fold whose ``cols`` columns each
    accumulate T partial sums (``T * cols * acc_bytes``). When that exceeds
    ``psum_capacity_bytes``, T is processed in chunks of what fits and every further chunk
    re-pays the fold's fill and drain (``2 * rows + cols - 2`` cycles). OS keeps partial sums
    in the PEs and never stalls here. SCALE-Sim assumes unlimited SRAM, so this is reported
    as a stall, not as compute cycles.
    """
    if dataflow == "os" or min(m, n, k, gemms) <= 0:
        return 0
    sr, sc, t = spatio_temporal(dataflow, m, n, k)
    t_fit = max(1, int(psum_capacity_bytes // (cols * acc_bytes)))
    chunks = _cdiv(t, t_fit)
    if chunks <= 1:
        return 0
    total_folds = _cdiv(gemms * _cdiv(sr, rows) * _cdiv(sc, cols), arrays)
    return total_folds * (chunks - 1) * (2 * rows + cols - 2)


class SramAccesses(NamedTuple):
    """Elements read from / written to each scratchpad by the array for one GEMM."""

    ifmap_reads: int
    filter_reads: int
    ofmap_writes: int
    ofmap_reads: int


def gemm_sram_accesses(dataflow: str, rows: int, cols: int, m: int, n: int, k: int
                       ) -> SramAccesses:
    """Scratchpad accesses of one GEMM, counted the way SCALE-Sim's demand matrices count them.

    The streamed operand is re-read once per fold of the other spatial dimension; the
    stationary operand is read once; partial sums are written once per fold of the reduction
    dimension (WS/IS reduce K over row folds) and read back to accumulate.
    """
    row_folds, col_folds = folds(dataflow, rows, cols, m, n, k)
    if dataflow == "ws":   # B stationary, A streamed per column fold, K reduced over row folds
        return SramAccesses(m * k * col_folds, k * n, m * n * row_folds, m * n * (row_folds - 1))
    if dataflow == "os":   # C stationary, A per column fold, B per row fold
        return SramAccesses(m * k * col_folds, k * n * row_folds, m * n, 0)
    # is: A stationary, B streamed per column (M) fold, K reduced over row folds
    return SramAccesses(m * k, k * n * col_folds, m * n * row_folds, m * n * (row_folds - 1))


class Traffic(NamedTuple):
    """DRAM passes over each operand chosen by :func:`gemm_dram_passes`."""

    a_passes: int
    b_passes: int
    order: str
    tile_m: int
    tile_n: int


def gemm_dram_passes(m: int, n: int, k: int, a_row_bytes: float, b_col_bytes: float,
                     acc_bytes: int, cap_ifmap: float, cap_filter: float, cap_ofmap: float,
                     array_m: int, array_n: int, k_chunk: int) -> Traffic | None:
    """How many times A and B cross the DRAM interface under the best of three SRAM loop orders.

    ``cap_*`` are the usable bytes of each scratchpad (half of it: the other half prefetches the
    next tile, i.e. double buffering). ``a_row_bytes`` is the bytes of A behind one output row
    (``K * b`` for a GEMM, the input tensor bytes / M for an im2col conv), ``b_col_bytes`` the
    bytes of B per output column. Partial sums stay in the ofmap scratchpad (``acc_bytes`` per
    element) until their reduction over K is complete, so C is written exactly once.

    Orders (the cheapest feasible one is taken, as a compiler would):

    * ``a_resident``: a block of ``tile_m`` rows of A (all K) sits in the ifmap scratchpad while
      all of B streams past it; B is re-read once per row block (unless all of B fits).
    * ``b_resident``: ``tile_n`` columns of B (all K) sit in the filter scratchpad while A
      streams; A is re-read once per column block (unless all of A fits).
    * ``c_resident``: a ``tile_m x tile_n`` block of C accumulates in the ofmap scratchpad while
      K streams in chunks of ``k_chunk``; A is re-read per column block and B per row block.

    Returns ``None`` when not even one output element can be tiled.
    """
    a_bytes, b_bytes = a_row_bytes * m, b_col_bytes * n
    a_fits, b_fits = a_bytes <= cap_ifmap, b_bytes <= cap_filter
    n_edge, m_edge = min(n, array_n), min(m, array_m)
    best: Traffic | None = None
    best_bytes = math.inf

    def consider(order: str, tm: int, tn: int, a_passes: int, b_passes: int) -> None:
        nonlocal best, best_bytes
        moved = a_passes * a_bytes + b_passes * b_bytes
        if moved < best_bytes:
            best, best_bytes = Traffic(a_passes, b_passes, order, tm, tn), moved

    # a_resident
    tm = min(m, int(cap_ifmap // a_row_bytes) if a_row_bytes else m,
             int(cap_ofmap // (n_edge * acc_bytes)))
    if tm >= 1:
        consider("a_resident", tm, n_edge, 1, 1 if b_fits else _cdiv(m, tm))
    # b_resident
    tn = min(n, int(cap_filter // b_col_bytes) if b_col_bytes else n,
             int(cap_ofmap // (m_edge * acc_bytes)))
    if tn >= 1:
        consider("b_resident", m_edge, tn, 1 if a_fits else _cdiv(n, tn), 1)
    # c_resident: the input chunks must fit beside the output block
    kc = max(1, min(k, k_chunk))
    a_chunk, b_chunk = a_row_bytes * kc / k, b_col_bytes * kc / k
    m_cap = min(m, int(cap_ifmap // a_chunk) if a_chunk else m)
    n_cap = min(n, int(cap_filter // b_chunk) if b_chunk else n)
    c_elems = int(cap_ofmap // acc_bytes)
    side = max(1, math.isqrt(c_elems))
    # seeds: a square block, the tallest block, the widest block
    for tm0 in (min(m_cap, side), m_cap, min(m_cap, c_elems // max(1, n_cap))):
        tm0 = max(1, tm0) if m_cap >= 1 else 0
        tn0 = min(n_cap, c_elems // tm0) if tm0 else 0
        if tm0 >= 1 and tn0 >= 1:
            tm1 = min(m_cap, c_elems // tn0)
            consider("c_resident", tm1, tn0, 1 if a_fits else _cdiv(n, tn0),
                     1 if b_fits else _cdiv(m, tm1))
    return best
