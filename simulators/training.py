"""A training step on one device or a system of devices: step time, tokens/s, MFU and HFU,
memory per device by category, energy, cost, and the timeline.

The layers, each a function of the layout:

1. **Block costs.** Every block's forward and backward (recompute included) on one device of
   a layout (:func:`workloads.train_parallel.plan_training`) is simulated by the engine on
   the device's template; identical blocks are simulated once. Its tensor- and context-
   parallel collectives are costed on the system's topology for the group they run in and
   run in series with the compute (Megatron-LM issues them on the compute stream).
2. **ZeRO-3 / FSDP.** A block's weights are all-gathered before its forward and again before
   its backward, and its gradients reduce-scattered after it, on a communication stream that
   runs one block ahead (prefetch): a block starts when its compute stream is free and its
   weights have arrived.
3. **The pipeline schedule** (:mod:`simulators.pipeline`) plays the chunks' forward and
   backward times with point-to-point transfers between stages: the bubbles and the
   activations each stage holds come out of it.
4. **Data-parallel gradient reduction** (ZeRO 0-1): the gradients of the last micro-batch
   are all-reduced (ZeRO 1: and the optimizer's shards) in buckets of ``bucket_mb``, each
   issued when the backward has produced it, one after another on the communication stream,
   overlapped with the rest of the backward.
5. **Optimizer**: its kernels (:func:`workloads.train_step.optimizer_ops`) on the device's
   share of the parameters (``1 / dp`` with ZeRO >= 1), or on the host (offload: gradients
   down and weights up the PCIe link, CPU-Adam at the host's memory bandwidth, NVMe reads and
   writes of the states, pipelined block by block); ZeRO 1-2 then all-gather the updated
   weights.

Memory per device (:class:`TrainResult.memory`): weights, gradients, master weights and
optimizer states (sharded by ZeRO, moved by offload), activations (the schedule's peak of
kept tensors), workspace (the largest transient set of one micro-batch, ZeRO-3's gathered
blocks, DDP's bucket copies). A design whose memory does not hold it is infeasible, with the
numbers.

MFU is PaLM's (Chowdhery et al. 2022, app. B): the model's FLOPs per step (forward +
backward, attention counted in full as torch counts it, no recompute) over the step time and
the devices' dense peak at the compute precision; HFU counts every FLOP the devices run
(recompute, tensor-parallel replicated work).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from accelerators.base import Template
from accelerators.heterogeneous import sub_workload
from accelerators.host import Host, host_from
from dse.errors import BadInput, InfeasibleDesign
from simulators.engine import simulate as _simulate
from simulators.pipeline import F, run_schedule, schedule
from simulators.train_overheads import (OFF, Overheads, attention_factor, attention_factors,
                                        copy_s, overheads_in, overlap_s, slowed)
from simulators.economics import AMORTISATION_YEARS as LIFETIME_YEARS, USD_PER_KWH, YEAR_S as _YEAR_S
from workloads import ir
from workloads.gna import dense_equivalent
from workloads.ir import Op, Workload, op_signature
from workloads.train_parallel import (TrainLayout, TrainPlan, _segment_workload, plan_training,
                                      train_layout_from, workspace_bytes)
from workloads.train_step import (Optimizer, Precision, _rebuild, gemm_formatted,
                                  optimizer_from, optimizer_ops, params_by_layer, precision_from)
from workloads.training import BWD, FWD

#: Memory categories, in report order.
CATEGORIES = ("weights", "gradients", "master_weights", "optimizer_states", "activations",
              "workspace")


@dataclass
class TrainResult:
    """One training step (see the module docstring). Times in s, bytes in B, energy in J,
    money in US$. ``memory[stage]`` is one device of each pipeline stage by category;
    ``spans`` the timeline (device, stream, name, category, start, end)."""

    model: str
    layout: dict[str, Any]
    precision: dict[str, Any]
    optimizer: dict[str, Any]
    device: dict[str, Any]
    devices: int
    step_time_s: float
    tokens_per_step: int
    samples_per_step: int
    tokens_per_s: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_flops_per_device: float
    mfu: float
    hfu: float
    breakdown_s: dict[str, float]
    memory: list[dict[str, float]]
    memory_capacity_bytes: float                # stage 0's device
    host_memory_bytes: dict[str, float]
    energy_per_step_j: float
    avg_power_w: float
    system_cost_usd: float
    microbatches: int
    bubble_fraction: float
    spans: list[tuple[int, str, str, str, float, float]] = field(default_factory=list)
    train_tokens: float = 0.0
    lifetime_years: float = LIFETIME_YEARS
    usd_per_kwh: float = USD_PER_KWH
    stage_capacity_bytes: list[float] = field(default_factory=list)   # each stage's device

    @property
    def peak_memory_bytes(self) -> float:
        return max(sum(m.get(c, 0.0) for c in CATEGORIES) for m in self.memory)

    def capacity_of(self, stage: int) -> float:
        """Memory of a device of pipeline stage ``stage``, B (0: not modelled)."""
        caps = self.stage_capacity_bytes
        return caps[stage] if stage < len(caps) else self.memory_capacity_bytes

    @property
    def fits(self) -> bool:
        return all(not self.capacity_of(s) or sum(m.get(c, 0.0) for c in CATEGORIES)
                   <= self.capacity_of(s) for s, m in enumerate(self.memory))

    def to_train(self, tokens: float | None = None) -> dict[str, float]:
        """Time, energy and cost to train ``tokens`` (default ``train_tokens``): steps x step,
        energy per step x steps, the system's price amortised over ``lifetime_years`` of
        continuous use for that time plus the energy at ``usd_per_kwh``."""
        tokens = float(tokens if tokens is not None else self.train_tokens)
        if tokens <= 0 or self.tokens_per_step <= 0:
            return {}
        steps = math.ceil(tokens / self.tokens_per_step)
        time_s = steps * self.step_time_s
        energy = steps * self.energy_per_step_j
        cost = self.system_cost_usd * time_s / (self.lifetime_years * _YEAR_S) \
            + energy / 3.6e6 * self.usd_per_kwh
        return {"tokens": tokens, "steps": steps, "time_s": time_s, "time_days": time_s / 86400,
                "energy_j": energy, "energy_mwh": energy / 3.6e9, "cost_usd": cost,
                "device_hours": time_s * self.devices / 3600}

    def metrics(self) -> dict[str, float]:
        out = {"step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
               "mfu": self.mfu, "hfu": self.hfu, "peak_memory_bytes": self.peak_memory_bytes,
               "energy_per_step_j": self.energy_per_step_j, "cost_usd": self.system_cost_usd,
               "devices": float(self.devices)}
        train = self.to_train()
        if train:
            out.update({"train_time_s": train["time_s"], "train_time_days": train["time_days"],
                        "train_cost_usd": train["cost_usd"], "train_energy_j": train["energy_j"]})
        return out

    def to_dict(self, spans: bool = False) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "spans"}
        d["peak_memory_bytes"] = self.peak_memory_bytes
        d["fits"] = self.fits
        d["to_train"] = self.to_train()
        if spans:
            d["spans"] = [list(s) for s in self.spans]
        return d

    def to_chrome_trace(self) -> dict[str, Any]:
        """One process per pipeline stage (its first device), a thread per stream (compute,
        communication); bubbles are the compute stream's idle spans (category ``bubble``)."""
        events: list[dict[str, Any]] = []
        tids: dict[tuple[int, str], int] = {}
        for dev, stream, *_ in self.spans:
            if (dev, stream) not in tids:
                tids[(dev, stream)] = len([k for k in tids if k[0] == dev])
                if tids[(dev, stream)] == 0:
                    events.append({"name": "process_name", "ph": "M", "pid": dev, "tid": 0,
                                   "args": {"name": f"stage device {dev}"}})
                events.append({"name": "thread_name", "ph": "M", "pid": dev,
                               "tid": tids[(dev, stream)], "args": {"name": stream}})
        for dev, stream, name, cat, start, end in self.spans:
            events.append({"name": name, "cat": cat, "ph": "X", "pid": dev,
                           "tid": tids[(dev, stream)], "ts": start * 1e6,
                           "dur": max(end - start, 0.0) * 1e6})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"model": self.model, "layout": json.dumps(self.layout)}}


# ------------------------------------------------------------------------------ helpers
def peak_flops(design: Template, dtype: str, gemm: str | None = None) -> float:
    """The design's dense peak FLOP/s for ``dtype``: a GPU's datasheet peak, else the sum of
    its units' peaks (:meth:`Template.peaks`: every unit busy every cycle), at least the rate
    its cost model gives an 8192-cubed GEMM (that rate alone was the peak before, and a PIM's
    GEMVs beat it: HFU 1.43). With ``gemm`` (a precision's GEMM format) the higher of that
    and the GEMM format's peak, so MFU and HFU stay fractions of what the step's fastest
    datapath could do."""
    model = getattr(design, "model", None)
    if model is not None and hasattr(model, "peak"):
        peak = float(model.peak(dtype))
        if gemm is not None:
            from accelerators.gpu_formats import DATAPATH_OF, peaks
            from workloads.formats import get_format
            path = DATAPATH_OF.get(get_format(gemm).element_format.name, "")
            peak = max(peak, float(peaks(design.hw).get(path, 0.0)))
        return peak
    units = design.peaks(dtype)
    peak = max(_gemm_rate(design, _peak_gemm(dtype)),
               sum(units.flops_per_s.values()) if units is not None else 0.0)
    if gemm is not None:
        from workloads.formats import format_op, parse_formats
        fm = parse_formats({"weights": gemm, "activations": gemm}, dtype)
        peak = max(peak, _gemm_rate(design, format_op(_peak_gemm(dtype), fm, head=False)))
    return peak


def _peak_gemm(dtype: str) -> Op:
    n = 8192
    b = ir.DTYPE_BYTES[dtype]
    return Op(name="peak_gemm", kind=ir.MATMUL, target="mm", input_shapes=((n, n), (n, n)),
              output_shapes=((n, n),), dtype=dtype, bytes_per_element=b, flops=2 * n ** 3,
              weight_bytes=n * n * b, activation_bytes_read=n * n * b,
              activation_bytes_written=n * n * b,
              attrs={"m": n, "n": n, "k": n, "batch": 1, "weight_operand": True})


def _gemm_rate(design: Template, op: Op) -> float:
    """FLOP/s of ``op`` on ``design``: its FLOPs over its compute time (a GPU's datasheet
    peak of the op's datapath when its kernel model says so)."""
    cost = design.cost(op)
    return op.flops / (cost.compute_s if cost.compute_s > 0 else cost.latency_s)


#: Segment costs remembered across steps (a study simulates the same blocks on the same
#: device preset for many layouts), entries.
_COST_MEMO_SIZE = 8192
_COST_MEMO: "OrderedDict[tuple, tuple[float, float]]" = OrderedDict()


class _Costs:
    """Compute costs of segment graphs on one design (memoised by the design's parameters and
    the segment's op signatures and edges)."""

    def __init__(self, design: Template):
        self.design = design
        self._design_key = json.dumps([type(design).__name__, dict(design.hw)],
                                      sort_keys=True, default=str)
        self._attention = attention_factors(design)

    def __call__(self, w: Workload) -> tuple[float, float]:
        """(latency_s, dynamic energy_j) of ``w`` on the design."""
        if not len(w):
            return 0.0, 0.0
        key = (self._design_key, tuple(op_signature(op) for op in w.ops),
               tuple(sorted((w.graph.nodes[u]["index"], w.graph.nodes[v]["index"])
                            for u, v in w.graph.edges)))
        hit = _COST_MEMO.get(key)
        if hit is None:
            planned = self.design.plan(w if self.design.SPARSE_ATTENTION else dense_equivalent(w))
            costs = self.design.costs(planned)
            if self._attention:                 # measured: fused attention in training
                costs = [_scaled_cost(c, attention_factor(op, self._attention))
                         for op, c in zip(planned.ops, costs)]
            r = _simulate(planned, self.design, costs)
            dynamic = r.energy_j - r.energy_breakdown_j.get("static", 0.0)
            hit = _COST_MEMO[key] = (r.latency_s, dynamic)
            while len(_COST_MEMO) > _COST_MEMO_SIZE:
                _COST_MEMO.popitem(last=False)
        return hit


def _scaled_cost(c, factor: float):
    """``c`` taking ``factor`` times as long (>= 1: only ever slower)."""
    if factor <= 1.0:
        return c
    return replace(c, latency_s=c.latency_s * factor, compute_s=c.compute_s * factor)


def _overlapped(compute: list[float], gather: list[float], scatter: list[float],
                terms: Overheads = OFF, host: list[float] | None = None) -> float:
    """Time of blocks run in order on a compute stream while a communication stream gathers
    each block's weights one block ahead (``gather[i]`` before block ``i``) and
    reduce-scatters its gradients after it (``scatter[i]``), in issue order. A block runs
    slower while a collective overlaps it (``terms``, :func:`~simulators.train_overheads.
    slowed`) and starts no earlier than the host has issued it (``host[i]``: the host's time
    for block ``i``, accumulated)."""
    comm_free = 0.0
    t = host_t = 0.0
    ready = [0.0] * len(compute)
    busy: list[tuple[float, float, str]] = []
    if compute:
        comm_free = gather[0]
        ready[0] = comm_free
        busy.append((0.0, comm_free, "all_gather"))
    for i, c in enumerate(compute):
        host_t += host[i] if host else 0.0
        start = max(t, ready[i], host_t)
        if i + 1 < len(compute):            # prefetch the next block's weights now
            g0 = max(comm_free, start)
            comm_free = g0 + gather[i + 1]
            ready[i + 1] = comm_free
            busy.append((g0, comm_free, "all_gather"))
        t = start + slowed(c, overlap_s(busy, start, start + c), terms)
        if scatter[i]:
            s0 = max(comm_free, t)
            comm_free = s0 + scatter[i]
            busy.append((s0, comm_free, "reduce_scatter"))
    return max(t, comm_free)


# ------------------------------------------------------------------------------ the step
def simulate_training(joint: Workload, system, layout: TrainLayout | dict | None = None,
                      precision: Precision | str | dict | None = None,
                      optimizer: Optimizer | str | None = None, optimizer_impl: str | None = None,
                      host: Host | str | dict | None = None, accumulate: str = "add",
                      train_tokens: float = 0.0, check: bool = True) -> TrainResult:
    """One training step of ``joint`` (a captured train workload at ``batch = micro_batch``)
    on ``system`` (an :class:`~accelerators.system.System`, or one :class:`Template` for a
    single device) under ``layout``. :class:`InfeasibleDesign` when the layout cannot split
    the model or (``check``) a device's memory does not hold its share."""
    from accelerators.system import System
    lay = train_layout_from(layout, micro_batch=joint.batch) if not isinstance(
        layout, TrainLayout) else layout
    prec = precision_from(precision)
    opt = optimizer_from(optimizer, optimizer_impl)
    if accumulate not in ("add", "fused"):
        raise BadInput("accumulate", accumulate, "expected add or fused")
    if isinstance(system, Template):
        if lay.devices != 1:
            raise BadInput("parallel", lay.devices, "a layout of one device on one design "
                           "(give a system for more)")
        sysm = None
        design = system
    else:
        if not isinstance(system, System):
            raise BadInput("system", type(system).__name__, "a System or a design")
        sysm = system
        design = system.device(0)
        if lay.devices != system.devices:
            raise BadInput("parallel", f"dp x pp x cp x tp = {lay.devices}",
                           f"expected the product to equal the system's {system.devices} devices")
    node = host_from(host, default="ddr4-pcie4" if "a100" in str(
        design.describe().get("preset", "")).lower() else "ddr5-pcie5")
    for what in ("offload_optimizer", "offload_params"):
        if getattr(lay, what) == "nvme" and node.nvme_drives == 0:
            raise BadInput(f"parallel.{what}", "nvme", f"a host with NVMe drives (host "
                           f"{node.name} has none: give host: ddr5-pcie5-nvme or "
                           "host.nvme_drives)")
    plan = plan_training(gemm_formatted(joint, prec.gemm), lay)
    r = _run(plan, sysm, design, prec, opt, node, accumulate, float(train_tokens))
    if check:
        check_memory(r, node)
    return r


def stage_designs(lay: TrainLayout, sysm, design: Template) -> list[Template]:
    """The design of each pipeline stage's devices (``design`` on one device). A stage's
    data-, tensor- and context-parallel ranks run in lockstep, so a system whose devices of
    one stage differ is a :class:`BadInput`; stages may differ (a heterogeneous pipeline)."""
    if sysm is None:
        return [design]
    out = []
    for s in range(lay.pp):
        ranks = [lay.rank(dp=d, pp=s, cp=c, tp=t) for d in range(lay.dp)
                 for c in range(lay.cp) for t in range(lay.tp)]
        first = sysm.device(ranks[0])
        for r in ranks[1:]:
            other = sysm.device(r)
            if other is not first and (type(other) is not type(first)
                                       or dict(other.hw) != dict(first.hw)):
                raise BadInput("system", f"device {ranks[0]} {first.name}:{first.preset} and "
                               f"device {r} {other.name}:{other.preset}",
                               f"alike devices within pipeline stage {s} (its data-, tensor- "
                               "and context-parallel ranks run in lockstep); stages may differ")
        out.append(first)
    return out


def _coll(sysm, kind: str, nbytes: float, group: list[int]) -> tuple[float, float]:
    """(time s, energy J) of one collective on ``sysm`` (memoised per system)."""
    if sysm is None or len(group) < 2 or nbytes <= 0:
        return 0.0, 0.0
    memo = sysm.__dict__.setdefault("_train_collectives", {})
    key = (kind, float(nbytes), tuple(group))
    hit = memo.get(key)
    if hit is None:
        c = sysm.collective(kind, nbytes, group)
        hit = memo[key] = (c.time_s, c.energy_j)
    return hit


def _run(plan: TrainPlan, sysm, design: Template, prec: Precision, opt: Optimizer,
         node: Host, accumulate: str, train_tokens: float) -> TrainResult:
    lay = plan.layout
    m = plan.microbatches
    designs = stage_designs(lay, sysm, design)
    # the largest block's graph alone, weights its own (a segment's graph carries the whole
    # model's parameter count; the step's memory is check_memory's)
    largest = max(plan.segments.values(), key=lambda seg: len(seg.compute), default=None)
    block = sub_workload(largest.compute, [op.name for op in largest.compute.ops]) \
        if largest is not None and len(largest.compute) else None
    by_design: dict[int, _Costs] = {}
    for d in designs:
        if id(d) in by_design:
            continue
        problem = d.check(block) if block is not None else None
        if problem:       # what the engine refuses (a design that cannot be built, ...)
            raise InfeasibleDesign(problem)
        by_design[id(d)] = _Costs(d)
    costs = [by_design[id(d)] for d in designs]
    seg_t, energy = _block_times(plan, sysm, costs)
    terms = overheads_in(sysm, lay.group("dpcp", pp=0))
    chunk_f, chunk_b = _chunk_times(plan, sysm, seg_t, prec, energy, designs, terms)
    p2p_t = _coll(sysm, "send_recv", plan.p2p_bytes, [lay.rank(pp=0), lay.rank(pp=1)])[0] \
        if lay.pp > 1 else 0.0
    kind = lay.schedule if lay.pp > 1 or lay.chunks > 1 else "1f1b"
    saved_chunk = [sum(plan.saved_bytes.get(layer, 0.0) for layer in blocks)
                   for blocks in plan.chunks]
    run = run_schedule(schedule(kind, lay.pp, m, lay.chunks),
                       lambda t: chunk_f[t[2]] if t[0] == F else chunk_b[t[2]],
                       lambda t: p2p_t, len(plan.chunks), lambda c: saved_chunk[c])
    spans = _compute_spans(plan, run)
    finish, exposed = _reduce_gradients(plan, sysm, run, seg_t, prec.bytes_of("gradients"),
                                        spans, energy, terms)
    opt_t, ag_t = _optimizer_step(plan, sysm, designs, costs, prec, opt, node, accumulate,
                                  finish, energy)
    step_ends = [finish[s] + opt_t[s] + ag_t[s] for s in range(lay.pp)]
    step = max(step_ends)
    for s in range(lay.pp):
        dev = lay.rank(pp=s)
        spans.append((dev, "compute", "optimizer", "optimizer", finish[s], finish[s] + opt_t[s]))
        if ag_t[s]:
            spans.append((dev, "communication", "all_gather weights", "dp",
                          finish[s] + opt_t[s], step_ends[s]))
    shard = lay.dp * lay.cp if lay.zero >= 1 else 1
    memory = [_memory(plan, s, prec, opt, run.peak_in_flight[s], shard) for s in range(lay.pp)]
    devices = lay.devices
    offloaded = lay.offload_optimizer != "none" or lay.offload_params != "none"
    nodes = math.ceil(devices / node.devices_per_node)
    static_w = sysm.physical().static_w if sysm is not None else design.static_power_w()
    static_w += node.power_w() * nodes if offloaded else 0.0
    total = sum(energy) * lay.tp * lay.cp * lay.dp + static_w * step
    phys = sysm.physical() if sysm is not None else design.physical()
    cost = (phys.cost_usd if phys is not None else float("nan")) + (
        node.cost_usd() * nodes if offloaded else 0.0)
    model_flops = float(plan.model_flops * m * lay.dp)
    hw_flops = float(plan.device_flops() * lay.tp * lay.cp * lay.dp)
    per_stage = lay.tp * lay.cp * lay.dp
    peak = sum(peak_flops(d, prec.activations, prec.gemm) for d in designs) * per_stage \
        / devices
    tokens = lay.batch * max(plan.joint.seq, 1)
    busy = max(run.busy_s) if run.busy_s else 0.0
    breakdown = {"compute_s": busy, "bubble_s": max(run.end_s - busy, 0.0),
                 "exposed_communication_s": max(exposed), "optimizer_s": max(opt_t),
                 "weight_all_gather_s": max(ag_t), "p2p_per_transfer_s": p2p_t}
    return TrainResult(
        model=plan.joint.model, layout=lay.to_dict(), precision=prec.to_dict(),
        optimizer=opt.to_dict(), device=design.describe(), devices=devices, step_time_s=step,
        tokens_per_step=tokens, samples_per_step=lay.batch, tokens_per_s=tokens / step,
        model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops,
        peak_flops_per_device=peak, mfu=model_flops / step / (devices * peak),
        hfu=hw_flops / step / (devices * peak), breakdown_s=breakdown, memory=memory,
        memory_capacity_bytes=float(design.memory_capacity_bytes() or 0.0),
        stage_capacity_bytes=[float(d.memory_capacity_bytes() or 0.0) for d in designs],
        host_memory_bytes=_host_bytes(plan, prec, opt, shard, node), energy_per_step_j=total,
        avg_power_w=total / step, system_cost_usd=cost, microbatches=m,
        bubble_fraction=(run.end_s - busy) / run.end_s if run.end_s else 0.0, spans=spans,
        train_tokens=train_tokens)


def _block_times(plan: TrainPlan, sysm, costs: list[_Costs]
                 ) -> tuple[dict[tuple[int, str, int], float], list[float]]:
    """Each block's forward and backward time on one device of its stage (compute by the
    engine on the stage's design, ``costs[stage]``, then its tensor / context-parallel
    collectives in series), and the dynamic energy of one micro-batch per device of each
    stage, J."""
    lay = plan.layout
    seg_t: dict[tuple[int, str, int], float] = {}
    energy = [0.0] * lay.pp
    seen: dict[tuple[int, int], tuple[float, float]] = {}
    for layer in range(-1, plan.layers + 1):
        stage = plan.stage_of_chunk(plan.chunk_of(layer))
        for p in (FWD, BWD):
            seg = plan.segment(layer, p)
            if seg is None:
                continue
            key = (id(seg), stage)
            if key not in seen:
                lat, dyn = costs[stage](seg.compute)
                for kind, nbytes, group in seg.collectives:
                    ranks = lay.group("tp" if group == "tp" else "cp", pp=stage)
                    t, e = _coll(sysm, kind, nbytes, ranks)
                    lat += t
                    dyn += e / max(len(ranks), 1)
                seen[key] = (lat, dyn)
            seg_t[(layer, p, stage)] = seen[key][0]
            energy[stage] += seen[key][1] * plan.microbatches
    return seg_t, energy


def _chunk_times(plan: TrainPlan, sysm, seg_t, prec: Precision, energy: list[float],
                 designs: list[Template], terms: Overheads = OFF
                 ) -> tuple[list[float], list[float]]:
    """Forward and backward time of each model chunk for one micro-batch: its blocks in
    order, with ZeRO-3's weight gathers and ZeRO-2/3's gradient reduce-scatters on the
    communication stream, one block ahead (:func:`_overlapped`). FSDP2's copies
    (:mod:`simulators.train_overheads`): each gather's copy-in of the shard before it and
    copy-out of the gathered weights on the compute stream before the block, each
    reduce-scatter's copy-in of the gradients before it; its hooks' host time (ZeRO-3: the
    root's per step, each unit's and its tensors', split between forward and backward) and
    the collectives' slow-down of the compute they overlap. Adds their energy."""
    lay = plan.layout
    zero3 = lay.zero == 3 and lay.dp * lay.cp > 1
    per_block = zero3 or (lay.zero == 2 and lay.dp * lay.cp > 1)
    tensors = params_by_layer(plan.joint, tensors=True) if zero3 else {}
    chunk_f, chunk_b = [], []
    for c, blocks in enumerate(plan.chunks):
        s = plan.stage_of_chunk(c)
        f = [seg_t.get((layer, FWD, s), 0.0) for layer in blocks]
        b = [seg_t.get((layer, BWD, s), 0.0) for layer in reversed(blocks)]
        if not per_block:
            chunk_f.append(sum(f))
            chunk_b.append(sum(b))
            continue
        group = lay.group("dpcp", pp=s)
        gat, rs, out_t, host = [], [], [], []
        for layer in blocks:
            n = plan.params.get(layer, 0.0)
            wbytes, gbytes = n * prec.bytes_of("weights"), n * prec.bytes_of("gradients")
            tg, eg = _coll(sysm, "all_gather", wbytes, group) if zero3 else (0.0, 0.0)
            tr, er = _coll(sysm, "reduce_scatter", gbytes, group)
            if zero3 and tg:
                tg += copy_s(designs[s], wbytes / len(group), prec.weights)
                out_t.append(copy_s(designs[s], wbytes, prec.weights))
            else:
                out_t.append(0.0)
            if tr:
                tr += copy_s(designs[s], gbytes, prec.gradients)
            gat.append(tg * terms.comm("all_gather"))
            rs.append(tr * terms.comm("reduce_scatter"))
            host.append(terms.unit_host_s(tensors.get(layer, 0.0), layer != plan.layers)
                        if zero3 and n else 0.0)
            energy[s] += (2 * eg + er) * plan.microbatches / len(group)
        f = [x + o for x, o in zip(f, out_t)]
        b = [x + o for x, o in zip(b, out_t[::-1])]
        share = terms.fsdp_forward_share
        host_f = [h * share for h in host]
        host_b = [h * (1.0 - share) for h in host[::-1]]
        if zero3 and c == 0:               # the root's hooks: before the first block's
            host_f[0] += terms.fsdp_step_host_s * share
        if zero3 and c == len(plan.chunks) - 1:
            host_b[0] += terms.fsdp_step_host_s * (1.0 - share)
        chunk_f.append(_overlapped(f, gat, [0.0] * len(f), terms, host_f))
        chunk_b.append(_overlapped(b, gat[::-1], rs[::-1], terms, host_b))
    return chunk_f, chunk_b


def _compute_spans(plan: TrainPlan, run) -> list[tuple[int, str, str, str, float, float]]:
    """The played schedule as timeline spans, idle gaps as bubbles."""
    spans = []
    for s, sp in enumerate(run.spans):
        dev = plan.layout.rank(pp=s)
        prev = 0.0
        for (k, mb, c), b0, e0 in sp:
            if b0 > prev + 1e-12:
                spans.append((dev, "compute", "bubble", "bubble", prev, b0))
            spans.append((dev, "compute", f"{k}{mb} chunk{c}",
                          "forward" if k == F else "backward", b0, e0))
            prev = e0
    return spans


def _reduce_gradients(plan: TrainPlan, sysm, run, seg_t, grad_bytes: float, spans: list,
                      energy: list[float], terms: Overheads = OFF
                      ) -> tuple[list[float], list[float]]:
    """ZeRO 0-1's data-parallel gradient reduction, per stage: buckets of ``bucket_mb``
    filled block by block as the last micro-batch's backward produces them (or all at its
    end without overlap), reduced one after another on the communication stream. The
    buckets slow the backward they overlap and are slowed by it (``terms``): the backward
    is stretched by the extra time of its overlapped seconds and the buckets replayed on
    the stretched backward. Returns when each stage is done, and how much of it the
    backward did not hide."""
    lay = plan.layout
    finish, exposed = [], []
    for s in range(lay.pp):
        compute_end = max((e for _, _, e in run.spans[s]), default=0.0)
        group = lay.group("dpcp", pp=s)
        comm_free = compute_end
        if lay.zero <= 1 and len(group) > 1:
            kind = "all_reduce" if lay.zero == 0 else "reduce_scatter"
            chunks = sorted((c for c in range(len(plan.chunks)) if plan.stage_of_chunk(c) == s),
                            key=lambda c: run.last_backward.get(c, (0.0, 0.0))[1])
            comm_free, busy, _ = _play_buckets(plan, run, seg_t, grad_bytes, s, chunks,
                                               compute_end, kind, group, sysm, terms, 0.0)
            bwd = [run.last_backward.get(c, (compute_end, compute_end)) for c in chunks]
            window = sum(e0 - b0 for b0, e0 in bwd)
            over = sum(sum(overlap_s(busy, b0, e0).values()) for b0, e0 in bwd)
            extra = slowed(window, {kind: over}, terms) - window
            if extra > 0:
                compute_end += extra
            comm_free, busy, sizes = _play_buckets(plan, run, seg_t, grad_bytes, s, chunks,
                                                   compute_end, kind, group, sysm, terms,
                                                   extra)
            dev = lay.rank(pp=s)
            for (b0, b1, _), nbytes in zip(busy, sizes):
                spans.append((dev, "communication", f"{kind} {nbytes / 1e6:.0f} MB", "dp",
                              b0, b1))
                energy[s] += _coll(sysm, kind, nbytes, group)[1] / len(group)
        end = max(compute_end, comm_free)
        exposed.append(end - compute_end)
        finish.append(end)
    return finish, exposed


def _play_buckets(plan: TrainPlan, run, seg_t, grad_bytes: float, s: int, chunks: list[int],
                  compute_end: float, kind: str, group: list[int], sysm, terms: Overheads,
                  stretch_s: float
                  ) -> tuple[float, list[tuple[float, float, str]], list[float]]:
    """The buckets of stage ``s`` on the communication stream: each issued when the last
    backward has produced it (that backward ``stretch_s`` longer, spread over its blocks),
    slowed while it overlaps compute. Returns when the stream is free, its busy spans and the
    buckets' bytes."""
    lay = plan.layout
    comm_free, pending, ready_at = 0.0, 0.0, 0.0
    busy: list[tuple[float, float, str]] = []
    sizes: list[float] = []
    total_all = sum(e0 - b0 for b0, e0 in (run.last_backward.get(c, (0.0, 0.0))
                                           for c in chunks)) or 1.0
    shift = 0.0

    def flush(nbytes: float, at: float, free: float) -> float:
        t = _coll(sysm, kind, nbytes, group)[0]
        start = max(free, at)
        if start < compute_end:
            t *= terms.comm(kind)
        busy.append((start, start + t, kind))
        sizes.append(nbytes)
        return start + t
    for c in chunks:
        b0, e0 = run.last_backward.get(c, (compute_end, compute_end))
        grow = stretch_s * (e0 - b0) / total_all
        b0, e0 = b0 + shift, e0 + shift + grow
        shift += grow
        blocks = list(reversed(plan.chunks[c]))
        times = [seg_t.get((layer, BWD, s), 0.0) for layer in blocks]
        total, acc = sum(times) or 1.0, 0.0
        for layer, t in zip(blocks, times):
            acc += t
            ready_at = b0 + (e0 - b0) * acc / total if lay.overlap_grad_reduce \
                else compute_end
            pending += plan.params.get(layer, 0.0) * grad_bytes
            if pending >= lay.bucket_mb * 1e6:
                comm_free, pending = flush(pending, ready_at, comm_free), 0.0
    if pending > 0:
        comm_free = flush(pending, ready_at, comm_free)
    return comm_free, busy, sizes


def _optimizer_step(plan: TrainPlan, sysm, designs: list[Template], costs: list[_Costs],
                    prec: Precision, opt: Optimizer, node: Host, accumulate: str,
                    finish: list[float], energy: list[float]) -> tuple[list[float], list[float]]:
    """Per stage (on its design, ``designs[s]`` / ``costs[s]``): the optimizer's time (its
    kernels on the device's ``1 / shard`` of the
    parameters, or the host's step when offloaded) and ZeRO 1-2's all-gather of the
    updated weights; ``.grad`` accumulation adds (``accumulate: add``) extend ``finish``."""
    lay = plan.layout
    m = plan.microbatches
    shard = lay.dp * lay.cp if lay.zero >= 1 else 1
    gbytes = prec.bytes_of("gradients")
    opt_t, ag_t = [0.0] * lay.pp, [0.0] * lay.pp
    for s in range(lay.pp):
        per_block = {layer: plan.params.get(layer, 0.0) / shard
                     for c in range(len(plan.chunks)) if plan.stage_of_chunk(c) == s
                     for layer in plan.chunks[c]}
        n_stage = sum(per_block.values()) * shard
        if lay.offload_optimizer == "none":
            ops = optimizer_ops(plan.joint, opt, prec, {k: int(v) for k, v in per_block.items()})
            if ops:
                t, e = costs[s](_rebuild(plan.joint, ops, []))
                opt_t[s] = t
                energy[s] += e
        else:
            opt_t[s] = _offloaded_step(sum(per_block.values()), prec, opt, node, lay,
                                       len(per_block))
        group = lay.group("dpcp", pp=s)
        if 1 <= lay.zero <= 2 and shard > 1:
            ag_t[s], e = _coll(sysm, "all_gather", n_stage * prec.bytes_of("weights"), group)
            energy[s] += e / len(group)
        if accumulate == "add" and m > 1:    # .grad += the gradients of each extra micro-batch
            n = int(n_stage)
            add = Op(name="grad_acc", kind=ir.ELEMENTWISE, target="add_",
                     input_shapes=((n,), (n,)), output_shapes=((n,),), dtype=prec.gradients,
                     bytes_per_element=int(gbytes), flops=n,
                     activation_bytes_read=int(2 * gbytes * n),
                     activation_bytes_written=int(gbytes * n), attrs={"elements": n})
            finish[s] += designs[s].cost(add).latency_s * (m - 1)
    return opt_t, ag_t


def _offloaded_step(n: float, prec: Precision, opt: Optimizer, node: Host, lay: TrainLayout,
                    blocks: int) -> float:
    """The optimizer step of ``n`` parameters on the host: gradients down and weights up one
    PCIe link, CPU-Adam over the node's memory bandwidth shared by its devices, NVMe reads and
    writes of the states; the stages pipelined over ``blocks``."""
    share = node.devices_per_node
    down = n * prec.bytes_of("gradients") / node.pcie_Bps
    up = n * prec.bytes_of("weights") / node.pcie_Bps
    fp32 = 4.0
    cpu_bytes = n * (fp32 * 2 + opt.states * fp32 * 2 + prec.bytes_of("gradients"))
    cpu = cpu_bytes / (node.dram_Bps * node.cpu_adam_efficiency / share)
    stages = [down, cpu, up]
    if lay.offload_optimizer == "nvme":
        states = n * fp32 * (opt.states + 1)
        drives = max(node.nvme_drives, 1) / share
        stages += [states / (node.nvme_read_Bps * drives), states / (node.nvme_write_Bps * drives)]
    k = max(blocks, 1)
    return max(stages) + (sum(stages) - max(stages)) / k


def _memory(plan: TrainPlan, stage: int, prec: Precision, opt: Optimizer, activations: float,
            shard: int) -> dict[str, float]:
    lay = plan.layout
    chunks = [c for c in range(len(plan.chunks)) if plan.stage_of_chunk(c) == stage]
    layers = [layer for c in chunks for layer in plan.chunks[c]]
    n = sum(plan.params.get(layer, 0.0) for layer in layers)
    biggest = max((plan.params.get(layer, 0.0) for layer in layers), default=0.0)
    wb, gb = prec.bytes_of("weights"), prec.bytes_of("gradients")
    zero3 = lay.zero == 3
    out = {"weights": n * wb / (shard if zero3 else 1),
           "gradients": n * gb / (shard if lay.zero >= 2 else 1),
           "master_weights": n * prec.bytes_of("master_weights") / shard,
           "optimizer_states": n * opt.states * prec.bytes_of("optimizer_states") / shard,
           "activations": activations}
    if lay.offload_optimizer != "none":
        out["master_weights"] = out["optimizer_states"] = 0.0
    if lay.offload_params != "none":
        out["weights"] = 0.0
    ws = max((_chunk_workspace(plan, c) for c in chunks), default=0.0)
    if zero3:
        ws += 2 * biggest * wb                 # the gathered block and the prefetched one
    if lay.zero == 0 and lay.dp * lay.cp > 1:
        ws += n * gb                           # DDP's bucket copies of the gradients
    out["workspace"] = ws
    return out


def _chunk_workspace(plan: TrainPlan, chunk: int) -> float:
    """Transient peak of one micro-batch of one model chunk: the largest of its blocks' own
    (blocks run one after another; what passes between them is a kept activation)."""
    from workloads.training import source_layer
    cache = plan.__dict__.setdefault("_workspace", {})
    out = 0.0
    for block in {source_layer(plan.joint, layer) for layer in plan.chunks[chunk]}:
        if block not in cache:
            cache[block] = workspace_bytes(_segment_workload(plan.device_graph, [
                op.name for op in plan.device_graph.ops if op.attrs.get("layer") == block]))
        out = max(out, cache[block])
    return out


def _host_bytes(plan: TrainPlan, prec: Precision, opt: Optimizer, shard: int, node: Host
                ) -> dict[str, float]:
    lay = plan.layout
    if lay.offload_optimizer == "none" and lay.offload_params == "none":
        return {}
    per_device = max(sum(plan.params.get(layer, 0.0) for c in range(len(plan.chunks))
                         if plan.stage_of_chunk(c) == s for layer in plan.chunks[c])
                     for s in range(lay.pp)) / shard
    out: dict[str, float] = {}
    states = per_device * (opt.states * prec.bytes_of("optimizer_states")
                           + prec.bytes_of("master_weights"))
    if lay.offload_optimizer != "none":
        out[lay.offload_optimizer] = out.get(lay.offload_optimizer, 0.0) + states
    if lay.offload_params != "none":
        out[lay.offload_params] = out.get(lay.offload_params, 0.0) + per_device * prec.bytes_of(
            "weights")
    out = {k: v * node.devices_per_node for k, v in out.items()}   # per node
    return out


def check_memory(r: TrainResult, host: Host | None = None) -> None:
    """Raise :class:`InfeasibleDesign` naming the numbers when a device's (or the host's)
    memory does not hold the step."""
    if not r.fits:
        stage = max(range(len(r.memory)), key=lambda s: sum(r.memory[s].values())
                    - (r.capacity_of(s) or math.inf))
        worst = r.memory[stage]
        parts = ", ".join(f"{k} {v / 1e9:.3g} GB" for k, v in worst.items() if v)
        raise InfeasibleDesign(f"a device needs {sum(worst.values()) / 1e9:.3g} GB ({parts}) "
                               f"but holds {r.capacity_of(stage) / 1e9:.3g} GB")
    if host is not None:
        for where, need in r.host_memory_bytes.items():
            have = host.dram_bytes if where == "host" else host.nvme_bytes * host.nvme_drives
            if need > have:
                raise InfeasibleDesign(f"offload to {where} needs {need / 1e9:.3g} GB per node "
                                       f"but the node holds {have / 1e9:.3g} GB")
