"""``cpu``: a multi-core server CPU (cores x SIMD FMA units, a cache hierarchy, DDR channels).

Fixed silicon, like the ``gpu``: the parameters are the datasheet (cores, clock, SIMD width,
FMA units per core, caches, DDR channels and data rate, TDP) plus two kernel efficiencies and a
per-op overhead, each tagged with its source. Every op is one parallel kernel over all cores:

* **compute**: matmul, convolution and attention at ``gemm_efficiency`` of the SIMD FMA peak
  (``cores x simd_bits / 32 lanes x 2 FLOP x fma_units x clock`` in fp32); every other op on
  the same SIMD lanes at one operation per lane and FMA unit per cycle (the npu's lane
  operations per element, :data:`accelerators.npu.VECTOR_OPS_PER_ELEMENT`). fp16 / bf16 run
  at the fp32 rate (converted in registers, no half-precision FMA: Skylake-SP class) unless
  ``bf16_dot`` (AVX512-BF16 / AMX: twice); int8 at four times with ``int8_dot`` (VNNI);
* **memory**: weights, the KV cache and an optimizer's states stream from DRAM (an LLM's
  weights are many times the last-level cache: a bound from the slow side for a model that
  would fit), activations stay in the caches while an op's activations fit the L3, else they
  cross DRAM too; DRAM at
  ``stream_efficiency`` of the channels' peak, the L3 at ``L3_BYTES_PER_CYCLE_PER_CORE``;
* **latency** = ``op_overhead_s`` (framework dispatch and the parallel region's fork/join) +
  max(compute, DRAM, L3): a roofline per op.

Energy as the gpu's: a dynamic energy per FLOP (of each dtype: at its own peak rate) and per
DRAM byte such that the chip at its sustained GEMM rate, or its sustained stream bandwidth,
burns ``tdp_w - idle_power_w`` (x ``MEMORY_POWER_FRACTION`` for streaming) [E]; a DRAM byte
never costs less than the memory standard's own energy. ``static_power_w`` is the idle power.
The TDP is a limit, not a free knob: an op whose dynamic energy the budget cannot pay in its
roofline time runs power-limited (latency >= dynamic energy / (``tdp_w`` - ``idle_power_w``),
as a package throttles its clock), a design may not claim a lower energy per FLOP than the most
efficient CPU datasheet held (:data:`FLOP_J_FLOOR_45NM`, scaled to the node), nor an idle power
below its silicon's leakage and its memory's background, and DRAM streams at most at the
standard's sustained share (``MemorySystem.sustained_bandwidth_Bps``, every template's rule).

Silicon (:meth:`CPU.floorplan`): ``cores_on_die`` cores (a core's logic at the node, with its
SIMD units), L1 + L2 per core and the L3 as SRAM, the DDR PHYs and controllers by the memory
standard, ``CPU_CONTROL_OVERHEAD`` for the uncore (mesh, I/O, PCIe/UPI agents). Power is the
datasheet's TDP.
"""

from __future__ import annotations

import math
from typing import Any

from accelerators import technology as tech
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.composite import cost_composite
from accelerators.memory_standards import MemorySystem, get_standard, memory_system
from accelerators.npu import VECTOR_OPS_PER_ELEMENT, element_ops
from accelerators.physical import Floorplan
from workloads import ir
from workloads.ir import DTYPE_BYTES, Op

#: The optimizer pass's label on an op (``workloads.training.OPT``; that module imports torch).
OPT_PASS = "opt"

#: L3 bandwidth per core, bytes per cycle [E: Skylake-SP's L2 <-> L3 path moves a 64-B line
#: every ~4 cycles per core under load (measured aggregate L3 read bandwidth of an 18-28 core
#: Skylake-SP part is ~0.5-1 TB/s)].
L3_BYTES_PER_CYCLE_PER_CORE = 16.0
#: Share of the dynamic power a memory-bound kernel burns, relative to a GEMM [E; the gpu's
#: copy/GEMM power ratio measured on the H200 was 0.86; a CPU's cores stall more while
#: streaming].
MEMORY_POWER_FRACTION = 0.6
#: Logic area of one core without its SIMD FMA units and caches, mm^2 at 14 nm [E: a
#: Skylake-SP core tile is ~17 mm^2 at Intel 14 nm with 1 MiB L2 and a 1.375 MiB L3 slice
#: (WikiChip, XCC die 694 mm^2 / 28 tiles, die shots); the caches and two 512-bit FMA units
#: taken out leave ~6 mm^2 of front end, out-of-order engine, scalar units and L1 control].
CORE_BASE_MM2_14NM = 6.0
#: One 512-bit FMA unit with its share of the vector register file and bypass, mm^2 at 14 nm
#: [E: AVX-512's port-5 FMA is ~1.2 mm^2 on the Skylake-SP die shot].
FMA512_MM2_14NM = 1.2
#: bf16 / fp16 dot-product support (AVX512-BF16; AMX tiles are larger still) as a share of the FMA
#: unit's area it widens, and int8 dot products (VNNI) likewise [E: both reuse the FMA
#: multiplier array and add narrower multipliers, adder trees and conversion; VNNI came to
#: Cascade Lake on Skylake-SP's die]. Not free: a search otherwise takes them at no cost.
BF16_DOT_AREA_SHARE = 0.25
INT8_DOT_AREA_SHARE = 0.05
#: Uncore (mesh stops, caching/home agents, PCIe, UPI, power control) as a fraction of the
#: cores' logic [E: on the 694 mm^2 XCC die about a third of the area is outside the 28 core
#: tiles; part of that is the DDR PHYs the memory standard already charges].
CPU_CONTROL_OVERHEAD = 0.35

_GEMM_KINDS = (ir.MATMUL, ir.CONV, ir.ATTENTION, ir.SPARSE_ATTENTION)

PARAMS = (
    Param("cores", int, "", 18, "cores that run the workload", 1, 512, log=True),
    Param("cores_on_die", int, "", 0, "cores on the die (area; 0 = cores)", 0, 512),
    Param("clock_hz", float, "Hz", 2.7e9, "sustained all-core clock with the widest SIMD "
          "busy", 5.0e8, 6.0e9, log=True),
    Param("simd_bits", int, "bit", 512, "SIMD register width", choices=(128, 256, 512)),
    Param("fma_units", int, "", 2, "SIMD FMA units per core", 1, 4),
    Param("bf16_dot", bool, "", False, "native bf16 / fp16 dot products (AVX512-BF16, AMX): "
          "twice the fp32 rate"),
    Param("int8_dot", bool, "", False, "int8 dot products (VNNI): four times the fp32 rate"),
    Param("l1d_kb", int, "KiB", 32, "L1 data cache per core", 8, 1024, log=True),
    Param("l2_kb", int, "KiB", 1024, "L2 cache per core", 64, 16384, log=True),
    Param("l3_mb", float, "MiB", 24.75, "shared last-level cache", 0.0, 1024.0),
    Param("dram", str, "", "ddr4", "memory standard", choices=("ddr4", "ddr5")),
    Param("dram_channels", int, "", 6, "DDR channels (64-bit each)", 1, 16),
    Param("dram_data_rate_gbps", float, "Gb/s", 2.666, "per-pin data rate the channels run "
          "at", 0.8, 9.6),
    Param("dram_device_gb", float, "GB", 16.0, "capacity per channel (one of the standard's)",
          1.0, 128.0),
    Param("gemm_efficiency", float, "", 0.8, "share of the FMA peak a GEMM kernel sustains",
          0.05, 1.0),
    Param("stream_efficiency", float, "", 0.78, "share of the DRAM peak a streaming kernel "
          "sustains", 0.05, 1.0),
    Param("op_overhead_s", float, "s", 5.0e-6, "fixed time per op: framework dispatch and "
          "the parallel region's fork / join", 0.0, 1.0e-2),
    Param("tdp_w", float, "W", 200.0, "package power limit", 1.0, 2000.0),
    Param("idle_power_w", float, "W", 40.0, "package power idle, memory background included",
          0.0, 1000.0),
    Param("node_nm", int, "nm", 14, "process node", choices=tech.NODES_NM),
)

PRESETS: dict[str, dict[str, Any]] = {
    # Intel Xeon Gold 6154 (Skylake-SP, the CPU baseline of PIM-GPT): 18 cores on the 28-core
    # XCC die, two AVX-512 FMA units per core, 32 KiB L1d and 1 MiB L2 per core, 24.75 MiB L3,
    # six DDR4-2666 channels (128 GB/s), 200 W TDP, Intel 14 nm [D Intel ARK 120495; WikiChip
    # Skylake-SP]; AVX-512 all-core turbo 2.7 GHz [D, check: Intel Xeon Scalable specification
    # update, frequency table]; idle power and capacity per channel [E].
    "xeon-gold-6154": dict(cores=18, cores_on_die=28, clock_hz=2.7e9, simd_bits=512,
                           fma_units=2, l1d_kb=32, l2_kb=1024, l3_mb=24.75, dram="ddr4",
                           dram_channels=6, dram_data_rate_gbps=2.666, dram_device_gb=16.0,
                           tdp_w=200.0, idle_power_w=40.0, node_nm=14),
    # Intel Xeon Platinum 8480+ (Sapphire Rapids): 56 cores, AVX-512 with AMX (bf16 / int8),
    # 2 MiB L2 per core, 105 MiB L3, eight DDR5-4800 channels, 350 W, Intel 7 (a 10-nm-class
    # node) [D Intel ARK 231746]; AVX-512 all-core clock 2.0 GHz [E]; the AMX tiles' 8x bf16
    # rate is not modelled (bf16_dot gives 2x) [E].
    "xeon-8480": dict(cores=56, cores_on_die=60, clock_hz=2.0e9, simd_bits=512, fma_units=2,
                      bf16_dot=True, int8_dot=True, l1d_kb=48, l2_kb=2048, l3_mb=105.0,
                      dram="ddr5", dram_channels=8, dram_data_rate_gbps=4.8,
                      dram_device_gb=32.0, tdp_w=350.0, idle_power_w=90.0, node_nm=10),
}


def _datasheet_flop_j_45nm(p: dict[str, Any]) -> float:
    """Package energy per fp32 FLOP a preset's datasheet implies, normalised to 45 nm, J: its
    dynamic budget (TDP - idle) over its sustained fp32 GEMM rate (the ``gemm_efficiency``
    default), over ``technology.energy_scale`` of its node."""
    gemm = next(q.default for q in PARAMS if q.name == "gemm_efficiency")
    peak = p["cores"] * p["simd_bits"] / 32 * 2 * p["fma_units"] * p["clock_hz"]
    return (p["tdp_w"] - p["idle_power_w"]) / (peak * gemm) / tech.energy_scale(p["node_nm"])


#: Least package energy per fp32 FLOP a design may claim, at 45 nm, J; other nodes scale with
#: ``technology.energy_scale`` [D-derived floor: the most efficient CPU datasheet held, the
#: Xeon Platinum 8480+ preset, 45.3 pJ at 10 nm (174 pJ at 45 nm); the Gold 6154's 64.3 pJ at
#: 14 nm is 195 pJ at 45 nm, 12 % above it]. A design whose TDP would buy its FLOPs cheaper (a
#: lower ``tdp_w``, or more cores, clock or SIMD width under the same one) is refused.
FLOP_J_FLOOR_45NM = min(_datasheet_flop_j_45nm(p) for p in PRESETS.values())


class CPU(Template):
    """A multi-core CPU: every op a parallel kernel over all cores, SIMD roofline per op."""

    name = "cpu"
    description = ("multi-core CPU (Xeon class): cores x SIMD FMA units, caches, DDR channels; "
                   "a roofline per op plus a per-op overhead")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "xeon-gold-6154"

    def validate(self):
        hw = self.hw
        if hw.cores_on_die and hw.cores_on_die < hw.cores:
            return ("hw.cores_on_die", hw.cores_on_die, f"expected 0 or at least cores = "
                    f"{hw.cores}")
        if hw.idle_power_w >= hw.tdp_w:
            return ("hw.idle_power_w", hw.idle_power_w, f"expected less than tdp_w={hw.tdp_w:g}")
        top = get_standard(hw.dram).data_rate_gbps
        if hw.dram_data_rate_gbps > top:
            return ("hw.dram_data_rate_gbps", hw.dram_data_rate_gbps,
                    f"expected at most {top:g} Gb/s for {hw.dram}")
        bandwidth = hw.dram_channels * 64 * hw.dram_data_rate_gbps * 1e9 / 8
        self.memory: MemorySystem = memory_system(hw.dram, hw.dram_channels, hw.dram_device_gb,
                                                  bandwidth, bandwidth_field="dram_data_rate_gbps")
        leak = self.min_idle_power_w()
        if hw.idle_power_w < leak * (1 - 1e-9):
            return ("hw.idle_power_w", hw.idle_power_w, f"expected at least {leak:,.1f} W: the "
                    "leakage of its cores and caches and its memory's background")
        need = self.min_tdp_w()
        if hw.tdp_w < need * (1 - 1e-9):
            return ("hw.tdp_w", hw.tdp_w, f"expected at least {need:,.0f} W: idle "
                    f"{hw.idle_power_w:g} W plus its sustained fp32 GEMM rate at "
                    f"{FLOP_J_FLOOR_45NM * tech.energy_scale(hw.node_nm) * 1e12:.1f} pJ per "
                    f"FLOP, the most efficient CPU datasheet held, at {hw.node_nm} nm")
        return None

    def min_idle_power_w(self) -> float:
        """Least idle power, W: leakage of the die's logic (with the uncore) and caches at the
        node (``technology.leakage_w``) plus the memory's background."""
        logic = self.die_cores * self.core_mm2() * (1 + CPU_CONTROL_OVERHEAD)
        return tech.leakage_w(logic, self.cache_bytes, self.hw.node_nm) + self.memory.static_w

    @property
    def die_cores(self) -> int:
        """Cores on the die (area and leakage), the enabled ones included."""
        return self.hw.cores_on_die or self.hw.cores

    @property
    def cache_bytes(self) -> float:
        """The die's caches: L1d and L2 of every core on it, and the L3, B."""
        hw = self.hw
        return self.die_cores * (hw.l1d_kb + hw.l2_kb) * 1024 + hw.l3_mb * 2**20

    def min_tdp_w(self) -> float:
        """Least TDP, W: idle power plus the sustained fp32 GEMM rate at
        :data:`FLOP_J_FLOOR_45NM` scaled to the node."""
        hw = self.hw
        return hw.idle_power_w + (FLOP_J_FLOOR_45NM * tech.energy_scale(hw.node_nm)
                                  * self.peak_flops("fp32") * hw.gemm_efficiency)

    # ----------------------------------------------------------------------------- rates
    @property
    def lanes_fp32(self) -> int:
        return self.hw.simd_bits // 32

    def peak_flops(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s of the SIMD FMA units in ``dtype`` (every core, every FMA unit)."""
        hw = self.hw
        rate = hw.cores * self.lanes_fp32 * 2 * hw.fma_units * hw.clock_hz
        if dtype in ("fp16", "bf16") and hw.bf16_dot:
            return 2 * rate
        if dtype in ("int8", "fp8") and hw.int8_dot:
            return 4 * rate
        return rate

    def vector_ops_per_s(self, dtype: str = "fp32") -> float:
        """Lane operations per second of the SIMD units (one per lane and FMA unit per cycle)."""
        hw = self.hw
        return hw.cores * self.lanes_fp32 * hw.fma_units * hw.clock_hz

    @property
    def dram_Bps(self) -> float:
        """Sustained DRAM bandwidth of a streaming kernel, B/s: ``stream_efficiency`` of the
        channels' peak, at most the memory standard's sustained share."""
        return min(self.memory.bandwidth_Bps * self.hw.stream_efficiency,
                   self.memory.sustained_bandwidth_Bps)

    @property
    def l3_Bps(self) -> float:
        return self.hw.cores * L3_BYTES_PER_CYCLE_PER_CORE * self.hw.clock_hz

    def _energy(self, dtype: str = "fp32") -> tuple[float, float, float]:
        """(J per FLOP of ``dtype``, J per DRAM byte in the DRAM, J per DRAM byte on chip): a
        GEMM at its dtype's sustained rate burns the dynamic budget, a stream at the sustained
        bandwidth ``MEMORY_POWER_FRACTION`` of it, a DRAM byte at least the standard's own."""
        hw = self.hw
        dynamic = hw.tdp_w - hw.idle_power_w
        per_flop = dynamic / (self.peak_flops(dtype) * hw.gemm_efficiency)
        dram = self.memory.energy_j_per_byte
        per_byte = max(dynamic * MEMORY_POWER_FRACTION / self.dram_Bps, dram)
        return per_flop, dram, per_byte - dram

    # ----------------------------------------------------------------------------- cost
    def cost(self, op: Op) -> OpCost:
        if op.kind in ir.COMPOSITE_KINDS:
            return cost_composite(op, self.cost, fixed_s=self.hw.op_overhead_s)
        hw = self.hw
        b = DTYPE_BYTES.get(op.dtype, op.bytes_per_element)
        scale = b / op.bytes_per_element if op.bytes_per_element else 1.0
        if op.kind in _GEMM_KINDS:
            compute = op.flops / (self.peak_flops(op.dtype) * hw.gemm_efficiency)
            lane_ops = 0.0
        else:
            lane_ops = _lane_ops(op)
            compute = lane_ops / self.vector_ops_per_s(op.dtype)
        activations = (op.activation_bytes_read + op.activation_bytes_written) * scale
        dram = (op.weight_bytes + op.kv_bytes_read + op.kv_bytes_written) * scale
        on_chip = activations
        # the op's activations do not fit the L3, or they are an optimizer's states (every
        # parameter's, read and written once a step: they stream like the weights)
        if activations > hw.l3_mb * 2**20 or op.attrs.get("pass") == OPT_PASS:
            dram += activations
            on_chip = 0.0
        dram_s = dram / self.dram_Bps
        l3_s = on_chip / self.l3_Bps
        gemm = op.kind in _GEMM_KINDS
        per_flop, dram_j, onchip_j = self._energy(op.dtype if gemm else "fp32")
        energy = {"compute": (op.flops if gemm else lane_ops) * per_flop,
                  "onchip_memory": dram * onchip_j
                  + on_chip * tech.sram_energy_j_per_byte(hw.l3_mb * 2**20, hw.node_nm),
                  "offchip_memory": dram * dram_j}
        roofline = max(compute, dram_s, l3_s)
        # the package's power limit: what the roofline time cannot pay for, throttling stretches
        powered = sum(energy.values()) / (hw.tdp_w - hw.idle_power_w)
        return OpCost(unit="cpu", latency_s=hw.op_overhead_s + max(roofline, powered),
                      compute_s=compute, clock_hz=hw.clock_hz,
                      traffic={"dram": dram} if dram else {},
                      bytes_by_level={"cache": on_chip, "dram": dram}, energy_j=energy,
                      bound=("power" if powered > roofline else
                             "memory" if max(dram_s, l3_s) > compute else "compute"))

    # ----------------------------------------------------------------------------- the rest
    def resources(self) -> Resources:
        return Resources(units={"cpu": 1}, channels={"dram": self.dram_Bps})

    def peaks(self, dtype: str) -> Peaks:
        """The SIMD units' peak in ``dtype``; DRAM at the channels' peak, inside which the
        caches hold data; the cheapest FLOP is half a MAC or a vector op of ``dtype`` at the
        node (``technology``: far below what the package spends, as a floor must be)."""
        hw = self.hw
        return Peaks(flops_per_s={"cpu": self.peak_flops(dtype)},
                     levels=(MemoryLevel("dram", self.memory.bandwidth_Bps,
                                         self.memory.capacity_bytes,
                                         self.memory.energy_j_per_byte, resident=True),
                             MemoryLevel("cache", math.inf, self.cache_bytes, 0.0)),
                     energy_per_flop_j=min(tech.mac_energy_j(dtype, hw.node_nm) / 2,
                                           tech.vector_op_energy_j(dtype, hw.node_nm)))

    def core_mm2(self) -> float:
        """One core's logic with its SIMD FMA units, mm^2 at the node."""
        hw = self.hw
        fma = FMA512_MM2_14NM * (1 + BF16_DOT_AREA_SHARE * hw.bf16_dot
                                 + INT8_DOT_AREA_SHARE * hw.int8_dot)
        at_14 = CORE_BASE_MM2_14NM + hw.fma_units * hw.simd_bits / 512 * fma
        return at_14 * tech.area_scale(hw.node_nm) / tech.area_scale(14)

    def floorplan(self) -> Floorplan:
        """Cores (logic and SIMD units) and caches on one die, DDR channels as its memory, the
        datasheet's TDP and idle power."""
        hw = self.hw
        mem = self.memory
        mem_w = mem.bandwidth_Bps * mem.energy_j_per_byte
        return Floorplan(node_nm=hw.node_nm, compute_mm2=self.die_cores * self.core_mm2(),
                         sram_mm2=tech.sram_area_mm2(self.cache_bytes, hw.node_nm),
                         peak_dynamic_w=max(0.0, hw.tdp_w - hw.idle_power_w - mem_w),
                         leakage_w=max(0.0, hw.idle_power_w - mem.static_w), memory=mem,
                         host_interface="pcie4x16", control_overhead=CPU_CONTROL_OVERHEAD)

    def static_power_w(self) -> float:
        return self.hw.idle_power_w


def _lane_ops(op: Op) -> float:
    """SIMD lane operations of a non-GEMM op: elements x operations per element (the npu's
    table), or its FLOPs when it counts more."""
    elements = op.attrs.get("elements")
    if not isinstance(elements, (int, float)) or elements <= 0:
        outs = [math.prod(s) for s in op.output_shapes if s is not None]
        elements = sum(outs) if outs else 0
    return element_ops(op, float(elements) * VECTOR_OPS_PER_ELEMENT.get(op.kind, 1))
