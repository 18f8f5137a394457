"""Floors: first-principles bounds no result may beat, on every path.

Given what a path produced (an event simulation's :class:`~simulators.result.Result`, the fast
path's or a population's :class:`~simulators.fast.FastResults`, a generation, a serving run, a
system's result) and what produced it (the workload, the design), this module computes bounds
from the work alone and the design's peaks (:meth:`accelerators.base.Template.peaks`) and
returns the :class:`Violation` of every one the result breaks. A result below a floor is a bug
in the path that produced it (the fast path may be optimistic against contention, but never
below these).

Latency floors, s (each is a resource's work over its peak, and the result must be at least
the largest):

* ``flops``: the workload's FLOPs (the work a kernel really does: causal attention's
  ``causal_flops``) over the sum of the design's units' peak FLOP/s for that dtype (the most
  any mapping could reach);
* ``flops@<unit>``: FLOPs of the ops the design runs on ``<unit>`` alone over its peak;
* ``bytes@<level>``: the weights and KV cache the step reads, at the design's element size,
  less what the levels inside hold (they could keep data between steps), over the bandwidth
  of the level they start in;
* ``busy@<unit>`` and ``traffic@<channel>`` (the cost model's own totals, what the
  simulator's shared resources impose): the sum of the latencies of the ops holding a unit
  (units run one op at a time), and the bytes the ops put on a shared channel or link over
  its bandwidth (concurrent transfers share it).

Energy floor, J: FLOPs x the design's cheapest energy per FLOP + the bytes that must cross the
level they start in x its cheapest energy per byte, plus static power x the latency.

Ceilings and design checks: average power <= TDP; area = the sum of its parts, each die within
the reticle, a wafer within the largest rectangle a wafer holds (``d^2 / 2``: a square inside
the disc); capacity >= the weights and KV cache; cost = the sum of its parts and >= the
silicon at perfect yield plus the memory at the cheapest price per GB.

``benchmarks/floors.py`` runs thousands of random (design, workload) pairs per template and
path; ``tests/test_floors.py`` a fixed-seed sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from accelerators.base import OpCost, Peaks, Template
from workloads import ir
from workloads.footprint import memory_footprint
from workloads.ir import Op, Workload

#: Relative slack for floating-point rounding when comparing a result with a bound.
REL_TOL = 1e-9
#: Largest rectangle a 300-mm wafer holds, mm^2: a rectangle inscribed in a circle of diameter
#: d has at most d^2 / 2 (the square; geometry, before any edge exclusion).
WAFER_DIAMETER_MM = 300.0
WAFER_RECTANGLE_MM2 = WAFER_DIAMETER_MM ** 2 / 2


@dataclass(frozen=True)
class Violation:
    """A result beyond a bound: ``quantity`` (``latency_s``, ``energy_j``, ``avg_power_w``,
    ``area_mm2``, ``capacity_bytes``, ``cost_usd``, ...) was ``value`` against the ``bound``
    named ``name`` (a floor, or a ceiling when ``ceiling``), on ``path``; ``where`` says what
    (a design, an iteration, a device)."""

    path: str
    quantity: str
    name: str
    value: float
    bound: float
    ceiling: bool = False
    where: str = ""

    @property
    def margin(self) -> float:
        """How far inside the bound the value is, relative (negative: broken)."""
        return margin(self.value, self.bound, self.ceiling)

    def __str__(self) -> str:
        rel = "above the ceiling" if self.ceiling else "below the floor"
        at = f" ({self.where})" if self.where else ""
        return (f"{self.path}: {self.quantity} {self.value:.6g} {rel} {self.name} "
                f"{self.bound:.6g} by {-self.margin:.3%}{at}")


def margin(value: float, bound: float, ceiling: bool = False) -> float:
    """``value / bound - 1`` for a floor, ``bound / value - 1`` for a ceiling (negative: the
    bound is broken); 0 when the bound is 0 and the value meets it."""
    lo, hi = (value, bound) if ceiling else (bound, value)
    if lo <= 0:
        return math.inf if hi > 0 or lo == hi else -math.inf
    return hi / lo - 1.0


def broken(value: float, bound: float, ceiling: bool = False) -> bool:
    """True when ``value`` is beyond ``bound`` by more than rounding (NaN values: not
    compared)."""
    if not (math.isfinite(value) and math.isfinite(bound)):
        return False
    slack = REL_TOL * max(abs(value), abs(bound)) + 1e-300
    return value > bound + slack if ceiling else value < bound - slack


# ----------------------------------------------------------------------------- the work
def real_flops(op: Op) -> float:
    """FLOPs a kernel must do for ``op``: causal attention's ``causal_flops`` (the IR counts
    attention in full), else the op's FLOPs."""
    if op.kind == ir.ATTENTION and op.attrs.get("causal_flops") is not None:
        return float(min(op.flops, op.attrs["causal_flops"])) if op.flops else \
            float(op.attrs["causal_flops"])
    return float(op.flops)


def element_scale(workload: Workload, design: Template) -> float:
    """Factor from the workload's bytes to what ``design`` stores them in."""
    return design.element_bytes(workload) / max(workload.bytes_per_element, 1)


def op_scale(op: Op, scale: float) -> float:
    """:func:`element_scale` ``scale`` for ``op``, or 1 for an op in number formats (its bytes
    are already what moves, as every template costs it: :mod:`workloads.formats`)."""
    return 1.0 if "formats" in op.attrs else scale


@dataclass
class Floors:
    """Bounds of one workload on one design: ``latency_s`` (named floors, s),
    ``dynamic_energy_j`` (J, static not included), ``static_w`` (W), and the design's own
    checks (``design`` violations, path-independent)."""

    latency_s: dict[str, float]
    dynamic_energy_j: float
    static_w: float
    tdp_w: float = math.nan

    @property
    def latency_floor_s(self) -> float:
        return max(self.latency_s.values(), default=0.0)

    def energy_floor_j(self, latency_s: float) -> float:
        return self.dynamic_energy_j + self.static_w * latency_s

    def check(self, path: str, latency_s: float, energy_j: float,
              where: str = "") -> list[Violation]:
        """Violations of a result of ``latency_s`` and ``energy_j`` (average power
        ``energy_j / latency_s``)."""
        out = [Violation(path, "latency_s", name, latency_s, f, where=where)
               for name, f in self.latency_s.items() if broken(latency_s, f)]
        e = self.energy_floor_j(latency_s)
        if broken(energy_j, e):
            out.append(Violation(path, "energy_j", "energy", energy_j, e, where=where))
        if latency_s > 0 and math.isfinite(self.tdp_w):
            p = energy_j / latency_s
            if broken(p, self.tdp_w, ceiling=True):
                out.append(Violation(path, "avg_power_w", "tdp_w", p, self.tdp_w, True, where))
        return out

    def worst_margin(self, latency_s: float, energy_j: float) -> float:
        """The smallest relative margin of a result to these bounds (negative: broken; a
        value within rounding of its bound counts 0)."""
        ms = [margin(latency_s, f) for f in self.latency_s.values() if f > 0]
        e = self.energy_floor_j(latency_s)
        if e > 0:
            ms.append(margin(energy_j, e))
        if latency_s > 0 and math.isfinite(self.tdp_w):
            ms.append(margin(energy_j / latency_s, self.tdp_w, ceiling=True))
        return rounded(min(ms, default=math.inf))


def rounded(m: float) -> float:
    """A margin within rounding (``REL_TOL``) of 0 as 0."""
    return 0.0 if abs(m) <= 4 * REL_TOL else m


def peaks_by_dtype(workload: Workload, design: Template) -> dict[str, Peaks | None]:
    """The design's :class:`Peaks` for every dtype the workload's ops run in."""
    return {d: design.peaks(d) for d in sorted({op.dtype for op in workload.ops}
                                               | {workload.dtype})}


def work_floors(workload: Workload, design: Template) -> Floors:
    """The floors of ``workload`` on ``design`` from the work alone (FLOPs, the bytes the
    weights and KV cache take), independent of any cost model."""
    peaks = peaks_by_dtype(workload, design)
    static_w = float(design.static_power_w())
    phys = design.physical()
    tdp = float(phys.tdp_w) if phys is not None else math.nan
    main = peaks.get(workload.dtype)
    if main is None or any(p is None for p in peaks.values()):
        return Floors({}, 0.0, static_w, tdp)
    flops_by_dtype: dict[str, float] = {}
    for op in workload.ops:
        flops_by_dtype[op.dtype] = flops_by_dtype.get(op.dtype, 0.0) + real_flops(op)
    lat: dict[str, float] = {}
    energy = 0.0
    compute = 0.0
    for d, f in flops_by_dtype.items():
        total_peak = sum(peaks[d].flops_per_s.values())
        if f > 0:
            compute = max(compute, f / total_peak if total_peak > 0 else math.inf)
        energy += f * peaks[d].energy_per_flop_j
    lat["flops"] = compute
    level = main.resident
    if level is not None:
        scale = element_scale(workload, design)
        read = sum((op.weight_bytes + op.kv_bytes_read) * op_scale(op, scale)
                   for op in workload.ops)
        must = max(0.0, read - main.inside(level))
        lat[f"bytes@{level.name}"] = must / level.bandwidth_Bps if level.bandwidth_Bps else 0.0
        energy += must * level.energy_j_per_byte
    return Floors(lat, energy, static_w, tdp)


def cost_floors(planned: Workload, costs: Sequence[OpCost], design: Template) -> dict[str, float]:
    """Latency floors from the cost model's own per-op figures on the graph ``design`` runs
    (``planned``): FLOPs per unit over its peak, the busy time of each unit, and the bytes
    on each shared channel over its bandwidth."""
    res = design.resources()
    busy: dict[str, float] = {u: 0.0 for u in res.units}
    traffic: dict[str, float] = {c: 0.0 for c in res.channels}
    flops: dict[tuple[str, str], float] = {}
    for op, c in zip(planned.ops, costs):
        held = {c.unit, *c.also_holds}
        for u in held:
            busy[u] = busy.get(u, 0.0) + c.latency_s
        for ch, b in c.traffic.items():
            traffic[ch] = traffic.get(ch, 0.0) + b
        if not c.also_holds:
            flops[(c.unit, op.dtype)] = flops.get((c.unit, op.dtype), 0.0) + real_flops(op)
    out: dict[str, float] = {}
    for u, t in busy.items():
        out[f"busy@{u}"] = t / max(res.units.get(u, 1), 1)
    for ch, b in traffic.items():
        bw = res.channels.get(ch, 0.0)
        out[f"traffic@{ch}"] = b / bw if bw > 0 else (math.inf if b > 0 else 0.0)
    peaks: dict[str, Peaks | None] = {}
    for (u, d), f in flops.items():
        if d not in peaks:
            peaks[d] = design.peaks(d)
        p = peaks[d]
        if p is None or f <= 0 or u not in p.flops_per_s:
            continue
        peak = p.flops_per_s[u]
        key = f"flops@{u}"
        out[key] = out.get(key, 0.0) + (f / peak if peak > 0 else math.inf)
    return out


def planned_costs(workload: Workload, design: Template) -> tuple[Workload, list[OpCost]]:
    """The graph ``design`` runs for ``workload`` and its ops' costs, as the engine makes
    them."""
    from workloads.gna import dense_equivalent
    planned = design.planned(workload if design.SPARSE_ATTENTION else dense_equivalent(workload))
    return planned, design.costs(planned)


def floors(workload: Workload, design: Template, with_costs: bool = True) -> Floors:
    """Every latency and energy floor of ``workload`` on ``design``: :func:`work_floors`,
    and with ``with_costs`` :func:`cost_floors` of its planned graph."""
    f = work_floors(workload, design)
    if with_costs:
        planned, costs = planned_costs(workload, design)
        f.latency_s.update(cost_floors(planned, costs, design))
    return f


# ----------------------------------------------------------------------------- designs
def design_violations(design: Template, workload: Workload | None = None,
                      path: str = "design") -> list[Violation]:
    """What a buildable design's physical figures break: area = the sum of its parts (every
    part >= 0), each die within the reticle, a wafer within the wafer's largest rectangle,
    cost = the sum of its parts and >= silicon at perfect yield plus memory at the cheapest
    price per GB, capacity >= the workload's weights and KV cache. A design whose
    :meth:`Template.check` refuses it is not checked (it reports no result)."""
    from accelerators import physical
    from accelerators.memory_standards import MEMORY_STANDARDS
    phys = design.physical()
    out: list[Violation] = []
    where = design.name + (f":{design.preset}" if design.preset else "")
    if phys is None or (phys.problem and not design.embedded):
        return out
    parts = phys.area_breakdown_mm2
    for k, v in parts.items():
        if broken(v, 0.0):
            out.append(Violation(path, "area_mm2", f"part {k} >= 0", v, 0.0, where=where))
    area = design.area_mm2()
    if broken(area, sum(parts.values())):
        out.append(Violation(path, "area_mm2", "sum of parts", area, sum(parts.values()),
                             where=where))
    on_silicon = phys.dies * phys.die_mm2
    fp = design.floorplan()
    if fp is not None and fp.wafer_scale:
        if broken(on_silicon, WAFER_RECTANGLE_MM2, ceiling=True):
            out.append(Violation(path, "area_mm2", "wafer rectangle", on_silicon,
                                 WAFER_RECTANGLE_MM2, True, where))
    elif broken(phys.die_mm2, physical.RETICLE_MM2, ceiling=True):
        out.append(Violation(path, "die_mm2", "reticle", phys.die_mm2, physical.RETICLE_MM2,
                             True, where))
    costs = phys.cost_breakdown_usd
    if broken(phys.cost_usd, sum(costs.values())):
        out.append(Violation(path, "cost_usd", "sum of parts", phys.cost_usd,
                             sum(costs.values()), where=where))
    if fp is not None:
        node = physical._node_key(fp.node_nm)
        wafer_mm2 = math.pi * (physical.WAFER_DIAMETER_MM / 2) ** 2
        silicon = on_silicon * physical.WAFER_PRICE_USD[node] / wafer_mm2
        memory = 0.0
        if phys.memory is not None:
            memory = phys.memory.capacity_bytes / 1e9 * min(
                s.price_usd_per_gb for s in MEMORY_STANDARDS.values())
        if broken(phys.cost_usd, silicon + memory):
            out.append(Violation(path, "cost_usd", "silicon at perfect yield + memory",
                                 phys.cost_usd, silicon + memory, where=where))
    if workload is not None:
        cap = design.memory_capacity_for(workload)
        if cap is not None:
            from workloads.formats import has_formats
            fp_w = memory_footprint(workload).scaled(
                1.0 if has_formats(workload) else element_scale(workload, design))
            need = fp_w.weights_bytes + fp_w.kv_cache_bytes
            if broken(cap, need):
                out.append(Violation(path, "capacity_bytes", "weights + KV cache", cap, need,
                                     where=where))
    return out


# ----------------------------------------------------------------------------- paths
def check_result(result: Any, workload: Workload, design: Template,
                 path: str = "event") -> list[Violation]:
    """Violations of an event simulation's :class:`~simulators.result.Result` of
    ``workload`` on ``design`` (latency, energy, power, and the design's own checks)."""
    f = floors(workload, design)
    return f.check(path, result.latency_s, result.energy_j) + design_violations(
        design, workload, path)


def check_fast(fast: Any, workload: Workload, designs: Sequence[Template],
               path: str = "fast") -> list[Violation]:
    """Violations of the fast path's (or a population's) results, design by design; an
    infeasible design (NaN) is not checked."""
    out: list[Violation] = []
    for i, d in enumerate(designs):
        lat = float(fast.latency_s[i])
        if not math.isfinite(lat):
            continue
        f = floors(workload, d)
        where = f"design {i}"
        out += f.check(path, lat, float(fast.energy_j[i]), where)
        out += design_violations(d, workload, path)
    return out


def worst(violations: Iterable[Violation]) -> Violation | None:
    """The violation with the most negative margin."""
    return min(violations, key=lambda v: v.margin, default=None)


# ----------------------------------------------------------------------------- generation
def check_generation(g: Any, base: Workload, design: Template,
                     path: str = "generation") -> tuple[list[Violation], float]:
    """Violations of a :class:`~simulators.generation.Generation` of ``base`` (a decode step
    of batch 1) on ``design``: its TTFT against the floors of the prefill of the batch, every
    simulated decode step against the floors of that step (the interpolated ones lie on lines
    between simulated ones, and every floor is affine in the KV length, so they cannot fall
    below), its energy against the steps' energy floors summed (interpolated the same way)
    plus static power over its end-to-end time, and its average power against the TDP.
    Returns the violations and the worst margin."""
    import numpy as np
    from workloads.iteration import iteration_workload
    out: list[Violation] = []
    margins: list[float] = []
    pre = floors(iteration_workload(base, (), [(0, g.input_len)] * g.batch), design)
    out += [v for v in pre.check(path, g.ttft_s, g.prefill_energy_j, "TTFT")
            if v.quantity != "avg_power_w"]
    margins.append(pre.worst_margin(g.ttft_s, g.prefill_energy_j))
    kv0 = g.input_len + 1
    dyn: dict[int, float] = {}
    for kv in g.simulated_steps:
        f = floors(iteration_workload(base, [kv] * g.batch), design)
        lat = g.step_latency_s[kv - kv0]
        e = g.step_energy_j[kv - kv0]
        out += [v for v in f.check(path, lat, e, f"step at KV {kv}")
                if v.quantity != "avg_power_w"]
        margins.append(f.worst_margin(lat, e))
        dyn[kv] = f.dynamic_energy_j
    e_floor = pre.dynamic_energy_j + pre.static_w * g.e2e_s
    if dyn:
        xs = sorted(dyn)
        kv = np.arange(kv0, kv0 + len(g.step_latency_s))
        e_floor += float(np.interp(kv, xs, [dyn[x] for x in xs]).sum())
    if broken(g.energy_j, e_floor):
        out.append(Violation(path, "energy_j", "energy", g.energy_j, e_floor, where="all steps"))
    margins.append(margin(g.energy_j, e_floor))
    if math.isfinite(pre.tdp_w) and g.e2e_s > 0:
        p = g.energy_j / g.e2e_s
        if broken(p, pre.tdp_w, ceiling=True):
            out.append(Violation(path, "avg_power_w", "tdp_w", p, pre.tdp_w, True, "all steps"))
        margins.append(margin(p, pre.tdp_w, ceiling=True))
    out += design_violations(design, base, path)
    return out, min(margins)


# ----------------------------------------------------------------------------- serving
@dataclass(frozen=True)
class IterationFloors:
    """Floors of a serving iteration on one device (a system's: one device's share), from
    coefficients of the batch-1 decode step ``base``: weights read once per iteration (the
    embedding's gathered rows per token), KV read per cached token, FLOPs per token of the
    token-wise ops and per sequence of the LM head (attention's own FLOPs left out: a lower
    bound). ``bandwidth_Bps`` and ``inside_bytes`` of the level the weights start in,
    ``peak_flops`` of all units, energies per FLOP and per byte."""

    weights_bytes: float
    weights_per_token: float
    kv_per_token: float
    flops_per_token: float
    flops_per_sequence: float
    bandwidth_Bps: float
    inside_bytes: float
    peak_flops: float
    energy_per_flop_j: float
    energy_per_byte_j: float

    @classmethod
    def of(cls, share: Workload, design: Template) -> "IterationFloors | None":
        from workloads.iteration import attention_ops, logit_ops
        peaks = design.peaks(share.dtype)
        if peaks is None or peaks.resident is None:
            return None
        scale = element_scale(share, design)
        heads = logit_ops(share)
        emb = sum(op.weight_bytes * op_scale(op, scale) for op in share.ops
                  if op.kind == ir.EMBEDDING)
        weights = sum(op.weight_bytes * op_scale(op, scale) for op in share.ops) - emb
        kv = sum(int(op.attrs.get("kv_heads", op.attrs["heads"]))
                 * (int(op.attrs["head_dim"]) + int(op.attrs.get("value_dim",
                                                                 op.attrs["head_dim"])))
                 * op.bytes_per_element * op_scale(op, scale) for op in attention_ops(share))
        tok = sum(real_flops(op) for op in share.ops
                  if op.kind != ir.ATTENTION and op.name not in heads)
        lm = sum(real_flops(op) for op in share.ops if op.name in heads)
        level = peaks.resident
        return cls(weights, emb, kv, tok, lm, level.bandwidth_Bps,
                   peaks.inside(level), sum(peaks.flops_per_s.values()),
                   peaks.energy_per_flop_j, level.energy_j_per_byte)

    def bounds(self, tokens, sequences, cached_kv_tokens):
        """(latency floor s, dynamic energy floor J) of iterations of ``tokens`` tokens,
        ``sequences`` sequences and ``cached_kv_tokens`` KV tokens read from the cache (numbers
        or numpy arrays)."""
        import numpy as np
        read = (self.weights_bytes + self.weights_per_token * tokens
                + self.kv_per_token * cached_kv_tokens)
        must = np.maximum(read - self.inside_bytes, 0.0)
        flops = self.flops_per_token * tokens + self.flops_per_sequence * sequences
        lat = np.maximum(must / self.bandwidth_Bps if self.bandwidth_Bps else 0.0,
                         flops / self.peak_flops if self.peak_flops else 0.0)
        return lat, flops * self.energy_per_flop_j + must * self.energy_per_byte_j


def check_serving(s: Any, cost: Any, path: str = "serving") -> tuple[list[Violation], float]:
    """Violations of a :class:`~simulators.serving.ServingResult` served with the iteration
    cost model ``cost``: every logged iteration (``log_iterations=True``) against its
    floors (:class:`IterationFloors`), every request's TTFT and TPOT against the floor of
    the smallest iteration, the energy against the iterations' energy floors plus static
    power over the span, and the average power against the TDP. Returns the violations and
    the worst margin."""
    import numpy as np
    target = cost.target
    share = target.share(cost.base)
    it = IterationFloors.of(share, target.device)
    out: list[Violation] = []
    margins: list[float] = []
    if it is None:
        return out, math.inf
    log = s.iteration_log
    if log.get("latency_s"):
        lat = np.asarray(log["latency_s"], dtype=float)
        decodes = np.asarray(log["decodes"], dtype=float)
        tokens = decodes + np.asarray(log["prefill_tokens"], dtype=float)
        seqs = decodes + np.asarray(log["chunks"], dtype=float)
        cached = np.asarray(log["cached_kv_tokens"], dtype=float)
        floor_s, dyn = it.bounds(tokens, seqs, cached)
        bad = lat < floor_s * (1 - REL_TOL)
        for i in np.flatnonzero(bad)[:20]:
            out.append(Violation(path, "iteration latency_s", "iteration floor",
                                 float(lat[i]), float(floor_s[i]),
                                 where=f"iteration {i}: {int(decodes[i])} decodes, "
                                       f"{int(tokens[i] - decodes[i])} prefill tokens"))
        ok = floor_s > 0
        if ok.any():
            margins.append(float((lat[ok] / floor_s[ok] - 1).min()))
        e_floor = float(dyn.sum()) + cost.static_w * s.span_s
        if broken(s.energy_j, e_floor):
            out.append(Violation(path, "energy_j", "energy", s.energy_j, e_floor))
        margins.append(margin(s.energy_j, e_floor))
    one, _ = it.bounds(1, 1, 0)
    lats = s.latencies()
    for name, values in (("ttft_s", lats["ttft"]), ("tpot_s", lats["tpot"])):
        if len(values) and broken(float(values.min()), float(one)):
            out.append(Violation(path, name, "one-token iteration", float(values.min()),
                                 float(one), where="fastest request"))
        if len(values) and one > 0:
            margins.append(float(values.min()) / float(one) - 1)
    phys = (target.design or target.system).physical()
    if phys is not None and s.span_s > 0:
        p = s.energy_j / s.span_s
        if broken(p, phys.tdp_w, ceiling=True):
            out.append(Violation(path, "avg_power_w", "tdp_w", p, phys.tdp_w, True))
        margins.append(margin(p, phys.tdp_w, ceiling=True))
    return out, min(margins, default=math.inf)


# ----------------------------------------------------------------------------- systems
#: Bytes a device must move through its links per byte of a collective (nccl-tests' sizes,
#: :mod:`accelerators.collectives`) among ``p`` devices, whatever the algorithm (in-network
#: reduction included): an all-reduce sends the (p-1)/p it does not reduce itself and
#: receives as much back; an all-gather receives, a reduce-scatter and an all-to-all send,
#: (p-1)/p of it; a broadcast or a send/recv moves it once.
def collective_device_bytes(kind: str, nbytes: float, p: int) -> float:
    share = (p - 1) / p if p > 1 else 0.0
    if kind == "all_reduce":
        return 2 * share * nbytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return share * nbytes
    return float(nbytes) if p > 1 else 0.0


def check_system(r: Any, workload: Workload, system: Any, layout: Any,
                 path: str = "system") -> tuple[list[Violation], float]:
    """Violations of a :class:`~simulators.system_engine.SystemResult`: every device's floors
    on its part (its compute ops), its collectives' bytes over its links' bandwidth (out and
    in together), the energy against the devices' energy floors plus the system's static
    power, the average power against the system's TDP, and each device design's own checks.
    Returns the violations and the worst margin."""
    from simulators.system_engine import _compute_only
    from workloads.parallel import COLLECTIVE, parallelize
    pw = parallelize(workload, layout)
    lay = pw.layout
    out: list[Violation] = []
    margins: list[float] = []
    links = system.topology.links
    dyn = 0.0
    seen: dict[tuple[int, int], Floors] = {}
    for d in range(pw.devices):
        w, design = pw.graphs[d], system.device(d)
        key = (id(w), id(design))
        if key not in seen:
            seen[key] = floors(_compute_only(w), design)
        f = seen[key]
        dyn += f.dynamic_energy_j
        where = f"device {d}"
        for name, b in f.latency_s.items():
            if broken(r.latency_s, b):
                out.append(Violation(path, "latency_s", name, r.latency_s, b, where=where))
            if b > 0:
                margins.append(margin(r.latency_s, b))
        moved = sum(collective_device_bytes(op.attrs["collective"], op.attrs["bytes"],
                                            len(lay.group(op, d)))
                    for op in w.ops if op.kind == COLLECTIVE)
        bw = sum(link.effective_Bps for name, link in links.items()
                 if f"d{d}" in name.split("->"))
        if moved > 0 and bw > 0:
            b = moved / bw
            if broken(r.latency_s, b):
                out.append(Violation(path, "latency_s", "links", r.latency_s, b, where=where))
            margins.append(margin(r.latency_s, b))
    e_floor = dyn + system.static_power_w() * r.latency_s
    if broken(r.energy_j, e_floor):
        out.append(Violation(path, "energy_j", "energy", r.energy_j, e_floor))
    margins.append(margin(r.energy_j, e_floor))
    if math.isfinite(r.tdp_w) and r.latency_s > 0:
        if broken(r.avg_power_w, r.tdp_w, ceiling=True):
            out.append(Violation(path, "avg_power_w", "tdp_w", r.avg_power_w, r.tdp_w, True))
        margins.append(margin(r.avg_power_w, r.tdp_w, ceiling=True))
    for d in sorted(set(pw.representative)):
        out += design_violations(system.device(d), _compute_only(pw.graphs[d]), path)
    return out, min(margins, default=math.inf)


# ----------------------------------------------------------------------------- training
def _op_bytes(op: Op, design: Template) -> tuple[float, float]:
    """(bytes read, bytes written) of ``op`` at the element size ``design`` stores its
    tensors in (:func:`op_scale`: an op in number formats moves its own)."""
    read = float(op.weight_bytes + op.kv_bytes_read + op.activation_bytes_read)
    written = float(op.activation_bytes_written)
    if not op.bytes_per_element:
        return read, written
    scale = op_scale(op, design.element_bytes(op) / op.bytes_per_element)
    return read * scale, written * scale


def optimizer_floor(plan: Any, layers: Sequence[int], design: Template, precision: Any,
                    optimizer: str, shard: int) -> tuple[float, float]:
    """(s, dynamic J) the optimizer ``optimizer`` of one device needs at least for its
    ``1 / shard`` of the parameters of ``layers`` (a :class:`~workloads.train_parallel.
    TrainPlan`'s blocks): the fused kernel's FLOPs over the peaks (:func:`work_floors`), and
    its states read and written once each, beyond what the levels inside hold, over the
    resident level's bandwidth (whatever implementation runs, it moves at least that)."""
    from workloads.train_step import _rebuild, optimizer_from, optimizer_ops
    ops = optimizer_ops(plan.joint, optimizer_from(optimizer, "fused"), precision,
                        {layer: int(plan.params.get(layer, 0.0) / shard) for layer in layers})
    w = _rebuild(plan.joint, ops, [])
    f = work_floors(w, design)
    seconds, joules = f.latency_s.get("flops", 0.0), f.dynamic_energy_j
    pk = design.peaks(w.dtype)
    level = pk.resident if pk is not None else None
    if level is not None and level.bandwidth_Bps:
        inside = pk.inside(level)
        moves = [_op_bytes(op, design) for op in ops]
        read, written = sum(b[0] for b in moves), sum(b[1] for b in moves)
        must = max(0.0, read - inside) + max(0.0, written - inside)
        seconds = max(seconds, must / level.bandwidth_Bps)
        joules += must * level.energy_j_per_byte
    return seconds, joules


def check_training(r: Any, joint: Workload, system: Any, layout: Any,
                   precision: Any = "mixed", optimizer: Any = "adamw",
                   optimizer_impl: str | None = None,
                   path: str = "training") -> tuple[list[Violation], float]:
    """Violations of a :class:`~simulators.training.TrainResult` of ``joint`` (the captured
    step of one micro-batch) on ``system`` (a :class:`~accelerators.system.System` or one
    design) under ``layout``, from the work alone. Per pipeline stage, one device of it:

    * its compute stream runs its blocks' forward and backward (recompute included) for every
      micro-batch one after another, then the optimizer on its share of the parameters (not
      when offloaded): the forward and backward spans of its timeline take at least the sum
      of those graphs' :func:`work_floors`, its optimizer span at least the optimizer's FLOPs
      over the peaks and its states read and written once each (a fused kernel's traffic,
      whatever the implementation; each beyond what the levels inside hold) over the
      resident level's bandwidth, and the step at least both;
    * its collectives move at least each micro-batch's tensor- and context-parallel
      collectives and one data-parallel reduction of its gradients
      (:func:`collective_device_bytes`) over its links;

    the energy is at least those dynamic floors on every device plus static power over the
    step, the average power at most the TDP (not checked when the host's power is added:
    offload), HFU <= 1. Returns the violations and the worst margin."""
    from workloads.train_parallel import plan_training, train_layout_from
    from workloads.train_step import gemm_formatted, optimizer_from, precision_from
    from workloads.training import BWD, FWD
    lay = layout if not isinstance(layout, dict) else train_layout_from(
        layout, micro_batch=joint.batch)
    prec, opt = precision_from(precision), optimizer_from(optimizer, optimizer_impl)
    plan = plan_training(gemm_formatted(joint, prec.gemm), lay)
    single = isinstance(system, Template)
    m = plan.microbatches
    shard = lay.dp * lay.cp if lay.zero >= 1 else 1
    out: list[Violation] = []
    margins: list[float] = []
    dyn_total = 0.0
    seen: dict[tuple[int, int], Floors] = {}

    def bound(quantity: str, name: str, value: float, b: float, ceiling: bool = False,
              where: str = "") -> None:
        if broken(value, b, ceiling):
            out.append(Violation(path, quantity, name, value, b, ceiling, where))
        if b > 0:
            margins.append(margin(value, b, ceiling))

    designs: list[Template] = []
    for s in range(lay.pp):
        dev = lay.rank(pp=s)
        design = system if single else system.device(dev)
        designs.append(design)
        where = f"stage {s} (device {dev})"
        layers = [layer for c in range(len(plan.chunks)) if plan.stage_of_chunk(c) == s
                  for layer in plan.chunks[c]]
        compute_s = dyn = 0.0
        moved = 0.0
        for layer in layers:
            for p in (FWD, BWD):
                seg = plan.segment(layer, p)
                if seg is None:
                    continue
                key = (id(seg.compute), id(design))
                if key not in seen:
                    seen[key] = work_floors(seg.compute, design)
                f = seen[key]
                compute_s += f.latency_floor_s * m
                dyn += f.dynamic_energy_j * m
                for kind, nbytes, group in seg.collectives:
                    moved += collective_device_bytes(
                        kind, nbytes, lay.tp if group == "tp" else lay.cp) * m
        n_stage = sum(plan.params.get(layer, 0.0) for layer in layers)
        blocks_s = compute_s
        if lay.offload_optimizer == "none":
            opt_s, opt_j = optimizer_floor(plan, layers, design, prec, opt.name, shard)
            dyn += opt_j
            spent = sum(e - b for d_, _, _, cat, b, e in r.spans
                        if d_ == dev and cat == "optimizer")
            bound("optimizer_s", "optimizer", spent, opt_s, where=where)
            compute_s += opt_s
        passes = sum(e - b for d_, _, _, cat, b, e in r.spans
                     if d_ == dev and cat in ("forward", "backward"))
        bound("forward_backward_s", "blocks", passes, blocks_s, where=where)
        bound("step_time_s", "compute stream", r.step_time_s, compute_s, where=where)
        group = lay.dp * lay.cp
        if group > 1:
            gbytes = n_stage * prec.bytes_of("gradients")
            moved += collective_device_bytes("all_reduce" if lay.zero == 0 else
                                             "reduce_scatter", gbytes, group)
        if moved > 0 and not single:
            bw = sum(link.effective_Bps for name, link in system.topology.links.items()
                     if f"d{dev}" in name.split("->"))
            if bw > 0:
                bound("step_time_s", "links", r.step_time_s, moved / bw, where=where)
        dyn_total += dyn * lay.tp * lay.cp * lay.dp
    static_w = float(system.static_power_w())
    bound("energy_per_step_j", "energy", r.energy_per_step_j,
          dyn_total + static_w * r.step_time_s)
    phys = system.physical()
    offloaded = lay.offload_optimizer != "none" or lay.offload_params != "none"
    if phys is not None and not offloaded and r.step_time_s > 0:
        bound("avg_power_w", "tdp_w", r.avg_power_w, float(phys.tdp_w), ceiling=True)
    bound("hfu", "1", r.hfu, 1.0, ceiling=True)
    for d in designs:
        out += design_violations(d, None, path)
    return out, min(margins, default=math.inf)

