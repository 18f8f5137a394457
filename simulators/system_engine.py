"""Event-driven simulation of a workload split over a system of devices.

Every device's ops run as in :mod:`simulators.engine` (the same :func:`op_process`), on the
device's own units and memory channels (named ``d{rank}/...``). Every directed link of the
system's topology is a :class:`FluidChannel`. A collective op is one process per group: it
starts when every member has produced its input (a barrier), pays the collective's start-up
and step latencies (:mod:`accelerators.collectives`), and moves its bytes over the links of
each phase at once; concurrent collectives on a link share it, and a device computes while
its collectives wait or move data where the graph allows it.

**Symmetry.** Devices whose per-device graphs are the same object are identical
(:attr:`ParallelWorkload.representative`): only one representative of each is simulated, the
others mirror it (their records, energy and links are its own), and a collective moves its
bytes on the links of the simulated devices (plus its busiest link). On the symmetric layouts
a Megatron split makes (every rank of a tensor-parallel group alike, on a switch, ring or
torus) this is exact and costs one device's simulation; ``symmetric=False`` simulates every
device and every link.

**Pipelines.** A decode step's ``latency_s`` is the steady-state time per token of a full
pipeline: the longer of one microbatch's trip through every stage and the busiest stage's
work for all microbatches. ``fill_latency_s`` is the simulated time of one iteration from an
empty pipeline (what a prefill's latency is).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import simpy

from accelerators.base import ENERGY_COMPONENTS, OpCost
from accelerators.system import System
from dse.errors import InfeasibleDesign
from simulators.channel import FluidChannel
from simulators.engine import _event_count, op_process, throughput_of
from simulators.fast import costs_whole_workload
from simulators.result import OpRecord, Result
from workloads.gna import dense_equivalent
from workloads.ir import Workload
from workloads.parallel import COLLECTIVE, Layout, ParallelWorkload, parallelize


@dataclass
class SystemResult(Result):
    """A :class:`Result` for a system: the metrics of the whole system (latency, energy of
    every device, link and switch, area of every die, ``cost_usd`` and ``tdp_w`` of the
    system) plus ``devices``, the ``layout``, ``per_device`` (rank, its representative, busy
    and communication time, s, energy, J), ``communication_s`` (the most time a device spends
    in collectives), ``link_utilisation`` (busy fraction) and ``link_bytes`` per simulated
    link, ``collectives`` (one entry per simulated collective), ``fill_latency_s`` and
    ``microbatches`` of a pipeline."""

    devices: int = 1
    layout: dict[str, Any] = field(default_factory=dict)
    per_device: list[dict[str, Any]] = field(default_factory=list)
    communication_s: float = 0.0
    link_utilisation: dict[str, float] = field(default_factory=dict)
    link_bytes: dict[str, float] = field(default_factory=dict)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    fill_latency_s: float = 0.0
    microbatches: int = 1
    link_spans: list[tuple[str, float, float]] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({"communication_s": self.communication_s, "devices": float(self.devices)})
        return out

    def to_dict(self, ops: bool = True) -> dict[str, Any]:
        d = super().to_dict(ops)
        d.update({"devices": self.devices, "layout": self.layout, "per_device": self.per_device,
                  "communication_s": self.communication_s,
                  "link_utilisation": self.link_utilisation, "link_bytes": self.link_bytes,
                  "collectives": self.collectives, "fill_latency_s": self.fill_latency_s,
                  "microbatches": self.microbatches})
        return d

    def to_chrome_trace(self) -> dict[str, Any]:
        """One process per device (a mirrored device replays its representative's ops), a
        thread per unit and one for its collectives; one process for the links, a thread per
        link, spans while it carries a collective."""
        by_rep: dict[int, list[OpRecord]] = {}
        for r in self.ops:
            dev, _, unit = r.unit.partition("/")
            by_rep.setdefault(int(dev[1:]), []).append(r)
        events: list[dict[str, Any]] = []
        for info in self.per_device:
            pid = info["device"]
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"device {pid}" + (
                               f" (mirrors {info['representative']})"
                               if info["representative"] != pid else "")}})
            recs = by_rep.get(info["representative"], [])
            units = sorted({r.unit.partition("/")[2] for r in recs})
            tid = {u: i for i, u in enumerate(units)}
            for u, i in tid.items():
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": i,
                               "args": {"name": u}})
            for r in recs:
                events.append({"name": r.name, "cat": r.kind, "ph": "X", "pid": pid,
                               "tid": tid[r.unit.partition("/")[2]], "ts": r.start_s * 1e6,
                               "dur": max(r.duration_s, 0.0) * 1e6,
                               "args": {"flops": r.flops, "bytes": r.bytes,
                                        "energy_j": r.energy_j, "bound": r.bound}})
        link_pid = self.devices
        events.append({"name": "process_name", "ph": "M", "pid": link_pid, "tid": 0,
                       "args": {"name": "links"}})
        links = sorted({name for name, _, _ in self.link_spans})
        lid = {n: i for i, n in enumerate(links)}
        for n, i in lid.items():
            events.append({"name": "thread_name", "ph": "M", "pid": link_pid, "tid": i,
                           "args": {"name": n}})
        for name, start, end in self.link_spans:
            events.append({"name": name, "cat": "link", "ph": "X", "pid": link_pid,
                           "tid": lid[name], "ts": start * 1e6,
                           "dur": max(end - start, 0.0) * 1e6})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"model": self.model, "system": json.dumps(self.accelerator)}}


def _compute_only(w: Workload) -> Workload:
    """The ops of ``w`` a template costs (no collectives), with the edges among them (built
    once per graph: the graph is kept on ``w``)."""
    from workloads.parallel import _rebuild
    hit = w.__dict__.get("_compute_only")
    if hit is not None:
        return hit
    ops = [op for op in w.ops if op.kind != COLLECTIVE]
    out = w
    if len(ops) != len(w.ops):
        keep = {op.name for op in ops}
        edges = [(u, v, d.get("bytes", 0)) for u, v, d in w.graph.edges(data=True)
                 if u in keep and v in keep]
        out = _rebuild(w, ops, edges, w.params)
    w.__dict__["_compute_only"] = out
    return out


def simulate_system(workload: Workload | ParallelWorkload, system: System,
                    layout: Layout | dict | None = None, symmetric: bool = True) -> SystemResult:
    """Simulate ``workload`` split by ``layout`` (or an already split
    :class:`ParallelWorkload`) on ``system``; :class:`InfeasibleDesign` when the system
    cannot be built or a device's part does not fit it."""
    pw = workload if isinstance(workload, ParallelWorkload) else parallelize(workload, layout)
    lay = pw.layout
    if system.devices != lay.devices:
        raise InfeasibleDesign(f"the layout (tp {lay.tp} x pp {lay.pp} x ep {lay.ep} x dp "
                               f"{lay.dp}) needs {lay.devices} devices but the system has "
                               f"{system.devices}")
    problem = system.check()
    if problem:
        raise InfeasibleDesign(problem)
    reps = sorted(set(pw.representative)) if symmetric else list(range(pw.devices))
    rep_of = pw.representative if symmetric else list(range(pw.devices))
    # each simulated device: its design checks its part, plans it (the GPU's stream order
    # and host ops, collectives included) and costs every op that is not a collective
    prepared: dict[int, tuple[Workload, list[OpCost | None]]] = {}
    done_for: dict[tuple[int, int], tuple[Workload, list[OpCost | None]]] = {}
    for r in reps:
        w, design = pw.graphs[r], system.device(r)
        key = (id(w), id(design))
        if key not in done_for:
            reason = design.check(_compute_only(w))
            if reason:
                raise InfeasibleDesign(f"device {r}: {reason}" if pw.devices > 1 else reason)
            planned = design.plan(w if design.SPARSE_ATTENTION else dense_equivalent(w))
            names = {op.name for op in planned.ops}
            if any(op.name not in names for op in w.ops if op.kind == COLLECTIVE):
                raise InfeasibleDesign(f"{design.name} restructures the graph it runs (plan) "
                                       "and drops its collectives: it cannot be a device of "
                                       "a system yet")
            if costs_whole_workload(type(design)):   # it maps a whole graph at once
                compute = _compute_only(planned)
                by_name = dict(zip((op.name for op in compute.ops), design.costs(compute)))
                costs = [by_name.get(op.name) for op in planned.ops]
            else:
                costs = [None if op.kind == COLLECTIVE else design.cost(op)
                         for op in planned.ops]
            done_for[key] = (planned, costs)
        prepared[r] = done_for[key]

    env = simpy.Environment()
    links = system.topology.links
    link_channels: dict[str, FluidChannel] = {}
    spans: list[tuple[str, float, float]] = []
    done: dict[tuple[int, str], simpy.Event] = {}
    records: dict[int, list] = {}
    device_units, device_channels = {}, {}
    for r in reps:
        res = system.device(r).resources()
        device_units[r] = {u: simpy.Resource(env, capacity=int(c)) for u, c in res.units.items()}
        device_channels[r] = {c: FluidChannel(env, bw) for c, bw in res.channels.items()}
        for op in prepared[r][0].ops:
            done[(r, op.name)] = env.event()
        records[r] = [None] * len(prepared[r][0].ops)
    simulated = set(reps)
    costs_cache: dict[tuple, Any] = {}
    instances: dict[tuple, simpy.Event] = {}
    starts: dict[tuple, float] = {}
    coll_records: list[dict[str, Any]] = []

    def link(name: str) -> FluidChannel:
        ch = link_channels.get(name)
        if ch is None:
            ch = link_channels[name] = FluidChannel(env, links[name].effective_Bps)
        return ch

    def incident(name: str) -> bool:
        a, b = name.split("->")
        return (a[0] == "d" and int(a[1:]) in simulated) or (b[0] == "d" and int(b[1:]) in simulated)

    def collective(key, op, group, waits, event, members):
        if len(waits) == 1:
            yield waits[0]
        elif waits:
            yield env.all_of(waits)
        start = starts[key] = env.now
        ckey = (op.attrs["collective"], op.attrs["bytes"], group)
        cost = costs_cache.get(ckey)
        if cost is None:
            cost = costs_cache[ckey] = system.collective(op.attrs["collective"],
                                                         op.attrs["bytes"], group)
        if cost.start_s > 0:
            yield env.timeout(cost.start_s)
        for latency, wire in cost.phases:
            if latency > 0:
                yield env.timeout(latency)
            if symmetric:
                busiest = max(wire, key=wire.get) if wire else None
                wire = {n: b for n, b in wire.items() if n == busiest or incident(n)}
            t0 = env.now
            moves = [link(n).transfer(b) for n, b in wire.items() if b > 0]
            if len(moves) == 1:
                yield moves[0]
            elif moves:
                yield env.all_of(moves)
            spans.extend((n, t0, env.now) for n in wire)
        coll_records.append({"name": op.name, "collective": cost.kind, "group": list(group),
                             "bytes": cost.nbytes, "algorithm": cost.algorithm,
                             "protocol": cost.protocol, "start_s": start, "end_s": env.now,
                             "model_time_s": cost.time_s, "energy_j": cost.energy_j,
                             "mirrors": members})
        event.succeed()

    # collective instances: one per (op, group); mirrored groups count towards its energy
    mirrors: dict[tuple, set] = {}
    collectives_of: dict[int, list] = {}
    for d in range(pw.devices):
        r, g = rep_of[d], pw.graphs[d]
        ops = collectives_of.get(id(g))
        if ops is None:
            ops = collectives_of[id(g)] = [op for op in g.ops if op.kind == COLLECTIVE]
        for op in ops:
            own = (op.name, lay.group(op, d))
            sim = (op.name, lay.group(op, r)) if symmetric and r != d else own
            mirrors.setdefault(sim, set()).add(own)
    for r in reps:
        w, costs = prepared[r]
        graph = w.graph
        prefix = f"d{r}/"
        for i, (op, cost) in enumerate(zip(w.ops, costs)):
            if op.kind == COLLECTIVE:
                group = tuple(lay.group(op, r))
                key = (op.name, group)
                event = instances.get(key)
                if event is None:
                    event = instances[key] = env.event()
                    waits, seen = [], set()
                    for m in group:          # a mirrored member waits as its representative
                        src = rep_of[m]
                        for p in prepared[src][0].graph.predecessors(op.name):
                            ev = done[(src, p)]
                            if id(ev) not in seen:
                                seen.add(id(ev))
                                waits.append(ev)
                    env.process(collective(key, op, group, waits, event,
                                           len(mirrors.get(key, ()))))
                env.process(_mark(env, event, starts, key, done[(r, op.name)], records[r], i,
                                  op, prefix))
                continue
            env.process(op_process(env, op, cost,
                                   [done[(r, p)] for p in graph.predecessors(op.name)],
                                   device_units[r], device_channels[r], done[(r, op.name)],
                                   records[r], i, prefix))
    env.run()
    for r in reps:
        if any(rec is None for rec in records[r]):
            raise InfeasibleDesign("the op graphs have a cycle or an op never became ready")
    return _system_result(pw, system, prepared, records, rep_of, reps, env, link_channels,
                          coll_records, spans, mirrors)


def _mark(env, event, starts, key, done, records, i, op, prefix):
    """A device's record of a collective it takes part in (on its ``comm`` unit), from the
    collective's start to its end."""
    yield event
    records[i] = OpRecord(name=op.name, kind=COLLECTIVE, unit=prefix + "comm",
                          start_s=starts[key],
                          end_s=env.now, cycles=0.0, compute_cycles=0.0, flops=0,
                          bytes=int(op.attrs["bytes"]), energy_j=0.0, bound="network")
    done.succeed()


def _system_result(pw, system, prepared, records, rep_of, reps, env, link_channels,
                   coll_records, spans, mirrors) -> SystemResult:
    source = pw.source
    makespan = env.now
    count = {r: sum(1 for d in range(pw.devices) if rep_of[d] == r) for r in reps}
    energy = {c: 0.0 for c in ENERGY_COMPONENTS}
    per_rep: dict[int, dict[str, float]] = {}
    for r in reps:
        _, costs = prepared[r]
        e = 0.0
        for cost in costs:
            if cost is None:
                continue
            for comp, v in cost.energy_j.items():
                energy[comp] = energy.get(comp, 0.0) + v * count[r]
                e += v
        recs = records[r]
        busy = sum(x.duration_s for x in recs if x.kind != COLLECTIVE)
        comm = sum(x.duration_s for x in recs if x.kind == COLLECTIVE)
        end = max((x.end_s for x in recs), default=0.0)
        per_rep[r] = {"busy_s": busy, "communication_s": comm, "end_s": end,
                      "dynamic_energy_j": e}
    for c in coll_records:
        energy["network"] += c["energy_j"] * max(c["mirrors"], 1)
    latency, fill = makespan, makespan
    if pw.layout.pp > 1 and source.phase == "decode":
        latency = _steady_state(pw, records, rep_of)
    energy["static"] = system.static_power_w() * latency
    total = sum(energy.values())
    per_device = [{"device": d, "representative": rep_of[d], **per_rep[rep_of[d]]}
                  for d in range(pw.devices)]
    util: dict[str, float] = {}
    for r in reps:
        caps = system.device(r).resources().units
        for u, cap in caps.items():
            b = sum(x.duration_s for x in records[r] if x.unit == f"d{r}/{u}")
            util[f"d{r}/{u}"] = b / (makespan * cap) if makespan > 0 else 0.0
    tput, tunit = throughput_of(source, latency)
    phys = system.physical()
    ops = [x for r in reps for x in records[r]]
    return SystemResult(
        model=source.model, phase=source.phase, accelerator=system.describe(),
        latency_s=latency, energy_j=total, energy_breakdown_j=energy, area_mm2=phys.area_mm2,
        avg_power_w=total / latency if latency > 0 else system.static_power_w(),
        utilisation=util, throughput=tput, throughput_unit=tunit, ops=ops,
        events=_event_count(env), area_breakdown_mm2=dict(phys.area_breakdown_mm2),
        cost_usd=phys.cost_usd, tdp_w=phys.tdp_w, memory=None, devices=pw.devices,
        layout={**pw.layout.to_dict(), "microbatches": pw.microbatches},
        per_device=per_device,
        communication_s=max((v["communication_s"] for v in per_rep.values()), default=0.0),
        link_utilisation={n: ch.busy_s / makespan if makespan > 0 else 0.0
                          for n, ch in sorted(link_channels.items())},
        link_bytes={n: ch.bytes_moved for n, ch in sorted(link_channels.items())},
        collectives=coll_records, fill_latency_s=fill, microbatches=pw.microbatches,
        link_spans=spans)


def _steady_state(pw: ParallelWorkload, records, rep_of) -> float:
    """Time per decode step of a full pipeline: the longer of microbatch 0's trip (its last
    op's end on the last stage) and the busiest device's occupied time (the union of its ops
    and collectives) over every microbatch."""
    trip, busiest = 0.0, 0.0
    for r in set(rep_of):
        recs = records[r]
        spans = sorted((x.start_s, x.end_s) for x in recs)
        occupied, cur_s, cur_e = 0.0, None, None
        for a, b in spans:
            if cur_e is None or a > cur_e:
                occupied += (cur_e - cur_s) if cur_e is not None else 0.0
                cur_s, cur_e = a, b
            else:
                cur_e = max(cur_e, b)
        occupied += (cur_e - cur_s) if cur_e is not None else 0.0
        busiest = max(busiest, occupied)
        # microbatch 0's ops end in "@0"; with one microbatch no op is suffixed: all are its
        first = [x.end_s for x in recs if pw.microbatches <= 1 or x.name.endswith("@0")]
        trip = max(trip, max(first, default=0.0))
    return max(trip, busiest)
