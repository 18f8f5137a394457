"""``gpu``: a CUDA GPU (A100, H100, H200, T4, RTX 3090 presets) running PyTorch eager kernels.

The baseline every seed paper compares against. Each op is one kernel (ops on one stream
serialise: one ``sm`` unit), costed in closed form by :mod:`accelerators.gpu_efficiency`:

* GEMM (``matmul``): wave and tile quantisation of output tiles over the SMs, split-K for
  skinny shapes, the compulsory bytes over the achievable bandwidth (GEMV and other memory-bound
  shapes), slower kernels for leading dimensions that are not 16-byte multiples, a fixed launch
  time.
* ``conv``: 1x1 convolutions as GEMMs, the rest as implicit GEMMs with cuDNN's layout
  transforms.
* ``attention``: flash-attention style (K/V read once per query block, causal blocks stop at
  the diagonal); decode (few query rows) bandwidth-bound over the KV cache with split-KV.
* everything else (elementwise, norm, softmax, reduction, embedding, data movement, unknown):
  bandwidth-bound kernels at the calibrated copy bandwidth times a per-operator efficiency,
  plus a kernel floor.

Efficiencies are estimates [E] unless a calibration file is loaded (``calibration=h200`` is set
by the ``h200`` preset: fitted on an H200 by ``dse calibrate gpu``; docs/validation.md (gpu section)).

Energy: a dynamic energy per FLOP and per HBM byte such that a chip running its sustained GEMM
rate, or its achievable copy bandwidth, burns ``tdp_w - idle_power_w`` (x
``memory_power_fraction`` for the copy) [E; on the H200 the measured split was 680 W under a
sustained bf16 GEMM and 616 W under a 1 GiB copy loop, 119 W idle with a CUDA context]. The
per-byte energy is split into the DRAM's own energy (technology table) and the rest (L2, NoC,
load/store: ``onchip_memory``). ``static_power_w`` is the idle power.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from accelerators import technology as tech
from accelerators.base import OpCost, Param, Resources, Template
from accelerators.composite import cost_composite
from accelerators.memory_standards import STANDARD_NAMES, memory_system
from accelerators.physical import HOST_INTERFACES, Floorplan
from accelerators.gpu_efficiency import DEFAULT_KNOBS, Chip, KernelModel
from dse.errors import BadInput
from workloads import ir
from workloads.ir import DTYPE_BYTES, Op, Workload

#: Folder of the calibrations shipped with the package (package data).
CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"

#: Knobs of the kernel model exposed as parameters (the rest come from the calibration file or
#: ``gpu_efficiency.DEFAULT_KNOBS``).
KNOB_PARAMS = ("tensor_efficiency", "fp8_efficiency", "int8_efficiency", "fp32_efficiency",
               "bandwidth_efficiency", "gemm_bandwidth_efficiency", "attention_efficiency",
               "conv_efficiency")

#: Fixed per-kernel times that ``launch_overhead_s`` shifts together (it is the floor of the
#: smallest kernel, ``mem_floor_s``; the others keep their calibrated offsets from it).
_FIXED_TIMES = ("mem_floor_s", "gemm_launch_s", "attention_launch_s", "decode_launch_s",
                "conv_launch_s")

PARAMS = (
    Param("sms", int, "SMs", 132, "streaming multiprocessors (thread blocks run one wave per "
          "SM at a time)", 1, 1024),
    Param("clock_hz", float, "Hz", 1.98e9, "SM boost clock (reported cycles use it)",
          1e8, 5e9, log=True),
    Param("peak_bf16_flops", float, "FLOP/s", 989e12, "dense bf16 tensor-core peak",
          1e11, 1e17, log=True),
    Param("peak_fp16_flops", float, "FLOP/s", 989e12, "dense fp16 tensor-core peak "
          "(fp32 accumulate)", 1e11, 1e17, log=True),
    Param("peak_fp32_flops", float, "FLOP/s", 67e12, "fp32 CUDA-core peak (no tensor cores; "
          "PyTorch's default keeps tf32 off)", 1e10, 1e16, log=True),
    Param("peak_fp8_flops", float, "FLOP/s", 1979e12, "dense fp8 tensor-core peak; 0: no "
          "fp8 (fp8 ops run at the fp16 rate)", 0.0, 1e17),
    Param("peak_int8_ops", float, "OP/s", 1979e12, "dense int8 tensor-core peak; 0: none "
          "(int8 ops run at the fp16 rate)", 0.0, 1e17),
    Param("memory_bandwidth_Bps", float, "B/s", 4.8e12, "DRAM bandwidth (datasheet)",
          1e10, 1e14, log=True),
    Param("memory_capacity_bytes", float, "B", 141e9, "DRAM capacity usable by kernels (at "
          "most the devices' total)", 1e8, 1e13, log=True),
    Param("memory_kind", str, "", "hbm3e", "off-chip memory standard "
          "(accelerators.memory_standards)", choices=STANDARD_NAMES),
    Param("memory_devices", int, "", 0, "memory devices installed (HBM stacks, GDDR chips); "
          "0: the fewest that reach memory_bandwidth_Bps", 0, 32),
    Param("memory_devices_on_die", int, "", 0, "memory PHYs on the die, disabled ones "
          "included (A100 and H100 have six HBM sites and fill five); 0: memory_devices", 0, 32),
    Param("memory_device_gb", float, "GB", 0.0, "capacity of each memory device; 0: the "
          "standard's default", 0.0, 128.0),
    Param("l2_bytes", float, "B", 60 * 2**20, "L2 cache", 1e5, 1e10, log=True),
    Param("tdp_w", float, "W", 700.0, "board power limit", 1.0, 5000.0),
    Param("idle_power_w", float, "W", 119.0, "power with a CUDA context and no kernel "
          "running (static power)", 0.0, 2000.0),
    Param("sms_on_die", int, "SMs", 0, "SMs on the die, disabled ones included (area); 0: sms",
          0, 1024),
    Param("tensor_macs_per_sm", int, "MAC/cycle", 2048, "dense fp16 tensor-core multiply-"
          "accumulates per SM per cycle (area)", 1, 65536, log=True),
    Param("fp32_lanes_per_sm", int, "lanes", 128, "fp32 CUDA cores per SM (area)", 1, 4096,
          log=True),
    Param("l1_kb_per_sm", int, "KiB", 256, "L1 / shared memory per SM (area); the 256 KiB "
          "register file is added", 1, 65536, log=True),
    Param("node_nm", int, "nm", 4, "process node", choices=tech.NODES_NM),
    Param("host_interface", str, "", "pcie5x16", "link to the host",
          choices=tuple(HOST_INTERFACES)),
    Param("peer_links", int, "links", 18, "GPU-to-GPU links (NVLink) on the die", 0, 64),
    Param("peer_link_phy_mm2", float, "mm^2", 0.965, "PHY area of one peer link [R LLMCompass "
          "cost model: NVLink 3 1.888, NVLink 4 0.965 mm^2]", 0.0, 100.0),
    Param("dtype", str, "", "bf16", "element type the kernels run in (ops are costed in it)",
          choices=tuple(DTYPE_BYTES)),
    Param("launch_overhead_s", float, "s", 2.0e-6, "time of the smallest kernel back to back "
          "(the latency floor of every kernel; the GEMM, attention and convolution launch "
          "times move with it)", 0.0, 1e-4),
    Param("tensor_efficiency", float, "", DEFAULT_KNOBS["tensor_efficiency"],
          "fraction of the bf16/fp16 peak a large aligned GEMM sustains", 0.05, 1.0),
    Param("fp8_efficiency", float, "", DEFAULT_KNOBS["fp8_efficiency"],
          "fraction of the fp8 peak a large GEMM sustains", 0.05, 1.0),
    Param("int8_efficiency", float, "", DEFAULT_KNOBS["int8_efficiency"],
          "fraction of the int8 peak a large GEMM sustains", 0.05, 1.0),
    Param("fp32_efficiency", float, "", DEFAULT_KNOBS["fp32_efficiency"],
          "fraction of the fp32 peak a large GEMM sustains", 0.05, 1.0),
    Param("bandwidth_efficiency", float, "", DEFAULT_KNOBS["bandwidth_efficiency"],
          "fraction of the DRAM bandwidth a large device copy reaches", 0.05, 1.2),
    Param("gemm_bandwidth_efficiency", float, "", DEFAULT_KNOBS["gemm_bandwidth_efficiency"],
          "fraction of the DRAM bandwidth a memory-bound GEMM (GEMV) reaches", 0.05, 1.2),
    Param("attention_efficiency", float, "", DEFAULT_KNOBS["attention_efficiency"],
          "fraction of the dense peak flash attention's two GEMMs run at", 0.05, 1.0),
    Param("conv_efficiency", float, "", DEFAULT_KNOBS["conv_efficiency"],
          "implicit-GEMM convolution rate relative to a GEMM", 0.01, 1.5),
    Param("memory_power_fraction", float, "", 0.85, "power of a copy at full bandwidth over "
          "tdp_w - idle_power_w [E; 0.86 measured on the H200]", 0.05, 1.5),
    Param("calibration", str, "", "", "calibration file: a shipped name (h200) or a path to "
          "a JSON written by `dse calibrate gpu`; empty: datasheet and estimated "
          "efficiencies only"),
)

#: Presets from datasheets and architecture whitepapers [D] (REFERENCES.md): dense peaks (no
#: sparsity), memory standard and devices (A100 and H100 fill five of six HBM sites), L2, SMs
#: enabled / on the die (A100 108/128, H100 132/144, T4 40/48, RTX 3090 82/84), tensor MACs,
#: fp32 lanes and L1 per SM, node, NVLink links, TDP; boost clocks [D: A100 1.41 GHz, H100/H200 SXM 1.98 GHz, T4 1.59 GHz,
#: RTX 3090 1.695 GHz]. Idle power [E]: A100 ~50 W, H100 ~100 W, T4 ~10 W, RTX 3090 ~30 W;
#: the H200's 119 W idle (a CUDA context, SM clock 1980 MHz) and its copy power fraction
#: 0.855 = (616 W - 119 W) / (700 W - 119 W) were measured by the NVML energy counter
#: (tests/data/h200_calibration_raw.json, section "power").
PRESETS: dict[str, dict[str, Any]] = {
    "a100": dict(sms=108, clock_hz=1.41e9, peak_bf16_flops=312e12, peak_fp16_flops=312e12,
                 peak_fp32_flops=19.5e12, peak_fp8_flops=0.0, peak_int8_ops=624e12,
                 memory_bandwidth_Bps=2.039e12, memory_capacity_bytes=80e9,
                 memory_kind="hbm2e", memory_devices=5, memory_devices_on_die=6,
                 memory_device_gb=16, l2_bytes=40 * 2**20, tdp_w=400.0, idle_power_w=50.0,
                 sms_on_die=128, tensor_macs_per_sm=1024, fp32_lanes_per_sm=64,
                 l1_kb_per_sm=192, node_nm=7, host_interface="pcie4x16", peer_links=12,
                 peer_link_phy_mm2=1.888),
    "h100": dict(sms=132, clock_hz=1.98e9, peak_bf16_flops=989e12, peak_fp16_flops=989e12,
                 peak_fp32_flops=67e12, peak_fp8_flops=1979e12, peak_int8_ops=1979e12,
                 memory_bandwidth_Bps=3.35e12, memory_capacity_bytes=80e9,
                 memory_kind="hbm3", memory_devices=5, memory_devices_on_die=6,
                 memory_device_gb=16, l2_bytes=50 * 2**20, tdp_w=700.0, idle_power_w=100.0,
                 sms_on_die=144),
    "h200": dict(sms=132, clock_hz=1.98e9, peak_bf16_flops=989e12, peak_fp16_flops=989e12,
                 peak_fp32_flops=67e12, peak_fp8_flops=1979e12, peak_int8_ops=1979e12,
                 memory_bandwidth_Bps=4.8e12, memory_capacity_bytes=141e9,
                 memory_kind="hbm3e", memory_devices=6, memory_device_gb=24,
                 l2_bytes=60 * 2**20, tdp_w=700.0, idle_power_w=119.0, sms_on_die=144,
                 calibration="h200", memory_power_fraction=0.855),
    # T4 has no bf16 tensor cores: bf16 is costed at the fp16 rate [E].
    "t4": dict(sms=40, clock_hz=1.59e9, peak_bf16_flops=65e12, peak_fp16_flops=65e12,
               peak_fp32_flops=8.1e12, peak_fp8_flops=0.0, peak_int8_ops=130e12,
               memory_bandwidth_Bps=320e9, memory_capacity_bytes=16e9, memory_kind="gddr6",
               memory_devices=8, memory_device_gb=2, l2_bytes=4 * 2**20, tdp_w=70.0,
               idle_power_w=10.0, sms_on_die=48, tensor_macs_per_sm=512,
               fp32_lanes_per_sm=64, l1_kb_per_sm=96, node_nm=12, host_interface="pcie4x16",
               peer_links=0),
    # RTX 3090: dense tensor fp16/bf16 with fp32 accumulate (what PyTorch uses) 71 TFLOP/s,
    # int8 284 TOPS dense [D, GA102 whitepaper]; 24 GB of GDDR6X on a 384-bit bus (twelve
    # x32 PHYs; 2 GB per PHY); Samsung 8N taken as a 10-nm-class node [E].
    "rtx3090": dict(sms=82, clock_hz=1.695e9, peak_bf16_flops=71e12, peak_fp16_flops=71e12,
                    peak_fp32_flops=35.6e12, peak_fp8_flops=0.0, peak_int8_ops=284e12,
                    memory_bandwidth_Bps=936e9, memory_capacity_bytes=24e9,
                    memory_kind="gddr6x", memory_devices=12, memory_device_gb=2,
                    l2_bytes=6 * 2**20, tdp_w=350.0, idle_power_w=30.0, sms_on_die=84,
                    tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128,
                    node_nm=10, host_interface="pcie4x16", peer_links=4,
                    peer_link_phy_mm2=1.888),
}

#: Register file per SM, B [D: 64K 32-bit registers per SM since Volta].
REGISTER_FILE_BYTES_PER_SM = 256 * 1024
#: The rest of an SM (schedulers, dispatch, load/store, special-function, texture, fp64 and
#: integer units, crossbars) relative to its tensor and fp32 datapaths [E].
SM_OVERHEAD = 3.0

_MEMORY_KINDS = (ir.ELEMENTWISE, ir.NORM, ir.SOFTMAX, ir.REDUCTION, ir.EMBEDDING,
                 ir.DATA_MOVEMENT, ir.UNKNOWN, ir.HASHGRID)


@lru_cache(maxsize=32)
def _read_calibration(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def load_calibration(name_or_path: str) -> dict[str, Any]:
    """The calibration dict of a shipped name (``h200``) or a JSON path; :class:`BadInput`
    when it is neither or is not a gpu calibration."""
    allowed = ("a shipped calibration (" + ", ".join(shipped_calibrations())
               + ") or the path of a JSON written by `dse calibrate gpu`")
    shipped = CALIBRATION_DIR / f"{name_or_path}.json"
    path = shipped if shipped.is_file() else Path(name_or_path).expanduser()
    if not path.is_file():
        raise BadInput("hw.calibration", name_or_path, f"expected {allowed}")
    try:
        cal = _read_calibration(str(path.resolve()))
    except (OSError, ValueError):
        raise BadInput("hw.calibration", name_or_path, f"expected {allowed} (not JSON)") from None
    if not isinstance(cal, dict) or cal.get("template") != "gpu" or not isinstance(
            cal.get("efficiency"), dict):
        raise BadInput("hw.calibration", name_or_path, f"expected {allowed} (not a gpu "
                       "calibration)")
    return cal


def shipped_calibrations() -> list[str]:
    """Names of the calibrations shipped with the package."""
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


class GPU(Template):
    name = "gpu"
    description = ("CUDA GPU (A100/H100/H200/T4/RTX 3090) running PyTorch eager kernels: wave "
                   "and tile quantisation, memory-bound GEMV and decode attention, a kernel "
                   "launch floor; calibrated on an H200")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "h200"

    def __init__(self, preset: str | None = None, **values: Any):
        super().__init__(preset, **values)
        hw = self.hw
        self._calibration = load_calibration(hw.calibration) if hw.calibration else None
        explicit = set(values)
        knobs = dict(DEFAULT_KNOBS)
        knobs["mem_floor_s"] = self.params()["launch_overhead_s"].default
        memory_ops: dict[str, Any] = {}
        cal = self._calibration
        if cal is not None:
            knobs.update({k: float(v) for k, v in cal["efficiency"].items() if k in knobs})
            memory_ops = {k: tuple(v) for k, v in cal.get("memory_ops", {}).items()}
        for name in KNOB_PARAMS:  # a parameter set by hand or by a preset beats the file
            if cal is None or name in explicit or name in (self.PRESETS.get(self.preset) or {}):
                knobs[name] = float(hw[name])
        if cal is None or "launch_overhead_s" in explicit:
            shift = float(hw.launch_overhead_s) - knobs["mem_floor_s"]
            for name in _FIXED_TIMES:
                knobs[name] = max(0.0, knobs[name] + shift)
        self.knobs = knobs
        chip = Chip(sms=hw.sms, peak_flops=self._peaks(), bandwidth_Bps=hw.memory_bandwidth_Bps,
                    l2_bytes=hw.l2_bytes)
        self.model = KernelModel(chip, knobs, memory_ops)
        self._b = DTYPE_BYTES[hw.dtype]
        self._energy = self._energy_model()
        self._cache: dict[tuple, OpCost] = {}

    def validate(self) -> tuple[str, Any, str] | None:
        hw = self.hw
        self.memory = memory_system(hw.memory_kind, hw.memory_devices, hw.memory_device_gb,
                                    hw.memory_bandwidth_Bps, bandwidth_field="memory_bandwidth_Bps")
        if hw.memory_capacity_bytes > self.memory.capacity_bytes * (1 + 1e-9):
            return ("hw.memory_capacity_bytes", hw.memory_capacity_bytes,
                    f"expected at most the {self.memory.capacity_bytes / 1e9:g} GB of "
                    f"{self.memory.devices} {hw.memory_kind} {self.memory.standard.device}s")
        if hw.idle_power_w >= hw.tdp_w:
            return ("hw.idle_power_w", hw.idle_power_w, f"expected less than tdp_w={hw.tdp_w:g}")
        if hw.calibration:
            load_calibration(hw.calibration)
        return None

    # ------------------------------------------------------------------------ rates / energy
    def _peaks(self) -> dict[str, float]:
        hw = self.hw
        fp16 = hw.peak_fp16_flops
        return {"bf16": hw.peak_bf16_flops, "fp16": fp16, "fp32": hw.peak_fp32_flops,
                "fp8": hw.peak_fp8_flops or fp16, "int8": hw.peak_int8_ops or fp16}

    def _energy_model(self) -> dict[str, Any]:
        """Dynamic J/FLOP per dtype and J/B (DRAM share and on-chip share)."""
        hw = self.hw
        dynamic_w = hw.tdp_w - hw.idle_power_w
        per_flop = {d: dynamic_w / self.model.sustained_flops(d) for d in DTYPE_BYTES}
        per_byte = dynamic_w * hw.memory_power_fraction / self.model.copy_Bps
        dram = self.memory.energy_j_per_byte
        return {"flop": per_flop, "byte": per_byte, "dram": min(dram, per_byte),
                "onchip": max(0.0, per_byte - dram)}

    def energy_per_flop_j(self, dtype: str | None = None) -> float:
        """Dynamic energy of one FLOP in ``dtype`` (default: the design's), J."""
        return self._energy["flop"][dtype or self.hw.dtype]

    def energy_per_byte_j(self) -> float:
        """Dynamic energy of one DRAM byte moved by a kernel (DRAM + on-chip share), J/B."""
        return self._energy["byte"]

    # ----------------------------------------------------------------------------- cost
    def cost(self, op: Op) -> OpCost:
        key = (op.kind, op.target, op.bytes_per_element, op.flops, op.total_bytes,
               op.input_shapes, op.output_shapes, repr(sorted(op.attrs.items())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if op.kind in ir.COMPOSITE_KINDS:   # grouped kernels: one launch for all parts
            out = cost_composite(op, self.cost, fixed_s=self.knobs["gemm_launch_s"])
            self._cache[key] = out
            return out
        scale = self._b / op.bytes_per_element if op.bytes_per_element else 1.0
        nbytes = op.total_bytes * scale
        flops = op.flops
        dtype = self.hw.dtype
        a = op.attrs
        l2_bytes = nbytes
        if op.kind == ir.MATMUL and _has(a, "m", "n", "k"):
            m, n, k, batch = int(a["m"]), int(a["n"]), int(a["k"]), int(a.get("batch", 1))
            lat, comp, mem = self.model.gemm(m, n, k, batch, dtype, bytes_hbm=nbytes)
            l2_bytes = self._b * batch * (m * k * math.ceil(n / 128) + k * n * math.ceil(m / 128)
                                          + m * n)
            bound = "compute" if comp >= mem else "memory"
        elif op.kind == ir.CONV and _has(a, "n", "c", "k", "p", "q"):
            lat, comp, mem = self.model.conv(
                int(a["n"]), int(a["c"]), int(a.get("h", 1)), int(a.get("w", 1)), int(a["k"]),
                int(a.get("r", 1)), int(a.get("s", 1)), int(a["p"]), int(a["q"]),
                _first(a.get("stride", 1)), _first(a.get("padding", 0)),
                int(a.get("groups", 1)), dtype)
            bound = "compute" if comp >= mem else "memory"
        elif op.kind == ir.ATTENTION and _has(a, "batch", "heads", "q_len", "kv_len", "head_dim"):
            lat, comp, mem = self.model.attention(
                int(a["batch"]), int(a["heads"]), int(a.get("kv_heads") or a["heads"]),
                int(a["q_len"]), int(a["kv_len"]), int(a["head_dim"]), bool(a.get("causal")),
                dtype, int(a.get("value_dim") or a["head_dim"]))
            if a.get("causal"):
                flops = int(a.get("causal_flops", flops))
            qb = int(self.knobs["attention_q_block"])
            kv = op.kv_bytes_read * scale or nbytes / 2
            l2_bytes = nbytes + kv * (math.ceil(int(a["q_len"]) / qb) - 1)
            bound = "compute" if comp >= mem else "memory"
        else:
            width, rows = _rows(op)
            lat, mem = self.model.memory(nbytes, op.target, op.kind, rows=rows, width=width,
                                         bytes_per_element=self._b)
            comp = 0.0
            bound = "memory"
        lat = max(lat, nbytes / self.hw.memory_bandwidth_Bps)
        e = self._energy
        flop_dtype = dtype if op.kind in (ir.MATMUL, ir.CONV, ir.ATTENTION) else "fp32"
        out = OpCost(
            unit="sm", latency_s=lat, compute_s=min(comp, lat), clock_hz=self.hw.clock_hz,
            traffic={"hbm": nbytes}, bytes_by_level={"hbm": nbytes, "l2": l2_bytes},
            energy_j={"compute": flops * e["flop"][flop_dtype],
                      "offchip_memory": nbytes * e["dram"],
                      "onchip_memory": nbytes * e["onchip"]},
            bound=bound)
        self._cache[key] = out
        return out

    # ------------------------------------------------------------------------- the rest
    def resources(self) -> Resources:
        return Resources(units={"sm": 1}, channels={"hbm": self.hw.memory_bandwidth_Bps})

    def floorplan(self) -> Floorplan:
        """The die: SMs (tensor MACs as systolic-class PEs, fp32 lanes, and the rest of the SM
        as ``SM_OVERHEAD`` of those), register files, L1 and L2 as SRAM, memory PHYs for every
        site on the die, host and peer-link PHYs. Power is the datasheet's: ``tdp_w`` at full
        load and ``idle_power_w`` idle (memory included)."""
        hw = self.hw
        node, sms = hw.node_nm, hw.sms_on_die or hw.sms
        datapath = sms * (hw.tensor_macs_per_sm * tech.pe_area_mm2("fp16", node)
                          + hw.fp32_lanes_per_sm * tech.pe_area_mm2("fp32", node))
        sram = tech.sram_area_mm2(sms * (REGISTER_FILE_BYTES_PER_SM + hw.l1_kb_per_sm * 1024)
                                  + hw.l2_bytes, node)
        mem = self.memory
        mem_w = mem.bandwidth_Bps * mem.energy_j_per_byte
        phys_on_die = hw.memory_devices_on_die or mem.devices
        extra_phy = (phys_on_die - mem.devices) * mem.standard.phy_area_mm2
        return Floorplan(node_nm=node, compute_mm2=datapath * (1 + SM_OVERHEAD) + extra_phy
                         + hw.peer_links * hw.peer_link_phy_mm2, sram_mm2=sram,
                         peak_dynamic_w=max(0.0, hw.tdp_w - hw.idle_power_w - mem_w),
                         leakage_w=max(0.0, hw.idle_power_w - mem.static_w), memory=mem,
                         host_interface=hw.host_interface)

    def static_power_w(self) -> float:
        return self.hw.idle_power_w

    def memory_capacity_bytes(self) -> float:
        return self.hw.memory_capacity_bytes

    def capacity_holder(self) -> str:
        return f"the GPU ({self.memory.devices} {self.hw.memory_kind} {self.memory.standard.device}s)"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["efficiency"] = dict(self.knobs)  # the kernel-model knobs in effect
        if self._calibration is not None:
            out["calibration_device"] = self._calibration.get("device", {}).get("name")
        return out


def _has(attrs: dict, *keys: str) -> bool:
    return all(attrs.get(k) is not None for k in keys)


def _first(v: Any) -> int:
    if isinstance(v, (list, tuple)):
        v = v[0] if v else 0
    try:
        return int(v)
    except (TypeError, ValueError):  # "same" / "valid" padding strings
        return 0


def _rows(op: Op) -> tuple[int, int]:
    """(row width, rows) of a row-wise kernel: the last dim of its first input."""
    shapes = op.input_shapes or op.output_shapes
    if not shapes or not shapes[0]:
        return 0, 0
    width = int(shapes[0][-1]) or 1
    return width, int(math.prod(shapes[0]) // width)
