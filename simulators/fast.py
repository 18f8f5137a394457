"""The fast screening path: many designs of one template on one workload at once, no SimPy.

Same cost model as the event-driven simulator — it calls the template's own ``cost()`` — but
no contention: an op starts when its last producer ends, whatever unit or channel it uses, so
the latency is the critical path of the op graph, or what the shared resources impose
whatever the overlap when that is longer (each unit's busy time, each channel's bytes over
its bandwidth: ops on parallel branches still run one at a time on their unit). On designs
where nothing contends (a chain of ops, or independent ops on distinct units and channels) it
equals the SimPy result; otherwise it is a lower bound of it, never below a floor
(:mod:`simulators.floors`). A template whose every op holds its one unit (``SERIAL_UNIT``, the
wafer's region) runs its ops one after another: there the latency is at least their sum, which
is what the SimPy result is.

Speed comes from four things: designs whose plan reads the same parameters share one planned
graph and its index structure (``Template.planned``); ops with identical shapes and attributes
(the same layer repeated N times; with a template's ``op_contexts``, in the same context) are
costed once per design; a template may cost each unique op on all its
designs at once (a ``cost_many`` classmethod, e.g. the npu's numpy version in
:mod:`accelerators.npu_vector`, see :func:`evaluate_many`); and the critical path is one numpy
pass over the graph in topological order with a vector of all designs at each node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accelerators.base import Template
from dse.errors import DSEError
from simulators.engine import throughput_of
from workloads.gna import dense_equivalent
from workloads import structure
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
    cost_usd: np.ndarray | None = None
    tdp_w: np.ndarray | None = None

    @property
    def edp(self) -> np.ndarray:
        return self.energy_j * self.latency_s

    def metrics(self, i: int) -> dict[str, float]:
        """The metrics of design ``i``, keyed as :meth:`Result.metrics`."""
        return {"latency_s": float(self.latency_s[i]), "energy_j": float(self.energy_j[i]),
                "area_mm2": float(self.area_mm2[i]), "avg_power_w": float(self.avg_power_w[i]),
                "edp": float(self.edp[i]), "throughput": float(self.throughput[i]),
                "cost_usd": _at(self.cost_usd, i), "tdp_w": _at(self.tdp_w, i)}


def _at(values: np.ndarray | None, i: int) -> float:
    return float(values[i]) if values is not None else float("nan")


def costs_whole_workload(cls: type) -> bool:
    """True when the template overrides ``Template.costs`` (maps a workload at once, so the
    fast path must ask it for the whole planned graph, as the simulator does)."""
    return getattr(cls, "costs", Template.costs) is not Template.costs


#: Fewest (designs x unique ops) cost calls for which a template's vectorised ``cost_many`` is
#: used [measured with the npu: numpy's fixed cost per call is ~0.6 ms, one scalar
#: ``NPU.cost`` ~12-50 us (gpt2 decode / resnet50 unique ops, 1-32 designs); they break even
#: near 30-50 calls].
VECTOR_MIN_CALLS = 64


def _critical_path(op_lat: np.ndarray, preds: list[list[int]]) -> np.ndarray:
    """Finish time of every op (rows) on every design (columns): its latency after the last of
    its predecessors."""
    finish = np.empty_like(op_lat)
    for i, p in enumerate(preds):
        if not p:
            finish[i] = 0.0 + op_lat[i]
        elif len(p) == 1:
            np.add(finish[p[0]], op_lat[i], out=finish[i])
        else:
            np.add(finish[p].max(axis=0), op_lat[i], out=finish[i])
    return finish


def _cost_many_hook(cls: type) -> Any:
    """The template's vectorised cost, if it has one (see :func:`evaluate_many`)."""
    fn = getattr(cls, "cost_many", None)
    return fn if callable(fn) else None


def _unit_costs(cls: type, members: list[Template], st: structure.Structure, planned: Workload,
                vectorised: bool):
    """Latency and dynamic energy of the unique ops of ``st`` (rows) on ``members`` (columns),
    the first exception each member raises (None where it runs every op), the members'
    area and static power when the template's ``cost_many`` gives them (else None), and
    the bytes each op puts on each shared channel and the units it holds (dicts of arrays
    like the latency; None where a ``cost_many`` does not give them)."""
    ops = st.unique_ops
    maps_whole = costs_whole_workload(cls)
    whole = maps_whole and st.unique_contexts is None
    hook = _cost_many_hook(cls) if vectorised and not maps_whole else None
    if hook is not None and len(members) * len(ops) >= VECTOR_MIN_CALLS:
        many = hook(members, ops)
        return (many.latency_s, many.energy_j, list(many.errors),
                getattr(many, "area_mm2", None), getattr(many, "static_power_w", None),
                getattr(many, "traffic", None), getattr(many, "holds", None))
    lat = np.full((len(ops), len(members)), np.nan)
    energy = np.full((len(ops), len(members)), np.nan)
    traffic: dict[str, np.ndarray] = {}
    holds: dict[str, np.ndarray] = {}
    errors: list[BaseException | None] = [None] * len(members)
    for i, design in enumerate(members):
        try:
            if whole:
                costs = design.costs(planned)
            elif st.unique_contexts is not None:
                costs = [design.cost_in(op, c) for op, c in zip(ops, st.unique_contexts)]
            else:
                costs = [design.cost(op) for op in ops]
        except DSEError as exc:
            errors[i] = exc
            continue
        lat[:, i] = [c.latency_s for c in costs]
        energy[:, i] = [c.total_energy_j for c in costs]
        for j, c in enumerate(costs):
            for ch, b in c.traffic.items():
                traffic.setdefault(ch, np.zeros(lat.shape))[j, i] = b
            for u in (c.unit, *c.also_holds):
                holds.setdefault(u, np.zeros(lat.shape, dtype=bool))[j, i] = True
    return lat, energy, errors, None, None, traffic, holds


def _resource_floor(unit_lat: np.ndarray, counts: np.ndarray,
                    traffic: dict[str, np.ndarray] | None,
                    holds: dict[str, np.ndarray] | None,
                    designs: list[Template]) -> np.ndarray:
    """Per design (columns of ``unit_lat``, the graph's unique ops in rows, each standing
    for ``counts`` ops), the longest of what its shared resources impose whatever the
    overlap: each unit's busy time (the latencies of the ops holding it over its slots) and
    each channel's bytes over its bandwidth. The event simulation can never beat it
    (contention only adds), so neither may the fast path (:mod:`simulators.floors`)."""
    out = np.zeros(unit_lat.shape[1])
    if not designs or traffic is None or holds is None:
        return out
    res = [d.resources() for d in designs]
    w = counts[:, None]
    for u, mask in holds.items():
        slots = np.array([max(r.units.get(u, 1), 1) for r in res], dtype=float)
        out = np.maximum(out, (w * np.where(mask, unit_lat, 0.0)).sum(axis=0) / slots)
    for ch, b in traffic.items():
        bw = np.array([r.channels.get(ch, 0.0) for r in res], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(bw > 0, (w * b).sum(axis=0) / bw, 0.0)
        out = np.maximum(out, t)
    return out


def evaluate_many(workload: Workload, designs: Sequence[Template],
                  vectorised: bool = True) -> FastResults:
    """Latency, energy, area, power and throughput of every design on ``workload``.

    A template class may offer a vectorised cost, the classmethod
    ``cost_many(designs, ops)`` returning an object with ``latency_s`` and ``energy_j``
    (``(len(ops), len(designs))`` arrays, the ``latency_s`` and ``total_energy_j`` of
    ``design.cost(op)``) and ``errors`` (per design, the exception its ``cost()`` raises first
    going through ``ops`` in order, or None), and optionally ``area_mm2`` and
    ``static_power_w`` (``(len(designs),)``, the designs' own ``area_mm2()`` and
    ``static_power_w()``); it must equal calling ``cost()`` design by design. Designs of a
    template without it, batches under ``VECTOR_MIN_CALLS`` cost calls, and everything with
    ``vectorised=False`` are costed one by one.
    """
    n = len(designs)
    lat = np.full(n, np.nan)
    energy = np.full(n, np.nan)
    area = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    structures: dict[tuple, structure.Structure] = {}
    planned_of: dict[tuple, Workload] = {}  # keeps planned graphs alive: ids unique
    batches: dict[tuple[tuple, type], list[int]] = {}
    for d, design in enumerate(designs):
        try:
            reason = design.check(workload)
            if reason:
                raise DSEError(reason)
            planned = design.planned(workload if design.SPARSE_ATTENTION
                                     else dense_equivalent(workload))
            cls = type(design)
            whole = costs_whole_workload(cls)
            dedupe = not whole or cls.op_contexts(planned) is not None
            key = (id(planned), dedupe, cls if whole else None)
            if key not in structures:
                structures[key] = structure.of(planned, dedupe, cls)
                planned_of[key] = planned
        except DSEError as exc:
            reasons[d] = getattr(exc, "reason", str(exc))
            continue
        batches.setdefault((key, cls), []).append(d)
    groups: dict[tuple, list[int]] = {}
    unit_lat: dict[tuple, list[np.ndarray]] = {}
    unit_energy: dict[tuple, list[np.ndarray]] = {}
    unit_side: dict[tuple, list[tuple]] = {}
    for (key, cls), members in sorted(batches.items(), key=lambda kv: kv[1][0]):
        st = structures[key]
        op_lat, op_energy, errors, areas, statics, traffic, holds = _unit_costs(
            cls, [designs[d] for d in members], st, planned_of[key], vectorised)
        ok = []
        for i, (d, exc) in enumerate(zip(members, errors)):
            if exc is None:
                ok.append(i)
            elif isinstance(exc, DSEError):
                reasons[d] = getattr(exc, "reason", str(exc))
            else:
                raise exc
        if not ok:
            continue
        idx = [members[i] for i in ok]
        groups.setdefault(key, []).extend(idx)
        unit_lat.setdefault(key, []).append(op_lat[:, ok])
        unit_energy.setdefault(key, []).append(op_energy[:, ok])
        unit_side.setdefault(key, []).append((
            None if traffic is None else {c: v[:, ok] for c, v in traffic.items()},
            None if holds is None else {u: v[:, ok] for u, v in holds.items()}))
        if areas is not None and statics is not None:
            area[idx] = np.asarray(areas)[ok]
            energy[idx] = np.asarray(statics)[ok]  # W for now; times latency below
        else:
            for d in idx:
                area[d] = designs[d].area_mm2()
                energy[d] = designs[d].static_power_w()
    for key, members in groups.items():
        st = structures[key]
        op_lat = np.concatenate(unit_lat[key], axis=1)[st.unique_of]   # ops x designs
        op_energy = np.concatenate(unit_energy[key], axis=1)[st.unique_of]
        finish = _critical_path(op_lat, st.preds)
        crit = finish.max(axis=0) if len(finish) else np.zeros(len(members))
        start = 0
        for (traffic, holds), part in zip(unit_side[key], unit_lat[key]):
            cols = slice(start, start + part.shape[1])
            sel = members[cols]
            crit[cols] = np.maximum(crit[cols], _resource_floor(
                part, st.counts, traffic, holds, [designs[d] for d in sel]))
            start += part.shape[1]
        if getattr(type(designs[members[0]]), "SERIAL_UNIT", False) and len(op_lat):
            crit = np.maximum(crit, op_lat.sum(axis=0))   # one unit: ops run one at a time
        idx = np.array(members)
        static_w = energy[idx]
        lat[idx] = crit
        energy[idx] = op_energy.sum(axis=0) + static_w * crit
    with np.errstate(divide="ignore", invalid="ignore"):
        power = energy / lat
    tput = np.array([throughput_of(workload, float(t))[0] if np.isfinite(t) else np.nan for t in lat])
    cost, tdp = np.full(n, np.nan), np.full(n, np.nan)
    for d in np.flatnonzero(np.isfinite(lat)):
        phys = designs[d].physical()
        if phys is not None:
            cost[d], tdp[d] = phys.cost_usd, phys.tdp_w
    return FastResults(latency_s=lat, energy_j=energy, area_mm2=area, avg_power_w=power,
                       throughput=tput, infeasible=reasons, cost_usd=cost, tdp_w=tdp)


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
                      throughput=np.full(n, np.nan), infeasible=reasons,
                      cost_usd=np.full(n, np.nan), tdp_w=np.full(n, np.nan))
    for j, i in enumerate(ok):
        out.latency_s[i], out.energy_j[i] = sub.latency_s[j], sub.energy_j[j]
        out.area_mm2[i], out.avg_power_w[i] = sub.area_mm2[j], sub.avg_power_w[j]
        out.throughput[i] = sub.throughput[j]
        out.cost_usd[i], out.tdp_w[i] = sub.cost_usd[j], sub.tdp_w[j]
        out.infeasible[i] = sub.infeasible[j]
    return out
