"""How devices are wired: directed links between devices and switches, and routes over them.

A :class:`Topology` is data: its ``kind``, the devices, and every directed link with its
bandwidth, latency and energy (:class:`Link`). Kinds:

* ``switch``: every device drives ``links_per_device`` links into a non-blocking switch
  (NVSwitch-style; the switch planes are one logical crossbar): one port ``d{i}->sw`` and
  one ``sw->d{i}`` per device, each with all its links' bandwidth.
* ``pcie_tree``: devices under leaf PCIe switches of ``group_size`` devices each; leaves under
  one root (the host's root complex); a route between leaves crosses the leaves' x16 uplinks.
* ``ring``: a bidirectional ring; a device's links split between its two neighbours.
* ``mesh`` / ``torus``: an N-dimensional grid of ``shape`` (TPU ICI style); a device's links
  split over its 2N neighbour directions; ``torus`` wraps around. Dimension-order routing.
* ``two_level``: nodes of ``group_size`` devices on a switch (scale-up), nodes joined by a
  non-blocking scale-out network through ``nics_per_device`` NICs per device
  (rail-optimised fat tree).

Nothing here knows about collectives or workloads: :mod:`accelerators.collectives` routes
its flows with :meth:`Topology.route`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from accelerators.interconnect import LinkStandard, SwitchChip
from dse.errors import BadInput

TOPOLOGY_KINDS = ("switch", "pcie_tree", "ring", "mesh", "torus", "two_level")


@dataclass(frozen=True)
class Link:
    """One directed link (or a bundle of parallel links between the same two ends).

    ``bandwidth_Bps`` raw, ``effective_Bps`` what a collective library sustains,
    ``latency_s`` per hop, ``energy_j_per_byte`` (PHYs, channel and any switch it enters),
    ``standard``: its :class:`LinkStandard`; ``scale_out``: a link of the scale-out network.
    """

    name: str
    bandwidth_Bps: float
    effective_Bps: float
    latency_s: float
    energy_j_per_byte: float
    standard: LinkStandard
    scale_out: bool = False


def balanced_shape(devices: int, dims: int) -> tuple[int, ...]:
    """``devices`` as a grid of ``dims`` sides as equal as possible (largest first)."""
    if dims < 1:
        raise BadInput("dims", dims, "expected 1, 2 or 3")
    best: tuple[int, ...] | None = None

    def search(left: int, k: int, prefix: tuple[int, ...]) -> None:
        nonlocal best
        if k == 1:
            cand = tuple(sorted(prefix + (left,), reverse=True))
            if best is None or (max(cand) - min(cand), cand) < (max(best) - min(best), best):
                best = cand
            return
        for f in range(1, left + 1):
            if left % f == 0:
                search(left // f, k - 1, prefix + (f,))

    search(devices, dims, ())
    return best  # type: ignore[return-value]


@dataclass(frozen=True)
class Topology:
    """Devices and directed links; see the module docstring for the kinds.

    ``link`` is the scale-up link standard (``links_per_device`` of them per device, each at
    ``link_bandwidth_Bps`` when set, else the standard's rate); ``switch`` the switch chip of
    ``switch`` / ``pcie_tree`` / ``two_level`` kinds; ``nic`` the scale-out link of
    ``two_level``.
    """

    kind: str
    devices: int
    link: LinkStandard
    links_per_device: int
    shape: tuple[int, ...] = ()
    group_size: int = 0
    switch: SwitchChip | None = None
    nic: LinkStandard | None = None
    nics_per_device: int = 1
    link_bandwidth_Bps: float = 0.0
    _links: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in TOPOLOGY_KINDS:
            raise BadInput("system.topology", self.kind, "expected one of "
                           + ", ".join(TOPOLOGY_KINDS))
        if self.devices < 1:
            raise BadInput("system.devices", self.devices, "expected at least 1 device")
        if self.kind in ("mesh", "torus") and math.prod(self.shape) != self.devices:
            raise BadInput("system.shape", "x".join(map(str, self.shape)),
                           f"expected a grid of {self.devices} devices")
        if self.kind in ("pcie_tree", "two_level") and (
                self.group_size < 1 or self.devices % self.group_size):
            raise BadInput("system.group_size", self.group_size,
                           f"expected a divisor of the {self.devices} devices")
        self._links.update(self._build_links())

    # ------------------------------------------------------------------------ links
    @property
    def per_link_Bps(self) -> float:
        """Raw bandwidth of one scale-up link per direction, B/s."""
        return self.link_bandwidth_Bps or self.link.bandwidth_Bps

    def _make(self, name: str, links: float, std: LinkStandard, scale_out: bool = False,
              switch_end: bool = False) -> Link:
        rate = (self.per_link_Bps if std is self.link else std.bandwidth_Bps) * links
        energy = std.energy_j_per_byte
        if switch_end and self.switch is not None:
            energy += self.switch.energy_j_per_byte() / 2   # half on the way in, half out
        return Link(name, rate, rate * std.efficiency, std.latency_s, energy, std, scale_out)

    def _build_links(self) -> dict[str, Link]:
        out: dict[str, Link] = {}
        n, lpd = self.devices, self.links_per_device

        def add(a: str, b: str, links: float, std: LinkStandard | None = None,
                scale_out: bool = False, switch_end: bool = False) -> None:
            name = f"{a}->{b}"
            if name in out:   # two neighbour directions reach the same device: bundle them
                prev = out[name]
                extra = self._make(name, links, std or self.link, scale_out, switch_end)
                out[name] = Link(name, prev.bandwidth_Bps + extra.bandwidth_Bps,
                                 prev.effective_Bps + extra.effective_Bps, prev.latency_s,
                                 prev.energy_j_per_byte, prev.standard, scale_out)
            else:
                out[name] = self._make(name, links, std or self.link, scale_out, switch_end)

        if n == 1:
            return out
        if self.kind == "switch":
            for i in range(n):
                add(f"d{i}", "sw", lpd, switch_end=True)
                add("sw", f"d{i}", lpd, switch_end=True)
        elif self.kind == "pcie_tree":
            leaves = n // self.group_size
            for i in range(n):
                add(f"d{i}", f"leaf{i // self.group_size}", lpd, switch_end=True)
                add(f"leaf{i // self.group_size}", f"d{i}", lpd, switch_end=True)
            if leaves > 1:
                for j in range(leaves):
                    add(f"leaf{j}", "root", 1, switch_end=True)
                    add("root", f"leaf{j}", 1, switch_end=True)
        elif self.kind == "ring":
            for i in range(n):
                add(f"d{i}", f"d{(i + 1) % n}", lpd / 2)
                add(f"d{(i + 1) % n}", f"d{i}", lpd / 2)
        elif self.kind in ("mesh", "torus"):
            dims = [s for s in self.shape]
            per_dir = lpd / (2 * sum(1 for s in dims if s > 1))
            for i in range(n):
                c = self.coords(i)
                for k, size in enumerate(dims):
                    if size == 1:
                        continue
                    for step in (1, -1):
                        nxt = c[k] + step
                        if self.kind == "torus":
                            nxt %= size
                        elif not 0 <= nxt < size:
                            continue
                        if size == 2 and self.kind == "torus" and step == -1:
                            continue   # +1 and -1 reach the same neighbour: one bundle
                        links = per_dir * (2 if size == 2 and self.kind == "torus" else 1)
                        j = self.index(c[:k] + (nxt,) + c[k + 1:])
                        add(f"d{i}", f"d{j}", links)
        elif self.kind == "two_level":
            nodes = n // self.group_size
            for i in range(n):
                node = i // self.group_size
                if self.group_size > 1:
                    add(f"d{i}", f"sw{node}", lpd, switch_end=True)
                    add(f"sw{node}", f"d{i}", lpd, switch_end=True)
                if nodes > 1 and self.nic is not None:
                    add(f"d{i}", "net", self.nics_per_device, self.nic, scale_out=True)
                    add("net", f"d{i}", self.nics_per_device, self.nic, scale_out=True)
        return out

    @property
    def links(self) -> dict[str, Link]:
        """Every directed link, by name ``a->b``."""
        return self._links

    # ------------------------------------------------------------------------ grid helpers
    def coords(self, i: int) -> tuple[int, ...]:
        """Grid coordinates of device ``i`` (first dimension fastest)."""
        out = []
        for size in self.shape:
            out.append(i % size)
            i //= size
        return tuple(out)

    def index(self, coords: tuple[int, ...]) -> int:
        i, mul = 0, 1
        for c, size in zip(coords, self.shape):
            i += c * mul
            mul *= size
        return i

    def node_of(self, i: int) -> int:
        """The scale-up node (``two_level``) or leaf switch (``pcie_tree``) of device ``i``."""
        return i // self.group_size if self.group_size else 0

    # ------------------------------------------------------------------------ routing
    def route(self, src: int, dst: int) -> tuple[str, ...]:
        """Names of the directed links a message from device ``src`` to ``dst`` crosses."""
        if src == dst:
            return ()
        return self._routes(src, dst)

    def _routes(self, src: int, dst: int) -> tuple[str, ...]:
        key = (src, dst)
        hit = self._route_cache.get(key)
        if hit is not None:
            return hit
        a, b = f"d{src}", f"d{dst}"
        if self.kind == "switch":
            path = (f"{a}->sw", f"sw->{b}")
        elif self.kind == "pcie_tree":
            la, lb = f"leaf{self.node_of(src)}", f"leaf{self.node_of(dst)}"
            path = ((f"{a}->{la}", f"{la}->{b}") if la == lb else
                    (f"{a}->{la}", f"{la}->root", f"root->{lb}", f"{lb}->{b}"))
        elif self.kind == "two_level":
            na, nb = self.node_of(src), self.node_of(dst)
            path = ((f"{a}->sw{na}", f"sw{na}->{b}") if na == nb else (f"{a}->net", f"net->{b}"))
        elif self.kind == "ring":
            n = self.devices
            fwd = (dst - src) % n
            step = 1 if fwd <= n - fwd else -1
            hops, i = [], src
            while i != dst:
                j = (i + step) % n
                hops.append(f"d{i}->d{j}")
                i = j
            path = tuple(hops)
        else:   # mesh / torus: dimension-order routing, shortest way round a torus ring
            c, target = list(self.coords(src)), self.coords(dst)
            hops = []
            for k, size in enumerate(self.shape):
                while c[k] != target[k]:
                    if self.kind == "torus":
                        fwd = (target[k] - c[k]) % size
                        step = 1 if fwd <= size - fwd else -1
                    else:
                        step = 1 if target[k] > c[k] else -1
                    before = self.index(tuple(c))
                    c[k] = (c[k] + step) % size
                    hops.append(f"d{before}->d{self.index(tuple(c))}")
            path = tuple(hops)
        self._route_cache[key] = path
        return path

    @cached_property
    def _route_cache(self) -> dict[tuple[int, int], tuple[str, ...]]:
        return {}

    def ring_order(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """An order of ``group`` in which neighbours are close: a snake through the grid for
        a mesh or torus holding every device, the group's own order otherwise."""
        if self.kind in ("mesh", "torus") and len(group) == self.devices:
            return tuple(self.index(c) for c in _snake(self.shape))
        return tuple(group)

    def describe(self) -> dict:
        return {"kind": self.kind, "devices": self.devices, "link": self.link.name,
                "links_per_device": self.links_per_device, "shape": list(self.shape),
                "group_size": self.group_size,
                "switch": self.switch.name if self.switch else None,
                "nic": self.nic.name if self.nic else None,
                "per_link_Bps": self.per_link_Bps}


def _snake(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Boustrophedon order of a grid: consecutive cells are neighbours."""
    if len(shape) == 1:
        return [(i,) for i in range(shape[0])]
    inner = _snake(shape[:-1])
    out = []
    for k in range(shape[-1]):
        part = inner if k % 2 == 0 else inner[::-1]
        out.extend(c + (k,) for c in part)
    return out
