"""``neural_graphics``: an NGPC-style cluster of neural-field processors beside a GPU.

After Mubarik et al., "Hardware Acceleration of Neural Graphics", ISCA 2023 (arXiv 2303.05735):
``nfps`` neural-field processors (NFPs), each an encoding engine with ``encoding_units`` level
units (one per hash-grid level, ``grid_sram_kb`` of grid SRAM each, ``lookups_per_cycle``
corner look-ups per cycle) feeding an MLP engine (a ``mlp_rows x mlp_cols`` MAC array), next
to a GPU preset (``gpu``) that runs the remaining kernels: ray generation, sampling,
compositing — fused into two kernels per batch when ``fuse_gpu_kernels`` (the paper measured
9.94x from fusing them).

Units for the simulator: ``encoder`` (all NFPs' encoding engines, one batch at a time, its
points split evenly over the NFPs), ``mlp`` (all MLP engines, likewise) and ``gpu``; one shared
channel ``dram`` (the GPU's memory, which the cluster's spilled grid look-ups also use).
:meth:`NGPC.plan` turns a neural-field workload into a frame of ray batches
(:func:`workloads.neural_frames.pipeline`): the engine then overlaps the GPU's kernels for one
batch with the cluster's encoding and MLP for the next — real overlap, not a formula.

Per op:

* ``hashgrid``: :func:`accelerators.hashgrid_cost.engine_cost` on one NFP's share of the
  points: look-ups at ``lookups_per_cycle`` per unit, units in parallel; a level whose table
  exceeds its unit's grid SRAM fetches the look-ups that miss from DRAM (traffic on ``dram``).
* ``matmul``: the output-stationary MLP array (:func:`hashgrid_cost.mlp_layer_cycles`);
  activations that follow a matmul run in its drain (free); each working NFP loads the layer's
  weights from DRAM once per op (8 KiB for a 64 x 64 fp16 layer).
* other element-wise ops (e.g. NeRF's spherical-harmonics direction encoding): the encoding
  engine's ``vector_lanes`` lanes per NFP, one lane operation per FLOP; concatenation is
  wiring into the MLP input buffer. A frame's points stream from engine to engine
  (:func:`mark_streamed`); an op of a workload run as it is (a language model, a training
  step's optimizer) reads its activations from DRAM and writes its outputs there, matmuls
  included.
* GPU-side ops (``attrs["device"] == "gpu"``) and ops the cluster has no engine for
  (attention, convolution, unknown): the ``gpu`` template's cost, on unit ``gpu``; remaining
  kernels at the calibrated irregular-kernel efficiency :data:`RAY_KERNEL_EFFICIENCY`, fused
  ones ``fusion_speedup`` times faster than the unfused kernels they replace.

Area and power: MACs, SRAM, hash and interpolation lanes from :mod:`accelerators.technology`
at ``node_nm``; :meth:`cluster_area_mm2` is the cluster's silicon (what NGPC adds to the GPU
die); the design (:meth:`floorplan`) is the GPU's die with the cluster on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import networkx as nx

from accelerators import hashgrid_cost as hc, mac_formats
from accelerators import physical, technology as tech
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.capacity import capacity_problem
from accelerators.composite import cost_composite
from accelerators.npu import element_ops
from accelerators.physical import Floorplan
from dse.errors import BadInput
from workloads import ir
from workloads import neural_frames as nf
from workloads.formats import has_formats, op_formats
from workloads.ir import DTYPE_BYTES, Op, Workload

#: Achieved fraction of the ``gpu`` template's time for instant-NGP's unfused remaining kernels
#: (ray generation, marching, compositing, compaction), dimensionless. Those kernels diverge,
#: use atomics for compaction and synchronise with the host every compaction round, so they run
#: far from the bandwidth roofline that the ``gpu`` template assumes for element-wise kernels.
#: Calibrated [P-fit] so that this model's RTX 3090 baseline spends the paper's 72.37% of
#: application time in encoding + MLP with the multi-resolution hash grid (mean over NeRF,
#: NSDF, GIA, NVR at 4K); ``python -m dse.reproduce.ngpc --calibrate`` recomputes it.
RAY_KERNEL_EFFICIENCY = 0.266

#: Kernel-level speed-up of the fused remaining kernels over instant-NGP's unfused ones
#: (dimensionless) [P NGPC abstract: "9.94x kernel-level performance improvement compared to
#: un-fused implementation of the pre-processing and the post-processing kernels"].
FUSION_SPEEDUP = 9.94

#: Element-wise targets that an MLP engine applies to outputs as they drain (no extra time).
EPILOGUE_TARGETS = frozenset({"relu", "sigmoid", "exp", "softplus", "tanh", "gelu", "silu",
                              "leaky_relu", "relu_", "sigmoid_"})

#: Area of one 32-bit integer multiplier of a hash lane, taken equal to an fp32 MAC at the same
#: node [E: a 32 x 32 multiplier dominates both].
HASH_MULTIPLIER_AREA = "fp32"
#: Multipliers per hash lane: one per coordinate axis, up to 3-D [P instant-NGP eq. 4].
HASH_MULTIPLIERS_PER_LANE = 3
#: fp16 multiply-adds per interpolation lane: the corner weight (2 multiplies for a 3-D
#: trilinear weight) plus one MAC per feature (2 features) [P instant-NGP sec. 3; E lane shape].
INTERP_MACS_PER_LANE = 4
#: Area of one element-wise vector lane relative to one MAC of the datapath dtype [E: as in the
#: ``npu`` template, a MAC plus a share of a special-function unit].
VECTOR_LANE_AREA_PER_MAC = 1.5
#: Control, sequencing and the NFP's port to the GPU's memory crossbar, as a fraction of the
#: NFP's datapath + SRAM area [E: small next to 16 MiB of SRAM; none of the DRAM PHY or host
#: interface a stand-alone chip needs].
NFP_CONTROL_OVERHEAD = 0.05
#: Bytes of an MLP engine's activation buffer per array row and column: two buffers (ping-pong
#: between layers) of one ``rows x cols`` tile in the datapath dtype [E].
MLP_BUFFER_TILES = 2

#: GPUs the cluster can sit beside: those whose caches the GPU encoding model knows.
GPU_CHOICES = tuple(hc.GPU_CACHES)

#: Default clock: the RTX 3090's boost clock, 1.695 GHz [D NVIDIA GA102 whitepaper], as the
#: cluster sits on the GPU die in the GPU's clock domain [E].
DEFAULT_CLOCK_HZ = 1.695e9

PARAMS = (
    Param("nfps", int, "", 64, "neural-field processors (NFPs) in the cluster", 1, 1024,
          log=True),
    Param("encoding_units", int, "units", 16, "encoding units per NFP, one per grid level "
          "(a unit runs several levels one after the other when there are more levels)",
          1, 64),
    Param("grid_sram_kb", int, "KiB", 1024, "grid SRAM per encoding unit", 1, 1 << 16, log=True),
    Param("lookups_per_cycle", int, "look-ups/cycle", 8, "corner look-ups per cycle per "
          "encoding unit (SRAM banks x hash and interpolation lanes; 8 = one 3-D point)",
          1, 64, log=True),
    Param("mlp_rows", int, "PEs", 64, "rows of each NFP's MLP array (points in flight)",
          4, 512, log=True),
    Param("mlp_cols", int, "PEs", 64, "columns of each NFP's MLP array (neurons)", 4, 512,
          log=True),
    Param("vector_lanes", int, "lanes", 64, "element-wise lanes per NFP (other input "
          "encodings, e.g. spherical harmonics)", 1, 1024, log=True),
    Param("clock_hz", float, "Hz", DEFAULT_CLOCK_HZ, "cluster clock", 1.0e8, 3.0e9, log=True),
    Param("dtype", str, "", "fp16", "MLP datapath (accelerators.mac_formats); without number "
          "formats in the workload also the grid features' type",
          choices=mac_formats.MAC_FORMATS),
    Param("node_nm", int, "nm", 7, "process node of the cluster", choices=tech.NODES_NM),
    Param("gpu", str, "", "rtx3090", "GPU preset that runs the remaining kernels",
          choices=GPU_CHOICES),
    Param("fuse_gpu_kernels", bool, "", True, "run the remaining kernels fused (two kernels "
          "per ray batch) rather than as instant-NGP's separate kernels"),
    Param("fusion_speedup", float, "x", FUSION_SPEEDUP, "speed-up of the fused remaining "
          "kernels over the unfused ones (paper: 9.94)", 1.0, 100.0),
)

PRESETS: dict[str, dict[str, Any]] = {
    f"ngpc-{n}": {"nfps": n} for n in (8, 16, 32, 64)
}


def _is_epilogue(op: Op, graph: nx.DiGraph) -> bool:
    """An activation whose only producer is a matmul or another epilogue (runs in the drain)."""
    if op.kind != ir.ELEMENTWISE or op.target not in EPILOGUE_TARGETS:
        return False
    preds = list(graph.predecessors(op.name))
    if len(preds) != 1:
        return False
    prev = graph.nodes[preds[0]]["op"]
    return prev.kind == ir.MATMUL or bool(prev.attrs.get("ngpc_epilogue"))


def mark_epilogues(workload: Workload) -> Workload:
    """``workload`` with ``attrs["ngpc_epilogue"] = True`` on activations that follow a matmul
    (in topological order, so chains of activations are found). The graph is copied."""
    g = workload.graph.copy()
    for op in list(workload.ops):
        current = g.nodes[op.name]["op"]
        if _is_epilogue(current, g):
            g.nodes[op.name]["op"] = current.with_attrs(ngpc_epilogue=True)
    w = Workload(graph=g, model=workload.model, phase=workload.phase, dtype=workload.dtype,
                 batch=workload.batch, seq=workload.seq, context=workload.context,
                 arch=dict(workload.arch), params=workload.params,
                 unknown_targets=dict(workload.unknown_targets))
    return w


def mark_streamed(workload: Workload) -> Workload:
    """A planned frame (modified in place) with ``attrs["ngpc_streamed"] = True`` on every
    cluster op: a ray batch's points stream from engine to engine through the NFPs' buffers,
    so only the I/O :func:`mark_dram_io` marks crosses DRAM. A cluster op without the mark
    (a workload run as it is: a language model, a training step) reads its activations from
    DRAM and writes its outputs there."""
    g = workload.graph
    for name in list(g.nodes):
        op = g.nodes[name]["op"]
        if op.attrs.get("device") != "gpu" and not op.attrs.get("ngpc_streamed"):
            g.nodes[name]["op"] = op.with_attrs(ngpc_streamed=True)
    return workload


def mark_dram_io(workload: Workload, render: nf.AppRender) -> Workload:
    """A planned frame (fresh from :func:`workloads.neural_frames.pipeline`, modified in place)
    with the cluster's DRAM I/O on its ops: ``attrs["ngpc_input_bytes"]`` on each grid encoding
    that a GPU kernel feeds (the network-input record the "pre" kernel wrote, less the bytes the
    "post" kernel reads itself, e.g. NeRF's dt: 24 of NerfCoordinate's 28 B, fp32 positions and
    directions [R instant-NGP nerf.h]) and ``attrs["ngpc_output_bytes"]`` on each op whose output
    a GPU kernel reads (the network outputs the cluster writes back: the bytes the "post" kernel
    reads). Without these marks the cluster read the positions at the field's fp16 width and
    never wrote the outputs that the GPU then read."""
    g = workload.graph
    record = max(render.input_bytes - render.fused_post_query_read, 0)
    def on_gpu(names) -> bool:
        return any(g.nodes[n]["op"].attrs.get("device") == "gpu" for n in names)

    for name in list(g.nodes):
        op = g.nodes[name]["op"]
        if op.attrs.get("device") == "gpu":
            continue
        marks: dict[str, Any] = {}
        if op.kind == ir.HASHGRID and on_gpu(g.predecessors(name)):
            points = float(op.attrs.get("points") or (op.output_shapes[0][0]
                                                      if op.output_shapes else 0))
            marks["ngpc_input_bytes"] = points * record
        if on_gpu(g.successors(name)):
            marks["ngpc_output_bytes"] = float(op.activation_bytes_written)
        if marks:
            g.nodes[name]["op"] = op.with_attrs(**marks)
    return workload


#: The ``gpu`` designs of the presets in use, shared by every NGPC design (a template's cost
#: depends on its parameters alone).
_GPUS: dict[str, Template] = {}


class NGPC(Template):
    """NGPC-style neural-field processor cluster beside a GPU (see the module docstring)."""

    name = "neural_graphics"
    description = ("NGPC: N neural-field processors (per-level hash-grid encoding units with grid "
                   "SRAM, an MLP array) beside a GPU that runs the remaining kernels, pipelined "
                   "over ray batches")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "ngpc-64"

    def __init__(self, preset: str | None = None, **values: Any):
        super().__init__(preset, **values)
        hw = self.hw
        self._b = mac_formats.storage_bytes(hw.dtype)
        node = hw.node_nm
        self._sram_bytes = hw.grid_sram_kb * 1024
        self._engine = hc.EngineConfig(units=hw.encoding_units, sram_bytes=self._sram_bytes,
                                       lookups_per_cycle=hw.lookups_per_cycle)
        self._buffer_bytes = MLP_BUFFER_TILES * hw.mlp_rows * hw.mlp_cols * self._b
        self._grid_j = tech.sram_energy_j_per_byte(self._sram_bytes, node)
        self._buffer_j = tech.sram_energy_j_per_byte(self._buffer_bytes, node)
        self._reg_j = tech.register_energy_j_per_byte(node)
        self._mac_j = mac_formats.mac_energy_j(hw.dtype, node)
        self._vec_j = tech.vector_op_energy_j(mac_formats.vector_format(hw.dtype), node)
        self._int_add_j = tech.INT32_OP_ENERGY_PJ["add"] * 1e-12 * tech.energy_scale(node)
        self._int_mult_j = tech.INT32_OP_ENERGY_PJ["mult"] * 1e-12 * tech.energy_scale(node)
        self._caches = hc.GPU_CACHES[hw.gpu]
        self._gpu_template: Template | None = None
        self._cache: dict[tuple, OpCost] = {}

    # ------------------------------------------------------------------------------ the GPU
    @property
    def gpu(self) -> Template:
        """The ``gpu`` template preset that runs the remaining kernels (built on first use, one
        per preset for every design: it has no parameter of its own)."""
        if self._gpu_template is None:
            preset = self.hw.gpu
            if preset not in _GPUS:
                from accelerators.registry import make_accelerator
                _GPUS[preset] = make_accelerator(f"gpu:{preset}")
            self._gpu_template = _GPUS[preset]
        return self._gpu_template

    @property
    def dram_bandwidth_Bps(self) -> float:
        """The GPU's memory bandwidth, shared by the GPU's kernels and the cluster's spills."""
        return self._caches.dram_Bps

    # ------------------------------------------------------------------------------ planning
    def plan(self, workload: Workload) -> Workload:
        """A neural-field workload becomes its frame's ray-batch pipeline (the frame attached
        with :func:`workloads.neural_frames.attach_frame`, else one "frame" of the captured
        batch), its cluster ops streaming through the NFPs (:func:`mark_streamed`); other
        workloads run as they are, their cluster ops reading and writing their tensors in
        DRAM. Activations after matmuls are marked to run in the MLP engine's drain."""
        if nf.is_frame(workload):
            return mark_epilogues(mark_streamed(workload))
        if workload.model not in nf.APPS and nf.FRAME_KEY not in workload.graph.graph:
            return mark_epilogues(workload)
        spec = nf.frame_of(workload)
        items = 1 if nf.FRAME_KEY in workload.graph.graph else workload.batch
        return mark_epilogues(mark_streamed(mark_dram_io(
            nf.pipeline(workload, spec, fused=self.hw.fuse_gpu_kernels, batch=items),
            nf.app_render(spec.app))))

    def plan_key(self, workload: Workload) -> tuple:
        """:meth:`plan` reads ``fuse_gpu_kernels`` only."""
        return (self.hw.fuse_gpu_kernels,)

    def check(self, workload: Workload) -> str | None:
        """Buildable (:meth:`physical`), the planned frame's footprint fits the GPU's memory,
        then: infeasible when a grid
        SRAM cannot hold one level's working set: the sectors of its look-ups in flight
        (:func:`hashgrid_cost.min_sram_bytes`). Tables larger than the SRAM are feasible: their
        misses spill to DRAM and cost time."""
        phys = self.physical()
        if phys.problem:
            return phys.problem
        problem = self.format_problem(workload)
        if problem:
            return problem
        # a frame streams through as ray batches: what must fit is the planned pipeline's
        # live set, not the whole frame's activations at once
        problem = capacity_problem(self.planned(workload), self.memory_capacity_bytes(),
                                   self.element_bytes(workload), self.gpu.capacity_holder())
        if problem:
            return problem
        for op in workload.ops:
            if op.kind != ir.HASHGRID:
                continue
            need = hc.min_sram_bytes(self._encoding(op), self._engine)
            if need > self._sram_bytes:
                return (f"grid_sram_kb = {self.hw.grid_sram_kb} KiB per encoding unit cannot "
                        f"hold one level's working set of {op.name}: {need} B of look-ups in "
                        f"flight ({self.hw.lookups_per_cycle} look-ups/cycle x "
                        f"{hc.ENGINE_PIPELINE_CYCLES} pipeline stages x "
                        f"{hc.SECTOR_BYTES}-B sectors)")
        return None

    # ------------------------------------------------------------------------------ cost
    def cost(self, op: Op) -> OpCost:
        key = (op.name if op.attrs.get("fused_from") else None, op.kind, op.target,
               op.bytes_per_element, op.flops, op.weight_bytes, op.activation_bytes_read,
               op.activation_bytes_written, op.input_shapes, op.output_shapes,
               bool(op.attrs.get("ngpc_epilogue")), op.attrs.get("device"),
               op.attrs.get("formats"), op.attrs.get("ngpc_input_bytes"),
               op.attrs.get("ngpc_output_bytes"), bool(op.attrs.get("ngpc_streamed")))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if op.kind in ir.COMPOSITE_KINDS:
            out = cost_composite(op, self.cost)
        elif op.attrs.get("device") == "gpu" or op.kind in (ir.ATTENTION, ir.CONV, ir.UNKNOWN):
            out = self._gpu_side_cost(op)
        elif op.kind == ir.HASHGRID:
            out = self._encoder_cost(op)
        elif op.kind == ir.MATMUL:
            out = self._mlp_cost(op)
        elif op.attrs.get("ngpc_epilogue"):
            out = self._epilogue_cost(op)
        else:
            out = self._vector_cost(op)
        if op.attrs.get("ngpc_output_bytes") and out.unit != "gpu":
            out = self._with_output_write(out, float(op.attrs["ngpc_output_bytes"]))
        self._cache[key] = out
        return out

    def _with_output_write(self, c: OpCost, write_bytes: float) -> OpCost:
        """``c`` plus the write of the network outputs to DRAM for the GPU's "post" kernel (they
        stream out as the array drains: the op takes at least its DRAM bytes over the
        bandwidth)."""
        dram = c.traffic.get("dram", 0.0) + write_bytes
        latency = max(c.latency_s, dram / self.dram_bandwidth_Bps)
        levels = dict(c.bytes_by_level)
        levels["dram"] = levels.get("dram", 0.0) + write_bytes
        energy = dict(c.energy_j)
        energy["offchip_memory"] = energy.get("offchip_memory", 0.0) + write_bytes * self._dram_j
        return replace(c, latency_s=latency, traffic={**c.traffic, "dram": dram},
                       bytes_by_level=levels, energy_j=energy,
                       bound="memory" if latency > c.compute_s else c.bound)

    def _encoding(self, op: Op) -> hc.Encoding:
        shapes = op.input_shapes
        table = shapes[1] if len(shapes) > 1 else None
        return hc.encoding_of(op.attrs, table, self._b)

    def _share(self, points: float) -> float:
        """Points one NFP gets of a batch of ``points`` (split evenly)."""
        return math.ceil(points / self.hw.nfps) if points > 0 else 0.0

    def _encoder_cost(self, op: Op) -> OpCost:
        hw = self.hw
        enc = self._encoding(op)
        points = float(op.attrs.get("points") or (op.output_shapes[0][0] if op.output_shapes
                                                   else 0))
        per_nfp = self._share(points)
        e = hc.engine_cost(enc, per_nfp, self._engine)
        nfps = hw.nfps
        compute_s = e.cycles / hw.clock_hz
        # the network-input record in from DRAM as the GPU's "pre" kernel wrote it (marked by
        # the plan; else the positions at the op's width); features go straight to the MLP
        io_bytes = float(op.attrs.get("ngpc_input_bytes")
                         or op.activation_bytes_read * self._scale(op))
        spill = e.dram_bytes * nfps
        dram = spill + io_bytes
        # spilled look-ups of hashed levels are random sector reads, activation-limited like
        # the GPU's; dense-indexed levels' spills and the positions stream at the channel rate
        random_spill = e.dram_hashed_bytes * nfps
        mem_s = (random_spill / self._caches.dram_random_efficiency + dram - random_spill) \
            / self.dram_bandwidth_Bps
        hashed = sum(1 for lv in enc.levels if not lv.direct)
        mults = points * hashed * enc.corners * enc.dims
        int_j = mults * self._int_mult_j + max(e.int_ops * nfps - mults, 0.0) * self._int_add_j
        return OpCost(
            unit="encoder", latency_s=max(compute_s, mem_s), compute_s=compute_s,
            clock_hz=hw.clock_hz, traffic={"dram": dram} if dram else {},
            bytes_by_level={"grid_sram": e.sram_bytes * nfps, "dram": dram},
            energy_j={"compute": int_j + e.flops * nfps / 2 * self._mac_j
                      + self._active_w["encoder"] * max(compute_s, mem_s),
                      "onchip_memory": e.sram_bytes * nfps * self._grid_j,
                      "offchip_memory": dram * self._dram_j},
            bound="memory" if mem_s > compute_s else "compute")

    def _mlp_cost(self, op: Op) -> OpCost:
        hw = self.hw
        a = op.attrs
        try:
            m, n, k = int(a["m"]), int(a["n"]), int(a["k"])
            batch = int(a.get("batch", 1) or 1)
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{op.name}.attrs", dict(a), "a matmul needs m, n, k") from None
        rows = batch * m
        cycles = hc.mlp_layer_cycles(self._share(rows), k, n, hw.mlp_rows, hw.mlp_cols)
        compute_s = cycles / hw.clock_hz
        macs = batch * m * n * k
        ba, bw, dequant = self._b, self._b, 0
        f = op_formats(op)
        if f is not None:   # operands in their number formats (checked by format_problem)
            x, y = f.operands(op.kind)
            ba, bw = x.bits_per_element / 8, y.bits_per_element / 8
            modes = mac_formats.operand_modes(self.hw.dtype, op)
            dequant = macs if not isinstance(modes, str) and "dequant" in modes else 0
        buffer_bytes = batch * m * (k * ba + n * self._scale_out(op))
        # Each working NFP loads the layer's weights once per op (a neural field's 64 x 64
        # layer is 8 KiB; a large model's weights stream and bound the op).
        active = min(hw.nfps, max(math.ceil(rows / hw.mlp_rows), 1))
        dram = op.weight_bytes * self._scale(op) * active + self._offchip_io(op)
        mem_s = dram / self.dram_bandwidth_Bps
        reg = macs * (2 * ba + bw + 8)
        return OpCost(
            unit="mlp", latency_s=max(compute_s, mem_s), compute_s=compute_s,
            clock_hz=hw.clock_hz, traffic={"dram": dram} if dram else {},
            bytes_by_level={"register": reg, "mlp_buffer": buffer_bytes, "dram": dram},
            energy_j={"compute": (macs + dequant) * self._mac_j
                      + self._active_w["mlp"] * max(compute_s, mem_s),
                      "onchip_memory": buffer_bytes * self._buffer_j + reg * self._reg_j,
                      "offchip_memory": dram * self._dram_j},
            bound="memory" if mem_s > compute_s else "compute")

    def _offchip_io(self, op: Op) -> float:
        """Activation bytes an op not streamed through the NFPs (:func:`mark_streamed`) reads
        from and writes to DRAM."""
        if op.attrs.get("ngpc_streamed"):
            return 0.0
        return (op.activation_bytes_read + op.kv_bytes_read + op.activation_bytes_written
                + op.kv_bytes_written) * self._scale(op)

    def _scale(self, op: Op) -> float:
        """Factor from ``op``'s bytes to what moves here: 1 for an op in number formats, else
        from its dtype to this design's."""
        return 1.0 if "formats" in op.attrs else self._b / op.bytes_per_element

    def _scale_out(self, op: Op) -> float:
        """Bytes per output element: the op's own dtype in number formats, else the design's."""
        return float(op.bytes_per_element) if "formats" in op.attrs else self._b

    def format_problem(self, workload: Workload) -> str | None:
        """The MLP engine's matmuls against its MAC format (the GPU's kernels against the
        GPU's datapaths)."""
        from accelerators.mac_formats import workload_problem
        mlp = [op for op in workload.ops if op.kind == ir.MATMUL
               and op.attrs.get("device") != "gpu"]
        problem = workload_problem(self.hw.dtype, workload) if not has_formats(workload) \
            else next((f"{m} (op {op.name})" for op in mlp
                       for m in [mac_formats.operand_modes(self.hw.dtype, op)]
                       if isinstance(m, str)), None)
        return problem or self.gpu.format_problem(workload)

    def _elements(self, op: Op) -> float:
        e = op.attrs.get("elements")
        if isinstance(e, (int, float)) and e > 0:
            return float(e)
        outs = [math.prod(s) for s in op.output_shapes if s]
        return float(sum(outs)) if outs else op.total_bytes / max(op.bytes_per_element, 1)

    def _epilogue_cost(self, op: Op) -> OpCost:
        """An activation in the MLP array's drain: no time, one vector op per element."""
        return OpCost(unit="mlp", latency_s=0.0, compute_s=0.0, clock_hz=self.hw.clock_hz,
                      energy_j={"compute": self._elements(op) * self._vec_j}, bound="compute")

    def _vector_cost(self, op: Op) -> OpCost:
        """Element-wise ops on the NFPs' vector lanes (on the encoding engine: the other input
        encodings), one lane operation per FLOP (at least one per element); concatenation and
        pure data movement in a frame are wiring into the MLP input buffer. Outside a frame
        (:func:`mark_streamed`) the operands stream from DRAM and the results back."""
        hw = self.hw
        elements = self._elements(op)
        dram = self._offchip_io(op)
        mem_s = dram / self.dram_bandwidth_Bps
        offchip = {"offchip_memory": dram * self._dram_j} if dram else {}
        traffic = {"dram": dram} if dram else {}
        if op.kind == ir.DATA_MOVEMENT:
            return OpCost(unit="encoder", latency_s=mem_s, compute_s=0.0, clock_hz=hw.clock_hz,
                          traffic=traffic,
                          bytes_by_level={"mlp_buffer": elements * self._b, "dram": dram},
                          energy_j={"onchip_memory": elements * self._b * self._buffer_j,
                                    **offchip},
                          bound="memory" if dram else "compute")
        lane_ops = element_ops(op, elements)
        cycles = math.ceil(self._share(lane_ops) / hw.vector_lanes)
        compute_s = cycles / hw.clock_hz
        latency_s = max(compute_s, mem_s)
        return OpCost(unit="encoder", latency_s=latency_s, compute_s=compute_s,
                      clock_hz=hw.clock_hz, traffic=traffic,
                      bytes_by_level={"register": elements * 3 * self._b, "dram": dram},
                      energy_j={"compute": lane_ops * self._vec_j
                                + self._active_w["encoder"] * latency_s,
                                "onchip_memory": elements * 3 * self._b * self._reg_j,
                                **offchip},
                      bound="memory" if mem_s > compute_s else "compute")

    def _gpu_side_cost(self, op: Op) -> OpCost:
        return gpu_kernel_cost(self.gpu, op, self.hw.fusion_speedup, self.dram_bandwidth_Bps)

    @property
    def _dram_j(self) -> float:
        return tech.dram_energy_j_per_byte("gddr6")

    # ------------------------------------------------------------------------------ the rest
    def resources(self) -> Resources:
        return Resources(units={"gpu": 1, "encoder": 1, "mlp": 1},
                         channels={"dram": self.dram_bandwidth_Bps})

    def unused_params(self) -> set[str]:
        """``fusion_speedup`` applies only to fused remaining kernels."""
        return set() if self.hw.fuse_gpu_kernels else {"fusion_speedup"}

    def peaks(self, dtype: str) -> Peaks:
        """The GPU's SMs (:meth:`GPU.peaks`); per NFP, the encoding units' interpolation lanes
        (``INTERP_MACS_PER_LANE`` MACs per look-up) and vector lanes on the encoder, the MLP
        array and the vector lanes of its drain on the mlp unit, each MAC 2 FLOPs; the GPU's
        DRAM at this design's bandwidth, the GPU's caches, the grid SRAMs and MLP buffers
        inside it."""
        hw = self.hw
        gpu = self.gpu.peaks(dtype)
        per_nfp = hw.nfps * hw.clock_hz
        onchip = (gpu.inside(gpu.resident) + hw.nfps * (self._sram_bytes * hw.encoding_units
                                                          + self._buffer_bytes))
        return Peaks(
            flops_per_s={"gpu": gpu.flops_per_s["sm"],
                         "encoder": 2.0 * per_nfp * (hw.encoding_units * hw.lookups_per_cycle
                                                     * INTERP_MACS_PER_LANE + hw.vector_lanes),
                         "mlp": 2.0 * per_nfp * (hw.mlp_rows * hw.mlp_cols + hw.vector_lanes)},
            levels=(MemoryLevel("dram", self.dram_bandwidth_Bps,
                                self.memory_capacity_bytes(), self._dram_j, resident=True),
                    MemoryLevel("sram", math.inf, onchip, self._grid_j)),
            energy_per_flop_j=min(gpu.energy_per_flop_j, self._mac_j / 2, self._vec_j))

    def nfp_area_breakdown_mm2(self) -> dict[str, float]:
        """One NFP's area by component, mm^2 at ``node_nm``."""
        hw = self.hw
        node = hw.node_nm
        mac = mac_formats.mac_area_mm2(hw.dtype, node)
        vec = tech.mac_area_mm2(mac_formats.vector_format(hw.dtype), node)
        lanes = hw.encoding_units * hw.lookups_per_cycle
        parts = {
            "grid_sram": tech.sram_area_mm2(self._sram_bytes * hw.encoding_units, node),
            "hash_lanes": lanes * HASH_MULTIPLIERS_PER_LANE
            * tech.mac_area_mm2(HASH_MULTIPLIER_AREA, node),
            "interp_lanes": lanes * INTERP_MACS_PER_LANE * tech.mac_area_mm2("fp16", node),
            "mlp_array": hw.mlp_rows * hw.mlp_cols * mac,
            "mlp_buffer": tech.sram_area_mm2(self._buffer_bytes, node),
            "vector_lanes": hw.vector_lanes * VECTOR_LANE_AREA_PER_MAC * vec,
        }
        parts["control"] = NFP_CONTROL_OVERHEAD * sum(parts.values())
        return parts

    def cluster_area_mm2(self) -> float:
        """The cluster's area (all NFPs), mm^2: what NGPC adds to the GPU die."""
        return self.hw.nfps * sum(self.nfp_area_breakdown_mm2().values())

    def cluster_peak_dynamic_w(self) -> float:
        """Dynamic power of the cluster with every MAC, vector lane and look-up lane busy each
        cycle (each look-up reading one feature pair from its grid SRAM), W."""
        hw, node = self.hw, self.hw.node_nm
        per_cycle_j = hw.nfps * (
            hw.mlp_rows * hw.mlp_cols * self._mac_j
            + hw.vector_lanes * self._vec_j
            + hw.encoding_units * hw.lookups_per_cycle * (
                INTERP_MACS_PER_LANE * tech.mac_energy_j("fp16", node)
                + 2 * self._b * tech.sram_energy_j_per_byte(self._sram_bytes, node)))
        return per_cycle_j * hw.clock_hz

    def cluster_leakage_w(self) -> float:
        """Static power of the cluster's logic and SRAM, W."""
        hw, parts = self.hw, self.nfp_area_breakdown_mm2()
        sram_mm2 = (parts["grid_sram"] + parts["mlp_buffer"]) * hw.nfps
        sram_bytes = (self._sram_bytes * hw.encoding_units + self._buffer_bytes) * hw.nfps
        return tech.leakage_w(self.cluster_area_mm2() - sram_mm2, sram_bytes, hw.node_nm)

    def cluster_design_power_w(self) -> float:
        """The cluster's power with every engine busy, W: what NGPC-N adds to the GPU's power
        as a configuration (no workload in it): peak dynamic power, leakage, and the logic the
        datapath model does not count (control, at the GPU die's overhead)."""
        return (self.cluster_peak_dynamic_w() + self.cluster_leakage_w()
                + sum(self._active_w.values()))

    def floorplan(self) -> Floorplan:
        """The GPU's die with the cluster on it: the cluster's logic and SRAM added to the
        GPU's, its leakage and peak power (every look-up lane, MAC and vector lane busy) too;
        the memory is the GPU's."""
        hw = self.hw
        parts = self.nfp_area_breakdown_mm2()
        sram_mm2 = (parts["grid_sram"] + parts["mlp_buffer"]) * hw.nfps
        logic_mm2 = self.cluster_area_mm2() - sram_mm2
        gpu = self.gpu.floorplan()
        logic = gpu.compute_mm2 + logic_mm2
        return replace(gpu, compute_mm2=logic, sram_mm2=gpu.sram_mm2 + sram_mm2,
                       peak_dynamic_w=gpu.peak_dynamic_w + self.cluster_peak_dynamic_w(),
                       leakage_w=gpu.leakage_w + self.cluster_leakage_w(),
                       dies=0,   # a new chip: split into the dies that cost least
                       # the GPU's and the cluster's logic at their own clocks
                       clock_hz=(gpu.clock_hz * gpu.compute_mm2 + hw.clock_hz * logic_mm2)
                       / logic)

    @cached_property
    def _active_w(self) -> dict[str, float]:
        """Uncounted-logic power of the cluster's two units (the GPU's kernels pay the GPU's
        own), W: the cluster's logic at the GPU die's control overhead and the cluster clock,
        split between the encoding engine (hash, interpolation and vector lanes) and the MLP
        array by their counted logic."""
        hw, parts = self.hw, self.nfp_area_breakdown_mm2()
        enc = parts["hash_lanes"] + parts["interp_lanes"] + parts["vector_lanes"]
        mlp = parts["mlp_array"]
        logic = self.cluster_area_mm2() - (parts["grid_sram"] + parts["mlp_buffer"]) * hw.nfps
        w = physical.uncounted_logic_w(logic * (1 + self.gpu.floorplan().control_overhead),
                                       hw.clock_hz, hw.node_nm)
        return {"encoder": w * enc / (enc + mlp), "mlp": w * mlp / (enc + mlp)}

    def memory_capacity_bytes(self) -> float:
        return self.gpu.memory_capacity_bytes()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["cluster_area_mm2"] = self.cluster_area_mm2()
        d["gpu_area_mm2"] = self.gpu.area_mm2()
        return d


# ---------------------------------------------------------------------- GPU-side kernels
def _remap(c: OpCost, unit: str, latency_s: float, compute_s: float,
           traffic_bytes: float) -> OpCost:
    """A ``gpu`` template cost moved to NGPC's unit and channel names."""
    return OpCost(unit=unit, latency_s=latency_s, compute_s=compute_s, clock_hz=c.clock_hz,
                  traffic={"dram": traffic_bytes} if traffic_bytes else {},
                  bytes_by_level=dict(c.bytes_by_level), energy_j=dict(c.energy_j),
                  bound=c.bound)


def gpu_kernel_cost(gpu: Template, op: Op, fusion_speedup: float = FUSION_SPEEDUP,
                    dram_bandwidth_Bps: float | None = None) -> OpCost:
    """Cost of a GPU-side op on unit ``gpu`` with its DRAM traffic on channel ``dram``.

    A remaining kernel (``attrs["device"] == "gpu"``) takes the ``gpu`` template's time over
    :data:`RAY_KERNEL_EFFICIENCY`; a fused one (``attrs["fused_from"]``) takes the unfused
    kernels' total over ``fusion_speedup``, but never less than its own compulsory bytes over
    the bandwidth. Other ops take the ``gpu`` template's cost as it is."""
    fused_from = op.attrs.get("fused_from")
    c = gpu.cost(op)
    traffic = sum(c.traffic.values()) if c.traffic else float(op.total_bytes)
    if fused_from:
        unfused = sum(gpu.cost(part).latency_s for part in fused_from) / RAY_KERNEL_EFFICIENCY
        latency = unfused / fusion_speedup
        if dram_bandwidth_Bps:
            latency = max(latency, traffic / dram_bandwidth_Bps)
        return _remap(c, "gpu", latency, min(c.compute_s, latency), traffic)
    if op.attrs.get("device") == "gpu":
        latency = c.latency_s / RAY_KERNEL_EFFICIENCY
        return _remap(c, "gpu", latency, c.compute_s / RAY_KERNEL_EFFICIENCY, traffic)
    return _remap(c, "gpu", c.latency_s, c.compute_s, traffic)


# ---------------------------------------------------------------------- the GPU baseline
@dataclass(frozen=True)
class GpuBaseline:
    """Time of one frame with everything on the GPU (instant-NGP), s, by part: the input
    encoding (grid, plus other encodings such as spherical harmonics), the fully fused MLPs,
    and the remaining kernels (unfused)."""

    encoding_s: float
    mlp_s: float
    remaining_s: float

    @property
    def total_s(self) -> float:
        return self.encoding_s + self.mlp_s + self.remaining_s

    @property
    def fps(self) -> float:
        return 1.0 / self.total_s if self.total_s > 0 else 0.0

    @property
    def encoding_mlp_share(self) -> float:
        """Share of application time in encoding + MLP (the paper's 72 / 60 / 59%)."""
        return (self.encoding_s + self.mlp_s) / self.total_s if self.total_s > 0 else 0.0


def _groups(workload: Workload) -> list[list[Op]]:
    """The field graph's ops grouped into the kernels instant-NGP runs: each hashgrid op alone;
    each chain of matmuls and the activations between and after them as one fully fused MLP
    [R tiny-cuda-nn FullyFusedMLP]; each connected set of the remaining element-wise and data
    movement ops as one kernel (e.g. the spherical-harmonics encoding)."""
    g = workload.graph
    ops = {op.name: op for op in workload.ops}
    mlp_like = {n for n, op in ops.items() if op.kind == ir.MATMUL or (
        op.kind == ir.ELEMENTWISE and op.target in EPILOGUE_TARGETS and any(
            ops[p].kind == ir.MATMUL or ops[p].target in EPILOGUE_TARGETS
            for p in g.predecessors(n)))}
    u = nx.Graph()
    u.add_nodes_from(ops)
    for a, b in g.edges():
        if a not in ops or b not in ops:
            continue
        ka, kb = ops[a].kind, ops[b].kind
        if ir.HASHGRID in (ka, kb):
            continue
        if (a in mlp_like) == (b in mlp_like):
            u.add_edge(a, b)
    order = {op.name: i for i, op in enumerate(workload.ops)}
    comps = [sorted(c, key=order.get) for c in nx.connected_components(u)]
    return [[ops[n] for n in c] for c in sorted(comps, key=lambda c: order[c[0]])]


def _fused_group_op(workload: Workload, group: list[Op], name: str) -> Op:
    """One op for a fused group: FLOPs and weights summed; activations only where they cross
    the group's boundary (tensors passed inside stay in registers / shared memory)."""
    g = workload.graph
    members = {op.name for op in group}
    read = written = 0
    graph_input_read = 0
    for op in group:
        preds = list(g.predecessors(op.name))
        succs = list(g.successors(op.name))
        edge_in = {p: g.edges[p, op.name].get("bytes", 0) for p in preds}
        read += sum(b for p, b in edge_in.items() if p not in members)
        # Bytes read from the graph's inputs (no producer op): members of one fused kernel
        # read the same input tensor (e.g. the view directions); it is loaded once.
        graph_input_read = max(graph_input_read,
                               max(op.activation_bytes_read - sum(edge_in.values()), 0))
        if not succs or any(s not in members for s in succs):
            written += op.activation_bytes_written
    read += graph_input_read
    first = group[0]
    kind = ir.MATMUL if any(op.kind == ir.MATMUL for op in group) else ir.ELEMENTWISE
    flops = sum(op.flops for op in group)
    attrs: dict[str, Any] = {"elements": sum(int(op.attrs.get("elements", 0) or 0)
                                             for op in group) or 1, "fused_ops": len(group)}
    if kind == ir.MATMUL:
        # The chain's work as one [m_eq, width] x [width, width] GEMM at the layers' width
        # (64 in every zoo field): same FLOPs, the tile shape a fused MLP really runs.
        mm = [op for op in group if op.kind == ir.MATMUL]
        width = max(max(int(op.attrs.get("n", 1)), int(op.attrs.get("k", 1))) for op in mm)
        m_eq = max(math.ceil(sum(op.flops for op in mm) / (2 * width * width)), 1)
        attrs.update({"m": m_eq, "n": width, "k": width, "batch": 1, "weight_operand": True,
                      "fused_layers": len(mm), "points": int(mm[0].attrs.get("m", 1))})
    return Op(name=name, kind=kind, target="fused_mlp" if kind == ir.MATMUL else "fused_encoding",
              input_shapes=first.input_shapes, output_shapes=group[-1].output_shapes,
              dtype=first.dtype, bytes_per_element=first.bytes_per_element, flops=flops,
              weight_bytes=sum(op.weight_bytes for op in group if op.kind != ir.HASHGRID),
              activation_bytes_read=read, activation_bytes_written=written, attrs=attrs)


def gpu_baseline(field: Workload, spec: nf.FrameSpec, gpu: Template | None = None,
                 gpu_preset: str = "rtx3090") -> GpuBaseline:
    """One frame of ``spec`` with everything on the GPU, as instant-NGP runs it: the encoding
    kernel per grid (:func:`hashgrid_cost.gpu_encode_cost`: random access through L1/L2/DRAM —
    the ``gpu`` template would stream the whole table), fully fused MLPs and the other field
    kernels through the ``gpu`` template, and the unfused remaining kernels at
    :data:`RAY_KERNEL_EFFICIENCY`. Kernels run back to back on one GPU, so times add."""
    if gpu is None:
        from accelerators.registry import make_accelerator
        gpu = make_accelerator(f"gpu:{gpu_preset}")
        preset = gpu_preset
    else:
        preset = getattr(gpu, "preset", None) or gpu_preset
    if preset not in hc.GPU_CACHES:
        raise BadInput("gpu", preset, "expected one of " + ", ".join(hc.GPU_CACHES))
    caches = hc.GPU_CACHES[preset]
    old = nf.field_points(field)
    scaled = _scaled_field(field, old, spec.queries)
    encoding = mlp = 0.0
    for i, group in enumerate(_groups(scaled)):
        if group[0].kind == ir.HASHGRID:
            op = group[0]
            enc = hc.encoding_of(op.attrs, op.input_shapes[1] if len(op.input_shapes) > 1
                                 else None, op.bytes_per_element)
            cost = hc.gpu_encode_cost(enc, spec.queries, caches,
                                      io_bytes=op.activation_bytes_read
                                      + op.activation_bytes_written)
            encoding += cost.time_s
            continue
        fused = _fused_group_op(scaled, group, f"gpu_group{i}")
        t = gpu.cost(fused).latency_s
        if fused.kind == ir.MATMUL:
            mlp += t
        else:
            encoding += t
    render = nf.app_render(spec.app)
    pre, post = nf.remaining_ops(render, spec.rays, spec.queries, field.dtype, "", fused=False)
    remaining = sum(gpu.cost(op).latency_s for op in pre + post) / RAY_KERNEL_EFFICIENCY
    return GpuBaseline(encoding_s=encoding, mlp_s=mlp, remaining_s=remaining)


def _scaled_field(field: Workload, old: int, new: float) -> Workload:
    g = nx.DiGraph()
    for i, op in enumerate(field.ops):
        g.add_node(op.name, op=nf.scale_points(op, old, new, op.name), index=i)
    for u, v, data in field.graph.edges(data=True):
        g.add_edge(u, v, bytes=int(round(data.get("bytes", 0) * new / old)))
    return Workload(graph=g, model=field.model, phase=field.phase, dtype=field.dtype,
                    batch=max(int(new), 1), arch=dict(field.arch), params=field.params)
