"""Whole-model metrics of a population of designs as one array program (numpy, or torch on a
GPU: :mod:`accelerators.array_ns`).

The fast path (:mod:`simulators.fast`) for ``npu`` designs with the population kept in arrays
from the cost to the metrics: the workload's unique ops are costed on every design at once
(:func:`accelerators.npu_vector.cost_many`, left on the device), the latency is the critical
path of the op graph with a vector of all designs at each node (the arrays of ops no longer
needed are dropped as the pass goes, so a graph of ~800 ops over a million designs holds a
few rows at a time), the dynamic energy the ops' sum in graph order, plus static power times
latency. Same model and the same float64 operations in the same order as
:func:`simulators.fast.evaluate_many`, so the results equal it (tested; on a GPU checked by
``benchmarks/population_gpu.py``).

What is set up per design in Python (the design object, its physical assessment, whether the
workload fits its memory) is done once per distinct design: a population that repeats designs
(:meth:`accelerators.npu_vector.DesignArrays.take`) pays it once each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accelerators.npu import NPU
from accelerators.npu_vector import DesignArrays, cost_many
from dse.errors import BadInput, DSEError
from workloads.ir import Workload


@dataclass
class PopulationResults:
    """Per design (arrays of the population's namespace, ``(N,)``; NaN where infeasible):
    latency (s), energy (J), ``feasible`` (runs the workload: fits its memory, every op
    costed)."""

    latency_s: Any
    energy_j: Any
    feasible: Any


def check_designs(workload: Workload, designs: Sequence[NPU]) -> np.ndarray:
    """``(N,)`` booleans: ``design.check(workload)`` passes (buildable, fits the memory)."""
    out = np.zeros(len(designs), dtype=bool)
    for i, d in enumerate(designs):
        try:
            out[i] = not d.check(workload)
        except DSEError:
            out[i] = False
    return out


def critical_path(xp: Any, unit_lat: Any, unique_of: Sequence[int],
                  preds: Sequence[Sequence[int]]):
    """Finish time of the graph's last op per design: each op's latency (row
    ``unique_of[i]`` of ``unit_lat``, ``(unique ops, N)``) after the last of its
    predecessors, in graph order; each op's finish dropped after its last consumer."""
    n_ops = len(preds)
    last_use = list(range(n_ops))
    for i, p in enumerate(preds):
        for j in p:
            last_use[j] = max(last_use[j], i)
    free_at: dict[int, list[int]] = {}
    for j, u in enumerate(last_use):
        free_at.setdefault(u, []).append(j)
    finish: dict[int, Any] = {}
    crit = None
    for i, p in enumerate(preds):
        lat = unit_lat[unique_of[i]]
        if not p:
            f = 0.0 + lat
        elif len(p) == 1:
            f = finish[p[0]] + lat
        else:
            start = finish[p[0]]
            for j in p[1:]:
                start = xp.maximum(start, finish[j])
            f = start + lat
        finish[i] = f
        crit = f if crit is None else xp.maximum(crit, f)
        for j in free_at.get(i, ()):   # ops whose last consumer this is (or i, unconsumed)
            del finish[j]
    return crit


def ordered_sum(xp: Any, unit: Any, unique_of: Sequence[int]):
    """``sum_i unit[unique_of[i]]`` over the ops in graph order (as numpy's ``sum(axis=0)``
    of the expanded ``(ops, N)`` array adds its rows)."""
    total = None
    for u in unique_of:
        total = unit[u] + 0.0 if total is None else total + unit[u]
    return total


def resource_floor(xp: Any, many: Any, counts: np.ndarray, dram_Bps: Any):
    """What the npu's shared resources impose whatever the overlap, per design: each unit's
    busy time (one slot each, :meth:`accelerators.npu.NPU.resources`) and the DRAM's bytes
    over its bandwidth, the unique ops weighted by how many ops each stands for, summed in
    order as :func:`simulators.fast._resource_floor` does (:mod:`simulators.floors`)."""
    def weighted(x):
        total = None
        for u, c in enumerate(counts.tolist()):
            term = c * x[u]
            total = term + 0.0 if total is None else total + term
        return total

    out = None
    for mask in many.holds.values():
        busy = weighted(xp.where(mask, many.latency_s, 0.0)) / 1.0
        out = busy if out is None else xp.maximum(out, busy)
    dram = xp.div(weighted(many.traffic["dram"]), dram_Bps)
    return dram if out is None else xp.maximum(out, dram)


def evaluate_designs(workload: Workload, designs: DesignArrays,
                     fits: np.ndarray | None = None) -> PopulationResults:
    """Latency and energy of every design of ``designs`` (npu designs as arrays, any device)
    on ``workload`` (no contention: the critical path, as :func:`simulators.fast.evaluate_many`).
    ``fits``: per design, ``design.check(workload)`` passed (computed when not given)."""
    from workloads.structure import of as structure_of
    xp = designs.xp
    if not all(type(d) is NPU for d in designs.designs[:1]):
        raise BadInput("designs", type(designs.designs[0]).__name__, "npu designs")
    st = structure_of(workload)
    many = cost_many(designs, st.unique_ops, on_device=True)
    if fits is None:
        fits = check_designs(workload, designs.designs)
    feasible = many.feasible & xp.asarray(np.asarray(fits, dtype=bool))
    unique_of = np.asarray(st.unique_of).tolist()
    n = designs.n
    if unique_of:
        crit = critical_path(xp, many.latency_s, unique_of, st.preds)
        crit = xp.maximum(crit, resource_floor(xp, many, st.counts, designs.bw[0]))
        dyn = ordered_sum(xp, many.energy_j, unique_of)
    else:
        crit, dyn = xp.zeros((n,)), xp.zeros((n,))
    static_w = xp.asarray(designs.static_power_w)
    energy = dyn + static_w * crit
    nan = math.nan
    return PopulationResults(xp.where(feasible, crit, nan), xp.where(feasible, energy, nan),
                             feasible)


def evaluate_population(workload: Workload, designs: Sequence[Any], device: str | None = None):
    """:func:`simulators.fast.evaluate_many` of ``designs`` on ``workload`` with the npu
    designs' latency and energy computed as one array program on ``device``
    (:func:`accelerators.array_ns.namespace`); the same :class:`~simulators.fast.FastResults`
    (equal values: tested). Designs of other templates, and the reasons of infeasible ones,
    go through :func:`~simulators.fast.evaluate_many`."""
    from accelerators.array_ns import namespace
    from simulators.engine import throughput_of
    from simulators.fast import FastResults, evaluate_many
    designs = list(designs)
    npu = [i for i, d in enumerate(designs) if type(d) is NPU]
    if not npu:
        return evaluate_many(workload, designs)
    n = len(designs)
    out = FastResults(latency_s=np.full(n, np.nan), energy_j=np.full(n, np.nan),
                      area_mm2=np.full(n, np.nan), avg_power_w=np.full(n, np.nan),
                      throughput=np.full(n, np.nan), infeasible=[None] * n,
                      cost_usd=np.full(n, np.nan), tdp_w=np.full(n, np.nan))
    arrays = DesignArrays([designs[i] for i in npu], namespace(device))
    res = evaluate_designs(workload, arrays)
    xp = arrays.xp
    lat, energy = xp.to_numpy(res.latency_s), xp.to_numpy(res.energy_j)
    ok = np.isfinite(lat)
    rest = [i for i in range(n) if i not in set(npu)] + [npu[k] for k in np.flatnonzero(~ok)]
    for k in np.flatnonzero(ok):
        i, d = npu[k], designs[npu[k]]
        out.latency_s[i], out.energy_j[i] = lat[k], energy[k]
        out.area_mm2[i] = arrays.area_mm2[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            out.avg_power_w[i] = np.float64(energy[k]) / np.float64(lat[k])
        out.throughput[i] = throughput_of(workload, float(lat[k]))[0]
        phys = d.physical()
        if phys is not None:
            out.cost_usd[i], out.tdp_w[i] = phys.cost_usd, phys.tdp_w
    if rest:
        sub = evaluate_many(workload, [designs[i] for i in rest])
        for j, i in enumerate(rest):
            for f in ("latency_s", "energy_j", "area_mm2", "avg_power_w", "throughput",
                      "cost_usd", "tdp_w"):
                getattr(out, f)[i] = getattr(sub, f)[j]
            out.infeasible[i] = sub.infeasible[j]
    return out


# ----------------------------------------------------------------------------- architectures as arrays
@dataclass
class PairResults:
    """Per (design, architecture) pair, numpy ``(P,)``: ``handled`` (computed here, feasible);
    where handled, the fast path's latency, energy, and the architecture's parameter count
    and FLOPs. Unhandled pairs (infeasible, or numbers past exact float64 integers) are left
    to the per-architecture path, which says why."""

    handled: np.ndarray
    latency_s: np.ndarray
    energy_j: np.ndarray
    params: np.ndarray
    flops: np.ndarray


_EXACT = float(2 ** 53)


def _gemm_numbers(num: dict, b, bpe: int):
    """NPU._gemm_shape and the GEMM features (npu_vector.GemmFeatures) over arrays, and where
    they are exact and the op is a GEMM (no zero dimension)."""
    from accelerators.npu import ACC_BYTES
    from accelerators.npu_vector import _INT_GROWTH
    a = num["attrs"]
    m, n, k = a["m"], a["n"], a["k"]
    batch = np.where(a.get("batch", 1) == 0, 1, a.get("batch", 1)) + 0 * m
    if a.get("weight_operand", False):
        fold = batch > 1
        m, batch = np.where(fold, m * batch, m), np.where(fold, 1, batch)
    total = _total(num)
    macs_i = batch * m * n * k
    a_bytes = (m * k * b).astype(np.float64)
    ok = ((np.minimum(np.minimum(batch, m), np.minimum(n, k)) > 0)
          & (macs_i.astype(np.float64) * _INT_GROWTH < _EXACT) & (a_bytes < _EXACT)
          & (total.astype(np.float64) * 4 < _EXACT))
    return dict(gemms=batch, m=m, n=n, k=k, a_bytes=a_bytes, tbs=total * (b / bpe),
                reg_bytes=(macs_i * (3 * b + 2 * ACC_BYTES)).astype(np.float64),
                macs=macs_i.astype(np.float64)), ok


def _attention_numbers(num: dict, b, bpe: int):
    """npu.attention_dims and the attention features over arrays, and where exact."""
    from accelerators.npu import VECTOR_OPS_PER_ELEMENT
    from accelerators.npu_vector import _INT_GROWTH
    from workloads import ir
    a = num["attrs"]
    bt, h = a["batch"] + 0 * a["q_len"], a["heads"] + 0 * a["q_len"]
    kvh = np.where(a["kv_heads"] == 0, h, a["kv_heads"])
    q, kv, dd = a["q_len"], a["kv_len"], a["head_dim"]
    dvv = np.where(a["value_dim"] == 0, dd, a["value_dim"])
    full = num["flops"]
    frac = np.ones(q.shape)
    if a.get("causal"):
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(full != 0, np.minimum(1.0, np.maximum(0.0, np.true_divide(
                a["causal_flops"], np.where(full != 0, full, 1)))), 1.0)
    gg = bt * h
    scores = gg * q * kv * frac
    size = (np.maximum(1, bt) * np.maximum(1, h) * np.maximum(1, kvh) * np.maximum(1, q)
            * np.maximum(1, kv))
    total = _total(num)
    ok = ((size.astype(np.float64) * (np.abs(dd) + np.abs(dvv) + 1) * _INT_GROWTH < _EXACT)
          & (total.astype(np.float64) * 4 < _EXACT) & (dd * b != 0))
    return dict(batch=bt, heads=h, kv_heads=kvh, sq=q, skv=kv, d=dd, dv=dvv, frac=frac,
                scores=scores, vector_ops=scores * VECTOR_OPS_PER_ELEMENT[ir.SOFTMAX],
                macs=gg * q * kv * (dd + dvv) * frac,
                group_rows=q * np.maximum(1, h // np.maximum(1, kvh)),
                tbs=total * (b / bpe), q_o_bytes=gg * q * (dd + dvv) * b), ok


def _vector_numbers(num: dict, b, bpe: int):
    """npu.vector_parts over arrays (shape kinds), and where exact."""
    from accelerators.npu import VECTOR_OPS_PER_ELEMENT
    from workloads import ir
    scale = b / bpe
    read = (num["weight_bytes"] + num["activation_bytes_read"] + num["kv_bytes_read"]) * scale
    written = (num["activation_bytes_written"] + num["kv_bytes_written"]) * scale
    elements = num["attrs"].get("elements")
    outs = num["output_elements"]
    fallback = (np.where(outs > 0, outs, np.maximum(read, written) / b) if outs is not None
                else np.maximum(read, written) / b)
    elements = fallback if elements is None else np.where(elements > 0, elements, fallback)
    kind = num["kind"]
    per = VECTOR_OPS_PER_ELEMENT.get(kind, 1)
    if kind == ir.REDUCTION:
        elements = np.maximum(elements, read / b)
    lane_ops = elements * per
    passes = {ir.NORM: 2, ir.SOFTMAX: 3}.get(kind, 1)
    dram = read + written
    none = dram <= 0
    dram = np.where(none, elements * b * 2, dram)
    read = np.where(none, elements * b, read)
    written = np.where(none, elements * b, written)
    parts = [lane_ops, read, written, dram, read * (1 + passes), lane_ops * 3 * b]
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    ok = np.ones(np.shape(parts[0]), dtype=bool)
    for p in parts:
        ok &= np.abs(p) < _EXACT
    return parts, ok


def _total(num: dict):
    return (num["weight_bytes"] + num["activation_bytes_read"] + num["kv_bytes_read"]
            + num["activation_bytes_written"] + num["kv_bytes_written"])


def _stack(rows: list) -> np.ndarray:
    return np.stack([np.asarray(r) for r in rows])


def evaluate_pairs(fam, vals: np.ndarray, depth: np.ndarray,
                   designs: "Sequence[NPU] | DesignArrays", phase: str, batch: int,
                   seq: int) -> PairResults:
    """Fast-path latency and energy of design ``i`` on the family's architecture ``i``
    (``vals[:, i]`` its size variables, ``depth[i]`` its blocks), for every pair at once:
    the unique ops' numbers as arrays (:class:`workloads.reshape_arrays.FamilyArrays`), the
    npu's cost kernels on ``(ops, pairs)``, the critical path and energy over prefix, blocks
    and suffix with each pair's own depth, and the capacity check on the footprint computed
    the same way. Equal to :func:`simulators.fast.evaluate_many` on each pair's workload
    (tested). ``designs``: npu objects, or their :class:`DesignArrays` (one per pair)."""
    from accelerators.mac_formats import is_classic
    from accelerators.npu_vector import (AttentionFeatures, GemmFeatures, attention_kernel,
                                         gemm_kernel, vector_kernel)
    from workloads import ir
    from workloads.reshape_arrays import liveness_plan, peak_activation_bytes
    P = vals.shape[1]
    bpe = fam.elem
    zero = np.zeros(P, dtype=np.int64)
    numbers = fam.op_numbers(vals)
    a = designs if isinstance(designs, DesignArrays) else DesignArrays(designs)
    b = a.b[0]
    # a design with a problem, or a number-format MAC unit (it needs a workload in number
    # formats: Template.format_problem), is left to the per-architecture path
    classic = np.array([is_classic(t) for t in a.dtype_values], dtype=bool)[a.dtype_index_np]
    handled = (a.problem_codes == 0) & a.buildable & classic
    U = len(numbers)
    lat = np.full((U, P), np.nan)
    energy = np.full((U, P), np.nan)
    dram, dram_rows = np.zeros((U, P)), []
    on_array, on_vector = np.zeros(U, dtype=bool), np.zeros(U, dtype=bool)
    gemm = [u for u, x in enumerate(numbers) if x["kind"] in (ir.MATMUL,)]
    attn = [u for u, x in enumerate(numbers) if x["kind"] == ir.ATTENTION]
    vec = [u for u in range(U) if u not in set(gemm) | set(attn)]
    if gemm:
        feats, oks = zip(*(_gemm_numbers(numbers[u], b, bpe) for u in gemm))
        f = GemmFeatures(**{k: _stack([x[k] for x in feats]) for k in feats[0]})
        l_, e_, no_tile = gemm_kernel(a, f, dram_rows)
        lat[gemm], energy[gemm] = l_, e_
        dram[gemm] = dram_rows.pop()
        on_array[gemm] = True
        handled &= np.all(oks, axis=0).ravel() & ~no_tile.any(0)
    if attn:
        feats, oks = zip(*(_attention_numbers(numbers[u], b, bpe) for u in attn))
        f = AttentionFeatures(**{k: _stack([np.broadcast_to(x[k], (1, P))[0] for x in feats])
                                 for k in feats[0]})
        l_, e_, zero_div = attention_kernel(a, f, dram_rows)
        lat[attn], energy[attn] = l_, e_
        dram[attn] = dram_rows.pop()
        on_array[attn] = on_vector[attn] = True
        handled &= np.all(oks, axis=0).ravel() & ~zero_div.any(0)
    if vec:
        parts, oks = zip(*(_vector_numbers(numbers[u], b, bpe) for u in vec))
        stacked = [_stack([np.broadcast_to(p[i], (1, P))[0] for p in parts]) for i in range(6)]
        l_, e_ = vector_kernel(a, stacked)
        lat[vec], energy[vec] = l_, e_
        dram[vec] = stacked[3]
        on_vector[vec] = True
        handled &= np.all([np.broadcast_to(o, (1, P))[0] for o in oks], axis=0)
    crit, dyn = _layered_paths(fam, lat, energy, depth)
    # the resource floors (simulators.floors): each unit's busy time, the DRAM's bytes
    for mask in (on_array, on_vector):
        rows = [np.where(mask[u], lat[u], 0.0) for u in range(U)]
        crit = np.maximum(crit, _layered_sum(fam, rows, depth, np.zeros(P)))
    crit = np.maximum(crit, _layered_sum(fam, list(dram), depth, np.zeros(P)) / a.bw[0])
    # footprint and capacity (workloads.footprint, accelerators.capacity)
    t = fam.template
    const, layered = t.params
    params = (sum((_ev_arr(x, vals) for x in const), zero)
              + depth * sum((_ev_arr(x, vals) for x in layered), zero))
    kv = _kv_bytes(fam, numbers, depth, zero)
    act = np.zeros(P)
    for dd in sorted(set(np.minimum(depth, 3).tolist())):
        sel = np.minimum(depth, 3) == dd
        peak = peak_activation_bytes(liveness_plan(t, int(dd)), numbers, zero)
        act[sel] = peak[sel]
    scale = b / bpe
    need = (params * bpe).astype(np.float64) * scale + kv * scale + act * scale
    handled &= need <= a.capacity_bytes
    flops = _layered_sum(fam, [np.broadcast_to(x["flops"], (P,)) for x in numbers], depth, zero)
    energy_total = dyn + a.static_power_w * crit
    return PairResults(handled, np.where(handled, crit, np.nan),
                       np.where(handled, energy_total, np.nan), params, flops)


def _ev_arr(x, vals: np.ndarray) -> np.ndarray:
    c, terms, e = x
    out = np.full(vals.shape[1], c, dtype=np.int64)
    for i, p in terms:
        out = out * vals[i] ** p
    return out + e


def _layered_sum(fam, rows: list, depth: np.ndarray, zero):
    """Sum over the graph's ops of per-unique-op values (prefix, depth x block, suffix)."""
    npf, nb = fam.n_prefix, fam.n_block
    pre = _sum_rows(rows[:npf], zero)
    blk = _sum_rows(rows[npf:npf + nb], zero)
    suf = _sum_rows(rows[npf + nb:], zero)
    return pre + depth * blk + suf


def _sum_rows(rows, zero):
    total = zero
    for r in rows:
        total = total + r
    return total


def _kv_bytes(fam, numbers: list[dict], depth: np.ndarray, zero) -> np.ndarray:
    """workloads.footprint's KV cache bytes: attention's cache, what the step appends, and
    one layer's old cache of a ``concat`` update (the largest append read)."""
    from workloads import ir
    P = len(depth)
    att = [np.broadcast_to(x["kv_bytes_read"], (P,)) if x["kind"] == ir.ATTENTION else zero
           for x in numbers]
    app = [np.broadcast_to(x["kv_bytes_written"] - x["kv_bytes_read"], (P,))
           if x["attrs"].get("kv_append") else zero for x in numbers]
    kv = _layered_sum(fam, att, depth, zero) + _layered_sum(fam, app, depth, zero)
    npf, nb = fam.n_prefix, fam.n_block
    biggest = zero
    for u, x in enumerate(numbers):
        if x["attrs"].get("kv_append"):
            r = np.broadcast_to(x["kv_bytes_read"], (P,))
            if npf <= u < npf + nb:   # a block op exists only where depth >= 1
                r = np.where(depth >= 1, r, 0)
            biggest = np.maximum(biggest, r)
    return (kv + biggest).astype(np.float64)


def _layered_paths(fam, lat: np.ndarray, energy: np.ndarray, depth: np.ndarray):
    """Critical path (finish of the last op to finish) and dynamic energy (summed in graph
    order) of prefix, ``depth`` blocks and suffix, per pair (column): layers past a pair's
    depth leave its values unchanged."""
    pre_refs, blk_refs, suf_refs = fam.layers()
    npf, nb = fam.n_prefix, fam.n_block
    P = lat.shape[1]
    pre_f: list = []
    crit = np.zeros(P)
    total = None

    def start(refs, prev, cur, last):
        s = None
        for r in refs:
            if r[0] == "p":
                x = pre_f[r[1]]
            elif r[0] == "b":
                x = (cur if r[1] == 0 else prev)[r[2]]
            elif r[0] == "last":
                x = last[r[1]]
            else:
                x = suf_f[r[1]]
            s = x if s is None else np.maximum(s, x)
        return s

    def add(f_row, e_row, active=None):
        nonlocal crit, total
        if active is None:
            crit = np.maximum(crit, f_row)
            total = e_row + 0.0 if total is None else total + e_row
        else:
            crit = np.where(active, np.maximum(crit, f_row), crit)
            total = np.where(active, e_row if total is None else total + e_row,
                             0.0 if total is None else total)

    for j, refs in enumerate(pre_refs):
        s = start(refs, None, None, None)
        pre_f.append(0.0 + lat[j] if s is None else s + lat[j])
        add(pre_f[-1], energy[j])
    prev: list = [None] * nb
    last: list = [np.zeros(P)] * nb
    for layer in range(int(depth.max(initial=0))):
        active = layer < depth
        cur: list = [None] * nb
        for j, sides in enumerate(blk_refs):
            s = start(sides[min(layer, 1)], prev, cur, None)
            lat_j = lat[npf + j]
            cur[j] = 0.0 + lat_j if s is None else s + lat_j
            add(cur[j], energy[npf + j], active)
        last = [np.where(active, c, l_) for c, l_ in zip(cur, last)]
        prev = cur
    suf_f: list = []
    for j, refs in enumerate(suf_refs):
        s = start(refs, None, None, last)
        u = npf + nb + j
        suf_f.append(0.0 + lat[u] if s is None else s + lat[u])
        add(suf_f[-1], energy[u])
    return crit, (total if total is not None else np.zeros(P))
