"""The SimPy event-driven engine.

Each op is a process: it waits for its producers, takes a slot of its unit (and of any unit in
``OpCost.also_holds``), pays its fixed overhead, then computes for ``compute_s`` while its
traffic crosses the shared channels; it ends when both are done. Ops on different units overlap;
concurrent transfers on one channel share its bandwidth (:class:`FluidChannel`). With nothing
contending, every op takes exactly its ``OpCost.latency_s``.
"""

from __future__ import annotations

from typing import Any, Sequence

import simpy

from accelerators.base import ENERGY_COMPONENTS, OpCost, Template
from dse.errors import InfeasibleDesign
from simulators.channel import FluidChannel
from simulators.result import OpRecord, Result
from workloads.gna import dense_equivalent
from workloads.ir import Op, Workload


def throughput_of(workload: Workload, latency_s: float) -> tuple[float, str]:
    """Items per second: tokens for LLM phases, samples otherwise."""
    if latency_s <= 0:
        return 0.0, "items/s"
    if workload.phase == "decode":
        return workload.batch / latency_s, "tokens/s"
    if workload.phase == "prefill":
        return workload.batch * max(workload.seq, 1) / latency_s, "tokens/s"
    return workload.batch / latency_s, "samples/s"


def simulate(workload: Workload, accelerator: Template,
             costs: Sequence[OpCost] | None = None) -> Result:
    """Simulate ``workload`` on ``accelerator``; raise ``InfeasibleDesign`` if it cannot run.

    The design's :meth:`Template.plan` may restructure the graph first; ``costs``, when
    given, are for the planned graph's ops.
    """
    if costs is None:
        reason = accelerator.check(workload)
        if reason:
            raise InfeasibleDesign(reason)
        workload = accelerator.plan(workload if accelerator.SPARSE_ATTENTION
                                    else dense_equivalent(workload))
        costs = accelerator.costs(workload)
    ops = workload.ops
    costs = list(costs)
    res = accelerator.resources()
    env = simpy.Environment()
    units = {name: simpy.Resource(env, capacity=int(cap)) for name, cap in res.units.items()}
    channels = {name: FluidChannel(env, bw) for name, bw in res.channels.items()}
    for cost in costs:
        for u in (cost.unit, *cost.also_holds):
            if u not in units:
                raise InfeasibleDesign(f"{accelerator.name} has no unit {u!r}")
        for c in cost.traffic:
            if c not in channels:
                raise InfeasibleDesign(f"{accelerator.name} has no channel {c!r}")

    done: dict[str, simpy.Event] = {op.name: env.event() for op in ops}
    records: list[OpRecord | None] = [None] * len(ops)
    graph = workload.graph
    for i, (op, cost) in enumerate(zip(ops, costs)):
        env.process(op_process(env, op, cost, [done[p] for p in graph.predecessors(op.name)],
                               units, channels, done[op.name], records, i))
    env.run()
    latency = env.now
    if any(r is None for r in records):
        raise InfeasibleDesign("the op graph has a cycle or an op never became ready")
    return _result(workload, accelerator, costs, records, latency, env)


def op_process(env: simpy.Environment, op: Op, cost: OpCost, preds: list,
               units: dict[str, simpy.Resource], channels: dict[str, FluidChannel],
               done: simpy.Event, records: list, i: int, prefix: str = ""):
    """One op as a SimPy process: wait for ``preds``, hold its unit(s), pay its fixed
    overhead, compute while its traffic crosses ``channels``; then ``records[i]`` is its
    :class:`OpRecord` (units named ``prefix + unit``) and ``done`` fires."""
    if len(preds) == 1:
        yield preds[0]
    elif preds:
        yield env.all_of(preds)
    held = []
    for u in sorted({cost.unit, *cost.also_holds}):
        req = units[u].request()
        yield req
        held.append((units[u], req))
    start = env.now
    mem_alone = max((b / channels[c].bandwidth_Bps for c, b in cost.traffic.items()),
                    default=0.0)
    overhead = cost.latency_s - max(cost.compute_s, mem_alone)
    if overhead > 0:
        yield env.timeout(overhead)
    waits = [channels[c].transfer(b) for c, b in cost.traffic.items() if b > 0]
    if cost.compute_s > 0:
        waits.append(env.timeout(cost.compute_s))
    if len(waits) == 1:
        yield waits[0]
    elif waits:
        yield env.all_of(waits)
    for resource, req in held:
        resource.release(req)
    records[i] = OpRecord(
        name=op.name, kind=op.kind, unit=prefix + cost.unit, start_s=start, end_s=env.now,
        cycles=(env.now - start) * cost.clock_hz, compute_cycles=cost.compute_cycles,
        flops=op.flops, bytes=op.total_bytes, energy_j=cost.total_energy_j, bound=cost.bound,
        details=dict(cost.details))
    done.succeed()


def _result(workload: Workload, accelerator: Template, costs: Sequence[OpCost],
            records: list, latency: float, env: simpy.Environment) -> Result:
    energy = {c: 0.0 for c in ENERGY_COMPONENTS}
    for cost in costs:
        for comp, e in cost.energy_j.items():
            energy[comp] = energy.get(comp, 0.0) + e
    static_w = accelerator.static_power_w()
    energy["static"] = static_w * latency
    total = sum(energy.values())
    busy: dict[str, float] = {}
    for r in records:
        busy[r.unit] = busy.get(r.unit, 0.0) + r.duration_s
    caps = accelerator.resources().units
    util = {u: (busy.get(u, 0.0) / (latency * caps[u]) if latency > 0 else 0.0) for u in caps}
    tput, tunit = throughput_of(workload, latency)
    area = accelerator.area_mm2()
    return Result(model=workload.model, phase=workload.phase, accelerator=accelerator.describe(),
                  latency_s=latency, energy_j=total, energy_breakdown_j=energy,
                  area_mm2=area, **physical_fields(accelerator),
                  avg_power_w=total / latency if latency > 0 else static_w,
                  busy_fraction=util, throughput=tput, throughput_unit=tunit, ops=list(records),
                  events=_event_count(env),
                  compute_utilisation=compute_utilisation([(workload, accelerator)], latency))


def compute_utilisation(parts: Sequence[tuple[Workload, Template]], latency_s: float) -> float:
    """FLOPs done per second over the peak FLOP/s of the designs that did them (each
    workload's ops on its design; :meth:`Template.peaks` for the workload's dtype), 0-1; NaN
    when a design declares no peaks. FLOPs as :func:`simulators.floors.real_flops` counts
    them (causal attention's real work)."""
    from simulators.floors import real_flops
    flops, peak = 0.0, 0.0
    for w, design in parts:
        p = design.peaks(w.dtype)
        if p is None:
            return float("nan")
        flops += sum(real_flops(op) for op in w.ops)
        peak += sum(p.flops_per_s.values())
    return flops / latency_s / peak if latency_s > 0 and peak > 0 else float("nan")


def physical_fields(accelerator: Template) -> dict[str, Any]:
    """A design's ``area_breakdown_mm2``, ``cost_usd`` (and its breakdown), ``tdp_w`` and
    ``memory`` for a result
    (NaN cost and TDP for a template that does not model its silicon)."""
    phys = accelerator.physical()
    if phys is None:
        return {"area_breakdown_mm2": {"total": accelerator.area_mm2()}}
    return {"area_breakdown_mm2": dict(phys.area_breakdown_mm2), "cost_usd": phys.cost_usd,
            "cost_breakdown_usd": dict(phys.cost_breakdown_usd), "tdp_w": phys.tdp_w, "memory": phys.memory.to_dict() if phys.memory else None}


def _event_count(env: simpy.Environment) -> int:
    """Events the environment scheduled (SimPy numbers each one as it is scheduled)."""
    counter = getattr(env, "_eid", None)
    return next(counter) if counter is not None else 0
