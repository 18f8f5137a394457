"""``gpu``: a GPU (A100, H100, H200, B200, L40S, T4, RTX 3090/4090, MI300X presets) running PyTorch.

The baseline every seed paper compares against. Each op is one kernel (ops on one stream
serialise, in program order: one ``sm`` unit), costed in closed form by
:mod:`accelerators.gpu_efficiency`:

* GEMM (``matmul``): wave and tile quantisation of output tiles over the SMs, split-K for
  skinny shapes, the compulsory bytes over the achievable bandwidth (GEMV and other memory-bound
  shapes), slower kernels for leading dimensions that are not 16-byte multiples, a fixed launch
  time.
* ``conv``: 1x1 convolutions as GEMMs, the rest as implicit GEMMs with cuDNN's layout
  transforms.
* ``attention``: flash-attention style (K/V read once per query block, causal blocks stop at
  the diagonal); decode (few query rows) bandwidth-bound over the KV cache with split-KV.
* ``sparse_attention``: the same kernel visiting only the tiles the pattern needs, masked
  tiles paying the mask (:mod:`accelerators.gpu_sparse_attention`).
* everything else (elementwise, norm, softmax, reduction, embedding, data movement, unknown):
  bandwidth-bound kernels at the calibrated copy bandwidth times a per-operator efficiency,
  plus a kernel floor.

Datatypes: every op runs in its own dtype (the workload's): its bytes are counted in it and it
runs on that dtype's datapath at that datapath's peak; a dtype the chip has no datapath for (a
peak of 0) runs on the next wider one (``gpu_efficiency.DATAPATH_FALLBACK``). The GPU has no
``dtype`` parameter: its datapaths are its peaks per dtype.

Chip and kernels are kept apart: the parameters are the datasheet (SMs, clock, peaks, memory,
L2); the efficiency knobs describe the kernels and come from a calibration file
(``calibration=h200``: fitted on an H200 by ``dse calibrate gpu``; the Hopper presets load it
too) or are estimates [E]. A calibration fitted on another chip is moved to this one by
``gpu_efficiency.transfer_knobs`` (times in cycles, per-SM bandwidths in shares of the
chip's); docs/validation.md (gpu section).

Runtime (``runtime``, :mod:`accelerators.gpu_runtime`): ``kernels`` reports device time only;
``eager`` adds PyTorch's per-op host dispatch from a host profile (``host_profile``,
:mod:`accelerators.host_profile`), overlapped with the kernels until the GPU starves: wall
time; ``cuda_graphs`` one graph launch, then the kernels.

Energy: built bottom-up from the technology tables, the method every template uses (one
energy method, docs/validation.md "One energy method"): a tensor-core MAC of the op's dtype plus
its register-file operand traffic (``RF_BYTES_PER_TENSOR_MAC``), CUDA-core fp32 FMAs and
element-wise FLOPs with theirs, every DRAM byte at the memory standard's energy and through the
L2 (``technology.sram_energy_j_per_byte`` of the L2), and the logic the tables do not count at
``physical.uncounted_logic_w`` for the time each kernel runs. Static power is leakage plus the
memory's background, as for every template. ``tdp_w`` (the datasheet's board power) is what
the model's own TDP (``physical().tdp_w``) is validated against; the H200's measured power
(680 W under a sustained bf16 GEMM, 616 W under a 1 GiB copy loop, 119 W idle with a CUDA
context) checks the per-op energies (docs/validation.md).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from accelerators import gpu_formats, technology as tech
from accelerators.base import MemoryLevel, OpCost, Param, Peaks, Resources, Template
from accelerators.gpu_efficiency import (DEFAULT_KNOBS, Chip, KernelModel, memory_target,
                                         transfer_knobs)
from accelerators.gpu_runtime import RUNTIMES, START_TARGET, stream_plan
from accelerators.host_profile import load_host_profile
from accelerators.composite import cost_composite
from accelerators.memory_standards import STANDARD_NAMES, memory_system
from accelerators.physical import HOST_INTERFACES, MAX_CHIPLETS, Floorplan
from accelerators.gpu_sparse_attention import (MASK_POLICIES, SPARSE_KERNELS, kernel_overheads,
                                               sparse_attention_time)
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
    Param("peak_bf16_flops", float, "FLOP/s", 989e12, "dense bf16 tensor-core peak (fp32 "
          "accumulate); 0: no bf16 datapath (bf16 ops run at the fp32 rate)", 0.0, 1e17),
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
    Param("memory_capacity_bytes", float, "B", 143771 * 2**20, "DRAM capacity the driver "
          "exposes (nvidia-smi's total; at most the devices' total)", 1e8, 1e13, log=True),
    Param("memory_kind", str, "", "hbm3e", "off-chip memory standard "
          "(accelerators.memory_standards)", choices=STANDARD_NAMES),
    Param("memory_devices", int, "", 0, "memory devices installed (HBM stacks, GDDR chips); "
          "0: the fewest that reach memory_bandwidth_Bps", 0, 32),
    Param("memory_devices_on_die", int, "", 0, "memory PHYs on the die, disabled ones "
          "included (A100 and H100 have six HBM sites and fill five); 0: memory_devices", 0, 32),
    Param("memory_device_gb", float, "GB", 0.0, "capacity of each memory device; 0: the "
          "standard's default", 0.0, 128.0),
    Param("l2_bytes", float, "B", 60 * 2**20, "L2 cache", 1e5, 1e10, log=True),
    Param("tdp_w", float, "W", 700.0, "board power limit from the datasheet: what the "
          "model's own bottom-up TDP is validated against (docs/validation.md); results "
          "report the model's", 1.0, 5000.0),
    Param("context_idle_w", float, "W", 0.0, "board power idle while a CUDA context is held "
          "(P0 clocks, no kernel running; nvidia-smi's reading): the floor of the static "
          "power; 0: the model's leakage and memory background only", 0.0, 5000.0),
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
    Param("chiplets", int, "dies", 1, "logic dies the GPU is built of (fixed silicon: a "
          "monolithic die 1, B200 2); 0: the count that costs least", 0, MAX_CHIPLETS),
    Param("peer_link_phy_mm2", float, "mm²", 0.965, "PHY area of one peer link [R LLMCompass "
          "cost model: NVLink 3 1.888, NVLink 4 0.965 mm^2]", 0.0, 100.0),
    Param("other_logic_mm2", float, "mm²", 0.0, "laid-out logic the SM model leaves out "
          "(graphics dies: RT cores, texture, raster, display and video engines), at node_nm",
          0.0, 5000.0),
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
    Param("calibration", str, "", "", "calibration file: a shipped name (h200) or a path to "
          "a JSON written by `dse calibrate gpu`; empty: datasheet and estimated "
          "efficiencies only"),
    Param("runtime", str, "", "kernels", "what the latency is: kernels = device time only; "
          "eager = PyTorch eager wall time (per-op host dispatch from host_profile, "
          "overlapped with the kernels); cuda_graphs = one graph launch, then the kernels",
          choices=RUNTIMES),
    Param("host_profile", str, "", "", "host profile for runtime eager / cuda_graphs: a "
          "shipped name or the path of a JSON written by `python -m dse.calibrate."
          "host_profile` (per-op dispatch times measured on a machine's CPU)"),
    Param("attention_block_q", int, "tokens", 128, "queries per tile of a block-sparse "
          "attention kernel (sparse_attention ops skip whole tiles)", 16, 1024, log=True),
    Param("attention_block_kv", int, "tokens", 128, "keys per tile of a block-sparse "
          "attention kernel", 16, 1024, log=True),
    Param("attention_mask_policy", str, "", "partial_tiles", "which visited tiles of a "
          "sparse_attention op evaluate the mask: partial_tiles (flex_attention) or "
          "whole_problem (every tile unless none needs it: NATTEN's FNA kernels)",
          choices=MASK_POLICIES),
    Param("attention_sparse_kernel", str, "", "fna", "block-sparse attention kernel: fna "
          "(NATTEN) or flex (torch flex_attention: its fitted per-tile overheads, "
          "accelerators/calibration/flex_attention.json)", choices=SPARSE_KERNELS),
) + gpu_formats.PARAMS   # format datapaths and weight-only kernels (accelerators.gpu_formats)

#: One RT core, mm^2 at 45 nm, scaled to the node by ``technology.area_scale`` [S: Turing's
#: two RT cores per TPC measure 0.7 mm^2 on TU106 die shots at 12 nm (Hardwareluxx, 2019, the
#: source of ``SM_BASE_MM2_45NM``); Ampere's and Ada's RT cores taken as Turing's [E]].
RT_CORE_MM2_45NM = 0.7 / 2 / tech.area_scale(12)

#: Presets from datasheets and architecture whitepapers [D]: dense peaks (never the 2x "with
#: sparsity" figures), memory standard and devices, L2, SMs enabled / on the die (compute
#: units on the MI300X), tensor MACs, fp32 lanes and L1 per SM, node, host and peer links,
#: boost clock, board power (die areas below are for reference: the physical model derives
#: area from these). Idle power is the model's (leakage and memory background) unless a preset
#: sets ``context_idle_w``, the board's measured power with a CUDA context and no kernel (the
#: T4's). The H200's 119 W, which the NVML energy counter measured with a CUDA context
#: (tests/data/h200_calibration_raw.json, section "power"; not set as its ``context_idle_w``:
#: the physical-h200 table validates the model against it), gave its copy power fraction
#: 0.855 = (616 W - 119 W) / (700 W - 119 W). Tensor
#: MACs per SM per cycle are the dense fp16 peak over 2 x SMs x clock (A100 1024, Hopper 2048,
#: MI300X 1024 per CU, GA102 / AD102 512 with fp16 accumulate). Sources, per preset:
#:
#: * ``a100`` (SXM4 80 GB) and ``a100-40gb`` (SXM4 40 GB): NVIDIA A100 datasheet and Ampere
#:   GA100 whitepaper: 108 SMs, 1410 MHz, fp32 19.5, bf16/fp16 tensor 312 TFLOP/s, int8 624
#:   TOPS, no fp8; 80 GB HBM2e 2,039 GB/s or 40 GB HBM2 1,555 GB/s (five stacks of six
#:   sites; the 40 GB part's HBM2 runs at 2.43 Gb/s, over JEDEC HBM2's 2.4 bin, so its stacks
#:   are costed as HBM2E [E]); 40 MB L2; 400 W; GA100 826 mm^2, 128 SMs on the die. Their
#:   compute-bound GEMMs load ``calibration/a100.json``: ``tensor_efficiency`` and
#:   ``tile_cost`` fitted on published A100 measurements (Vidur's MLP profiles of five models;
#:   held-out 70B-class models within 3.9 % median, benchmarks/a100_gemm_calibration.py).
#: * ``h100`` (SXM5 80 GB) and ``h100-pcie`` (80 GB): NVIDIA H100 datasheet and Hopper
#:   whitepaper: SXM5 132 SMs, 1980 MHz, fp32 67, bf16/fp16 989, fp8 1,979 TFLOP/s, int8 1,979
#:   TOPS, HBM3 3.35 TB/s, 700 W; PCIe 114 SMs, 1755 MHz, fp32 51, bf16/fp16 756, fp8 1,513,
#:   int8 1,513, HBM2e 2.0 TB/s, 350 W; both 50 MB L2 and the GH100 die (144 SMs, six HBM
#:   sites, five filled), 814 mm^2. They load the H200 calibration (same Hopper SMs and
#:   kernels), moved to their chip.
#: * ``h200`` (SXM 141 GB): NVIDIA H200 datasheet: the H100 SXM5's SMs, clock and peaks,
#:   HBM3e 4.8 TB/s, 700 W; 60 MiB L2 and 132 SMs read off a device; calibrated on one.
#: * ``l40s``: NVIDIA L40S datasheet: 142 SMs, 2520 MHz, fp32 91.6, bf16/fp16 362.05, fp8
#:   733 TFLOP/s, int8 733 TOPS, 48 GB GDDR6 864 GB/s (18 Gb/s, clamshell: two 16 Gb chips
#:   per x32 channel), 96 MB L2, 128 KB L1 per SM, 350 W, PCIe 4, no NVLink; AD102 (TSMC 4N,
#:   144 SMs) 608.5 mm^2. The memory table's GDDR6 bin is 16 Gb/s, so the model realises
#:   864 GB/s with 14 x32 channels of 4 GB (a clamshell pair) instead of 12 [E].
#: * ``t4``: NVIDIA T4 datasheet: 40 SMs, 1590 MHz, fp32 8.1, fp16 tensor 65 TFLOP/s (fp16
#:   with fp32 accumulate), int8 130 TOPS; 16 GB GDDR6 320 GB/s, 4 MB L2, 70 W; TU104
#:   545 mm^2. Turing has no bf16 (nor fp8, nor TF32) tensor cores: ``peak_bf16_flops`` is 0, so
#:   bf16 ops run at the fp32 rate [E: emulated]; fp32 convolutions are still costed as TF32
#:   (``gpu_efficiency.KernelModel.conv_flops``), too fast on a T4. ``context_idle_w`` 26 W
#:   [S: nvidia-smi of T4s holding a CUDA context at 0 % utilisation, P0: 26 W at 43 C
#:   (stanford-cs149/asst3 README), 27 W and 26 W at 34 C (a vLLM Llama-3 on 2 x T4 demo
#:   README, whose two T4s without a process read 14 W in P8); the model's leakage and GDDR6
#:   background alone are 13.6 W].
#: * ``rtx3090``: GA102 whitepaper (Appendix A): 82 SMs, 1695 MHz, fp32 35.6 TFLOP/s; fp16 and
#:   bf16 tensor 71 TFLOP/s with fp32 accumulate (what cuBLAS runs for PyTorch), 142 with fp16
#:   accumulate (82 SMs x 4 tensor cores x 128 fp16 FMA x 2 x 1.695 GHz; GeForce halves the
#:   fp32-accumulate rate); int8 284 TOPS; 24 GB GDDR6X 936 GB/s, 6 MB L2, 350 W; 628 mm^2.
#: * ``rtx4090``: Ada AD102 whitepaper (Appendix, RTX 4090): 128 SMs, 2520 MHz, fp32 82.6,
#:   fp16/bf16 tensor 165.2 with fp32 accumulate (330.3 with fp16 accumulate), fp8 330.3 with
#:   fp32 accumulate, int8 660.6 TOPS; 24 GB GDDR6X 1,008 GB/s (12 x32 chips at 21 Gb/s),
#:   72 MB L2, 128 KB L1 per SM, 450 W, PCIe 4, no NVLink; AD102 608.5 mm^2.
#: * ``mi300x``: AMD Instinct MI300X datasheet: 304 CUs, 2100 MHz, fp32 matrix 163.4,
#:   bf16/fp16 1,307.4, fp8 2,614.9 TFLOP/s, int8 2,614.9 TOPS, 192 GB HBM3 5.3 TB/s, 256 MB
#:   Infinity Cache (the model's L2: the last level before HBM), 750 W; 320 CUs on the dies,
#:   128 fp32 lanes and 64 KB LDS + 32 KB L1 per CU, 5 nm compute dies, 7 Infinity Fabric
#:   links (costed as NVLink 4 PHYs [E]). AMD publishes no die area (press estimates: 8
#:   compute dies of ~115 mm^2 on 4 I/O dies of ~370 mm^2): the floorplan is split into its 8
#:   compute dies (the I/O dies' logic spread over them [E]). The kernel model is CUDA's
#:   (cuBLAS tiles, flash attention): its efficiencies are [E].
#:
#: * ``l4``: NVIDIA L4 datasheet: bf16/fp16 tensor 121, fp8 242.5 TFLOP/s, int8 242.5 TOPS
#:   (dense: the datasheet's 242 / 485 are with sparsity), fp32 30.3 TFLOP/s, 24 GB GDDR6
#:   300 GB/s (a 192-bit bus: six x32 channels of clamshell 16 Gb pairs), 72 W, PCIe 4 x16, no
#:   NVLink; AD104 (TSMC 4N, 60 SMs) with 58 enabled at 2040 MHz and 48 MB L2 [D Ada
#:   whitepaper]; nvidia-smi totals 23,034 MiB [E: nvidia-smi outputs in public issues].
#: * ``a10g``: AWS's A10G (g5 instances) has no public datasheet; it is taken as the NVIDIA A10
#:   [D A10 datasheet: 72 SMs, 1695 MHz, bf16/fp16 tensor 125, int8 250, fp32 31.2 TFLOP/s,
#:   24 GB GDDR6 600 GB/s, 150 W, PCIe 4] on GA102 (84 SMs on the die, 6 MB L2, 628.4 mm^2,
#:   Samsung 8N as RTX 3090) [E: AWS lists the A10G's memory (24 GB) and the GA102 die; its
#:   SM count and clocks are taken as the A10's]; nvidia-smi totals 23,028 MiB [E: AWS g5
#:   nvidia-smi outputs in public issues].
#: The graphics dies (``t4``, ``rtx3090``, ``l40s``, ``rtx4090``) carry one RT core per SM on
#: the die as ``other_logic_mm2`` (``RT_CORE_MM2_45NM`` at their node); their raster, ROP,
#: display and video engines are left to ``GPU_CONTROL_OVERHEAD``, as the compute dies' video
#: engines and fp64 units are.
#: Memory capacity is what the driver exposes, as ``nvidia-smi`` totals it (MiB) [R: "H100
#: 81559MiB, A100 80GB 81920MiB, A100 40GB 40960MiB, L40S 46068MiB, T4 15360MiB" (modal-labs/
#: modal-client pull request 2797, 2025); H100 PCIe 81559MiB, H200 143771MiB, B200 183359MiB,
#: RTX 3090 24576MiB, RTX 4090 24564MiB (nvidia-smi outputs in public issues, e.g.
#: NVIDIA/nccl issue 1264 for the H100 SXM); MI300X 205,822,885,888 B (rocm-smi's VRAM total)].
#: A datasheet's "80 GB" is 80 GiB of HBM less what the driver and ECC keep (the H100's 81,559
#: MiB is 85.5e9 B, not 80e9).
MIB = 2**20
PRESETS: dict[str, dict[str, Any]] = {
    "a100": dict(sms=108, clock_hz=1.41e9, peak_bf16_flops=312e12, peak_fp16_flops=312e12,
                 peak_fp32_flops=19.5e12, peak_fp8_flops=0.0, peak_int8_ops=624e12,
                 memory_bandwidth_Bps=2.039e12, memory_capacity_bytes=81920 * MIB,
                 memory_kind="hbm2e", memory_devices=5, memory_devices_on_die=6,
                 memory_device_gb=16, l2_bytes=40 * 2**20, tdp_w=400.0,
                 sms_on_die=128, tensor_macs_per_sm=1024, fp32_lanes_per_sm=64,
                 l1_kb_per_sm=192, node_nm=7, host_interface="pcie4x16", peer_links=12,
                 peer_link_phy_mm2=1.888, calibration="a100"),
    "a100-40gb": dict(sms=108, clock_hz=1.41e9, peak_bf16_flops=312e12,
                      peak_fp16_flops=312e12, peak_fp32_flops=19.5e12, peak_fp8_flops=0.0,
                      peak_int8_ops=624e12, memory_bandwidth_Bps=1.555e12,
                      memory_capacity_bytes=40960 * MIB, memory_kind="hbm2e", memory_devices=5,
                      memory_devices_on_die=6, memory_device_gb=8, l2_bytes=40 * 2**20,
                      tdp_w=400.0, sms_on_die=128, tensor_macs_per_sm=1024,
                      fp32_lanes_per_sm=64, l1_kb_per_sm=192, node_nm=7,
                      host_interface="pcie4x16", peer_links=12, peer_link_phy_mm2=1.888,
                      calibration="a100"),
    "h100": dict(sms=132, clock_hz=1.98e9, peak_bf16_flops=989e12, peak_fp16_flops=989e12,
                 peak_fp32_flops=67e12, peak_fp8_flops=1979e12, peak_int8_ops=1979e12,
                 memory_bandwidth_Bps=3.35e12, memory_capacity_bytes=81559 * MIB,
                 memory_kind="hbm3", memory_devices=5, memory_devices_on_die=6,
                 memory_device_gb=16, l2_bytes=50 * 2**20, tdp_w=700.0,
                 sms_on_die=144, calibration="h200"),
    "h100-pcie": dict(sms=114, clock_hz=1.755e9, peak_bf16_flops=756e12,
                      peak_fp16_flops=756e12, peak_fp32_flops=51e12, peak_fp8_flops=1513e12,
                      peak_int8_ops=1513e12, memory_bandwidth_Bps=2.0e12,
                      memory_capacity_bytes=81559 * MIB, memory_kind="hbm2e", memory_devices=5,
                      memory_devices_on_die=6, memory_device_gb=16, l2_bytes=50 * 2**20,
                      tdp_w=350.0, sms_on_die=144, calibration="h200"),
    "h200": dict(sms=132, clock_hz=1.98e9, peak_bf16_flops=989e12, peak_fp16_flops=989e12,
                 peak_fp32_flops=67e12, peak_fp8_flops=1979e12, peak_int8_ops=1979e12,
                 memory_bandwidth_Bps=4.8e12, memory_capacity_bytes=143771 * MIB,
                 memory_kind="hbm3e", memory_devices=6, memory_device_gb=24,
                 l2_bytes=60 * 2**20, tdp_w=700.0, sms_on_die=144, calibration="h200"),
    "l40s": dict(sms=142, clock_hz=2.52e9, peak_bf16_flops=362.05e12,
                 peak_fp16_flops=362.05e12, peak_fp32_flops=91.6e12, peak_fp8_flops=733e12,
                 peak_int8_ops=733e12, memory_bandwidth_Bps=864e9, memory_capacity_bytes=46068 * MIB,
                 memory_kind="gddr6", memory_devices=0, memory_device_gb=4,
                 l2_bytes=96 * 2**20, tdp_w=350.0, sms_on_die=144,
                 tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128, node_nm=4,
                 host_interface="pcie4x16", peer_links=0,
                 other_logic_mm2=144 * RT_CORE_MM2_45NM * tech.area_scale(4)),
    "t4": dict(sms=40, clock_hz=1.59e9, peak_bf16_flops=0.0, peak_fp16_flops=65e12,
               peak_fp32_flops=8.1e12, peak_fp8_flops=0.0, peak_int8_ops=130e12,
               memory_bandwidth_Bps=320e9, memory_capacity_bytes=15360 * MIB, memory_kind="gddr6",
               memory_devices=8, memory_device_gb=2, l2_bytes=4 * 2**20, tdp_w=70.0,
               context_idle_w=26.0,
               sms_on_die=48, tensor_macs_per_sm=512,
               fp32_lanes_per_sm=64, l1_kb_per_sm=96, node_nm=12, host_interface="pcie4x16",
               other_logic_mm2=48 * RT_CORE_MM2_45NM * tech.area_scale(12),
               # TU104's one x8 NVLink (used by the RTX 2080, not the T4) is on the die: the
               # PHYs of two x4 NVLink 3 links [D Turing whitepaper; E]
               peer_links=2, peer_link_phy_mm2=1.888),
    # RTX 3090: 24 GB of GDDR6X on a 384-bit bus (twelve x32 PHYs; 2 GB per PHY); Samsung 8N
    # taken as a 10-nm-class node [E].
    "rtx3090": dict(sms=82, clock_hz=1.695e9, peak_bf16_flops=71e12, peak_fp16_flops=71e12,
                    peak_fp32_flops=35.6e12, peak_fp8_flops=0.0, peak_int8_ops=284e12,
                    memory_bandwidth_Bps=936e9, memory_capacity_bytes=24576 * MIB,
                    memory_kind="gddr6x", memory_devices=12, memory_device_gb=2,
                    l2_bytes=6 * 2**20, tdp_w=350.0, sms_on_die=84,
                    tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128,
                    node_nm=10, host_interface="pcie4x16", peer_links=4,
                    peer_link_phy_mm2=1.888,
                    other_logic_mm2=84 * RT_CORE_MM2_45NM * tech.area_scale(10)),
    "rtx4090": dict(sms=128, clock_hz=2.52e9, peak_bf16_flops=165.2e12,
                    peak_fp16_flops=165.2e12, peak_fp32_flops=82.6e12,
                    peak_fp8_flops=330.3e12, peak_int8_ops=660.6e12,
                    memory_bandwidth_Bps=1008e9, memory_capacity_bytes=24564 * MIB,
                    memory_kind="gddr6x", memory_devices=12, memory_device_gb=2,
                    l2_bytes=72 * 2**20, tdp_w=450.0, sms_on_die=144,
                    tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128,
                    node_nm=4, host_interface="pcie4x16", peer_links=0,
                    other_logic_mm2=144 * RT_CORE_MM2_45NM * tech.area_scale(4)),
    "mi300x": dict(sms=304, clock_hz=2.1e9, peak_bf16_flops=1307.4e12,
                   peak_fp16_flops=1307.4e12, peak_fp32_flops=163.4e12,
                   peak_fp8_flops=2614.9e12, peak_int8_ops=2614.9e12,
                   memory_bandwidth_Bps=5.3e12, memory_capacity_bytes=205822885888,
                   memory_kind="hbm3", memory_devices=8, memory_device_gb=24,
                   l2_bytes=256 * 2**20, tdp_w=750.0, sms_on_die=320,
                   tensor_macs_per_sm=1024, fp32_lanes_per_sm=128, l1_kb_per_sm=96, node_nm=5,
                   host_interface="pcie5x16", peer_links=7, chiplets=8),
    # B200 (HGX B200, SXM, 1000 W): dense (no sparsity) fp16/bf16 2.25 PFLOP/s, fp8 and int8
    # 4.5 P, 8 TB/s of HBM3e, 180 GB per GPU usable (1.44 TB per 8-GPU board; eight 24 GB
    # stacks), 18 NVLink 5 links [D: NVIDIA HGX B200 datasheet]; fp32 75 TFLOP/s = 148 SMs x
    # 128 lanes x 2 x 1.98 GHz [D]; 148 of 160 SMs enabled (74 of 80 per die), 256 KiB L1 per
    # SM and a 126 MB L2 read off a device [R: Chips and Cheese, "Nvidia's B200: Keeping the
    # CUDA Juggernaut Rolling", 2025]; boost clock as the H100 SXM [E, same source]; 4096 dense
    # fp16 MACs per SM per cycle (2.25 P / 148 SMs / 1.86 GHz tensor clock / 2) [D-derived];
    # TSMC 4NP as the 4 nm node; the NVLink 5 PHY area is NVLink 4's [E]; idle power with a
    # CUDA context [E]. The two reticle-sized dies are the floorplan's to split.
    "b200": dict(sms=148, clock_hz=1.98e9, peak_bf16_flops=2.25e15, peak_fp16_flops=2.25e15,
                 peak_fp32_flops=75e12, peak_fp8_flops=4.5e15, peak_int8_ops=4.5e15,
                 memory_bandwidth_Bps=8.0e12, memory_capacity_bytes=183359 * MIB,
                 memory_kind="hbm3e", memory_devices=8, memory_device_gb=24, l2_bytes=126e6,
                 tdp_w=1000.0, sms_on_die=160, tensor_macs_per_sm=4096,
                 fp32_lanes_per_sm=128, l1_kb_per_sm=256, node_nm=4,
                 host_interface="pcie5x16", peer_links=18, chiplets=2),
    "l4": dict(sms=58, clock_hz=2.04e9, peak_bf16_flops=121e12, peak_fp16_flops=121e12,
               peak_fp32_flops=30.3e12, peak_fp8_flops=242.5e12, peak_int8_ops=242.5e12,
               memory_bandwidth_Bps=300e9, memory_capacity_bytes=23034 * MIB,
               memory_kind="gddr6", memory_devices=6, memory_device_gb=4,
               l2_bytes=48 * 2**20, tdp_w=72.0, sms_on_die=60,
               tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128, node_nm=4,
               host_interface="pcie4x16", peer_links=0,
               other_logic_mm2=60 * RT_CORE_MM2_45NM * tech.area_scale(4)),
    "a10g": dict(sms=72, clock_hz=1.695e9, peak_bf16_flops=125e12, peak_fp16_flops=125e12,
                 peak_fp32_flops=31.2e12, peak_fp8_flops=0.0, peak_int8_ops=250e12,
                 memory_bandwidth_Bps=600e9, memory_capacity_bytes=23028 * MIB,
                 memory_kind="gddr6", memory_devices=12, memory_device_gb=2,
                 l2_bytes=6 * 2**20, tdp_w=150.0, sms_on_die=84,
                 tensor_macs_per_sm=512, fp32_lanes_per_sm=128, l1_kb_per_sm=128,
                 node_nm=10, host_interface="pcie4x16", peer_links=0,
                 other_logic_mm2=84 * RT_CORE_MM2_45NM * tech.area_scale(10)),
}
gpu_formats.add_preset_datapaths(PRESETS)   # int4 / fp6 / fp4 peaks, block scaling

#: The preset of each device name torch reports (``torch.cuda.get_device_properties().name``):
#: the datasheet a calibration measured on that device is fitted against.
DEVICE_PRESETS = {
    "NVIDIA A100-SXM4-80GB": "a100", "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA H100 80GB HBM3": "h100", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200",
    "NVIDIA L40S": "l40s", "Tesla T4": "t4", "NVIDIA GeForce RTX 3090": "rtx3090",
    "NVIDIA GeForce RTX 4090": "rtx4090", "AMD Instinct MI300X": "mi300x", "NVIDIA B200": "b200",
    "NVIDIA L4": "l4", "NVIDIA A10G": "a10g",
}


def preset_chip(preset: str, sms: int | None = None, l2_bytes: float | None = None) -> Chip:
    """The :class:`Chip` of a preset's datasheet (``sms`` and ``l2_bytes`` as read off a device
    where given)."""
    hw = {p.name: p.default for p in PARAMS} | PRESETS[preset]
    return Chip(sms=int(sms or hw["sms"]), peak_flops=_peaks(hw),
                bandwidth_Bps=hw["memory_bandwidth_Bps"],
                l2_bytes=float(l2_bytes or hw["l2_bytes"]), clock_hz=hw["clock_hz"])


def _peaks(hw) -> dict[str, float]:
    """Dense peak FLOP/s per dtype (0: no datapath; ``Chip.datapath`` falls back)."""
    return {"bf16": hw["peak_bf16_flops"], "fp16": hw["peak_fp16_flops"],
            "fp32": hw["peak_fp32_flops"], "fp8": hw["peak_fp8_flops"],
            "int8": hw["peak_int8_ops"]}


#: What a result's latency means under each ``runtime`` (shown with every GPU result).
LATENCY_MEANING = {
    "kernels": "GPU kernel time only (device busy time; no host overhead: set "
               "hw.runtime=eager with a host profile for PyTorch eager wall time)",
    "eager": "PyTorch eager wall time: per-op host dispatch overlapped with the kernels",
    "cuda_graphs": "CUDA-graph replay wall time: one graph launch, then the kernels",
}

#: Register file per SM, B [D: 64K 32-bit registers per SM since Volta].
REGISTER_FILE_BYTES_PER_SM = 256 * 1024
#: Register-file bytes per tensor-core MAC: an m16n8k16 fp16 MMA (2,048 MACs) reads A (16 x 16
#: x 2 B), B (16 x 8 x 2 B) and C (16 x 8 x 4 B) and writes D (16 x 8 x 4 B) [D NVIDIA PTX ISA,
#: mma.m16n8k16] = 1,792 B; from the 64 KiB register file of one of an SM's four
#: sub-partitions (256 KiB per SM [D]), read a bank at a time (``tech.sram_energy_j_per_byte``).
RF_BYTES_PER_TENSOR_MAC = 1792 / 2048
RF_BANK_BYTES = 64 * 1024
#: Register-file bytes per CUDA-core fp32 FMA (three 4-byte operands read, one written) and
#: per element-wise FLOP (two read, one written) [E, from the instruction's operands].
RF_BYTES_PER_FP32_FMA = 16
RF_BYTES_PER_VECTOR_OP = 12
#: The rest of an SM apart from its tensor and fp32 datapaths and its register file and L1
#: (schedulers, dispatch, operand collectors, load/store, special-function, texture, integer
#: and fp64 units, crossbars), mm^2 at 45 nm, scaled to the node by ``technology.area_scale``
#: [S-derived: Turing's TPC (two SMs) measures 10.89 mm^2 on TU106 die shots at 12 nm, its
#: tensor cores 1.25 and its two RT cores 0.7 mm^2 of it (Hardwareluxx, "Turing: RT und Tensor
#: Cores belegen nur wenig Chipfläche", 2019, die shots by OC_Burner); less the RT cores and
#: the model's tensor MACs (0.56 mm^2 per SM, against the 0.63 measured), fp32 lanes and 256 +
#: 96 KiB of SRAM; ``dse.calibrate.physical_fit.derived_constants`` recomputes it]. A fixed
#: base per SM, not a multiple of the datapaths: Hopper doubled the tensor MACs per SM at about
#: the same SM area (GH100, 144 SMs, is 0.99x GA100's 128-SM die).
SM_BASE_MM2_45NM = 31.35
#: What the gpu template does not count (GPCs' raster and geometry engines, the L2 crossbar,
#: memory and NVLink controllers, copy, video and display engines, PCIe, white space) as a
#: fraction of its SMs and ``other_logic_mm2`` (the die's L2 pays ``physical.SRAM_OVERHEAD``)
#: [fitted with ``physical.CONTROL_OVERHEAD`` on the published dies (the GPUs' set it):
#: ``dse.calibrate.physical_fit.fit``]. It is smaller than an npu's because an SM, unlike a
#: systolic array, is counted with its control.
GPU_CONTROL_OVERHEAD = 0.891

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
    problem = _calibration_problem(cal)
    if problem:
        raise BadInput("hw.calibration", name_or_path, f"expected {allowed} ({problem})")
    return cal


def _calibration_problem(cal: dict[str, Any]) -> str | None:
    """What is wrong with a calibration's numbers: every efficiency knob finite and >= 0, and
    > 0 unless it is a time (``_s``) or a size (``_bytes``); memory-op rows finite and >= 0."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    for key, v in cal["efficiency"].items():
        zero_ok = key.endswith(("_s", "_bytes"))
        if not number(v) or v < 0 or (v == 0 and not zero_ok):
            return f"efficiency.{key} = {v!r}: expected a finite number " + (
                ">= 0" if zero_ok else "> 0")
    rows = cal.get("memory_ops", {})
    for key, row in (rows.items() if isinstance(rows, dict) else [("", rows)]):
        if not isinstance(row, list) or not all(number(v) and v >= 0 for v in row):
            return f"memory_ops.{key} = {row!r}: expected a list of finite numbers >= 0"
    return None


def shipped_calibrations() -> list[str]:
    """Names of the calibrations shipped with the package."""
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


def calibration_chip(cal: dict[str, Any]) -> Chip | None:
    """The chip a calibration was fitted on: its ``chip`` section, else the preset of its
    device name (:data:`DEVICE_PRESETS`), else None (its knobs are then used as they are)."""
    c = cal.get("chip")
    if isinstance(c, dict):
        try:
            chip = Chip(sms=int(c["sms"]), peak_flops={k: float(v) for k, v in
                                                      c["peak_flops"].items()},
                        bandwidth_Bps=float(c["bandwidth_Bps"]),
                        l2_bytes=float(c["l2_bytes"]), clock_hz=float(c.get("clock_hz", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            chip = None
        if chip is None or chip.sms <= 0 or chip.bandwidth_Bps <= 0 or not all(
                math.isfinite(v) for v in (chip.bandwidth_Bps, chip.l2_bytes, chip.clock_hz)):
            raise BadInput("hw.calibration", cal.get("device", {}).get("name", "?"),
                           'a calibration whose "chip" holds positive sms, peak_flops, '
                           "bandwidth_Bps, l2_bytes and clock_hz")
        return chip
    dev = cal.get("device") or {}
    preset = DEVICE_PRESETS.get(dev.get("name"))
    return preset_chip(preset, dev.get("sms"), dev.get("l2_bytes")) if preset else None


class GPU(Template):
    name = "gpu"
    description = ("GPU (A100/H100/H200/L40S/T4/RTX 3090/4090/MI300X) running PyTorch: wave "
                   "and tile quantisation, memory-bound GEMV and decode attention, a kernel "
                   "launch floor, eager host dispatch or CUDA graphs; calibrated on an H200")
    PARAMS = PARAMS
    PRESETS = PRESETS
    DEFAULT_PRESET = "h200"
    SPARSE_ATTENTION = True

    def __init__(self, preset: str | None = None, **values: Any):
        if "dtype" in values:
            raise BadInput("hw.dtype", values["dtype"], "the gpu runs every op in its own dtype "
                           "(the workload's --dtype) on that dtype's datapath; it has no dtype "
                           "parameter")
        super().__init__(preset, **values)
        hw = self.hw
        self._calibration = load_calibration(hw.calibration) if hw.calibration else None
        self.host = load_host_profile(hw.host_profile) if hw.host_profile else None
        explicit = set(values)
        knobs = dict(DEFAULT_KNOBS)
        knobs["mem_floor_s"] = self.params()["launch_overhead_s"].default
        memory_ops: dict[str, Any] = {}
        cal = self._calibration
        chip = Chip(sms=hw.sms, peak_flops=_peaks(hw), bandwidth_Bps=hw.memory_bandwidth_Bps,
                    l2_bytes=hw.l2_bytes, clock_hz=hw.clock_hz)
        if cal is not None:
            fitted = {k: float(v) for k, v in cal["efficiency"].items() if k in knobs}
            mops = {k: tuple(v) for k, v in cal.get("memory_ops", {}).items()}
            fitted, memory_ops = transfer_knobs(fitted, mops, calibration_chip(cal) or chip,
                                                chip)
            knobs.update(fitted)
        preset = self.PRESETS.get(self.preset) or {}
        for name in KNOB_PARAMS:  # a parameter set by hand or by a preset beats the file
            if cal is None or name in explicit or name in preset:
                knobs[name] = float(hw[name])
        if cal is None and not {"bandwidth_efficiency"} & (explicit | set(preset)):
            # uncalibrated: a copy streams at the memory standard's sustained share, the rule
            # every template's DRAM follows (memory_standards.SUSTAINED_FRACTION)
            knobs["bandwidth_efficiency"] = self.memory.standard.sustained_fraction
        if cal is None or "launch_overhead_s" in explicit:
            shift = float(hw.launch_overhead_s) - knobs["mem_floor_s"]
            for name in _FIXED_TIMES:
                knobs[name] = max(0.0, knobs[name] + shift)
        self.knobs = knobs
        self.model = KernelModel(chip, knobs, memory_ops)
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
        if hw.sms_on_die and hw.sms_on_die < hw.sms:
            return ("hw.sms_on_die", hw.sms_on_die, f"expected at least sms={hw.sms} (the die "
                    "holds every enabled SM; 0: sms)")
        if hw.memory_devices_on_die and hw.memory_devices_on_die < self.memory.devices:
            return ("hw.memory_devices_on_die", hw.memory_devices_on_die, "expected at least "
                    f"the {self.memory.devices} memory devices installed (0: as many)")
        if hw.calibration:
            load_calibration(hw.calibration)
        if hw.runtime != "kernels" and not hw.host_profile:
            return ("hw.host_profile", hw.host_profile, f"runtime {hw.runtime} needs a host "
                    "profile: a shipped name or the path of a JSON written by `python -m "
                    "dse.calibrate.host_profile` on the machine to model")
        if hw.host_profile:
            load_host_profile(hw.host_profile)
        return None

    def check(self, workload: Workload) -> str | None:
        """:meth:`Template.check`, and a measured idle power (``context_idle_w``) the design
        could not draw: above its leakage, memory background and clocked logic (the T4's 26 W
        against 55 W), a busy board would pass its TDP."""
        problem = super().check(workload)
        if problem:
            return problem
        phys = self.physical()
        most = phys.static_w + phys.active_w
        if self.hw.context_idle_w > most:
            return (f"hw.context_idle_w {self.hw.context_idle_w:,.0f} W is more than this "
                    f"design's leakage, memory background and clocked logic ({most:,.0f} W): "
                    "an idle board cannot draw it")
        return None

    # ------------------------------------------------------------------------ rates / energy
    def _energy_model(self) -> dict[str, Any]:
        """Dynamic J per FLOP of each datapath (tensor-core dtypes, ``fp32`` on the CUDA
        cores, ``vector`` for element-wise work), J per DRAM byte, J per L2 byte, and the
        power of the logic the tables do not count (charged per second of kernel time)."""
        node = self.hw.node_nm
        phys = self.physical()
        # a measured idle power above the modelled static already holds the clocked logic's
        # idle share of the uncounted logic: a kernel pays only the rest of it
        idle_extra_w = max(0.0, self.hw.context_idle_w - phys.static_w)
        return {"flop": self._per_flop_j(), "dram": self.memory.energy_j_per_byte,
                "l2": tech.sram_energy_j_per_byte(self.hw.l2_bytes, node),
                "active_w": max(0.0, phys.active_w - idle_extra_w)}

    def static_power_w(self) -> float:
        """Leakage and the memory's background, W, or the board's measured idle power with a
        CUDA context (``context_idle_w``: P0 clocks running between kernels) where higher."""
        return max(super().static_power_w(), self.hw.context_idle_w)

    def _per_flop_j(self) -> dict[str, float]:
        """Dynamic J per FLOP of each datapath (:meth:`_energy_model`)."""
        node = self.hw.node_nm
        rf_j = tech.sram_energy_j_per_byte(RF_BANK_BYTES, node)
        per_flop = {d: (tech.mac_energy_j(d, node) + RF_BYTES_PER_TENSOR_MAC * rf_j) / 2
                    for d in DTYPE_BYTES if d != "fp32"}
        per_flop["fp32"] = (tech.mac_energy_j("fp32", node) + RF_BYTES_PER_FP32_FMA * rf_j) / 2
        per_flop["vector"] = (tech.vector_op_energy_j("fp32", node)
                              + RF_BYTES_PER_VECTOR_OP * rf_j)
        return per_flop

    def datapath_power_w(self) -> float:
        """The most dynamic power the cost model charges the SMs' datapaths, W: each
        datapath's peak FLOP/s (the rates :meth:`cost` runs at) x its energy per FLOP. The
        datasheet peaks are parameters of their own, so a datapath may outrun the fp16
        tensor MACs (the fp32 CUDA cores of a graphics part, an fp8 path at twice the fp16
        rate); the TDP covers the hungriest."""
        per = self._per_flop_j()
        return max((r * per[d] for d, r in self.model.chip.peak_flops.items() if d in per),
                   default=0.0)

    def energy_per_flop_j(self, dtype: str = "bf16") -> float:
        """Dynamic energy of one FLOP in ``dtype`` on its datapath, J (the uncounted logic,
        charged per second, apart)."""
        return self._energy["flop"][dtype]

    def energy_per_byte_j(self) -> float:
        """Dynamic energy of one DRAM byte moved by a kernel (DRAM and one pass through the
        L2), J/B."""
        return self._energy["dram"] + self._energy["l2"]

    # ----------------------------------------------------------------------------- cost
    def cost(self, op: Op) -> OpCost:
        key = (op.kind, op.target, op.dtype, op.bytes_per_element, op.flops, op.total_bytes,
               op.input_shapes, op.output_shapes, repr(sorted(op.attrs.items())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if op.kind == ir.HOST:
            out = self._host_cost(op)
            self._cache[key] = out
            return out
        if op.kind in ir.COMPOSITE_KINDS:   # grouped kernels: one launch for all parts
            out = cost_composite(op, self.cost, fixed_s=self.knobs["gemm_launch_s"])
            self._cache[key] = out
            return out
        if "formats" in op.attrs:   # operands in number formats: accelerators.gpu_formats
            out = gpu_formats.cost(self, op)
            if out is not None:
                self._cache[key] = out
                return out
        nbytes = op.total_bytes
        flops = op.flops
        dtype = op.dtype  # the op's dtype decides its datapath (see the module docstring)
        b = op.bytes_per_element
        a = op.attrs
        l2_bytes = nbytes
        details: dict[str, Any] = {}
        if op.kind == ir.MATMUL and _has(a, "m", "n", "k"):
            m, n, k, batch = int(a["m"]), int(a["n"]), int(a["k"]), int(a.get("batch", 1))
            lat, comp, mem = self.model.gemm(m, n, k, batch, dtype, bytes_hbm=nbytes)
            l2_bytes = b * batch * (m * k * math.ceil(n / 128) + k * n * math.ceil(m / 128)
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
                dtype, int(a.get("value_dim") or a["head_dim"]), bool(a.get("kv_shared")))
            if a.get("causal"):
                flops = int(a.get("causal_flops", flops))
            qb = int(self.knobs["attention_q_block"])
            kv = op.kv_bytes_read or nbytes / 2
            l2_bytes = nbytes + kv * (math.ceil(int(a["q_len"]) / qb) - 1)
            bound = "compute" if comp >= mem else "memory"
        elif op.kind == ir.SPARSE_ATTENTION and _has(a, "heads", "q_len", "kv_len", "head_dim"):
            hw = self.hw
            sparse = sparse_attention_time(self.model, a, dtype, hw.attention_block_q,
                                           hw.attention_block_kv, hw.attention_mask_policy,
                                           hw.peak_fp32_flops / 2,
                                           kernel_overheads(hw.attention_sparse_kernel))
            lat, comp, mem = sparse.latency_s, sparse.compute_s, sparse.memory_s
            flops, details = sparse.executed_flops, sparse.details()
            bound = "compute" if comp >= mem else "memory"
        else:
            width, rows = _rows(op)
            lat, mem = self.model.memory(nbytes, memory_target(op), op.kind, rows=rows,
                                         width=width, bytes_per_element=b)
            # its FLOPs at the SMs' peak for the dtype: never binding on a datasheet part, but
            # a drawn fp32 peak far below its SMs' (42.8 GFLOP/s) made AdamW free of compute
            comp = flops / self.sm_peak(dtype) if flops else 0.0
            lat = max(lat, comp)
            bound = "compute" if comp > mem else "memory"
        lat = max(lat, nbytes / self.hw.memory_bandwidth_Bps)
        e = self._energy
        tensor = op.kind in (ir.MATMUL, ir.CONV, ir.ATTENTION, ir.SPARSE_ATTENTION)
        path = self.model.chip.datapath(dtype) if tensor else "vector"
        out = OpCost(
            unit="sm", latency_s=lat, compute_s=min(comp, lat), clock_hz=self.hw.clock_hz,
            traffic={"hbm": nbytes}, bytes_by_level={"hbm": nbytes, "l2": l2_bytes},
            energy_j={"compute": flops * e["flop"][path] + e["active_w"] * lat,
                      "offchip_memory": nbytes * e["dram"],
                      "onchip_memory": l2_bytes * e["l2"]},
            bound=bound, details=details)
        self._cache[key] = out
        return out

    def format_problem(self, workload: Workload) -> str | None:
        """Why this GPU's datapaths cannot run ``workload``'s number formats, or None
        (:func:`accelerators.gpu_formats.workload_problem`)."""
        return gpu_formats.workload_problem(self, workload)

    def _host_cost(self, op: Op) -> OpCost:
        """A host op of the runtime's plan (:mod:`accelerators.gpu_runtime`): its time from
        the host profile; no GPU energy (the board's idle power runs on as static power)."""
        host = self.host
        if host is None:
            raise BadInput("hw.host_profile", "", "a host op needs a host profile (runtime "
                           f"{self.hw.runtime})")
        if op.target == START_TARGET["eager"]:
            t = host.step_s + host.launch_latency_s
        elif op.target == START_TARGET["cuda_graphs"]:
            t = host.graph_launch_s + host.launch_latency_s
        else:
            t = (host.dispatch(op.target, op.attrs.get("for_kind", ""))
                 + float(op.attrs.get("views", 0.0)) * host.view_s)
        return OpCost(unit="host", latency_s=t, compute_s=t, clock_hz=self.hw.clock_hz,
                      bound="host")

    # ------------------------------------------------------------------------- the rest
    def plan(self, workload: Workload) -> Workload:
        """The workload as one stream under ``runtime`` (:func:`gpu_runtime.stream_plan`)."""
        return stream_plan(workload, self.hw.runtime)

    def resources(self) -> Resources:
        units = {"sm": 1} if self.hw.runtime == "kernels" else {"sm": 1, "host": 1}
        return Resources(units=units, channels={"hbm": self.hw.memory_bandwidth_Bps})

    def sm_peak(self, dtype: str) -> float:
        """FLOP/s of the SMs for ``dtype``: the datasheet's dense peak of its datapath (its
        fallback where it has none; fp32 GEMMs may run as TF32 at half the fp16 peak), never
        less than the fp32 CUDA-core peak."""
        hw = self.hw
        return max(self.model.peak(dtype), hw.peak_fp32_flops,
                   0.5 * hw.peak_fp16_flops if dtype == "fp32" else 0.0)

    def peaks(self, dtype: str) -> Peaks:
        """The SMs at the datasheet's dense peak of the datapath that runs ``dtype`` (its
        fallback where it has none; fp32 GEMMs and convolutions may run as TF32 at half the
        fp16 peak), never less than the fp32 CUDA-core peak; the host computes nothing. HBM at
        ``memory_bandwidth_Bps``, inside which the L2 and the SMs' L1 hold data; the cheapest
        FLOP is half a MAC or a vector op of ``dtype`` at ``node_nm``."""
        hw = self.hw
        sm = self.sm_peak(dtype)
        units = {"sm": sm} if hw.runtime == "kernels" else {"sm": sm, "host": 0.0}
        onchip = hw.l2_bytes + hw.sms * hw.l1_kb_per_sm * 1024
        return Peaks(
            flops_per_s=units,
            levels=(MemoryLevel("hbm", hw.memory_bandwidth_Bps, hw.memory_capacity_bytes,
                                self.memory.energy_j_per_byte, resident=True),
                    MemoryLevel("l2", math.inf, onchip, 0.0)),
            energy_per_flop_j=min(tech.mac_energy_j(dtype, hw.node_nm) / 2,
                                  tech.vector_op_energy_j(dtype, hw.node_nm)))

    def floorplan(self) -> Floorplan:
        """The die: SMs as blocks (``SM_BASE_MM2_45NM`` at the node, tensor MACs as
        systolic-class PEs, fp32 lanes, the register file and L1), ``other_logic_mm2`` and the
        PHYs of memory sites left empty, with ``GPU_CONTROL_OVERHEAD``; the L2 as SRAM; memory
        PHYs for every filled site and the peer-link (NVLink) PHYs as link PHYs (no control
        overhead). Power bottom-up, as every template's: every enabled SM's tensor MACs busy
        each cycle in fp16 with their register-file operands (or the hungriest datapath at
        its datasheet peak, :meth:`datapath_power_w`, where that draws more), the L2 passing
        the memory's full bandwidth, leakage of the logic and SRAM (``physical.assess`` adds
        the memory, the uncounted logic at ``clock_hz`` and the memory's background)."""
        hw = self.hw
        node, sms = hw.node_nm, hw.sms_on_die or hw.sms
        sm_sram = REGISTER_FILE_BYTES_PER_SM + hw.l1_kb_per_sm * 1024
        sm = (SM_BASE_MM2_45NM * tech.area_scale(node)
              + hw.tensor_macs_per_sm * tech.pe_area_mm2("fp16", node)
              + hw.fp32_lanes_per_sm * tech.pe_area_mm2("fp32", node)
              + tech.sram_area_mm2(sm_sram, node))
        mem = self.memory
        phys_on_die = hw.memory_devices_on_die or mem.devices
        extra_phy = (phys_on_die - mem.devices) * mem.standard.phy_area_mm2
        compute = sms * sm + extra_phy + hw.other_logic_mm2
        rf_j = tech.sram_energy_j_per_byte(RF_BANK_BYTES, node)
        tensor_w = hw.sms * hw.tensor_macs_per_sm * hw.clock_hz * (
            tech.mac_energy_j("fp16", node) + RF_BYTES_PER_TENSOR_MAC * rf_j)
        tensor_w = max(tensor_w, self.datapath_power_w())
        l2_w = mem.bandwidth_Bps * tech.sram_energy_j_per_byte(hw.l2_bytes, node)
        logic = (1 + GPU_CONTROL_OVERHEAD) * compute - tech.sram_area_mm2(sms * sm_sram, node)
        return Floorplan(node_nm=node, compute_mm2=compute,
                         sram_mm2=tech.sram_area_mm2(hw.l2_bytes, node),
                         peak_dynamic_w=tensor_w + l2_w,
                         leakage_w=tech.leakage_w(logic, sms * sm_sram + hw.l2_bytes, node),
                         memory=mem, host_interface=hw.host_interface,
                         control_overhead=GPU_CONTROL_OVERHEAD,
                         link_phy_mm2=hw.peer_links * hw.peer_link_phy_mm2, dies=hw.chiplets,
                         clock_hz=hw.clock_hz)

    def memory_capacity_bytes(self) -> float:
        return self.hw.memory_capacity_bytes

    def capacity_holder(self) -> str:
        return f"the GPU ({self.memory.devices} {self.hw.memory_kind} {self.memory.standard.device}s)"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["efficiency"] = dict(self.knobs)  # the kernel-model knobs in effect
        if self._calibration is not None:
            out["calibration_device"] = self._calibration.get("device", {}).get("name")
        out["latency_is"] = LATENCY_MEANING[self.hw.runtime]
        if self.host is not None:
            out["host_profile"] = {"name": self.host.name, "measured": self.host.measured,
                                   "where": self.host.source.get("where")}
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
