"""Closed-form costs of collectives and matrix algorithms on a 2-D core mesh under PLMR.

The PLMR model (He et al., "WaferLLM: Large Language Model Inference at Wafer Scale",
OSDI 2025 [P]) describes a wafer-scale mesh by four properties: massive **P**arallelism (10^5-10^6
cores, each overlapping data in, data out, compute and memory), non-uniform **L**atency (a
message that crosses ``hops`` links and ``stages`` software routing stages takes
``alpha * hops + beta * stages``; across a W x H region the worst case is
``alpha * (W + H) + beta * r``), constrained local **M**emory (tens of KB per core) and limited
**R**outing (fewer than 32 routing paths per core on WSE-2; a pattern that needs more must relay
through software stages, each paying ``beta``, or cannot be built).

Every function here is O(1) in the number of cores: it costs a whole region (or every line of
it) at once from the region's width and height, never by visiting cores. Costs are in cycles of
the core clock; element counts are per core unless a name says otherwise.

Algorithms (WaferLLM Table of GEMM and all-reduce algorithms [P]; REFERENCES.md):

* GEMM on a W x H grid, the K dimension cut into ``S = max(W, H)`` chunks, ``S`` compute-shift
  steps, communication overlapped with the previous step's compute (double buffering):
  ``meshgemm`` (interleaved ring: every shift is at most 2 hops; O(1) paths; a ``ceil(S/2)``-shift
  alignment first), ``cannon`` (neighbour shifts whose wrap-around crosses the whole line, so
  each step waits ``alpha * (S-1)``; O(1) paths), ``summa`` (each step broadcasts a tile along
  every row and column from a different root; two ways to route it, ``Fabric.summa_broadcast``:
  ``relay`` gives every root its own multicast route, O(W + H) paths, so relays on a real core
  (the paper's characterisation); ``switch`` keeps O(1) routes per axis and moves the root by
  reconfiguring them each step, one extra routing stage per step), ``allgather`` (gather whole
  row/column panels, then one local GEMM; O(W + H) paths and O(1/N) memory).
* All-reduce of a vector along a line of ``n`` cores: ``pipeline`` (chain to the end, then
  broadcast back: 2(n-1) hops, n stages), ``ring`` (reduce-scatter + all-gather on an
  interleaved ring: 2(n-1) steps of <= 2 hops and one stage each), ``ktree`` (K levels of
  two-sided chains to a middle root, fan-in ceil(n^(1/K)); about K * n^(1/K) / 2 stages and
  n hops; K + 1 paths at the root).
* GEMV (MeshGEMV): the weight tile-partitioned over the region, a local GEMV on every core,
  then an all-reduce of the partial output along the reduction axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dse.errors import InfeasibleDesign

GEMM_ALGORITHMS = ("meshgemm", "cannon", "summa", "allgather")
ALLREDUCE_ALGORITHMS = ("ktree", "ring", "pipeline")

#: Routing paths per core each pattern needs [P WaferLLM's algorithm table: O(1) for MeshGEMM
#: and Cannon, O(N) for SUMMA / all-gather, K + 1 at a K-tree root; E for the constants]:
#: a 1-D shift needs an in, an out and (interleaved ring, or Cannon's wrap-around) one
#: pass-through path per dimension; a chain all-reduce needs in, out and the broadcast.
SHIFT_PATHS_PER_DIM = 3
CHAIN_ALLREDUCE_PATHS = 3
RING_ALLREDUCE_PATHS = 3
#: SUMMA broadcast routings: ``switch`` (O(1) routes per axis, re-pointed at each step's root)
#: and ``relay`` (a static multicast route per root, O(W + H) paths per core).
SUMMA_BROADCASTS = ("switch", "relay")
#: Routing stages a ``switch`` SUMMA step adds over a plain multicast: the root's control
#: message that re-points the axis's routes before the tile follows it [E].
SUMMA_SWITCH_STAGES = 1


@dataclass(frozen=True)
class Fabric:
    """What the PLMR costs need to know about a mesh.

    ``alpha_cycles``: cycles per hop. ``beta_cycles``: cycles per software routing stage.
    ``link_elems_per_cycle``: elements a link carries per cycle, one direction.
    ``macs_per_cycle``: multiply-accumulates a core does per cycle at the data type used.
    ``routing_paths``: routing paths a core has for this pattern; ``relay``: whether a pattern
    that needs more may relay through software stages (else it is infeasible).
    ``summa_broadcast``: how SUMMA routes its per-step broadcasts, one of
    :data:`SUMMA_BROADCASTS` (see the module docstring).
    ``vector_op_cycles``: issue cost of one vector (DSD) instruction of a local tile product,
    cycles on top of its elements (0: a tile product runs at the datapath's peak).
    """

    alpha_cycles: float
    beta_cycles: float
    link_elems_per_cycle: float
    macs_per_cycle: float
    routing_paths: int
    relay: bool = True
    summa_broadcast: str = "switch"
    vector_op_cycles: float = 0.0


@dataclass(frozen=True)
class MeshCost:
    """The cost of one pattern on a region.

    ``cycles``: latency, cycles. ``compute_cycles``: the part spent in local arithmetic.
    ``hops`` / ``stages``: on the critical path. ``paths``: routing paths per core needed.
    ``relay_factor``: routing stages multiplied because ``paths`` exceeded the core's
    (1 when it fits). ``elem_hops``: elements x links crossed, summed over the region (for
    network energy). ``macs``: multiply-accumulates summed over the region.
    ``buffer_elems``: scratch elements per core the algorithm holds at once.
    """

    cycles: float = 0.0
    compute_cycles: float = 0.0
    hops: float = 0.0
    stages: float = 0.0
    paths: int = 0
    relay_factor: int = 1
    elem_hops: float = 0.0
    macs: float = 0.0
    buffer_elems: float = 0.0

    def then(self, other: "MeshCost") -> "MeshCost":
        """``self`` followed by ``other`` (latencies add; paths and buffers are the larger)."""
        return MeshCost(
            cycles=self.cycles + other.cycles,
            compute_cycles=self.compute_cycles + other.compute_cycles,
            hops=self.hops + other.hops, stages=self.stages + other.stages,
            paths=max(self.paths, other.paths),
            relay_factor=max(self.relay_factor, other.relay_factor),
            elem_hops=self.elem_hops + other.elem_hops, macs=self.macs + other.macs,
            buffer_elems=max(self.buffer_elems, other.buffer_elems))

    def times(self, count: float) -> "MeshCost":
        """``count`` back-to-back repetitions of ``self``."""
        return MeshCost(cycles=self.cycles * count, compute_cycles=self.compute_cycles * count,
                        hops=self.hops * count, stages=self.stages * count, paths=self.paths,
                        relay_factor=self.relay_factor, elem_hops=self.elem_hops * count,
                        macs=self.macs * count, buffer_elems=self.buffer_elems)


# --- PLMR primitives -------------------------------------------------------------------------

def plmr_latency_cycles(f: Fabric, hops: float, stages: float) -> float:
    """Latency of a message crossing ``hops`` links and ``stages`` routing stages, cycles."""
    return f.alpha_cycles * hops + f.beta_cycles * stages


def worst_case_latency_cycles(f: Fabric, width: int, height: int, stages: float) -> float:
    """PLMR's worst-case latency across a ``width`` x ``height`` region: alpha(W + H) + beta r."""
    return f.alpha_cycles * (width + height) + f.beta_cycles * stages


def relay_factor(f: Fabric, paths_needed: int, what: str) -> int:
    """How many times each routing stage of a pattern is paid when it needs ``paths_needed``
    routing paths per core: 1 if they fit, else ``ceil(needed / available)`` (the pattern is
    cut into segments that reuse the core's paths, joined by software relays). Raises
    :class:`InfeasibleDesign` if relays are not allowed."""
    if paths_needed <= f.routing_paths:
        return 1
    if not f.relay:
        raise InfeasibleDesign(
            f"{what} needs {paths_needed} routing paths per core but a core has "
            f"{f.routing_paths} and relays are off")
    return math.ceil(paths_needed / f.routing_paths)


def stream_cycles(f: Fabric, elems: float) -> float:
    """Cycles to push ``elems`` elements through one link."""
    return elems / f.link_elems_per_cycle


def compute_cycles(f: Fabric, macs_per_core: float) -> float:
    """Cycles one core needs for ``macs_per_core`` multiply-accumulates (or element ops)."""
    return macs_per_core / f.macs_per_cycle


def tile_product_cycles(f: Fabric, ops: float, length: float,
                        work_fraction: float = 1.0) -> float:
    """Cycles of a local tile product issued as ``ops`` vector instructions of ``length``
    multiply-accumulates each (WaferLLM's kernels: a GEMM tile [mt, kt] x [kt, nt] is kt x nt
    ``@fmach`` over mt elements, a GEMV tile kt over nt): the elements at the datapath's rate
    plus ``vector_op_cycles`` per instruction."""
    return ops * (length * work_fraction / f.macs_per_cycle + f.vector_op_cycles)


def _cdiv(a: float, b: float) -> int:
    return -(-int(a) // int(b)) if b > 0 else 0


# --- point-to-point patterns -----------------------------------------------------------------

def neighbour_shift(f: Fabric, elems: float, hops: int = 1, lines: int = 1,
                    cores_per_line: int = 1) -> MeshCost:
    """Every core sends ``elems`` to a core ``hops`` links away (concurrently): an in and an out
    path per core, plus one pass-through path per intermediate core."""
    paths = hops + 1
    r = relay_factor(f, paths, "a neighbour shift")
    cycles = plmr_latency_cycles(f, hops, r) + stream_cycles(f, elems)
    return MeshCost(cycles=cycles, hops=hops, stages=r, paths=paths, relay_factor=r,
                    elem_hops=elems * hops * lines * cores_per_line)


def broadcast(f: Fabric, n: int, elems: float, lines: int = 1) -> MeshCost:
    """One core multicasts ``elems`` to the other ``n - 1`` cores of its line (hardware
    multicast: one routing stage, the receive), on ``lines`` lines at once."""
    if n <= 1:
        return MeshCost()
    hops = n - 1
    cycles = plmr_latency_cycles(f, hops, 1) + stream_cycles(f, elems)
    return MeshCost(cycles=cycles, hops=hops, stages=1, paths=2,
                    elem_hops=elems * (n - 1) * lines)


# --- all-reduce along a line -------------------------------------------------------------------

def ktree_segments(n: int, k: int) -> list[int]:
    """Participants per level of a K-level tree over ``n`` cores: fan-in ``ceil(n^(1/K))`` at
    every level but the last, which takes the remaining roots."""
    if n <= 1:
        return []
    k = max(1, min(int(k), n))
    g = max(2, math.ceil(n ** (1.0 / k) - 1e-9))
    segments, remaining = [], n
    for _ in range(k - 1):
        if remaining <= g:
            break
        segments.append(g)
        remaining = _cdiv(remaining, g)
    segments.append(remaining)
    return segments


def ktree_stages(n: int, k: int) -> int:
    """Routing stages of a K-tree reduce: each level is a two-sided chain to a middle root,
    ``ceil((s - 1) / 2)`` stages for ``s`` participants (about K n^(1/K) / 2 in all)."""
    return sum(math.ceil((s - 1) / 2) for s in ktree_segments(n, k))


def allreduce(f: Fabric, algorithm: str, n: int, elems: float, k: int = 2,
              lines: int = 1) -> MeshCost:
    """All-reduce (sum, result on every core) of ``elems`` elements per core along a line of
    ``n`` cores, on ``lines`` lines at once. Chains stream wavelets, so a message's elements
    pipeline through the stages; the ring's steps are separate messages."""
    if n <= 1 or elems <= 0:
        return MeshCost()
    if algorithm == "pipeline":
        paths = CHAIN_ALLREDUCE_PATHS
        r = relay_factor(f, paths, "a pipeline all-reduce")
        hops, stages = 2 * (n - 1), n * r
        cycles = plmr_latency_cycles(f, hops, stages) + 2 * stream_cycles(f, elems)
        return MeshCost(cycles=cycles, hops=hops, stages=stages, paths=paths, relay_factor=r,
                        elem_hops=2 * n * elems * lines)
    if algorithm == "ring":
        paths = RING_ALLREDUCE_PATHS
        r = relay_factor(f, paths, "a ring all-reduce")
        steps = 2 * (n - 1)
        hops_per_step = min(2, n - 1)
        chunk = math.ceil(elems / n)
        step = plmr_latency_cycles(f, hops_per_step, r) + stream_cycles(f, chunk)
        return MeshCost(cycles=steps * step, hops=steps * hops_per_step, stages=steps * r,
                        paths=paths, relay_factor=r,
                        elem_hops=steps * n * chunk * hops_per_step * lines)
    if algorithm == "ktree":
        segments = ktree_segments(n, k)
        paths = len(segments) + 1
        r = relay_factor(f, paths, f"a {len(segments)}-tree all-reduce")
        spacing, reduce_hops, reduce_stages = 1, 0, 0
        for s in segments:
            chain = math.ceil((s - 1) / 2)
            reduce_hops += chain * spacing
            reduce_stages += chain
            spacing *= s
        bcast_hops = math.ceil((n - 1) / 2)
        hops = reduce_hops + bcast_hops
        stages = (reduce_stages + 1) * r
        cycles = plmr_latency_cycles(f, hops, stages) + 2 * stream_cycles(f, elems)
        return MeshCost(cycles=cycles, hops=hops, stages=stages, paths=paths, relay_factor=r,
                        elem_hops=(len(segments) + 1) * n * elems * lines)
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}")


# --- matrix kernels ---------------------------------------------------------------------------

def gemv(f: Fabric, rows: int, k: int, n: int, width: int, height: int,
         allreduce_algorithm: str = "ktree", ktree_k: int = 2) -> MeshCost:
    """MeshGEMV of ``rows`` vectors [rows, k] x [k, n] on a ``width`` x ``height`` region.

    The weight is tiled ``ceil(k / height)`` x ``ceil(n / width)`` per core; every core does its
    local GEMV, then the partial outputs (``rows * ceil(n / width)`` per core) are all-reduced
    along the ``height`` axis, on all ``width`` columns at once, leaving the output replicated
    down each column (ready for the next GEMV, whose weight is laid out transposed).
    """
    kt, nt = _cdiv(k, height), _cdiv(n, width)
    local_cycles = tile_product_cycles(f, rows * kt, nt)
    local = MeshCost(cycles=local_cycles, compute_cycles=local_cycles,
                     macs=float(rows) * k * n, buffer_elems=rows * (kt + nt))
    return local.then(allreduce(f, allreduce_algorithm, height, rows * nt, ktree_k, lines=width))


def gemm(f: Fabric, algorithm: str, m: int, k: int, n: int, width: int, height: int,
         batch: int = 1, work_fraction: float = 1.0) -> MeshCost:
    """[batch, m, k] x [batch, k, n] on a ``width`` x ``height`` region with ``algorithm``.

    Rows of A (m) are split over ``height``, columns of B (n) over ``width``, and k into
    ``S = max(width, height)`` chunks: ``S`` steps, each a local tile product overlapped with
    the shift (or broadcast) that brings the next tiles. When k < S only k chunks hold data:
    the other steps still shift (every core must see every chunk) but compute nothing.
    ``work_fraction`` scales the arithmetic (causal attention does about half of the product).
    """
    steps = max(width, height)
    mt, nt, kt = _cdiv(m, height), _cdiv(n, width), _cdiv(k, steps)
    working = min(steps, _cdiv(k, kt))  # steps whose k-chunk holds data
    a_tile, b_tile, c_tile = batch * mt * kt, batch * kt * nt, batch * mt * nt
    tile = max(a_tile, b_tile)  # A shifts on X links, B on Y links, concurrently
    comp = tile_product_cycles(f, batch * kt * nt, mt, work_fraction)
    cores = width * height
    macs = float(batch) * m * k * n * work_fraction
    line = max(width, height) - 1
    if algorithm == "meshgemm":
        paths = 2 * SHIFT_PATHS_PER_DIM
        r = relay_factor(f, paths, "MeshGEMM")
        shift = plmr_latency_cycles(f, 2, r) + stream_cycles(f, tile)
        align_steps = math.ceil(steps / 2)
        align = align_steps * (plmr_latency_cycles(f, 2, r) + stream_cycles(f, a_tile))
        cycles = align + _steps_cycles(comp, shift, steps, working)
        hops = 2 * (align_steps + steps - 1)
        stages = r * (align_steps + steps - 1)
        elem_hops = 2.0 * cores * ((steps - 1) * (a_tile + b_tile) + align_steps * a_tile)
        buffer = 2 * a_tile + 2 * b_tile + c_tile
    elif algorithm == "cannon":
        paths = 2 * SHIFT_PATHS_PER_DIM
        r = relay_factor(f, paths, "Cannon")
        shift = plmr_latency_cycles(f, line, r) + stream_cycles(f, tile)
        align = shift  # the initial skew: one long-range shift of every tile
        cycles = align + _steps_cycles(comp, shift, steps, working)
        hops, stages = line * steps, r * steps
        # each line: n - 1 one-hop shifts plus the wrap-around crossing n - 1 links
        elem_hops = 2.0 * cores * (steps - 1) * (a_tile + b_tile) + cores * line / 2 * (
            a_tile + b_tile)
        buffer = 2 * a_tile + 2 * b_tile + c_tile
    elif algorithm in ("summa", "allgather"):
        switched = algorithm == "summa" and f.summa_broadcast == "switch"
        # switch: an east/west (north/south) route per axis and its pass-through, re-pointed
        # every step; otherwise one multicast tree per root in every row and every column
        paths = 2 * SHIFT_PATHS_PER_DIM if switched else width + height
        r = relay_factor(f, paths, "SUMMA" if algorithm == "summa" else "all-gather GEMM")
        elem_hops = float(steps) * (height * (width - 1) * a_tile + width * (height - 1) * b_tile)
        if algorithm == "summa":
            step_stages = r + SUMMA_SWITCH_STAGES if switched else r
            bcast = plmr_latency_cycles(f, line, step_stages) + stream_cycles(f, tile)
            cycles = bcast + _steps_cycles(comp, bcast, steps, working)
            hops, stages = line * steps, step_stages * steps
            buffer = 4 * a_tile + 4 * b_tile + c_tile
        else:
            # every foreign tile is one message the receiving core handles: (alpha + beta) N
            gather = plmr_latency_cycles(f, line, line + r - 1) + steps * stream_cycles(f, tile)
            cycles = gather + working * comp
            hops, stages = line, line + r - 1
            buffer = steps * (a_tile + b_tile) + c_tile
    else:
        raise ValueError(f"unknown GEMM algorithm {algorithm!r}")
    return MeshCost(cycles=cycles, compute_cycles=working * comp, hops=hops, stages=stages,
                    paths=paths, relay_factor=r, elem_hops=elem_hops, macs=macs,
                    buffer_elems=buffer)


def _steps_cycles(comp: float, comm: float, steps: int, working: int) -> float:
    """``steps`` compute-shift steps, the first ``working`` of them computing ``comp`` while
    the next tiles travel (``comm``); the rest only shift. The first step's tiles are in place."""
    if working >= steps:
        return comp + (steps - 1) * max(comp, comm)
    return comp + (working - 1) * max(comp, comm) + (steps - working) * comm


def batched_gemm(f: Fabric, algorithm: str, m: int, k: int, n: int, width: int, height: int,
                 batch: int, work_fraction: float = 1.0) -> MeshCost:
    """``batch`` independent GEMMs (attention heads) on a ``width`` x ``height`` region: the
    region is cut into ``g`` sub-grids (g = 1, 2, 4, ... up to ``batch``; ``gx`` x ``gy``), each
    running ``ceil(batch / g)`` of them folded into its tiles; the fastest cut is kept.
    O(log batch) closed-form evaluations."""
    best: MeshCost | None = None
    g = 1
    while True:
        gx = 2 ** math.ceil(math.log2(g) / 2) if g > 1 else 1
        gy = max(g // gx, 1)
        w, h = width // gx, height // gy
        if w < 1 or h < 1:
            break
        one = gemm(f, algorithm, m, k, n, w, h, _cdiv(batch, g), work_fraction)
        cost = MeshCost(cycles=one.cycles, compute_cycles=one.compute_cycles, hops=one.hops,
                        stages=one.stages, paths=one.paths, relay_factor=one.relay_factor,
                        elem_hops=one.elem_hops * g, macs=float(batch) * m * k * n * work_fraction,
                        buffer_elems=one.buffer_elems)
        if best is None or cost.cycles < best.cycles:
            best = cost
        if g >= batch:
            break
        g = min(2 * g, batch)
    return best if best is not None else gemm(f, algorithm, m, k, n, width, height, batch,
                                              work_fraction)
