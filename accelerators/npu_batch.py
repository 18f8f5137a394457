"""Many npu designs at once: :class:`~accelerators.npu.NPU` objects equal to the constructor's,
with the quantities that depend on the clock and the DRAM bandwidth computed as arrays.

A population study varies a few of a design's parameters per generation. The designs are
grouped by every parameter except ``clock_hz`` and ``dram_bandwidth_Bps``; one design per group
is built by the constructor and gives what depends on the group only (scratchpad and MAC
energies, laid-out logic and SRAM, leakage, the scratchpad problem, host interface). Over all
designs as arrays, the same formulas as :meth:`NPU.floorplan`,
:func:`memory_standards.memory_system` and :func:`physical.assess` (same operations in the same order: the same IEEE doubles; the
negative-binomial yield's power and the cost rounding taken per element by Python, as there):
the memory devices a bandwidth needs, their PHYs, shoreline, price and power, the chiplet
options and the one that costs least, package, TDP and power density. A design for which
any of these finds a problem (too many devices, no die option, an interposer or power density
past its limit), a bad parameter, or a group the arrays do not cover (a pinned DRAM device
count's bandwidth check) is built by the constructor instead, which gives its exact reason.
:func:`build_batch` keeps the designs as arrays (:class:`NPUBatch`: the cost kernels'
:class:`~accelerators.npu_vector.DesignArrays`, area, cost, TDP and capacity, each design's
parameters) and makes a design's :class:`NPU` object only when asked (:func:`build_npus`
makes them all).
``tests/test_npu_batch.py`` compares every attribute with the constructor's on random designs.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from accelerators import physical as ph
from accelerators.base import HardwareConfig
from accelerators.memory_standards import DEVICE_GB, MemorySystem
from accelerators.npu import NPU
from accelerators.npu_vector import DesignArrays
from dse.errors import DSEError

#: Parameters computed as arrays; every other one makes a group.
CONTINUOUS = ("clock_hz", "dram_bandwidth_Bps")
_BAD = object()


def build_npus(preset: str | None, values: Sequence[dict[str, Any]]) -> list[NPU | None]:
    """``NPU(preset, **v)`` for each ``v`` of ``values``; None where the constructor is needed
    (it raises, names the design's physical problem, or its group is not covered)."""
    batch, slots = build_batch(preset, values)
    return [None if k is None else batch.design(k) for k in slots]


def build_batch(preset: str | None, values: Sequence[dict[str, Any]]
                ) -> tuple["NPUBatch | None", list[int | None]]:
    """The designs ``NPU(preset, **v)`` of ``values`` as one :class:`NPUBatch`, and for each
    ``v`` its index in the batch (None where the constructor is needed: it raises, names the
    design's physical problem, or the design's group is not covered)."""
    n = len(values)
    slots: list[int | None] = [None] * n
    params = NPU.params()
    preset = preset if preset is not None else NPU.DEFAULT_PRESET
    if preset not in NPU.PRESETS or not n:
        return None, slots
    base = {p.name: p.default for p in NPU.PARAMS}
    base.update(NPU.PRESETS[preset])
    present = set().union(*values)   # the parameters any design gives
    ok = ([all(k in params for k in v) for v in values] if present - params.keys()
          else [True] * n)
    cols: dict[str, list] = {}
    for k, default in base.items():   # each parameter coerced once per distinct value
        coerce = params[k].coerce
        if k not in present:
            c = _coerced(coerce, default, k)
            cols[k] = [c] * n
            if c is _BAD:
                ok = [False] * n
            continue
        raw = [v.get(k, default) for v in values]
        if params[k].type is float and params[k].choices is None and \
                all(type(x) is float for x in raw):
            cols[k] = raw   # Param.coerce of a float is the float: its checks as arrays
            x = np.array(raw, dtype=np.float64)
            low, high = params[k].low, params[k].high
            bad = ~np.isfinite(x) | (x < low if low is not None else False) | \
                (x > high if high is not None else False)
            for i in np.flatnonzero(bad).tolist():
                ok[i] = False
            continue
        memo: dict[tuple, Any] = {}
        col = []
        for i, x in enumerate(raw):
            t = type(x)
            key = (t, x) if t is not float or x else (t, repr(x))   # 0.0 and -0.0 apart
            c = memo.get(key)
            if c is None:
                c = memo[key] = _coerced(coerce, x, k)
            if c is _BAD:
                ok[i] = False
            col.append(c)
        cols[k] = col
    names = list(base)
    discrete = [k for k in names if k not in CONTINUOUS]
    groups: dict[tuple, int] = {}
    refs: list[NPU | None] = []
    gid = np.full(n, -1, dtype=np.int64)
    for i, key in enumerate(zip(*[cols[k] for k in discrete])):
        if not ok[i]:
            continue
        g = groups.get(key)
        if g is None:
            g = groups[key] = len(refs)
            refs.append(_reference(preset, discrete, key))
        if refs[g] is not None:
            gid[i] = g
    members = np.flatnonzero(gid >= 0)
    if not len(members):
        return None, slots
    rows = [dict(zip(names, r)) for r in zip(*[cols[k] for k in names])]
    batch = _designs(refs, gid[members], [rows[i] for i in members])
    for k, i in enumerate(members.tolist()):
        if batch.ok[k]:
            slots[i] = k
    return batch, slots


#: Designs that stand for their groups, by (preset, coerced values but CONTINUOUS), for the
#: process (a population's generations draw from the same groups); None: left to the
#: constructor. Designs are never changed once built.
_REFERENCES: dict[tuple, NPU | None] = {}
REFERENCES_KEPT = 4096


def _reference(preset: str, names: list[str], values: tuple) -> NPU | None:
    key = (preset, values)
    if key in _REFERENCES:
        return _REFERENCES[key]
    try:
        ref = NPU(preset, **dict(zip(names, values)))
        ref = ref if _covered(ref) else None
    except DSEError:
        ref = None   # each member raises the same: left to the constructor
    if len(_REFERENCES) >= REFERENCES_KEPT:
        _REFERENCES.clear()
    _REFERENCES[key] = ref
    return ref


def _coerced(coerce, value, name: str):
    try:
        return coerce(value, f"hw.{name}")
    except DSEError:
        return _BAD


def _covered(ref: NPU) -> bool:
    """Whether the arrays cover ``ref``'s group: a bandwidth-sized memory, an ordinary die."""
    fp = ref.floorplan()
    return not (ref.hw.dram_devices or fp.wafer_scale or fp.link_phy_mm2 or fp.link_edge_mm
                or fp.problems or fp.extra_mm2 or fp.off_die_w or fp.link_w)


def _designs(refs: list, g: np.ndarray, rows: list[dict[str, Any]]) -> list[NPU | None]:
    """The designs ``rows``, design ``i`` equal to ``refs[g[i]]`` but for :data:`CONTINUOUS`."""
    n = len(rows)
    used = sorted(set(g.tolist()))
    const: dict[str, dict[int, Any]] = {}

    def put(name: str, j: int, value) -> None:
        const.setdefault(name, {})[j] = value

    for j in used:
        ref = refs[j]
        fp, mem = ref.floorplan(), ref.memory
        std, node = mem.standard, fp.node_nm
        node_scale = ph.tech.area_scale(node) / ph.tech.area_scale(7)
        host_phy, host_mtr, host_edge = ph.HOST_INTERFACES[fp.host_interface]
        key = ph._node_key(node)
        pe_mm2, lane_mm2 = ref._unit_logic_mm2()
        for name, value in (
                ("compute", fp.compute_mm2), ("sram", fp.sram_mm2),
                ("control", ph.control_mm2(fp.compute_mm2, fp.sram_mm2, fp.control_overhead)),
                ("overhead", fp.control_overhead), ("per_cycle_j", _per_cycle_j(ref)),
                ("leakage", fp.leakage_w), ("io_other", host_phy + host_mtr / 65.6 * node_scale),
                ("host_edge", host_edge), ("pinned", fp.dies), ("std_bw", std.bandwidth_Bps),
                ("mem_phy_each", std.phy_area_mm2 + std.controller_area_mm2(node_scale)),
                ("max_devices", std.max_devices), ("shoreline", std.shoreline_mm),
                ("footprint", std.footprint_mm2), ("on_interposer", std.on_interposer),
                ("energy_j", std.energy_j_per_byte), ("phy_pj", std.phy_pj_per_bit),
                ("static_each", std.static_w), ("price_gb", std.price_usd_per_gb),
                ("sustained", std.sustained_fraction), ("cap", mem.capacity_gb_per_device),
                ("d0", ph.DEFECT_DENSITY_PER_CM2[key]), ("wafer_usd", ph.WAFER_PRICE_USD[key]),
                ("es", ph.tech.energy_scale(node)), ("as", ph.tech.area_scale(node)),
                ("pe_mm2", pe_mm2), ("lane_mm2", lane_mm2)):
            put(name, j, value)
    c = {name: np.array([vals.get(j, 0) for j in range(max(used) + 1)])[g]
         for name, vals in const.items()}
    clock = np.array([r["clock_hz"] for r in rows], dtype=np.float64)
    bw_in = np.array([r["dram_bandwidth_Bps"] for r in rows], dtype=np.float64)
    # memory_standards.memory_system (dram_devices 0: the fewest devices that reach bw_in)
    devices = np.maximum(1, np.ceil(bw_in / c["std_bw"] * (1 - 1e-12))).astype(np.int64)
    mem_bw = np.where(bw_in > 0, bw_in, devices * c["std_bw"])
    # NPU.floorplan, then physical.assess
    peak_dyn = c["per_cycle_j"] * clock
    mem_phy = devices * c["mem_phy_each"]
    on_die = (((0 + c["compute"] + c["sram"]) + c["control"]) + mem_phy) + c["io_other"]
    bad = devices > c["max_devices"]
    edge_need = devices * c["shoreline"] + c["host_edge"] + 0.0
    d2d_edge = mem_bw / ph.D2D_BYTES_PER_S_PER_MM
    footprint = devices * c["footprint"]
    on_int = c["on_interposer"].astype(bool)
    K = ph.MAX_CHIPLETS
    area = np.empty((K, n))
    usd = np.empty((K, n))
    dcost = np.empty((K, n))
    fits = np.empty((K, n), dtype=bool)
    for k in range(1, K + 1):
        d2d = d2d_edge if k > 1 else 0.0
        side = (edge_need + 2 * (k - 1) * d2d) / (ph.MEMORY_EDGE_FRACTION * 4 * k)
        area[k - 1] = a = np.maximum(on_die / k + d2d, side * side)
        dcost[k - 1] = _die_cost(a, c["d0"], c["wafer_usd"])
        pkg, interposer = _package(k, a, footprint, on_int)
        usd[k - 1] = k * dcost[k - 1] * (1 + ph.TEST_COST_FRACTION) + pkg
        fits[k - 1] = interposer <= ph.MAX_INTERPOSER_MM2
    valid = area <= ph.RETICLE_MM2
    pinned = c["pinned"].astype(np.int64)
    cols = np.arange(n)
    at_pin = np.clip(pinned - 1, 0, K - 1)
    chosen = np.where((pinned > 0) & valid[at_pin, cols], pinned, 0)
    pool = valid & fits
    pool = np.where(pool.any(0), pool, valid)
    priced = np.where(pool, usd, np.inf)
    best = priced.min(0)
    free = (pinned == 0) & pool.any(0)
    near = pool & (priced <= best + 2e-6)   # a tie after rounding to 6 decimals is this near
    pick = np.argmin(priced, axis=0) + 1
    for i in np.flatnonzero(free & (near.sum(0) > 1)).tolist():
        cand = np.flatnonzero(pool[:, i]).tolist()
        pick[i] = min(cand, key=lambda k: (round(float(usd[k, i]), 6), k + 1)) + 1
    chosen = np.where(free, pick, chosen)
    bad |= chosen == 0
    dies = np.maximum(chosen, 1)
    die_mm2 = area[dies - 1, cols]
    split = dies > 1
    io_other = np.where(split, c["io_other"] + dies * d2d_edge, c["io_other"])
    on_die = np.where(split, on_die + dies * d2d_edge, on_die)
    d2d_j = np.where(split, ph.D2D_PJ_PER_BIT * 8e-12 * (dies - 1) / dies, 0.0)
    pad = dies * die_mm2 > on_die * (1 + 1e-9)
    silicon_cost = dies * dcost[dies - 1, cols]
    package, interposer = _package(dies, die_mm2, footprint, on_int)
    bad |= interposer > ph.MAX_INTERPOSER_MM2
    mem_dynamic = mem_bw * c["energy_j"]
    io_w = mem_bw * (c["phy_pj"] * 8e-12 / 2)
    d2d_w = mem_bw * d2d_j
    static = c["leakage"] + devices * c["static_each"]
    active = (ph.UNCOUNTED_LOGIC_W_PER_MM2_GHZ * (c["compute"] * (1 + c["overhead"])) * clock
              / 1e9 * c["es"] / c["as"])
    tdp = peak_dyn + active + mem_dynamic + d2d_w + static + 0.0 + 0.0
    die_power = peak_dyn + active + io_w + d2d_w + c["leakage"] + 0.0
    silicon = dies * die_mm2
    with np.errstate(divide="ignore", invalid="ignore"):
        density = np.where(silicon > 0, die_power / silicon, 0.0)
    bad |= density > ph.MAX_POWER_DENSITY_W_PER_MM2
    price = devices * c["cap"] * c["price_gb"]
    units = c["pe_mm2"] + c["lane_mm2"]
    act_array = active * c["pe_mm2"] / units
    act_vector = active * c["lane_mm2"] / units
    dram_j = c["energy_j"] + d2d_j
    sustained = mem_bw * c["sustained"]
    pad_mm2 = dies * die_mm2 - on_die
    area_mm2 = ((((0 + c["compute"]) + c["sram"]) + c["control"]) + mem_phy) + io_other
    area_mm2 = np.where(pad, area_mm2 + pad_mm2, area_mm2)   # Physical.area_mm2's sum
    test = ph.TEST_COST_FRACTION
    cost_usd = (((0 + silicon_cost) + test * silicon_cost) + package) + price
    capacity = devices * c["cap"] * DEVICE_GB   # MemorySystem.capacity_bytes
    shared: list = []
    for j in range(max(used) + 1):
        ref = refs[j]
        shared.append(None if ref is None or j not in const["compute"] else (
            {k: v for k, v in vars(ref).items()
             if k not in ("hw", "memory", "_clock", "_bw", "_dram_j", "_active_w",
                          "_physical_cache", "_cache")},
            ref.memory.standard, c_of(const, j)))
    gl = g.tolist()
    # the design arrays (npu_vector.DesignArrays), group values gathered per design
    ints = np.array([[r._rows, r._cols, r._arrays, r._b, r._lanes] if r is not None
                     else [0] * 5 for r in refs[:max(used) + 1]], dtype=np.int64)[g].T
    per_group = np.array([[r._caps["ifmap"], r._caps["filter"], r._caps["ofmap"],
                           r._sram_j["ifmap"], r._sram_j["filter"], r._sram_j["ofmap"],
                           r._reg_j, r._mac_j, r._vec_j] if r is not None else [0.0] * 9
                          for r in refs[:max(used) + 1]], dtype=np.float64)[g].T
    floats = np.vstack([clock[None, :], sustained[None, :], per_group, dram_j[None, :],
                        act_array[None, :], act_vector[None, :]])
    group_df = np.array([None if r is None else r._df for r in refs], dtype=object)
    group_dtype = np.array([None if r is None else r.hw.dtype for r in refs], dtype=object)
    problems = [None if r is None else r._problem for r in refs]
    batch = NPUBatch(rows, ~bad, area_mm2, cost_usd, tdp, capacity)
    batch.arrays = DesignArrays.from_columns(
        batch, ints, floats, group_df[g], group_dtype[g], [problems[j] for j in gl],
        area_mm2, static, capacity)
    batch._parts = (gl, shared, *(x.tolist() for x in (
        devices, mem_bw, mem_phy, io_other, dies, die_mm2, pad, pad_mm2, silicon_cost,
        package, tdp, static, d2d_j, active, act_array, act_vector, price, dram_j, sustained)))
    return batch


class NPUBatch:
    """Designs built together as arrays (:func:`build_batch`): design ``k`` has the coerced
    parameters ``hw[k]``; ``ok[k]`` False where it cannot be built (its constructor says why);
    ``area_mm2``, ``cost_usd``, ``tdp_w`` and ``capacity_bytes`` (its memory) ``(N,)``
    arrays equal to the object's; ``arrays`` the :class:`~accelerators.npu_vector.DesignArrays`
    of all N. :meth:`design` makes design ``k``'s :class:`NPU` object on first use (equal to the
    constructor's; a batch scored as arrays makes none)."""

    def __init__(self, hw: list[dict[str, Any]], ok: np.ndarray, area_mm2: np.ndarray,
                 cost_usd: np.ndarray, tdp_w: np.ndarray, capacity_bytes: np.ndarray):
        self.hw, self.ok = hw, ok.tolist()
        self.area_mm2, self.cost_usd, self.tdp_w = area_mm2, cost_usd, tdp_w
        self.capacity_bytes = capacity_bytes
        self.arrays: Any = None
        self._parts: tuple = ()
        self._objects: dict[int, NPU] = {}

    @classmethod
    def of(cls, designs: Sequence[NPU]) -> "NPUBatch":
        """A batch of designs already built (by the constructor)."""
        phys = [d.physical() for d in designs]
        nan = math.nan
        arrays = DesignArrays(list(designs))
        out = cls([dict(d.hw.items()) for d in designs], np.ones(len(designs), dtype=bool),
                  arrays.area_mm2,
                  np.array([p.cost_usd if p else nan for p in phys], dtype=np.float64),
                  np.array([p.tdp_w if p else nan for p in phys], dtype=np.float64),
                  arrays.capacity_bytes)
        out.arrays = arrays
        out._objects = dict(enumerate(designs))
        return out

    def __len__(self) -> int:
        return len(self.hw)

    def __getitem__(self, k: int) -> NPU:
        return self.design(k)

    def design(self, k: int) -> NPU:
        """Design ``k`` as an :class:`NPU` (made once)."""
        d = self._objects.get(k)
        if d is not None:
            return d
        if not self.ok[k]:
            raise IndexError(f"design {k} of the batch is left to the constructor")
        gl, shared, *cols = self._parts
        nd, mbw, mphy, io, dies, dmm, pd, pmm, sc, pkg, tdp, st, dj, act, aa, av, pr, drj, \
            sus = (x[k] for x in cols)
        r = self.hw[k]
        attrs, std, (compute, sram, control, cap) = shared[gl[k]]
        mem = MemorySystem(std, nd, cap, mbw)
        parts = {"compute": compute, "sram": sram, "control": control, "memory_phy": mphy,
                 "io_other": io}
        if pd:
            parts["pad_limited"] = pmm
        test = ph.TEST_COST_FRACTION
        phys = ph.Physical(area_breakdown_mm2=parts, dies=dies, die_mm2=dmm, memory=mem,
                           cost_breakdown_usd={"dies": sc, "test": test * sc, "package": pkg,
                                               "memory": pr},
                           tdp_w=tdp, static_w=st, d2d_j_per_byte=dj, problem=None,
                           active_w=act)
        d = NPU.__new__(NPU)
        d.__dict__.update(attrs)
        d.hw = HardwareConfig(r)
        d.memory = mem
        d._clock, d._bw = r["clock_hz"], sus
        d._physical_cache = phys
        d._dram_j = drj
        d._active_w = {"array": aa, "vector": av}
        d._cache = {}
        self._objects[k] = d
        return d


def c_of(const: dict, j: int) -> tuple:
    """Group ``j``'s compute, SRAM and control mm^2 and GB per memory device."""
    return const["compute"][j], const["sram"][j], const["control"][j], const["cap"][j]


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


def _die_cost(die_mm2: np.ndarray, d0: np.ndarray, wafer_usd: np.ndarray) -> np.ndarray:
    """:func:`physical.die_cost_usd` per element (the yield's power by Python's ``**``, as
    there)."""
    r = ph.WAFER_DIAMETER_MM / 2
    a = ph.YIELD_CLUSTERING
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(die_mm2 > 0, die_mm2, 1.0)
        dpw = np.maximum(0.0, np.trunc(math.pi * r * r / x - math.pi * ph.WAFER_DIAMETER_MM
                                       / np.sqrt(2 * x)))
        dpw = np.where(die_mm2 > 0, dpw, 0.0)
        base = 1 + x / 100.0 * d0 / a
        good = dpw * np.array([v ** -a for v in base.tolist()], dtype=np.float64)
        return np.where(good > 0, wafer_usd / np.where(good > 0, good, 1.0), math.inf)


def _package(dies, die_mm2: np.ndarray, footprint: np.ndarray, on_int: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`physical._package_usd` of ``dies`` dies of ``die_mm2`` (arrays)."""
    silicon = dies * die_mm2
    usd = ph.ASSEMBLY_USD + ph.SUBSTRATE_USD_PER_MM2 * ph.SUBSTRATE_AREA_PER_SILICON * (
        silicon + footprint)
    alone = (np.asarray(dies) == 1) & ~on_int
    interposer = ph.INTERPOSER_AREA_FACTOR * (silicon + np.where(on_int, footprint, 0.0))
    return (np.where(alone, usd, usd + ph.INTERPOSER_USD_PER_MM2 * interposer
                     + ph.CHIPLET_BOND_USD * dies),
            np.where(alone, 0.0, interposer))
