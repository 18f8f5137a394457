"""The ``npu`` cost model evaluated for many designs at once (the fast screening path), on
numpy or, through :mod:`accelerators.array_ns`, torch (a GPU where there is one).

Same model as :meth:`accelerators.npu.NPU.cost` (and the formulas of
:mod:`accelerators.systolic`), written over arrays: one row per op, one column per design.
Every expression keeps the scalar code's order of operations, and integers stay integers
(int64) where the scalar code keeps Python ints, so the results are the scalar ones bit for
bit as long as the integers involved stay below 2**53 (``EXACT_INT_LIMIT``); an op whose sizes
could exceed that is costed by the scalar code instead, design by design. On torch the same
float64 operations run in the same order (equal to the numpy results; tested).

Each block is two steps: the op's *features* (its GEMM dimensions, operand and compulsory
bytes at each design's element size, lane operations...) as arrays of ``(ops, 1)`` — or
``(ops, N)`` when every column is its own architecture (:mod:`simulators.population`) — and a
*kernel* that combines them with the design arrays ``(1, N)`` (folds, tiling, scratchpad
capacities, energies per access, clock, bandwidth). What depends on the op and the element
size only is worked out once per op and element size in plain Python, exactly as the scalar
code does, then gathered per design.

Errors match the scalar path too: for each design the exception that ``design.cost(op)`` would
raise first, op by op in the given order (``InfeasibleDesign`` for a scratchpad that cannot hold
a minimal tile or a GEMM that cannot be tiled, ``BadInput`` for an op without the attributes it
needs, and whatever else the scalar code would raise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accelerators import mac_formats
from accelerators.array_ns import namespace
from accelerators.npu import (ACC_BYTES, NPU, VECTOR_OPS_PER_ELEMENT, attention_dims,
                              element_scale, operand_modes, vector_parts)
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
    """Parameters of N ``NPU`` designs as ``(1, N)`` arrays of the namespace ``xp``
    (broadcast against ``(ops, 1)`` or ``(ops, N)``).

    Energies per access and per op are read from the designs themselves (the values their own
    ``cost()`` uses), not recomputed, so they are identical.
    """

    _INTS = ("rows", "cols", "arrays", "b", "lanes")
    _FLOATS = ("clock", "bw", "cap_i", "cap_f", "cap_o", "ej_i", "ej_f", "ej_o", "reg_j",
               "mac_j", "vec_j", "dram_j", "act_array", "act_vector")

    def __init__(self, designs: Sequence[NPU], xp: Any = None):
        self.xp = xp = xp if xp is not None else namespace()
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
        self._iv = np.array(ints, dtype=np.int64).reshape(n, len(self._INTS)).T
        self._fv = np.array(floats, dtype=np.float64).reshape(n, len(self._FLOATS)).T
        self._df = np.array(df, dtype=object).reshape(n)
        self._dtype = np.array([d.hw.dtype for d in self.designs], dtype=object).reshape(n)
        # each design's problem as a code: 0 none, c is problem_texts[c - 1] (one array, so
        # that a cost call over N designs reads no per-design Python)
        texts: dict[str, int] = {}
        self.problem_codes = np.array([0 if d._problem is None
                                       else texts.setdefault(d._problem, len(texts) + 1)
                                       for d in self.designs], dtype=np.int64).reshape(n)
        self.problem_texts: list[str] = list(texts)
        # c_resident's output block: elements of half the ofmap scratchpad and their isqrt
        c_elems = [int(c // ACC_BYTES) for c in self._fv[4].tolist()]
        self._c_elems = np.array(c_elems, dtype=np.int64).reshape(n)
        self._side = np.array([max(1, math.isqrt(c)) for c in c_elems], dtype=np.int64)
        self.area_mm2 = np.array([d.area_mm2() for d in self.designs], dtype=np.float64)
        self.static_power_w = np.array([d.static_power_w() for d in self.designs],
                                       dtype=np.float64)
        # what a whole-workload evaluation checks per design: the bytes it holds (inf:
        # unchecked) and whether it can be built at all (no physical problem)
        self.capacity_bytes = np.array([_capacity(d) for d in self.designs], dtype=np.float64)
        self.buildable = np.array([_buildable(d) for d in self.designs], dtype=bool)
        self._columns()

    @classmethod
    def from_columns(cls, designs: Sequence[NPU], ints: np.ndarray, floats: np.ndarray,
                     df: np.ndarray, dtype: np.ndarray, problems: Sequence[str | None],
                     area_mm2: np.ndarray, static_power_w: np.ndarray,
                     capacity_bytes: np.ndarray, xp: Any = None) -> "DesignArrays":
        """Designs whose parameters are already arrays (:mod:`accelerators.npu_batch`):
        ``ints`` ``(len(_INTS), N)``, ``floats`` ``(len(_FLOATS), N)``, ``df`` and ``dtype``
        ``(N,)`` objects, each design's scratchpad problem (None: none). ``designs``: a
        sequence whose items are the NPU objects (read only for ops in number formats).
        Every design is buildable (npu_batch builds no design with a physical problem)."""
        out = object.__new__(cls)
        out.xp = xp if xp is not None else namespace()
        out.designs = designs
        n = ints.shape[1]
        out._iv, out._fv, out._df, out._dtype = ints, floats, df, dtype
        texts: dict[str, int] = {}
        out.problem_codes = np.array([0 if p is None else texts.setdefault(p, len(texts) + 1)
                                      for p in problems], dtype=np.int64).reshape(n)
        out.problem_texts = list(texts)
        c_elems = floats[4] // ACC_BYTES   # exact: a scratchpad's bytes are an integer
        out._c_elems = c_elems.astype(np.int64)
        out._side = np.array([max(1, math.isqrt(c)) for c in out._c_elems.tolist()],
                             dtype=np.int64).reshape(n)
        out.area_mm2, out.static_power_w = area_mm2, static_power_w
        out.capacity_bytes = capacity_bytes
        out.buildable = np.ones(n, dtype=bool)
        out._columns()
        return out

    def _columns(self) -> None:
        """The ``(1, N)`` arrays of ``_iv``, ``_fv`` and ``_df`` on the namespace's device."""
        xp, n = self.xp, self._iv.shape[1]
        self.n = n
        for name, row in zip(self._INTS, self._iv):
            setattr(self, name, xp.asarray(row[None, :], np.int64))
        for name, row in zip(self._FLOATS, self._fv):
            setattr(self, name, xp.asarray(row[None, :], np.float64))
        df = self._df.reshape(1, n)
        self.ws, self.os, self.is_ = (xp.asarray(df == x) for x in ("ws", "os", "is"))
        # the problems present, in the order of the first design with each, and each design's
        # number among them (0 none) on the device: what a cost call records, read per call
        # without a pass over the designs
        present, first = np.unique(self.problem_codes, return_index=True)
        present = present[np.argsort(first, kind="stable")]
        present = present[present != 0]
        rank = np.zeros(len(self.problem_texts) + 1, dtype=np.int64)
        rank[present] = np.arange(1, len(present) + 1)
        self.problems_present = [self.problem_texts[c - 1] for c in present.tolist()]
        self.problem_rank = xp.asarray(rank[self.problem_codes].reshape(1, n))
        self.c_elems = xp.asarray(self._c_elems.reshape(1, n))
        self.side = xp.asarray(self._side.reshape(1, n))
        # element sizes present and each design's index among them (op-level values per size)
        self.b_values = sorted({int(b) for b in self._iv[3].tolist()})
        self.b_index = xp.asarray(np.searchsorted(self.b_values, self._iv[3]).astype(np.int64))
        # MAC formats present and each design's index (what an op in number formats runs on)
        self.dtype_values = sorted(set(self._dtype.tolist()))
        self.dtype_index_np = np.array([self.dtype_values.index(t) for t in self._dtype],
                                       dtype=np.int64)
        self.dtype_index = xp.asarray(self.dtype_index_np)

    def take(self, index: Sequence[int]) -> "DesignArrays":
        """The designs at ``index`` (repeats allowed), as arrays on the same device."""
        idx = np.asarray(index, dtype=np.int64)
        out = object.__new__(DesignArrays)
        out.xp = self.xp
        out.designs = ([self.designs[i] for i in idx.tolist()] if isinstance(self.designs, list)
                       else _Subset(self.designs, idx.tolist()))
        out._iv, out._fv, out._df = self._iv[:, idx], self._fv[:, idx], self._df[idx]
        out._dtype = self._dtype[idx]
        out._c_elems, out._side = self._c_elems[idx], self._side[idx]
        out.area_mm2, out.static_power_w = self.area_mm2[idx], self.static_power_w[idx]
        out.capacity_bytes, out.buildable = self.capacity_bytes[idx], self.buildable[idx]
        out.problem_codes, out.problem_texts = self.problem_codes[idx], self.problem_texts
        out._columns()
        return out

    def per_b(self, table: np.ndarray):
        """``(ops, len(b_values))`` op-level values -> ``(ops, N)`` by each design's element size."""
        return self.xp.asarray(table)[:, self.b_index]

    def per_dtype(self, table: np.ndarray):
        """``(ops, len(dtype_values))`` values -> ``(ops, N)`` by each design's MAC format."""
        return self.xp.asarray(table)[:, self.dtype_index]


class _Subset(Sequence):
    """Items ``index`` of a sequence whose items are made on first use (an
    :class:`~accelerators.npu_batch.NPUBatch`), read only when asked for."""

    def __init__(self, items: Sequence, index: list[int]):
        self._items, self._index = items, index

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._items[j] for j in self._index[i]]
        return self._items[self._index[i]]


def _capacity(d: NPU) -> float:
    """:meth:`NPU.memory_capacity_bytes`, inf where unchecked."""
    c = d.memory_capacity_bytes()
    return math.inf if c is None else c


def _buildable(d: NPU) -> bool:
    """Whether the design has no physical problem (or is embedded, where none is charged)."""
    phys = d.physical()
    return not (phys is not None and phys.problem and not d.embedded)


# ----------------------------------------------------------------------------- results
class _Errors:
    """Exceptions per (op, design) as codes into ``table``: 0 none, ``c`` is ``table[c - 1]``.
    The first error recorded for an (op, design) stays, as the scalar code raises the first.
    ``codes`` lives on the namespace's device."""

    def __init__(self, n_ops: int, n: int, xp: Any = None):
        self.xp = xp if xp is not None else namespace()
        self.codes = self.xp.zeros((n_ops, n), self.xp.int64)
        self.table: list[BaseException] = []

    def add(self, exc: BaseException) -> int:
        self.table.append(exc)
        return len(self.table)

    def set(self, rows, mask, code) -> None:
        """Set ``code`` (scalar or broadcastable to ``mask``) where ``mask`` ((len(rows), N))
        holds and nothing is recorded yet."""
        xp = self.xp
        rows = xp.asarray(rows, np.int64)
        sub = self.codes[rows]
        # where(), not boolean indexing: no device-to-host count of the mask
        self.codes[rows] = xp.where((sub == 0) & mask, xp.asarray(code, np.int64), sub)

    def set_row(self, j: int, code: int) -> None:
        self.codes[j] = code

    def numpy(self) -> np.ndarray:
        return self.xp.to_numpy(self.codes)


@dataclass
class ManyCosts:
    """Costs of M ops on N designs: ``latency_s`` and ``energy_j`` are ``(M, N)`` (NaN where the
    design cannot run the op), numpy arrays (or the namespace's, with ``on_device``);
    :attr:`errors` the exception each design raises first going through the ops in order,
    :meth:`op_errors` those of one op; ``area_mm2`` and ``static_power_w`` each design's
    ``area_mm2()`` and ``static_power_w()``, ``(N,)``."""

    latency_s: Any
    energy_j: Any
    _errors: _Errors
    area_mm2: np.ndarray
    static_power_w: np.ndarray
    #: Bytes each (op, design) puts on each shared channel (``OpCost.traffic``), ``(M, N)``
    #: (numpy arrays, or the namespace's with ``on_device``).
    traffic: dict[str, np.ndarray] | None = None
    #: Per unit, where each (op, design) holds it (``OpCost.unit`` and ``also_holds``),
    #: ``(M, N)`` booleans (as ``traffic``).
    holds: dict[str, np.ndarray] | None = None

    @property
    def feasible(self):
        """``(N,)`` booleans on the arrays' device: the design runs every op."""
        return (self._errors.codes == 0).all(0)

    @property
    def errors(self) -> list[BaseException | None]:
        codes = self._errors.numpy()
        out: list[BaseException | None] = [None] * codes.shape[1]
        if codes.size:
            bad = codes != 0
            first = bad.argmax(axis=0)
            for i in np.nonzero(bad.any(axis=0))[0]:
                out[i] = self._errors.table[codes[first[i], i] - 1]
        return out

    def op_errors(self, j: int) -> list[BaseException | None]:
        table = self._errors.table
        return [table[c - 1] if c else None for c in self._errors.numpy()[j].tolist()]


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


def _spatial(a: DesignArrays, m, n, k):
    """``(Sr, Sc, T)`` per (op, design) under each design's dataflow (systolic.spatio_temporal)."""
    xp = a.xp
    sr = xp.where(a.os, m, k)
    sc = xp.where(a.is_, m, n)
    t = xp.where(a.ws, m, xp.where(a.os, k, n))
    return sr, sc, t


def _fold_cycles(a: DesignArrays, t):
    return a.xp.where(a.os, t + a.rows + a.cols - 2, t + 2 * a.rows + a.cols - 2)


def _compute_cycles(a: DesignArrays, m, n, k, gemms):
    """systolic.gemm_compute_cycles with op rows and design columns."""
    xp = a.xp
    sr, sc, t = _spatial(a, m, n, k)
    total_folds = gemms * _cdiv(sr, a.rows) * _cdiv(sc, a.cols)
    cycles = _cdiv(total_folds, a.arrays) * _fold_cycles(a, t) - 1
    return xp.where(xp.minimum(xp.minimum(m, n), xp.minimum(k, gemms)) <= 0, 0, cycles)


def _sram_accesses(a: DesignArrays, m, n, k):
    """systolic.gemm_sram_accesses: (ifmap reads, filter reads, ofmap writes, ofmap reads)."""
    xp = a.xp
    sr, sc, _ = _spatial(a, m, n, k)
    rf, cf = _cdiv(sr, a.rows), _cdiv(sc, a.cols)
    mk, kn, mn = m * k, k * n, m * n
    ifr = xp.where(a.is_, mk, mk * cf)
    flr = xp.where(a.ws, kn, kn * xp.where(a.os, rf, cf))
    ow = xp.where(a.os, mn, mn * rf)
    orr = xp.where(a.os, 0, mn * (rf - 1))
    return ifr, flr, ow, orr


def _finish(a: DesignArrays, cycles, dram, fill, drain, compute_j, sram_j, reg_bytes,
            active_w, stall=0):
    """NPU._finish: the load / compute / store pipeline's latency and the total dynamic energy
    (``active_w``: the busy units' uncounted-logic power, charged for the latency)."""
    xp = a.xp
    compute_s = xp.div(xp.maximum(cycles, 0), a.clock)
    busy = compute_s + xp.div(xp.maximum(stall, 0), a.clock)
    fill = xp.minimum(fill, dram)
    drain = xp.minimum(drain, dram - fill)
    overlap = xp.div(dram - fill - drain, a.bw)
    latency = xp.div(fill, a.bw) + xp.maximum(busy, overlap) + xp.div(drain, a.bw)
    compute_j = compute_j + active_w * latency
    energy = compute_j + (sram_j + reg_bytes * a.reg_j) + dram * a.dram_j
    return latency, energy


def _col(xp, values, dtype) -> Any:
    return xp.asarray(np.asarray(values, dtype=dtype)[:, None])


def _op_elements(a: DesignArrays, ops: list[Op], err: "_Errors", rows_idx: np.ndarray):
    """Per op of a GEMM-class block: bytes per element of its activation operand, other
    operand and output as ``(ops, N)`` arrays (the design's element for an op without number
    formats, as :meth:`NPU.operand_bytes`), and 0/1 arrays of the operands each design
    dequantises (:func:`accelerators.npu.operand_modes`); an operand a design cannot run is
    recorded as its error. All three are ``a.b`` itself and the flags 0 when no op has
    formats."""
    xp = a.xp
    fmt = [op_formats(op) is not None for op in ops]
    if not any(fmt):
        return a.b, a.b, a.b, 0, 0
    rep = a.designs[0]
    cols = [rep.operand_bytes(op) if f else (0.0, 0.0, 0.0) for op, f in zip(ops, fmt)]
    is_fmt = _col(xp, fmt, bool)
    ea, ew, ec = (xp.where(is_fmt, _col(xp, [c[i] for c in cols], np.float64), a.b)
                  for i in range(3))
    deq_a = np.zeros((len(ops), len(a.dtype_values)), dtype=np.int64)
    deq_w = np.zeros_like(deq_a)
    for j, op in enumerate(ops):
        for t, unit in enumerate(a.dtype_values):
            modes = operand_modes(unit, op)
            if isinstance(modes, str):
                code = err.add(InfeasibleDesign(modes))
                err.set(rows_idx[j:j + 1], xp.asarray((a.dtype_index_np == t)[None, :]), code)
                continue
            deq_a[j, t], deq_w[j, t] = modes[0] == "dequant", modes[1] == "dequant"
    return ea, ew, ec, a.per_dtype(deq_a), a.per_dtype(deq_w)


# ----------------------------------------------------------------------------- GEMMs
@dataclass
class GemmFeatures:
    """A GEMM op's features per (op, design): ``gemms``, ``m``, ``n``, ``k`` (int64),
    ``a_bytes`` (its A operand per GEMM), ``tbs`` (the op's compulsory bytes at the design's
    element size, 0 when it carries none), ``reg_bytes`` (register bytes of its MACs) and
    ``macs`` (float64); each ``(ops, 1)`` or ``(ops, N)``."""

    gemms: Any
    m: Any
    n: Any
    k: Any
    a_bytes: Any
    tbs: Any
    reg_bytes: Any
    macs: Any
    ea: Any = None      # bytes per element of the activation operand, the other operand and
    eb: Any = None      # the output (None: the design's element size); operands each design
    ec: Any = None      # dequantises (0/1, or 0)
    deq_a: Any = 0
    deq_w: Any = 0


def gemm_features(a: DesignArrays, ops: list[Op], shapes: list[dict[int, tuple]],
                  err: "_Errors | None" = None, rows_idx=None) -> GemmFeatures:
    """:class:`GemmFeatures` of ops from ``NPU._gemm_shape`` per element size (``shapes``),
    exactly as the scalar code computes them (number formats' elements where an op has
    them, their errors recorded in ``err`` at ``rows_idx``)."""
    xp, nb = a.xp, len(a.b_values)
    first = [s[a.b_values[0]] for s in shapes]
    a_tab = np.empty((len(ops), nb))
    tbs_tab = np.empty((len(ops), nb))
    macs_reg_tab = np.empty((len(ops), nb))
    macs = np.empty(len(ops))
    for j, (op, s) in enumerate(zip(ops, shapes)):
        g, mm, nn, kk = first[j][:4]
        macs[j] = g * mm * nn * kk
        f = op_formats(op) is not None
        for bi, b in enumerate(a.b_values):
            a_tab[j, bi] = s[b][4]
            tbs_tab[j, bi] = op.total_bytes * (1.0 if f else element_scale(op, b))
            if f:
                x, y, _ = a.designs[0].operand_bytes(op)
                macs_reg_tab[j, bi] = g * mm * nn * kk * (2 * x + y + 2 * ACC_BYTES)
            else:
                macs_reg_tab[j, bi] = g * mm * nn * kk * (3 * b + 2 * ACC_BYTES)
    gemms, m, n, k = (_col(xp, [f[i] for f in first], np.int64) for i in range(4))
    out = GemmFeatures(gemms, m, n, k, a.per_b(a_tab), a.per_b(tbs_tab),
                       a.per_b(macs_reg_tab), _col(xp, macs, np.float64))
    if err is not None:
        out.ea, out.eb, out.ec, out.deq_a, out.deq_w = _op_elements(a, ops, err, rows_idx)
    return out


def gemm_kernel(a: DesignArrays, f: GemmFeatures, dram_out: list | None = None):
    """NPU._gemm_cost for GEMM-shaped ops (no zero dimension) on all designs: latency,
    energy and where no tile fits (``(ops, N)`` each); the DRAM bytes appended to
    ``dram_out`` when given."""
    xp = a.xp
    gemms, m, n, k, a_bytes = f.gemms, f.m, f.n, f.k, f.a_bytes
    b = a.b if f.eb is None else f.eb
    ea = a.b if f.ea is None else f.ea
    bc = a.b if f.ec is None else f.ec
    cycles = _compute_cycles(a, m, n, k, gemms)
    # psum_chunk_stall_cycles
    sr, sc, t = _spatial(a, m, n, k)
    folds = _cdiv(gemms * _cdiv(sr, a.rows) * _cdiv(sc, a.cols), a.arrays)
    t_fit = xp.maximum(1, xp.to_int(a.cap_o // (a.cols * ACC_BYTES)))
    chunks = _cdiv(t, t_fit)
    stall = xp.where(a.os | (chunks <= 1), 0, folds * (chunks - 1) * (2 * a.rows + a.cols - 2))

    # gemm_dram_passes(m, n, k, a_bytes / m, k * b, ACC, caps, rows, cols * arrays, rows)
    a_row = xp.div(a_bytes, m)
    b_col = k * b
    a_all = a_row * m
    b_all = xp.to_float(b_col * n)
    a_fits, b_fits = a_all <= a.cap_i, b_all <= a.cap_f
    array_n = a.cols * a.arrays
    n_edge, m_edge = xp.minimum(n, array_n), xp.minimum(m, a.rows)
    cands_a: list = []
    cands_b: list = []
    cands_moved: list = []

    def consider(ok, a_passes, b_passes):
        a_passes = xp.broadcast_to(xp.asarray(a_passes), tuple(ok.shape))
        b_passes = xp.broadcast_to(xp.asarray(b_passes), tuple(ok.shape))
        moved = a_passes * a_all + b_passes * b_all
        cands_a.append(a_passes)
        cands_b.append(b_passes)
        cands_moved.append(xp.where(ok, moved, math.inf))

    with xp.errstate():
        nz = a_row != 0
        tm = xp.minimum(xp.minimum(m, xp.where(nz, xp.to_int(xp.where(
            nz, a.cap_i // xp.where(nz, a_row, 1.0), 0)), m)),
            xp.to_int(a.cap_o // (n_edge * ACC_BYTES)))
        consider(tm >= 1, 1, xp.where(b_fits, 1, _cdiv(m, xp.maximum(tm, 1))))
        tn = xp.minimum(xp.minimum(n, xp.to_int(a.cap_f // b_col)),
                        xp.to_int(a.cap_o // (m_edge * ACC_BYTES)))
        consider(tn >= 1, xp.where(a_fits, 1, _cdiv(n, xp.maximum(tn, 1))), 1)
        kc = xp.maximum(1, xp.minimum(k, a.rows))
        a_chunk = xp.div(a_row * kc, k)
        b_chunk = xp.div(b_col * kc, k)
        anz, bnz = a_chunk != 0, b_chunk != 0
        m_cap = xp.minimum(m, xp.where(anz, xp.to_int(xp.where(
            anz, a.cap_i // xp.where(anz, a_chunk, 1.0), 0)), m))
        n_cap = xp.minimum(n, xp.where(bnz, xp.to_int(xp.where(
            bnz, a.cap_f // xp.where(bnz, b_chunk, 1.0), 0)), n))
    c_elems, side = a.c_elems, a.side
    for tm0 in (xp.minimum(m_cap, side), m_cap,
                xp.minimum(m_cap, c_elems // xp.maximum(1, n_cap))):
        tm0 = xp.where(m_cap >= 1, xp.maximum(1, tm0), 0)
        tn0 = xp.where(tm0 != 0, xp.minimum(n_cap, c_elems // xp.maximum(tm0, 1)), 0)
        ok = (tm0 >= 1) & (tn0 >= 1)
        tm1 = xp.minimum(m_cap, c_elems // xp.maximum(tn0, 1))
        consider(ok, xp.where(a_fits, 1, _cdiv(n, xp.maximum(tn0, 1))),
                 xp.where(b_fits, 1, _cdiv(m, xp.maximum(tm1, 1))))
    moved = xp.stack(cands_moved, np.float64)
    best = xp.argmin0(moved)   # the first of equal minima, as the scalar's strict <
    no_tile = ~xp.isfinite(xp.take0(moved, best))
    a_passes = xp.take0(xp.stack(cands_a, np.int64), best)
    b_passes = xp.take0(xp.stack(cands_b, np.int64), best)

    b_bytes, c_bytes = k * n * b, m * n * bc
    refetch = gemms * ((a_passes - 1) * a_bytes + (b_passes - 1) * b_bytes)
    ifr, flr, ow, orr = _sram_accesses(a, m, n, k)
    sram_j = gemms * (ifr * ea * a.ej_i + flr * b * a.ej_f + (ow + orr) * ACC_BYTES * a.ej_o)
    sram_j = sram_j + gemms * (a_passes * a_bytes * a.ej_i + b_passes * b_bytes * a.ej_f
                               + c_bytes * a.ej_o)
    rk, edge_m, edge_n = xp.minimum(k, a.rows), xp.minimum(m, a.rows), xp.minimum(n, array_n)
    fill = xp.div(a_bytes, m * k) * edge_m * rk + rk * edge_n * b
    drain = edge_m * edge_n * bc
    dims_bytes = gemms * (a_bytes + b_bytes + c_bytes)
    compulsory = xp.where(f.tbs != 0, f.tbs, dims_bytes)
    dequant = a.mac_j * (gemms * ifr * f.deq_a + gemms * flr * f.deq_w)
    if dram_out is not None:
        dram_out.append(compulsory + refetch)
    latency, en = _finish(a, cycles, compulsory + refetch, fill, drain,
                          f.macs * a.mac_j + dequant, sram_j, f.reg_bytes, a.act_array,
                          stall=stall)
    return latency, en, no_tile


def _gemm_block(a: DesignArrays, ops: list[Op], shapes: list[dict[int, tuple]], err: _Errors,
                rows_idx: np.ndarray, lat, energy, problem, side: "_Side") -> None:
    """NPU._gemm_cost for GEMM-shaped ops (no zero dimension) on all designs."""
    xp = a.xp
    dram: list = []
    latency, en, no_tile = gemm_kernel(a, gemm_features(a, ops, shapes, err, rows_idx), dram)
    idx = xp.asarray(rows_idx, np.int64)
    lat[idx], energy[idx] = latency, en
    side.put(rows_idx, dram[0], ("array",))
    err.set(rows_idx, xp.broadcast_to(problem != 0, tuple(latency.shape)), problem)
    if xp.any(no_tile):
        rows = xp.to_numpy(no_tile.any(1))
        for j in np.nonzero(rows)[0]:
            g, mm, nn, kk = shapes[j][a.b_values[0]][:4]
            code = err.add(InfeasibleDesign(f"no tile of the {mm}x{nn}x{kk} GEMM fits the "
                                            "scratchpads"))
            err.set(rows_idx[j:j + 1], no_tile[j:j + 1], code)


# ----------------------------------------------------------------------------- attention
@dataclass
class AttentionFeatures:
    """An attention op's features per (op, design): its :func:`attention_dims` (``batch`` ...
    ``dv`` int64, ``frac`` float64), ``scores``, ``vector_ops``, ``macs`` (float64),
    ``group_rows`` (int64), ``tbs`` and ``q_o_bytes`` at the design's element size."""

    batch: Any
    heads: Any
    kv_heads: Any
    sq: Any
    skv: Any
    d: Any
    dv: Any
    frac: Any
    scores: Any
    vector_ops: Any
    macs: Any
    group_rows: Any
    tbs: Any
    q_o_bytes: Any
    eq: Any = None      # bytes per element of Q, of the KV cache and of the output (None: the
    ekv: Any = None     # design's element size); operands each design dequantises (0/1, or 0)
    eo: Any = None
    deq_a: Any = 0
    deq_w: Any = 0


def attention_features(a: DesignArrays, ops: list[Op], dims: list[tuple],
                       err: "_Errors | None" = None, rows_idx=None) -> AttentionFeatures:
    """:class:`AttentionFeatures` of ops from their :func:`attention_dims` (number formats'
    elements where an op has them, their errors recorded in ``err`` at ``rows_idx``)."""
    xp, nb = a.xp, len(a.b_values)
    elems = [a.designs[0].operand_bytes(op) if op_formats(op) is not None else None
             for op in ops]
    tbs_tab, qo_tab = np.empty((len(ops), nb)), np.empty((len(ops), nb), dtype=np.int64)
    scores_l, vops_l, macs_l, group_rows_l = [], [], [], []
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
    ints = [_col(xp, [x[i] for x in dims], np.int64) for i in range(7)]
    out = AttentionFeatures(*ints, _col(xp, [x[7] for x in dims], np.float64),
                            _col(xp, scores_l, np.float64), _col(xp, vops_l, np.float64),
                            _col(xp, macs_l, np.float64), _col(xp, group_rows_l, np.int64),
                            a.per_b(tbs_tab), a.per_b(qo_tab))
    if err is not None:
        out.eq, out.ekv, out.eo, out.deq_a, out.deq_w = _op_elements(a, ops, err, rows_idx)
    return out


def attention_kernel(a: DesignArrays, f: AttentionFeatures, dram_out: list | None = None):
    """NPU._attention_cost on all designs: latency, energy and where a tile size divides by
    zero (``(ops, N)`` each); the DRAM bytes appended to ``dram_out`` when given."""
    xp = a.xp
    batch, kv_heads, sq, skv, d, dv, frac = f.batch, f.kv_heads, f.sq, f.skv, f.d, f.dv, f.frac
    g = batch * f.heads
    b = a.b if f.eq is None else f.eq
    bkv = a.b if f.ekv is None else f.ekv
    bc = a.b if f.eo is None else f.eo
    qk = _compute_cycles(a, sq, skv, d, g)
    pv = _compute_cycles(a, sq, dv, skv, g)
    array_cycles = xp.ceil((qk + pv) * frac)
    vector_cycles = xp.ceil(xp.div(f.vector_ops, a.lanes))
    cycles = xp.maximum(array_cycles, vector_cycles)

    kv_group = skv * (d + dv) * bkv
    ca = a.cols * a.arrays
    div_i = d * b
    div_o = (xp.minimum(skv, ca) + dv) * ACC_BYTES
    zero = (div_i == 0) | (div_o == 0)
    with xp.errstate():
        tile_q = xp.minimum(xp.minimum(f.group_rows, xp.to_int(xp.where(
            zero, 0, a.cap_i // xp.where(zero, 1, div_i)))), xp.to_int(xp.where(
                zero, 0, a.cap_o // xp.where(zero, 1, div_o))))
    passes = xp.where(kv_group <= a.cap_f, 1,
                      xp.ceil(xp.div(f.group_rows, xp.maximum(1, tile_q))))
    kv_bytes = batch * kv_heads * kv_group
    compulsory = xp.where(f.tbs != 0, f.tbs, f.q_o_bytes + kv_bytes)
    refetch = (passes - 1) * kv_bytes * frac

    i1, f1, w1, r1 = _sram_accesses(a, sq, skv, d)
    i2, f2, w2, r2 = _sram_accesses(a, sq, dv, skv)
    sram_j = g * frac * ((i1 + i2) * b * a.ej_i + (f1 + f2) * bkv * a.ej_f
                         + (w1 + r1 + w2 + r2) * ACC_BYTES * a.ej_o)
    sram_j = sram_j + f.scores * (2 * ACC_BYTES * a.ej_o + 2 * bc * a.ej_i)
    rows = xp.minimum(sq, a.rows)
    fill = rows * d * b + xp.minimum(skv, ca) * d * bkv
    drain = rows * dv * bc
    macs, vector_ops = f.macs, f.vector_ops
    reg = (macs * (2 * b + bkv + 2 * ACC_BYTES) if bkv is not b
           else macs * (3 * b + 2 * ACC_BYTES))
    dequant = a.mac_j * (g * frac * (i1 + i2) * f.deq_a + g * frac * (f1 + f2) * f.deq_w)
    if dram_out is not None:
        dram_out.append(compulsory + refetch)
    latency, en = _finish(a, cycles, compulsory + refetch, fill, drain,
                          macs * a.mac_j + vector_ops * a.vec_j + dequant, sram_j,
                          reg + vector_ops * 3 * bc, a.act_array + a.act_vector)
    return latency, en, zero


def _attention_block(a: DesignArrays, ops: list[Op], dims: list[tuple], err: _Errors,
                     rows_idx: np.ndarray, lat, energy, problem, side: "_Side") -> None:
    """NPU._attention_cost for attention ops on all designs."""
    xp = a.xp
    dram: list = []
    latency, en, zero = attention_kernel(a, attention_features(a, ops, dims, err, rows_idx),
                                         dram)
    idx = xp.asarray(rows_idx, np.int64)
    lat[idx], energy[idx] = latency, en
    side.put(rows_idx, dram[0], ("array", "vector"))
    shape = tuple(latency.shape)
    err.set(rows_idx, xp.broadcast_to(problem != 0, shape), problem)
    if xp.any(zero):
        code = err.add(ZeroDivisionError("float floor division by zero"))
        err.set(rows_idx, xp.broadcast_to(zero, shape), code)


# ----------------------------------------------------------------------------- vector unit
def vector_kernel(a: DesignArrays, parts, elem=None):
    """NPU._vector_cost; ``parts`` are :func:`accelerators.npu.vector_parts`' six values
    ``(lane_ops, read, written, dram, read_x, reg_bytes)`` per (op, design); ``elem`` each
    op's element bytes where it has number formats (0: the design's; None: none has)."""
    xp = a.xp
    lane_ops, read, written, dram, read_x, reg_bytes = parts
    cycles = xp.ceil(xp.div(lane_ops, a.lanes))
    sram_j = read_x * a.ej_i + written * 2 * a.ej_o
    if elem is None or not np.any(elem):
        chunk = a.lanes * a.b
    else:
        e = xp.asarray(np.asarray(elem, dtype=np.int64)[:, None])
        chunk = a.lanes * xp.where(e > 0, e, a.b)
    return _finish(a, cycles, dram, xp.minimum(read, chunk), xp.minimum(written, chunk),
                   lane_ops * a.vec_j, sram_j, reg_bytes, a.act_vector)


def _vector_block(a: DesignArrays, tabs: np.ndarray, rows_idx: np.ndarray, lat,
                  energy, side: "_Side", elem: np.ndarray | None = None) -> None:
    """NPU._vector_cost; ``tabs[field, op, b]`` holds :func:`accelerators.npu.vector_parts`
    per element size; ``elem`` each op's element bytes where it has number formats (0: the
    design's)."""
    parts = [a.per_b(t) for t in tabs]
    latency, en = vector_kernel(a, parts, elem)
    idx = a.xp.asarray(rows_idx, np.int64)
    lat[idx], energy[idx] = latency, en
    side.put(rows_idx, a.xp.broadcast_to(parts[3], tuple(latency.shape)), ("vector",))


# ----------------------------------------------------------------------------- entry points
def _exact(*values) -> bool:
    """True when every value is a finite number of magnitude below EXACT_INT_LIMIT."""
    for v in values:
        if not isinstance(v, (int, float)) or not abs(v) < EXACT_INT_LIMIT:
            return False
    return True


def cost_many(designs: Sequence[NPU] | DesignArrays, ops: Sequence[Op], device: str | None = None,
              on_device: bool = False) -> ManyCosts:
    """Latency (s) and total dynamic energy (J) of every op in ``ops`` on every design in
    ``designs``, as ``(len(ops), len(designs))`` arrays, equal to ``design.cost(op)``.

    ``designs`` must be :class:`~accelerators.npu.NPU` instances (any parameters and presets),
    or their :class:`DesignArrays` (whose namespace then decides the device). If one is of a
    subclass (which may change the model), every design is costed by its own ``cost()``.
    ``device`` (:func:`accelerators.array_ns.namespace`: ``cpu``, ``torch``, ``cuda``) picks
    where the arrays live; the results come back as numpy arrays unless ``on_device``.
    """
    if isinstance(designs, DesignArrays):
        a: DesignArrays | None = designs
        designs, xp = a.designs, a.xp
    else:
        designs, a = list(designs), None
        for d in designs:
            if not isinstance(d, NPU):
                raise BadInput("designs", type(d).__name__, "npu designs (accelerators.npu.NPU)")
        xp = namespace(device)
    n_ops, n = len(ops), len(designs)
    lat = xp.full((n_ops, n), math.nan)
    energy = xp.full((n_ops, n), math.nan)
    err = _Errors(n_ops, n, xp)
    side = _Side(n_ops, n, xp)
    if a is not None or all(type(d) is NPU for d in designs):
        a = a if a is not None else DesignArrays(designs, xp)
        if n:
            _cost_exact(a, ops, lat, energy, err, side)
        area, static = fixed_costs(a)
    else:
        lat_np, en_np = xp.to_numpy(lat).copy(), xp.to_numpy(energy).copy()
        codes = np.zeros((n_ops, n), dtype=np.int64)
        for i, d in enumerate(designs):
            _scalar_into(d, i, ops, range(n_ops), lat_np, en_np, codes, err, side)
        lat, energy = xp.asarray(lat_np), xp.asarray(en_np)
        err.codes = xp.asarray(codes)
        area = np.array([d.area_mm2() for d in designs], dtype=np.float64)
        static = np.array([d.static_power_w() for d in designs], dtype=np.float64)
    if not on_device:
        lat, energy = xp.to_numpy(lat), xp.to_numpy(energy)
    dram = side.dram if on_device else xp.to_numpy(side.dram)
    return ManyCosts(lat, energy, err, area, static, {"dram": dram}, side.holds(on_device))


class _Side:
    """What the resource floors read besides latency and energy (:mod:`simulators.floors`):
    DRAM bytes per (op, design), arrays of the namespace ``xp``, and the units each op holds:
    per op for the vectorised blocks (every design runs the op on the same units), per (op,
    design) only where the scalar code ran an op."""

    def __init__(self, n_ops: int, n: int, xp: Any):
        self.xp, self.shape = xp, (n_ops, n)
        self.dram = xp.zeros(self.shape)
        self.rows = {u: np.zeros(n_ops, dtype=bool) for u in ("array", "vector")}
        self.cells: dict[str, np.ndarray] = {}

    def hold_cell(self, j: int, i: int, units: tuple[str, ...]) -> None:
        for u in units:
            self.rows.setdefault(u, np.zeros(self.shape[0], dtype=bool))
            if u not in self.cells:
                self.cells[u] = np.zeros(self.shape, dtype=bool)
            self.cells[u][j, i] = True

    def put(self, rows, dram, units: tuple[str, ...]) -> None:
        """Ops ``rows`` move ``dram`` bytes and hold ``units`` on every design."""
        idx = np.asarray(rows)
        self.dram[self.xp.asarray(idx, np.int64)] = dram
        for u in units:
            self.rows[u][idx] = True

    def holds(self, on_device: bool) -> dict[str, Any]:
        """Per unit, ``(M, N)`` booleans (a broadcast view where no scalar op ran)."""
        xp = self.xp if on_device else None
        out = {}
        for u, flags in self.rows.items():
            if xp is None:
                h = np.broadcast_to(flags[:, None], self.shape)
            else:
                h = xp.broadcast_to(xp.asarray(flags[:, None].copy()), self.shape)
            if u in self.cells:
                h = h | (self.cells[u] if xp is None else xp.asarray(self.cells[u]))
            out[u] = h
        return out


def fixed_costs(a: DesignArrays) -> tuple[np.ndarray, np.ndarray]:
    """``(area_mm2, static_power_w)`` per design: NPU.area_mm2 and NPU.static_power_w."""
    return a.area_mm2, a.static_power_w


def cost_op(designs: Sequence[NPU], op: Op) -> OpCosts:
    """Latency (s) and total dynamic energy (J) of ``op`` on each design, as ``(N,)`` arrays,
    and the exception ``design.cost(op)`` raises on each design (None where it runs)."""
    many = cost_many(designs, [op])
    return OpCosts(many.latency_s[0], many.energy_j[0], many.op_errors(0))


def _scalar_into(design: NPU, i: int, ops: Sequence[Op], which, lat: np.ndarray,
                 energy: np.ndarray, codes: np.ndarray, err: _Errors, side: "_Side",
                 rows=None) -> None:
    """Cost ``ops[j]`` for ``j`` in ``which`` on design ``i`` with its scalar ``cost()``
    (into numpy arrays, at row ``rows[r]`` for the r-th of ``which`` when given)."""
    for r, j in enumerate(which):
        row = j if rows is None else rows[r]
        try:
            c = design.cost(ops[j])
        except Exception as exc:   # recorded; the caller raises it as the scalar path would
            codes[row, i] = err.add(exc)
            continue
        lat[row, i], energy[row, i] = c.latency_s, c.total_energy_j
        side.dram[j, i] = c.traffic.get("dram", 0.0)
        side.hold_cell(j, i, (c.unit, *c.also_holds))


def _cost_exact(a: DesignArrays, ops: Sequence[Op], lat, energy, err: _Errors,
                side: _Side) -> None:
    """:func:`cost_many` for designs of class NPU exactly."""
    xp, designs = a.xp, a.designs
    gemm: list[tuple[int, Op, dict]] = []
    attn: list[tuple[int, Op, tuple]] = []
    vec: list[tuple[int, list]] = []
    scalar: list[int] = []
    b_np = a._iv[3]
    rep = {b: designs[int(np.argmax(b_np == b))] for b in a.b_values}
    # one exception per distinct problem (a population repeats them), added in the order of
    # the first design with each
    base = len(err.table)
    for text in a.problems_present:
        err.add(InfeasibleDesign(text))
    problem = a.problem_rank if base == 0 else xp.where(a.problem_rank != 0,
                                                         a.problem_rank + base, 0)

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
            err.set_row(j, err.add(exc))
    if gemm:
        _gemm_block(a, [g[1] for g in gemm], [g[2] for g in gemm], err,
                    np.array([g[0] for g in gemm]), lat, energy, problem, side)
    if attn:
        _attention_block(a, [x[1] for x in attn], [x[2] for x in attn], err,
                         np.array([x[0] for x in attn]), lat, energy, problem, side)
    if vec:
        tabs = np.array([[[p[f] for p in parts] for _, parts, _ in vec] for f in range(6)],
                        dtype=np.float64)
        _vector_block(a, tabs, np.array([v[0] for v in vec]), lat, energy, side,
                      np.array([v[2] for v in vec], dtype=np.int64))
    if scalar:
        s_lat = np.full((len(scalar), a.n), math.nan)
        s_en = np.full((len(scalar), a.n), math.nan)
        s_codes = np.zeros((len(scalar), a.n), dtype=np.int64)
        for i, d in enumerate(designs):
            _scalar_into(d, i, ops, scalar, s_lat, s_en, s_codes, err, side,
                         range(len(scalar)))
        idx = xp.asarray(np.array(scalar), np.int64)
        lat[idx], energy[idx] = xp.asarray(s_lat), xp.asarray(s_en)
        err.set(np.array(scalar), xp.asarray(s_codes != 0), xp.asarray(s_codes))
    bad = err.codes != 0
    xp.fill_where(lat, bad, math.nan)
    xp.fill_where(energy, bad, math.nan)
