"""``pim``: DRAM processing-in-memory in the style of PIM-GPT / SK hynix GDDR6-AiM.

Every bank of every channel has ``macs_per_bank`` multipliers and an adder tree next to its row
buffer; a host ASIC holds the vectors, runs everything that is not a GEMV (softmax, norms,
activations, residual adds, embedding lookups, KV-cache appends) and issues the PIM commands.

* Weight matmuls run as PIM GEMVs (:func:`accelerators.dram_timing.gemv_stream`): the matrix
  is partitioned over every bank of every channel (rows over banks, columns over channels when
  rows are few), the input vector is broadcast into each channel's global buffer (GWRITE),
  rows open four banks per tFAW window, all-bank DOTs compute, results are read out.
* Attention is split by :meth:`PIM.plan` into Q.K^T on the PIM (the key cache is a matrix of
  context x (kv_heads x head_dim), one output per head and token), softmax on the ASIC, and
  P.V on the PIM (one GEMV per head, heads side by side on disjoint channels).
* One GEMV runs at a time (unit ``pim``: all channels work on it); the ASIC is unit ``asic``;
  the channels' data buses are one shared channel ``bus`` (GWRITE, RDRESULT, KV appends,
  embedding rows).

Energy per command from published DRAM figures (:mod:`accelerators.dram_timing`): row
activation 909 pJ per KiB of row and in-bank reads 1.51 pJ/bit (O'Connor et al. MICRO 2017,
HBM2; used for GDDR6 too [E]); bus transfers at the technology table's per-byte DRAM energy;
MACs and the ASIC at the technology table's 45 nm figures scaled to their nodes. Silicon, cost
and power follow :mod:`accelerators.physical`: the host ASIC with its PHYs is the logic die,
the PIM-DRAM devices its memory (priced per GB), the in-DRAM MAC logic reported apart.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable

import networkx as nx

from accelerators import dram_timing as dt, mac_formats
from accelerators import technology as tech
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.composite import cost_composite
from accelerators.memory_standards import MemorySystem, get_standard
from accelerators.physical import Floorplan, control_mm2
from accelerators.npu import VECTOR_LANE_AREA_PER_MAC, VECTOR_OPS_PER_ELEMENT
from dse.errors import BadInput
from workloads import ir
from workloads.formats import has_formats, op_formats, role_format
from workloads.ir import Op, Workload
from workloads.memo import per_workload
from workloads.requests import attention_kv_lens

#: Attention-op attribute set by :func:`split_attention`: "logits" (Q.K^T) or "attend" (P.V).
PART = "part"


#: GiB, bytes.
GIB = 1 << 30

_TIMING_HELP = {
    "cl_cycles": "read latency CL", "cwl_cycles": "write latency CWL",
    "trcd_cycles": "ACT to column command tRCD", "trp_cycles": "precharge tRP",
    "tras_cycles": "ACT to PRE minimum tRAS", "tccd_s_cycles": "column to column, other bank "
    "group tCCD_S", "tccd_l_cycles": "column to column, same bank group tCCD_L",
    "trrd_s_cycles": "ACT to ACT, other bank group tRRD_S", "trrd_l_cycles": "ACT to ACT, same "
    "bank group tRRD_L", "tfaw_cycles": "four-activate window tFAW", "twr_cycles": "write "
    "recovery tWR", "trfc_cycles": "refresh cycle tRFC", "trefi_cycles": "refresh interval tREFI",
}


def timing_params(base: dt.DramTiming) -> tuple[Param, ...]:
    """The DRAM timing parameters (cycles of the PIM clock) with ``base``'s values as defaults."""
    defaults = dt.timing_defaults(base)
    out = []
    for name, help_ in _TIMING_HELP.items():
        high = 100000 if name == "trefi_cycles" else 4096
        out.append(Param(name, int, "cycles", defaults[name], help_, 1, high))
    out.append(Param("burst_bytes", int, "B", base.burst_bytes, "bytes per data-bus burst of a "
                     "channel", 4, 1024, log=True))
    out.append(Param("burst_cycles", int, "cycles", base.burst_cycles, "cycles per burst", 1, 64))
    return tuple(out)


def bank_params(channels: int, ranks: int, banks: int, macs: int, page: int, buffer: int,
                dot: int, capacity_gib: float) -> tuple[Param, ...]:
    """The bank-array parameters shared by ``pim`` and ``npu_pim``."""
    return (
        Param("channels", int, "", channels, "PIM channels (each with its own bus and global "
              "buffer)", 1, 512, log=True),
        Param("ranks", int, "", ranks, "ranks per channel (each has its own tFAW window)", 1, 8),
        Param("banks_per_channel", int, "", banks, "banks per channel, all ranks", 1, 256,
              log=True),
        Param("macs_per_bank", int, "MACs", macs, "multipliers per bank (elements per DOT)",
              1, 256, log=True),
        Param("page_bytes", int, "B", page, "row (page) size of a bank", 64, 65536, log=True),
        Param("buffer_bytes", int, "B", buffer, "global buffer per channel (input vector of a "
              "pass)", 16, 1 << 20, log=True),
        Param("dot_cycles", int, "cycles", dot, "cycles between all-bank DOT commands", 1, 64),
        Param("channel_capacity_gib", float, "GiB", capacity_gib, "DRAM capacity per channel",
              1.0 / 64, 64.0, log=True),
    )


def geometry(hw: Any, element_bytes: int, gwrite_row_switch: bool = False) -> dt.PimGeometry:
    return dt.PimGeometry(channels=hw.channels, ranks=hw.ranks, banks=hw.banks_per_channel,
                          macs_per_bank=hw.macs_per_bank, page_bytes=hw.page_bytes,
                          buffer_bytes=hw.buffer_bytes, dot_cycles=hw.dot_cycles,
                          element_bytes=element_bytes, gwrite_row_switch=gwrite_row_switch)


def timing_of(hw: Any, clock_hz: float) -> dt.DramTiming:
    """The DRAM timing of a design's parameters (timing cycles, burst) at ``clock_hz``."""
    return replace(dt.timing_from(dt.GDDR6, clock_hz, dict(hw)), burst_bytes=hw.burst_bytes,
                   burst_cycles=hw.burst_cycles)


def bank_problem(hw: Any) -> tuple[str, Any, str] | None:
    """Cross-parameter problems of the bank array, as (field, value, allowed)."""
    if hw.banks_per_channel % hw.ranks:
        return ("hw.banks_per_channel", hw.banks_per_channel,
                f"expected a multiple of ranks = {hw.ranks}")
    return None


# ---------------------------------------------------------------------------------- plan
def split_attention(w: Workload, which: Callable[[Op], bool] | None = None) -> Workload:
    """``w`` with every attention op (every one ``which`` accepts, default all) replaced by
    three: ``<name>.qk`` (Q.K^T, ``part`` "logits"), ``<name>.softmax`` (a softmax op) and
    ``<name>.sv`` (P.V, ``part`` "attend"), in a chain. KV traffic and FLOPs split between
    the two products by head sizes."""
    def split(op: Op) -> bool:
        return op.kind == ir.ATTENTION and PART not in op.attrs and (which is None or which(op))
    if not any(split(op) for op in w.ops):
        return w
    g = nx.DiGraph()
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    index = 0
    for op in w.ops:
        parts = attention_parts(op) if split(op) else [op]
        prev = None
        for p in parts:
            g.add_node(p.name, op=p, index=index)
            index += 1
            if prev is not None:
                g.add_edge(prev.name, p.name, bytes=prev.activation_bytes_written)
            prev = p
        first[op.name], last[op.name] = parts[0].name, parts[-1].name
    for u, v, data in w.graph.edges(data=True):
        g.add_edge(last[u], first[v], **data)
    return Workload(graph=g, model=w.model, phase=w.phase, dtype=w.dtype, batch=w.batch,
                    seq=w.seq, context=w.context, arch=dict(w.arch), params=w.params,
                    unknown_targets=dict(w.unknown_targets))


def attention_parts(op: Op) -> list[Op]:
    """Q.K^T (``part`` "logits"), softmax and P.V (``part`` "attend") of attention ``op``."""
    a = op.attrs
    heads, q = int(a["heads"]), int(a["q_len"])
    d, dv = int(a["head_dim"]), int(a.get("value_dim", a["head_dim"]) or a["head_dim"])
    b = op.bytes_per_element
    lens = attention_kv_lens(op)
    frac = 1.0
    if a.get("causal") and a.get("causal_flops") is not None and op.flops:
        frac = min(1.0, a["causal_flops"] / op.flops)
    scores = int(round(heads * q * sum(lens) * frac))
    kd = d / (d + dv)
    flops = op.flops * frac
    qk = Op(name=f"{op.name}.qk", kind=ir.ATTENTION, target=op.target,
            input_shapes=op.input_shapes, output_shapes=(), dtype=op.dtype, bytes_per_element=b,
            flops=int(round(flops * kd)), activation_bytes_read=op.activation_bytes_read,
            activation_bytes_written=scores * b, kv_bytes_read=int(round(op.kv_bytes_read * kd)),
            attrs={**a, PART: "logits"})
    sm = Op(name=f"{op.name}.softmax", kind=ir.SOFTMAX, target="softmax", input_shapes=(),
            output_shapes=(), dtype=op.dtype, bytes_per_element=b, flops=5 * scores,
            activation_bytes_read=scores * b, activation_bytes_written=scores * b,
            attrs={"elements": scores, **({"formats": a["formats"]} if "formats" in a else {})})
    sv = Op(name=f"{op.name}.sv", kind=ir.ATTENTION, target=op.target, input_shapes=(),
            output_shapes=op.output_shapes, dtype=op.dtype, bytes_per_element=b,
            flops=int(round(flops * (1 - kd))), activation_bytes_read=scores * b,
            activation_bytes_written=op.activation_bytes_written,
            kv_bytes_read=op.kv_bytes_read - qk.kv_bytes_read, attrs={**a, PART: "attend"})
    return [qk, sm, sv]


def attention_dims(op: Op) -> tuple[int, int, int, int, int]:
    """``(heads, kv_heads, q_len, head_dim, value_dim)`` of an attention op."""
    a = op.attrs
    try:
        heads = int(a["heads"])
        kv_heads = int(a.get("kv_heads", heads) or heads)
        d = int(a["head_dim"])
        return heads, kv_heads, int(a["q_len"]), d, int(a.get("value_dim", d) or d)
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"op {op.name}.attrs", dict(a), "an attention op needs heads, q_len, "
                       "kv_len, head_dim") from None


def logits_gemv(op: Op, kv_len: int, packed: bool = True) -> dt.Gemv:
    """Q.K^T of one request: the key cache (kv_len x kv_heads*head_dim) times the queries; one
    output per token and head (reduction ``segment`` = head_dim); query heads sharing a KV
    head are extra input vectors. ``packed``: key rows laid densely over pages (PIM-GPT's
    locality-maximising mapping) or one token per page start (NeuPIMs' KV layout)."""
    heads, kv_heads, q, d, _ = attention_dims(op)
    return dt.Gemv(rows=kv_len, cols=kv_heads * d, vectors=q * max(1, heads // kv_heads),
                   segment=d, packed=packed)


def attend_gemv(op: Op, kv_len: int, packed: bool = True) -> dt.Gemv:
    """P.V of one request and one KV head: V^T (value_dim x kv_len) times the probabilities;
    ``packed`` as in :func:`logits_gemv` (NeuPIMs starts every value row on a new page)."""
    heads, kv_heads, q, _, dv = attention_dims(op)
    return dt.Gemv(rows=dv, cols=kv_len, vectors=q * max(1, heads // kv_heads), packed=packed)


def weight_gemv(op: Op) -> tuple[dt.Gemv, int]:
    """``(GEMV, repeats)`` of a weight matmul or convolution (im2col)."""
    a = op.attrs
    try:
        if op.kind == ir.CONV:
            return dt.Gemv(rows=int(a["gemm_n"]), cols=int(a["gemm_k"]),
                           vectors=int(a["gemm_m"])), int(a.get("groups", 1) or 1)
        m, n, k = int(a["m"]), int(a["n"]), int(a["k"])
        return dt.Gemv(rows=n, cols=k, vectors=m * int(a.get("batch", 1) or 1)), 1
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"op {op.name}.attrs", dict(a), f"a {op.kind} op needs "
                       + ("gemm_m, gemm_n, gemm_k" if op.kind == ir.CONV else "m, n, k")) from None


# ---------------------------------------------------------------------------------- template
_PIM_GPT = dict(channels=16, ranks=1, banks_per_channel=16, macs_per_bank=16, page_bytes=2048,
                buffer_bytes=2048, dot_cycles=1, channel_capacity_gib=0.5)

PARAMS = (
    *bank_params(**{k: _PIM_GPT[k2] for k, k2 in (
        ("channels", "channels"), ("ranks", "ranks"), ("banks", "banks_per_channel"),
        ("macs", "macs_per_bank"), ("page", "page_bytes"), ("buffer", "buffer_bytes"),
        ("dot", "dot_cycles"), ("capacity_gib", "channel_capacity_gib"))}),
    Param("clock_hz", float, "Hz", 1.0e9, "PIM clock: MACs and DRAM commands (timings are in "
          "its cycles)", 1.0e8, 4.0e9, log=True),
    *timing_params(dt.GDDR6),
    Param("memory", str, "", "gddr6", "DRAM kind: bus energy per byte and background power",
          choices=tuple(dt.BACKGROUND_W_PER_CHANNEL)),
    Param("dtype", str, "", "bf16", "format of the in-bank MAC units "
          "(accelerators.mac_formats); without number formats in the workload also the "
          "element type stored", choices=mac_formats.MAC_FORMATS),
    Param("pim_node_nm", int, "nm", 45, "logic-equivalent node of the in-DRAM MAC units",
          choices=tech.NODES_NM),
    Param("asic_lanes", int, "lanes", 256, "host-ASIC vector lanes (elements per cycle)",
          1, 65536, log=True),
    Param("asic_clock_hz", float, "Hz", 1.0e9, "host-ASIC clock", 1.0e8, 4.0e9, log=True),
    Param("asic_sram_kb", int, "KiB", 256, "host-ASIC vector buffer", 1, 1 << 17, log=True),
    Param("asic_node_nm", int, "nm", 28, "host-ASIC process node", choices=tech.NODES_NM),
)

PRESETS: dict[str, dict[str, Any]] = {
    # PIM-GPT in the GDDR6-AiM style: 8 GDDR6 chips x 2 channels, 16 banks per channel, 16 bf16
    # multipliers per bank at 1 GHz, 2 KB rows, 2 KB global buffer per channel, 8 Gb per chip
    # [P SK hynix AiM, ISSCC 2022 / JSSC 2023: 1 GHz PUs, 1 TFLOPS per 8 Gb chip; P PIM-GPT
    # arXiv 2310.09385: MACs in GDDR6 banks, ASIC for the rest; channel count E, REFERENCES.md].
    # Timing: GDDR6 at 16 Gb/s/pin in 1 ns cycles [R DRAMsim3 GDDR6_8Gb_x16.ini]. ASIC lanes,
    # buffer and node are estimates [E].
    "pim-gpt": dict(**_PIM_GPT, clock_hz=1.0e9, **dt.timing_defaults(dt.GDDR6),
                    burst_bytes=dt.GDDR6.burst_bytes, burst_cycles=dt.GDDR6.burst_cycles,
                    memory="gddr6", dtype="bf16", pim_node_nm=45, asic_lanes=256,
                    asic_clock_hz=1.0e9, asic_sram_kb=256, asic_node_nm=28),
    # NeuPIMs' HBM2-PIM used on its own: 32 channels x 32 banks (2 ranks x 16), 16 multipliers
    # per bank, 1 KB rows and buffer, one all-bank DOT per tCCD_L = 2 cycles, 1 GB per channel,
    # HBM2 timing [R casys-kaist/NeuPIMs configs/memory_configs/neupims.json; DRAMsim3
    # HBM2_8Gb_x128.ini]; host ASIC as above [E].
    "hbm2-pim": dict(channels=32, ranks=2, banks_per_channel=32, macs_per_bank=16,
                     page_bytes=1024, buffer_bytes=1024, dot_cycles=2, channel_capacity_gib=1.0,
                     clock_hz=1.0e9, **dt.timing_defaults(dt.HBM2),
                     burst_bytes=dt.HBM2.burst_bytes, burst_cycles=dt.HBM2.burst_cycles,
                     memory="hbm2", dtype="bf16", pim_node_nm=45, asic_lanes=256,
                     asic_clock_hz=1.0e9, asic_sram_kb=256, asic_node_nm=28),
}

_VECTOR_KINDS = (ir.ELEMENTWISE, ir.NORM, ir.SOFTMAX, ir.REDUCTION, ir.EMBEDDING,
                 ir.DATA_MOVEMENT, ir.HASHGRID, ir.UNKNOWN)


class PIM(Template):
    """DRAM-PIM (channels x banks x MACs per bank) with a host ASIC for non-GEMV ops."""

    name = "pim"
    description = ("DRAM processing-in-memory (PIM-GPT / GDDR6-AiM style): GEMVs as PIM "
                   "command streams under DRAM timing, a host ASIC for the rest")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "pim-gpt"

    def __init__(self, preset: str | None = None, **values: Any):
        super().__init__(preset, **values)
        hw = self.hw
        self._b = mac_formats.storage_bytes(hw.dtype)
        self.timing = timing_of(hw, hw.clock_hz)
        self.geom = geometry(hw, self._b)
        self.pin_Bps = hw.channels * self.timing.channel_bandwidth_Bps
        #: what the host ASIC's transfers sustain over the channels (the memory standard's
        #: rule; PIM command streams are timed command by command instead)
        self.bus_Bps = self.pin_Bps * get_standard(hw.memory).sustained_fraction
        self._mac_j = mac_formats.mac_energy_j(hw.dtype, hw.pim_node_nm)
        self._vec_j = tech.vector_op_energy_j(mac_formats.vector_format(hw.dtype),
                                              hw.asic_node_nm)
        self._sram_j = tech.sram_energy_j_per_byte(hw.asic_sram_kb * 1024, hw.asic_node_nm)
        self._bus_j = tech.dram_energy_j_per_byte(hw.memory)
        self._act_j = dt.act_energy_j(hw.page_bytes)

    def validate(self):
        return bank_problem(self.hw) or dt.timing_problem(timing_of(self.hw, self.hw.clock_hz))

    # ----------------------------------------------------------------------------- feasibility
    @property
    def capacity_bytes(self) -> int:
        return int(self.hw.channels * self.hw.channel_capacity_gib * GIB)

    def check(self, workload: Workload) -> str | None:
        """The PIM geometry, the base checks (buildable, the footprint fits the channels), then
        the busiest bank under the PIM partition."""
        problem = self.geom.problem() or super().check(workload)
        if problem:
            return problem
        return capacity_problem(workload, self.geom, self.hw.channel_capacity_gib, self._b,
                                kv_channels=None)

    def op_geometry(self, op: Op) -> dt.PimGeometry:
        """The bank geometry ``op``'s operands are laid out in: the design's element, or the
        op's number formats (matrix: weights or KV cache; input: activations; results: the
        op's output)."""
        return op_geometry(self.geom, op)

    # ----------------------------------------------------------------------------- plan/cost
    def plan(self, workload: Workload) -> Workload:
        return split_attention(workload)

    def plan_key(self, workload: Workload) -> tuple:
        """The split reads no parameter: every design shares one planned graph."""
        return ()

    def cost(self, op: Op) -> OpCost:
        if op.kind in ir.COMPOSITE_KINDS:
            return cost_composite(op, self.cost)
        if (op.kind in (ir.MATMUL, ir.CONV) and op.attrs.get("weight_operand", op.kind == ir.CONV)):
            gemv, repeats = weight_gemv(op)
            g = self.op_geometry(op)
            s = dt.repeat_stream(dt.gemv_stream(g, self.timing, gemv), repeats)
            return self.pim_cost(s, host_adds=_partials(s, gemv, repeats,
                                                        g.output_bytes or self._b),
                                 dequant=dequant_macs(self.hw.dtype, op, s))
        if op.kind == ir.ATTENTION:
            part = op.attrs.get(PART)
            if part in ("logits", "attend"):
                s = self.attention_stream(op, part)
                return self.pim_cost(s, dequant=dequant_macs(self.hw.dtype, op, s))
            return self._unsplit_attention(op)
        if op.kind == ir.MATMUL:   # both operands activations: the ASIC multiplies
            return self.asic_cost(op, lane_ops=op.flops / 2)
        return self.asic_cost(op)

    def attention_stream(self, op: Op, part: str) -> dt.Stream:
        """The PIM commands of one attention part for every request, one request after
        another, each over all channels."""
        _, kv_heads, _, _, _ = attention_dims(op)
        total = None
        g = self.op_geometry(op)
        for kv_len, count in sorted(Counter(attention_kv_lens(op)).items()):
            if part == "logits":
                s = dt.gemv_stream(g, self.timing, logits_gemv(op, kv_len))
            else:
                s = dt.block_stream(g, self.timing, attend_gemv(op, kv_len), kv_heads)
            s = dt.repeat_stream(s, count)
            total = s if total is None else dt.add_streams(total, s)
        if total is None:
            raise BadInput(f"op {op.name}.attrs", dict(op.attrs), "an attention op with requests")
        return total

    def _unsplit_attention(self, op: Op) -> OpCost:
        """An attention op not split by :meth:`plan`: Q.K^T, softmax on the ASIC and P.V in
        sequence, holding the ASIC too."""
        qk, sm, sv = attention_parts(op)
        a = self.pim_cost(self.attention_stream(op, "logits"))
        s = self.asic_cost(sm)
        c = self.pim_cost(self.attention_stream(op, "attend"))
        energy = {k: a.energy_j.get(k, 0) + s.energy_j.get(k, 0) + c.energy_j.get(k, 0)
                  for k in set(a.energy_j) | set(s.energy_j) | set(c.energy_j)}
        return OpCost(unit="pim", latency_s=a.latency_s + s.latency_s + c.latency_s,
                      compute_s=a.compute_s + c.compute_s, clock_hz=self.hw.clock_hz,
                      traffic={"bus": a.traffic["bus"] + c.traffic["bus"]},
                      bytes_by_level={k: a.bytes_by_level.get(k, 0) + c.bytes_by_level.get(k, 0)
                                      for k in a.bytes_by_level},
                      energy_j=energy, bound="memory", also_holds=("asic",))

    def pim_cost(self, s: dt.Stream, host_adds: float = 0.0, dequant: float = 0.0) -> OpCost:
        """OpCost of a PIM command stream: unit ``pim``; the tiles are compute, GWRITE and
        RDRESULT bytes cross the shared bus; ``dequant`` matrix elements are scaled into the
        MAC units' format on the way (one MAC's energy each [E])."""
        tck = self.timing.tck_s
        latency = s.cycles * tck
        bus = s.gwrite_bytes + s.readout_bytes
        dram_j = (s.bank_activations * self._act_j + dt.in_bank_read_energy_j(s.column_bytes)
                  + bus * self._bus_j)
        return OpCost(unit="pim", latency_s=latency, compute_s=s.tile_cycles * tck,
                      clock_hz=self.hw.clock_hz, traffic={"bus": bus},
                      bytes_by_level={"dram": s.column_bytes, "bus": bus},
                      energy_j={"compute": (s.macs + dequant) * self._mac_j
                                + host_adds * self._vec_j,
                                "onchip_memory": (bus + host_adds * self._b) * self._sram_j,
                                "offchip_memory": dram_j},
                      bound="compute" if s.tile_cycles >= s.cycles / 2 else "memory")

    def asic_cost(self, op: Op, lane_ops: float | None = None) -> OpCost:
        """An op on the host ASIC: lane operations over ``asic_lanes``; vectors live in its
        buffer; weights (norm parameters, embedding rows), KV appends and activations that do
        not fit the buffer cross the bus."""
        hw = self.hw
        b = op.bytes_per_element if "formats" in op.attrs else self._b
        scale = b / op.bytes_per_element if op.bytes_per_element else 1.0
        act = (op.activation_bytes_read + op.activation_bytes_written) * scale
        dram = (op.weight_bytes + op.kv_bytes_read + op.kv_bytes_written) * scale
        if act > hw.asic_sram_kb * 1024:
            dram += act
        if lane_ops is None:   # a lane does one FMA (2 FLOPs) a cycle at most
            lane_ops = max(_lane_ops(op, b), op.flops / 2)
        compute_s = math.ceil(lane_ops / hw.asic_lanes) / hw.asic_clock_hz
        mem_s = dram / self.bus_Bps
        latency = max(compute_s, mem_s)
        return OpCost(unit="asic", latency_s=latency, compute_s=compute_s,
                      clock_hz=hw.asic_clock_hz, traffic={"bus": dram} if dram else {},
                      bytes_by_level={"sram": act, "bus": dram},
                      energy_j={"compute": lane_ops * self._vec_j
                                + self.physical().active_w * latency,
                                "onchip_memory": act * self._sram_j,
                                "offchip_memory": dram * self._bus_j},
                      bound="memory" if mem_s > compute_s else "compute")

    # ----------------------------------------------------------------------------- the rest
    def resources(self) -> Resources:
        return Resources(units={"pim": 1, "asic": 1}, channels={"bus": self.bus_Bps})

    def peaks(self, dtype: str) -> Peaks:
        """Every bank's MACs (2 FLOPs each) once per all-bank DOT (``dot_cycles``) and the
        ASIC's lanes (an FMA each) per cycle, in the design's ``dtype``; the DRAM (where the
        weights and KV cache live) read inside the banks at the MACs' rate or over the bus,
        whichever is faster, at the in-bank read energy; the ASIC's buffer inside it."""
        return pim_peaks(self.hw, self.hw.clock_hz, self.pin_Bps, self.capacity_bytes, self._b,
                         self.hw.channels * self.hw.banks_per_channel * self.hw.macs_per_bank,
                         (("asic", self.hw.asic_lanes, self.hw.asic_clock_hz,
                           self.hw.asic_node_nm),), self.hw.asic_sram_kb * 1024)

    def pim_logic(self) -> PimLogic:
        hw = self.hw
        return pim_logic(hw.memory, hw.channels, hw.banks_per_channel, hw.macs_per_bank,
                         hw.channel_capacity_gib, hw.dtype, hw.pim_node_nm)

    def floorplan(self) -> Floorplan:
        """The host ASIC (lanes and vector buffer) on the logic die; the PIM-DRAM devices as
        its memory, priced with their PIM logic's area (:func:`pim_memory`), that logic
        reported off-die as ``pim_logic`` and its power at full rate (:func:`pim_peak_w`) in the
        TDP; infeasible when the logic does not fit a DRAM die (:meth:`PimLogic.problem`)."""
        hw = self.hw
        lanes = hw.asic_lanes * VECTOR_LANE_AREA_PER_MAC * tech.mac_area_mm2(
            mac_formats.vector_format(hw.dtype), hw.asic_node_nm)
        sram_bytes = hw.asic_sram_kb * 1024
        sram = tech.sram_area_mm2(sram_bytes, hw.asic_node_nm)
        logic = self.pim_logic()
        peak = hw.asic_lanes * hw.asic_clock_hz * (self._vec_j + 3 * self._b * self._sram_j)
        leak = tech.leakage_w(lanes + control_mm2(lanes, sram) + logic.area_mm2,
                              sram_bytes, hw.asic_node_nm)
        return Floorplan(node_nm=hw.asic_node_nm, compute_mm2=lanes, sram_mm2=sram,
                         peak_dynamic_w=peak, leakage_w=leak,
                         memory=pim_memory(hw.memory, hw.channels, hw.channel_capacity_gib,
                                           self.pin_Bps, logic),
                         extra_mm2={"pim_logic": logic.area_mm2},
                         off_die_w=pim_peak_w(hw, self.timing, self._b, self._mac_j,
                                              self._act_j),
                         problems=tuple(p for p in (logic.problem(),) if p),
                         clock_hz=hw.asic_clock_hz)


def op_geometry(geom: dt.PimGeometry, op: Op) -> dt.PimGeometry:
    """``geom`` with the element sizes of ``op``'s number formats (itself for an op without):
    the matrix in the banks is the op's weights (a weight GEMV) or its KV cache (attention),
    the input vector its activations, the results its output dtype."""
    f = op_formats(op)
    if f is None:
        return geom
    x, y = f.operands(op.kind)
    base = float(op.bytes_per_element)
    x_bytes = base if op.attrs.get(PART) == "attend" else x.bits_per_element / 8  # P: base
    return replace(geom, element_bytes=y.bits_per_element / 8, input_bytes=x_bytes,
                   output_bytes=base)


def dequant_macs(unit: str, op: Op, s: dt.Stream) -> float:
    """Matrix elements of stream ``s`` that MAC units of format ``unit`` scale into their own
    format (a block- or group-scaled operand they do not take natively), or 0."""
    modes = mac_formats.operand_modes(unit, op)
    return s.macs if not isinstance(modes, str) and modes[1] == "dequant" else 0.0


def _lane_ops(op: Op, b: int) -> float:
    """Vector-lane operations of a non-GEMV op (the npu template's per-kind counts)."""
    elements = op.attrs.get("elements")
    if not isinstance(elements, (int, float)) or elements <= 0:
        outs = [math.prod(s) for s in op.output_shapes if s is not None]
        elements = sum(outs) if outs and sum(outs) > 0 else max(op.bytes_read, op.bytes_written,
                                                              1) / max(op.bytes_per_element, 1)
    if op.kind == ir.REDUCTION:
        elements = max(elements, op.bytes_read / max(op.bytes_per_element, 1))
    return elements * VECTOR_OPS_PER_ELEMENT.get(op.kind, 1)


def _partials(s: dt.Stream, gemv: dt.Gemv, repeats: int, element_bytes: int) -> float:
    """Additions the host makes to combine partial sums read out of the banks."""
    outputs = gemv.rows * max(gemv.vectors, 1) * repeats
    return max(0.0, s.readout_bytes / element_bytes - outputs)


# ---------------------------------------------------------------------------------- memory
#: DRAM channels per device of each PIM memory kind [D: a GDDR6 chip has two x16 channels;
#: an HBM2 stack eight 128-bit channels, JESD235].
CHANNELS_PER_DEVICE = {"gddr6": 2, "hbm2": 8}

#: DRAM cells one fp16 in-bank MAC lane (multiplier, adder-tree share, registers) displaces,
#: bits [P/S-derived: Samsung's HBM-PIM (Kwon et al., "A 20nm 6GB function-in-memory DRAM,
#: based on HBM2 with a 1.2TFLOPS programmable computing unit", ISSCC 2021) puts one 16-lane
#: fp16 unit per two banks, 64 per die, and its PIM die holds 4 Gb where a plain HBM2 die of
#: the same size holds 8 Gb (as its ISSCC talk was reported): 4 Gib / 1,024 lanes]. Other
#: dtypes and logic-equivalent nodes scale with the MAC's area (``technology.mac_area_mm2``
#: relative to fp16 at 45 nm, the ``pim_node_nm`` default). Samsung's lanes are programmable
#: (instruction buffer, register files), so a fixed-function AiM / Newton lane is likely
#: smaller: an upper estimate.
PIM_LANE_CELL_BITS = 4 * 2**30 / (64 * 16)
PIM_LANE_REFERENCE = ("fp16", 45)
#: Most a DRAM die may grow over its cells to hold PIM logic [E: the die must still fit its
#: package: HBM stacks' JEDEC outline went from 7.75 x 11.87 mm (HBM2) to 11 x 11 mm (HBM3),
#: 1.31x; a GDDR6 die has a similar margin in its 14 x 12 mm FBGA]. Beyond it the design is
#: infeasible (both figures named); Samsung instead halved its die's capacity.
PIM_DIE_MAX_GROWTH = (11.0 * 11.0) / (7.75 * 11.87)
#: DRAM density, Gbit per mm^2 of die, to report PIM logic in mm^2 [E: 8 Gb HBM2 dies of
#: ~92 mm^2 (their JEDEC outline), 8 Gb GDDR6 dies of ~65 mm^2 at 1y nm].
DRAM_GBIT_PER_MM2 = {"gddr6": 8 / 65.0, "hbm2": 8 / 92.0}


@dataclass(frozen=True)
class PimLogic:
    """The in-bank MAC lanes of a PIM-DRAM and what they take from it: ``logic_bits`` of
    cells' worth of die area next to its ``cell_bits``, over ``devices`` devices."""

    kind: str
    lanes: int
    devices: int
    logic_bits: float
    cell_bits: float

    @property
    def growth(self) -> float:
        """Die area over the area of its cells alone (1: no PIM logic)."""
        return 1.0 + self.logic_bits / self.cell_bits

    @property
    def area_mm2(self) -> float:
        """The PIM logic's die area over every device, mm²."""
        return self.logic_bits / 1e9 / DRAM_GBIT_PER_MM2[self.kind]

    def problem(self) -> str | None:
        """Why the PIM logic does not fit a DRAM die, naming both figures, or None."""
        if self.growth <= PIM_DIE_MAX_GROWTH * (1 + 1e-12):
            return None
        per = self.devices
        device = "stack" if self.kind == "hbm2" else "chip"
        room = (PIM_DIE_MAX_GROWTH - 1) * self.cell_bits / 1e9 / DRAM_GBIT_PER_MM2[self.kind]
        return (f"the in-bank PIM logic ({self.lanes // per:,} MAC lanes per {self.kind} "
                f"{device}) takes {self.area_mm2 / per:,.1f} mm² of DRAM die per {device}, "
                f"{self.growth - 1:.0%} of its cells' area, but a DRAM die holds at most "
                f"{PIM_DIE_MAX_GROWTH - 1:.0%} more than its cells ({room / per:,.1f} mm² per "
                f"{device})")


def pim_logic(kind: str, channels: int, banks_per_channel: int, macs_per_bank: int,
              channel_capacity_gib: float, dtype: str, pim_node_nm: int,
              row_buffer_bytes: float = 0.0) -> PimLogic:
    """The PIM logic of ``channels`` x ``banks_per_channel`` banks of ``macs_per_bank`` lanes
    of ``dtype`` in ``kind`` DRAM holding ``channel_capacity_gib`` per channel, plus
    ``row_buffer_bytes`` of latches per bank beyond its sense amplifiers (NeuPIMs' second
    row buffer holds a page). A latch bit is costed as an SRAM bit at ``pim_node_nm``
    (``technology.sram_area_mm2``: bit cell over the array efficiency) [E: a row buffer is a
    row of static latches with its own decode and isolation; CACTI-level detail (wiring to
    the column path) is not modelled, so this is a lower estimate]."""
    ref = tech.mac_area_mm2(*PIM_LANE_REFERENCE)
    lanes = channels * banks_per_channel * macs_per_bank
    bits = lanes * PIM_LANE_CELL_BITS * mac_formats.mac_area_mm2(dtype, pim_node_nm) / ref
    if row_buffer_bytes:
        bits += (channels * banks_per_channel * tech.sram_area_mm2(row_buffer_bytes, pim_node_nm)
                 * DRAM_GBIT_PER_MM2[kind] * 1e9)
    return PimLogic(kind, lanes, math.ceil(channels / CHANNELS_PER_DEVICE[kind]), bits,
                    channels * channel_capacity_gib * GIB * 8)


def pim_peak_w(hw: Any, timing: dt.DramTiming, element_bytes: int, mac_j: float,
               act_j: float) -> float:
    """In-DRAM power at full PIM rate, W: every bank's lanes reading their operands from the
    open row (``dram_timing.IN_BANK_READ_PJ_PER_BIT``) and multiplying each DOT, and rows
    opened at the most tFAW allows (four banks per window per rank), each at ``act_j``. An
    upper bound of what a PIM stream averages (both at once), so it belongs in the TDP."""
    banks = hw.channels * hw.banks_per_channel
    per_dot = hw.macs_per_bank * (mac_j + dt.in_bank_read_energy_j(element_bytes))
    dots_per_s = 1.0 / (max(hw.dot_cycles, 1) * timing.tck_s)
    acts_per_s = hw.channels * hw.ranks * 4 / (timing.tfaw * timing.tck_s)
    return banks * dots_per_s * per_dot + acts_per_s * act_j


def pim_memory(kind: str, channels: int, channel_capacity_gib: float,
               bandwidth_Bps: float, logic: PimLogic) -> MemorySystem:
    """The PIM-DRAM devices holding ``channels`` channels of ``kind``: whole devices priced by
    die area (the plain standard's price per GB times ``logic.growth``: the PIM logic costs
    what the cells its area would hold cost), their background power the channels'
    (:data:`dram_timing.BACKGROUND_W_PER_CHANNEL`)."""
    per = CHANNELS_PER_DEVICE[kind]
    std = get_standard(kind)
    std = replace(std, price_usd_per_gb=std.price_usd_per_gb * logic.growth,
                  static_w=per * dt.BACKGROUND_W_PER_CHANNEL[kind])
    devices = math.ceil(channels / per)
    return MemorySystem(std, devices, channels * channel_capacity_gib / devices,   # GiB each
                        bandwidth_Bps)


# ---------------------------------------------------------------------------------- capacity
def capacity_problem(workload: Workload, g: dt.PimGeometry, channel_capacity_gib: float,
                     element_bytes: int, kv_channels: int | None,
                     weight_fraction: float = 1.0, packed_kv: bool = True) -> str | None:
    """Why the model's weights and KV cache do not fit the DRAM, or None.

    Checks the device total (weights at ``element_bytes`` each + every attention op's KV cache)
    and the busiest bank under the PIM partition (pages rounded up, uneven splits included):
    weights of every weight matmul, and the KV cache either over all channels
    (``kv_channels`` None) or, per request, within ``kv_channels`` channel(s); ``packed_kv``
    as in :func:`logits_gemv`. Works on :func:`_capacity_summary` (ops of equal shapes
    counted once, times their number).
    """
    capacity = g.channels * channel_capacity_gib * GIB
    bank_cap = channel_capacity_gib * GIB / g.banks
    fmts = has_formats(workload)
    weights = (workload.weight_footprint_bytes if fmts else workload.params * element_bytes) \
        * weight_fraction
    summary = _capacity_summary(workload)
    kv = 0.0
    bank = 0.0
    gw = replace(g, element_bytes=role_format(workload, "weights").bits_per_element / 8) \
        if fmts else g
    for (rows, cols, repeats), n in summary.weights.items():
        bank += n * repeats * dt.bank_footprint_bytes(gw, dt.Gemv(rows, cols))
    for (kv_read, op_bytes), n in summary.kv_reads.items():
        kv += n * kv_read * (1.0 if fmts else element_bytes / op_bytes if op_bytes else 1.0)
    if fmts:
        g = replace(g, element_bytes=role_format(workload, "kv").bits_per_element / 8)
    for (part, kv_heads, d, dv, lens), n in summary.attention.items():
        for kv_len, count in lens:
            fp = 0
            if part != "attend":
                fp += dt.bank_footprint_bytes(
                    g, dt.Gemv(kv_len, kv_heads * d, segment=d, packed=packed_kv), kv_channels)
            if part != "logits":
                fp += kv_heads * dt.bank_footprint_bytes(
                    g, dt.Gemv(dv, kv_len, packed=packed_kv), kv_channels)
            bank += n * fp * (count if kv_channels is None else count * kv_channels / g.channels)
    need = weights + kv
    if need > capacity:
        return (f"model needs {need / GIB:.2f} GiB (weights {weights / GIB:.2f} + KV cache "
                f"{kv / GIB:.2f}) but the DRAM holds {capacity / GIB:.2f} GiB "
                f"({g.channels} channels x {channel_capacity_gib:g} GiB)")
    if bank > bank_cap:
        return (f"the busiest bank must hold {bank / 2**20:.1f} MiB under the PIM partition "
                f"over {g.channels} channels x {g.banks} banks but a bank holds "
                f"{bank_cap / 2**20:.1f} MiB")
    return None


@dataclass(frozen=True)
class CapacitySummary:
    """What :func:`capacity_problem` reads of a workload, equal shapes merged (each mapped to
    how many ops have it): weight GEMVs as ``(rows, cols, repeats)``; attention ops' KV reads
    as ``(kv_bytes_read, bytes_per_element)``; their footprints as ``(part, kv_heads,
    head_dim, value_dim, ((kv_len, requests), ...))``."""

    weights: dict[tuple[int, int, int], int]
    kv_reads: dict[tuple[int, int], int]
    attention: dict[tuple, int]


def _capacity_summary(workload: Workload) -> CapacitySummary:
    """The :class:`CapacitySummary` of ``workload`` (computed once per workload)."""
    def build() -> CapacitySummary:
        weights: Counter = Counter()
        kv_reads: Counter = Counter()
        attention: Counter = Counter()
        for op in workload.ops:
            if op.kind in (ir.MATMUL, ir.CONV) and op.attrs.get("weight_operand",
                                                                 op.kind == ir.CONV):
                gemv, repeats = weight_gemv(op)
                weights[(gemv.rows, gemv.cols, repeats)] += 1
            elif op.kind == ir.ATTENTION:
                kv_reads[(op.kv_bytes_read, op.bytes_per_element)] += 1
                _, kv_heads, _, d, dv = attention_dims(op)
                lens = tuple(Counter(attention_kv_lens(op)).items())
                attention[(op.attrs.get(PART), kv_heads, d, dv, lens)] += 1
        return CapacitySummary(dict(weights), dict(kv_reads), dict(attention))
    return per_workload(workload, "pim-capacity", build)


def pim_peaks(hw, pim_clock_hz: float, bus_Bps: float, capacity_bytes: float,
              element_bytes: int, macs: int, hosts: tuple, onchip_bytes: float,
              host_flops: dict[str, float] | None = None) -> Peaks:
    """:class:`Peaks` of a design whose DRAM banks hold ``macs`` MAC units in all, an
    all-bank DOT every ``hw.dot_cycles`` of ``pim_clock_hz`` (``hw.dtype``, ``hw.pim_node_nm``),
    beside host units ``hosts`` (``(unit, lanes, clock_hz, node_nm)``: an FMA per lane per
    cycle) and ``host_flops`` (units given by their peaks): in-bank FLOP/s; the DRAM (where
    the weights and KV cache live) at the larger of the in-bank and bus bandwidths and the
    in-bank read energy, ``onchip_bytes`` inside it; the cheapest FLOP of any of them."""
    pim_rate = macs * pim_clock_hz / hw.dot_cycles
    flops = {"pim": 2.0 * pim_rate}
    energy = mac_formats.mac_energy_j(hw.dtype, hw.pim_node_nm) / 2
    for unit, lanes, clock, node in hosts:
        flops[unit] = 2.0 * lanes * clock
        energy = min(energy, tech.vector_op_energy_j(mac_formats.vector_format(hw.dtype), node))
    flops.update(host_flops or {})
    return Peaks(flops_per_s=flops,
                 levels=(MemoryLevel("dram", max(pim_rate * element_bytes, bus_Bps),
                                     capacity_bytes, dt.in_bank_read_energy_j(1.0),
                                     resident=True),
                         MemoryLevel("buffer", math.inf, onchip_bytes, 0.0)),
                 energy_per_flop_j=energy)
