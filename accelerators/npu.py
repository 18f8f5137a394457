"""``npu``: a systolic-array accelerator (TPU / SCALE-Sim style) with a vector unit and DRAM.

One or more identical ``rows x cols`` systolic arrays (dataflow WS, OS or IS) run GEMMs and
im2col convolutions; a ``vector_lanes``-wide vector unit runs everything else. Three
scratchpads (ifmap, filter, ofmap) are double-buffered: half of each is computed on while the
other half is filled from / drained to DRAM.

Per op (closed form, O(1); :mod:`accelerators.systolic` holds the formulas):

* ``compute_s``: array cycles with no memory stall, SCALE-Sim 3.0.0's convention exactly
  (validated per layer in ``docs/validation.md (npu section)``), over ``clock_hz``.
* DRAM bytes: the op's compulsory bytes plus the re-fetches of the cheapest of three SRAM loop
  orders (``systolic.gemm_dram_passes``).
* ``latency_s``: a load / compute / store pipeline: the first tile's inputs load, then compute
  and the remaining transfers overlap, then the last output tile drains:
  ``fill + max(compute, rest of the transfers) + drain`` (= the DRAM time when memory-bound).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from accelerators import mac_formats, systolic, technology as tech
from accelerators.mac_formats import operand_modes
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.composite import cost_composite
from accelerators.memory_standards import STANDARD_NAMES, MemorySystem, memory_system
from accelerators.physical import HOST_INTERFACES, MAX_CHIPLETS, Floorplan, control_mm2
from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.formats import op_formats
from workloads.gna import op_tiles
from workloads.ir import Op

#: Bytes of one partial sum held in the ofmap scratchpad / accumulators: 32-bit accumulation
#: for every input type [P Jouppi et al., ISCA 2017: TPU v1 keeps 4 MiB of 32-bit accumulators
#: behind its 8-bit MACs; fp16/bf16 arrays accumulate in fp32].
ACC_BYTES = 4


def _register_bytes_per_mac(b: float, stationary: float | None = None) -> float:
    """Register-file bytes touched per MAC inside a PE [E]: the moving operand is read and
    written to the next PE's pipeline register (2 x b), the stationary one read (b, or
    ``stationary`` B when its element differs), and the partial sum read and written
    (2 x ACC_BYTES)."""
    if stationary is None:
        return 3 * b + 2 * ACC_BYTES
    return 2 * b + stationary + 2 * ACC_BYTES


#: Vector-unit lane operations per element, by op kind [E, counted from the usual kernels]:
#: elementwise 1; norm 3 (pass 1: sum and sum of squares, 2 ops; pass 2: one fused
#: multiply-add x * (rstd * gamma) + (beta - mean * rstd * gamma)); softmax 4 (max; exp(x - max)
#: on a pipelined special-function lane with the subtract fused; sum; multiply by 1/sum);
#: reduction 1 per *input* element; embedding / data movement 1 (a lane moves one element).
VECTOR_OPS_PER_ELEMENT = {
    ir.ELEMENTWISE: 1, ir.NORM: 3, ir.SOFTMAX: 4, ir.REDUCTION: 1, ir.EMBEDDING: 1,
    ir.DATA_MOVEMENT: 1, ir.UNKNOWN: 1,
}


def element_ops(op: Op, per_elements: float) -> float:
    """Lane operations of a non-GEMM op that a template counts ``per_elements`` of: its FLOPs
    where they count more (an optimizer's update: ~10 per parameter)."""
    return max(float(per_elements), float(op.flops))

#: Area of one vector lane relative to one MAC of the same dtype [E]: a lane is a MAC plus a
#: share of a special-function unit (exp, reciprocal, rsqrt) and its operand registers.
VECTOR_LANE_AREA_PER_MAC = 1.5


_ARRAY_KINDS = (ir.MATMUL, ir.CONV, ir.ATTENTION)

PARAMS = (
    Param("rows", int, "PEs", 128, "rows of each systolic array (the reduction side in WS)",
          4, 1024, log=True),
    Param("cols", int, "PEs", 128, "columns of each systolic array", 4, 1024, log=True),
    Param("dataflow", str, "", "ws", "what stays in the PEs: ws weights, os outputs, is inputs",
          choices=systolic.DATAFLOWS),
    Param("arrays", int, "", 1, "identical systolic arrays sharing one op's tiles", 1, 64,
          log=True),
    Param("clock_hz", float, "Hz", 1.0e9, "array and vector clock", 1.0e8, 3.0e9, log=True),
    Param("dtype", str, "", "bf16", "MAC datapath (accelerators.mac_formats); without number "
          "formats in the workload also its storage element type",
          choices=mac_formats.MAC_FORMATS),
    Param("ifmap_sram_kb", int, "KiB", 8192, "input-activation scratchpad (double-buffered)",
          1, 131072, log=True),
    Param("filter_sram_kb", int, "KiB", 4096, "weight scratchpad (double-buffered)",
          1, 131072, log=True),
    Param("ofmap_sram_kb", int, "KiB", 4096, "output / accumulator scratchpad, 32-bit partial "
          "sums (double-buffered)", 1, 131072, log=True),
    Param("dram_bandwidth_Bps", float, "B/s", 6.0e11, "off-chip bandwidth when dram_devices "
          "is 0: realised by the fewest devices of the standard that reach it (ignored "
          "otherwise)", 1.0e9, 1.0e13, log=True),
    Param("dram", str, "", "hbm2", "off-chip memory standard (bandwidth, capacity, PHY area, "
          "energy and price per device: accelerators.memory_standards)", choices=STANDARD_NAMES),
    Param("dram_devices", int, "", 0, "off-chip memory devices (HBM stacks, GDDR / LPDDR chips, "
          "DDR channels), run at their peak bandwidth; 0: the fewest that reach "
          "dram_bandwidth_Bps", 0, 32),
    Param("dram_device_gb", float, "GB", 0.0, "capacity of each memory device, one of the "
          "standard's options; 0: the standard's default", 0.0, 128.0),
    Param("host_interface", str, "", "pcie4x16", "link to the host (PHY area and die edge): "
          "none for an SoC block", choices=tuple(HOST_INTERFACES)),
    Param("vector_lanes", int, "lanes", 1024, "vector-unit elements per cycle (softmax, norm, "
          "elementwise, reductions, data movement)", 1, 65536, log=True),
    Param("node_nm", int, "nm", 7, "process node", choices=tech.NODES_NM),
    Param("chiplets", int, "dies", 0, "logic dies the design is split into (each within the "
          "reticle, joined on an interposer by die-to-die links); 0: the count that costs "
          "least (shown in results as dies)", 0, MAX_CHIPLETS),
)

PRESETS: dict[str, dict[str, Any]] = {
    # One TensorCore of a TPU v4-class chip [E, after Jouppi et al., ISCA 2023: 4 MXUs of 128x128
    # bf16 per TensorCore at 1050 MHz, 1.2 TB/s HBM2 shared by 2 TensorCores, 7 nm]; the scratchpad
    # split (8 + 4 + 4 MiB) and the 1024 vector lanes are estimates.
    "datacenter-bf16": dict(rows=128, cols=128, dataflow="ws", arrays=4, clock_hz=1.05e9,
                            dtype="bf16", ifmap_sram_kb=8192, filter_sram_kb=4096,
                            ofmap_sram_kb=4096, dram_bandwidth_Bps=6.0e11, dram="hbm2",
                            vector_lanes=1024, node_nm=7),
    # TPU v1 [P Jouppi et al., ISCA 2017]: 256x256 int8 MACs, weight-stationary, 700 MHz, 28 nm,
    # 24 MiB Unified Buffer (activations) -> ifmap, 4 MiB of 32-bit accumulators -> ofmap,
    # weight FIFO of four 64 KiB tiles -> filter, 8 GiB DDR3 at 34 GB/s (two DDR3-2133
    # channels of 4 GB), 256-wide activation pipeline -> vector lanes.
    "tpu-v1-like": dict(chiplets=1, rows=256, cols=256, dataflow="ws", arrays=1, clock_hz=7.0e8,
                        dtype="int8", ifmap_sram_kb=24576, filter_sram_kb=256,
                        ofmap_sram_kb=4096, dram_bandwidth_Bps=3.4e10, dram="ddr3",
                        vector_lanes=256, node_nm=28),
    # TPUv2 [P Jouppi et al., "A domain-specific supercomputer for training deep neural
    # networks", CACM 2020, and "Ten lessons from three generations shaped Google's TPUv4i",
    # ISCA 2021, Table 1: 16 nm, 700 MHz, two TensorCores of one 128x128 bf16 MXU each, 32 MiB
    # on chip, 16 GiB HBM at 700 GB/s; P Norrie et al., IEEE Micro 2021: per core a 128-lane x
    # 8-sublane vector unit and 16 MiB of vector memory]. Four 4-GB HBM2 stacks (package
    # photos; the template runs them at the standard's 2.4 Gb/s, 1.23 TB/s) [E]; the 32 MiB
    # split 16 / 8 / 8 MiB over ifmap / filter / ofmap [E]; a PCIe 3 x16 host link, the PCIe 4
    # PHY standing in [E]. Not modelled: its four ICI links.
    "tpu-v2": dict(chiplets=1, rows=128, cols=128, dataflow="ws", arrays=2, clock_hz=7.0e8, dtype="bf16",
                   ifmap_sram_kb=16384, filter_sram_kb=8192, ofmap_sram_kb=8192, dram="hbm2",
                   dram_devices=4, dram_device_gb=4, vector_lanes=2048, node_nm=16),
    # TPUv3 [P same sources: 16 nm, 940 MHz, two TensorCores of two 128x128 MXUs, 32 MiB on
    # chip, 32 GiB HBM at 900 GB/s]; four 8-GB HBM2 stacks [E], the rest as TPUv2.
    "tpu-v3": dict(chiplets=1, rows=128, cols=128, dataflow="ws", arrays=4, clock_hz=9.4e8, dtype="bf16",
                   ifmap_sram_kb=16384, filter_sram_kb=8192, ofmap_sram_kb=8192, dram="hbm2",
                   dram_devices=4, dram_device_gb=8, vector_lanes=2048, node_nm=16),
    # TPUv4i [P Jouppi et al., ISCA 2021: 7 nm, 1,050 MHz, one TensorCore of four 128x128 bf16
    # MXUs (int8 at the same rate), 128 MiB CMEM + 16 MiB vector memory, 8 GiB HBM2 at 614
    # GB/s = two 4-GB stacks at 2.4 Gb/s, TDP 175 W]; CMEM and vector memory taken as ifmap
    # and filter 64 MiB each and ofmap 16 MiB [E]; one 128 x 8 vector unit; host PCIe [E].
    # Not modelled: its two ICI links.
    "tpu-v4i": dict(chiplets=1, rows=128, cols=128, dataflow="ws", arrays=4, clock_hz=1.05e9,
                    dtype="bf16", ifmap_sram_kb=65536, filter_sram_kb=65536,
                    ofmap_sram_kb=16384, dram="hbm2", dram_devices=2, dram_device_gb=4,
                    vector_lanes=1024, node_nm=7),
    # Groq TSP [P Abts et al., "Think fast: a tensor streaming processor", ISCA 2020: 14 nm,
    # 25 x 29 mm, 900 MHz nominal, four 320x320 int8 MXM planes, 220 MiB of SRAM in its MEM
    # slices, a 320-lane x 16-ALU vector unit; D Linley Group, Nov. 2020: one PCIe 4 x16 host
    # port and 16 chip-to-chip links]. It has no DRAM: one LPDDR4 device stands in for the
    # template's off-chip memory (1.7 mm^2) [E]; the 220 MiB split 100 / 100 / 20 MiB [E].
    # Not modelled: its 16 chip-to-chip SerDes links.
    "groq-tsp": dict(rows=320, cols=320, dataflow="ws", arrays=4, clock_hz=9.0e8,
                     dtype="int8", ifmap_sram_kb=102400, filter_sram_kb=102400,
                     ofmap_sram_kb=20480, dram="lpddr4", dram_devices=1, vector_lanes=5120,
                     node_nm=14),
    # MTIA v1 [P Firoozshahian et al., "MTIA: first generation silicon targeting Meta's
    # recommendation systems", ISCA 2023; D Meta AI blog, May 2023: TSMC 7 nm, 800 MHz, 64 PEs,
    # 51.2 TFLOP/s fp16 (int8 at twice the rate on the same units), 128 MiB shared SRAM plus
    # 128 KiB local memory per PE, LPDDR5 on a 256-bit bus (176 GB/s, 64 GB), PCIe 4 x8, TDP
    # 25 W]: each PE's dot-product engine as one 32x16 fp16 array (64 x 512 = 32,768 MACs,
    # 52.4 TFLOP/s) [E]; shared SRAM as ifmap + filter, local memories as ofmap [E]; eight
    # x32 LPDDR5 devices of 8 GB, run at the standard's 6.4 Gb/s (205 GB/s) [E]; a 512-bit
    # SIMD unit per PE (32 fp16 lanes) [E]; the PCIe 4 x16 PHY stands in for x8 [E].
    "mtia-v1": dict(chiplets=1, rows=32, cols=16, dataflow="ws", arrays=64, clock_hz=8.0e8, dtype="fp16",
                    ifmap_sram_kb=65536, filter_sram_kb=65536, ofmap_sram_kb=8192,
                    dram="lpddr5", dram_devices=8, dram_device_gb=8, vector_lanes=2048,
                    node_nm=7),
    # SCALE-Sim's example configuration [R scalesim-project/scale-sim-v3 configs/scale.cfg:
    # 32x32, 64 KB per scratchpad, os]; clock, int8, LPDDR4 12.8 GB/s and 28 nm are estimates
    # for an edge part [E].
    "edge-32x32": dict(rows=32, cols=32, dataflow="os", arrays=1, clock_hz=5.0e8, dtype="int8",
                       ifmap_sram_kb=64, filter_sram_kb=64, ofmap_sram_kb=64,
                       dram_bandwidth_Bps=1.28e10, dram="lpddr4", vector_lanes=32, node_nm=28,
                       host_interface="none"),
    # NeuPIMs' NPU [R casys-kaist/NeuPIMs configs/systolic_ws_128x128_dev.json; P ASPLOS 2024
    # Sec. 8.1]: 8 WS arrays of 128x128 at 1 GHz, 8 vector units x 128 lanes, 2-byte data,
    # spad 1024 KB (split evenly between ifmap and filter [E]) and accum spad 1024 KB.
    # DRAM: HBM2, 32 channels x 128 bit x 2 Gb/s = 1.024 TB/s [E from R memory_configs/neupims.json
    # and the HBM2_8Gb_x128 device]; node 7 nm [E: TPUv4's, whose eight 128x128 MXUs it
    # mirrors; at 22 nm its arrays alone would take 360 mm^2, ~2,400 mm^2 of die with what an
    # npu leaves uncounted (physical.CONTROL_OVERHEAD)].
    "neupims-npu": dict(chiplets=1, rows=128, cols=128, dataflow="ws", arrays=8, clock_hz=1.0e9,
                        dtype="bf16", ifmap_sram_kb=512, filter_sram_kb=512, ofmap_sram_kb=1024,
                        dram_bandwidth_Bps=1.024e12, dram="hbm2", vector_lanes=1024,
                        node_nm=7),
}


def element_scale(op: Op, b: int) -> float:
    """Factor from the op's captured element size to ``b`` bytes per element."""
    return b / op.bytes_per_element if op.bytes_per_element else 1.0


def vector_parts(op: Op, b: int) -> tuple:
    """The design-independent part of a vector-unit op for element size ``b`` B:
    ``(lane_ops, read_B, written_B, dram_B, sram_read_B, register_B)``. Lane operations per
    element from ``VECTOR_OPS_PER_ELEMENT`` (reductions count their input); norm and softmax
    re-read their input on chip (2 and 3 passes); an op with no bytes moves its elements in
    and out once."""
    scale = element_scale(op, b)
    read, written = op.bytes_read * scale, op.bytes_written * scale
    elements = op.attrs.get("elements")
    if not isinstance(elements, (int, float)) or elements <= 0:
        outs = [math.prod(s) for s in op.output_shapes if s is not None]
        elements = sum(outs) if outs and sum(outs) > 0 else max(read, written) / b
    if op.kind == ir.HASHGRID:
        a = op.attrs
        dims = int(a.get("dims", 3) or 3)
        # per point and level: hash 2^dims corners (dims multiplies + dims XORs each), then
        # interpolate `features` values per corner (one FMA each) [E]
        lane_ops = (int(a.get("points", elements)) * int(a.get("levels", 1))
                    * 2 ** dims * (int(a.get("features", 1)) + 2 * dims))
        passes = 1
    else:
        per = VECTOR_OPS_PER_ELEMENT.get(op.kind, 1)
        if op.kind == ir.REDUCTION:   # work scales with the input, not the output
            elements = max(elements, read / b)
        lane_ops = elements * per
        passes = {ir.NORM: 2, ir.SOFTMAX: 3}.get(op.kind, 1)
    dram = read + written
    if dram <= 0:
        dram = elements * b * 2
        read = written = elements * b
    return lane_ops, read, written, dram, read * (1 + passes), lane_ops * 3 * b



def attention_dims(op: Op) -> tuple:
    """An attention op's (batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim,
    work_fraction): ``work_fraction`` is the share of the dense work a causal mask leaves
    (``causal_flops / flops``, 1 otherwise). Raises :class:`BadInput` naming the op."""
    a = op.attrs
    try:
        batch, heads = int(a.get("batch", 1)), int(a["heads"])
        kv_heads = int(a.get("kv_heads", heads) or heads)
        sq, skv, d = int(a["q_len"]), int(a["kv_len"]), int(a["head_dim"])
        dv = int(a.get("value_dim", d) or d)
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"op {op.name}.attrs", dict(a), "an attention op needs heads, q_len, "
                       "kv_len, head_dim") from None
    full = op.flops or int(a.get("_flops", 0))
    frac = 1.0
    if a.get("causal") and full and a.get("causal_flops") is not None:
        frac = min(1.0, max(0.0, a["causal_flops"] / full))
    return batch, heads, kv_heads, sq, skv, d, dv, frac

class NPU(Template):
    """Systolic-array NPU: arrays x rows x cols MACs, a vector unit, 3 scratchpads, DRAM."""

    name = "npu"
    description = ("systolic array(s) (WS/OS/IS) with double-buffered scratchpads, a vector unit "
                   "and DRAM; SCALE-Sim-exact compute cycles, closed-form tiling traffic")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "datacenter-bf16"
    SPARSE_ATTENTION = True

    def __init__(self, preset: str | None = None, **values: Any):
        super().__init__(preset, **values)
        hw = self.hw
        self._b = mac_formats.storage_bytes(hw.dtype)
        self._sram_bytes = {"ifmap": hw.ifmap_sram_kb * 1024, "filter": hw.filter_sram_kb * 1024,
                            "ofmap": hw.ofmap_sram_kb * 1024}
        node = hw.node_nm
        self._sram_j = {k: tech.sram_energy_j_per_byte(v, node) for k, v in self._sram_bytes.items()}
        self._reg_j = tech.register_energy_j_per_byte(node)
        self._mac_j = mac_formats.mac_energy_j(hw.dtype, node)
        self._vec_j = tech.vector_op_energy_j(mac_formats.vector_format(hw.dtype), node)
        self.memory: MemorySystem = memory_system(hw.dram, hw.dram_devices, hw.dram_device_gb,
                                                  0.0 if hw.dram_devices else
                                                  hw.dram_bandwidth_Bps)
        # plain attributes: read on every cost() call
        self._rows, self._cols, self._arrays, self._df = hw.rows, hw.cols, hw.arrays, hw.dataflow
        # DRAM streams at the standard's sustained share of the interface (one rule for every
        # template, memory_standards.SUSTAINED_FRACTION)
        self._clock, self._lanes = hw.clock_hz, hw.vector_lanes
        self._bw = self.memory.sustained_bandwidth_Bps
        self._caps = {p: v / 2 for p, v in self._sram_bytes.items()}   # double buffering
        phys = self.physical()
        self._dram_j = phys.memory_energy_j_per_byte
        # the logic the energy tables do not count, charged per unit for the time it is busy
        # (physical.uncounted_logic_w), split by the units' counted logic
        pe_mm2, lane_mm2 = self._unit_logic_mm2()
        self._active_w = {"array": phys.active_w * pe_mm2 / (pe_mm2 + lane_mm2),
                          "vector": phys.active_w * lane_mm2 / (pe_mm2 + lane_mm2)}
        self._problem = self._scratchpad_problem()
        self._cache: dict[tuple, OpCost] = {}

    # ----------------------------------------------------------------------------- feasibility
    def _scratchpad_problem(self) -> str | None:
        """The first scratchpad that cannot hold one minimal tile: one array edge of operands
        (max(rows, cols) elements per array) in each of its two halves."""
        hw, b = self.hw, self._b
        edge = max(hw.rows, hw.cols) * hw.arrays
        needs = {"ifmap": 2 * edge * b, "filter": 2 * edge * b, "ofmap": 2 * edge * ACC_BYTES}
        for pad, need in needs.items():
            have = self._sram_bytes[pad]
            if have < need:
                return (f"{pad}_sram_kb = {have // 1024} KiB cannot hold one minimal tile: "
                        f"{need} B needed (2 halves x {max(hw.rows, hw.cols)} x {hw.arrays} "
                        f"array(s) x {b if pad != 'ofmap' else ACC_BYTES} B), {have} B available")
        return None

    def check(self, workload: ir.Workload) -> str | None:
        """The base checks (buildable, fits the memory), then the scratchpads' minimal tile."""
        return super().check(workload) or self.scratchpad_check(workload)

    def scratchpad_check(self, workload: ir.Workload) -> str | None:
        """Why a scratchpad cannot hold a minimal tile of the workload's array ops, or None."""
        if self._problem and any(op.kind in _ARRAY_KINDS for op in workload.ops):
            return self._problem
        return None

    # ----------------------------------------------------------------------------- cost
    def cost(self, op: Op) -> OpCost:
        key = (op.kind, op.bytes_per_element, op.flops, op.weight_bytes, op.activation_bytes_read,
               op.activation_bytes_written, op.kv_bytes_read, op.kv_bytes_written,
               op.input_shapes, op.output_shapes, repr(op.attrs))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if op.kind in ir.COMPOSITE_KINDS:
            out = cost_composite(op, self.cost)
        elif op.kind in (ir.MATMUL, ir.CONV):
            out = self._gemm_op_cost(op)
        elif op.kind == ir.ATTENTION:
            out = self._attention_cost(op)
        elif op.kind == ir.SPARSE_ATTENTION:
            out = self._sparse_attention_cost(op)
        else:
            out = self._vector_cost(op)
        self._cache[key] = out
        return out

    @classmethod
    def cost_many(cls, designs, ops):
        """:meth:`cost` of each of ``ops`` on each of ``designs`` at once (numpy): the fast
        path's hook, see :func:`accelerators.npu_vector.cost_many`."""
        from accelerators import npu_vector
        return npu_vector.cost_many(designs, ops)

    def _scale(self, op: Op) -> float:
        """Factor from the op's captured element size to this design's dtype (1 for an op in
        number formats: its bytes are already what moves)."""
        return 1.0 if "formats" in op.attrs else element_scale(op, self._b)

    def operand_bytes(self, op: Op) -> tuple[float, float, float]:
        """Bytes per element of a GEMM-class op's activation operand, its other operand
        (weights, or the KV cache of attention) and its output: its number formats', or this
        design's element for an op without formats."""
        f = op_formats(op)
        if f is None:
            return self._b, self._b, self._b
        x, y = f.operands(op.kind)
        return x.bits_per_element / 8, y.bits_per_element / 8, float(op.bytes_per_element)

    def elements(self, op: Op) -> tuple[float, float, float, str, str]:
        """:meth:`operand_bytes` and how the MAC array takes each operand (``native`` or
        ``dequant``, :func:`operand_modes`; ``vector`` for both when the array cannot and the
        vector lanes run the op, :func:`accelerators.mac_formats.vector_fallback`);
        :class:`InfeasibleDesign` when neither can."""
        modes = operand_modes(self.hw.dtype, op)
        if isinstance(modes, str):
            if not mac_formats.vector_fallback(self.hw.dtype, op):
                raise InfeasibleDesign(modes)
            modes = ("vector", "vector")
        return (*self.operand_bytes(op), *modes)

    def format_problem(self, workload: ir.Workload) -> str | None:
        """The array's formats, with its vector lanes running what the array cannot."""
        return mac_formats.workload_problem(self.hw.dtype, workload, vector_lanes=True)

    def _vector_gemm_cost(self, op: Op, macs: float, extra_ops: float = 0.0) -> OpCost:
        """A GEMM-class op on the vector lanes (operands the array does not take): one MAC per
        lane per cycle in the lanes' format, operands staged through the scratchpads once."""
        hw = self.hw
        lane_ops = macs + extra_ops
        cycles = math.ceil(lane_ops / hw.vector_lanes)
        read, written = float(op.bytes_read), float(op.bytes_written)
        chunk = hw.vector_lanes * op.bytes_per_element
        mac_j = tech.mac_energy_j(mac_formats.vector_format(hw.dtype), hw.node_nm)
        sram = 2 * (read + written)
        return self._finish("vector", cycles, read + written, min(read, chunk),
                            min(written, chunk), compute_j=macs * mac_j + extra_ops * self._vec_j,
                            sram_j=sram * self._sram_j["ifmap"], sram_bytes=sram,
                            reg_bytes=lane_ops * 3 * op.bytes_per_element)

    # GEMM / conv ------------------------------------------------------------------------------
    def _gemm_shape(self, op: Op) -> tuple[int, int, int, int, float]:
        """``(gemms, m, n, k, a_bytes_per_gemm)`` of a matmul or conv op."""
        a, b = op.attrs, self.operand_bytes(op)[0]
        try:
            if op.kind == ir.CONV:
                groups = int(a.get("groups", 1) or 1)
                m, n, kk = int(a["gemm_m"]), int(a["gemm_n"]), int(a["gemm_k"])
                a_bytes = float(m * kk * b)
                if all(x in a for x in ("n", "c", "h", "w")):   # the input tensor, not im2col
                    a_bytes = min(a_bytes, a["n"] * (a["c"] // groups) * a["h"] * a["w"] * b)
                return groups, m, n, kk, a_bytes
            if all(x in a for x in ("m", "n", "k")):
                batch = int(a.get("batch", 1) or 1)
                m, n, kk = int(a["m"]), int(a["n"]), int(a["k"])
            else:   # fall back on the shapes: (..., m, k) @ (..., k, n)
                sa, sb = op.input_shapes[0], op.input_shapes[1]
                m, kk, n = sa[-2] if len(sa) > 1 else 1, sa[-1], sb[-1]
                batch = math.prod(sa[:-2]) if len(sa) > 2 else 1
            if a.get("weight_operand", False) and batch > 1:   # shared B: stack the rows
                m, batch = m * batch, 1
            return batch, m, n, kk, float(m * kk * b)
        except (KeyError, IndexError, TypeError, ValueError):
            raise BadInput(f"op {op.name}.attrs", dict(a), f"a {op.kind} op needs "
                           + ("gemm_m, gemm_n, gemm_k" if op.kind == ir.CONV else "m, n, k")
                           + " (or operand shapes)") from None

    def _gemm_op_cost(self, op: Op) -> OpCost:
        gemms, m, n, k, a_bytes = self._gemm_shape(op)
        return self._gemm_cost(op, gemms, m, n, k, a_bytes)

    def _gemm_parts(self, gemms: int, m: int, n: int, k: int, a_bytes: float,
                    elems: tuple | None = None):
        """Cycles, DRAM re-fetch bytes, SRAM energy, fill/drain bytes of ``gemms`` GEMMs
        (``elems``: :meth:`elements`' weight and output bytes per element; this design's
        element by default); also the SRAM reads of each operand."""
        rows, cols, arrays, df = self._rows, self._cols, self._arrays, self._df
        b, bc = (self._b, self._b) if elems is None else (elems[1], elems[2])
        if self._problem:
            raise InfeasibleDesign(self._problem)
        cycles = systolic.gemm_compute_cycles(df, rows, cols, m, n, k, gemms, arrays)
        caps = self._caps
        psum_stall = systolic.psum_chunk_stall_cycles(df, rows, cols, m, n, k, caps["ofmap"],
                                                      ACC_BYTES, gemms, arrays)
        tiling = systolic.gemm_dram_passes(
            m, n, k, a_bytes / m, k * b, ACC_BYTES, caps["ifmap"], caps["filter"], caps["ofmap"],
            rows, cols * arrays, rows)
        if tiling is None:
            raise InfeasibleDesign(f"no tile of the {m}x{n}x{k} GEMM fits the scratchpads")
        b_bytes, c_bytes = k * n * b, m * n * bc
        refetch = gemms * ((tiling.a_passes - 1) * a_bytes + (tiling.b_passes - 1) * b_bytes)
        acc = systolic.gemm_sram_accesses(df, rows, cols, m, n, k)
        ej = self._sram_j
        ba = b if elems is None else elems[0]
        sram_j = gemms * (acc.ifmap_reads * ba * ej["ifmap"] + acc.filter_reads * b * ej["filter"]
                          + (acc.ofmap_writes + acc.ofmap_reads) * ACC_BYTES * ej["ofmap"])
        sram_bytes = gemms * (ba * acc.ifmap_reads + b * acc.filter_reads
                              + ACC_BYTES * (acc.ofmap_writes + acc.ofmap_reads))
        # DMA side: what crosses DRAM is written into / read out of a scratchpad once
        dma = (tiling.a_passes * a_bytes, tiling.b_passes * b_bytes, c_bytes)
        sram_j += gemms * (dma[0] * ej["ifmap"] + dma[1] * ej["filter"] + dma[2] * ej["ofmap"])
        sram_bytes += gemms * sum(dma)
        rk, edge_m, edge_n = min(k, rows), min(m, rows), min(n, cols * arrays)
        fill = a_bytes / (m * k) * edge_m * rk + rk * edge_n * b
        drain = edge_m * edge_n * bc
        dims_bytes = gemms * (a_bytes + b_bytes + c_bytes)
        reads = (gemms * acc.ifmap_reads, gemms * acc.filter_reads)
        return cycles, psum_stall, refetch, sram_j, sram_bytes, fill, drain, dims_bytes, reads

    def _gemm_cost(self, op: Op, gemms: int, m: int, n: int, k: int, a_bytes: float) -> OpCost:
        if min(gemms, m, n, k) <= 0:
            return self._vector_cost(op)
        elems = self.elements(op)
        if elems[3] == "vector":
            return self._vector_gemm_cost(op, float(gemms * m * n * k))
        (cycles, psum_stall, refetch, sram_j, sram_bytes, fill, drain, dims_bytes,
         reads) = self._gemm_parts(gemms, m, n, k, a_bytes, elems)
        compulsory = op.total_bytes * self._scale(op) or dims_bytes
        macs = gemms * m * n * k
        return self._finish("array", cycles, compulsory + refetch, fill, drain,
                            stall_cycles=psum_stall,
                            compute_j=macs * self._mac_j + self._dequant_j(elems, reads),
                            sram_j=sram_j, sram_bytes=sram_bytes,
                            reg_bytes=macs * _register_bytes_per_mac(elems[0], elems[1]))

    def _dequant_j(self, elems: tuple, reads: tuple) -> float:
        """Energy of scaling operands the array does not take natively into its format on
        their way from the scratchpad: one multiply (a MAC's energy [E]) per element read."""
        return self._mac_j * sum(r for r, mode in zip(reads, elems[3:]) if mode == "dequant")

    # attention --------------------------------------------------------------------------------
    def _attention_cost(self, op: Op, work_fraction: float | None = None,
                        mask_ops: float = 0.0) -> OpCost:
        """QK^T and PV per head on the array(s), softmax on the vector unit, fused: scores stay
        on chip (online softmax, FlashAttention-style) and the vector unit works on one tile
        while the array computes the next, so the op takes the longer of the two and holds
        both units. Causal masking skips the fraction of work ``causal_flops / flops``; a
        sparse op passes its own ``work_fraction`` and the vector unit's ``mask_ops``."""
        hw = self.hw
        elems = self.elements(op)
        b, bkv, bc = elems[:3]
        batch, heads, kv_heads, sq, skv, d, dv, frac = attention_dims(op)
        if elems[3] == "vector":
            frac = frac if work_fraction is None else work_fraction
            scores = batch * heads * sq * skv * frac
            return self._vector_gemm_cost(op, scores * (d + dv), scores * VECTOR_OPS_PER_ELEMENT[
                ir.SOFTMAX] + mask_ops)
        frac = frac if work_fraction is None else work_fraction
        g = batch * heads
        if self._problem:
            raise InfeasibleDesign(self._problem)
        qk = systolic.gemm_compute_cycles(hw.dataflow, hw.rows, hw.cols, sq, skv, d, g, hw.arrays)
        pv = systolic.gemm_compute_cycles(hw.dataflow, hw.rows, hw.cols, sq, dv, skv, g, hw.arrays)
        array_cycles = math.ceil((qk + pv) * frac)
        scores = g * sq * skv * frac
        vector_ops = scores * VECTOR_OPS_PER_ELEMENT[ir.SOFTMAX] + mask_ops
        vector_cycles = math.ceil(vector_ops / hw.vector_lanes)
        cycles = max(array_cycles, vector_cycles)

        # DRAM: Q, O once; K and V once per block of Q rows unless one group's K, V fit on chip.
        group_rows = sq * max(1, heads // max(1, kv_heads))
        kv_group = skv * ir.kv_row_elements(op.attrs) * bkv
        cap_i, cap_f, cap_o = (self._sram_bytes[p] / 2 for p in ("ifmap", "filter", "ofmap"))
        tile_q = min(group_rows, int(cap_i // (d * b)),
                     int(cap_o // ((min(skv, hw.cols * hw.arrays) + dv) * ACC_BYTES)))
        passes = 1 if kv_group <= cap_f else math.ceil(group_rows / max(1, tile_q))
        kv_bytes = batch * kv_heads * kv_group
        q_o_bytes = g * sq * (d * b + dv * bc)
        compulsory = op.total_bytes * self._scale(op) or (q_o_bytes + kv_bytes)
        refetch = (passes - 1) * kv_bytes * frac   # causal: later Q blocks need a K/V prefix

        # SRAM: the two GEMMs' operand streams, scores written/read once in 32 bit, P in b bytes.
        acc1 = systolic.gemm_sram_accesses(hw.dataflow, hw.rows, hw.cols, sq, skv, d)
        acc2 = systolic.gemm_sram_accesses(hw.dataflow, hw.rows, hw.cols, sq, dv, skv)
        per = lambda x, y: x * b * self._sram_j["ifmap"] + y * bkv * self._sram_j["filter"]
        sram_j = g * frac * (per(acc1.ifmap_reads + acc2.ifmap_reads,
                                 acc1.filter_reads + acc2.filter_reads)
                             + (acc1.ofmap_writes + acc1.ofmap_reads + acc2.ofmap_writes
                                + acc2.ofmap_reads) * ACC_BYTES * self._sram_j["ofmap"])
        sram_j += scores * (2 * ACC_BYTES * self._sram_j["ofmap"] + 2 * bc * self._sram_j["ifmap"])
        sram_bytes = g * frac * (b * (acc1.ifmap_reads + acc2.ifmap_reads)
                                 + bkv * (acc1.filter_reads + acc2.filter_reads)
                                 + ACC_BYTES * (acc1.ofmap_writes + acc1.ofmap_reads
                                                + acc2.ofmap_writes + acc2.ofmap_reads))
        sram_bytes += scores * 2 * (ACC_BYTES + bc)
        macs = g * sq * skv * (d + dv) * frac
        rows = min(sq, hw.rows)
        fill = rows * d * b + min(skv, hw.cols * hw.arrays) * d * bkv
        drain = rows * dv * bc
        reads = (g * frac * (acc1.ifmap_reads + acc2.ifmap_reads),
                 g * frac * (acc1.filter_reads + acc2.filter_reads))
        return self._finish("array", cycles, compulsory + refetch, fill, drain,
                            compute_j=macs * self._mac_j + vector_ops * self._vec_j
                            + self._dequant_j(elems, reads),
                            sram_j=sram_j, sram_bytes=sram_bytes,
                            reg_bytes=macs * _register_bytes_per_mac(b, bkv) + vector_ops * 3 * bc,
                            also_holds=("vector",))

    def _sparse_attention_cost(self, op: Op) -> OpCost:
        """A systolic array skipping whole tiles: query blocks of ``rows`` queries by key
        blocks of ``cols`` keys (the stationary K tile of QK^T), so the array shape is the
        tile shape. The visited tiles' share of the dense attention work (padding and masked
        pairs included) runs as dense attention; partial tiles evaluate the mask on the
        vector unit (the op's ``mask_ops`` lane operations per score)."""
        a = op.attrs
        tiles = op_tiles(a, self.hw.rows, self.hw.cols)
        dense = int(a["q_len"]) * int(a["kv_len"])
        frac = tiles.visited * tiles.block_q * tiles.block_kv / dense
        per_map = tiles.partial * tiles.block_q * tiles.block_kv * float(a.get("mask_ops", 0))
        maps = int(a.get("batch", 1)) * int(a["heads"])
        cost = self._attention_cost(op, work_fraction=frac, mask_ops=per_map * maps)
        return replace(cost, details={**tiles.to_dict(), "masked_tiles": tiles.partial})

    # vector unit ------------------------------------------------------------------------------
    def _vector_cost(self, op: Op) -> OpCost:
        """Lane operations over ``vector_lanes``; data staged through ifmap (in) and ofmap (out)
        scratchpads; ops that make several passes re-read their input on chip."""
        hw = self.hw
        b = op.bytes_per_element if "formats" in op.attrs else self._b
        lane_ops, read, written, dram, read_x, reg_bytes = vector_parts(op, b)
        cycles = math.ceil(lane_ops / hw.vector_lanes)
        sram_j = read_x * self._sram_j["ifmap"] + written * 2 * self._sram_j["ofmap"]
        sram_bytes = read_x + written * 2
        chunk = hw.vector_lanes * b
        return self._finish("vector", cycles, dram, min(read, chunk), min(written, chunk),
                            compute_j=lane_ops * self._vec_j, sram_j=sram_j,
                            sram_bytes=sram_bytes, reg_bytes=reg_bytes)

    # common -----------------------------------------------------------------------------------
    def _finish(self, unit: str, cycles: float, dram_bytes: float, fill_bytes: float,
                drain_bytes: float, *, compute_j: float, sram_j: float, sram_bytes: float,
                reg_bytes: float, also_holds: tuple[str, ...] = (),
                stall_cycles: float = 0.0) -> OpCost:
        """``cycles`` are compute cycles (SCALE-Sim's convention); ``stall_cycles`` are array
        stalls that are not DRAM transfers (partial sums over the output scratchpad)."""
        bw, clock = self._bw, self._clock
        compute_s = max(cycles, 0) / clock
        busy_s = compute_s + max(stall_cycles, 0) / clock
        fill_bytes = min(fill_bytes, dram_bytes)
        drain_bytes = min(drain_bytes, dram_bytes - fill_bytes)
        overlap_s = (dram_bytes - fill_bytes - drain_bytes) / bw
        latency_s = fill_bytes / bw + max(busy_s, overlap_s) + drain_bytes / bw
        active_w = self._active_w[unit] + sum(self._active_w[u] for u in also_holds)
        compute_j = compute_j + active_w * latency_s
        return OpCost(
            unit=unit, latency_s=latency_s, compute_s=compute_s, clock_hz=clock,
            traffic={"dram": dram_bytes},
            bytes_by_level={"register": reg_bytes, "sram": sram_bytes, "dram": dram_bytes},
            energy_j={"compute": compute_j,
                      "onchip_memory": sram_j + reg_bytes * self._reg_j,
                      "offchip_memory": dram_bytes * self._dram_j},
            bound="memory" if overlap_s > busy_s else "compute",
            also_holds=also_holds)

    # ----------------------------------------------------------------------------- the rest
    def resources(self) -> Resources:
        return Resources(units={"array": 1, "vector": 1},
                         channels={"dram": self._bw})

    def unused_params(self) -> set[str]:
        """``dram_bandwidth_Bps`` sizes the memory only when ``dram_devices`` is 0."""
        return {"dram_bandwidth_Bps"} if self.hw.dram_devices else set()

    def peaks(self, dtype: str) -> Peaks:
        """The arrays' MACs (2 FLOPs each) and the vector lanes (an FMA each) per cycle, on
        the design's own datapath whatever the workload's dtype; DRAM at its peak pin
        bandwidth (where weights and KV start) inside which the scratchpads hold data; the
        cheapest FLOP is a vector op or half a MAC (:mod:`accelerators.technology`)."""
        hw, node = self.hw, self.hw.node_nm
        sram = sum(self._sram_bytes.values())
        return Peaks(
            flops_per_s={"array": 2.0 * hw.rows * hw.cols * hw.arrays * hw.clock_hz,
                         "vector": 2.0 * hw.vector_lanes * hw.clock_hz},
            levels=(MemoryLevel("dram", self.memory.bandwidth_Bps, self.memory.capacity_bytes,
                                self.memory.energy_j_per_byte, resident=True),
                    MemoryLevel("sram", math.inf, sram, min(self._sram_j.values()))),
            energy_per_flop_j=min(self._mac_j / 2, self._vec_j))

    def floorplan(self) -> Floorplan:
        """Systolic PEs (:func:`technology.pe_area_mm2`) and vector lanes, the three
        scratchpads, their peak power (every PE and lane busy each cycle, the arrays' operand
        and partial-sum streams through the scratchpads), leakage, and the memory system."""
        hw, b = self.hw, self._b
        node = hw.node_nm
        pes = hw.rows * hw.cols * hw.arrays
        compute = sum(self._unit_logic_mm2())
        sram_bytes = sum(self._sram_bytes.values())
        sram = tech.sram_area_mm2(sram_bytes, node)
        sram_j = self._sram_j
        per_cycle_j = (pes * (self._mac_j + _register_bytes_per_mac(b)
                              * tech.register_energy_j_per_byte(node))
                       + hw.vector_lanes * self._vec_j
                       + hw.arrays * (hw.rows * b * sram_j["ifmap"]
                                      + 2 * hw.cols * ACC_BYTES * sram_j["ofmap"])
                       + hw.vector_lanes * 2 * b * sram_j["ifmap"])
        return Floorplan(node_nm=node, compute_mm2=compute, sram_mm2=sram,
                         peak_dynamic_w=per_cycle_j * hw.clock_hz,
                         leakage_w=tech.leakage_w(compute + control_mm2(compute, sram),
                                                  sram_bytes, node),
                         memory=self.memory, host_interface=hw.host_interface,
                         dies=hw.chiplets, clock_hz=hw.clock_hz)

    def _unit_logic_mm2(self) -> tuple[float, float]:
        """Counted logic of the arrays' PEs and of the vector lanes, mm^2."""
        hw = self.hw
        vec = mac_formats.vector_format(hw.dtype)
        return (hw.rows * hw.cols * hw.arrays * mac_formats.pe_area_mm2(hw.dtype, hw.node_nm),
                VECTOR_LANE_AREA_PER_MAC * hw.vector_lanes * tech.mac_area_mm2(vec, hw.node_nm))
