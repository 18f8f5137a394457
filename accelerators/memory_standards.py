"""Off-chip memory standards as data, and a design's memory system built from them.

A design's off-chip memory is a standard and a whole number of devices (HBM stacks, GDDR
chips, DDR channels, LPDDR x32 devices); bandwidth, capacity, logic-die area (PHY + controller),
die edge (shoreline), energy per bit, static power and price follow from them.

Sources and confidence tags: [D] datasheet / JEDEC standard, [P] paper, [R] a public
repository's model, [E] estimate (the docstring says from what).

* Interface widths and data rates [D]: JEDEC JESD79-3/4/5 (DDR3/4/5, 64-bit channel),
  JESD209-4/5 (LPDDR4/4X/5/5X, a 32-bit device), JESD250 (GDDR6, x32), Micron GDDR6X
  (x32, 21 Gb/s PAM4), JESD239 (GDDR7, x32, 32 Gb/s PAM3), JESD235 (HBM2/2E, 1024-bit stack),
  JESD238 (HBM3, 6.4 Gb/s), HBM3E as shipped by SK hynix / Micron (9.2-9.6 Gb/s).
* PHY area on the logic die [R LLMCompass, Zhang et al. ISCA 2024, ``cost_model.py``, measured
  on die shots]: an HBM2E PHY 10.45 mm^2 per stack, a DDR5 PHY 1.45 mm^2 per 32 bits; PHYs are
  analog and are taken not to shrink with the node [R, same]. Controllers are logic and scale
  with the node; their 7 nm areas come from the same model's transistor counts (HBM2E 552.7 M
  transistors per stack, DDR5 90.4 M per 128 bits) at A100's realised density, 65.6 MTr/mm^2
  [D: 54.2 B transistors on 826 mm^2]. GDDR and LPDDR PHYs are estimates [E] from the DDR5
  figure: GDDR runs 3-5x the per-pin rate with training/equalisation (x1.6 area per 32 bits),
  LPDDR drives no DIMM (x0.8).
* Shoreline [E]: the die edge one device needs. HBM: the stack's width along the logic die's
  edge (JEDEC package outline 7.75 x 11.87 mm for HBM2/2E, 11 x 11 mm for HBM3/3E) plus
  spacing, as in A100 / H100, which place three stacks on each ~32 mm long edge; GDDR x32 and
  DDR x64 bump fields: ~4.5-6 mm of edge, from GA102 / TU104 die shots (12 and 8 x32 PHYs
  along three edges).
* Energy per bit [P O'Connor et al., "Fine-Grained DRAM", MICRO 2017, Fig. 1]: HBM2 3.9 pJ/bit
  (I/O ~0.9, core ~3.0), DDR4 ~15, LPDDR4 ~4.5; GDDR6 7.5 and GDDR6X 7.25 pJ/bit [D Micron
  GDDR6X product brief]; DDR3 20 pJ/bit [P Horowitz ISSCC 2014: 1.3-2.6 nJ per 64 bits];
  the rest [E] from the trend (each HBM generation ~10-20 % lower per bit).
* Price per GB [R LLMCompass: DDR5 $2.4, DRAMeXchange spot, Oct 2023]; HBM3 and HBM3E ~$15
  [S: the 2023 H100 bill-of-materials estimate republished by the press ($1,500 for 80 GB of
  HBM3 at ~$15/GB) and Silicon Analysts' cost bridge (Feb. 2026: H100 $1,400 for 80 GB of
  HBM3, B200 ~$2,900 for 192 GB of HBM3E), both on Raymond James / Epoch AI estimates;
  LLMCompass's $7 is a spot price, not what a GPU vendor pays under contract]; HBM2E $12 and
  HBM2 $10 [E, older generations below HBM3]; other standards [E] relative to DDR5 (GDDR
  ~1.3x, LPDDR ~1.5x).
* Sustained bandwidth [measured / E]: the share of the pins' peak a large streaming transfer
  reaches, one rule per standard for every template (``MemoryStandard.sustained_fraction``,
  ``MemorySystem.sustained_bandwidth_Bps``): HBM 0.886, what a 1 GiB device copy reached on
  this project's H200 (HBM3E; ``calibration/h200.json``, ``bandwidth_efficiency``), taken for
  every HBM generation [E]; GDDR 0.85 [E: refresh, read/write turnaround and bank conflicts
  as in HBM, with fewer channels to hide them]; DDR and LPDDR 0.80 [E: STREAM results on DDR4
  and DDR5 servers reach 75-85 % of their peak].
* Static power per device [E]: DRAM background (refresh, standby) plus PHY idle: ~2 W per
  HBM stack, ~0.5 W per GDDR chip or DDR channel, ~0.1 W per LPDDR device.
* Most devices one package takes [D/E]: 8 HBM stacks (MI300X, B200 on CoWoS), 16 GDDR chips
  on a 512-bit bus (RTX 5090), 12 DDR5 channels (AMD EPYC 9004), 32 LPDDR5 x32 devices
  (1024-bit, Apple M2 Ultra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dse.errors import BadInput

GB = 1e9  #: bytes; memory prices are per GB of a device's nominal capacity, as vendors sell it
#: Bytes a DRAM device's nominal "GB" holds: DRAM densities are binary (JEDEC: a 16 Gb die is
#: 2^34 bits), so a device sold as 16 GB holds 16 GiB [D JEDEC JESD235 / JESD250 densities].
DEVICE_GB = 2**30

#: Realised logic density of the reference node for controller areas, MTr/mm^2 [D: A100,
#: 54.2 B transistors on 826 mm^2 at TSMC N7].
CONTROLLER_REFERENCE_DENSITY_MTR_MM2 = 65.6
CONTROLLER_REFERENCE_NODE_NM = 7


@dataclass(frozen=True)
class MemoryStandard:
    """One off-chip memory standard, per device (stack, chip or channel)."""

    name: str
    device: str                     #: what one device is: "stack", "chip", "channel"
    interface_bits: int             #: data pins per device
    data_rate_gbps: float           #: per-pin data rate of the fastest common bin, Gb/s
    capacities_gb: tuple[float, ...]  #: capacity options per device, GB
    default_capacity_gb: float
    phy_area_mm2: float             #: PHY per device on the logic die, mm^2 (node-independent)
    controller_mtr: float           #: controller per device, million transistors
    shoreline_mm: float             #: die edge one device needs, mm
    phy_pj_per_bit: float           #: I/O energy (both ends of the link), pJ/bit
    core_pj_per_bit: float          #: DRAM array + periphery energy, pJ/bit
    price_usd_per_gb: float
    max_devices: int                #: most devices one package takes
    static_w: float                 #: background + PHY idle power per device, W
    on_interposer: bool = False     #: needs a 2.5-D interposer next to the logic die
    footprint_mm2: float = 0.0      #: package area a device takes on the interposer, mm^2
    sustained_fraction: float = 1.0  #: share of the peak a streaming transfer sustains

    @property
    def bandwidth_Bps(self) -> float:
        """Peak bandwidth of one device at the nominal data rate, B/s."""
        return self.interface_bits * self.data_rate_gbps * 1e9 / 8

    @property
    def energy_j_per_byte(self) -> float:
        """Energy of moving one byte (I/O + DRAM core), J/B."""
        return (self.phy_pj_per_bit + self.core_pj_per_bit) * 8e-12

    def controller_area_mm2(self, node_scale: float) -> float:
        """Controller area per device at a node whose area factor relative to 7 nm is
        ``node_scale``, mm^2."""
        return self.controller_mtr / CONTROLLER_REFERENCE_DENSITY_MTR_MM2 * node_scale


#: Share of the pins' peak a streaming transfer sustains, per family of standards (see the
#: module docstring: HBM measured on an H200, the others [E]).
SUSTAINED_FRACTION = {"hbm": 0.886, "gddr": 0.85, "lpddr": 0.80, "ddr": 0.80}


def _family(name: str) -> str:
    return next(f for f in ("hbm", "gddr", "lpddr", "ddr") if name.startswith(f))


def _std(name, device, bits, rate, caps, default, phy, ctrl, shore, phy_pj, core_pj, price,
         max_dev, static, interposer=False, footprint=0.0) -> MemoryStandard:
    return MemoryStandard(name, device, bits, rate, caps, default, phy, ctrl, shore, phy_pj,
                          core_pj, price, max_dev, static, interposer, footprint,
                          SUSTAINED_FRACTION[_family(name)])


_DDR_PHY = 2 * 1.45       # x64 channel = two DDR5 32-bit PHY units [R]
_DDR_CTRL = 45.2          # MTr per x64 channel [R: 90.4 MTr per 128 bits]
_X32_PHY_GDDR = 1.6 * 1.45
_X32_PHY_LPDDR = 0.8 * 1.45
_X32_CTRL = _DDR_CTRL / 2
_HBM_PHY = 10.45          # mm^2 per stack [R]
_HBM_CTRL = 552.7         # MTr per stack [R]

#: name -> standard. Columns: device, width (bits), Gb/s per pin, capacities (GB), default
#: capacity, PHY mm^2, controller MTr, shoreline mm, I/O pJ/bit, core pJ/bit, $/GB, most
#: devices, static W, on an interposer, interposer footprint mm^2.
MEMORY_STANDARDS: dict[str, MemoryStandard] = {s.name: s for s in (
    _std("ddr3", "channel", 64, 2.133, (2, 4, 8, 16), 4, _DDR_PHY, _DDR_CTRL, 6.0, 8.0, 12.0,
         1.5, 8, 0.5),
    _std("ddr4", "channel", 64, 3.2, (8, 16, 32, 64), 16, _DDR_PHY, _DDR_CTRL, 6.0, 5.0, 10.0,
         2.0, 8, 0.5),
    _std("ddr5", "channel", 64, 6.4, (16, 32, 48, 64, 96, 128), 32, _DDR_PHY, _DDR_CTRL, 6.0,
         4.0, 8.0, 2.4, 12, 0.5),
    _std("lpddr4", "chip", 32, 3.2, (2, 4, 8), 4, _X32_PHY_LPDDR, _X32_CTRL, 3.0, 1.5, 2.5,
         3.0, 16, 0.1),
    _std("lpddr4x", "chip", 32, 4.266, (2, 4, 8), 4, _X32_PHY_LPDDR, _X32_CTRL, 3.0, 1.2, 2.5,
         3.0, 16, 0.1),
    _std("lpddr5", "chip", 32, 6.4, (2, 4, 8, 16), 8, _X32_PHY_LPDDR, _X32_CTRL, 3.0, 1.0, 2.5,
         3.5, 32, 0.1),
    _std("lpddr5x", "chip", 32, 8.533, (2, 4, 8, 16), 8, _X32_PHY_LPDDR, _X32_CTRL, 3.0, 0.9,
         2.4, 4.0, 32, 0.1),
    # 4 GB: two 16 Gb chips in clamshell on one x32 channel (L40S, RTX 6000 Ada: 48 GB on
    # a 384-bit bus) [D]
    _std("gddr6", "chip", 32, 16.0, (1, 2, 4), 2, _X32_PHY_GDDR, _X32_CTRL, 4.5, 4.5, 3.0, 3.0,
         16, 0.5),
    _std("gddr6x", "chip", 32, 21.0, (1, 2), 2, _X32_PHY_GDDR, _X32_CTRL, 4.5, 4.5, 2.75,
         4.0, 12, 0.5),
    _std("gddr7", "chip", 32, 32.0, (2, 3), 2, _X32_PHY_GDDR, _X32_CTRL, 4.5, 3.5, 2.5, 5.0,
         16, 0.5),
    _std("hbm2", "stack", 1024, 2.4, (4, 8), 8, _HBM_PHY, _HBM_CTRL, 8.5, 0.9, 3.0, 10.0, 8,
         2.0, True, 7.75 * 11.87),
    _std("hbm2e", "stack", 1024, 3.6, (8, 16), 16, _HBM_PHY, _HBM_CTRL, 8.5, 0.8, 2.7, 12.0,
         8, 2.0, True, 7.75 * 11.87),
    _std("hbm3", "stack", 1024, 6.4, (16, 24), 16, _HBM_PHY, _HBM_CTRL, 11.0, 0.7, 2.3,
         15.0, 8, 2.0, True, 11.0 * 11.0),
    _std("hbm3e", "stack", 1024, 9.6, (24, 36), 24, _HBM_PHY, _HBM_CTRL, 11.0, 0.65, 2.1,
         15.0, 8, 2.0, True, 11.0 * 11.0),
)}

STANDARD_NAMES = tuple(MEMORY_STANDARDS)


def get_standard(name: str, field: str = "hw.dram") -> MemoryStandard:
    """The standard called ``name``; :class:`BadInput` naming ``field`` otherwise."""
    try:
        return MEMORY_STANDARDS[name]
    except (KeyError, TypeError):
        raise BadInput(field, name, "expected one of " + ", ".join(STANDARD_NAMES)) from None


@dataclass(frozen=True)
class MemorySystem:
    """A design's off-chip memory: ``devices`` devices of ``standard`` with
    ``capacity_gb_per_device`` each, run at ``bandwidth_Bps`` (at most the devices' peak: an
    interface may run below its top data rate)."""

    standard: MemoryStandard
    devices: int
    capacity_gb_per_device: float
    bandwidth_Bps: float

    @property
    def capacity_bytes(self) -> float:
        """What the devices hold, bytes (binary: :data:`DEVICE_GB`)."""
        return self.devices * self.capacity_gb_per_device * DEVICE_GB

    @property
    def peak_bandwidth_Bps(self) -> float:
        return self.devices * self.standard.bandwidth_Bps

    @property
    def sustained_bandwidth_Bps(self) -> float:
        """What a streaming transfer sustains at the interface's ``bandwidth_Bps``: the
        standard's ``sustained_fraction`` of it (one rule for every template)."""
        return self.bandwidth_Bps * self.standard.sustained_fraction

    @property
    def price_usd(self) -> float:
        return self.devices * self.capacity_gb_per_device * self.standard.price_usd_per_gb

    @property
    def static_w(self) -> float:
        return self.devices * self.standard.static_w

    @property
    def energy_j_per_byte(self) -> float:
        return self.standard.energy_j_per_byte

    def phy_area_mm2(self, node_scale: float) -> float:
        """PHYs and controllers on the logic die, mm^2."""
        s = self.standard
        return self.devices * (s.phy_area_mm2 + s.controller_area_mm2(node_scale))

    @property
    def shoreline_mm(self) -> float:
        return self.devices * self.standard.shoreline_mm

    def to_dict(self) -> dict:
        return {"standard": self.standard.name, "devices": self.devices,
                "capacity_bytes": self.capacity_bytes, "bandwidth_Bps": self.bandwidth_Bps}


def devices_for_bandwidth(standard: MemoryStandard, bandwidth_Bps: float) -> int:
    """The fewest devices of ``standard`` whose peak bandwidth reaches ``bandwidth_Bps``."""
    return max(1, math.ceil(bandwidth_Bps / standard.bandwidth_Bps * (1 - 1e-12)))


def memory_system(standard_name: str, devices: int, capacity_gb: float, bandwidth_Bps: float,
                  prefix: str = "hw.", bandwidth_field: str = "dram_bandwidth_Bps") -> MemorySystem:
    """The memory system of a design's parameters.

    ``devices`` 0 realises ``bandwidth_Bps`` with the fewest devices that reach it (the
    interface then runs at ``bandwidth_Bps``). ``devices`` > 0 runs them at ``bandwidth_Bps``
    when that is set (an interface may run below its top data rate), else at their peak.
    ``capacity_gb`` 0 takes the standard's default capacity per device. :class:`BadInput`
    names the field when a value is outside the standard: more devices than a package takes,
    a capacity the standard does not offer, a bandwidth above the devices' peak.
    """
    std = get_standard(standard_name, f"{prefix}dram")
    devices_field = f"{prefix}dram_devices"
    if devices < 0 or devices > std.max_devices:
        raise BadInput(devices_field, devices, "expected 0 (realise the bandwidth) or 1.."
                       f"{std.max_devices} {std.name} {std.device}s (the most one package takes)")
    n = devices or devices_for_bandwidth(std, bandwidth_Bps)   # may exceed a package: the
    # design is then infeasible (accelerators.physical says why), not a bad input
    cap = capacity_gb or std.default_capacity_gb
    if not any(math.isclose(cap, c) for c in std.capacities_gb):
        raise BadInput(f"{prefix}dram_device_gb", capacity_gb, "expected 0 (the default, "
                       f"{std.default_capacity_gb:g}) or one of "
                       + ", ".join(f"{c:g}" for c in std.capacities_gb)
                       + f" GB per {std.name} {std.device}")
    peak = n * std.bandwidth_Bps
    if devices and bandwidth_Bps > peak * (1 + 1e-9):
        raise BadInput(f"{prefix}{bandwidth_field}", bandwidth_Bps,
                       f"expected at most the peak of {n} {std.name} {std.device}s, "
                       f"{peak / 1e9:g} GB/s")
    bw = bandwidth_Bps if bandwidth_Bps > 0 else peak
    return MemorySystem(std, n, float(cap), float(bw))
