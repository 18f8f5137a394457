"""Die, package, cost and power of a design: what every template's silicon and memory cost.

A template describes what it puts on silicon as a :class:`Floorplan` (laid-out compute, SRAM,
their peak dynamic power and leakage, its off-chip :class:`MemorySystem`); :func:`assess` adds
what every chip pays the same way, so no template pays for memory differently:

* **Area** = compute + SRAM + control (:func:`control_mm2`: on-chip network, control,
  clocking, DMA, as ``CONTROL_OVERHEAD`` of the logic, and routing and spacing around the
  SRAM macros as ``SRAM_OVERHEAD`` of the SRAM) + memory PHYs and controllers
  (from the standard, per device) + other I/O (host interface PHY, die-to-die PHYs when split).
* **Chiplets**: the logic is split into the count of equal dies, each within
  ``RETICLE_MM2``, that costs least (dies, test and package: a larger die yields worse, a
  split pays an interposer, bonding and die-to-die PHYs sized for the memory bandwidth
  crossing it), up to ``MAX_CHIPLETS``, or into the count the template pins
  (``Floorplan.dies``; infeasible, naming the counts that would fit, when it does not); beyond
  ``MAX_CHIPLETS``, or when the interposer would exceed ``MAX_INTERPOSER_MM2``, the design is
  infeasible. A wafer-scale design is one wafer's usable rectangle (``WAFER_USABLE_MM2``),
  priced by area over the yield its spare cores give (:func:`wafer_cost_usd`).
* **Shoreline**: the memory devices' die edge (and the host interface's) must fit the share
  ``MEMORY_EDGE_FRACTION`` of the dies' perimeters (square dies): a die whose logic is too
  small for its I/O grows to the size that gives the edge (pad-limited; the added silicon is
  ``pad_limited`` in the area breakdown and is paid for), or splits into chiplets; when even
  ``MAX_CHIPLETS`` reticle-sized dies cannot, the design is infeasible.
* **Cost** (US$ per chip): dies from the wafer price per node, dies per 300-mm wafer and a
  negative-binomial yield; known-good-die test; package (organic substrate, plus a 2.5-D
  interposer priced per mm^2 for HBM or chiplets); memory devices by price per GB (in-DRAM
  PIM logic priced with its DRAM by area).
* **Power**: ``tdp_w`` = peak dynamic power of the dies (what the energy tables count, every
  unit busy) + the logic they do not count (:func:`uncounted_logic_w`, one fitted constant
  for every template) + memory I/O at full bandwidth + static power (leakage + memory
  background); the dies' power over their area must stay under
  ``MAX_POWER_DENSITY_W_PER_MM2``, else infeasible.

Sources and confidence tags as in :mod:`accelerators.technology`; [E] estimates say from what.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from accelerators import technology as tech
from accelerators.memory_standards import MemorySystem

#: Largest die one exposure prints, mm^2 [D: 26 x 33 mm scanner field].
RETICLE_MM2 = 26.0 * 33.0
#: Most chiplets one package joins [E: B200 joins 2 reticle dies, MI300X 8 compute dies].
MAX_CHIPLETS = 8
#: Largest silicon interposer, mm^2 [D: TSMC CoWoS-L at 3.5 reticles in volume (B200, 2025),
#: announced to grow to 5.5].
MAX_INTERPOSER_MM2 = 3.5 * RETICLE_MM2
#: Share of a die's perimeter memory PHYs may take [E: three of four edges, as GA102 and
#: TU104 place their GDDR PHYs; A100 / H100 put six HBM sites on the two long edges (~58 % of
#: the perimeter), leaving a short edge to NVLink / PCIe].
MEMORY_EDGE_FRACTION = 0.75
#: Everything on a die a template does not count (control, on-chip network, clocking, DMA,
#: vector and scalar units a template leaves out, chip-to-chip links, test, white space) as a
#: fraction of its counted *logic* (the npu's systolic PEs and vector lanes, the wafer's FMACs
#: and routers) [fitted with ``SRAM_OVERHEAD`` and ``gpu.GPU_CONTROL_OVERHEAD``: least squares
#: of log(modelled / published die area) over the published dies
#: (``dse.calibrate.physical_fit.fit``; docs/validation.md, physical model, gives each chip's
#: leave-one-out error). Google's matrix units are 8-11 % of the TPUv2, v3 and v4i dies
#: (Jouppi et al., ISCA 2021, Table 7), so what a systolic template leaves out is several times
#: what it counts].
CONTROL_OVERHEAD = 4.776
#: What SRAM costs beyond its blocks (``technology.sram_area_mm2``: bit cells over the array
#: efficiency of published SRAM blocks, their own periphery and banking included): the routing
#: and spacing around the macros and their share of the on-chip network, as a fraction of the
#: SRAM area [fitted with ``CONTROL_OVERHEAD``, no source gives it]. Charged on every die's SRAM
#: (it is no control logic: an SRAM-heavy die such as Groq's TSP or a WSE-2 core does not pay
#: the logic overhead on its SRAM).
SRAM_OVERHEAD = 0.5827
#: Largest average power density a cold plate removes, W/mm^2 [E: shipping parts average
#: 0.3-0.9 (H100 SXM 700 W on 814 mm^2 = 0.86, B200 ~0.6, WSE-2 ~0.3); direct liquid cold
#: plates remove ~1.5 W/mm^2 of uniform load].
MAX_POWER_DENSITY_W_PER_MM2 = 1.5

#: Dynamic power of the logic the templates' energy tables do not count (clock tree,
#: instruction issue and control, pipeline registers, on-chip network, the vector and scalar
#: units a template leaves out), W per mm^2 of laid-out logic per GHz at 45 nm, scaled to a
#: node by ``technology.energy_scale / area_scale`` (switched capacitance per mm^2 times V^2:
#: the same logic at a finer node is smaller and switches less charge). Laid-out logic is a
#: floorplan's counted logic times one plus its control overhead (the area model's), so
#: the term grows with what the area model says is there. One constant for every template
#: (npu, gpu, pim's ASIC, neural_graphics, wafer): the energy method is one
#: [fitted: least squares of log(modelled / published TDP) over the published chips,
#: ``dse.calibrate.physical_fit.fit_power``; docs/validation.md gives each chip's error with
#: it fitted on every chip and with that chip left out. Plausibility [E]: ~1 nF of switched
#: capacitance per mm^2 at 45 nm, 0.9 V and ~5 % activity is ~0.04 W/(mm^2 GHz)]. Refitted
#: (0.0353 -> 0.0212) when the gpu's TDP took its hungriest datapath (issue 27).
UNCOUNTED_LOGIC_W_PER_MM2_GHZ = 0.02124


def uncounted_logic_w(logic_mm2: float, clock_hz: float, node_nm: int) -> float:
    """Power of ``logic_mm2`` of laid-out logic at ``node_nm`` clocked at ``clock_hz`` beyond
    what the energy tables count, W (``UNCOUNTED_LOGIC_W_PER_MM2_GHZ``)."""
    return (UNCOUNTED_LOGIC_W_PER_MM2_GHZ * logic_mm2 * clock_hz / 1e9
            * tech.energy_scale(node_nm) / tech.area_scale(node_nm))


#: Host interfaces: PHY mm^2 (node-independent) and controller million transistors
#: [R LLMCompass cost model: PCIe 4 0.48 mm^2 and 3.96 MTr per lane, PCIe 5 0.64 mm^2 and
#: 5.37 MTr per lane], die edge mm [E: a x16 bump field ~5 mm].
HOST_INTERFACES: dict[str, tuple[float, float, float]] = {
    "none": (0.0, 0.0, 0.0),
    "pcie4x16": (16 * 0.48, 16 * 3.9625, 5.0),
    "pcie5x16": (16 * 0.64, 16 * 5.3721, 5.0),
}

#: Die-to-die link of split designs [D UCIe 1.0, advanced package: 1,317 GB/s per mm of die
#: edge at 32 GT/s, <= 0.5 pJ/bit]; PHY depth 1 mm [E], so mm^2 = edge mm.
D2D_BYTES_PER_S_PER_MM = 1317e9
D2D_PJ_PER_BIT = 0.5

#: Foundry price of a 300-mm wafer by node, US$ [P Khan & Mann, "AI Chips: What They Are and
#: Why They Matter", CSET 2020, Table 9: 90 nm 1,650; 65 nm 1,937; 40 nm 2,274; 28 nm 2,891;
#: 20 nm 3,677; 16/12 nm 3,984; 10 nm 5,992; 7 nm 9,346; 5 nm 16,988]; 45 nm as 40 nm, 32 nm
#: between 40 and 28, 22 nm as 20 nm, 14 nm as 16/12, 4 nm as 5 nm (an N5-family node) [E].
WAFER_PRICE_USD = {65: 1937.0, 45: 2274.0, 32: 2580.0, 28: 2891.0, 22: 3677.0, 16: 3984.0,
                   14: 3984.0, 12: 3984.0, 10: 5992.0, 7: 9346.0, 5: 16988.0, 4: 16988.0}
#: Defect density, defects per cm^2 [E: TSMC reported ~0.09 for N7 and ~0.1 for N5 one year
#: into volume (2020); mature planar nodes lower].
DEFECT_DENSITY_PER_CM2 = {65: 0.05, 45: 0.05, 32: 0.06, 28: 0.06, 22: 0.07, 16: 0.07,
                          14: 0.07, 12: 0.07, 10: 0.08, 7: 0.09, 5: 0.10, 4: 0.10}
#: Negative-binomial clustering parameter alpha [E: 3, the usual value in die-cost models,
#: e.g. Stow et al., "Cost-effective design of scalable high-performance systems using active
#: and passive interposers", ICCAD 2017].
YIELD_CLUSTERING = 3.0
WAFER_DIAMETER_MM = 300.0
#: Edge exclusion of a 300-mm wafer, mm: the rim where devices are not guaranteed [S: SEMI M1
#: specifies 300-mm wafers' flatness over a fixed quality area 2 mm inside the edge; the ITRS
#: front-end roadmap uses the same 2 mm].
WAFER_EDGE_EXCLUSION_MM = 2.0
#: Largest rectangle a wafer-scale design may take, mm^2: the square inscribed in the disc
#: inside the edge exclusion, ``(D - 2 e)^2 / 2`` = 43,808 mm^2 (a 209 mm square). The WSE-2
#: (215 x 215 mm = 46,225 mm^2 [D Cerebras]) is larger: its square's diagonal, 304 mm, runs
#: past the 300-mm disc, so Cerebras clips its corners; the model keeps to the rectangle, a
#: bound 5 % below the WSE-2 (docs/validation.md, physical model).
WAFER_USABLE_MM2 = (WAFER_DIAMETER_MM - 2 * WAFER_EDGE_EXCLUSION_MM) ** 2 / 2
#: Known-good-die test, fraction of the die cost [E].
TEST_COST_FRACTION = 0.05
#: Organic flip-chip substrate, US$ per mm^2 of substrate (3x the silicon it carries) plus
#: assembly per package [E].
SUBSTRATE_USD_PER_MM2 = 0.01
SUBSTRATE_AREA_PER_SILICON = 3.0
ASSEMBLY_USD = 10.0
#: Bonding one logic die to an interposer, its known-good-die sort and the assembly yield it
#: costs, US$ per die [E: chiplet cost models put advanced-package assembly at a few to tens of
#: dollars per die]; so a split into many small dies pays for each.
CHIPLET_BOND_USD = 10.0
#: Interposer area over what sits on it (spacing, seal ring) [E].
INTERPOSER_AREA_FACTOR = 1.1
#: A 2.5-D (CoWoS-class) package, US$ per mm^2 of its silicon interposer: the interposer, its
#: micro-bumps and through-silicon vias, the chip-on-wafer assembly and its yield [S: Silicon
#: Analysts' cost bridge (Feb. 2026, on Epoch AI and Raymond James estimates) puts the H100's
#: CoWoS-S package at ~$750 (the B200's CoWoS-L at ~$1,100; R. Castellano's 2023 estimate
#: $723); over the H100's interposer as this model sizes it, 1.1 x (814 mm^2 of die + five
#: 11 x 11 mm HBM3 stacks) = 1,561 mm^2]. Its source is the H100's package line, so the H100's
#: cost check (docs/validation.md) tests its die, memory and test lines, not this one.
INTERPOSER_USD_PER_MM2 = 750.0 / (INTERPOSER_AREA_FACTOR * (814.0 + 5 * 11.0 * 11.0))


@dataclass(frozen=True)
class Floorplan:
    """What a template puts on silicon, before overhead, I/O, memory PHYs and packaging.

    ``compute_mm2`` and ``sram_mm2`` are laid-out areas at ``node_nm``; ``peak_dynamic_w`` the
    logic and SRAM at full activity; ``leakage_w`` their static power. ``memory`` is the
    off-chip memory (None: the design keeps everything on chip). ``wafer_scale`` designs are
    one whole wafer. ``extra_mm2`` are areas off the logic die (e.g. in-DRAM PIM logic):
    reported, not placed on the die. ``control_overhead`` replaces ``CONTROL_OVERHEAD`` for a
    template whose counted logic is more complete (the gpu's SMs) or already includes its
    control (0: then the SRAM pays no ``SRAM_OVERHEAD`` either; :func:`control_mm2`).
    """

    node_nm: int
    compute_mm2: float
    sram_mm2: float
    peak_dynamic_w: float
    leakage_w: float
    memory: MemorySystem | None = None
    host_interface: str = "pcie4x16"
    wafer_scale: bool = False
    control_overhead: float = CONTROL_OVERHEAD
    extra_mm2: dict[str, float] = field(default_factory=dict)
    #: Clock of the logic, Hz: with ``compute_mm2`` and ``control_overhead`` it sets the
    #: power of what the energy tables do not count (:func:`uncounted_logic_w`); 0: none.
    clock_hz: float = 0.0
    #: Logic dies the design is split into (each within the reticle, joined on an interposer
    #: by die-to-die links); 0: :func:`assess` takes the count that costs least.
    dies: int = 0
    #: Power drawn off the logic die at full rate (in-DRAM PIM logic): in the TDP, not in
    #: the dies' power density.
    off_die_w: float = 0.0
    #: Why the template already knows the design cannot be built (PIM logic beyond a DRAM
    #: die): reported with :func:`assess`'s own problems.
    problems: tuple[str, ...] = ()
    #: Wafer-scale designs: spare cores beyond those in use; a defect kills at most one core
    #: and the wafer works while the spares cover every dead core (:func:`wafer_yield`).
    spare_cores: int = 0
    #: PHYs of the links to other devices of a system (accelerators.system): area, die
    #: edge and power at full bandwidth.
    link_phy_mm2: float = 0.0
    link_edge_mm: float = 0.0
    link_w: float = 0.0


@dataclass(frozen=True)
class Physical:
    """A design's silicon, package, cost and power.

    ``area_breakdown_mm2``: ``compute``, ``sram``, ``control``, ``memory_phy``, ``io_other``
    (host and die-to-die PHYs), ``pad_limited`` (silicon added to give the I/O its die edge)
    and any off-die ``extra_mm2``; ``area_mm2`` their sum;
    ``dies`` chiplets of ``die_mm2`` each; ``cost_usd`` with ``cost_breakdown_usd`` (``dies``,
    ``test``, ``package``, ``memory``); ``tdp_w`` with ``static_w``; ``problem``: why the
    design cannot be built (reticle, shoreline, package, power density), or None.
    """

    area_breakdown_mm2: dict[str, float]
    dies: int
    die_mm2: float
    memory: MemorySystem | None
    cost_breakdown_usd: dict[str, float]
    tdp_w: float
    static_w: float
    d2d_j_per_byte: float
    problem: str | None
    #: Power of the logic the energy tables do not count, at full activity, W (in ``tdp_w``;
    #: templates charge it to each op for the time its unit is busy).
    active_w: float = 0.0

    @property
    def area_mm2(self) -> float:
        return sum(self.area_breakdown_mm2.values())

    @property
    def cost_usd(self) -> float:
        return sum(self.cost_breakdown_usd.values())

    @property
    def memory_energy_j_per_byte(self) -> float:
        """Energy of one off-chip byte: the memory standard's plus the die-to-die crossing."""
        return (self.memory.energy_j_per_byte if self.memory else 0.0) + self.d2d_j_per_byte

    def to_dict(self) -> dict:
        return {"area_breakdown_mm2": dict(self.area_breakdown_mm2), "dies": self.dies,
                "die_mm2": self.die_mm2, "cost_usd": self.cost_usd,
                "cost_breakdown_usd": dict(self.cost_breakdown_usd), "tdp_w": self.tdp_w,
                "memory": self.memory.to_dict() if self.memory else None}


def combine(floorplans: list[Floorplan]) -> Floorplan:
    """Several sub-accelerators on one chip: compute, SRAM, power and leakage add; each keeps
    its memory devices, joined into one memory system when they share a standard (the first
    sub's standard and capacity otherwise, with every sub's devices); one host interface, the
    largest; the coarsest node (what the chip is built in); the control overhead weighted by
    logic area."""
    if len(floorplans) == 1:
        return floorplans[0]
    mems = [f.memory for f in floorplans if f.memory is not None]
    memory = None
    if mems:
        devices = sum(m.devices for m in mems)
        memory = MemorySystem(mems[0].standard, devices,
                              sum(m.capacity_bytes for m in mems) / devices / 1e9,
                              sum(m.bandwidth_Bps for m in mems))
    logic = [f.compute_mm2 for f in floorplans]
    host = max((f.host_interface for f in floorplans),
               key=lambda h: HOST_INTERFACES[h][0])
    extra: dict[str, float] = {}
    for f in floorplans:
        for k, v in f.extra_mm2.items():
            extra[k] = extra.get(k, 0.0) + v
    return Floorplan(
        node_nm=max(f.node_nm for f in floorplans),
        compute_mm2=sum(f.compute_mm2 for f in floorplans),
        sram_mm2=sum(f.sram_mm2 for f in floorplans),
        peak_dynamic_w=sum(f.peak_dynamic_w for f in floorplans),
        leakage_w=sum(f.leakage_w for f in floorplans), memory=memory, host_interface=host,
        wafer_scale=any(f.wafer_scale for f in floorplans),
        control_overhead=(sum(f.control_overhead * a for f, a in zip(floorplans, logic))
                          / sum(logic) if sum(logic) > 0 else CONTROL_OVERHEAD),
        clock_hz=(sum(f.clock_hz * a for f, a in zip(floorplans, logic)) / sum(logic)
                  if sum(logic) > 0 else 0.0),
        extra_mm2=extra, off_die_w=sum(f.off_die_w for f in floorplans),
        problems=tuple(p for f in floorplans for p in f.problems),
        spare_cores=sum(f.spare_cores for f in floorplans))


def control_mm2(compute_mm2: float, sram_mm2: float,
                overhead: float | None = None) -> float:
    """Area a die adds for what its template does not count, mm²: ``overhead`` (default
    ``CONTROL_OVERHEAD``) of its logic plus ``SRAM_OVERHEAD`` of its SRAM. A template whose
    areas already include their control passes ``overhead`` 0 and no SRAM either (the wafer's
    cores pay both inside their area, see ``wafer.wse2_core_logic_area_mm2``)."""
    if overhead is None:
        overhead = CONTROL_OVERHEAD
    return overhead * compute_mm2 + (SRAM_OVERHEAD * sram_mm2 if overhead > 0 else 0.0)


# ------------------------------------------------------------------------------- yield, cost
def dies_per_wafer(die_mm2: float, diameter_mm: float = WAFER_DIAMETER_MM) -> int:
    """Whole dies of ``die_mm2`` on a round wafer: wafer area over die area less the edge loss
    ``pi d / sqrt(2 A)`` (the usual approximation, e.g. Hennessy & Patterson, Ch. 1)."""
    if die_mm2 <= 0:
        return 0
    r = diameter_mm / 2
    return max(0, int(math.pi * r * r / die_mm2 - math.pi * diameter_mm / math.sqrt(2 * die_mm2)))


def die_yield(die_mm2: float, node_nm: int) -> float:
    """Negative-binomial yield ``(1 + A D0 / alpha)^-alpha`` of a die of ``die_mm2``."""
    d0 = DEFECT_DENSITY_PER_CM2[_node_key(node_nm)]
    return (1 + die_mm2 / 100.0 * d0 / YIELD_CLUSTERING) ** -YIELD_CLUSTERING


def die_cost_usd(die_mm2: float, node_nm: int) -> float:
    """Cost of one good die: wafer price over good dies per wafer, US$ (inf when none fit)."""
    good = dies_per_wafer(die_mm2) * die_yield(die_mm2, node_nm)
    return WAFER_PRICE_USD[_node_key(node_nm)] / good if good > 0 else math.inf


def wafer_yield(area_mm2: float, node_nm: int, spare_cores: int) -> float:
    """Probability that a wafer-scale mesh of ``area_mm2`` works: its defects (negative
    binomial, mean ``area x D0`` and clustering ``YIELD_CLUSTERING``, as the die yield) each
    kill at most one core, and the mesh works while they are no more than its
    ``spare_cores`` [E: Cerebras' redundancy, spare cores and links that route around dead
    ones (Hot Chips 31, 2019)]. With no spares this is the die yield of the whole area (about
    0 for a wafer); WSE-2's ~96,000 spare cores against ~40 expected defects make it 1."""
    d0 = DEFECT_DENSITY_PER_CM2[_node_key(node_nm)]
    mean = area_mm2 / 100.0 * d0
    a = YIELD_CLUSTERING
    p_none = (a / (a + mean)) ** a
    if spare_cores <= 0:
        return p_none
    sd = math.sqrt(mean * (1 + mean / a))
    if spare_cores > mean + 40 * sd + 100:    # the tail beyond is below double precision
        return 1.0
    q, pmf, total = mean / (a + mean), p_none, p_none
    for k in range(int(spare_cores)):
        pmf *= (k + a) / (k + 1) * q
        total += pmf
    return min(1.0, total)


def wafer_cost_usd(area_mm2: float, node_nm: int, spare_cores: int) -> float:
    """Cost of a wafer-scale design of ``area_mm2``, US$: its share of the wafer's usable
    rectangle (a design of half the rectangle shares a wafer with another) at the node's wafer
    price, over :func:`wafer_yield` (inf when it cannot yield)."""
    y = wafer_yield(area_mm2, node_nm, spare_cores)
    share = min(area_mm2, WAFER_USABLE_MM2) / WAFER_USABLE_MM2
    return WAFER_PRICE_USD[_node_key(node_nm)] * share / y if y > 0 else math.inf


def _node_key(node_nm: int) -> int:
    return int(node_nm) if int(node_nm) in WAFER_PRICE_USD else min(
        WAFER_PRICE_USD, key=lambda n: abs(n - int(node_nm)))


# ------------------------------------------------------------------------------- assessment
def _die_options(logic_mm2: float, edge_need_mm: float,
                 d2d_edge_mm: float) -> dict[int, float]:
    """Every count of dies (each within the reticle, at most ``MAX_CHIPLETS``) that holds
    ``logic_mm2`` and offers ``edge_need_mm`` of I/O edge, and each die's area. Split dies each
    pay die-to-die PHYs of ``d2d_edge_mm`` (edge and mm^2) and lose that edge on both sides of
    each joint; the I/O may use ``MEMORY_EDGE_FRACTION`` of the perimeters; a die whose logic
    is too small for its I/O grows to the square that gives the edge (a pad-limited die)."""
    out = {}
    for dies in range(1, MAX_CHIPLETS + 1):
        d2d = d2d_edge_mm if dies > 1 else 0.0
        side = (edge_need_mm + 2 * (dies - 1) * d2d) / (MEMORY_EDGE_FRACTION * 4 * dies)
        die = max(logic_mm2 / dies + d2d, side * side)
        if die <= RETICLE_MM2:
            out[dies] = die
    return out


def _package_usd(dies: int, die_mm2: float, mem: MemorySystem | None) -> tuple[float, float]:
    """(US$, interposer mm²) of the package of ``dies`` logic dies of ``die_mm2`` and the
    memory devices ``mem`` puts in it: an organic substrate and assembly, plus a 2.5-D
    interposer (``INTERPOSER_USD_PER_MM2``, every die bonded to it) when the dies are split or
    the memory stacks on one (0 mm^2 otherwise)."""
    silicon = dies * die_mm2
    usd = ASSEMBLY_USD + SUBSTRATE_USD_PER_MM2 * SUBSTRATE_AREA_PER_SILICON * (
        silicon + (mem.devices * mem.standard.footprint_mm2 if mem else 0.0))
    if dies == 1 and not (mem is not None and mem.standard.on_interposer):
        return usd, 0.0
    interposer = INTERPOSER_AREA_FACTOR * (
        silicon + (mem.devices * mem.standard.footprint_mm2
                   if mem and mem.standard.on_interposer else 0.0))
    return usd + INTERPOSER_USD_PER_MM2 * interposer + CHIPLET_BOND_USD * dies, interposer


def chiplet_costs(options: dict[int, float], node_nm: int,
                  mem: MemorySystem | None) -> dict[int, float]:
    """US$ of each option (dies -> die mm²): dies and their test, and the package."""
    return {n: _option_usd(n, a, node_nm, mem)[0] for n, a in options.items()}


def _option_usd(dies: int, die_mm2: float, node_nm: int,
                mem: MemorySystem | None) -> tuple[float, float]:
    """(US$, interposer mm²) of ``dies`` dies of ``die_mm2``: dies, their test, package."""
    usd, interposer = _package_usd(dies, die_mm2, mem)
    return dies * die_cost_usd(die_mm2, node_nm) * (1 + TEST_COST_FRACTION) + usd, interposer


def _choose_dies(options: dict[int, float], node_nm: int, mem: MemorySystem | None,
                 pinned: int) -> int | None:
    """The count of dies: ``pinned`` when set (None if it does not fit), else the option that
    costs least, the interposer within ``MAX_INTERPOSER_MM2`` where one is (fewer dies on a
    tie); None when no option fits."""
    if pinned:
        return pinned if pinned in options else None
    if not options:
        return None
    priced = {n: _option_usd(n, a, node_nm, mem) for n, a in options.items()}
    costs = {n: usd for n, (usd, _) in priced.items()}
    fits = [n for n, (_, interposer) in priced.items() if interposer <= MAX_INTERPOSER_MM2]
    return min(fits or options, key=lambda n: (round(costs[n], 6), n))


def assess(fp: Floorplan) -> Physical:
    """Area, chiplets, cost, power and feasibility of the design ``fp`` describes."""
    node_scale = tech.area_scale(fp.node_nm) / tech.area_scale(7)
    host_phy, host_mtr, host_edge = HOST_INTERFACES[fp.host_interface]
    mem = fp.memory
    control = control_mm2(fp.compute_mm2, fp.sram_mm2, fp.control_overhead)
    parts = {"compute": fp.compute_mm2, "sram": fp.sram_mm2, "control": control,
             "memory_phy": mem.phy_area_mm2(node_scale) if mem else 0.0,
             "io_other": host_phy + host_mtr / 65.6 * node_scale}
    if fp.link_phy_mm2 > 0:
        parts["link_phy"] = fp.link_phy_mm2
    problems: list[str] = list(fp.problems)
    if mem is not None and mem.devices > mem.standard.max_devices:
        problems.append(f"{mem.bandwidth_Bps / 1e9:,.0f} GB/s needs {mem.devices} "
                        f"{mem.standard.name} {mem.standard.device}s of "
                        f"{mem.standard.bandwidth_Bps / 1e9:g} GB/s but a package takes at most "
                        f"{mem.standard.max_devices}")
    on_die = sum(parts.values())
    dies, d2d_j = 1, 0.0
    mem_bw = mem.bandwidth_Bps if mem else 0.0
    if fp.wafer_scale:
        die_mm2 = on_die
        silicon_cost = wafer_cost_usd(on_die, fp.node_nm, fp.spare_cores)
        if on_die > WAFER_USABLE_MM2 * (1 + 1e-12):
            problems.append(
                f"the mesh needs {on_die:,.0f} mm² of silicon but the largest rectangle a "
                f"{WAFER_DIAMETER_MM:g}-mm wafer holds ({WAFER_EDGE_EXCLUSION_MM:g} mm edge "
                f"exclusion) is {WAFER_USABLE_MM2:,.0f} mm²")
    else:
        edge_need = (mem.shoreline_mm if mem else 0.0) + host_edge + fp.link_edge_mm
        d2d_edge = mem_bw / D2D_BYTES_PER_S_PER_MM
        options = _die_options(on_die, edge_need, d2d_edge)
        chosen = _choose_dies(options, fp.node_nm, mem, fp.dies)
        if chosen is None and fp.dies and options:
            dies = fp.dies
            die_mm2 = on_die / dies + (d2d_edge if dies > 1 else 0.0)
            problems.append(
                f"{dies} dies of {die_mm2:,.0f} mm² (the pinned chiplet count) do not fit: "
                f"each die must be within the {RETICLE_MM2:g} mm² reticle and give its memory "
                f"and host I/O {edge_need:.1f} mm of edge; "
                + ", ".join(f"{n} dies of {a:,.0f} mm²" for n, a in options.items())
                + " would")
        elif chosen is None:
            dies = fp.dies or MAX_CHIPLETS + 1
            die_mm2 = on_die / dies
            most = MAX_CHIPLETS * MEMORY_EDGE_FRACTION * 4 * math.sqrt(RETICLE_MM2) - (
                2 * (MAX_CHIPLETS - 1) * d2d_edge)
            problems.append(
                f"the logic needs {on_die:,.0f} mm² of silicon and its memory and host I/O "
                f"{edge_need:.1f} mm of die edge, but the most a package joins, {MAX_CHIPLETS} "
                f"dies of the {RETICLE_MM2:g} mm² reticle, offer {RETICLE_MM2 * MAX_CHIPLETS:,.0f}"
                f" mm² and {max(most, 0.0):.1f} mm of edge ({MEMORY_EDGE_FRACTION:.0%} of their "
                "perimeters)")
        else:
            dies, die_mm2 = chosen, options[chosen]
        if dies > 1:   # split: each die pays die-to-die PHYs
            parts["io_other"] += dies * d2d_edge
            on_die += dies * d2d_edge
            d2d_j = D2D_PJ_PER_BIT * 8e-12 * (dies - 1) / dies
        if chosen is not None and dies * die_mm2 > on_die * (1 + 1e-9):
            parts["pad_limited"] = dies * die_mm2 - on_die   # silicon grown for the I/O edge
        silicon_cost = dies * die_cost_usd(die_mm2, fp.node_nm)
    # package
    silicon = dies * die_mm2
    if fp.wafer_scale:
        package = ASSEMBLY_USD + SUBSTRATE_USD_PER_MM2 * SUBSTRATE_AREA_PER_SILICON * silicon
    else:
        package, interposer = _package_usd(dies, die_mm2, mem)
        if interposer > MAX_INTERPOSER_MM2:
            problems.append(f"the dies and memory stacks need a {interposer:,.0f} mm² "
                            f"interposer but the largest is {MAX_INTERPOSER_MM2:,.0f} mm²")
    # power
    mem_dynamic = mem_bw * (mem.energy_j_per_byte if mem else 0.0)
    io_w = mem_bw * (mem.standard.phy_pj_per_bit * 8e-12 / 2 if mem else 0.0)  # our PHY half
    d2d_w = mem_bw * d2d_j
    static = fp.leakage_w + (mem.static_w if mem else 0.0)
    active = uncounted_logic_w(fp.compute_mm2 * (1 + fp.control_overhead), fp.clock_hz,
                               fp.node_nm)
    tdp = fp.peak_dynamic_w + active + mem_dynamic + d2d_w + static + fp.link_w + fp.off_die_w
    die_power = fp.peak_dynamic_w + active + io_w + d2d_w + fp.leakage_w + fp.link_w
    density = die_power / silicon if silicon > 0 else 0.0
    if density > MAX_POWER_DENSITY_W_PER_MM2:
        problems.append(f"the dies draw {die_power:,.0f} W on {silicon:,.0f} mm² = "
                        f"{density:.2f} W/mm², above the {MAX_POWER_DENSITY_W_PER_MM2:g} W/mm² "
                        "a cooler removes")
    parts.update(fp.extra_mm2)
    cost = {"dies": silicon_cost, "test": TEST_COST_FRACTION * silicon_cost,
            "package": package, "memory": mem.price_usd if mem else 0.0}
    return Physical(area_breakdown_mm2=parts, dies=dies, die_mm2=die_mm2, memory=mem,
                    cost_breakdown_usd=cost, tdp_w=tdp, static_w=static, d2d_j_per_byte=d2d_j,
                    problem="; ".join(problems) or None, active_w=active)
