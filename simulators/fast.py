"""The fast screening path: many designs of one template on one workload at once, no SimPy.

Same cost model as the event-driven simulator — it calls the template's own ``cost()`` — but
no contention: an op starts when its last producer ends, whatever unit or channel it uses, so
the latency is the critical path of the op graph. On designs where nothing contends (a chain
of ops, or independent ops on distinct units and channels) it equals the SimPy result.

Speed comes from two things: ops with identical shapes and attributes (the same layer repeated
N times) are costed once per design, and the critical path is one numpy pass over the graph
in topological order with a vector of all designs at each node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accelerators.base import Template
from dse.errors import DSEError
from simulators.engine import throughput_of
from workloads.ir import Op, Workload


@dataclass
class FastResults:
    """Metrics per design (arrays over designs; NaN where a design is infeasible)."""

    latency_s: np.ndarray
    energy_j: np.ndarray
    area_mm2: np.ndarray
    avg_power_w: np.ndarray
    throughput: np.ndarray
    infeasible: list[str | None]

    @property
    def edp(self) -> np.ndarray:
        return self.energy_j * self.latency_s

    def metrics(self, i: int) -> dict[str, float]:
        """The metrics of design ``i``, keyed as :meth:`Result.metrics`."""
        return {"latency_s": float(self.latency_s[i]), "energy_j": float(self.energy_j[i]),
                "area_mm2": float(self.area_mm2[i]), "avg_power_w": float(self.avg_power_w[i]),
                "edp": float(self.edp[i]), "throughput": float(self.throughput[i])}


def op_signature(op: Op) -> str:
    """Ops with the same signature cost the same on any design."""
    return json.dumps([op.kind, op.target, op.input_shapes, op.output_shapes, op.dtype,
                       op.flops, op.weight_bytes, op.activation_bytes_read,
                       op.activation_bytes_written, op.kv_bytes_read, op.kv_bytes_written,
                       op.attrs], sort_keys=True, default=str)


class _Structure:
    """The planned graph in index form: unique-op index per node and predecessor lists."""

    def __init__(self, workload: Workload):
        ops = workload.ops
        self.workload = workload
        index = {op.name: i for i, op in enumerate(ops)}
        sig_of: dict[str, int] = {}
        self.unique_ops: list[Op] = []
        self.unique_of = np.empty(len(ops), dtype=np.int64)
        for i, op in enumerate(ops):
            s = op_signature(op)
            if s not in sig_of:
                sig_of[s] = len(self.unique_ops)
                self.unique_ops.append(op)
            self.unique_of[i] = sig_of[s]
        self.preds = [[index[p] for p in workload.graph.predecessors(op.name)] for op in ops]


def evaluate_many(workload: Workload, designs: Sequence[Template]) -> FastResults:
    """Latency, energy, area, power and throughput of every design on ``workload``."""
    n = len(designs)
    lat = np.full(n, np.nan)
    energy = np.full(n, np.nan)
    area = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    structures: dict[int, _Structure] = {}
    groups: dict[int, list[int]] = {}
    unit_costs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for d, design in enumerate(designs):
        try:
            reason = design.check(workload)
            if reason:
                raise DSEError(reason)
            planned = design.plan(workload)
            key = id(planned)
            if key not in structures:
                structures[key] = _Structure(planned)
            st = structures[key]
            costs = [design.cost(op) for op in st.unique_ops]
        except DSEError as exc:
            reasons[d] = getattr(exc, "reason", str(exc))
            continue
        unit_costs[d] = (np.array([c.latency_s for c in costs]),
                         np.array([c.total_energy_j for c in costs]))
        groups.setdefault(key, []).append(d)
        area[d] = design.area_mm2()
        energy[d] = design.static_power_w()  # W for now; times latency below
    for key, members in groups.items():
        st = structures[key]
        op_lat = np.stack([unit_costs[d][0] for d in members], axis=1)[st.unique_of]  # ops x designs
        op_energy = np.stack([unit_costs[d][1] for d in members], axis=1)[st.unique_of]
        finish = np.empty_like(op_lat)
        for i, preds in enumerate(st.preds):
            start = finish[preds].max(axis=0) if preds else 0.0
            finish[i] = start + op_lat[i]
        crit = finish.max(axis=0) if len(finish) else np.zeros(len(members))
        idx = np.array(members)
        static_w = energy[idx]
        lat[idx] = crit
        energy[idx] = op_energy.sum(axis=0) + static_w * crit
    with np.errstate(divide="ignore", invalid="ignore"):
        power = energy / lat
    tput = np.array([throughput_of(workload, float(t))[0] if np.isfinite(t) else np.nan for t in lat])
    return FastResults(latency_s=lat, energy_j=energy, area_mm2=area, avg_power_w=power,
                       throughput=tput, infeasible=reasons)


def evaluate_points(workload: Workload, template: type[Template], points: Sequence[dict[str, Any]],
                    preset: str | None = None) -> FastResults:
    """:func:`evaluate_many` over parameter dicts of one template (invalid ones infeasible)."""
    designs: list[Template | None] = []
    reasons: list[str | None] = []
    for p in points:
        try:
            designs.append(template(preset, **p))
            reasons.append(None)
        except DSEError as exc:
            designs.append(None)
            reasons.append(str(exc))
    ok = [i for i, d in enumerate(designs) if d is not None]
    sub = evaluate_many(workload, [designs[i] for i in ok])
    n = len(points)
    out = FastResults(latency_s=np.full(n, np.nan), energy_j=np.full(n, np.nan),
                      area_mm2=np.full(n, np.nan), avg_power_w=np.full(n, np.nan),
                      throughput=np.full(n, np.nan), infeasible=reasons)
    for j, i in enumerate(ok):
        out.latency_s[i], out.energy_j[i] = sub.latency_s[j], sub.energy_j[j]
        out.area_mm2[i], out.avg_power_w[i] = sub.area_mm2[j], sub.avg_power_w[j]
        out.throughput[i] = sub.throughput[j]
        out.infeasible[i] = sub.infeasible[j]
    return out
