"""``npu_pim``: NeuPIMs, an NPU beside HBM-PIM for batched LLM decode (Heo et al., ASPLOS 2024).

* GEMMs (QKV, projections, FFN, LM head) and the vector work (norms, activations, softmax, KV
  appends) run on the NPU (an :class:`accelerators.npu.NPU`; units ``array`` and ``vector``),
  whose DRAM traffic crosses the PIM's own channels (channel ``dram``: channels x the HBM2
  channel bandwidth).
* Decode attention (one query per request) runs on the PIM: every request's KV cache lives in
  one channel (32 banks; keys one token per bank, values one head dimension per bank, NeuPIMs'
  layout), and each channel runs its requests' Q.K^T and P.V GEMVs one after another
  (:mod:`accelerators.dram_timing`); a PIM attention op lasts as long as its busiest channel. Softmax in between runs on the NPU's
  vector unit (:meth:`NeuPIMs.plan` splits each attention op in three). Attention with more
  than one query per request (a prompt's, GEMM-shaped) runs on the NPU, as NeuPIMs'
  simulator runs the "initiation phase" [R casys-kaist/NeuPIMs
  src/operations/NeuPIMSLogitSoftmax.cc: ``query->get_dims()[1] != 1`` is "computed in NPU"].

Options the paper compares:

* ``row_buffers`` 1 ("blocked" PIM, as Newton / HBM-PIM): while the PIM computes, the banks
  cannot serve the NPU. A PIM op then occupies the ``dram`` channel for its whole duration
  (its cost moves ``latency x bandwidth`` bytes there), so the simulator time-shares the
  channel between PIM compute and NPU transfers; and each GWRITE pass must open the input
  vector's row in the banks' only row buffer and close it before the tiles (tRCD + tRP,
  :func:`accelerators.dram_timing.row_switch_cycles`). With 2 (dual row buffers) PIM compute
  leaves the channel free except for its GWRITE / RDRESULT bytes and the vector's row sits in
  the MEM buffer. The NPU's own row activations during PIM tiles are not charged: a tile's
  ACT phase takes 8 of the ~24 activations tFAW allows a rank in its ~180 cycles, and the NPU
  streaming 1 KB rows needs about 6 (one per 32 cycles).
* ``sub_batch_interleaving`` (from ``sub_batch_min_requests`` requests on; the ``neupims``
  preset from 256, as NeuPIMs' repository): :meth:`NeuPIMs.plan` splits the batch into two sub-batches of
  equal size and near-equal PIM work, each spread over all channels, and runs two copies of the
  step graph; the simulator overlaps one sub-batch's GEMMs on the NPU with the other's
  attention on the PIM (one op at a time per unit, so the overlap comes from the contention
  model). Each copy reads the weights again, as two sub-batches do.
* ``load_balancing``: ``greedy`` assigns requests, longest first, to the channel with the least
  estimated PIM load (NeuPIMs' algorithm); ``round_robin`` assigns request i to channel i mod C.

Two more options: ``attention_on`` "npu" gives the paper's NPU-only baseline (the same NPU and
channels of plain HBM2: no PIM lanes or second row buffer to pay for, attention on the NPU);
``npu_weight_double_buffering`` (default on) costs
weight-stationary GEMMs with the next fold's weights shifted in while the current fold streams,
as NeuPIMs' own NPU model issues them, instead of the ``npu`` template's serial SCALE-Sim folds
(:func:`double_buffered_cycles`).

Requests with different context lengths come from :func:`workloads.requests.batched_decode`
(attention attribute ``kv_lens``); a plain decode workload is a batch of equal lengths.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from accelerators import dram_timing as dt, mac_formats
from accelerators import technology as tech
from accelerators.base import OpCost, Param, Peaks, Resources, Template
from accelerators.composite import chain_costs, cost_composite
from accelerators.npu import NPU, PRESETS as NPU_PRESETS, PARAMS as NPU_PARAMS
from accelerators.npu import VECTOR_OPS_PER_ELEMENT
from accelerators.physical import Floorplan
from accelerators.pim import (GIB, PART, attend_gemv, attention_dims, attention_parts,
                              bank_params, bank_problem, capacity_problem, dequant_macs,
                              geometry, logits_gemv, op_geometry, pim_logic, pim_memory,
                              pim_peak_w, pim_peaks, PimLogic, split_attention, timing_of,
                              timing_params)
from dse.errors import DSEError, InfeasibleDesign
from workloads import ir
from workloads.ir import Op, Workload
from workloads.requests import KV_LENS, attention_kv_lens, rebuild, split_batch

#: Attention-op attribute set by :meth:`NeuPIMs.plan`: the channel of each batch item.
KV_CHANNELS = "kv_channels"

#: NPU parameters NeuPIMs takes over; ``dram_bandwidth_Bps`` and ``dram`` follow from the PIM.
_NPU_KEYS = tuple(p.name for p in NPU_PARAMS
                  if p.name not in ("dram_bandwidth_Bps", "dram", "dram_devices", "dram_device_gb"))
_NPU_DEFAULTS = {k: v for k, v in NPU_PRESETS["neupims-npu"].items() if k in _NPU_KEYS}

PARAMS = (
    *(Param(p.name, p.type, p.unit, _NPU_DEFAULTS.get(p.name, p.default), "NPU: " + p.description,
            p.low, p.high, p.choices, p.log, p.step) for p in NPU_PARAMS if p.name in _NPU_KEYS),
    *bank_params(channels=32, ranks=2, banks=32, macs=16, page=1024, buffer=1024, dot=2,
                 capacity_gib=1.0),
    Param("pim_clock_hz", float, "Hz", 1.0e9, "PIM / HBM clock (timings are in its cycles)",
          1.0e8, 4.0e9, log=True),
    *timing_params(dt.HBM2),
    Param("pim_node_nm", int, "nm", 45, "logic-equivalent node of the in-DRAM MAC units",
          choices=tech.NODES_NM),
    Param("npu_weight_double_buffering", bool, "", True, "WS arrays shift the next fold's "
          "weights in while the current fold streams (a fold takes max(rows streamed, array "
          "rows) cycles; fill and drain once per op) instead of SCALE-Sim's serial folds"),
    Param("attention_on", str, "", "pim", "where decode attention runs: pim, or npu (the "
          "NPU-only baseline: the same NPU and channels of plain HBM2, no PIM logic)",
          choices=("pim", "npu")),
    Param("row_buffers", int, "", 2, "row buffers per bank: 1 = blocked PIM (NPU memory access "
          "and PIM compute exclude each other), 2 = NeuPIMs' dual row buffers", choices=(1, 2)),
    Param("sub_batch_interleaving", bool, "", True, "split the batch into two pipelined "
          "sub-batches (NPU GEMMs of one overlap PIM attention of the other)"),
    Param("sub_batch_min_requests", int, "requests", 2, "interleave only batches of at least "
          "this many requests (NeuPIMs: 256)", 2, 1 << 20, log=True),
    Param("load_balancing", str, "", "greedy", "request-to-channel assignment",
          choices=("greedy", "round_robin")),
)

#: Request mixes whose channel loads are kept per design [E: a step graph's layers share one;
#: a serving run makes a new mix every iteration, so the memo is cleared when full].
CHANNEL_MEMO_ENTRIES = 4096

_BASE = dict(row_buffers=2, sub_batch_interleaving=True, load_balancing="greedy",
             sub_batch_min_requests=2)
_NAIVE = dict(_BASE, row_buffers=1, sub_batch_interleaving=False, load_balancing="round_robin")
PRESETS: dict[str, dict[str, Any]] = {
    # NeuPIMs as published: NPU of 8 WS 128x128 arrays at 1 GHz
    # [R configs/systolic_ws_128x128_dev.json],
    # HBM2-PIM of 32 channels x 32 banks, 16 multipliers per bank [R configs/memory_configs/
    # neupims.json], dual row buffers, sub-batch interleaving and greedy channel load balancing
    # [R configs/system_configs/sub-batch-on.json; P Sec. 5-6]; interleaving "enabled only
    # when batch size >= 256" [R README.md], as it costs more than it gains below that
    # [P Sec. 8.2, Fig. 13].
    "neupims": dict(_BASE, sub_batch_min_requests=256),
    # The paper's naive NPU+PIM baseline: Newton's blocked PIM, no sub-batch interleaving,
    # requests assigned to channels round-robin [P Sec. 8.1; R src/scheduler/Scheduler.cc
    # "newton: round-robin channel allocate"].
    "npu+pim": dict(_NAIVE),
    # The paper's ablation (Fig. 13) adds its techniques to NPU+PIM in turn: dual row buffers
    # (DRB), then greedy min-load bin packing (GMLBP), then sub-batch interleaving (= neupims).
    "dual-buffers-only": dict(_NAIVE, row_buffers=2),
    "dual-buffers+balancing": dict(_NAIVE, row_buffers=2, load_balancing="greedy"),
    # Interleaving on blocked PIM (greedy balancing): what the dual row buffers add to NeuPIMs.
    "interleaving-only": dict(_BASE, row_buffers=1),
    # The paper's NPU-only baseline: the same NPU and memory channels (plain HBM2, "NPU-only
    # with non-PIM memory" [P Sec. 8.1]), attention on the NPU.
    "npu-only": dict(_BASE, attention_on="npu", sub_batch_interleaving=False),
}


class NeuPIMs(Template):
    """NPU for GEMMs + HBM-PIM for attention GEMVs, sharing the memory channels."""

    name = "npu_pim"
    description = ("NeuPIMs: NPU (systolic arrays, vector unit) plus HBM-PIM for attention; dual "
                   "row buffers, sub-batch interleaving, channel load balancing")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "neupims"
    SPARSE_ATTENTION = True   # sparse attention runs on the NPU, skipping tiles
    #: a decode batch's PIM time is its busiest channel's: each request's length counts
    DECODE_COST_BY_MEAN = False

    def __init__(self, preset: str | None = None, **values: Any):
        super().__init__(preset, **values)
        hw = self.hw
        self._b = mac_formats.storage_bytes(hw.dtype)
        self.timing = timing_of(hw, hw.pim_clock_hz)
        self.geom = geometry(hw, self._b, gwrite_row_switch=hw.row_buffers == 1)
        self.pin_Bps = hw.channels * self.timing.channel_bandwidth_Bps
        self.npu = NPU(None, **{k: hw[k] for k in _NPU_KEYS},
                       dram_bandwidth_Bps=self.pin_Bps, dram="hbm2")
        self.npu.embedded = True   # its die and memory are NeuPIMs' (floorplan below)
        #: what the NPU's transfers sustain on the channels (the memory standard's rule)
        self.bandwidth_Bps = self.npu.memory.sustained_bandwidth_Bps
        self._mac_j = mac_formats.mac_energy_j(hw.dtype, hw.pim_node_nm)
        self._bus_j = tech.dram_energy_j_per_byte("hbm2")
        self._act_j = dt.act_energy_j(hw.page_bytes)
        self._channel_memo: dict[tuple, tuple[list[float], dt.Stream]] = {}

    def validate(self):
        hw = self.hw
        return bank_problem(hw) or dt.timing_problem(timing_of(hw, hw.pim_clock_hz))

    # ----------------------------------------------------------------------------- feasibility
    def check(self, workload: Workload) -> str | None:
        phys = self.physical()
        problem = ((phys.problem if phys is not None else None)
                   or self.npu.scratchpad_check(workload) or self.geom.problem()
                   or self.format_problem(workload))
        if problem:
            return problem
        return capacity_problem(workload, self.geom, self.hw.channel_capacity_gib, self._b,
                                kv_channels=1, packed_kv=False)

    # ----------------------------------------------------------------------------- plan
    def request_cycles(self, op: Op, kv_len: int) -> float:
        """PIM cycles of one request's attention (Q.K^T and P.V) on its channel."""
        _, kv_heads, _, _, _ = attention_dims(op)
        g = op_geometry(self.geom, op)
        return (dt.gemv_stream(g, self.timing, logits_gemv(op, kv_len, False), 1).cycles
                + dt.block_stream(op_geometry(self.geom, _attend(op)), self.timing,
                                  attend_gemv(op, kv_len, False), kv_heads, 1).cycles)

    def assign_channels(self, op: Op, kv_lens: Sequence[int],
                        items: Sequence[int] | None = None,
                        out: list[int] | None = None) -> list[int]:
        """Channel of each request (of ``items``, default all; written into ``out``):
        ``greedy`` puts the longest request (by estimated PIM cycles) on the least-loaded
        channel, then the next; ``round_robin`` puts the j-th request on channel j mod C."""
        c = self.hw.channels
        items = list(range(len(kv_lens))) if items is None else list(items)
        out = [0] * len(kv_lens) if out is None else out
        if self.hw.load_balancing == "round_robin":
            for j, i in enumerate(items):
                out[i] = j % c
            return out
        cost = {s: self.request_cycles(op, s) for s in {kv_lens[i] for i in items}}
        # the least-loaded channel, lowest index first: used channels in a heap of
        # (load, channel), unused ones (load 0) taken in index order
        used: list[tuple[float, int]] = []
        fresh = 0
        for i in sorted(items, key=lambda i: (-cost[kv_lens[i]], i)):
            if fresh < c and (not used or (0.0, fresh) < used[0]):
                load, ch = 0.0, fresh
                fresh += 1
            else:
                load, ch = heapq.heappop(used)
            heapq.heappush(used, (load + cost[kv_lens[i]], ch))
            out[i] = ch
        return out

    def sub_batches(self, op: Op, kv_lens: Sequence[int]) -> list[list[int]]:
        """Two sub-batches of equal size and, with ``greedy``, near-equal estimated PIM work
        (each request, longest first, goes to the lighter sub-batch that still has room);
        ``round_robin`` alternates by index."""
        n = len(kv_lens)
        if self.hw.load_balancing == "round_robin":
            return [list(range(0, n, 2)), list(range(1, n, 2))]
        cost = {s: self.request_cycles(op, s) for s in set(kv_lens)}
        room = [(n + 1) // 2, n // 2]
        groups: list[list[int]] = [[], []]
        load = [0.0, 0.0]
        for i in sorted(range(n), key=lambda i: (-cost[kv_lens[i]], i)):
            g = min((k for k in (0, 1) if len(groups[k]) < room[k]), key=lambda k: (load[k], k))
            groups[g].append(i)
            load[g] += cost[kv_lens[i]]
        return [sorted(g) for g in groups]

    def assignment(self, workload: Workload) -> tuple | None:
        """``(sub-batches or None, channel of each request)`` :meth:`plan` gives the requests of
        ``workload``'s attention ops, or None when attention stays on the NPU (or there is
        none). With interleaving, the requests first go to two sub-batches, each then balanced
        over all channels."""
        attn = next((op for op in workload.ops if self.on_pim(op)), None)
        if attn is None:
            return None
        lens = attention_kv_lens(attn)
        groups = None
        # a step with a prompt's attention too (a serving iteration) is not interleaved: the
        # sub-batches split the decodes, and the prompt belongs to neither
        prompt = any(op.kind == ir.ATTENTION and not self.on_pim(op) for op in workload.ops)
        if (self.hw.sub_batch_interleaving and not prompt
                and len(lens) >= max(2, self.hw.sub_batch_min_requests)):
            groups = self.sub_batches(attn, lens)
            chans = [0] * len(lens)
            for g in groups:
                self.assign_channels(attn, lens, g, chans)
        else:
            chans = self.assign_channels(attn, lens)
        return (None if groups is None else tuple(map(tuple, groups))), tuple(chans)

    def on_pim(self, op: Op) -> bool:
        """Whether ``op`` is attention the PIM runs: ``attention_on`` "pim" and one query per
        request (decode); a prompt's attention (GEMM-shaped) stays on the NPU."""
        return (op.kind == ir.ATTENTION and self.hw.attention_on == "pim"
                and attention_dims(op)[2] == 1)

    def plan_key(self, workload: Workload) -> tuple | None:
        """The plan is its :meth:`assignment`: designs that assign the requests alike (any
        array, clock or PIM timing) share one planned graph."""
        return self.assignment(workload)

    def plan(self, workload: Workload) -> Workload:
        """Assign requests to channels (:meth:`assignment`) and split attention into Q.K^T,
        softmax and P.V (two copies of the step with interleaving)."""
        assigned = self.assignment(workload)
        if assigned is None:
            return workload
        groups, channels = assigned
        attn = [op for op in workload.ops if self.on_pim(op)]
        lens = attention_kv_lens(attn[0])
        ops = {}
        for op in attn:
            if attention_kv_lens(op) != lens:
                raise InfeasibleDesign(f"attention op {op.name} serves other requests than "
                                       "the first attention op")
            per_item = tuple(sorted({*op.attrs.get("per_item", ()), KV_CHANNELS, KV_LENS}))
            ops[op.name] = op.with_attrs(**{KV_CHANNELS: channels, KV_LENS: lens,
                                            "per_item": per_item})
        w = rebuild(workload, ops)
        if groups is not None:
            w = split_batch(w, [list(g) for g in groups])
        return split_attention(w, self.on_pim)

    # ----------------------------------------------------------------------------- cost
    def cost(self, op: Op) -> OpCost:
        if op.kind in ir.COMPOSITE_KINDS:
            return cost_composite(op, self.cost)
        part = op.attrs.get(PART) if op.kind == ir.ATTENTION else None
        if part in ("logits", "attend"):
            return self.pim_cost(op, part)
        if self.on_pim(op):
            return self.attention_alone(op)
        c = self.npu.cost(op)
        if self.hw.npu_weight_double_buffering and self.hw.dataflow == "ws":
            cycles = double_buffered_cycles(op, self.hw)
            if cycles is not None:
                active_w = sum(self.npu._active_w[u] for u in (c.unit, *c.also_holds))
                c = with_compute(c, cycles / self.hw.clock_hz, self.bandwidth_Bps, active_w)
        return c

    @classmethod
    def cost_many(cls, designs: Sequence["NeuPIMs"], ops: Sequence[Op]) -> "ManyCosts":
        """:meth:`cost` of each of ``ops`` on each of ``designs`` (the fast path's hook, see
        :func:`simulators.fast.evaluate_many`): the ops that only the NPU runs as it is (no
        attention, no composite; matmuls only on designs without double-buffered WS arrays)
        through the npu's vectorised cost (:func:`accelerators.npu_vector.cost_many`, equal
        to its scalar cost), every other (op, design) through :meth:`cost`."""
        designs = list(designs)
        n, m = len(designs), len(ops)
        lat = np.full((m, n), np.nan)
        energy = np.full((m, n), np.nan)
        dram = np.zeros((m, n))
        holds = {u: np.zeros((m, n), dtype=bool) for u in ("array", "vector", "pim")}
        cell_errors: list[list[BaseException | None]] = [[None] * n for _ in range(m)]
        on_npu = [j for j, op in enumerate(ops)
                  if op.kind not in ir.COMPOSITE_KINDS and op.kind != ir.ATTENTION]
        cells: list[tuple[int, int]] = []
        if on_npu and n and all(type(d) is cls for d in designs):
            many = NPU.cost_many([d.npu for d in designs], [ops[j] for j in on_npu])
            lat[on_npu], energy[on_npu] = many.latency_s, many.energy_j
            dram[on_npu] = many.traffic["dram"]
            for u, mask in many.holds.items():
                holds.setdefault(u, np.zeros((m, n), dtype=bool))[on_npu] = mask
            for r, j in enumerate(on_npu):
                cell_errors[j] = many.op_errors(r)
            double = [i for i, d in enumerate(designs)
                      if d.hw.npu_weight_double_buffering and d.hw.dataflow == "ws"]
            cells += [(j, i) for j in on_npu if ops[j].kind == ir.MATMUL for i in double]
            vectorised = set(on_npu)
        else:
            vectorised = set()
        cells += [(j, i) for j in range(m) if j not in vectorised for i in range(n)]
        for j, i in cells:
            try:
                c = designs[i].cost(ops[j])
            except DSEError as exc:   # as the fast path's own loop: the design is infeasible
                cell_errors[j][i] = exc
                lat[j, i] = energy[j, i] = np.nan
                continue
            cell_errors[j][i] = None
            lat[j, i], energy[j, i] = c.latency_s, c.total_energy_j
            dram[j, i] = c.traffic.get("dram", 0.0)
            for u in holds:
                holds[u][j, i] = False
            for u in (c.unit, *c.also_holds):
                holds.setdefault(u, np.zeros((m, n), dtype=bool))[j, i] = True
        errors = [next((row[i] for row in cell_errors if row[i] is not None), None)
                  for i in range(n)]
        return ManyCosts(lat, energy, errors, {"dram": dram}, holds)

    def attention_alone(self, op: Op) -> OpCost:
        """A decode attention op costed outside a step graph (the serving loop's
        ``simulators.iteration_cost`` costs each layer's attention on its own, with every
        request's KV length): its requests assigned to channels as :meth:`plan` assigns them
        without sub-batches, then Q.K^T on the PIM, softmax on the vector unit and P.V on the
        PIM, one after another. A step that interleaves sub-batches overlaps these with the
        other sub-batch's GEMMs, so this chain is a bound from above where interleaving pays."""
        lens = attention_kv_lens(op)
        op = op.with_attrs(**{KV_CHANNELS: tuple(self.assign_channels(op, lens)),
                              KV_LENS: lens})
        return chain_costs([(1.0, self.cost(part)) for part in attention_parts(op)])

    def channel_cycles(self, op: Op, part: str) -> tuple[list[float], dt.Stream]:
        """PIM cycles of each channel for ``op``'s ``part`` and the device-total stream
        (memoised: every layer of a step serves the same requests)."""
        lens = attention_kv_lens(op)
        chans = tuple(op.attrs.get(KV_CHANNELS)
                      or (i % self.hw.channels for i in range(len(lens))))
        key = (part, lens, chans, attention_dims(op))
        hit = self._channel_memo.get(key)
        if hit is not None:
            return hit
        _, kv_heads, _, _, _ = attention_dims(op)
        streams: dict[int, dt.Stream] = {}
        g = op_geometry(self.geom, op if part == "logits" else _attend(op))
        for s in set(lens):
            if part == "logits":
                streams[s] = dt.gemv_stream(g, self.timing, logits_gemv(op, s, False), 1)
            else:
                streams[s] = dt.block_stream(g, self.timing, attend_gemv(op, s, False),
                                             kv_heads, 1)
        per = [0.0] * self.hw.channels
        for s, ch in zip(lens, chans):
            per[ch] += streams[s].cycles
        total = None
        for s, n in sorted(Counter(lens).items()):
            r = dt.repeat_stream(streams[s], n)
            total = r if total is None else dt.add_streams(total, r)
        if len(self._channel_memo) >= CHANNEL_MEMO_ENTRIES:   # a serving run: a new mix per step
            self._channel_memo.clear()
        self._channel_memo[key] = (per, total)
        return per, total

    def pim_cost(self, op: Op, part: str) -> OpCost:
        per, s = self.channel_cycles(op, part)
        tck = self.timing.tck_s
        latency = max(per) * tck
        bus = s.gwrite_bytes + s.readout_bytes
        dram_j = (s.bank_activations * self._act_j + dt.in_bank_read_energy_j(s.column_bytes)
                  + bus * self._bus_j)
        energy = {"compute": (s.macs + dequant_macs(self.hw.dtype, op, s)) * self._mac_j,
                  "onchip_memory": 0.0, "offchip_memory": dram_j}
        busiest_tiles = latency * (s.tile_cycles / s.cycles) if s.cycles else 0.0
        # the mean channel's command-stream time: channels with fewer requests idle sooner
        details = {"channel_busy_mean_s": sum(per) / len(per) * tck}
        if self.hw.row_buffers == 1:   # blocked: the banks serve nobody else meanwhile
            return OpCost(unit="pim", latency_s=latency, compute_s=0.0, clock_hz=1 / tck,
                          traffic={"dram": latency * self.bandwidth_Bps},
                          bytes_by_level={"dram": s.column_bytes, "bus": bus}, energy_j=energy,
                          bound="memory", details=details)
        return OpCost(unit="pim", latency_s=latency, compute_s=busiest_tiles, clock_hz=1 / tck,
                      traffic={"dram": bus}, bytes_by_level={"dram": s.column_bytes, "bus": bus},
                      energy_j=energy, bound="compute", details=details)

    # ----------------------------------------------------------------------------- the rest
    def compute_utilisation(self, result) -> dict[str, float]:
        """NPU and PIM compute utilisation as NeuPIMs' simulator counts it (0-1): the NPU's
        cycles with the systolic compute pipeline busy (memory stalls excluded) [R
        casys-kaist/NeuPIMs src/NeuPIMSystolicWS.cc ``update_stats``: compute cycles are
        those with a non-empty compute pipeline], here the array ops' compute time; the PIM's
        cycles with PIM commands in flight, counted per channel [R extern/NewtonSim
        newton_command_queue.cc: ``pim_cycles`` while a channel's PIM queue is non-empty],
        here each PIM op's mean channel command-stream time (``channel_busy_mean_s``); each
        over the step's wall time [P Sec. 8.2, Table 4]."""
        npu = sum(r.compute_cycles for r in result.ops if r.unit == "array") / self.hw.clock_hz
        pim = sum(r.details.get("channel_busy_mean_s", r.duration_s) for r in result.ops
                  if r.unit == "pim")
        t = result.latency_s
        return {"npu": npu / t if t > 0 else 0.0, "pim": pim / t if t > 0 else 0.0}

    def resources(self) -> Resources:
        return Resources(units={"array": 1, "vector": 1, "pim": 1},
                         channels={"dram": self.bandwidth_Bps})

    def peaks(self, dtype: str) -> Peaks:
        """The NPU's arrays and vector lanes (:meth:`NPU.peaks`) beside every bank's MACs
        (:func:`accelerators.pim.pim_peaks`); the HBM read inside the banks or over the
        channels, the NPU's scratchpads inside it."""
        npu = self.npu.peaks(dtype)
        hw = self.hw
        macs = hw.channels * hw.banks_per_channel * hw.macs_per_bank
        out = pim_peaks(hw, hw.pim_clock_hz, self.pin_Bps,
                        hw.channels * hw.channel_capacity_gib * GIB, self._b, macs, (),
                        npu.levels[-1].capacity_bytes, dict(npu.flops_per_s))
        return Peaks(out.flops_per_s, out.levels,
                     min(out.energy_per_flop_j, npu.energy_per_flop_j))

    def pim_logic(self) -> PimLogic:
        """The in-bank MAC lanes and, with dual row buffers, each bank's second row buffer (a
        page of latches); none with ``attention_on`` "npu" (plain HBM2)."""
        hw = self.hw
        used = hw.attention_on == "pim"
        return pim_logic("hbm2", hw.channels, hw.banks_per_channel,
                         hw.macs_per_bank if used else 0, hw.channel_capacity_gib, hw.dtype,
                         hw.pim_node_nm,
                         row_buffer_bytes=hw.page_bytes if used and hw.row_buffers == 2 else 0)

    def floorplan(self) -> Floorplan:
        """The NPU's logic die with the HBM-PIM stacks as its memory, priced with their PIM
        logic's area (``pim.pim_memory``), that logic reported off-die as ``pim_logic``, its
        power at full rate in the TDP and its leakage added; infeasible when the logic does
        not fit a DRAM die (as ``pim``). With ``attention_on`` "npu" the stacks are plain
        HBM2: no logic, no PIM power."""
        hw, npu = self.hw, self.npu.floorplan()
        logic = self.pim_logic()
        return replace(npu, memory=pim_memory("hbm2", hw.channels, hw.channel_capacity_gib,
                                               self.pin_Bps, logic),
                       leakage_w=npu.leakage_w + tech.leakage_w(logic.area_mm2, 0,
                                                                 hw.pim_node_nm),
                       extra_mm2={"pim_logic": logic.area_mm2},
                       off_die_w=(pim_peak_w(hw, self.timing, self._b, self._mac_j, self._act_j)
                                  if hw.attention_on == "pim" else 0.0),
                       problems=tuple(p for p in (logic.problem(),) if p))


@dataclass
class ManyCosts:
    """Costs of M ops on N designs (:meth:`NeuPIMs.cost_many`): ``latency_s`` and
    ``energy_j`` ``(M, N)`` (NaN where the design cannot run the op), ``errors`` the exception
    each design raises first going through the ops in order, or None."""

    latency_s: np.ndarray
    energy_j: np.ndarray
    errors: list[BaseException | None]
    #: Bytes per shared channel and the units held, per (op, design), as
    #: :class:`accelerators.npu_vector.ManyCosts` gives them.
    traffic: dict[str, np.ndarray] | None = None
    holds: dict[str, np.ndarray] | None = None


def double_buffered_cycles(op: Op, hw) -> int | None:
    """Array cycles of a GEMM-like op on weight-stationary arrays whose PEs double-buffer the
    stationary operand: each fold streams ``T`` rows while the next fold's weights shift in
    (``rows`` cycles), so a fold takes ``max(T, rows)``; the pipeline fills and drains once
    (``rows + cols - 2``). NeuPIMs' NPU model issues GEMM tiles back to back this way
    [R casys-kaist/NeuPIMs src/SystolicWS.cc: successive GEMM instructions start ``size``
    cycles apart, a weight preload ``core_height`` apart]; the TPU double-buffers its weights
    the same way [P Jouppi et al., ISCA 2017]. Attention (Q.K^T and P.V per head) is costed
    the same way; other ops return None (the npu cost stands)."""
    a = op.attrs
    R, C, arrays = hw.rows, hw.cols, hw.arrays

    def gemm(m: int, n: int, k: int, groups: int) -> int:
        if min(m, n, k, groups) <= 0:
            return 0
        folds = groups * dt.ceil_div(k, R) * dt.ceil_div(n, C)
        return dt.ceil_div(folds, arrays) * max(m, R)

    try:
        if op.kind == ir.MATMUL and all(x in a for x in ("m", "n", "k")):
            m, n, k, batch = int(a["m"]), int(a["n"]), int(a["k"]), int(a.get("batch", 1) or 1)
            if a.get("weight_operand") and batch > 1:
                m, batch = m * batch, 1
            return gemm(m, n, k, batch) + R + C - 2
        if op.kind == ir.ATTENTION:
            heads, kv_heads, q, d, dv = attention_dims(op)
            g = int(a.get("batch", 1) or 1) * heads
            skv = int(a["kv_len"])
            vector = dt.ceil_div(g * q * skv * VECTOR_OPS_PER_ELEMENT[ir.SOFTMAX],
                                 hw.vector_lanes)
            return max(gemm(q, skv, d, g) + gemm(q, dv, skv, g) + R + C - 2, vector)
    except (KeyError, TypeError, ValueError):
        return None
    return None


def with_compute(c: OpCost, compute_s: float, bandwidth_Bps: float,
                 active_w: float = 0.0) -> OpCost:
    """``c`` (an npu cost: ``fill + max(compute, other transfers) + drain``, see
    :mod:`accelerators.npu`) with its compute time replaced by ``compute_s``; the logic the
    energy tables do not count draws ``active_w`` for the op's time (``NPU._finish``), so a
    shorter op pays it for less."""
    if compute_s >= c.compute_s:
        return c
    transfer_s = sum(c.traffic.values()) / bandwidth_Bps
    if c.bound == "memory":        # latency = all transfers; a faster array changes nothing
        return replace(c, compute_s=compute_s)
    fill_drain_s = c.latency_s - c.compute_s
    overlap_s = max(transfer_s - fill_drain_s, 0.0)
    latency = fill_drain_s + max(compute_s, overlap_s)
    energy = dict(c.energy_j)
    energy["compute"] -= active_w * (c.latency_s - latency)
    return replace(c, latency_s=latency, compute_s=compute_s, energy_j=energy,
                   bound="memory" if overlap_s > compute_s else "compute")


def _attend(op: Op) -> Op:
    """``op`` marked as its P.V part (the PIM input is then the probabilities, in the op's
    base dtype: :func:`accelerators.pim.op_geometry`)."""
    return op.with_attrs(**{PART: "attend"}) if "formats" in op.attrs else op
