"""Pure cost formulas of the multi-resolution grid encoding (instant-NGP), for the NGPC
encoding engine and for a GPU running instant-NGP's encoding kernel.

No template, no simulator: plain functions of the encoding's levels and a few hardware numbers,
so that the ``neural_graphics`` template, the reproduction and the tests share one set of
formulas.

Per point and level the encoding looks up the ``2**dims`` corners of the point's cell (8 in 3-D,
4 in 2-D) and blends them with (tri/bi)linear weights [P Mueller et al., "Instant Neural
Graphics Primitives with a Multiresolution Hash Encoding", SIGGRAPH 2022, sec. 3]. A level's
table really holds ``min(2**T, (N_l + 1)**dims)`` rows: a coarse level whose vertex grid fits is
indexed directly, a finer one is hashed [P same, sec. 3; :mod:`workloads.hashgrid_op`].

Memory granularity: corners that differ only in x sit in neighbouring rows, both for a direct
(row-major) level and for a hashed one, because the x prime is 1 [P instant-NGP eq. 4: "pi_1 = 1
for better cache coherence"]; with ``F x bytes = 4`` B rows, such a pair falls into one 32-B
sector unless it straddles a sector boundary (1 time in 8 for 4-B rows, 8 rows per sector), so
a point-level touches ``corners / 2 x 9 / 8`` sectors (:func:`sectors_per_point_level`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from accelerators.dram_timing import GDDR6, HBM2, random_access_Bps
from dse.errors import BadInput
from workloads.hashgrid_op import level_resolutions

#: Bytes of one DRAM / L2 access granule, B: a 32-B sector, the unit in which NVIDIA L2 caches
#: and GDDR6/6X channels move data (BL16 x 16-bit channel = 32 B) [D Micron GDDR6X TN-ED-06;
#: NVIDIA CUDA C++ Best Practices Guide, "32-byte segments"].
SECTOR_BYTES = 32


@dataclass(frozen=True)
class GridLevel:
    """One level of a grid encoding as the hardware sees it.

    ``resolution``: cells per axis; ``rows``: table rows the level really uses; ``direct``: True
    when indexed row-major (a dense level), False when hashed; ``row_bytes``: bytes of one row
    (features x bytes per feature)."""

    index: int
    resolution: int
    rows: int
    direct: bool
    row_bytes: int

    @property
    def footprint_bytes(self) -> int:
        """Bytes of this level's table actually touched, B."""
        return self.rows * self.row_bytes


@dataclass(frozen=True)
class Encoding:
    """The grid encoding of one ``hashgrid`` op: dims, features and its levels."""

    dims: int
    features: int
    bytes_per_feature: int
    levels: tuple[GridLevel, ...]

    @property
    def corners(self) -> int:
        """Corners looked up per point and level: 2**dims."""
        return 2 ** self.dims

    @property
    def footprint_bytes(self) -> int:
        return sum(level.footprint_bytes for level in self.levels)


def encoding_of(attrs: Mapping[str, Any], table_shape: Sequence[int] | None,
                bytes_per_feature: int) -> Encoding:
    """The :class:`Encoding` described by a ``hashgrid`` op's attrs (``dims``, ``levels``,
    ``features``, ``log2_table_size``, ``base_resolution``, ``per_level_scale``) and the shape
    of its table input ``[levels, rows, features]`` (the allocated rows; ``2**log2_table_size``
    when the shape is unknown). Raises :class:`BadInput` on a malformed op."""
    try:
        dims = int(attrs["dims"])
        n_levels = int(attrs["levels"])
        features = int(attrs["features"])
        base = int(attrs["base_resolution"])
        scale = float(attrs.get("per_level_scale") or 0.0)
        log2_t = int(attrs.get("log2_table_size", 0))
    except (KeyError, TypeError, ValueError):
        raise BadInput("hashgrid attrs", dict(attrs), "expected dims, levels, features, "
                       "base_resolution, log2_table_size") from None
    if dims < 1 or n_levels < 1 or features < 1 or base < 1 or bytes_per_feature < 1:
        raise BadInput("hashgrid attrs", dict(attrs), "dims, levels, features and "
                       "base_resolution must be >= 1")
    if scale < 1.0:
        finest = int(attrs.get("finest_resolution", base))
        scale = (math.exp(math.log(max(finest, base) / base) / (n_levels - 1))
                 if n_levels > 1 else 1.0)
    rows_alloc = int(table_shape[1]) if table_shape is not None and len(table_shape) == 3 \
        else 2 ** log2_t
    if rows_alloc < 1:
        raise BadInput("hashgrid table", table_shape, "expected at least one row per level")
    row_bytes = features * bytes_per_feature
    levels = []
    for index, resolution in enumerate(level_resolutions(n_levels, base, scale)):
        vertices = (resolution + 1) ** dims
        direct = vertices <= rows_alloc
        levels.append(GridLevel(index=index, resolution=resolution,
                                rows=vertices if direct else rows_alloc, direct=direct,
                                row_bytes=row_bytes))
    return Encoding(dims=dims, features=features, bytes_per_feature=bytes_per_feature,
                    levels=tuple(levels))


def sectors_per_point_level(dims: int, row_bytes: int) -> float:
    """32-B sectors one point touches in one level: x-adjacent corner pairs share a sector
    (module docstring), so ``2**(dims-1)`` pairs, each straddling a sector boundary with
    probability ``row_bytes / SECTOR_BYTES`` (a pair of rows of ``row_bytes`` at a uniformly
    random row offset); rows wider than half a sector need a sector per corner."""
    if 2 * row_bytes > SECTOR_BYTES:
        return float(2 ** dims * math.ceil(row_bytes / SECTOR_BYTES))
    pairs = 2 ** (dims - 1)
    return pairs * (1.0 + row_bytes / SECTOR_BYTES)


def resident_fraction(footprint_bytes: float, capacity_bytes: float) -> float:
    """Share of uniformly spread look-ups that hit an on-chip store of ``capacity_bytes``
    holding as much of a ``footprint_bytes`` table as fits: min(1, capacity / footprint).
    Hashed look-ups are spread uniformly over the table by design [P instant-NGP sec. 3];
    for direct levels this ignores the spatial coherence of neighbouring samples, so it is an
    upper bound on misses."""
    if footprint_bytes <= 0:
        return 1.0
    return min(1.0, max(capacity_bytes, 0.0) / footprint_bytes)


def interpolation_flops(dims: int, features: int) -> int:
    """FLOPs to blend one point-level: per corner ``dims - 1`` multiplies for its weight and one
    multiply-add per feature (2 FLOPs), plus ``2 x dims`` for the fractional offsets and their
    complements. The capture counts only the blend, ``2 x corners x features``."""
    corners = 2 ** dims
    return corners * (dims - 1 + 2 * features) + 2 * dims


def hash_int_ops(dims: int, direct: bool) -> int:
    """Integer operations to index the corners of one point-level: a hashed corner takes
    ``dims`` multiplies, ``dims - 1`` XORs and one AND (mask to 2**T) [P instant-NGP eq. 4];
    a direct one ``dims - 1`` multiply-adds (row-major index) counted as 2 ops each, plus the
    floor/clamp of the cell (``2 x dims`` per point-level)."""
    corners = 2 ** dims
    per_corner = 2 * (dims - 1) if direct else 2 * dims
    return corners * per_corner + 2 * dims


# --------------------------------------------------------------------------- NGPC engine
@dataclass(frozen=True)
class EngineConfig:
    """One NFP's encoding engine: ``units`` level units, each with ``sram_bytes`` of grid SRAM
    and ``lookups_per_cycle`` corner reads per cycle (SRAM banks and hash/interpolation lanes),
    and the DRAM granule ``sector_bytes`` a spilled look-up fetches."""

    units: int
    sram_bytes: int
    lookups_per_cycle: int
    sector_bytes: int = SECTOR_BYTES


@dataclass(frozen=True)
class EngineCost:
    """What one NFP's encoding engine does for ``points`` points: ``cycles`` (the slowest unit),
    look-ups served on chip and from DRAM, SRAM and DRAM bytes, hash integer ops and
    interpolation FLOPs, and the per-level resident fraction."""

    cycles: float
    lookups: float
    sram_bytes: float
    dram_bytes: float
    int_ops: float
    flops: float
    resident: tuple[float, ...]
    #: the part of ``dram_bytes`` spilled from hashed levels (random addresses)
    dram_hashed_bytes: float = 0.0

    @property
    def spilled_levels(self) -> int:
        return sum(1 for r in self.resident if r < 1.0)


#: Pipeline depth of an encoding unit, cycles [E]: hash (multiply, XOR, mask: 3 stages), SRAM
#: read (2), weight and blend (3 multiply-add stages) — paid once per op (batch).
ENGINE_PIPELINE_CYCLES = 8


def level_assignment(n_levels: int, units: int) -> list[list[int]]:
    """Levels each unit of an engine runs: level ``l`` on unit ``l mod units`` (a unit runs
    its levels one after the other when there are more levels than units)."""
    if units < 1:
        raise BadInput("encoding_units", units, "expected >= 1")
    out: list[list[int]] = [[] for _ in range(units)]
    for level in range(n_levels):
        out[level % units].append(level)
    return out


def engine_cost(enc: Encoding, points: float, cfg: EngineConfig) -> EngineCost:
    """Cost of encoding ``points`` points on one NFP's engine.

    Each unit serves its levels' look-ups at ``lookups_per_cycle``; the tables of a unit's
    levels share its grid SRAM, and a level whose tables exceed it keeps ``resident_fraction``
    of its look-ups on chip and fetches the rest from DRAM, one ``sector_bytes`` granule per
    x-adjacent pair (:func:`sectors_per_point_level`) — the spill the issue asks the model to
    show. The engine's time is its slowest unit's (units run in parallel)."""
    if points < 0:
        raise BadInput("points", points, "expected >= 0")
    corners = enc.corners
    resident = [1.0] * len(enc.levels)
    unit_cycles = []
    for levels in level_assignment(len(enc.levels), cfg.units):
        footprint = sum(enc.levels[i].footprint_bytes for i in levels)
        frac = resident_fraction(footprint, cfg.sram_bytes)
        for i in levels:
            resident[i] = frac
        unit_cycles.append(len(levels) * points * corners / cfg.lookups_per_cycle)
    lookups = points * corners * len(enc.levels)
    sram_bytes = dram_bytes = hashed_bytes = 0.0
    int_ops = flops = 0.0
    for level, frac in zip(enc.levels, resident):
        sectors = sectors_per_point_level(enc.dims, level.row_bytes)
        sram_bytes += points * corners * frac * level.row_bytes
        spill = points * sectors * (1.0 - frac) * cfg.sector_bytes
        dram_bytes += spill
        hashed_bytes += 0.0 if level.direct else spill
        int_ops += points * hash_int_ops(enc.dims, level.direct)
        flops += points * interpolation_flops(enc.dims, enc.features)
    cycles = (max(unit_cycles) if unit_cycles else 0.0) + (ENGINE_PIPELINE_CYCLES if points else 0)
    return EngineCost(cycles=cycles, lookups=lookups, sram_bytes=sram_bytes,
                      dram_bytes=dram_bytes, int_ops=int_ops, flops=flops,
                      resident=tuple(resident), dram_hashed_bytes=hashed_bytes)


def min_sram_bytes(enc: Encoding, cfg: EngineConfig) -> int:
    """The smallest grid SRAM per unit that can run a level at all: the sectors of the look-ups
    in flight in its pipeline (``lookups_per_cycle x ENGINE_PIPELINE_CYCLES`` sectors, or the
    rows when a row is wider than a sector), which a spilled look-up lands in. A larger SRAM
    that still holds less than a level's table runs, spilling its misses to DRAM
    (:func:`engine_cost`); a smaller one cannot hold one level's working set."""
    row = max((lv.row_bytes for lv in enc.levels), default=0)
    return cfg.lookups_per_cycle * ENGINE_PIPELINE_CYCLES * max(cfg.sector_bytes, row)


# ------------------------------------------------------------------------- MLP engine
def mlp_layer_cycles(points: float, k: int, n: int, rows: int, cols: int) -> float:
    """Cycles of one ``[points, k] x [k, n]`` layer on a ``rows x cols`` output-stationary MAC
    array: a tile of ``rows`` points x ``cols`` neurons accumulates over ``k`` cycles, then
    drains while the next tile fills (``rows + cols`` cycles once per layer) [E, SCALE-Sim's
    OS dataflow: per tile ``k`` accumulation steps]. Layers narrower than ``cols`` leave
    columns idle (a 64 -> 16 output layer uses a quarter of a 64-wide array)."""
    if points <= 0:
        return 0.0
    tiles = math.ceil(points / rows) * math.ceil(n / cols)
    return tiles * k + rows + cols


# ------------------------------------------------------------------- GPU hash kernel
@dataclass(frozen=True)
class GpuCaches:
    """The memory system a GPU's encoding kernel sees. ``l1_bytes``: per SM; ``l2_Bps``: L2
    read bandwidth; ``l1_Bps``: all SMs' L1 bandwidth; ``int_ops_per_s``: INT32 throughput."""

    name: str
    sms: int
    l1_bytes: int
    l2_bytes: int
    l1_Bps: float
    l2_Bps: float
    dram_Bps: float
    int_ops_per_s: float
    #: random 32-B sector reads from DRAM, B/s (row misses, activation-limited)
    dram_random_Bps: float = 0.0

    @property
    def dram_random_efficiency(self) -> float:
        """Share of ``dram_Bps`` random sector reads reach (1 when not given)."""
        return min(1.0, self.dram_random_Bps / self.dram_Bps) if self.dram_random_Bps else 1.0


#: Achieved fraction of DRAM bandwidth for the sector reads of a dense-indexed level
#: (dimensionless) [E: neighbouring points read neighbouring rows, so most reads hit an open
#: row; the usual 60-70 % for scattered sector traffic with row locality]. Hashed levels
#: scatter their look-ups over the whole table and are activation-limited instead
#: (``GpuCaches.dram_random_Bps``) [P instant-NGP Sec. 3: coarse levels are indexed 1:1, fine
#: ones through the spatial hash].
DRAM_COHERENT_EFFICIENCY = 0.65


#: Caches of the GPUs whose instant-NGP encoding kernel is modelled here.
#: RTX 3090 (GA102): 82 SMs, 128 KB L1/shared per SM, 6 MB L2, 936 GB/s GDDR6X, boost clock
#: 1.695 GHz [D NVIDIA Ampere GA102 whitepaper]; 64 INT32 lanes per SM [D same: 2 x 16 INT32
#: of the 4 x 32 datapaths] -> 82 x 64 x 1.695e9 = 8.9e12 int ops/s; L1 128 B/clk/SM [D same]
#: -> 82 x 128 x 1.695e9 = 17.8 TB/s; L2 read bandwidth 2.0 TB/s [E: 12 L2 slices (one per
#: 32-bit controller [D]) x 2 x 64 B/clk x 1.695 GHz = 2.6 TB/s peak, about 75% reached by
#: random 32-B sector reads].
#: A100 SXM4 (GA100): 108 SMs, 192 KB L1, 40 MB L2, 2.04 TB/s HBM2e, 1.41 GHz [D A100
#: whitepaper]; L2 5120 B/clk [D same] x 1.41 GHz x 0.75 = 5.4 TB/s [E, same 75%].
#: Random sector reads from DRAM are activation-limited (:func:`dram_timing.random_access_Bps`):
#: the 3090's 24 x16 GDDR6X channels (12 x32 devices, two channels each [D GA102 whitepaper:
#: 384-bit bus]) with 16 banks each and GDDR6's row timings in ns (tRRD 6, tFAW 22, tRAS 36,
#: tRP 16 [R DRAMsim3 GDDR6_8Gb_x16, dram_timing.GDDR6]; GDDR6X's taken as GDDR6's [E]):
#: 24 x 32 B / 6 ns = 128 GB/s, 13.7 % of 936 GB/s. The A100's 40 HBM2e channels (5 stacks x
#: 8) with HBM2's timings (tFAW 30 of 4 ACTs [R DRAMsim3 HBM2_8Gb_x128]): 171 GB/s [E: HBM2e
#: taken as HBM2].
GPU_CACHES = {
    "rtx3090": GpuCaches("rtx3090", sms=82, l1_bytes=128 * 1024, l2_bytes=6 * 1024 ** 2,
                         l1_Bps=82 * 128 * 1.695e9, l2_Bps=2.0e12, dram_Bps=936e9,
                         int_ops_per_s=82 * 64 * 1.695e9,
                         dram_random_Bps=24 * random_access_Bps(GDDR6, SECTOR_BYTES, 16)),
    "a100": GpuCaches("a100", sms=108, l1_bytes=192 * 1024, l2_bytes=40 * 1024 ** 2,
                      l1_Bps=108 * 128 * 1.41e9, l2_Bps=5120 * 1.41e9 * 0.75, dram_Bps=2.039e12,
                      int_ops_per_s=108 * 64 * 1.41e9,
                      dram_random_Bps=40 * random_access_Bps(HBM2, SECTOR_BYTES, 16)),
}

#: Share of L2 a level's table can keep while the kernel streams its inputs and outputs
#: through the same cache (dimensionless) [E].
L2_TABLE_SHARE = 0.75
#: Share of an SM's L1 a level's table can keep (the rest is shared memory and the kernel's
#: streaming data) (dimensionless) [E].
L1_TABLE_SHARE = 0.5
@dataclass(frozen=True)
class GpuEncodeCost:
    """The GPU encoding kernel's time (s) and bytes served by L1, L2 and DRAM for one op."""

    time_s: float
    l1_bytes: float
    l2_bytes: float
    dram_bytes: float
    int_ops: float
    bound: str


def gpu_encode_cost(enc: Encoding, points: float, gpu: GpuCaches,
                    io_bytes: float = 0.0) -> GpuEncodeCost:
    """Time of instant-NGP's encoding kernel on ``gpu`` for ``points`` points.

    instant-NGP runs the encoding level by level (all points of a batch on one level, then the
    next) so that one level's table stays in cache [P instant-NGP sec. 4, "we schedule the
    computation to look up the first level for all inputs before moving on"]. Per level, a
    table that fits half an SM's L1 is served by L1; otherwise look-ups go to L2, which keeps
    ``resident_fraction(footprint, L2_TABLE_SHARE x L2)`` of them, the rest coming from DRAM
    at :data:`DRAM_COHERENT_EFFICIENCY` for a dense-indexed level and at the
    activation-limited random-read rate (``gpu.dram_random_Bps``) for a hashed one. Each
    level's time is the largest of its L1, L2, DRAM and integer-op times (they overlap across
    warps); ``io_bytes`` (positions in, features out) stream through DRAM on top."""
    l1 = l2 = dram = ops = 0.0
    time_s = 0.0
    bound = "memory"
    for level in enc.levels:
        sectors = points * sectors_per_point_level(enc.dims, level.row_bytes)
        level_ops = points * hash_int_ops(enc.dims, level.direct)
        ops += level_ops
        if level.footprint_bytes <= L1_TABLE_SHARE * gpu.l1_bytes:
            b1, b2, bd = sectors * SECTOR_BYTES, 0.0, 0.0
        else:
            hit = resident_fraction(level.footprint_bytes, L2_TABLE_SHARE * gpu.l2_bytes)
            b1, b2, bd = 0.0, sectors * SECTOR_BYTES, sectors * (1 - hit) * SECTOR_BYTES
        l1, l2, dram = l1 + b1, l2 + b2, dram + bd
        times = {"l1": b1 / gpu.l1_Bps, "l2": b2 / gpu.l2_Bps,
                 "dram": bd / (gpu.dram_Bps * (DRAM_COHERENT_EFFICIENCY if level.direct
                                               else gpu.dram_random_efficiency)),
                 "compute": level_ops / gpu.int_ops_per_s}
        worst = max(times, key=times.get)
        time_s += times[worst]
        bound = "compute" if worst == "compute" else "memory"
    time_s += io_bytes / gpu.dram_Bps
    dram += io_bytes
    return GpuEncodeCost(time_s=time_s, l1_bytes=l1, l2_bytes=l2, dram_bytes=dram,
                         int_ops=ops, bound=bound)
