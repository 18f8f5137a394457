"""A system: N devices (one design repeated, or a list of designs) and their interconnect.

Like a template, a system is data — :data:`SYSTEM_PARAMS` with units and ranges, validated
values, :data:`SYSTEM_PRESETS` with sources — and answers the same four questions for many
devices: what its devices cost per op (each device's own template), what resources it offers
the simulator (every device's units and memory channels, and every directed link of its
:class:`~accelerators.topology.Topology`), how big it is and what it burns idle; plus what it
costs and draws (:meth:`System.physical`: devices, the link PHYs added to their dies, switch
chips, NICs and cables).

Link PHYs: a device template that declares ``peer_links`` (the gpu) already lays them out;
the system then only checks the topology needs no more than the device has. Other templates
get the PHYs added to their floorplan (:class:`accelerators.physical.Floorplan`
``link_phy_mm2`` / ``link_edge_mm`` / ``link_w``), so a die pays area, die edge, power and
cost for them. A link that is the host interface (PCIe) needs only that the device has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Mapping, Sequence

from accelerators.base import HardwareConfig, Param, Template
from accelerators.collectives import CollectiveCost, collective_cost
from accelerators.interconnect import (LINK_NAMES, NICS, SWITCH_NAMES, get_link, get_switch)
from accelerators.physical import Floorplan, Physical, assess
from accelerators.topology import TOPOLOGY_KINDS, Topology, balanced_shape
from dse.errors import BadInput

SYSTEM_PARAMS = (
    Param("devices", int, "devices", 8, "devices in the system", 1, 4096, log=True),
    Param("topology", str, "", "switch", "how the devices are wired: switch (NVSwitch-style), "
          "pcie_tree, ring, mesh, torus, two_level (scale-up nodes + scale-out network)",
          choices=TOPOLOGY_KINDS),
    Param("link", str, "", "nvlink4", "scale-up link standard (accelerators.interconnect)",
          choices=LINK_NAMES),
    Param("links_per_device", int, "links", 18, "scale-up links each device drives (split "
          "over its neighbours on a ring, mesh or torus)", 1, 128),
    Param("link_bandwidth_Bps", float, "B/s", 0.0, "bandwidth of one link per direction; 0: "
          "the standard's", 0.0, 1e12),
    Param("dims", int, "", 3, "mesh / torus dimensions (the devices as sides as equal as "
          "possible) when shape is not given", 1, 3),
    Param("shape", str, "", "", "mesh / torus sides, e.g. 4x4x4 (overrides dims)"),
    Param("group_size", int, "devices", 8, "devices per scale-up node (two_level) or per PCIe "
          "switch (pcie_tree)", 1, 4096, log=True),
    Param("switch", str, "", "nvswitch3", "switch chip of switch / pcie_tree / two_level "
          "topologies", choices=SWITCH_NAMES),
    Param("switch_planes", int, "", 4, "switch chips every device's links spread over (DGX "
          "H100: 4); more are added when their ports run out", 1, 64),
    Param("nic", str, "", "cx7", "scale-out NIC of two_level topologies", choices=tuple(NICS)),
    Param("nics_per_device", int, "", 1, "scale-out NICs per device (two_level)", 1, 8),
    Param("algorithms", str, "", "nccl", "collective algorithms: nccl (ring, tree, in-switch "
          "reduction) or auto (also one-shot / two-shot direct and torus schedules)",
          choices=("nccl", "auto")),
    Param("cable_usd_per_link", float, "US$", 0.0, "cables / retimers per scale-up link; 0: "
          "the link standard's estimate", 0.0, 1e5),
)

#: Presets [D unless tagged]. Each names its device (``template:preset``) and the system
#: parameters. DGX A100: 8 A100 SXM, 12 NVLink 3 each (600 GB/s both ways) into six NVSwitch
#: gen 2 [D NVIDIA DGX A100 datasheet / A100 whitepaper]. DGX H100 and HGX H200: 8 GPUs, 18
#: NVLink 4 each (900 GB/s) into four NVSwitch gen 3 [D NVIDIA DGX H100 datasheet, HGX H200
#: product brief]. TPU-v4-style slice: 4x4x4 chips on a 3-D torus of ICI links, 6 per chip
#: [P Jouppi et al., ISCA 2023]; each chip an npu of two TensorCores (8 MXUs of 128x128 bf16,
#: 1050 MHz, 32 GB HBM2 at 1.2 TB/s) [P; D Cloud TPU v4 docs]. PCIe box: 4 A100s, two per
#: PCIe 4.0 switch under the host's root complex [E: a common 4-GPU server layout]. NPU ring:
#: 8 datacenter NPUs on a bidirectional ring of 4 x 112G SerDes links per neighbour [E].
SYSTEM_PRESETS: dict[str, dict[str, Any]] = {
    "dgx-a100": dict(device="gpu:a100", devices=8, topology="switch", link="nvlink3",
                     links_per_device=12, switch="nvswitch2", switch_planes=6),
    "dgx-h100": dict(device="gpu:h100", devices=8, topology="switch", link="nvlink4",
                     links_per_device=18, switch="nvswitch3", switch_planes=4),
    "hgx-h200": dict(device="gpu:h200", devices=8, topology="switch", link="nvlink4",
                     links_per_device=18, switch="nvswitch3", switch_planes=4),
    "tpu-v4-slice": dict(device="npu:datacenter-bf16",
                         device_hw={"arrays": 8, "dram": "hbm2", "dram_devices": 4,
                                    "dram_device_gb": 8, "dram_bandwidth_Bps": 1.2e12},
                         devices=64, topology="torus", link="ici", links_per_device=6,
                         dims=3, algorithms="auto"),
    "pcie-4x": dict(device="gpu:a100", devices=4, topology="pcie_tree", link="pcie4x16",
                    links_per_device=1, group_size=2, switch="pcie4_switch", switch_planes=1),
    "npu-ring": dict(device="npu:datacenter-bf16",
                     device_hw={"dram": "hbm2e", "dram_devices": 2, "dram_device_gb": 16,
                                "dram_bandwidth_Bps": 9.0e11},
                     devices=8, topology="ring", link="serdes112x4", links_per_device=8,
                     algorithms="auto"),
}
DESCRIPTIONS = {
    "dgx-a100": "8x A100 SXM, NVLink 3 through 6 NVSwitch gen 2 (300 GB/s per direction per GPU)",
    "dgx-h100": "8x H100 SXM, NVLink 4 through 4 NVSwitch gen 3 (450 GB/s per direction per GPU)",
    "hgx-h200": "8x H200 SXM, NVLink 4 through 4 NVSwitch gen 3 (450 GB/s per direction per GPU)",
    "tpu-v4-slice": "64 TPU-v4-style NPUs on a 4x4x4 3-D torus of ICI links (6 per chip)",
    "pcie-4x": "4x A100 on PCIe 4.0 x16, two per PCIe switch under one root complex",
    "npu-ring": "8 datacenter NPUs on a bidirectional ring, 4 x 112G SerDes links per neighbour",
}


@dataclass(frozen=True)
class SystemPhysical:
    """What a system costs: ``area_breakdown_mm2`` (``devices`` with their link PHYs,
    ``switches``), ``cost_breakdown_usd`` (``devices``, ``switches``, ``nics``, ``cables``),
    ``tdp_w`` and ``static_w`` of everything, ``switch_chips`` and ``nics`` counted, and
    ``problem``: why it cannot be built, or None."""

    area_breakdown_mm2: dict[str, float]
    cost_breakdown_usd: dict[str, float]
    tdp_w: float
    static_w: float
    switch_chips: int
    nics: int
    problem: str | None

    @property
    def area_mm2(self) -> float:
        return sum(self.area_breakdown_mm2.values())

    @property
    def cost_usd(self) -> float:
        return sum(self.cost_breakdown_usd.values())

    def to_dict(self) -> dict:
        return {"area_breakdown_mm2": dict(self.area_breakdown_mm2), "area_mm2": self.area_mm2,
                "cost_breakdown_usd": dict(self.cost_breakdown_usd), "cost_usd": self.cost_usd,
                "tdp_w": self.tdp_w, "static_w": self.static_w,
                "switch_chips": self.switch_chips, "nics": self.nics}


def system_names() -> list[str]:
    return sorted(SYSTEM_PRESETS)


class System:
    """``devices`` copies of ``device`` (or the list of designs ``device``) joined by the
    topology the parameters describe. ``preset`` names a :data:`SYSTEM_PRESETS` entry whose
    device is used when ``device`` is None."""

    PARAMS = SYSTEM_PARAMS

    def __init__(self, device: Template | Sequence[Template] | None = None,
                 preset: str | None = None, **values: Any):
        params = {p.name: p for p in SYSTEM_PARAMS}
        merged: dict[str, Any] = {p.name: p.default for p in SYSTEM_PARAMS}
        if preset is not None:
            if preset not in SYSTEM_PRESETS:
                raise BadInput("system", preset, "expected one of " + ", ".join(system_names()))
            merged.update({k: v for k, v in SYSTEM_PRESETS[preset].items()
                           if k not in ("device", "device_hw")})
        for key, value in values.items():
            if key not in params:
                raise BadInput(f"sys.{key}", value, "system parameters are "
                               + ", ".join(params))
            merged[key] = value
        self.preset = preset
        self.hw = HardwareConfig({k: params[k].coerce(v, f"sys.{k}") for k, v in merged.items()})
        n = self.hw.devices
        if device is None:
            if preset is None:
                raise BadInput("system", None, "expected a preset or a device design")
            from accelerators.registry import make_accelerator
            spec = SYSTEM_PRESETS[preset]
            device = make_accelerator(spec["device"], spec.get("device_hw"))
        if isinstance(device, Template):
            self.designs: list[Template] = [device] * n
        else:
            self.designs = list(device)
            if len(self.designs) != n:
                raise BadInput("sys.devices", n, f"expected as many devices as designs given "
                               f"({len(self.designs)})")
        self.topology = self._topology()

    # ------------------------------------------------------------------ the interconnect
    def _topology(self) -> Topology:
        hw = self.hw
        shape: tuple[int, ...] = ()
        if hw.topology in ("mesh", "torus"):
            if hw.shape:
                try:
                    shape = tuple(int(s) for s in hw.shape.lower().split("x"))
                except ValueError:
                    raise BadInput("sys.shape", hw.shape, "expected sides like 4x4x4") from None
                if not shape or min(shape) < 1 or math.prod(shape) != hw.devices:
                    raise BadInput("sys.shape", hw.shape,
                                   f"expected sides whose product is devices={hw.devices}")
            else:
                shape = balanced_shape(hw.devices, hw.dims)
        group = 0
        if hw.topology in ("pcie_tree", "two_level"):
            group = min(hw.group_size, hw.devices)
            if hw.devices % group:
                raise BadInput("sys.group_size", hw.group_size,
                               f"expected a divisor of devices={hw.devices}")
        switch = get_switch(hw.switch, "sys.switch") if hw.topology in (
            "switch", "pcie_tree", "two_level") else None
        link = get_link(hw.link, "sys.link")
        if switch is not None and hw.topology != "two_level" and switch.link != link.name:
            fits = [s for s in SWITCH_NAMES if get_switch(s).link == link.name]
            raise BadInput("sys.switch", hw.switch, f"expected a switch of {link.name} ports ("
                           + (", ".join(fits) if fits else f"no switch chip has {link.name} "
                              "ports: use a ring, mesh or torus") + ")")
        nic = get_link(NICS[hw.nic].link) if hw.topology == "two_level" else None
        return Topology(hw.topology, hw.devices, link, hw.links_per_device, shape, group,
                        switch, nic, hw.nics_per_device, hw.link_bandwidth_Bps)

    @property
    def devices(self) -> int:
        return self.hw.devices

    def device(self, i: int) -> Template:
        return self.designs[i]

    def collective(self, kind: str, nbytes: float, group: Sequence[int] | None = None,
                   algorithm: str | None = None, call: str = "device") -> CollectiveCost:
        """The cost of one collective on this system's topology (algorithm: the system's
        ``algorithms`` parameter unless given; ``call``: how it is issued,
        :data:`accelerators.collective_calibration.MODES`)."""
        return collective_cost(self.topology, kind, nbytes, group,
                               algorithm or self.hw.algorithms, call=call)

    # ------------------------------------------------------------------ silicon, cost, power
    def _device_physical(self, design: Template) -> tuple[Physical | None, str | None]:
        """The device's physical assessment with the link PHYs the topology needs, and a
        problem when the device cannot drive the links."""
        hw, link = self.hw, self.topology.link
        if self.devices == 1:
            return design.physical(), None
        params = design.params()
        if link.on_host_interface:
            host = design.hw.get("host_interface")
            if host == "none":
                return design.physical(), (f"{design.name} has no host interface for "
                                           f"{link.name} links")
            return design.physical(), None
        if "peer_links" in params:   # the template lays out its own peer-link PHYs
            if not link.name.startswith("nvlink"):
                return design.physical(), (f"{design.name} drives NVLink peer links, not "
                                           f"{link.name}")
            have = int(design.hw["peer_links"])
            if hw.links_per_device > have:
                return design.physical(), (f"the {hw.topology} needs {hw.links_per_device} "
                                           f"{link.name} links per device but {design.name}"
                                           f"{':' + design.preset if design.preset else ''} "
                                           f"has {have}")
            return design.physical(), None
        fp = design.floorplan()
        if fp is None:
            return None, None
        n = hw.links_per_device
        rate = self.topology.per_link_Bps
        scale = rate / link.bandwidth_Bps      # a faster link needs more SerDes
        fp = replace(fp, link_phy_mm2=n * link.phy_mm2 * scale,
                     link_edge_mm=n * link.edge_mm * scale,
                     link_w=n * rate * 2 * link.energy_j_per_byte)
        return assess(fp), None

    @cached_property
    def _physical(self) -> SystemPhysical:
        hw, topo = self.hw, self.topology
        problems: list[str] = []
        area = {"devices": 0.0, "switches": 0.0}
        cost = {"devices": 0.0, "switches": 0.0, "nics": 0.0, "cables": 0.0}
        tdp = static = 0.0
        assessed: dict[int, tuple] = {}
        for design in self.designs:
            key = id(design)
            if key not in assessed:
                assessed[key] = self._device_physical(design)
            phys, problem = assessed[key]
            if problem and problem not in problems:
                problems.append(problem)
            if phys is None:
                area["devices"] += design.area_mm2()
                static += design.static_power_w()
                tdp += design.static_power_w()
                cost["devices"] = math.nan
                continue
            if phys.problem and phys.problem not in problems:
                problems.append(phys.problem)
            area["devices"] += phys.area_mm2
            cost["devices"] += phys.cost_usd
            tdp += phys.tdp_w
            static += phys.static_w
        chips, switch = 0, topo.switch
        if switch is not None and self.devices > 1:
            ports = switch.ports
            if topo.kind == "switch":
                chips = _switch_planes(self.devices, hw.links_per_device, hw.switch_planes,
                                       ports)
                if chips is None:
                    problems.append(f"{self.devices} devices of {hw.links_per_device} links "
                                    f"exceed a single stage of {switch.name} ({ports} ports "
                                    "each): use a two_level topology")
                    chips = self.devices * hw.links_per_device // ports + 1
            elif topo.kind == "pcie_tree":
                chips = self.devices // topo.group_size
                if topo.group_size + (1 if chips > 1 else 0) > ports:
                    problems.append(f"a {switch.name} has {ports} x16 ports but a leaf needs "
                                    f"{topo.group_size + (1 if chips > 1 else 0)}")
            elif topo.kind == "two_level" and topo.group_size > 1:
                per_node = _switch_planes(topo.group_size, hw.links_per_device,
                                          hw.switch_planes, ports)
                if per_node is None:
                    problems.append(f"a node of {topo.group_size} devices exceeds a single "
                                    f"stage of {switch.name} ({ports} ports each)")
                    per_node = topo.group_size * hw.links_per_device // ports + 1
                chips = self.devices // topo.group_size * per_node
            if chips:
                sw = _switch_physical(switch)
                area["switches"] += chips * switch.die_mm2
                cost["switches"] += chips * sw.cost_usd
                tdp += chips * switch.power_w
                static += chips * switch.idle_w
        nics = 0
        if topo.kind == "two_level" and self.devices > topo.group_size:
            nic = NICS[hw.nic]
            nics = self.devices * hw.nics_per_device
            fabric = get_switch("ib_ndr_switch")
            leaves = math.ceil(nics / (fabric.ports // 2))          # half the ports down
            fabric_chips = leaves + math.ceil(leaves / 2) if leaves > 1 else 1   # + spines [E]
            cost["nics"] = nics * nic.price_usd
            tdp += nics * nic.power_w + fabric_chips * fabric.power_w
            static += nics * nic.power_w / 2 + fabric_chips * fabric.idle_w
            sw = _switch_physical(fabric)
            area["switches"] += fabric_chips * fabric.die_mm2
            cost["switches"] += fabric_chips * sw.cost_usd
            cost["cables"] += nics * get_link(nic.link).price_usd
        if self.devices > 1:
            per_link = hw.cable_usd_per_link or topo.link.price_usd
            cost["cables"] += self.devices * hw.links_per_device * per_link
        return SystemPhysical(area, cost, tdp, static, chips, nics,
                              "; ".join(problems) or None)

    def physical(self) -> SystemPhysical:
        return self._physical

    def area_mm2(self) -> float:
        return self._physical.area_mm2

    def static_power_w(self) -> float:
        return self._physical.static_w

    def check(self) -> str | None:
        """Why the system cannot be built, or None (each device's workload is checked by the
        simulator, :func:`simulators.system_engine.simulate_system`)."""
        return self._physical.problem

    def describe(self) -> dict[str, Any]:
        designs = {}
        for i, d in enumerate(self.designs):
            designs.setdefault(id(d), (i, d))
        devices = [d.describe() for _, d in designs.values()]
        return {"system": self.preset, "sys": dict(self.hw), "topology": self.topology.describe(),
                "device": devices[0] if len(devices) == 1 else devices}

    @classmethod
    def params(cls) -> dict[str, Param]:
        return {p.name: p for p in SYSTEM_PARAMS}


def _switch_planes(devices: int, links: int, planes: int, ports: int) -> int | None:
    """Switch chips of a single-stage crossbar: each device spreads its ``links`` over the
    planes (at least ``planes``, at most one link per plane), and every plane needs a port
    per link it receives; None when even one link per plane does not fit."""
    for chips in range(min(planes, links), links + 1):
        if devices * math.ceil(links / chips) <= ports:
            return chips
    return None


def _switch_physical(switch) -> Physical:
    """A switch chip through the same die, yield, package and cost model as every design."""
    return assess(Floorplan(node_nm=switch.node_nm, compute_mm2=switch.die_mm2, sram_mm2=0.0,
                            peak_dynamic_w=switch.power_w - switch.idle_w,
                            leakage_w=switch.idle_w, memory=None, host_interface="none",
                            control_overhead=0.0))


def make_system(spec: str | None = None, device: Template | Sequence[Template] | None = None,
                **values: Any) -> System:
    """A system from a preset name (``hgx-h200``) and/or a device design and parameter
    overrides (``devices=2``)."""
    return System(device, spec or None, **values)
