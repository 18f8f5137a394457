"""``wafer``: a wafer-scale core mesh (Cerebras WSE-2 class) under the PLMR model of WaferLLM.

A ``mesh_width`` x ``mesh_height`` mesh of cores, each with ``sram_per_core_kb`` of SRAM and a
router with four links of ``link_bytes_per_cycle`` per direction. Messages pay ``alpha_cycles``
per hop and ``beta_cycles`` per software routing stage; a core has ``routing_paths_per_core``
routing paths, and a pattern that needs more relays through software stages (or, with
``relay`` off, cannot be built). See :mod:`accelerators.mesh_algorithms` for the closed forms.

An LLM runs on a rectangular *region* of the mesh, one region for prefill and one for decode
(WaferLLM's wafer-scale parallelism [P]): every layer is spread over the whole region and the
layers run one after another, so the region is one simulator unit (``"region"``) and ops
serialise on it. Per op, O(1) in the number of cores:

* decode (activations split along one axis and replicated down the other): matmuls are
  MeshGEMV (local GEMV, then an all-reduce along the reduction axis with ``allreduce``:
  ``ktree`` / ``ring`` / ``pipeline``); attention keeps the KV cache tokens-along-Y and
  features-along-X (the shift-based KV cache keeps it balanced: appending a token is one
  neighbour shift per core); norms and softmax all-reduce their statistics;
* prefill (tokens along Y, features along X): matmuls and the two products of attention use
  ``gemm_algorithm`` (``meshgemm`` / ``cannon`` / ``summa`` / ``allgather``);
* ``forward`` (non-LLM models) maps like prefill; single-row matmuls (a prefill's LM head on
  the last token) are MeshGEMVs in every phase.

Non-uniform layouts of a rectangular region alternate between the two axes from one GEMV to
the next, so each decode op is costed in both orientations and the slower one is kept.

Feasibility (:meth:`Wafer.check`): the mesh must fit the largest rectangle of a 300-mm wafer
(``physical.WAFER_USABLE_MM2``, both areas named otherwise); the region must hold weights + KV
cache + the largest activation working set + the per-core reserve in its aggregate SRAM (the
reason names the shortfall per core); every pattern must fit the routing paths (or relay); the
peak power (the mesh's leakage plus the larger region at full rate) must stay under ``tdp_w``.

Off-wafer I/O (the ``"io"`` channel): in LLM phases each step streams its token ids in and the
final op's output (the logits) out; in ``forward`` phase inputs and outputs are taken as resident
on the wafer, as a GPU's are in HBM.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from accelerators import mac_formats, mesh_algorithms as mesh
from accelerators import physical, technology as tech
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.composite import cost_composite
from accelerators.npu import element_ops
from accelerators.physical import Floorplan
from dse.errors import InfeasibleDesign
from workloads import ir, structure
from workloads.formats import GEMM_KINDS, has_formats, role_format, weights_bytes
from workloads.ir import DTYPE_BYTES, Op
from workloads.memo import per_workload

#: Bytes per 32-bit datapath word [P WaferLLM sec. 2: WSE-2 fetches two 32-bit operands and
#: writes one back per cycle, and a link carries one 32-bit message per cycle].
WORD_BYTES = 4

#: SRAM bytes touched per MAC or element op, in elements [E from the WSE-2 datapath above: a
#: vector MAC reads the streamed operand and the accumulator and writes the accumulator back;
#: the broadcast scalar sits in a register].
SRAM_ELEMS_PER_MAC = 3

#: Routing paths per core kept for host I/O (the memcpy streams) [E], not available to kernels.
RESERVED_ROUTING_PATHS = 2

#: Off-wafer I/O energy, pJ/B [E]: about 5 pJ/bit for a long-reach 100 GbE SerDes and MAC.
IO_PJ_PER_BYTE = 40.0

#: Element passes per element for the non-matmul kinds [E, the usual kernels]: norm 2 (sum of
#: squares, then scale), softmax 3 (max, exp-and-sum, scale), others 1.
PASSES = {ir.NORM: 2, ir.SOFTMAX: 3}

#: A WSE-2 core, counted from its parts [P Cerebras, Hot Chips 31 (WSE-1) and 34 (WSE-2): a
#: core does four 16-bit FMACs per cycle (two 64-bit operand reads and one write per cycle),
#: has 48 KB of SRAM, a 256-byte cache and a router to its four neighbours and itself]. The
#: router is taken as a 4-flit input queue on each of its 5 ports and a 5x5 crossbar of
#: 5:1 multiplexers, on 38-bit flits (32 data + 5 colour + 1 control bits) [E].
WSE2_FMACS_PER_CORE = 4
WSE2_CACHE_BYTES = 256
WSE2_ROUTER_PORTS = 5
WSE2_ROUTER_QUEUE_FLITS = 4
WSE2_FLIT_BITS = 38
#: Cores built on a WSE-2 [D Cerebras: 850,000] and cores in its compiled fabric [P/R
#: WaferLLM: 757 x 996]: the spares are paid for by the cores in use.
WSE2_CORES_BUILT = 850_000
WSE2_FABRIC_CORES = 757 * 996
#: Spare cores per core in use (their area is in ``core_logic_area_mm2``; they carry the
#: wafer's yield, ``physical.wafer_yield``).
WSE2_SPARE_FRACTION = WSE2_CORES_BUILT / WSE2_FABRIC_CORES - 1


def wse2_core_logic_area_mm2(node_nm: int = 7, sram_bytes: float = 48 * 1024) -> float:
    """Area per fabric core apart from its own SRAM, mm^2: the FMAC datapath
    (:func:`technology.pe_area_mm2`), the router's queues and crossbar and the cache (flip-flops
    and multiplexers over ``technology.LOGIC_PLACEMENT_UTILISATION``), what every die pays for
    what a template does not count (``physical.CONTROL_OVERHEAD`` of the datapath and router,
    ``physical.control_mm2``), and the spare cores' share (their logic and SRAM). The core's
    SRAM pays no ``physical.SRAM_OVERHEAD``: it sits in the core tile beside the datapath it
    feeds, and the on-chip network whose share that overhead stands for on a monolithic die is
    the tile's router, counted here. Nothing here is taken from the published wafer area, which
    ``docs/validation.md`` (physical model) compares against."""
    fmacs = WSE2_FMACS_PER_CORE * tech.pe_area_mm2("fp16", node_nm)
    flits = WSE2_ROUTER_PORTS * WSE2_ROUTER_QUEUE_FLITS * WSE2_FLIT_BITS
    mux2s = WSE2_ROUTER_PORTS * WSE2_FLIT_BITS * (WSE2_ROUTER_PORTS - 1)   # 5:1 = four 2:1
    cells_um2 = (flits + 8 * WSE2_CACHE_BYTES) * tech.FLIP_FLOP_UM2 + mux2s * tech.MUX2_UM2
    router = cells_um2 / tech.LOGIC_PLACEMENT_UTILISATION * 1e-6 * tech.area_scale(node_nm)
    sram = tech.sram_area_mm2(sram_bytes, node_nm)
    core = fmacs + router + physical.control_mm2(fmacs + router, 0.0)
    return (1 + WSE2_SPARE_FRACTION) * core + WSE2_SPARE_FRACTION * sram


#: Area per core apart from its SRAM at the WSE-2's 7 nm, mm^2.
WSE2_CORE_LOGIC_AREA_MM2 = round(wse2_core_logic_area_mm2(), 8)

_PHASE_REGION = {"decode": "decode", "prefill": "prefill", "forward": "prefill"}
#: Where weights and KV live (``placement``) and how the KV cache grows (``kv_cache``).
PLACEMENTS = ("spread", "region")
KV_CACHES = ("shift", "concat")
#: Most tokens a decode-phase step (a batch of decodes) maps with the decode layout on the
#: decode region; a step with more (a serving iteration holding a prompt) maps as prefill on
#: the prefill region [E: a decode GEMV replicates its activations along Y, so its activation
#: buffers grow with the rows; WaferLLM decodes one request at a time].
DECODE_MAX_TOKENS = 64


@dataclass(frozen=True)
class _Plan:
    """One op mapped onto a region: its mesh cost and its element-op count over the region."""

    cost: mesh.MeshCost
    vector_elems: float = 0.0  # element operations summed over the region (energy)
    act_elems_per_core: float = 0.0  # activation working set per core


class Wafer(Template):
    """Wafer-scale mesh under PLMR (WaferLLM, OSDI 2025); see the module docstring."""

    name = "wafer"
    description = ("wafer-scale core mesh (Cerebras WSE-2 class) under the PLMR model: "
                   "MeshGEMM / MeshGEMV / K-tree all-reduce, SRAM capacity, routing limits")
    #: Every op holds the one ``region`` unit: ops run one after another (the fast path adds
    #: their latencies, as the simulator does).
    SERIAL_UNIT = True

    PARAMS = (
        Param("mesh_width", int, "cores", 757, "cores along X (WSE-2 fabric 757 [P/R])",
              1, 4096, step=1),
        Param("mesh_height", int, "cores", 996, "cores along Y (WSE-2 fabric 996 [P/R])",
              1, 4096, step=1),
        Param("sram_per_core_kb", float, "KiB", 48.0, "SRAM per core (WSE-2 48 KiB [P])",
              1.0, 65536.0, log=True),
        Param("reserved_sram_per_core_kb", float, "KiB", 2.0,
              "SRAM per core taken by code, runtime and kernel buffers beside the weight, KV "
              "and activation tiles [E: WaferLLM's WSE-2 decode kernel declares under 0.5 KiB "
              "of such buffers at LLaMA3-8B's tiles (Decode/WSE-2/src/decode.csl); ~1.5 KiB "
              "taken for its code and the memcpy runtime]", 0.0, 1024.0),
        Param("clock_hz", float, "Hz", 1.1e9, "core clock (WSE-2 up to 1.1 GHz [P])",
              1e8, 5e9, log=True),
        Param("macs_per_core_per_cycle", float, "MAC/cycle", 2.0,
              "32-bit MAC lanes per core per cycle; 16-bit types pack 2 per lane, 8-bit 4 "
              "(WSE-2: 2, its four fp16 FMACs per core per cycle [P Cerebras, Hot Chips 34])",
              0.125, 64.0, log=True),
        Param("link_bytes_per_cycle", float, "B/cycle", 4.0,
              "link bandwidth per direction (WSE-2: one 32-bit word per cycle [P])",
              0.5, 256.0, log=True),
        Param("alpha_cycles", float, "cycles/hop", 1.0,
              "PLMR alpha: latency per hop (WSE-2 router: one cycle per hop [E])", 0.0, 100.0),
        Param("beta_cycles", float, "cycles/stage", 20.0,
              "PLMR beta: cost of one software routing stage, a core receiving and re-sending a "
              "message (WSE-2: a few tens of cycles [E])", 0.0, 10000.0),
        Param("vector_op_cycles", float, "cycles/instr", 13.4,
              "issue cost of one vector (DSD) instruction of a local tile product, on top of "
              "its elements: a GEMM tile is kt x nt instructions over mt elements, each a "
              "function call per element (WaferLLM's meshgemm.csl @map), a GEMV tile kt over "
              "nt (WSE-2: 13.4 [F: fitted on one row, WaferLLM Table 3's LLaMA3-8B prefill on "
              "720 x 720; dse.reproduce.waferllm.fit_vector_op_cycles]; 0: tile products at "
              "the datapath's peak)", 0.0, 1000.0),
        Param("routing_paths_per_core", int, "paths", 24,
              "routing paths (colours) per core (WSE-2: 24 routable colours, < 32 by the 5-bit "
              "header [P, E])", 1, 4096, step=1),
        Param("relay", bool, "", True,
              "patterns needing more routing paths than a core has relay through software "
              "stages (else the design is infeasible)"),
        Param("io_bandwidth_Bps", float, "B/s", 150e9,
              "off-wafer I/O bandwidth (CS-2: 12 x 100 GbE = 150 GB/s [D])", 1e8, 1e14,
              log=True),
        Param("prefill_region_width", int, "cores", 750, "prefill region width", 1, 4096,
              step=1),
        Param("prefill_region_height", int, "cores", 750, "prefill region height", 1, 4096,
              step=1),
        Param("decode_region_width", int, "cores", 750,
              "decode region width (WaferLLM's largest grid 750 x 750 [P])", 1, 4096, step=1),
        Param("decode_region_height", int, "cores", 750, "decode region height", 1, 4096,
              step=1),
        Param("gemm_algorithm", str, "", "meshgemm", "prefill GEMM algorithm",
              choices=mesh.GEMM_ALGORITHMS),
        Param("summa_broadcast", str, "", "switch",
              "how the summa algorithm routes each step's row/column broadcast: switch = O(1) "
              "routes per axis re-pointed at the step's root by a control message (one routing "
              "stage) [E]; relay = a static route per root, O(W + H) paths, relayed past the "
              "core's limit (WaferLLM's characterisation [P])", choices=mesh.SUMMA_BROADCASTS),
        Param("allreduce", str, "", "ktree", "all-reduce of MeshGEMV, norms and attention",
              choices=mesh.ALLREDUCE_ALGORITHMS),
        Param("ktree_k", int, "levels", 2, "levels of the K-tree all-reduce (WaferLLM: 2 [P])",
              1, 8, step=1),
        Param("placement", str, "", "spread",
              "where weights and KV cache live: spread = every layer computes on a region of "
              "its phase's size, the layers' regions placed at offsets that spread weights and "
              "KV evenly over the whole fabric (WaferLLM [P Sec. 4.4, 7.4]); region = all on "
              "the phase's region, each matrix tiled with its tiles rounded up",
              choices=PLACEMENTS),
        Param("kv_cache", str, "", "shift",
              "KV cache management: shift = each new token's KV pushes the oldest row up, "
              "balanced over the cores (WaferLLM [P Sec. 4.3]); concat = appended to the last "
              "row of cores (PagedAttention-style), which fills first", choices=KV_CACHES),
        Param("dtype", str, "", "fp16", "MAC format of the cores (accelerators.mac_formats); "
              "without number formats in the workload also the type stored on the wafer",
              choices=mac_formats.MAC_FORMATS),
        Param("node_nm", int, "nm", 7, "process node (WSE-2: TSMC 7 nm [D])",
              choices=tech.NODES_NM),
        Param("core_logic_area_mm2", float, "mm²", WSE2_CORE_LOGIC_AREA_MM2,
              "area per core apart from its SRAM: datapath, router, control and the spare cores' "
              "share (WSE-2 from its parts: wse2_core_logic_area_mm2) [E]",
              1e-4, 10.0, log=True),
        Param("tdp_w", float, "W", 15000.0,
              "power budget of the wafer (WSE-2 ~15 kW: 37x an A100's 400 W [P WaferLLM]; "
              "the CS-2 system around it 23 kW [D Cerebras])",
              1.0, 1e6, log=True),
    )

    PRESETS = {
        "wse2": {},
        # A 32 x 32 mesh (1,024 cores) with WSE-2 cores, for tests and quick studies.
        "wse-1k": {"mesh_width": 32, "mesh_height": 32, "prefill_region_width": 32,
                   "prefill_region_height": 32, "decode_region_width": 32,
                   "decode_region_height": 32, "tdp_w": 100.0},
    }
    DEFAULT_PRESET = "wse2"

    # --- configuration ----------------------------------------------------------------------

    def validate(self) -> tuple[str, Any, str] | None:
        hw = self.hw
        for phase in ("prefill", "decode"):
            for axis, mesh_axis in (("width", "mesh_width"), ("height", "mesh_height")):
                key = f"{phase}_region_{axis}"
                if hw[key] > hw[mesh_axis]:
                    return (f"hw.{key}", hw[key], f"expected at most {mesh_axis}={hw[mesh_axis]}")
        if hw.reserved_sram_per_core_kb >= hw.sram_per_core_kb:
            return ("hw.reserved_sram_per_core_kb", hw.reserved_sram_per_core_kb,
                    f"expected less than sram_per_core_kb={hw.sram_per_core_kb:g}")
        if hw.routing_paths_per_core <= RESERVED_ROUTING_PATHS:
            return ("hw.routing_paths_per_core", hw.routing_paths_per_core,
                    f"expected more than the {RESERVED_ROUTING_PATHS} kept for host I/O")
        return None

    @cached_property
    def bytes_per_elem(self) -> int:
        return mac_formats.storage_bytes(self.hw.dtype)

    def element_bytes(self, workload: ir.Workload) -> int:
        """Bytes per element the cores store a workload without number formats in: the
        design's own format's (:meth:`bytes_per_elem`; an ``mxfp8_e4m3`` wafer keeps a bf16
        workload's tensors in one byte), as its memory layout counts them."""
        return self.bytes_per_elem

    @property
    def cores(self) -> int:
        return self.hw.mesh_width * self.hw.mesh_height

    def region(self, phase: str) -> tuple[int, int]:
        """(width, height) of the region that runs ``phase`` (forward uses prefill's)."""
        return self._regions[_PHASE_REGION.get(phase, "prefill")]

    @cached_property
    def _regions(self) -> dict[str, tuple[int, int]]:
        hw = self.hw
        return {which: (hw[f"{which}_region_width"], hw[f"{which}_region_height"])
                for which in ("prefill", "decode")}

    @cached_property
    def fabric(self) -> mesh.Fabric:
        """The PLMR parameters at this design's data type."""
        hw, b = self.hw, self.bytes_per_elem
        pack = max(WORD_BYTES // b, 1) if b <= WORD_BYTES else WORD_BYTES / b
        return mesh.Fabric(alpha_cycles=hw.alpha_cycles, beta_cycles=hw.beta_cycles,
                           link_elems_per_cycle=hw.link_bytes_per_cycle / b,
                           macs_per_cycle=hw.macs_per_core_per_cycle * pack,
                           routing_paths=hw.routing_paths_per_core - RESERVED_ROUTING_PATHS,
                           relay=hw.relay, summa_broadcast=hw.summa_broadcast,
                           vector_op_cycles=hw.vector_op_cycles)

    # --- costs -----------------------------------------------------------------------------

    def cost(self, op: Op) -> OpCost:
        """Cost of ``op`` alone: decode mapping for one-token ops (matmul with one row,
        attention with one query), else prefill's. :meth:`costs` uses the workload's phase."""
        one_token = (op.kind == ir.MATMUL and op.attrs.get("m", 0) * op.attrs.get("batch", 1) == 1
                     or op.kind == ir.ATTENTION and op.attrs.get("q_len", 0) == 1)
        return self.op_cost(op, "decode" if one_token else "prefill")

    def costs(self, workload: ir.Workload) -> list[OpCost]:
        return [self.cost_in(op, c) for op, c in zip(workload.ops, self.op_contexts(workload))]

    @classmethod
    def op_contexts(cls, workload: ir.Workload) -> list[tuple[str, bool]]:
        """Per op: the workload's phase and whether the op is a sink (its output leaves the
        wafer in LLM phases), all :meth:`costs` reads beyond the op (computed once per
        workload)."""
        def build() -> list[tuple[str, bool]]:
            g = workload.graph
            phase = cls.mapping_phase(workload)
            return [(phase, g.out_degree(op.name) == 0) for op in workload.ops]
        return per_workload(workload, "wafer-op-contexts", build)

    @staticmethod
    def mapping_phase(workload: ir.Workload) -> str:
        """The layout a workload maps with: its phase, except a decode-phase step whose ops
        carry more than :data:`DECODE_MAX_TOKENS` tokens (a serving iteration holding a prompt,
        :mod:`workloads.iteration`), which maps as prefill on the prefill region."""
        if workload.phase != "decode":
            return workload.phase
        return "prefill" if _max_tokens(workload) > DECODE_MAX_TOKENS else "decode"

    def cost_in(self, op: Op, context: tuple[str, bool]) -> OpCost:
        """Cost of ``op`` in its phase with its off-wafer bytes: in LLM phases, token ids in
        (embeddings) and a sink's output (the logits) out; none in ``forward`` phase."""
        phase, sink = context
        nbytes = 0.0
        if phase in ("prefill", "decode"):
            if op.kind == ir.EMBEDDING:
                nbytes += op.activation_bytes_read  # the token ids
            if sink:
                nbytes += op.activation_bytes_written * (
                    1.0 if "formats" in op.attrs
                    else self.bytes_per_elem / max(op.bytes_per_element, 1))
        return self.op_cost(op, phase, nbytes)

    def op_cost(self, op: Op, phase: str, io_bytes: float = 0.0) -> OpCost:
        """Cost of ``op`` in ``phase`` on that phase's region, plus ``io_bytes`` off-wafer."""
        if op.kind in ir.COMPOSITE_KINDS:   # its parts on the wafer, then its off-wafer bytes
            c = cost_composite(op, lambda part: self.op_cost(part, phase))
            io_s = io_bytes / self.hw.io_bandwidth_Bps
            return replace(c, latency_s=c.latency_s + io_s,
                           traffic={**c.traffic, "io": io_bytes} if io_bytes else c.traffic,
                           energy_j={**c.energy_j, "network": c.energy_j.get("network", 0.0)
                                     + io_bytes * IO_PJ_PER_BYTE * 1e-12})
        plan = self.plan_op(op, phase)
        w, h = self.region(phase)
        return self._finish(plan, io_bytes, w * h, self._dequantises(op))

    def _dequantises(self, op: Op) -> bool:
        """True when the cores scale ``op``'s weights (or KV cache) into their MAC format on
        every use (block- or group-scaled operands they do not take natively)."""
        if "formats" not in op.attrs or op.kind not in GEMM_KINDS:
            return False
        modes = mac_formats.operand_modes(self.hw.dtype, op)
        return not isinstance(modes, str) and modes[1] == "dequant"

    def plan_op(self, op: Op, phase: str) -> _Plan:
        """The op mapped onto its phase's region (decode ops: the slower orientation);
        memoised per op object, so :meth:`check` and :meth:`costs` map each op once."""
        key = (id(op), phase)
        hit = self._plan_memo.get(key)
        if hit is not None and hit[0] is op:   # the op is held, so its id is not reused
            return hit[1]
        plan = self._plan_op(op, phase)
        self._plan_memo[key] = (op, plan)
        return plan

    @cached_property
    def _plan_memo(self) -> dict[tuple[int, str], tuple[Op, _Plan]]:
        return {}

    def _plan_op(self, op: Op, phase: str) -> _Plan:
        width, height = self.region(phase)
        if phase == "decode" or _rows(op) == 1 and op.kind == ir.MATMUL:
            # a single-row matmul (a prefill's LM head on the last token) is a GEMV anywhere
            a = self._decode_plan(op, width, height)
            if width == height:
                return a
            b = self._decode_plan(op, height, width)
            return a if a.cost.cycles >= b.cost.cycles else b
        return self._prefill_plan(op, width, height)

    def _decode_plan(self, op: Op, w: int, h: int) -> _Plan:
        """Decode: the activation vector split along X (``w``), replicated along Y (``h``)."""
        f, hw = self.fabric, self.hw
        kind, a = op.kind, op.attrs
        if kind in (ir.MATMUL, ir.CONV):
            rows, k, n, batch = _gemm_shape(op)
            c = mesh.gemv(f, rows * batch, k, n, w, h, hw.allreduce, hw.ktree_k)
            return _Plan(c, act_elems_per_core=c.buffer_elems)
        if kind == ir.ATTENTION:
            return self._decode_attention(op, w, h)
        elems = _elements(op)
        per_core = math.ceil(elems / w)
        if kind in (ir.NORM, ir.SOFTMAX, ir.REDUCTION):
            rows = max(elems // max(_last_dim(op), 1), 1)
            local = _local(f, per_core * PASSES.get(kind, 1))
            reduces = 2 if kind == ir.SOFTMAX else 1
            stats = 2 if kind == ir.NORM and "layer" in op.target else 1
            ar = mesh.allreduce(f, hw.allreduce, w, rows * stats, hw.ktree_k, lines=h)
            c = local.then(ar.times(reduces))
            return _Plan(c, vector_elems=elems * PASSES.get(kind, 1) * h,
                         act_elems_per_core=2 * per_core)
        if kind == ir.DATA_MOVEMENT and (a.get("kv_append") or op.kv_bytes_written):
            # shift-based KV cache: the new entry enters row 0 and every core passes its oldest
            # entry one row down, so the cache stays balanced over the region.
            c = mesh.neighbour_shift(f, per_core, 1, lines=w, cores_per_line=h)
            return _Plan(c, act_elems_per_core=per_core)
        if kind == ir.EMBEDDING:
            c = mesh.broadcast(f, h, per_core, lines=w)
            return _Plan(c, act_elems_per_core=per_core)
        if kind in (ir.HASHGRID, ir.UNKNOWN):
            return self._scatter_plan(op, w, h)
        ops = element_ops(op, _elements(op))   # elementwise and local data movement
        c = _local(f, math.ceil(ops / w))
        return _Plan(c, vector_elems=ops * h, act_elems_per_core=2 * per_core)

    def _decode_attention(self, op: Op, w: int, h: int) -> _Plan:
        """One-query attention over a KV cache of ``kv_len`` tokens (tokens along Y, kv features
        along X): partial scores, all-reduce within each head's columns, softmax statistics
        all-reduced along Y, then P.V and the output all-reduced along Y."""
        f, hw = self.fabric, self.hw
        a = op.attrs
        b, q = a.get("batch", 1), a.get("q_len", 1)
        heads, kv_heads = a.get("heads", 1), a.get("kv_heads", a.get("heads", 1))
        d, dv, ctx = a.get("head_dim", 1), a.get("value_dim", a.get("head_dim", 1)), a["kv_len"]
        group = max(heads // max(kv_heads, 1), 1)
        ty = math.ceil(ctx / h)  # cached tokens per core
        fx, fxv = math.ceil(kv_heads * d / w), math.ceil(kv_heads * dv / w)
        heads_here = math.ceil(kv_heads / w)  # kv heads with features on one core
        span = max(w // max(kv_heads, 1), 1)  # cores sharing one kv head's features
        rows = b * q * group
        scores = rows * ty * heads_here
        qk = _local(f, rows * ty * fx, macs=float(b) * q * heads * ctx * d)
        ar_x = mesh.allreduce(f, hw.allreduce, span, scores, hw.ktree_k, lines=h * (w // span))
        soft = _local(f, scores * PASSES[ir.SOFTMAX])
        stats = mesh.allreduce(f, hw.allreduce, h, rows * heads_here, hw.ktree_k, lines=w)
        pv = _local(f, rows * ty * fxv, macs=float(b) * q * heads * ctx * dv)
        ar_y = mesh.allreduce(f, hw.allreduce, h, rows * fxv, hw.ktree_k, lines=w)
        c = qk.then(ar_x).then(soft).then(stats.times(2)).then(pv).then(ar_y)
        act = scores + rows * (fx + fxv)
        return _Plan(c, vector_elems=float(b) * q * heads * ctx * PASSES[ir.SOFTMAX],
                     act_elems_per_core=act)

    def _prefill_plan(self, op: Op, w: int, h: int) -> _Plan:
        """Prefill / forward: tokens along Y, features along X, GEMMs with ``gemm_algorithm``."""
        f, hw = self.fabric, self.hw
        kind = op.kind
        if kind in (ir.MATMUL, ir.CONV):
            m, k, n, batch = _gemm_shape(op)
            c = mesh.batched_gemm(f, hw.gemm_algorithm, m, k, n, w, h, batch)
            return _Plan(c, act_elems_per_core=c.buffer_elems)
        if kind == ir.ATTENTION:
            return self._prefill_attention(op, w, h)
        elems = _elements(op)
        cores = w * h
        per_core = math.ceil(elems / cores)
        if kind in (ir.NORM, ir.SOFTMAX, ir.REDUCTION):
            last = max(_last_dim(op), 1)
            rows_here = math.ceil(max(elems // last, 1) / h)
            per_core = rows_here * math.ceil(last / w)
            local = _local(f, per_core * PASSES.get(kind, 1))
            reduces = 2 if kind == ir.SOFTMAX else 1
            stats = 2 if kind == ir.NORM and "layer" in op.target else 1
            ar = mesh.allreduce(f, hw.allreduce, w, rows_here * stats, hw.ktree_k, lines=h)
            return _Plan(local.then(ar.times(reduces)), vector_elems=elems * PASSES.get(kind, 1),
                         act_elems_per_core=2 * per_core)
        if kind == ir.EMBEDDING:
            # each token's row travels from the core row that stores it to the token's row
            last = max(_last_dim(op), 1)
            column = max(elems // last, 1) * math.ceil(last / w)
            c = mesh.broadcast(f, h, column, lines=w)
            return _Plan(c, act_elems_per_core=per_core)
        if kind in (ir.HASHGRID, ir.UNKNOWN):
            return self._scatter_plan(op, w, h)
        ops = element_ops(op, _elements(op))
        c = _local(f, math.ceil(ops / cores))
        return _Plan(c, vector_elems=ops, act_elems_per_core=2 * per_core)

    def _prefill_attention(self, op: Op, w: int, h: int) -> _Plan:
        """Causal self-attention as two batched GEMMs (Q K^T, then P V) over batch x heads (the
        region cut into per-head sub-grids when that is faster), with the softmax statistics of
        each query row all-reduced along X."""
        f, hw = self.fabric, self.hw
        a = op.attrs
        b, heads = a.get("batch", 1), a.get("heads", 1)
        q, kv, d = a.get("q_len", 1), a.get("kv_len", 1), a.get("head_dim", 1)
        dv = a.get("value_dim", d)
        frac = (a.get("causal_flops", op.flops) / op.flops) if op.flops else 1.0
        bh = b * heads
        qk = mesh.batched_gemm(f, hw.gemm_algorithm, q, d, kv, w, h, bh, frac)
        tile = bh * math.ceil(q / h) * math.ceil(kv / w)
        soft = _local(f, tile * frac * PASSES[ir.SOFTMAX])
        stats = mesh.allreduce(f, hw.allreduce, w, bh * math.ceil(q / h), hw.ktree_k, lines=h)
        pv = mesh.batched_gemm(f, hw.gemm_algorithm, q, kv, dv, w, h, bh, frac)
        c = qk.then(soft).then(stats.times(2)).then(pv)
        # the working set of one (batch, head) at a time: WaferLLM runs attention per head
        # group [P Sec. 4.4], so the score tiles of the others need not be held at once
        return _Plan(c, vector_elems=float(bh) * q * kv * frac * PASSES[ir.SOFTMAX],
                     act_elems_per_core=math.ceil(
                         (tile + max(qk.buffer_elems, pv.buffer_elems)) / bh))

    def _scatter_plan(self, op: Op, w: int, h: int) -> _Plan:
        """Hash-grid lookups and unknown ops: their bytes move between random cores, limited by
        the region's link capacity, after one worst-case PLMR latency."""
        f = self.fabric
        elems = op.total_bytes / max(op.bytes_per_element, 1)
        mean_hops = (w + h) / 3.0
        links = 2 * (w * (h - 1) + h * (w - 1)) or 1
        cycles = (mesh.worst_case_latency_cycles(f, w, h, 1)
                  + elems * mean_hops / (links * f.link_elems_per_cycle))
        return _Plan(mesh.MeshCost(cycles=cycles, hops=w + h, stages=1, paths=2,
                                   elem_hops=elems * mean_hops),
                     act_elems_per_core=math.ceil(elems / (w * h)))

    @cached_property
    def _energy_per_unit(self) -> tuple[float, float, float, float]:
        """J per MAC, per element op, per SRAM byte and per NoC byte-hop of this design."""
        hw = self.hw
        return (mac_formats.mac_energy_j(hw.dtype, hw.node_nm),
                tech.vector_op_energy_j(mac_formats.vector_format(hw.dtype), hw.node_nm),
                tech.sram_energy_j_per_byte(self._sram_bytes, hw.node_nm),
                tech.noc_energy_j_per_byte(self.core_pitch_mm, hw.node_nm))

    def _finish(self, plan: _Plan, io_bytes: float, region_cores: int,
                dequant: bool = False) -> OpCost:
        """The op's cost from its plan on ``region_cores`` cores; ``dequant``: every MAC's
        weight operand is first scaled into the MAC format (one more MAC's energy each [E])."""
        hw, b, c = self.hw, self.bytes_per_elem, plan.cost
        wafer_s = c.cycles / hw.clock_hz
        io_s = io_bytes / hw.io_bandwidth_Bps
        sram_bytes = SRAM_ELEMS_PER_MAC * b * (c.macs + plan.vector_elems)
        noc_bytes = c.elem_hops * b
        mac_j, vector_j, sram_j, noc_j = self._energy_per_unit
        active_j = region_cores * self._active_w_per_core * (wafer_s + io_s)
        energy = {
            "compute": c.macs * mac_j * (2 if dequant else 1) + plan.vector_elems * vector_j
            + active_j,
            "onchip_memory": sram_bytes * sram_j,
            "network": noc_bytes * noc_j + io_bytes * IO_PJ_PER_BYTE * 1e-12,
        }
        comm = c.cycles - c.compute_cycles
        bound = "io" if io_s > wafer_s else ("network" if comm > c.compute_cycles else "compute")
        return OpCost(unit="region", latency_s=wafer_s + io_s, compute_s=wafer_s,
                      clock_hz=hw.clock_hz, traffic={"io": io_bytes} if io_bytes else {},
                      bytes_by_level={"sram": sram_bytes, "noc": noc_bytes, "io": io_bytes},
                      energy_j=energy, bound=bound)

    # --- resources, area, power -------------------------------------------------------------

    def resources(self) -> Resources:
        return Resources(units={"region": 1}, channels={"io": self.hw.io_bandwidth_Bps})

    def unused_params(self) -> set[str]:
        """``summa_broadcast`` matters only to ``summa``, ``ktree_k`` only to ``ktree``."""
        hw = self.hw
        return ({"summa_broadcast"} if hw.gemm_algorithm != "summa" else set()) | (
            {"ktree_k"} if hw.allreduce != "ktree" else set())

    def peaks(self, dtype: str) -> Peaks:
        """The larger region's cores at the fabric's MACs per cycle (2 FLOPs each) in the
        design's ``dtype``; the SRAM (where weights and KV cache live) read by every core of
        the mesh at its datapath's operand rate (``SRAM_ELEMS_PER_MAC`` elements per MAC);
        the cheapest FLOP is half a MAC or a vector op at ``node_nm``."""
        busy = max(w * h for w, h in self._regions.values())
        return Peaks(
            flops_per_s={"region": self.peak_flops * busy / self.cores},
            levels=(MemoryLevel("sram", self.sram_bandwidth_Bps,
                                self.cores * self._sram_bytes, self._energy_per_unit[2],
                                resident=True),),
            energy_per_flop_j=min(self._energy_per_unit[0] / 2, self._energy_per_unit[1]))

    @property
    def _sram_bytes(self) -> float:
        return self.hw.sram_per_core_kb * 1024.0

    @cached_property
    def tile_area_mm2(self) -> float:
        """Area of one core with its SRAM and router, mm^2."""
        return self.hw.core_logic_area_mm2 + tech.sram_area_mm2(self._sram_bytes, self.hw.node_nm)

    @cached_property
    def core_pitch_mm(self) -> float:
        """Distance between neighbouring cores (one hop), mm."""
        return math.sqrt(self.tile_area_mm2)

    def floorplan(self) -> Floorplan:
        """One wafer: every core's logic (router and control included, so no further control
        overhead) and SRAM; no off-chip memory (the wafer keeps everything in SRAM); peak power
        as :meth:`peak_power_w`: the larger region busy, its logic the energy tables do not
        count clocked (``clock_hz`` is the core clock times the region's share of the mesh:
        cores outside the regions are clock-gated)."""
        hw = self.hw
        leak = tech.leakage_w(self.cores * hw.core_logic_area_mm2, self.cores * self._sram_bytes,
                              hw.node_nm)
        return Floorplan(node_nm=hw.node_nm, compute_mm2=self.cores * hw.core_logic_area_mm2,
                         sram_mm2=self.cores * tech.sram_area_mm2(self._sram_bytes, hw.node_nm),
                         peak_dynamic_w=self._busy_power_w, leakage_w=leak, memory=None,
                         host_interface="none", wafer_scale=True, control_overhead=0.0,
                         spare_cores=round(self.cores * WSE2_SPARE_FRACTION),
                         clock_hz=hw.clock_hz * self._busy_cores / self.cores)

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s of the whole mesh at its data type (2 per MAC)."""
        return 2.0 * self.cores * self.fabric.macs_per_cycle * self.hw.clock_hz

    @property
    def sram_bandwidth_Bps(self) -> float:
        """Aggregate SRAM bandwidth of the mesh at full rate, B/s: every core's MACs each
        touching ``SRAM_ELEMS_PER_MAC`` elements per cycle (WSE-2: two 64-bit reads and one
        64-bit write per core per cycle [P Cerebras, Hot Chips 31])."""
        return (self.cores * self.fabric.macs_per_cycle * SRAM_ELEMS_PER_MAC
                * self.bytes_per_elem * self.hw.clock_hz)

    def peak_power_w(self) -> float:
        """Static power of the whole mesh plus every core of the larger region computing at full
        rate (each MAC touching SRAM) with its four links busy and its uncounted logic clocked,
        W (the design's TDP). Cores outside the regions idle (clock-gated), paying leakage
        only."""
        return self.physical().tdp_w

    @cached_property
    def _busy_cores(self) -> int:
        hw = self.hw
        return max(hw.prefill_region_width * hw.prefill_region_height,
                   hw.decode_region_width * hw.decode_region_height)

    @cached_property
    def _active_w_per_core(self) -> float:
        """Uncounted-logic power of one busy core, W (charged per op on its region)."""
        return self.physical().active_w / self._busy_cores

    @cached_property
    def _busy_power_w(self) -> float:
        """Dynamic power of the larger region at full rate, W (computed once per design)."""
        hw, f, b = self.hw, self.fabric, self.bytes_per_elem
        mac_j, _, sram_j, noc_j = self._energy_per_unit
        per_cycle_j = (f.macs_per_cycle * (mac_j + SRAM_ELEMS_PER_MAC * b * sram_j)
                       + 4 * hw.link_bytes_per_cycle * noc_j)
        return self._busy_cores * hw.clock_hz * per_cycle_j

    # --- feasibility ------------------------------------------------------------------------

    def storage_cores(self, phase: str) -> int:
        """Cores that hold weights and KV cache in ``phase``: the whole fabric with
        ``placement: spread``, the phase's region otherwise."""
        if self.hw.placement == "spread":
            return self.cores
        width, height = self.region(phase)
        return width * height

    def _memory_layout(self, workload: ir.Workload) -> dict[str, Any]:
        """Elements per core of ``workload`` (weights, KV cache, activations), the KV cache's
        elements per token and core (``kv_per_token``), and the phase (computed once per
        workload and design). O(unique ops): ops with equal signatures are mapped once, their
        sums multiplied by their count (integer element counts, so the sums are exact)."""
        hit = self._layout_memo.get(id(workload))
        if hit is not None and hit[0]() is workload:
            return hit[1]
        layout = self._layout(workload)
        self._layout_memo[id(workload)] = (weakref.ref(workload), layout)
        return layout

    @cached_property
    def _layout_memo(self) -> dict[int, tuple[Any, dict[str, Any]]]:
        return {}

    def _layout(self, workload: ir.Workload) -> dict[str, Any]:
        phase = self.mapping_phase(workload)
        width, height = self.region(phase)
        storage = self.storage_cores(phase)
        spread = self.hw.placement == "spread"
        tiled_elems, tiled = 0.0, 0.0       # weights as region tiles (placement: region)
        kv_total, kv_region, kv_row = 0.0, 0.0, 0.0
        kv_token_total, kv_token_row, attn_layers = 0.0, 0.0, 0
        act_elems = 0.0
        for op, count in _op_counts(workload):
            a = op.attrs
            if op.kind == ir.MATMUL and a.get("weight_operand"):
                k, n, batch = a.get("k", 1), a.get("n", 1), a.get("batch", 1)
                tiled_elems += math.ceil(k / height) * math.ceil(n / width) * batch * count
                tiled += float(k) * n * batch * count
            elif op.kind == ir.CONV and op.weight_bytes:
                k, n, groups = a.get("gemm_k", 1), a.get("gemm_n", 1), a.get("groups", 1)
                tiled_elems += math.ceil(k / height) * math.ceil(n / width) * groups * count
                tiled += float(k) * n * groups * count
            if op.kind == ir.ATTENTION:
                kvh = a.get("kv_heads", a.get("heads", 1))
                feats = kvh * (a.get("head_dim", 1) + a.get("value_dim", a.get("head_dim", 1)))
                b, ctx = a.get("batch", 1), a.get("kv_len", 1)
                kv_total += float(b) * ctx * feats * count
                kv_region += b * math.ceil(ctx / height) * math.ceil(feats / width) * count
                kv_row += b * ctx * math.ceil(feats / width) * count     # all in one row
                kv_token_total += float(b) * feats * count
                kv_token_row += b * math.ceil(feats / width) * count
                attn_layers += count
            act_elems = max(act_elems, self.plan_op(op, phase).act_elems_per_core)
        params = workload.params or sum(op.weight_bytes for op in workload.ops) / max(
            DTYPE_BYTES.get(workload.dtype, 2), 1)
        rest = max(params - tiled, 0.0) / storage   # embeddings, norms: spread evenly
        if spread:
            weights = math.ceil(params / storage) - rest
            # concat [E]: the layers' regions taken round-robin over the fabric / region
            # non-overlapping positions, so this share of the layers ends on the same row
            rows_share = min(1.0, width * height / storage)
            if self.hw.kv_cache == "shift":
                kv, per_token = math.ceil(kv_total / storage), kv_token_total / storage
            else:
                layers_per_row = max(1, math.ceil(attn_layers * rows_share)) if attn_layers else 0
                per_op = kv_row / max(attn_layers, 1)
                kv = per_op * layers_per_row
                per_token = kv_token_row / max(attn_layers, 1) * layers_per_row
        else:
            weights = tiled_elems
            if self.hw.kv_cache == "shift":
                kv, per_token = kv_region, kv_token_total / storage
            else:
                kv, per_token = kv_row, kv_token_row
        extra = 0.0
        if has_formats(workload):
            # a table tied between an embedding and a quantised head is stored twice (the
            # embedding's copy in the base format; workloads.formats.weights_bytes)
            bw, _, ba = self._role_bytes(workload)
            extra = max(0.0, weights_bytes(workload) - tiled * bw
                        - max(params - tiled, 0.0) * ba) / storage
        return {"phase": phase, "weights": weights, "weights_rest": rest, "kv_cache": kv,
                "activations": act_elems, "kv_per_token": per_token,
                "weights_extra_bytes": extra}

    def _role_bytes(self, workload: ir.Workload) -> tuple[float, float, float]:
        """Bytes per element of the weight matrices, the KV cache and the activations (and
        the other parameters): each role in its own number format, else the base dtype."""
        b = self.bytes_per_elem
        if not has_formats(workload):
            return b, b, b
        return (role_format(workload, "weights").bits_per_element / 8,
                role_format(workload, "kv").bits_per_element / 8, workload.bytes_per_element)

    def memory_per_core(self, workload: ir.Workload) -> dict[str, float]:
        """Bytes per core the workload needs: weights, KV cache and the reserve on the cores
        that store them (:meth:`storage_cores`: the whole fabric, or the phase's region), and
        the largest activation working set of an op on its region. Weights are spread evenly
        over the storage cores with ``placement: spread`` (each layer's region placed where
        its share lies), tiled with their tiles rounded up with ``region``; the KV cache
        balanced over rows (``kv_cache: shift``) or piled on each region's last row
        (``concat``)."""
        lay = self._memory_layout(workload)
        bw, bkv, ba = self._role_bytes(workload)
        return {"weights": lay["weights"] * bw + lay["weights_rest"] * ba
                + lay["weights_extra_bytes"],
                "kv_cache": lay["kv_cache"] * bkv, "activations": lay["activations"] * ba,
                "reserved": self.hw.reserved_sram_per_core_kb * 1024.0}

    def kv_capacity_tokens(self, workload: ir.Workload) -> int:
        """Most tokens of KV cache (per sequence of the workload's batch) the design holds
        beside the workload's weights, activations and reserve: the free SRAM of a core over
        the KV bytes one token adds to the fullest core (every core with ``shift``, a region's
        last row with ``concat``). 0 when nothing is free."""
        lay, (_, bkv, _) = self._memory_layout(workload), self._role_bytes(workload)
        need = self.memory_per_core(workload)
        free = self._sram_bytes - need["weights"] - need["activations"] - need["reserved"]
        per_token = lay["kv_per_token"] * bkv
        return max(0, int(free // per_token)) if per_token > 0 else 0

    def memory_capacity_bytes(self) -> float:
        """Bytes the wafer holds a workload in: the storage cores' SRAM less the reserve (the
        decode phase's with ``placement: region``)."""
        return self.storage_cores("decode") * (self._sram_bytes
                                               - self.hw.reserved_sram_per_core_kb * 1024.0)

    def memory_capacity_for(self, workload: ir.Workload) -> float:
        """The storage cores of the phase ``workload`` runs in (with ``placement: region``, a
        prefill or forward step's weights live on the prefill region), less the reserve."""
        return self.storage_cores(self.mapping_phase(workload)) * (
            self._sram_bytes - self.hw.reserved_sram_per_core_kb * 1024.0)

    def capacity_holder(self) -> str:
        return (f"the {self.storage_cores('decode'):,} cores' SRAM "
                f"({self.hw.sram_per_core_kb:g} KiB each, {self.hw.reserved_sram_per_core_kb:g} "
                "KiB reserved)")

    def check(self, workload: ir.Workload) -> str | None:
        """Why ``workload`` cannot run on this design: the wafer cannot be built
        (:meth:`physical`), SRAM per core (:meth:`memory_per_core`), routing paths (with relays
        off), or peak power over ``tdp_w``; None when it can."""
        phys = self.physical()
        if phys is not None and phys.problem and not self.embedded:
            return phys.problem
        phase = self.mapping_phase(workload)
        width, height = self.region(phase)
        try:
            need = self.memory_per_core(workload)
        except InfeasibleDesign as exc:
            return exc.reason
        total = sum(need.values())
        if total > self._sram_bytes:
            parts = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in need.items())
            where = (f"the {self.storage_cores(phase):,} cores of the fabric, computing on a "
                     f"{width} x {height} region" if self.hw.placement == "spread" else
                     f"the {width} x {height} {_PHASE_REGION.get(phase, 'prefill')} region")
            return (f"{workload.model} {workload.phase} needs {total / 1024:.1f} KiB per core "
                    f"on {where} ({parts}) but a core has {self.hw.sram_per_core_kb:g} KiB; "
                    f"use a larger region or more SRAM per core")
        peak = self.peak_power_w()
        if peak > self.hw.tdp_w:
            return (f"peak power {peak / 1e3:.2f} kW (leakage of the {self.hw.mesh_width} x "
                    f"{self.hw.mesh_height} mesh, its larger region busy) exceeds tdp_w "
                    f"{self.hw.tdp_w / 1e3:.2f} kW")
        return None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["derived"] = {"cores": self.cores, "sram_total_bytes": self.cores * self._sram_bytes,
                        "peak_flops": self.peak_flops,
                        "sram_bandwidth_Bps": self.sram_bandwidth_Bps,
                        "area_mm2": self.area_mm2(), "static_power_w": self.static_power_w(),
                        "peak_power_w": self.peak_power_w()}
        return d


# --- helpers -----------------------------------------------------------------------------------

def _op_counts(workload: ir.Workload) -> list[tuple[Op, int]]:
    """The workload's ops with equal signatures merged (:func:`workloads.structure.groups`):
    ``(first such op, how many)`` in order of first appearance."""
    def build() -> list[tuple[Op, int]]:
        unique, of = structure.groups(workload)
        counts = Counter(of)
        return [(op, counts[g]) for g, op in enumerate(unique)]
    return per_workload(workload, "op-counts", build)


def _max_tokens(workload: ir.Workload) -> int:
    """Most token rows of the workload's weight matmuls (its tokens per step)."""
    return max((_rows(op) for op, _ in _op_counts(workload)
                if op.kind == ir.MATMUL and op.attrs.get("weight_operand")), default=1)


def _local(f: mesh.Fabric, per_core: float, macs: float = 0.0) -> mesh.MeshCost:
    """Local work on every core: ``per_core`` MACs or element ops; ``macs`` over the region."""
    cycles = mesh.compute_cycles(f, per_core)
    return mesh.MeshCost(cycles=cycles, compute_cycles=cycles, macs=macs)


def _rows(op: Op) -> int:
    a = op.attrs
    return a.get("m", 0) * a.get("batch", 1) if op.kind == ir.MATMUL else 0


def _gemm_shape(op: Op) -> tuple[int, int, int, int]:
    """(m, k, n, batch) of a matmul, or of a convolution's im2col GEMM (batch = groups)."""
    a = op.attrs
    if op.kind == ir.CONV:
        return a.get("gemm_m", 1), a.get("gemm_k", 1), a.get("gemm_n", 1), a.get("groups", 1)
    return a.get("m", 1), a.get("k", 1), a.get("n", 1), a.get("batch", 1)


def _elements(op: Op) -> int:
    """Output elements of a non-GEMM op (``attrs['elements']``, else from its shapes)."""
    if "elements" in op.attrs:
        return max(int(op.attrs["elements"]), 1)
    shapes = op.output_shapes or op.input_shapes
    return max(sum(math.prod(s) for s in shapes), 1) if shapes else 1


def _last_dim(op: Op) -> int:
    shapes = op.output_shapes or op.input_shapes
    return shapes[0][-1] if shapes and shapes[0] else 1
