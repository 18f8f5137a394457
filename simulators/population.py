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


def evaluate_designs(workload: Workload, designs: DesignArrays,
                     fits: np.ndarray | None = None) -> PopulationResults:
    """Latency and energy of every design of ``designs`` (npu designs as arrays, any device)
    on ``workload`` (no contention: the critical path, as :func:`simulators.fast.evaluate_many`).
    ``fits``: per design, ``design.check(workload)`` passed (computed when not given)."""
    from simulators.fast import _structure
    xp = designs.xp
    if not all(type(d) is NPU for d in designs.designs[:1]):
        raise BadInput("designs", type(designs.designs[0]).__name__, "npu designs")
    st = _structure(workload)
    many = cost_many(designs, st.unique_ops, on_device=True)
    if fits is None:
        fits = check_designs(workload, designs.designs)
    feasible = many.feasible & xp.asarray(np.asarray(fits, dtype=bool))
    unique_of = np.asarray(st.unique_of).tolist()
    n = designs.n
    if unique_of:
        crit = critical_path(xp, many.latency_s, unique_of, st.preds)
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
