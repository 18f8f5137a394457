"""Calibrate and check the physical model (:mod:`accelerators.physical`) on published dies.

Four global constants turn what a template counts (PEs, SRAM bytes, memory PHYs) into die area:

* ``technology.LOGIC_PLACEMENT_UTILISATION`` and ``technology.SRAM_ARRAY_EFFICIENCY`` come from
  published *blocks* of die plans (:data:`published_chips.BLOCKS`: the matrix units and SRAMs
  Google gave as shares of its dies): :func:`derived_constants`;
* ``physical.CONTROL_OVERHEAD`` (everything a template does not count, as a fraction of its
  compute and SRAM) and ``gpu.SM_OVERHEAD`` (the rest of an SM, as a multiple of its tensor and
  fp32 datapaths) have no such source: :func:`fit` chooses them by least squares of
  log(modelled / published die area) over the chips (each die weighted once, rows of one die
  sharing its weight), except those whose preset is known to leave out area its template can
  count (``PublishedChip.not_fitted``: the graphics GPUs).

:func:`leave_one_out` reports each chip's error with its die left out of both steps (and of
the blocks); the shipped constants are :func:`fit` on every chip. :func:`validation_rows`
adds TDP (the NPU and wafer templates' own, and for GPUs, whose template takes the datasheet
TDP, an estimate from technology energies: :func:`gpu_component_tdp_w`) and cost.
``benchmarks/physical_validation.py`` prints it all; ``docs/validation.md`` explains it.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np
from scipy.optimize import least_squares

# every template the chips use is imported here, before any constant is set for a fit: a module
# that copies a constant at import (npu's leakage uses CONTROL_OVERHEAD) must copy the shipped one
from accelerators import gpu, npu, physical, technology as tech, wafer  # noqa: F401
from accelerators.physical import Physical, assess
from accelerators.registry import make_accelerator
from accelerators.base import Template
from dse.calibrate.published_chips import (BLOCKS, CHIPS, COST_ESTIMATES, BlockShare,
                                           PublishedChip)

#: Dtypes whose PE formula the matrix-unit blocks calibrate (the GPUs' tensor cores and TPUv2+
#: MXUs); the int8 block (TPUv1) is reported as a check, not used.
_UTILISATION_DTYPES = ("fp16", "bf16")

#: Where the least squares starts (fixed, so the fit does not depend on the shipped values).
_START = (0.5, 3.0)


@dataclass(frozen=True)
class Constants:
    """The physical model's global area constants (see the module docstring)."""

    placement_utilisation: float
    sram_array_efficiency: float
    control_overhead: float
    sm_overhead: float

    @classmethod
    def shipped(cls) -> "Constants":
        return cls(tech.LOGIC_PLACEMENT_UTILISATION, tech.SRAM_ARRAY_EFFICIENCY,
                   physical.CONTROL_OVERHEAD, gpu.SM_OVERHEAD)


@contextlib.contextmanager
def _using(c: Constants) -> Iterator[None]:
    """Set the four constants in their modules for the duration (restored afterwards)."""
    saved = (tech.LOGIC_PLACEMENT_UTILISATION, tech.PE_AREA_UM2_45NM,
             tech.SRAM_ARRAY_EFFICIENCY, physical.CONTROL_OVERHEAD, gpu.SM_OVERHEAD)
    tech.LOGIC_PLACEMENT_UTILISATION = c.placement_utilisation
    tech.PE_AREA_UM2_45NM = {k: v / c.placement_utilisation
                             for k, v in tech.PE_CELLS_UM2_45NM.items()}
    tech.SRAM_ARRAY_EFFICIENCY = c.sram_array_efficiency
    physical.CONTROL_OVERHEAD = c.control_overhead
    gpu.SM_OVERHEAD = c.sm_overhead
    try:
        yield
    finally:
        (tech.LOGIC_PLACEMENT_UTILISATION, tech.PE_AREA_UM2_45NM, tech.SRAM_ARRAY_EFFICIENCY,
         physical.CONTROL_OVERHEAD, gpu.SM_OVERHEAD) = saved


def design(chip: PublishedChip) -> Template:
    """The shipped design that models ``chip`` (a wafer's core area recomputed from its parts
    under the constants in force)."""
    hw = {}
    if chip.accelerator.startswith("wafer:"):
        hw["core_logic_area_mm2"] = wafer.wse2_core_logic_area_mm2()
    return make_accelerator(chip.accelerator, hw)


def physical_at(chip: PublishedChip, constants: Constants | None = None) -> Physical:
    """``chip``'s die, package, cost and power under ``constants`` (default: the shipped ones).
    The npu and gpu floorplans take the default control overhead, so it is set here."""
    constants = constants or Constants.shipped()
    with _using(constants):
        fp = design(chip).floorplan()
        if not fp.wafer_scale:
            fp = replace(fp, control_overhead=constants.control_overhead)
        return assess(fp)


# ----------------------------------------------------------------------------- the two steps
def _die_mm2(die: str, chips: Sequence[PublishedChip] = CHIPS) -> float:
    return next(c.die_mm2 for c in chips if c.die == die)


def block_model_mm2(block: BlockShare, constants: Constants) -> float:
    """The model's area of a published block: PEs (``technology.pe_area_mm2``) or SRAM."""
    with _using(constants):
        if block.kind == "pe":
            return block.count * tech.pe_area_mm2(block.dtype, block.node_nm)
        return tech.sram_area_mm2(block.count, block.node_nm)


def derived_constants(blocks: Sequence[BlockShare] = BLOCKS) -> tuple[float, float]:
    """(placement utilisation, SRAM array efficiency): the geometric means, over the published
    blocks, of the model's cell (bit-cell) area over the block's published area."""
    unit = Constants(1.0, 1.0, 0.0, 0.0)   # cells and bit cells alone
    def ratio(b: BlockShare) -> float:
        return block_model_mm2(b, unit) / (b.share * _die_mm2(b.die))
    pes = [ratio(b) for b in blocks if b.kind == "pe" and b.dtype in _UTILISATION_DTYPES]
    srams = [ratio(b) for b in blocks if b.kind == "sram"]
    return float(np.exp(np.mean(np.log(pes)))), float(np.exp(np.mean(np.log(srams))))


def fit(chips: Sequence[PublishedChip] = CHIPS,
        blocks: Sequence[BlockShare] = BLOCKS) -> Constants:
    """The constants: utilisation and SRAM efficiency from ``blocks``, then the control and SM
    overheads by least squares of log(modelled / published area) over the fitted ``chips``."""
    u, e = derived_constants(blocks)
    chips = [c for c in chips if not c.not_fitted]
    per_die: dict[str, int] = {}
    for c in chips:
        per_die[c.die] = per_die.get(c.die, 0) + 1

    def residuals(x: np.ndarray) -> np.ndarray:
        k = Constants(u, e, math.exp(x[0]), math.exp(x[1]))
        return np.array([math.log(physical_at(c, k).area_mm2 / c.die_mm2)
                         / math.sqrt(per_die[c.die]) for c in chips])

    sol = least_squares(residuals, np.log(_START), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return Constants(u, e, math.exp(sol.x[0]), math.exp(sol.x[1]))


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
#: Register-file bytes per tensor-core MAC: an m16n8k16 fp16 MMA (2,048 MACs) reads A (16 x 16
#: x 2 B), B (16 x 8 x 2 B) and C (16 x 8 x 4 B) and writes D (16 x 8 x 4 B) [D NVIDIA PTX ISA,
#: mma.m16n8k16] = 1,792 B; from one 64 KiB bank of the 256 KiB register file per SM [D].
RF_BYTES_PER_TENSOR_MAC = 1792 / 2048
RF_BANK_BYTES = 64 * 1024


def gpu_component_tdp_w(g: gpu.GPU) -> float:
    """A GPU's power from technology energies alone, W: every enabled SM's tensor MACs busy each
    cycle at the boost clock (fp16 MAC energy plus the register-file operand traffic of an MMA),
    the memory at full bandwidth (I/O, DRAM core and background), and leakage of the die's logic
    and SRAM. Nothing in it is fitted to a TDP; what it leaves out (clock tree, schedulers, L2,
    on-chip network, voltage-regulator losses) is why it falls short (docs/validation.md)."""
    hw, node = g.hw, g.hw.node_nm
    per_mac = (tech.mac_energy_j("fp16", node)
               + RF_BYTES_PER_TENSOR_MAC * tech.sram_energy_j_per_byte(RF_BANK_BYTES, node))
    tensor_w = hw.sms * hw.tensor_macs_per_sm * hw.clock_hz * per_mac
    mem = g.memory
    memory_w = mem.bandwidth_Bps * mem.energy_j_per_byte + mem.static_w
    parts = g.physical().area_breakdown_mm2
    sram_bytes = ((hw.sms_on_die or hw.sms) * (gpu.REGISTER_FILE_BYTES_PER_SM
                                               + hw.l1_kb_per_sm * 1024) + hw.l2_bytes)
    leakage = tech.leakage_w(parts["compute"] + parts["control"], sram_bytes, node)
    return tensor_w + memory_w + leakage


def modelled_tdp_w(chip: PublishedChip) -> float:
    """The TDP the model gives ``chip`` (shipped constants): the physical model's ``tdp_w`` for
    templates that compute it (npu, wafer), :func:`gpu_component_tdp_w` for GPUs (whose
    ``tdp_w`` is the datasheet's, an input)."""
    d = design(chip)
    if isinstance(d, gpu.GPU):
        return gpu_component_tdp_w(d)
    return d.physical().tdp_w


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Row:
    chip: PublishedChip
    area_mm2: float
    loo_area_mm2: float
    tdp_w: float
    memory_w: float     #: the memory's share of ``tdp_w`` (I/O, DRAM core, background)
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


def validation_rows(chips: Sequence[PublishedChip] = CHIPS) -> list[Row]:
    """Every chip: modelled area (shipped constants and leave-one-out), TDP, memory power and
    cost."""
    loo = leave_one_out(chips)
    rows = []
    for c in chips:
        phys = design(c).physical()
        mem = phys.memory
        memory_w = (mem.bandwidth_Bps * mem.energy_j_per_byte + mem.static_w) if mem else 0.0
        rows.append(Row(c, phys.area_mm2, loo[c.name][0], modelled_tdp_w(c), memory_w,
                        phys.cost_usd))
    return rows


def block_rows(blocks: Sequence[BlockShare] = BLOCKS) -> list[tuple[BlockShare, float, float]]:
    """Each published block: (block, published mm^2, modelled mm^2 with the shipped constants)."""
    k = Constants.shipped()
    return [(b, b.share * _die_mm2(b.die), block_model_mm2(b, k)) for b in blocks]


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
