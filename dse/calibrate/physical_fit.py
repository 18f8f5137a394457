"""Calibrate and check the physical model (:mod:`accelerators.physical`) on published dies.

Six global constants turn what a template counts (PEs, SRAM bytes, SMs, memory PHYs) into die
area:

* ``technology.LOGIC_PLACEMENT_UTILISATION``, ``technology.SRAM_ARRAY_EFFICIENCY`` and
  ``gpu.SM_BASE_MM2_45NM`` come from published *blocks* of die plans
  (:data:`published_chips.BLOCKS`: the matrix units and SRAMs Google gave as shares of its
  dies, a WSE-2 core's SRAM, a Turing TPC): :func:`derived_constants`;
* ``physical.CONTROL_OVERHEAD`` (everything an npu or wafer does not count, as a fraction of
  its logic), ``physical.SRAM_OVERHEAD`` (what SRAM costs beyond its blocks, as a fraction of
  them) and ``gpu.GPU_CONTROL_OVERHEAD`` (what the gpu template does not count, as a fraction
  of its SMs) have no such source: :func:`fit` chooses them by least squares of
  log(modelled / published die area) over the chips (each die weighted once, rows of one die
  sharing its weight).

:func:`leave_one_out` reports each chip's error with its die left out of both steps (and of
the blocks); the shipped constants are :func:`fit` on every chip. :func:`validation_rows`
adds TDP (every template's own, bottom-up: one energy method, whose one fitted constant,
``physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ``, :func:`fit_power` chooses and
:func:`power_leave_one_out` leaves each chip out of) and cost.
``benchmarks/physical_validation.py`` prints it all; ``docs/validation.md`` explains it.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np
from scipy.optimize import least_squares

from accelerators import gpu, npu, physical, technology as tech, wafer  # noqa: F401
from accelerators.physical import Physical, assess
from accelerators.registry import make_accelerator
from accelerators.base import Template
from dse.calibrate.published_chips import (BLOCKS, CHIPS, COST_ESTIMATES, BlockShare,
                                           PublishedChip)

#: Dtypes whose PE formula the matrix-unit blocks calibrate (the GPUs' tensor cores and TPUv2+
#: MXUs); the int8 block (TPUv1) is reported as a check, not used.
_UTILISATION_DTYPES = ("fp16", "bf16")

#: Where the least squares starts: control, SRAM and GPU control overheads (fixed, so the fit
#: does not depend on the shipped values).
_START = (1.0, 0.3, 1.0)


@dataclass(frozen=True)
class Constants:
    """The physical model's global area constants (see the module docstring)."""

    placement_utilisation: float
    sram_array_efficiency: float
    sm_base_mm2: float
    control_overhead: float
    sram_overhead: float
    gpu_control_overhead: float

    @classmethod
    def shipped(cls) -> "Constants":
        return cls(tech.LOGIC_PLACEMENT_UTILISATION, tech.SRAM_ARRAY_EFFICIENCY,
                   gpu.SM_BASE_MM2_45NM, physical.CONTROL_OVERHEAD, physical.SRAM_OVERHEAD,
                   gpu.GPU_CONTROL_OVERHEAD)


#: (module, name) of each constant, in :class:`Constants` order.
_WHERE = ((tech, "LOGIC_PLACEMENT_UTILISATION"), (tech, "SRAM_ARRAY_EFFICIENCY"),
          (gpu, "SM_BASE_MM2_45NM"), (physical, "CONTROL_OVERHEAD"),
          (physical, "SRAM_OVERHEAD"), (gpu, "GPU_CONTROL_OVERHEAD"))


@contextlib.contextmanager
def _using(c: Constants) -> Iterator[None]:
    """Set the constants in their modules for the duration (restored afterwards)."""
    saved = [getattr(m, n) for m, n in _WHERE] + [tech.PE_AREA_UM2_45NM]
    for (m, n), v in zip(_WHERE, (c.placement_utilisation, c.sram_array_efficiency,
                                  c.sm_base_mm2, c.control_overhead, c.sram_overhead,
                                  c.gpu_control_overhead)):
        setattr(m, n, v)
    tech.PE_AREA_UM2_45NM = {k: v / c.placement_utilisation
                             for k, v in tech.PE_CELLS_UM2_45NM.items()}
    try:
        yield
    finally:
        for (m, n), v in zip(_WHERE, saved):
            setattr(m, n, v)
        tech.PE_AREA_UM2_45NM = saved[-1]


def design(chip: PublishedChip) -> Template:
    """The shipped design that models ``chip`` (a wafer's core area recomputed from its parts
    under the constants in force)."""
    hw = {}
    if chip.accelerator.startswith("wafer:"):
        hw["core_logic_area_mm2"] = wafer.wse2_core_logic_area_mm2()
    return make_accelerator(chip.accelerator, hw)


def physical_at(chip: PublishedChip, constants: Constants | None = None) -> Physical:
    """``chip``'s die, package, cost and power under ``constants`` (default: the shipped ones).
    The npu's floorplan takes the default control overhead (bound when ``Floorplan`` was
    defined), so it is set here; the gpu's and the wafer's read theirs when called."""
    constants = constants or Constants.shipped()
    with _using(constants):
        d = design(chip)
        fp = d.floorplan()
        if isinstance(d, npu.NPU):
            fp = replace(fp, control_overhead=constants.control_overhead)
        return assess(fp)


# ----------------------------------------------------------------------------- the two steps
def _die_mm2(block: BlockShare, chips: Sequence[PublishedChip] = CHIPS) -> float:
    return block.die_mm2 or next(c.die_mm2 for c in chips if c.die == block.die)


def _sm_mm2(preset: str, node_nm: int) -> float:
    """One SM of the gpu ``preset`` at ``node_nm`` under the constants in force, mm^2."""
    hw = gpu.GPU(preset).hw
    return (gpu.SM_BASE_MM2_45NM * tech.area_scale(node_nm)
            + hw.tensor_macs_per_sm * tech.pe_area_mm2("fp16", node_nm)
            + hw.fp32_lanes_per_sm * tech.pe_area_mm2("fp32", node_nm)
            + tech.sram_area_mm2(gpu.REGISTER_FILE_BYTES_PER_SM + hw.l1_kb_per_sm * 1024,
                                 node_nm))


def block_model_mm2(block: BlockShare, constants: Constants) -> float:
    """The model's area of a published block: PEs (``technology.pe_area_mm2``), SRAM, or SMs."""
    with _using(constants):
        if block.kind == "pe":
            return block.count * tech.pe_area_mm2(block.dtype, block.node_nm)
        if block.kind == "sm":
            return block.count * _sm_mm2(block.dtype, block.node_nm)
        return tech.sram_area_mm2(block.count, block.node_nm)


def derived_constants(blocks: Sequence[BlockShare] = BLOCKS) -> tuple[float, float, float]:
    """(placement utilisation, SRAM array efficiency, SM base mm^2 at 45 nm): the geometric
    means, over the published blocks, of the model's cell (bit-cell) area over the block's
    published area; then the SM base that makes the model's SMs the published SM blocks' area
    (mean over the SM blocks, at 45 nm)."""
    unit = Constants(1.0, 1.0, 0.0, 0.0, 0.0, 0.0)   # cells and bit cells alone
    def ratio(b: BlockShare) -> float:
        return block_model_mm2(b, unit) / (b.share * _die_mm2(b))
    pes = [ratio(b) for b in blocks if b.kind == "pe" and b.dtype in _UTILISATION_DTYPES]
    srams = [ratio(b) for b in blocks if b.kind == "sram"]
    u, e = float(np.exp(np.mean(np.log(pes)))), float(np.exp(np.mean(np.log(srams))))
    no_base = Constants(u, e, 0.0, 0.0, 0.0, 0.0)
    bases = [(b.share * _die_mm2(b) - block_model_mm2(b, no_base)) / b.count
             / tech.area_scale(b.node_nm) for b in blocks if b.kind == "sm"]
    return u, e, float(np.mean(bases))


def fit(chips: Sequence[PublishedChip] = CHIPS,
        blocks: Sequence[BlockShare] = BLOCKS) -> Constants:
    """The constants: utilisation, SRAM efficiency and SM base from ``blocks``, then the
    control, SRAM and GPU control overheads by least squares of log(modelled / published area)
    over ``chips``."""
    u, e, base = derived_constants(blocks)
    per_die: dict[str, int] = {}
    for c in chips:
        per_die[c.die] = per_die.get(c.die, 0) + 1

    def residuals(x: np.ndarray) -> np.ndarray:
        k = Constants(u, e, base, *np.exp(x))
        return np.array([math.log(physical_at(c, k).area_mm2 / c.die_mm2)
                         / math.sqrt(per_die[c.die]) for c in chips])

    sol = least_squares(residuals, np.log(_START), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return Constants(u, e, base, *(float(v) for v in np.exp(sol.x)))


def leave_one_out(chips: Sequence[PublishedChip] = CHIPS,
                  blocks: Sequence[BlockShare] = BLOCKS) -> dict[str, tuple[float, Constants]]:
    """Chip name -> (modelled area, constants) with the chip's die (every row of it, and its
    blocks) left out of :func:`fit`."""
    out = {}
    for die in dict.fromkeys(c.die for c in chips):
        k = fit([c for c in chips if c.die != die], [b for b in blocks if b.die != die])
        for c in chips:
            if c.die == die:
                out[c.name] = (physical_at(c, k).area_mm2, k)
    return out


# ----------------------------------------------------------------------------- power
#: A board's power over its package's: voltage regulators, fans and board parts [E: multiphase
#: regulators convert at ~88-92 % at load]. Published "board" TDPs (GPU cards and modules)
#: are compared with the modelled package power over it; "chip" TDPs with the package's, less
#: memory outside the package; the wafer's as it is (``compared_tdp_w``).
BOARD_POWER_EFFICIENCY = 0.9


def memory_w(phys: Physical) -> float:
    """The memory's share of a design's TDP: I/O and DRAM core at full bandwidth and
    background, W."""
    mem = phys.memory
    return (mem.bandwidth_Bps * mem.energy_j_per_byte + mem.static_w) if mem else 0.0


def compared_tdp_w(chip: PublishedChip, phys: Physical) -> float:
    """The model's power on ``chip``'s published basis, W: the package's TDP (``tdp_w``: dies,
    the logic the tables do not count, memory) over ``BOARD_POWER_EFFICIENCY`` for a board;
    less memory outside the package (DDR, LPDDR, GDDR) for a chip; as it is for a wafer."""
    if chip.tdp_basis == "board":
        return phys.tdp_w / BOARD_POWER_EFFICIENCY
    mem = phys.memory
    if chip.tdp_basis == "chip" and mem is not None and not mem.standard.on_interposer:
        return phys.tdp_w - memory_w(phys)
    return phys.tdp_w


@contextlib.contextmanager
def _power_constant(k: float) -> Iterator[None]:
    """``physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ`` set to ``k`` for the duration."""
    saved = physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ
    physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ = k
    try:
        yield
    finally:
        physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ = saved


def _tdp_terms(chip: PublishedChip) -> tuple[float, float]:
    """(W with the constant 0, W per unit of it) of ``chip``'s compared TDP: linear in the
    constant, so the fit needs two evaluations per chip."""
    with _power_constant(0.0):
        base = compared_tdp_w(chip, design(chip).physical())
    with _power_constant(1.0):
        one = compared_tdp_w(chip, design(chip).physical())
    return base, one - base


def fit_power(chips: Sequence[PublishedChip] = CHIPS) -> float:
    """``physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ``: least squares of log(modelled / published
    TDP) over ``chips`` (each die weighted once, rows of one die sharing its weight)."""
    terms = [(_tdp_terms(c), c.tdp_w) for c in chips]
    per_die: dict[str, int] = {}
    for c in chips:
        per_die[c.die] = per_die.get(c.die, 0) + 1
    weights = [1 / math.sqrt(per_die[c.die]) for c in chips]

    def residuals(x: np.ndarray) -> np.ndarray:
        k = math.exp(x[0])
        return np.array([w * math.log((b + k * a) / pub)
                         for ((b, a), pub), w in zip(terms, weights)])

    sol = least_squares(residuals, [math.log(0.05)], xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return float(math.exp(sol.x[0]))


def power_leave_one_out(chips: Sequence[PublishedChip] = CHIPS) -> dict[str, tuple[float, float]]:
    """Chip name -> (compared TDP, constant) with the chip's die left out of :func:`fit_power`."""
    out = {}
    for die in dict.fromkeys(c.die for c in chips):
        k = fit_power([c for c in chips if c.die != die])
        for c in chips:
            if c.die == die:
                base, per = _tdp_terms(c)
                out[c.name] = (base + k * per, k)
    return out


def modelled_tdp_w(chip: PublishedChip) -> float:
    """The TDP the model gives ``chip`` (shipped constants) on its published basis: every
    template's ``physical().tdp_w``, GPUs' included (one energy method)."""
    return compared_tdp_w(chip, design(chip).physical())


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Row:
    chip: PublishedChip
    area_mm2: float
    loo_area_mm2: float
    tdp_w: float        #: on the published basis (``compared_tdp_w``)
    loo_tdp_w: float    #: the same with the chip's die left out of ``fit_power``
    memory_w: float     #: the memory's share of the package TDP (I/O, DRAM core, background)
    cost_usd: float

    @property
    def area_error(self) -> float:
        return self.area_mm2 / self.chip.die_mm2 - 1

    @property
    def loo_error(self) -> float:
        return self.loo_area_mm2 / self.chip.die_mm2 - 1

    @property
    def tdp_error(self) -> float:
        return self.tdp_w / self.chip.tdp_w - 1

    @property
    def loo_tdp_error(self) -> float:
        return self.loo_tdp_w / self.chip.tdp_w - 1


def validation_rows(chips: Sequence[PublishedChip] = CHIPS) -> list[Row]:
    """Every chip: modelled area (shipped constants and leave-one-out), TDP, memory power and
    cost."""
    loo, loo_power = leave_one_out(chips), power_leave_one_out(chips)
    rows = []
    for c in chips:
        phys = design(c).physical()
        rows.append(Row(c, phys.area_mm2, loo[c.name][0], compared_tdp_w(c, phys),
                        loo_power[c.name][0], memory_w(phys), phys.cost_usd))
    return rows


def block_rows(blocks: Sequence[BlockShare] = BLOCKS) -> list[tuple[BlockShare, float, float]]:
    """Each published block: (block, published mm^2, modelled mm^2 with the shipped constants)."""
    k = Constants.shipped()
    return [(b, b.share * _die_mm2(b), block_model_mm2(b, k)) for b in blocks]


def cost_rows() -> list[tuple[str, float, float, dict[str, float], tuple]]:
    """Each published cost estimate: (accelerator, estimate, modelled cost_usd, modelled
    breakdown, published breakdown)."""
    out = []
    for est in COST_ESTIMATES:
        phys = make_accelerator(est.accelerator).physical()
        out.append((est.accelerator, est.cost_usd, phys.cost_usd,
                    dict(phys.cost_breakdown_usd), est.breakdown_usd))
    return out


def median_max(errors: Sequence[float]) -> tuple[float, float]:
    """Median and largest absolute error."""
    a = np.abs(np.asarray(errors, dtype=float))
    return float(np.median(a)), float(a.max())
