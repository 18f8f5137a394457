"""The ``npu`` cost model evaluated for many designs at once with numpy (the fast screening path).

Same model as :meth:`accelerators.npu.NPU.cost` (and the formulas of
:mod:`accelerators.systolic`), written over arrays: one row per op, one column per design.
Every expression keeps the scalar code's order of operations, and integers stay integers
(int64) where the scalar code keeps Python ints, so the results are the scalar ones bit for
bit as long as the integers involved stay below 2**53 (``EXACT_INT_LIMIT``); an op whose sizes
could exceed that is costed by the scalar code instead, design by design.

What depends on the op and the element size only (operand bytes, lane operations, compulsory
traffic) is worked out once per op and per element size in plain Python, exactly as the scalar
code does, then gathered per design; what depends on the design (folds, tiling, scratchpad
capacities, energies per access, clock, bandwidth) is computed on arrays.

Errors match the scalar path too: for each design the exception that ``design.cost(op)`` would
raise first, op by op in the given order (``InfeasibleDesign`` for a scratchpad that cannot hold
a minimal tile or a GEMM that cannot be tiled, ``BadInput`` for an op without the attributes it
needs, and whatever else the scalar code would raise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from accelerators import mac_formats, technology as tech
from accelerators.npu import (ACC_BYTES, NPU, VECTOR_LANE_AREA_PER_MAC,
                              VECTOR_OPS_PER_ELEMENT, attention_dims, element_scale,
                              operand_modes, vector_parts)
from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.formats import op_formats
from workloads.ir import Op

#: Integers below this are exact in float64 [IEEE 754 binary64: a 53-bit significand]. Ops whose integer intermediates could reach it are costed by the scalar code.
EXACT_INT_LIMIT = 2 ** 53

#: Bound on the integer intermediates of one GEMM or attention op relative to its MAC count, a
#: factor [E, from the formulas below: SRAM accesses, re-fetched and DMA bytes are each at most
#: ~4 B x M N K per GEMM, and a handful of them are summed; 64 leaves margin].
_INT_GROWTH = 64

_ARRAY_KINDS = (ir.MATMUL, ir.CONV)


# ----------------------------------------------------------------------------- designs as arrays
class DesignArrays:
    """Parameters of N ``NPU`` designs as ``(1, N)`` arrays (broadcast against ``(ops, 1)``).

    Energies per access and per op are read from the designs themselves (the values their own
    ``cost()`` uses), not recomputed, so they are identical.
    """

    _INTS = ("rows", "cols", "arrays", "b", "lanes")
    _FLOATS = ("clock", "bw", "cap_i", "cap_f", "cap_o", "ej_i", "ej_f", "ej_o", "reg_j",
               "mac_j", "vec_j", "dram_j", "act_array", "act_vector")

    def __init__(self, designs: Sequence[NPU]):
        self.designs = list(designs)
        self.n = n = len(self.designs)
        ints, floats, df = [], [], []
        for d in self.designs:
            caps, ej = d._caps, d._sram_j
            ints.append((d._rows, d._cols, d._arrays, d._b, d._lanes))
            floats.append((d._clock, d._bw, caps["ifmap"], caps["filter"], caps["ofmap"],
                           ej["ifmap"], ej["filter"], ej["ofmap"], d._reg_j, d._mac_j,
                           d._vec_j, d._dram_j, d._active_w["array"], d._active_w["vector"]))
            df.append(d._df)
        iv = np.array(ints, dtype=np.int64).reshape(n, len(self._INTS)).T
        fv = np.array(floats, dtype=np.float64).reshape(n, len(self._FLOATS)).T
        for name, row in zip(self._INTS, iv):
            setattr(self, name, row[None, :])
        for name, row in zip(self._FLOATS, fv):
            setattr(self, name, row[None, :])
        df_arr = np.array(df, dtype=object).reshape(1, n)
        self.ws, self.os, self.is_ = df_arr == "ws", df_arr == "os", df_arr == "is"
        # c_resident's output block: elements of half the ofmap scratchpad and their isqrt
        c_elems = [int(c // ACC_BYTES) for c in fv[4].tolist()]
        self.c_elems = np.array(c_elems, dtype=np.int64).reshape(1, n)
        self.side = np.array([max(1, math.isqrt(c)) for c in c_elems],
                             dtype=np.int64).reshape(1, n)
        self.problem: list[str | None] = [d._problem for d in self.designs]
        # element sizes present and each design's index among them (op-level values per size)
        self.b_values = sorted({int(b) for b in iv[3].tolist()})
        self.b_index = np.searchsorted(self.b_values, iv[3])
        # MAC formats present and each design's index (what an op in number formats runs on)
        dts = [d.hw.dtype for d in self.designs]
        self.dtype_values = sorted(set(dts))
        self.dtype_index = np.array([self.dtype_values.index(t) for t in dts], dtype=np.int64)

    def per_b(self, table: np.ndarray) -> np.ndarray:
        """``(ops, len(b_values))`` op-level values -> ``(ops, N)`` by each design's element size."""
        return table[:, self.b_index]

    def per_dtype(self, table: np.ndarray) -> np.ndarray:
        """``(ops, len(dtype_values))`` values -> ``(ops, N)`` by each design's MAC format."""
        return table[:, self.dtype_index]


def _op_elements(a: DesignArrays, ops: list[Op], err: "_Errors", rows_idx: np.ndarray):
    """Per op of a GEMM-class block: bytes per element of its activation operand, other
    operand and output as ``(ops, N)`` arrays (the design's element for an op without number
    formats, as :meth:`NPU.operand_bytes`), and 0/1 arrays of the operands each design
    dequantises (:func:`accelerators.npu.operand_modes`); an operand a design cannot run is
    recorded as its error. All three are ``a.b`` itself when no op has formats."""
    fmt = [op_formats(op) is not None for op in ops]
    zero = np.zeros((len(ops), a.n), dtype=np.int64)
    if not any(fmt):
        return a.b, a.b, a.b, zero, zero
    rep = a.designs[0]
    cols = [rep.operand_bytes(op) if f else (0.0, 0.0, 0.0) for op, f in zip(ops, fmt)]
    is_fmt = _col(fmt, bool)
    ea, ew, ec = (np.where(is_fmt, _col([c[i] for c in cols], np.float64), a.b)
                  for i in range(3))
    deq_a = np.zeros((len(ops), len(a.dtype_values)), dtype=np.int64)
    deq_w = np.zeros_like(deq_a)
    for j, op in enumerate(ops):
        for t, unit in enumerate(a.dtype_values):
            modes = operand_modes(unit, op)
            if isinstance(modes, str):
                code = err.add(InfeasibleDesign(modes))
                err.set(rows_idx[j:j + 1], (a.dtype_index == t)[None, :], code)
                continue
            deq_a[j, t], deq_w[j, t] = modes[0] == "dequant", modes[1] == "dequant"
    return ea, ew, ec, a.per_dtype(deq_a), a.per_dtype(deq_w)


# ----------------------------------------------------------------------------- results
class _Errors:
    """Exceptions per (op, design) as codes into ``table``: 0 none, ``c`` is ``table[c - 1]``.
    The first error recorded for an (op, design) stays, as the scalar code raises the first."""

    def __init__(self, n_ops: int, n: int):
        self.codes = np.zeros((n_ops, n), dtype=np.int64)
        self.table: list[BaseException] = []

    def add(self, exc: BaseException) -> int:
        self.table.append(exc)
        return len(self.table)

    def set(self, rows: np.ndarray, mask: np.ndarray, code) -> None:
        """Set ``code`` (scalar or broadcastable to ``mask``) where ``mask`` ((len(rows), N))
        holds and nothing is recorded yet."""
        sub = self.codes[rows]
        free = (sub == 0) & mask
        sub[free] = np.broadcast_to(code, mask.shape)[free]
        self.codes[rows] = sub


@dataclass
class ManyCosts:
    """Costs of M ops on N designs: ``latency_s`` and ``energy_j`` are ``(M, N)`` (NaN where the
    design cannot run the op); :attr:`errors` the exception each design raises first going
    through the ops in order, :meth:`op_errors` those of one op; ``area_mm2`` and
    ``static_power_w`` each design's ``area_mm2()`` and ``static_power_w()``, ``(N,)``."""

    latency_s: np.ndarray
    energy_j: np.ndarray
    _errors: _Errors
    area_mm2: np.ndarray
    static_power_w: np.ndarray

    @property
    def errors(self) -> list[BaseException | None]:
        codes = self._errors.codes
        out: list[BaseException | None] = [None] * codes.shape[1]
        if codes.size:
            bad = codes != 0
            first = bad.argmax(axis=0)
            for i in np.nonzero(bad.any(axis=0))[0]:
                out[i] = self._errors.table[codes[first[i], i] - 1]
        return out

    def op_errors(self, j: int) -> list[BaseException | None]:
        table = self._errors.table
        return [table[c - 1] if c else None for c in self._errors.codes[j].tolist()]


@dataclass
class OpCosts:
    """Costs of one op on N designs (NaN where the design cannot run it)."""

    latency_s: np.ndarray
    energy_j: np.ndarray
    errors: list[BaseException | None]

    @property
    def infeasible(self) -> np.ndarray:
        """True where the scalar ``cost()`` raises."""
        return np.array([e is not None for e in self.errors], dtype=bool)

    @property
    def reasons(self) -> list[str | None]:
        """Why each design cannot run the op (the ``InfeasibleDesign`` reason, else the error)."""
        return [None if e is None else getattr(e, "reason", str(e)) for e in self.errors]


# ----------------------------------------------------------------------------- helpers
def _cdiv(a, b):
    return -(-a // b)


def _floor_int(x: np.ndarray) -> np.ndarray:
    """``int(x)`` of floats that are already whole (results of ``//``): truncation to int64."""
    return x.astype(np.int64)


def _spatial(a: DesignArrays, m, n, k):
    """``(Sr, Sc, T)`` per (op, design) under each design's dataflow (systolic.spatio_temporal)."""
    sr = np.where(a.os, m, k)
    sc = np.where(a.is_, m, n)
    t = np.where(a.ws, m, np.where(a.os, k, n))
    return sr, sc, t


def _fold_cycles(a: DesignArrays, t):
    return np.where(a.os, t + a.rows + a.cols - 2, t + 2 * a.rows + a.cols - 2)


def _compute_cycles(a: DesignArrays, m, n, k, gemms):
    """systolic.gemm_compute_cycles with op columns and design rows."""
    sr, sc, t = _spatial(a, m, n, k)
    total_folds = gemms * _cdiv(sr, a.rows) * _cdiv(sc, a.cols)
    cycles = _cdiv(total_folds, a.arrays) * _fold_cycles(a, t) - 1
    return np.where(np.minimum(np.minimum(m, n), np.minimum(k, gemms)) <= 0, 0, cycles)


def _sram_accesses(a: DesignArrays, m, n, k):
    """systolic.gemm_sram_accesses: (ifmap reads, filter reads, ofmap writes, ofmap reads)."""
    sr, sc, _ = _spatial(a, m, n, k)
    rf, cf = _cdiv(sr, a.rows), _cdiv(sc, a.cols)
    mk, kn, mn = m * k, k * n, m * n
    ifr = np.where(a.is_, mk, mk * cf)
    flr = np.where(a.ws, kn, kn * np.where(a.os, rf, cf))
    ow = np.where(a.os, mn, mn * rf)
    orr = np.where(a.os, 0, mn * (rf - 1))
    return ifr, flr, ow, orr


def _finish(a: DesignArrays, cycles, dram, fill, drain, compute_j, sram_j, reg_bytes,
            active_w, stall=0):
    """NPU._finish: the load / compute / store pipeline's latency and the total dynamic energy
    (``active_w``: the busy units' uncounted-logic power, charged for the latency)."""
    compute_s = np.maximum(cycles, 0) / a.clock
    busy = compute_s + np.maximum(stall, 0) / a.clock
    fill = np.minimum(fill, dram)
    drain = np.minimum(drain, dram - fill)
    overlap = (dram - fill - drain) / a.bw
    latency = fill / a.bw + np.maximum(busy, overlap) + drain / a.bw
    compute_j = compute_j + active_w * latency
    energy = compute_j + (sram_j + reg_bytes * a.reg_j) + dram * a.dram_j
    return latency, energy


def _col(values, dtype=None) -> np.ndarray:
    return np.asarray(values, dtype=dtype)[:, None]


def _gemm_block(a: DesignArrays, ops: list[Op], shapes: list[dict[int, tuple]], err: _Errors,
                rows_idx: np.ndarray, lat: np.ndarray, energy: np.ndarray,
                problem: np.ndarray) -> None:
    """NPU._gemm_cost for GEMM-shaped ops (no zero dimension) on all designs."""
    nb = len(a.b_values)
    first = [s[a.b_values[0]] for s in shapes]
    gemms, m, n, k = (_col([f[i] for f in first], np.int64) for i in range(4))
    # op-level values per element size, exactly as the scalar code computes them
    a_tab = np.empty((len(ops), nb))
    tbs_tab = np.empty((len(ops), nb))
    macs_reg_tab = np.empty((len(ops), nb))
    macs = np.empty((len(ops), 1))
    for j, (op, s) in enumerate(zip(ops, shapes)):
        g, mm, nn, kk = first[j][:4]
        macs[j, 0] = g * mm * nn * kk
        f = op_formats(op) is not None
        for bi, b in enumerate(a.b_values):
            a_tab[j, bi] = s[b][4]
            tbs_tab[j, bi] = op.total_bytes * (1.0 if f else element_scale(op, b))
            if f:
                x, y, _ = a.designs[0].operand_bytes(op)
                macs_reg_tab[j, bi] = g * mm * nn * kk * (2 * x + y + 2 * ACC_BYTES)
            else:
                macs_reg_tab[j, bi] = g * mm * nn * kk * (3 * b + 2 * ACC_BYTES)
    a_bytes, tbs, reg_bytes = a.per_b(a_tab), a.per_b(tbs_tab), a.per_b(macs_reg_tab)
    ea, b, bc, deq_a, deq_w = _op_elements(a, ops, err, rows_idx)

    cycles = _compute_cycles(a, m, n, k, gemms)
    # psum_chunk_stall_cycles
    sr, sc, t = _spatial(a, m, n, k)
    folds = _cdiv(gemms * _cdiv(sr, a.rows) * _cdiv(sc, a.cols), a.arrays)
    t_fit = np.maximum(1, _floor_int(a.cap_o // (a.cols * ACC_BYTES)))
    chunks = _cdiv(t, t_fit)
    stall = np.where(a.os | (chunks <= 1), 0, folds * (chunks - 1) * (2 * a.rows + a.cols - 2))

    # gemm_dram_passes(m, n, k, a_bytes / m, k * b, ACC, caps, rows, cols * arrays, rows)
    a_row = a_bytes / m
    b_col = k * b
    a_all = a_row * m
    b_all = (b_col * n).astype(np.float64)
    a_fits, b_fits = a_all <= a.cap_i, b_all <= a.cap_f
    array_n = a.cols * a.arrays
    n_edge, m_edge = np.minimum(n, array_n), np.minimum(m, a.rows)
    cands_a: list[np.ndarray] = []
    cands_b: list[np.ndarray] = []
    cands_moved: list[np.ndarray] = []

    def consider(ok, a_passes, b_passes):
        a_passes = np.broadcast_to(a_passes, ok.shape)
        b_passes = np.broadcast_to(b_passes, ok.shape)
        moved = a_passes * a_all + b_passes * b_all
        cands_a.append(a_passes)
        cands_b.append(b_passes)
        cands_moved.append(np.where(ok, moved, np.inf))

    with np.errstate(divide="ignore", invalid="ignore"):
        nz = a_row != 0
        tm = np.minimum(np.minimum(m, np.where(nz, _floor_int(np.where(nz, a.cap_i // np.where(
            nz, a_row, 1.0), 0)), m)), _floor_int(a.cap_o // (n_edge * ACC_BYTES)))
        consider(tm >= 1, 1, np.where(b_fits, 1, _cdiv(m, np.maximum(tm, 1))))
        tn = np.minimum(np.minimum(n, _floor_int(a.cap_f // b_col)),
                        _floor_int(a.cap_o // (m_edge * ACC_BYTES)))
        consider(tn >= 1, np.where(a_fits, 1, _cdiv(n, np.maximum(tn, 1))), 1)
        kc = np.maximum(1, np.minimum(k, a.rows))
        a_chunk = a_row * kc / k
        b_chunk = b_col * kc / k
        anz, bnz = a_chunk != 0, b_chunk != 0
        m_cap = np.minimum(m, np.where(anz, _floor_int(np.where(
            anz, a.cap_i // np.where(anz, a_chunk, 1.0), 0)), m))
        n_cap = np.minimum(n, np.where(bnz, _floor_int(np.where(
            bnz, a.cap_f // np.where(bnz, b_chunk, 1.0), 0)), n))
    c_elems, side = a.c_elems, a.side
    for tm0 in (np.minimum(m_cap, side), m_cap,
                np.minimum(m_cap, c_elems // np.maximum(1, n_cap))):
        tm0 = np.where(m_cap >= 1, np.maximum(1, tm0), 0)
        tn0 = np.where(tm0 != 0, np.minimum(n_cap, c_elems // np.maximum(tm0, 1)), 0)
        ok = (tm0 >= 1) & (tn0 >= 1)
        tm1 = np.minimum(m_cap, c_elems // np.maximum(tn0, 1))
        consider(ok, np.where(a_fits, 1, _cdiv(n, np.maximum(tn0, 1))),
                 np.where(b_fits, 1, _cdiv(m, np.maximum(tm1, 1))))
    moved = np.stack(cands_moved)
    best = np.argmin(moved, axis=0)[None]   # the first of equal minima, as the scalar's strict <
    no_tile = ~np.isfinite(np.take_along_axis(moved, best, 0)[0])
    a_passes = np.take_along_axis(np.stack(cands_a), best, 0)[0]
    b_passes = np.take_along_axis(np.stack(cands_b), best, 0)[0]

    b_bytes, c_bytes = k * n * b, m * n * bc
    refetch = gemms * ((a_passes - 1) * a_bytes + (b_passes - 1) * b_bytes)
    ifr, flr, ow, orr = _sram_accesses(a, m, n, k)
    sram_j = gemms * (ifr * ea * a.ej_i + flr * b * a.ej_f + (ow + orr) * ACC_BYTES * a.ej_o)
    sram_j = sram_j + gemms * (a_passes * a_bytes * a.ej_i + b_passes * b_bytes * a.ej_f
                               + c_bytes * a.ej_o)
    rk, edge_m, edge_n = np.minimum(k, a.rows), np.minimum(m, a.rows), np.minimum(n, array_n)
    fill = a_bytes / (m * k) * edge_m * rk + rk * edge_n * b
    drain = edge_m * edge_n * bc
    dims_bytes = gemms * (a_bytes + b_bytes + c_bytes)
    compulsory = np.where(tbs != 0, tbs, dims_bytes)
    dequant = a.mac_j * (gemms * ifr * deq_a + gemms * flr * deq_w)
    latency, en = _finish(a, cycles, compulsory + refetch, fill, drain,
                          macs * a.mac_j + dequant, sram_j, reg_bytes, a.act_array, stall=stall)
    lat[rows_idx], energy[rows_idx] = latency, en
    err.set(rows_idx, np.broadcast_to(problem != 0, latency.shape), problem)
    if no_tile.any():
        for j in np.nonzero(no_tile.any(axis=1))[0]:
            g, mm, nn, kk = first[j][:4]
            code = err.add(InfeasibleDesign(f"no tile of the {mm}x{nn}x{kk} GEMM fits the "
                                            "scratchpads"))
            err.set(rows_idx[j:j + 1], no_tile[j:j + 1], code)


# ----------------------------------------------------------------------------- attention
def _attention_block(a: DesignArrays, ops: list[Op], dims: list[tuple], err: _Errors,
                     rows_idx: np.ndarray, lat: np.ndarray, energy: np.ndarray,
                     problem: np.ndarray) -> None:
    """NPU._attention_cost for attention ops on all designs."""
    nb = len(a.b_values)
    batch, heads, kv_heads, sq, skv, d, dv = (_col([x[i] for x in dims], np.int64)
                                              for i in range(7))
    frac = _col([x[7] for x in dims], np.float64)
    g = batch * heads
    tbs_tab, qo_tab = np.empty((len(ops), nb)), np.empty((len(ops), nb), dtype=np.int64)
    scores_l, vops_l, macs_l, group_rows_l = [], [], [], []
    elems = [a.designs[0].operand_bytes(op) if op_formats(op) is not None else None
             for op in ops]
    for j, (op, x) in enumerate(zip(ops, dims)):
        bt, h, kvh, q, kv, dd, dvv, fr = x
        gg = bt * h
        scores = gg * q * kv * fr
        scores_l.append(scores)
        vops_l.append(scores * VECTOR_OPS_PER_ELEMENT[ir.SOFTMAX])
        macs_l.append(gg * q * kv * (dd + dvv) * fr)
        group_rows_l.append(q * max(1, h // max(1, kvh)))
        e = elems[j]
        for bi, b in enumerate(a.b_values):
            tbs_tab[j, bi] = op.total_bytes * (1.0 if e else element_scale(op, b))
            qo_tab[j, bi] = (gg * q * (dd * e[0] + dvv * e[2]) if e
                             else gg * q * (dd + dvv) * b)
    scores, vector_ops, macs = _col(scores_l), _col(vops_l), _col(macs_l)
    group_rows = _col(group_rows_l, np.int64)
    tbs, q_o_bytes = a.per_b(tbs_tab), a.per_b(qo_tab)
    b, bkv, bc, deq_a, deq_w = _op_elements(a, ops, err, rows_idx)

    qk = _compute_cycles(a, sq, skv, d, g)
    pv = _compute_cycles(a, sq, dv, skv, g)
    array_cycles = np.ceil((qk + pv) * frac)
    vector_cycles = np.ceil(vector_ops / a.lanes)
    cycles = np.maximum(array_cycles, vector_cycles)

    kv_group = skv * (d + dv) * bkv
    ca = a.cols * a.arrays
    div_i = d * b
    div_o = (np.minimum(skv, ca) + dv) * ACC_BYTES
    zero = (div_i == 0) | (div_o == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tile_q = np.minimum(np.minimum(group_rows, _floor_int(np.where(
            zero, 0, a.cap_i // np.where(zero, 1, div_i)))), _floor_int(np.where(
                zero, 0, a.cap_o // np.where(zero, 1, div_o))))
    passes = np.where(kv_group <= a.cap_f, 1, np.ceil(group_rows / np.maximum(1, tile_q)))
    kv_bytes = batch * kv_heads * kv_group
    compulsory = np.where(tbs != 0, tbs, q_o_bytes + kv_bytes)
    refetch = (passes - 1) * kv_bytes * frac

    i1, f1, w1, r1 = _sram_accesses(a, sq, skv, d)
    i2, f2, w2, r2 = _sram_accesses(a, sq, dv, skv)
    sram_j = g * frac * ((i1 + i2) * b * a.ej_i + (f1 + f2) * bkv * a.ej_f
                         + (w1 + r1 + w2 + r2) * ACC_BYTES * a.ej_o)
    sram_j = sram_j + scores * (2 * ACC_BYTES * a.ej_o + 2 * bc * a.ej_i)
    rows = np.minimum(sq, a.rows)
    fill = rows * d * b + np.minimum(skv, ca) * d * bkv
    drain = rows * dv * bc
    reg = (macs * (2 * b + bkv + 2 * ACC_BYTES) if bkv is not b
           else macs * (3 * b + 2 * ACC_BYTES))
    dequant = a.mac_j * (g * frac * (i1 + i2) * deq_a + g * frac * (f1 + f2) * deq_w)
    latency, en = _finish(a, cycles, compulsory + refetch, fill, drain,
                          macs * a.mac_j + vector_ops * a.vec_j + dequant, sram_j,
                          reg + vector_ops * 3 * bc, a.act_array + a.act_vector)
    lat[rows_idx], energy[rows_idx] = latency, en
    err.set(rows_idx, np.broadcast_to(problem != 0, latency.shape), problem)
    if zero.any():
        code = err.add(ZeroDivisionError("float floor division by zero"))
        err.set(rows_idx, np.broadcast_to(zero, latency.shape), code)


# ----------------------------------------------------------------------------- vector unit
def _vector_block(a: DesignArrays, tabs: np.ndarray, rows_idx: np.ndarray, lat: np.ndarray,
                  energy: np.ndarray, elem: np.ndarray | None = None) -> None:
    """NPU._vector_cost; ``tabs[field, op, b]`` holds :func:`accelerators.npu.vector_parts`
    per element size; ``elem`` each op's element bytes where it has number formats (0: the
    design's)."""
    lane_ops, read, written, dram, read_x, reg_bytes = (a.per_b(t) for t in tabs)
    cycles = np.ceil(lane_ops / a.lanes)
    sram_j = read_x * a.ej_i + written * 2 * a.ej_o
    chunk = a.lanes * (a.b if elem is None or not elem.any()
                       else np.where(elem[:, None] > 0, elem[:, None], a.b))
    latency, en = _finish(a, cycles, dram, np.minimum(read, chunk), np.minimum(written, chunk),
                          lane_ops * a.vec_j, sram_j, reg_bytes, a.act_vector)
    lat[rows_idx], energy[rows_idx] = latency, en


# ----------------------------------------------------------------------------- entry points
def _exact(*values) -> bool:
    """True when every value is a finite number of magnitude below EXACT_INT_LIMIT."""
    for v in values:
        if not isinstance(v, (int, float)) or not abs(v) < EXACT_INT_LIMIT:
            return False
    return True


def cost_many(designs: Sequence[NPU], ops: Sequence[Op]) -> ManyCosts:
    """Latency (s) and total dynamic energy (J) of every op in ``ops`` on every design in
    ``designs``, as ``(len(ops), len(designs))`` arrays, equal to ``design.cost(op)``.

    ``designs`` must be :class:`~accelerators.npu.NPU` instances (any parameters and presets).
    If one is of a subclass (which may change the model), every design is costed by its own
    ``cost()``.
    """
    designs = list(designs)
    for d in designs:
        if not isinstance(d, NPU):
            raise BadInput("designs", type(d).__name__, "npu designs (accelerators.npu.NPU)")
    n_ops, n = len(ops), len(designs)
    lat = np.full((n_ops, n), np.nan)
    energy = np.full((n_ops, n), np.nan)
    err = _Errors(n_ops, n)
    if all(type(d) is NPU for d in designs):
        a = DesignArrays(designs)
        if n:
            _cost_exact(a, ops, lat, energy, err)
        area, static = fixed_costs(a)
    else:
        for i, d in enumerate(designs):
            _scalar_into(d, i, ops, range(n_ops), lat, energy, err)
        area = np.array([d.area_mm2() for d in designs], dtype=np.float64)
        static = np.array([d.static_power_w() for d in designs], dtype=np.float64)
    return ManyCosts(lat, energy, err, area, static)


def fixed_costs(a: DesignArrays) -> tuple[np.ndarray, np.ndarray]:
    """``(area_mm2, static_power_w)`` per design: NPU.area_mm2 and NPU.static_power_w."""
    return (np.array([d.area_mm2() for d in a.designs], dtype=np.float64),
            np.array([d.static_power_w() for d in a.designs], dtype=np.float64))


def cost_op(designs: Sequence[NPU], op: Op) -> OpCosts:
    """Latency (s) and total dynamic energy (J) of ``op`` on each design, as ``(N,)`` arrays,
    and the exception ``design.cost(op)`` raises on each design (None where it runs)."""
    many = cost_many(designs, [op])
    return OpCosts(many.latency_s[0], many.energy_j[0], many.op_errors(0))


def _scalar_into(design: NPU, i: int, ops: Sequence[Op], which, lat: np.ndarray,
                 energy: np.ndarray, err: _Errors) -> None:
    """Cost ``ops[j]`` for ``j`` in ``which`` on design ``i`` with its scalar ``cost()``."""
    for j in which:
        try:
            c = design.cost(ops[j])
        except Exception as exc:   # recorded; the caller raises it as the scalar path would
            err.codes[j, i] = err.add(exc)
            continue
        lat[j, i], energy[j, i] = c.latency_s, c.total_energy_j


def _cost_exact(a: DesignArrays, ops: Sequence[Op], lat: np.ndarray, energy: np.ndarray,
                err: _Errors) -> None:
    """:func:`cost_many` for designs of class NPU exactly."""
    designs = a.designs
    gemm: list[tuple[int, Op, dict]] = []
    attn: list[tuple[int, Op, tuple]] = []
    vec: list[tuple[int, list]] = []
    scalar: list[int] = []
    rep = {b: designs[int(np.argmax(a.b[0] == b))] for b in a.b_values}
    problem = np.zeros((1, a.n), dtype=np.int64)
    for i, p in enumerate(a.problem):
        if p is not None:
            problem[0, i] = err.add(InfeasibleDesign(p))

    def add_vector_op(j: int, op: Op) -> None:
        own = op.bytes_per_element if op_formats(op) is not None else 0
        parts = [vector_parts(op, own or b) for b in a.b_values]
        if all(_exact(*p) for p in parts):
            vec.append((j, parts, own))
        else:
            scalar.append(j)

    def on_lanes(op: Op) -> bool:   # some design runs it on its vector lanes: scalar code
        return op_formats(op) is not None and any(
            isinstance(operand_modes(t, op), str) and mac_formats.vector_fallback(t, op)
            for t in a.dtype_values)

    for j, op in enumerate(ops):
        try:
            if op.kind in ir.COMPOSITE_KINDS or (op.kind in _ARRAY_KINDS + (ir.ATTENTION,)
                                                 and on_lanes(op)):
                scalar.append(j)
            elif op.kind in _ARRAY_KINDS:
                shapes = {b: rep[b]._gemm_shape(op) for b in a.b_values}
                g, m, nn, k, _ = shapes[a.b_values[0]]
                if min(g, m, nn, k) <= 0:
                    add_vector_op(j, op)
                elif _exact(g * m * nn * k * _INT_GROWTH, *(s[4] for s in shapes.values()),
                            op.total_bytes * 4):
                    gemm.append((j, op, shapes))
                else:
                    scalar.append(j)
            elif op.kind == ir.SPARSE_ATTENTION:   # tile counts: the scalar code
                scalar.append(j)
            elif op.kind == ir.ATTENTION:
                x = attention_dims(op)
                bt, h, kvh, q, kv, dd, dvv, _ = x
                size = max(1, bt) * max(1, h) * max(1, kvh) * max(1, q) * max(1, kv)
                if _exact(size * (abs(dd) + abs(dvv) + 1) * _INT_GROWTH, op.total_bytes * 4):
                    attn.append((j, op, x))
                else:
                    scalar.append(j)
            else:
                add_vector_op(j, op)
        except Exception as exc:   # op-level: every design raises it
            err.codes[j] = err.add(exc)
    if gemm:
        _gemm_block(a, [g[1] for g in gemm], [g[2] for g in gemm], err,
                    np.array([g[0] for g in gemm]), lat, energy, problem)
    if attn:
        _attention_block(a, [x[1] for x in attn], [x[2] for x in attn], err,
                         np.array([x[0] for x in attn]), lat, energy, problem)
    if vec:
        tabs = np.array([[[p[f] for p in parts] for _, parts, _ in vec] for f in range(6)],
                        dtype=np.float64)
        _vector_block(a, tabs, np.array([v[0] for v in vec]), lat, energy,
                      np.array([v[2] for v in vec], dtype=np.int64))
    for i, d in enumerate(designs):
        _scalar_into(d, i, ops, scalar, lat, energy, err)
    bad = err.codes != 0
    lat[bad] = np.nan
    energy[bad] = np.nan
