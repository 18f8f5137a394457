"""Many npu designs at once: :class:`~accelerators.npu.NPU` objects equal to the constructor's,
with the quantities that depend on the clock and the DRAM bandwidth computed as arrays.

A population study varies a few of a design's parameters per generation. The designs are
grouped by every parameter except ``clock_hz`` and ``dram_bandwidth_Bps``; one design per group
is built by the constructor and gives what depends on the group only (scratchpad and MAC
energies, laid-out logic and SRAM, leakage, the scratchpad problem, host interface). Over all
designs as arrays, the same formulas as :meth:`NPU.floorplan`, :func:`memory_standards.memory_system`
and :func:`physical.assess` (same operations in the same order: the same IEEE doubles; the
negative-binomial yield's power and the cost rounding taken per element by Python, as there):
the memory devices a bandwidth needs, their PHYs, shoreline, price and power, the chiplet
options and the one that costs least, package, TDP and power density. A design for which
any of these finds a problem (too many devices, no die option, an interposer or power density
past its limit), a bad parameter, or a group the arrays do not cover (a pinned DRAM device
count's bandwidth check) is built by the constructor instead, which gives its exact reason.
``tests/test_npu_batch.py`` compares every attribute with the constructor's on random designs.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from accelerators import physical as ph
from accelerators.base import HardwareConfig
from accelerators.memory_standards import MemorySystem
from accelerators.npu import NPU
from dse.errors import DSEError

#: Parameters computed as arrays; every other one makes a group.
CONTINUOUS = ("clock_hz", "dram_bandwidth_Bps")


def build_npus(preset: str | None, values: Sequence[dict[str, Any]]) -> list[NPU | None]:
    """``NPU(preset, **v)`` for each ``v`` of ``values``; None where the constructor raises
    (call it for the error)."""
    n = len(values)
    out: list[NPU | None] = [None] * n
    params = NPU.params()
    preset = preset if preset is not None else NPU.DEFAULT_PRESET
    if preset not in NPU.PRESETS:
        return out
    base = {p.name: p.default for p in NPU.PARAMS}
    base.update(NPU.PRESETS[preset])
    coerced: dict[tuple, Any] = {}
    rows: list[dict[str, Any] | None] = []
    for v in values:
        merged = dict(base)
        ok = True
        for k, x in v.items():
            if k not in params:
                ok = False
                break
            merged[k] = x
        if ok:
            try:
                for k, x in merged.items():
                    key = (k, type(x), repr(x) if type(x) is float else x)
                    c = coerced.get(key)
                    if c is None:
                        c = coerced[key] = params[k].coerce(x, f"hw.{k}")
                    merged[k] = c
            except DSEError:
                ok = False
        rows.append(merged if ok else None)
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(rows):
        if m is not None:
            groups.setdefault(tuple((k, m[k]) for k in m if k not in CONTINUOUS),
                              []).append(i)
    for members in groups.values():
        first = rows[members[0]]
        try:
            ref = NPU(preset, **first)
        except DSEError:
            continue   # each member raises the same: left to the constructor
        if first["dram_devices"]:
            continue   # a pinned device count checks each bandwidth: the constructor
        for i, d in zip(members, _group(ref, preset, [rows[i] for i in members])):
            out[i] = d
    return out


def _group(ref: NPU, preset: str, rows: list[dict[str, Any]]) -> list[NPU | None]:
    """The designs ``rows`` (coerced values equal to ``ref``'s but for :data:`CONTINUOUS`)."""
    fp0 = ref.floorplan()
    mem0 = ref.memory
    std = mem0.standard
    if fp0.wafer_scale or fp0.link_phy_mm2 or fp0.link_edge_mm or fp0.problems or \
            fp0.extra_mm2 or fp0.off_die_w:
        return [None] * len(rows)
    node = fp0.node_nm
    clock = np.array([r["clock_hz"] for r in rows], dtype=np.float64)
    bw_in = np.array([r["dram_bandwidth_Bps"] for r in rows], dtype=np.float64)
    # memory_standards.memory_system with dram_devices 0
    std_bw = std.bandwidth_Bps
    devices = np.maximum(1, np.ceil(bw_in / std_bw * (1 - 1e-12))).astype(np.int64)
    peak = devices * std_bw
    mem_bw = np.where(bw_in > 0, bw_in, peak)
    cap = mem0.capacity_gb_per_device
    # NPU.floorplan
    compute, sram = fp0.compute_mm2, fp0.sram_mm2
    per_cycle_j = _per_cycle_j(ref)
    peak_dyn = per_cycle_j * clock
    leakage = fp0.leakage_w
    # physical.assess
    node_scale = ph.tech.area_scale(node) / ph.tech.area_scale(7)
    host_phy, host_mtr, host_edge = ph.HOST_INTERFACES[fp0.host_interface]
    control = ph.control_mm2(compute, sram, fp0.control_overhead)
    mem_phy = devices * (std.phy_area_mm2 + std.controller_area_mm2(node_scale))
    io_other = host_phy + host_mtr / 65.6 * node_scale
    on_die = (((0 + compute + sram) + control) + mem_phy) + io_other
    bad = devices > std.max_devices
    edge_need = devices * std.shoreline_mm + host_edge + fp0.link_edge_mm
    d2d_edge = mem_bw / ph.D2D_BYTES_PER_S_PER_MM
    K = ph.MAX_CHIPLETS
    opt_area = np.empty((K, len(rows)))
    for k in range(1, K + 1):
        d2d = d2d_edge if k > 1 else 0.0
        side = (edge_need + 2 * (k - 1) * d2d) / (ph.MEMORY_EDGE_FRACTION * 4 * k)
        opt_area[k - 1] = np.maximum(on_die / k + d2d, side * side)
    valid = opt_area <= ph.RETICLE_MM2
    footprint = devices * std.footprint_mm2
    pinned = fp0.dies
    chosen = np.zeros(len(rows), dtype=np.int64)
    if pinned:
        ok = valid[pinned - 1] if pinned <= K else np.zeros(len(rows), dtype=bool)
        chosen[ok] = pinned
    else:
        usd = np.full((K, len(rows)), np.inf)
        fits = np.zeros((K, len(rows)), dtype=bool)
        for k in range(1, K + 1):
            a = opt_area[k - 1]
            pkg, interposer = _package(k, a, footprint, std)
            usd[k - 1] = k * _die_cost(a, node) * (1 + ph.TEST_COST_FRACTION) + pkg
            fits[k - 1] = interposer <= ph.MAX_INTERPOSER_MM2
        for i, (v_col, f_col, u_col) in enumerate(zip(valid.T.tolist(), fits.T.tolist(),
                                                      usd.T.tolist())):
            pool = [k for k in range(K) if v_col[k] and f_col[k]] or \
                   [k for k in range(K) if v_col[k]]
            if pool:
                chosen[i] = min(pool, key=lambda k: (round(u_col[k], 6), k + 1)) + 1
    bad |= chosen == 0
    dies = np.maximum(chosen, 1)
    die_mm2 = opt_area[dies - 1, np.arange(len(rows))]
    split = dies > 1
    io_other = np.where(split, io_other + dies * d2d_edge, io_other)
    on_die = np.where(split, on_die + dies * d2d_edge, on_die)
    d2d_j = np.where(split, ph.D2D_PJ_PER_BIT * 8e-12 * (dies - 1) / dies, 0.0)
    pad = dies * die_mm2 > on_die * (1 + 1e-9)
    silicon_cost = dies * _die_cost(die_mm2, node)
    package = np.empty(len(rows))
    interposer = np.empty(len(rows))
    for k in np.unique(dies).tolist():
        sel = dies == k
        package[sel], interposer[sel] = _package(k, die_mm2[sel], footprint[sel], std)
    bad |= interposer > ph.MAX_INTERPOSER_MM2
    mem_dynamic = mem_bw * std.energy_j_per_byte
    io_w = mem_bw * (std.phy_pj_per_bit * 8e-12 / 2)
    d2d_w = mem_bw * d2d_j
    static = leakage + devices * std.static_w
    active = (ph.UNCOUNTED_LOGIC_W_PER_MM2_GHZ * (compute * (1 + fp0.control_overhead)) * clock
              / 1e9 * ph.tech.energy_scale(node) / ph.tech.area_scale(node))
    tdp = peak_dyn + active + mem_dynamic + d2d_w + static + fp0.link_w + fp0.off_die_w
    die_power = peak_dyn + active + io_w + d2d_w + leakage + fp0.link_w
    silicon = dies * die_mm2
    with np.errstate(divide="ignore", invalid="ignore"):
        density = np.where(silicon > 0, die_power / silicon, 0.0)
    bad |= density > ph.MAX_POWER_DENSITY_W_PER_MM2
    price = devices * cap * std.price_usd_per_gb
    pe_mm2, lane_mm2 = ref._unit_logic_mm2()
    units = pe_mm2 + lane_mm2
    dram_j = std.energy_j_per_byte + d2d_j
    sustained = mem_bw * std.sustained_fraction
    cols = [x.tolist() for x in (clock, devices, mem_bw, mem_phy, io_other, on_die, dies,
                                 die_mm2, pad, silicon_cost, package, tdp, static, d2d_j,
                                 active, price, dram_j, sustained, bad)]
    shared = {k: v for k, v in vars(ref).items()
              if k not in ("hw", "memory", "_clock", "_bw", "_dram_j", "_active_w",
                           "_physical_cache", "_cache", "_study_key")}
    out: list[NPU | None] = []
    for r, (c, nd, mbw, mphy, io, od, k, dmm, pd, sc, pkg, tdp_i, st_i, dj, act, pr, drj,
            sus, b) in zip(rows, zip(*cols)):
        if b:
            out.append(None)
            continue
        mem = MemorySystem(std, nd, cap, mbw)
        parts = {"compute": compute, "sram": sram, "control": control, "memory_phy": mphy,
                 "io_other": io}
        if pd:
            parts["pad_limited"] = k * dmm - od
        phys = ph.Physical(area_breakdown_mm2=parts, dies=k, die_mm2=dmm, memory=mem,
                           cost_breakdown_usd={"dies": sc, "test": ph.TEST_COST_FRACTION * sc,
                                               "package": pkg, "memory": pr},
                           tdp_w=tdp_i, static_w=st_i, d2d_j_per_byte=dj, problem=None,
                           active_w=act)
        d = NPU.__new__(NPU)
        d.__dict__.update(shared)
        d.hw = HardwareConfig(r)
        d.memory = mem
        d._clock, d._bw = c, sus
        d._physical_cache = phys
        d._dram_j = drj
        d._active_w = {"array": act * pe_mm2 / units, "vector": act * lane_mm2 / units}
        d._cache = {}
        out.append(d)
    return out


def _per_cycle_j(ref: NPU) -> float:
    """Energy of one cycle with every PE and lane busy (:meth:`NPU.floorplan`'s sum)."""
    from accelerators import npu as npu_mod
    hw, b = ref.hw, ref._b
    sram_j = ref._sram_j
    pes = hw.rows * hw.cols * hw.arrays
    return (pes * (ref._mac_j + npu_mod._register_bytes_per_mac(b)
                   * npu_mod.tech.register_energy_j_per_byte(hw.node_nm))
            + hw.vector_lanes * ref._vec_j
            + hw.arrays * (hw.rows * b * sram_j["ifmap"]
                           + 2 * hw.cols * npu_mod.ACC_BYTES * sram_j["ofmap"])
            + hw.vector_lanes * 2 * b * sram_j["ifmap"])


def _die_cost(die_mm2: np.ndarray, node_nm: int) -> np.ndarray:
    """:func:`physical.die_cost_usd` per element."""
    key = ph._node_key(node_nm)
    d0, price = ph.DEFECT_DENSITY_PER_CM2[key], ph.WAFER_PRICE_USD[key]
    r = ph.WAFER_DIAMETER_MM / 2
    a = ph.YIELD_CLUSTERING
    out = []
    for x in die_mm2.tolist():
        if x <= 0:
            out.append(math.inf)
            continue
        dpw = max(0, int(math.pi * r * r / x - math.pi * ph.WAFER_DIAMETER_MM
                         / math.sqrt(2 * x)))
        good = dpw * (1 + x / 100.0 * d0 / a) ** -a
        out.append(price / good if good > 0 else math.inf)
    return np.array(out, dtype=np.float64)


def _package(dies: int, die_mm2: np.ndarray, footprint: np.ndarray, std
             ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`physical._package_usd` of ``dies`` dies of ``die_mm2`` (arrays)."""
    silicon = dies * die_mm2
    usd = ph.ASSEMBLY_USD + ph.SUBSTRATE_USD_PER_MM2 * ph.SUBSTRATE_AREA_PER_SILICON * (
        silicon + footprint)
    if dies == 1 and not std.on_interposer:
        return usd, np.zeros_like(usd)
    interposer = ph.INTERPOSER_AREA_FACTOR * (silicon + (footprint if std.on_interposer
                                                         else 0.0))
    return (usd + ph.INTERPOSER_USD_PER_MM2 * interposer + ph.CHIPLET_BOND_USD * dies,
            interposer)
