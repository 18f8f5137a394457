"""Links between devices and the switch chips that join them, as data.

A :class:`LinkStandard` is one point-to-point link (per direction): its raw bandwidth, the
share of it a collective library sustains (``efficiency``), its energy per bit, the PHY area
it costs on each device die and the die edge it takes, and the latency of the collective
library's protocols on it (a fixed start-up cost per collective and a cost per algorithm
step, per protocol). A :class:`SwitchChip` is a crossbar of ports of one link standard
(NVSwitch, a PCIe switch, an InfiniBand switch): die, node, power and whether it reduces in
the network (NVLink SHARP). Networks of many nodes reach each other through NICs
(:data:`NICS`).

Protocols (:data:`PROTOCOLS`) follow NCCL's three [R NVIDIA/nccl src/graph/tuning.cc]: ``ll``
(8-byte stores with an inline flag: lowest latency, a quarter of the bandwidth for reductions
and a third for copies, capped), ``ll128`` (128-byte lines with a flag: 92 % of the bandwidth,
NVLink only) and ``simple`` (bulk copies with a fence per step: full bandwidth, the highest
latency). A collective runs in the protocol that finishes first.

Sources and confidence tags as in :mod:`accelerators.technology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from dse.errors import BadInput


@dataclass(frozen=True)
class Protocol:
    """A collective library protocol: the share of the link bandwidth it moves in a reduction
    (``reduce_fraction``) or a copy (``copy_fraction``), and a cap on the bandwidth a device
    reaches with it (``max_device_Bps``, None: none)."""

    name: str
    reduce_fraction: float
    copy_fraction: float
    max_device_Bps: float | None = None


#: NCCL's protocols [R NVIDIA/nccl src/graph/tuning.cc: LL busBw x 1/4 for all-reduce (1/3
#: otherwise) capped at llMaxBw 87.7 GB/s (Ampere/Hopper, one node); LL128 x 0.92 (120/128);
#: Simple x 1].
PROTOCOLS: Mapping[str, Protocol] = MappingProxyType({
    "ll": Protocol("ll", 1 / 4, 1 / 3, 87.7e9),
    "ll128": Protocol("ll128", 0.92, 0.92),
    "simple": Protocol("simple", 1.0, 1.0),
})


@dataclass(frozen=True)
class LinkStandard:
    """One link, per direction.

    ``bandwidth_Bps``: raw data rate per direction; ``efficiency``: the share a collective
    library sustains over it (protocol headers, flow control); ``latency_s``: the hardware
    latency of one hop; ``energy_pj_per_bit``: both PHYs and the channel; ``phy_mm2`` and
    ``edge_mm``: area and die edge of its PHY on each end; ``on_host_interface``: the link is
    the device's host interface (PCIe), whose PHY the device already has; ``protocols``:
    protocol -> (start-up s, per step s) of the collective library on this link;
    ``price_usd``: cables / retimers per link [E].
    """

    name: str
    bandwidth_Bps: float
    efficiency: float
    latency_s: float
    energy_pj_per_bit: float
    phy_mm2: float
    edge_mm: float
    protocols: Mapping[str, tuple[float, float]]
    on_host_interface: bool = False
    price_usd: float = 0.0
    description: str = ""

    @property
    def energy_j_per_byte(self) -> float:
        return self.energy_pj_per_bit * 8e-12

    @property
    def effective_Bps(self) -> float:
        """Bandwidth a collective library sustains per direction, B/s."""
        return self.bandwidth_Bps * self.efficiency


# Protocol latencies (start-up, per step) in s [R NVIDIA/nccl src/graph/tuning.cc: baseLat
# ring LL 6.6, LL128 14.0, Simple 8.4 us; hwLat per step NVLink ring LL 0.6, LL128 1.9, Simple
# 3.4 us; PCI 1.0, 2.5, 5.7; network 2.7, 4.0, 14.0].
_NVLINK_PROTOCOLS = MappingProxyType({"ll": (6.6e-6, 0.6e-6), "ll128": (14.0e-6, 1.9e-6),
                                      "simple": (8.4e-6, 3.4e-6)})
_PCIE_PROTOCOLS = MappingProxyType({"ll": (6.6e-6, 1.0e-6), "simple": (8.4e-6, 5.7e-6)})
_NET_PROTOCOLS = MappingProxyType({"ll": (6.6e-6, 2.7e-6), "simple": (8.4e-6, 14.0e-6)})
#: Custom accelerator links with collectives in hardware (DMA engines, no kernel launch per
#: step) [E: TPU ICI: "sub-microsecond latency between adjacent chips"; 2 us start-up].
_DMA_PROTOCOLS = MappingProxyType({"simple": (2.0e-6, 1.0e-6)})

#: NVLink energy [E: ~1.3 pJ/bit for NVIDIA's ground-referenced short-reach signalling
#: (Poulton et al., JSSC 2019, 1.17 pJ/bit) plus the package trace]. 112G-class long-reach
#: SerDes ~5 pJ/bit [E]. PCIe 5.0 ~5 pJ/bit [E]. NVLink PHY areas [R LLMCompass cost model:
#: NVLink 3 1.888, NVLink 4 0.965 mm^2 per link]; a PCIe x16 link is the host interface
#: (accelerators.physical.HOST_INTERFACES). Edge per link [E: a x4 112G SerDes macro ~1 mm].
LINK_STANDARDS: Mapping[str, LinkStandard] = MappingProxyType({s.name: s for s in (
    # NVLink 3 (A100): 12 links, 600 GB/s both directions [D NVIDIA A100 whitepaper]; NCCL
    # sustains 20.0 GB/s of 25 per link [R NVIDIA/nccl src/graph/topo.h SM80_NVLINK_BW].
    LinkStandard("nvlink3", 25e9, 20.0 / 25.0, 0.5e-6, 1.3, 1.888, 1.0, _NVLINK_PROTOCOLS,
                 price_usd=0.0, description="NVLink 3 (A100): 25 GB/s per direction per link"),
    # NVLink 4 (H100/H200): 18 links, 900 GB/s both directions [D NVIDIA H100 whitepaper];
    # 20.6 GB/s sustained per link [R topo.h SM90_NVLINK_BW].
    LinkStandard("nvlink4", 25e9, 20.6 / 25.0, 0.5e-6, 1.3, 0.965, 1.0, _NVLINK_PROTOCOLS,
                 description="NVLink 4 (H100/H200): 25 GB/s per direction per link"),
    # NVLink 5 (B200): 18 links, 1.8 TB/s both directions [D]; 40.1 GB/s sustained per link
    # [R topo.h SM100_NVLINK_BW]; PHY as NVLink 4 at twice the rate [E].
    LinkStandard("nvlink5", 50e9, 40.1 / 50.0, 0.5e-6, 1.3, 0.965, 1.0, _NVLINK_PROTOCOLS,
                 description="NVLink 5 (B200): 50 GB/s per direction per link"),
    # PCIe x16: 16 GT/s (Gen4) / 32 GT/s (Gen5) x 16 lanes x 128/130 [D PCI-SIG]; NCCL
    # sustains 12 of Gen3's 15.75 GB/s [R topo.h PCI_BW], the same share taken for Gen4/5.
    LinkStandard("pcie4x16", 16e9 * 16 / 8 * 128 / 130, 12.0 / 15.75, 1.0e-6, 5.0, 0.0, 0.0,
                 _PCIE_PROTOCOLS, on_host_interface=True,
                 description="PCIe 4.0 x16 through a PCIe switch: 31.5 GB/s per direction"),
    LinkStandard("pcie5x16", 32e9 * 16 / 8 * 128 / 130, 12.0 / 15.75, 1.0e-6, 5.0, 0.0, 0.0,
                 _PCIE_PROTOCOLS, on_host_interface=True,
                 description="PCIe 5.0 x16 through a PCIe switch: 63 GB/s per direction"),
    # TPU v4 ICI: 6 links per chip, 2,400 Gb/s per chip [D Google Cloud TPU v4 system
    # architecture]; taken as 50 GB/s per direction per link (400 Gb/s each way) [E], four
    # 112G-class SerDes lanes per link (~0.4 mm^2 each at 7 nm) [E].
    LinkStandard("ici", 50e9, 0.9, 0.3e-6, 5.0, 1.6, 1.0, _DMA_PROTOCOLS, price_usd=20.0,
                 description="TPU-v4-style ICI: 50 GB/s per direction per link (4 SerDes lanes)"),
    # A custom 112G SerDes link for an NPU (4 lanes x 112 Gb/s PAM4, ~100 Gb/s payload each)
    # [E: OIF CEI-112G]; collectives in DMA hardware.
    LinkStandard("serdes112x4", 50e9, 0.9, 0.3e-6, 5.0, 1.6, 1.0, _DMA_PROTOCOLS,
                 price_usd=20.0,
                 description="custom 4 x 112G SerDes link: 50 GB/s per direction"),
    # InfiniBand NDR 400 Gb/s per port [D NVIDIA ConnectX-7]; NCCL reaches 46-48 GB/s per
    # NIC [R NVIDIA/nccl-tests issue 290, maintainer's comment] -> 0.94; energy with optics
    # [E ~15 pJ/bit]; a NIC's own PHY is off the device (PCIe to the NIC).
    LinkStandard("ib_ndr", 50e9, 0.94, 2.0e-6, 15.0, 0.0, 0.0, _NET_PROTOCOLS,
                 on_host_interface=True, price_usd=1000.0,
                 description="InfiniBand NDR 400 Gb/s NIC port: 50 GB/s per direction"),
    # InfiniBand HDR 200 Gb/s per port [D NVIDIA ConnectX-6]: the DGX A100 SuperPOD's eight
    # compute NICs per node (Selene, where Megatron-LM's SC'21 runs were measured); NCCL's
    # share taken as NDR's [E].
    LinkStandard("ib_hdr", 25e9, 0.94, 2.0e-6, 15.0, 0.0, 0.0, _NET_PROTOCOLS,
                 on_host_interface=True, price_usd=600.0,
                 description="InfiniBand HDR 200 Gb/s NIC port: 25 GB/s per direction"),
)})

LINK_NAMES = tuple(LINK_STANDARDS)


def get_link(name: str, field: str = "link") -> LinkStandard:
    """The link standard called ``name``; :class:`BadInput` naming ``field`` otherwise."""
    try:
        return LINK_STANDARDS[name]
    except (KeyError, TypeError):
        raise BadInput(field, name, "expected one of " + ", ".join(LINK_NAMES)) from None


@dataclass(frozen=True)
class SwitchChip:
    """A switch: ``ports`` links of ``link``, a die of ``die_mm2`` at ``node_nm``, ``power_w``
    at full load, ``reduces``: it sums data in the network (NVLink SHARP)."""

    name: str
    link: str
    ports: int
    die_mm2: float
    node_nm: int
    power_w: float
    reduces: bool = False
    description: str = ""
    #: Latency of an in-switch all-reduce, s [R NVIDIA/nccl src/graph/tuning.cc: hwLat NVLS
    #: Simple 23 us, no start-up added].
    reduce_latency_s: float = 23e-6

    @property
    def idle_w(self) -> float:
        """Power with no traffic [E: a third of the full-load power: SerDes stay trained]."""
        return self.power_w / 3.0

    def energy_j_per_byte(self) -> float:
        """Dynamic energy of one byte through the switch: the power above idle over every
        port busy both ways, J/B [E]."""
        full = self.ports * get_link(self.link).bandwidth_Bps * 2
        return (self.power_w - self.idle_w) / full if full > 0 else 0.0


#: Switch chips. NVSwitch gen 3: 64 NVLink 4 ports, 25.1 B transistors, TSMC 4N [D NVIDIA
#: Hopper / DGX H100 announcement, Hot Chips 34]; die from the H100's density (80 B on 814
#: mm^2) [E 256 mm^2]; power [E: 64 ports x 400 Gb/s x ~5 pJ/bit of SerDes and crossbar = 128
#: W]; NVLink SHARP reductions [D]. NVSwitch gen 2 (A100): 36 NVLink 3 ports [E], 7 nm [E],
#: die and power scaled by ports [E]. PCIe 4.0 switch: Broadcom PEX88096-class, 96 lanes = six
#: x16 ports, ~16 nm, ~40 W [E]; PCIe 5.0 PEX89144-class, nine x16 ports, 7 nm, ~60 W [E].
#: InfiniBand NDR switch ASIC: Quantum-2, 64 x 400 Gb/s [D], die and power [E: ~500 W
#: without optics].
SWITCH_CHIPS: Mapping[str, SwitchChip] = MappingProxyType({s.name: s for s in (
    SwitchChip("nvswitch2", "nvlink3", 36, 144.0, 7, 72.0, False, "NVSwitch gen 2 (DGX A100)"),
    SwitchChip("nvswitch3", "nvlink4", 64, 256.0, 4, 128.0, True, "NVSwitch gen 3 (DGX H100)"),
    SwitchChip("nvswitch4", "nvlink5", 72, 400.0, 4, 250.0, True, "NVSwitch gen 4 (B200) [E]"),
    SwitchChip("pcie4_switch", "pcie4x16", 6, 200.0, 16, 40.0, False, "PCIe 4.0 switch, 96 lanes"),
    SwitchChip("pcie5_switch", "pcie5x16", 9, 250.0, 7, 60.0, False, "PCIe 5.0 switch, 144 lanes"),
    SwitchChip("ib_ndr_switch", "ib_ndr", 64, 800.0, 7, 500.0, False, "InfiniBand NDR switch"),
)})

SWITCH_NAMES = tuple(SWITCH_CHIPS)


def get_switch(name: str, field: str = "switch") -> SwitchChip:
    try:
        return SWITCH_CHIPS[name]
    except (KeyError, TypeError):
        raise BadInput(field, name, "expected one of " + ", ".join(SWITCH_NAMES)) from None


@dataclass(frozen=True)
class NIC:
    """A network adapter for the scale-out network: its link, power and price."""

    name: str
    link: str
    power_w: float
    price_usd: float


#: NICs [D NVIDIA ConnectX-7 400G: ~25 W typical; E price US$ 1,500 at volume; ConnectX-6
#: HDR 200G: ~20 W [D], US$ 1,000 [E]].
NICS: Mapping[str, NIC] = MappingProxyType({
    "cx7": NIC("cx7", "ib_ndr", 25.0, 1500.0),
    "cx6": NIC("cx6", "ib_hdr", 20.0, 1000.0),
})
