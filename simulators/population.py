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
