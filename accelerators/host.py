"""The host side of a training node as data: CPU memory, the PCIe link to each device and
NVMe drives, with their bandwidth, capacity, price and power — what ZeRO-Offload and
ZeRO-Infinity move optimizer states and parameters to (Ren et al. 2021; Rajbhandari et al.
2021).

A :class:`Host` serves ``devices_per_node`` devices. Offloaded bytes cross each device's PCIe
link (``pcie_Bps`` per direction, achievable); an optimizer step on the host streams its
states through the CPU's memory at ``dram_Bps`` x ``cpu_adam_efficiency`` (DeepSpeed's
CPU-Adam is memory-bound); NVMe reads and writes at the drives' rates (summed over the
drives of a node, shared by its devices). Every part costs money and power: DRAM per GB, a
drive each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from dse.errors import BadInput


@dataclass(frozen=True)
class Host:
    """One node's host side (see the module docstring); bytes, B/s, US$, W."""

    name: str
    devices_per_node: int = 8
    dram_bytes: float = 2e12
    dram_Bps: float = 614e9
    cpu_adam_efficiency: float = 0.5
    pcie_Bps: float = 50e9
    nvme_drives: int = 0
    nvme_bytes: float = 3.84e12
    nvme_read_Bps: float = 7.0e9
    nvme_write_Bps: float = 3.8e9
    dram_usd_per_gb: float = 4.0
    dram_w_per_gb: float = 0.15
    nvme_usd: float = 500.0
    nvme_w: float = 20.0

    def check(self) -> None:
        for k, v in asdict(self).items():
            if k == "name":
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or v != v:
                raise BadInput(f"host.{k}", v, "expected a non-negative number")
        if self.devices_per_node < 1:
            raise BadInput("host.devices_per_node", self.devices_per_node, "expected >= 1")

    def cost_usd(self) -> float:
        """Price of the node's DRAM and drives."""
        return self.dram_bytes / 1e9 * self.dram_usd_per_gb + self.nvme_drives * self.nvme_usd

    def power_w(self) -> float:
        """Power of the node's DRAM and drives (active)."""
        return self.dram_bytes / 1e9 * self.dram_w_per_gb + self.nvme_drives * self.nvme_w

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Hosts [D unless tagged]. ``ddr5-pcie5``: a dual-socket server of 8 DDR5-4800 channels per
#: socket (2 x 307 GB/s [D JEDEC DDR5-4800: 38.4 GB/s per channel]), 2 TB, PCIe 5.0 x16 per
#: GPU (64 GB/s per direction raw; 50 GB/s achievable [E ~80 % of raw]), as an HGX H100/H200
#: node. ``ddr4-pcie4``: a DGX A100-class node, 2 x 8 DDR4-3200 channels (2 x 205 GB/s),
#: 1 TB, PCIe 4.0 x16 (32 GB/s raw, 25 GB/s achievable [E]). NVMe: a PCIe 4.0 U.2 data-centre
#: drive, 3.84 TB, 7.0 GB/s sequential read, 3.8 GB/s write [D Samsung PM1733 datasheet],
#: ~US$500 [E 2024 street price], 20 W active [D PM1733 max]; DRAM US$4/GB [E 2024 DDR5
#: RDIMM] and 0.15 W/GB [E: ~10 W per 64 GB RDIMM]; CPU-Adam at half the DRAM bandwidth [E:
#: DeepSpeed reports CPU-Adam 5-7x faster than PyTorch's CPU Adam, memory-bound].
HOSTS: dict[str, Host] = {
    "ddr5-pcie5": Host("ddr5-pcie5"),
    "ddr5-pcie5-nvme": Host("ddr5-pcie5-nvme", nvme_drives=8),
    "ddr4-pcie4": Host("ddr4-pcie4", dram_bytes=1e12, dram_Bps=410e9, pcie_Bps=25e9),
    "ddr4-pcie4-nvme": Host("ddr4-pcie4-nvme", dram_bytes=1e12, dram_Bps=410e9,
                            pcie_Bps=25e9, nvme_drives=8),
}


def host_from(value: str | Host | dict | None, default: str = "ddr5-pcie5") -> Host:
    """A :class:`Host` from a preset name, a dict (``{"preset": ..., "nvme_drives": 4}``) or
    itself."""
    if value is None:
        value = default
    if isinstance(value, Host):
        value.check()
        return value
    if isinstance(value, str):
        if value not in HOSTS:
            raise BadInput("host", value, "expected one of " + ", ".join(HOSTS))
        return HOSTS[value]
    if isinstance(value, dict):
        base = HOSTS.get(str(value.get("preset", default)))
        if base is None:
            raise BadInput("host.preset", value.get("preset"), "expected one of "
                           + ", ".join(HOSTS))
        fields = set(Host.__dataclass_fields__) - {"name"}
        extra = [k for k in value if k not in fields and k != "preset"]
        if extra:
            raise BadInput(f"host.{extra[0]}", value[extra[0]], "expected one of "
                           + ", ".join(sorted(fields | {"preset"})))
        h = replace(base, **{k: v for k, v in value.items() if k != "preset"})
        h.check()
        return h
    raise BadInput("host", value, "expected a preset name or a mapping")
