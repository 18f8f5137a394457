"""Generalized Neighborhood Attention (GNA): which query-key pairs a window attends, and which
tiles of the attention map a fused kernel visits. Pure geometry: no hardware, no graph.

GNA [P: Hassani et al., "Generalized Neighborhood Attention: Multi-dimensional Sparse Attention
at the Speed of Light", arXiv 2504.16922, 2025; R: the definition NATTEN implements,
SHI-Labs/NATTEN ``natten/backends/flex.py``] puts the tokens on a D-dimensional grid (D = 1, 2,
3) and gives every axis a window ``w``, a stride ``s`` (1 <= s <= w), a dilation ``d`` and a
causal flag. On one axis of ``n`` coordinates:

* Dilation splits the coordinates into ``d`` interleaved groups (coordinate mod ``d``); a query
  attends keys of its own group only, and the window works on group coordinates ``x // d``
  (a group of ``ceil((n - g) / d)`` coordinates).
* Stride cuts the group coordinates into runs of ``s`` queries that share one window, the one
  of the run's *leader*. Non-causal: the leader is the run's centre query (``s // 2`` into the
  run, the right one of two for even ``s``; clipped to the last coordinate) and the window is
  the ``w`` keys starting at ``clamp(leader - w // 2, 0, n_g - w)`` (windows at the border shift
  inwards, so every query sees exactly ``w`` keys). Causal: the leader is the run's last query
  and a query at ``c`` attends keys ``max(0, leader - w + 1) .. c``.
* ``s = 1`` is neighborhood (sliding-window) attention, ``s = w`` blocked attention, ``w = n``
  self attention. A pair attends when it attends on every axis: the mask is a product over axes.

Token layout (how grid points are ordered in memory, which decides what a tile of consecutive
tokens covers): ``row_major`` (the last axis fastest) or ``tiled``: NATTEN's token permute, where
each dilation group is a separate problem (a batch entry) of grid ``n / d`` and its tokens are
ordered tile by tile (tiles row-major over the group grid, tokens row-major inside a tile), so
a run of tile-sized blocks is a compact sub-grid.

A fused kernel (FlashAttention style) cuts queries into blocks of ``block_q`` consecutive tokens
and keys into blocks of ``block_kv``; a (query block, key block) tile is *full* when every pair
in it attends, *partial* when some do (it needs the mask), *skipped* when none do.
:func:`tile_counts` counts them exactly (the same numbers as torch's ``create_block_mask``:
padded tail blocks are never full) without visiting pairs: per axis the attended keys of a
query are an interval whose ends never decrease along the axis, so pairs between two
coordinate intervals come from prefix sums (O(log n)); a block is a union of a few boxes of
the grid (at most ``2 D - 1`` per run of whole rows or tiles, and per partial tile at either
end), and a box pair's count is the product of its axes' counts. When
every block is one box of a product grid (tiled layouts, aligned row-major grids) the totals are
products over axes and no block pair is visited at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np

from dse.errors import BadInput

LAYOUTS = ("row_major", "tiled")
MAX_DIMS = 3
#: Largest size of one grid axis, tokens [E: 16x a 1M-token 1-D sequence; bounds the counts].
MAX_AXIS = 2**24

#: Default token tile of the tiled layout: 128 tokens, the KV block of the kernels modelled
#: (``1-D 128``, ``2-D 8x16``, ``3-D 2x8x8``; NATTEN's Hopper kernels use 16x8 and 2x8x8 for
#: FLUX- and HunyuanVideo-sized grids [R: NATTEN docs/profiler.md]).
DEFAULT_TILES = {1: (128,), 2: (8, 16), 3: (2, 8, 8)}

#: Block pairs scored at once by the general counting path (bounds its memory, elements).
_CHUNK_PAIRS = 1 << 22


# ----------------------------------------------------------------------------- parameters
def parse_shape(value: Any, field: str, ndim: int | None = None) -> tuple[int, ...]:
    """``"30x48x80"``, ``"2048"``, ``2048`` or ``[30, 48, 80]`` as a tuple of positive ints;
    one value broadcasts to ``ndim`` axes. :class:`BadInput` names ``field`` otherwise."""
    expect = f"{ndim} positive sizes like " + "x".join(["16"] * ndim) if ndim else (
        f"1 to {MAX_DIMS} positive sizes like 256x256")
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, (int, np.integer)):
            parts = [int(value)]
        elif isinstance(value, float) and value.is_integer():
            parts = [int(value)]
        elif isinstance(value, str):
            parts = [int(p) for p in value.strip().lower().replace(" ", "").split("x")]
        elif isinstance(value, (list, tuple)):
            if any(isinstance(p, bool) for p in value):
                raise ValueError
            parts = [int(p) for p in value]
            if any(float(p) != q for p, q in zip(value, parts)):
                raise ValueError
        else:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise BadInput(field, value, f"expected {expect}") from None
    if ndim is not None and len(parts) == 1:
        parts = parts * ndim
    if not 1 <= len(parts) <= MAX_DIMS or (ndim is not None and len(parts) != ndim) or min(
            parts) < 1 or max(parts) > MAX_AXIS:
        raise BadInput(field, value, f"expected {expect}, each at most {MAX_AXIS:,}")
    return tuple(parts)


def parse_causal(value: Any, field: str, ndim: int) -> tuple[bool, ...]:
    """Per-axis causal flags from ``"0x0x1"``, ``"true"``, ``True`` or ``[False, True]``; one
    flag broadcasts to every axis."""
    words = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}
    if isinstance(value, (bool, np.bool_)):
        parts: list[Any] = [bool(value)]
    elif isinstance(value, (int, np.integer)) and value in (0, 1):
        parts = [bool(value)]
    elif isinstance(value, str):
        parts = [words.get(p) for p in value.strip().lower().replace(" ", "").split("x")]
    elif isinstance(value, (list, tuple)):
        parts = [v if isinstance(v, bool) else words.get(str(v).lower()) for v in value]
    else:
        parts = [None]
    if len(parts) == 1:
        parts = parts * ndim
    if len(parts) != ndim or any(p is None for p in parts):
        raise BadInput(field, value, f"expected {ndim} causal flag(s) like "
                       + "x".join(["0"] * ndim) + " (0/1 or true/false per axis)")
    return tuple(bool(p) for p in parts)


@dataclass(frozen=True)
class GNAConfig:
    """One GNA pattern: per-axis ``grid``, ``window``, ``stride``, ``dilation``, ``causal``
    (token counts), the token ``layout``, and the ``tile`` (keys / values) and ``q_tile``
    (queries) of the tiled layout (tokens per axis; empty in row-major). Build it with
    :meth:`parse`, which validates."""

    grid: tuple[int, ...]
    window: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    causal: tuple[bool, ...]
    layout: str = "row_major"
    tile: tuple[int, ...] = ()
    q_tile: tuple[int, ...] = ()

    @classmethod
    def parse(cls, grid: Any, window: Any = None, stride: Any = 1, dilation: Any = 1,
              causal: Any = False, layout: str = "row_major", tile: Any = None,
              q_tile: Any = None, prefix: str = "") -> "GNAConfig":
        """Parse and check every field; :class:`BadInput` names ``prefix + field`` (e.g.
        ``arch.window``). ``window`` defaults to the grid (self attention), ``tile`` (the
        key/value tile) to :data:`DEFAULT_TILES`, ``q_tile`` (the query tile: NATTEN permutes
        queries and keys with separate tile shapes) to ``tile``."""
        g = parse_shape(grid, prefix + "grid")
        nd = len(g)
        w = g if window is None else parse_shape(window, prefix + "window", nd)
        s = parse_shape(stride, prefix + "stride", nd)
        d = parse_shape(dilation, prefix + "dilation", nd)
        c = parse_causal(causal, prefix + "causal", nd)
        if layout not in LAYOUTS:
            raise BadInput(prefix + "layout", layout, "expected one of " + ", ".join(LAYOUTS))
        t = DEFAULT_TILES[nd] if _unset(tile) else parse_shape(tile, prefix + "tile", nd)
        qt = t if _unset(q_tile) else parse_shape(q_tile, prefix + "q_tile", nd)
        for i in range(nd):
            if w[i] * d[i] > g[i]:
                raise BadInput(prefix + "window", "x".join(map(str, w)),
                               f"window x dilation must fit the grid {_txt(g)} on every axis "
                               f"(axis {i}: {w[i]} x {d[i]} > {g[i]})")
            if s[i] > w[i]:
                raise BadInput(prefix + "stride", "x".join(map(str, s)),
                               f"expected a stride no larger than the window {_txt(w)} "
                               f"(axis {i})")
        if layout == "tiled":
            for name, tt in (("tile", t), ("q_tile", qt)):
                for i in range(nd):
                    if g[i] % (tt[i] * d[i]):
                        raise BadInput(prefix + name, _txt(tt),
                                       f"the tile must divide the grid {_txt(g)} (per "
                                       f"dilation group {_txt(tuple(a // b for a, b in zip(g, d)))}"
                                       f") on every axis (axis {i})")
            return cls(g, w, s, d, c, layout, t, qt)
        return cls(g, w, s, d, c, layout)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], prefix: str = "") -> "GNAConfig":
        """:meth:`parse` of the keys ``grid, window, stride, dilation, causal, layout, tile``."""
        return cls.parse(m["grid"], m.get("window"), m.get("stride", 1), m.get("dilation", 1),
                         m.get("causal", False), m.get("layout", "row_major"), m.get("tile"),
                         m.get("q_tile"), prefix)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists (JSON, op attrs); :meth:`from_mapping` reads it back."""
        return {"grid": list(self.grid), "window": list(self.window),
                "stride": list(self.stride), "dilation": list(self.dilation),
                "causal": list(self.causal), "layout": self.layout, "tile": list(self.tile),
                "q_tile": list(self.q_tile)}

    @property
    def ndim(self) -> int:
        return len(self.grid)

    @property
    def tokens(self) -> int:
        """Tokens on the grid."""
        return math.prod(self.grid)

    @property
    def groups(self) -> int:
        """Independent problems the kernel runs: the dilation groups of the tiled layout
        (NATTEN batches them), 1 in row-major (one sequence, the mask keeps groups apart)."""
        return math.prod(self.dilation) if self.layout == "tiled" else 1

    @property
    def problem_tokens(self) -> int:
        """Tokens of one problem (``tokens / groups``)."""
        return self.tokens // self.groups

    @property
    def permutes(self) -> bool:
        """Whether the model must reorder tokens into this layout (and back) around the op."""
        return self.layout == "tiled"

    def _axes(self) -> tuple["_Axis", ...]:
        if self.layout == "tiled":   # each group: grid n / d, no dilation left
            return tuple(_axis(n // d, w, s, 1, c) for n, w, s, d, c in zip(
                self.grid, self.window, self.stride, self.dilation, self.causal))
        return tuple(_axis(n, w, s, d, c) for n, w, s, d, c in zip(
            self.grid, self.window, self.stride, self.dilation, self.causal))

    def problem_grid(self) -> tuple[int, ...]:
        if self.layout == "tiled":
            return tuple(n // d for n, d in zip(self.grid, self.dilation))
        return self.grid

    def attended_pairs(self) -> int:
        """Query-key pairs attended over the whole grid (every problem), exact."""
        per_problem = 1
        for ax, n in zip(self._axes(), self.problem_grid()):
            per_problem *= int(ax.pairs(np.array([0]), np.array([n]), np.array([0]),
                                        np.array([n]))[0])
        return per_problem * self.groups


def _unset(value: Any) -> bool:
    """An optional shape left out: None, "" or an empty list."""
    return value is None or (isinstance(value, (str, list, tuple)) and len(value) == 0)


def _txt(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


# ----------------------------------------------------------------------------- one axis
def axis_window(n: int, window: int, stride: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """First key and one past the last key attended by each of ``n`` (undilated) coordinates:
    ``(lo, hi)`` int64 arrays, both non-decreasing along the axis (module docstring)."""
    c = np.arange(n, dtype=np.int64)
    if causal:
        leader = np.minimum((c // stride) * stride + stride - 1, n - 1)
        return np.maximum(0, leader - window + 1), c + 1
    leader = np.minimum((c // stride) * stride + stride // 2, n - 1)
    lo = np.clip(leader - window // 2, 0, n - window)
    return lo, lo + window


class _Axis:
    """Exact attended-pair counts between coordinate intervals of one axis."""

    def __init__(self, n: int, window: int, stride: int, dilation: int, causal: bool):
        self.n, self.d = n, dilation
        self.groups = []
        for g in range(dilation):
            lo, hi = axis_window((n - g + dilation - 1) // dilation, window, stride, causal)
            self.groups.append((lo, hi, np.concatenate(([0], np.cumsum(hi - lo))),
                                np.concatenate(([0], np.cumsum(lo)))))

    def _below(self, x: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Pairs (query < x, key < b) attended, int64, elementwise."""
        total = np.zeros(np.broadcast(x, b).shape, dtype=np.int64)
        d = self.d
        for g, (lo, hi, p_len, p_lo) in enumerate(self.groups):
            cq = np.clip((x - g + d - 1) // d, 0, len(lo))   # group coordinates below x
            kb = np.clip((b - g + d - 1) // d, 0, len(lo))   # group keys below b
            x1 = np.minimum(cq, np.searchsorted(hi, kb, side="right"))  # windows inside [0, kb)
            x2 = np.minimum(cq, np.searchsorted(lo, kb, side="left"))   # windows starting < kb
            total += p_len[x1] + kb * (x2 - x1) - (p_lo[x2] - p_lo[x1])
        return total

    def pairs(self, a0, a1, b0, b1) -> np.ndarray:
        """Attended pairs with the query in ``[a0, a1)`` and the key in ``[b0, b1)``."""
        return (self._below(a1, b1) - self._below(a0, b1) - self._below(a1, b0)
                + self._below(a0, b0))


@lru_cache(maxsize=256)
def _axis(n: int, window: int, stride: int, dilation: int, causal: bool) -> _Axis:
    return _Axis(n, window, stride, dilation, causal)


# ----------------------------------------------------------------------------- blocks as boxes
Box = tuple[tuple[int, int], ...]


def _row_major_boxes(t0: int, t1: int, shape: tuple[int, ...]) -> list[Box]:
    """Token range ``[t0, t1)`` of a row-major ``shape`` as at most ``2 D - 1`` boxes (one
    half-open interval per axis)."""
    if t0 >= t1:
        return []
    if len(shape) == 1:
        return [((t0, t1),)]
    inner = math.prod(shape[1:])
    i0, r0 = divmod(t0, inner)
    i1, r1 = divmod(t1, inner)
    if i0 == i1:
        return [((i0, i0 + 1),) + b for b in _row_major_boxes(r0, r1, shape[1:])]
    out: list[Box] = []
    if r0:
        out += [((i0, i0 + 1),) + b for b in _row_major_boxes(r0, inner, shape[1:])]
        i0 += 1
    if i1 > i0:
        out.append(((i0, i1),) + tuple((0, s) for s in shape[1:]))
    if r1:
        out += [((i1, i1 + 1),) + b for b in _row_major_boxes(0, r1, shape[1:])]
    return out


def _tiled_boxes(t0: int, t1: int, grid: tuple[int, ...], tile: tuple[int, ...]) -> list[Box]:
    """Token range ``[t0, t1)`` of the tiled layout of ``grid`` as boxes of grid coordinates."""
    size = math.prod(tile)
    tiles = tuple(g // t for g, t in zip(grid, tile))

    def inside(k: int, o0: int, o1: int) -> list[Box]:
        origin = _coords(k, tiles)
        return [tuple((o * t + a, o * t + b) for o, t, (a, b) in zip(origin, tile, box))
                for box in _row_major_boxes(o0, o1, tile)]

    k0, o0 = divmod(t0, size)
    k1, o1 = divmod(t1, size)
    if k0 == k1:
        return inside(k0, o0, o1)
    out: list[Box] = []
    if o0:
        out += inside(k0, o0, size)
        k0 += 1
    out += [tuple((a * t, b * t) for (a, b), t in zip(box, tile))
            for box in _row_major_boxes(k0, k1, tiles)]
    if o1:
        out += inside(k1, 0, o1)
    return out


def _coords(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for s in reversed(shape):
        index, r = divmod(index, s)
        out.append(r)
    return tuple(reversed(out))


def _blocks(cfg: GNAConfig, block: int, queries: bool) -> list[list[Box]]:
    """The boxes of each ``block``-token block of one problem's queries or keys."""
    m = cfg.problem_tokens
    grid = cfg.problem_grid()
    if cfg.layout == "tiled":
        tile = cfg.q_tile if queries else cfg.tile
        return [_tiled_boxes(t, min(t + block, m), grid, tile) for t in range(0, m, block)]
    return [_row_major_boxes(t, min(t + block, m), grid) for t in range(0, m, block)]


# ----------------------------------------------------------------------------- tile counts
@dataclass(frozen=True)
class TileCounts:
    """Tiles of one attention map (one batch entry and head) for ``block_q`` x ``block_kv``
    tiles. ``q_blocks`` counts every problem (dilation groups of the tiled layout included);
    ``full`` and ``partial`` are (query block, key block) tiles summed over query blocks;
    ``max_visited`` is the most key blocks one query block visits; ``dense_tiles`` is what a
    dense kernel over all ``tokens`` visits; pairs are query-key pairs."""

    block_q: int
    block_kv: int
    q_blocks: int
    full: int
    partial: int
    max_visited: int
    attended_pairs: int
    dense_pairs: int
    dense_tiles: int

    @property
    def visited(self) -> int:
        return self.full + self.partial

    @property
    def fully_block_sparse(self) -> bool:
        """No visited tile needs a mask."""
        return self.partial == 0

    @property
    def flop_bound_speedup(self) -> float:
        """Dense pairs over attended pairs: the speed-up if only attended pairs cost."""
        return self.dense_pairs / self.attended_pairs

    @property
    def block_bound_speedup(self) -> float:
        """Dense tiles over visited tiles: the speed-up if a visited tile costs what a dense
        tile does and a skipped one nothing."""
        return self.dense_tiles / self.visited

    def to_dict(self) -> dict[str, Any]:
        return {"block_q": self.block_q, "block_kv": self.block_kv, "q_blocks": self.q_blocks,
                "kv_blocks_full": self.full, "kv_blocks_partial": self.partial,
                "max_visited": self.max_visited, "attended_pairs": self.attended_pairs,
                "dense_pairs": self.dense_pairs, "dense_tiles": self.dense_tiles,
                "flop_bound_speedup": self.flop_bound_speedup,
                "block_bound_speedup": self.block_bound_speedup}


@lru_cache(maxsize=512)
def tile_counts(cfg: GNAConfig, block_q: int = 128, block_kv: int = 128) -> TileCounts:
    """Exact full / partial / skipped tile counts of ``cfg`` for ``block_q`` x ``block_kv``
    token tiles (module docstring)."""
    if block_q < 1 or block_kv < 1:
        raise BadInput("attention block", (block_q, block_kv), "expected positive token counts")
    q_blocks, kv_blocks = _blocks(cfg, block_q, True), _blocks(cfg, block_kv, False)
    axes = cfg._axes()
    q_grid, kv_grid = _product_grid(q_blocks, block_q), _product_grid(kv_blocks, block_kv)
    if q_grid is not None and kv_grid is not None:
        full, visited, max_visited = _count_product(axes, q_grid, kv_grid)
    else:
        full, visited, max_visited = _count_general(axes, q_blocks, kv_blocks,
                                                    block_q * block_kv)
    g, n = cfg.groups, cfg.tokens
    return TileCounts(block_q, block_kv, len(q_blocks) * g, full * g, (visited - full) * g,
                      max_visited, cfg.attended_pairs(), n * n,
                      -(-n // block_q) * -(-n // block_kv))


def _product_grid(blocks: list[list[Box]], block: int) -> list[list[tuple[int, int]]] | None:
    """Per-axis interval lists when every block is one whole box (``block`` tokens, no padded
    tail) and the boxes are all combinations of those intervals; else None."""
    if any(len(b) != 1 or math.prod(y - x for x, y in b[0]) != block for b in blocks):
        return None
    boxes = [b[0] for b in blocks]
    per_axis = [sorted({box[i] for box in boxes}) for i in range(len(boxes[0]))]
    if math.prod(len(p) for p in per_axis) != len(set(boxes)) or len(set(boxes)) != len(boxes):
        return None
    return per_axis


def _axis_table(axis: _Axis, q_iv: list[tuple[int, int]], kv_iv: list[tuple[int, int]]
                ) -> np.ndarray:
    """Pairs between every query interval (rows) and key interval (columns), int64."""
    q = np.array(q_iv, dtype=np.int64).reshape(-1, 2)
    k = np.array(kv_iv, dtype=np.int64).reshape(-1, 2)
    return axis.pairs(q[:, :1], q[:, 1:], k[None, :, 0], k[None, :, 1])


def _count_product(axes, q_axes, kv_axes) -> tuple[int, int, int]:
    """(full, visited, most visited per query block) when both block sets are product grids
    of whole blocks: a tile is full (visited) iff it is full (non-empty) on every axis, so the
    totals are products over axes of per-axis counts."""
    full = visited = max_visited = 1
    for axis, q_iv, kv_iv in zip(axes, q_axes, kv_axes):
        sizes = (np.array([b - a for a, b in q_iv])[:, None]
                 * np.array([b - a for a, b in kv_iv])[None, :])
        full_ax = np.zeros(len(q_iv), dtype=np.int64)
        visited_ax = np.zeros(len(q_iv), dtype=np.int64)
        step = max(1, _CHUNK_PAIRS // max(1, len(kv_iv)))
        for r in range(0, len(q_iv), step):
            t = _axis_table(axis, q_iv[r:r + step], kv_iv)
            full_ax[r:r + step] = (t == sizes[r:r + step]).sum(axis=1)
            visited_ax[r:r + step] = (t > 0).sum(axis=1)
        full *= int(full_ax.sum())
        visited *= int(visited_ax.sum())
        max_visited *= int(visited_ax.max())
    return full, visited, max_visited


def _count_general(axes, q_blocks, kv_blocks, tile_pairs: int) -> tuple[int, int, int]:
    """(full, visited, max visited per query block) by scoring every block pair as a sum over
    its box pairs of per-axis products (tables over the distinct intervals of each axis)."""
    nd = len(axes)
    idx_q, idx_kv, tables = [], [], []
    for i, axis in enumerate(axes):
        q_iv = sorted({box[i] for boxes in q_blocks for box in boxes})
        kv_iv = sorted({box[i] for boxes in kv_blocks for box in boxes})
        # a padding interval (0, 0) with no pairs fills blocks that have fewer boxes
        q_iv, kv_iv = [(0, 0)] + q_iv, [(0, 0)] + kv_iv
        tables.append(_axis_table(axis, q_iv, kv_iv))
        qi = {iv: j for j, iv in enumerate(q_iv)}
        ki = {iv: j for j, iv in enumerate(kv_iv)}
        idx_q.append(_box_index(q_blocks, i, qi))
        idx_kv.append(_box_index(kv_blocks, i, ki))
    n_kv = len(kv_blocks)
    step = max(1, _CHUNK_PAIRS // max(1, n_kv * idx_q[0].shape[1] * idx_kv[0].shape[1]))
    full = visited = max_visited = 0
    for r in range(0, len(q_blocks), step):
        counts = None
        for i in range(nd):
            t = tables[i][idx_q[i][r:r + step, :, None, None], idx_kv[i][None, None, :, :]]
            counts = t if counts is None else counts * t
        per_tile = counts.sum(axis=(1, 3))           # (q blocks, kv blocks)
        full += int((per_tile == tile_pairs).sum())
        v = (per_tile > 0).sum(axis=1)
        visited += int(v.sum())
        max_visited = max(max_visited, int(v.max()))
    return full, visited, max_visited


def _box_index(blocks: list[list[Box]], axis: int, index: dict) -> np.ndarray:
    """(blocks, most boxes) interval indices on ``axis``; missing boxes point at (0, 0)."""
    width = max(len(b) for b in blocks)
    out = np.zeros((len(blocks), width), dtype=np.int64)
    for j, boxes in enumerate(blocks):
        out[j, :len(boxes)] = [index[box[axis]] for box in boxes]
    return out


# ----------------------------------------------------------------------------- flex mask
def flex_mask_mod(cfg: GNAConfig) -> Callable:
    """``mask_mod(b, h, q_idx, kv_idx)`` of ``cfg`` for torch's ``flex_attention`` and
    ``create_block_mask``, over the token indices of one problem in ``cfg.layout`` order (for
    the tiled layout with dilation, each dilation group is a separate batch entry of
    ``problem_tokens`` tokens, as NATTEN runs it). Integer tensor ops only (vmap and
    torch.compile friendly); operations that are identities for this pattern (a unit stride,
    dilation or tile axis) are left out, so the traced graph counts what a kernel evaluates."""
    import torch

    grid = cfg.problem_grid()
    dil = (1,) * cfg.ndim if cfg.layout == "tiled" else cfg.dilation
    params = list(zip(grid, cfg.window, cfg.stride, dil, cfg.causal))

    def coords(idx, tile):
        if cfg.layout != "tiled":
            return _torch_coords(idx, grid)
        size = math.prod(tile)
        tiles = tuple(g // t for g, t in zip(grid, tile))
        tile_c = _torch_coords(idx // size, tiles)
        off_c = _torch_coords(idx % size, tile)
        return [_add(_mul(tc, t), oc) for tc, t, oc in zip(tile_c, tile, off_c)]

    def axis_mask(x, y, n, w, s, d, causal):
        if d > 1:
            g = x % d
            cq, ck, ng = x // d, y // d, (n - g + d - 1) // d
        else:
            cq, ck, ng = x, y, n
        if causal:
            if s == 1:
                return (ck <= cq) & (ck > cq - w)
            leader = _at_most(_add(_mul(cq // s, s), s - 1), ng - 1)
            return (ck <= cq) & (ck > leader - w)
        if s == 1:
            leader = cq
        else:
            leader = _add(_mul(cq // s, s), s // 2)
            leader = _at_most(leader, ng - 1) if d > 1 or n % s else leader
        lo = _at_most(torch.clamp(leader - w // 2, min=0), ng - w)
        return (ck >= lo) & (ck < lo + w)

    def mask_mod(b, h, q_idx, kv_idx):
        qc, kc = coords(q_idx, cfg.q_tile), coords(kv_idx, cfg.tile)
        keep = None
        for x, y, (n, w, s, d, causal) in zip(qc, kc, params):
            ok = axis_mask(x, y, n, w, s, d, causal)
            if d > 1:
                ok = ok & (y % d == x % d)
            keep = ok if keep is None else keep & ok
        return keep

    return mask_mod


def _at_most(x, limit):
    """``min(x, limit)`` for an int or tensor ``limit``."""
    import torch
    return torch.clamp(x, max=limit) if isinstance(limit, int) else torch.minimum(x, limit)


def _mul(x, k: int):
    return x if k == 1 else x * k


def _add(x, k):
    return x if isinstance(k, int) and k == 0 else x + k


def _torch_coords(idx, shape: tuple[int, ...]) -> list:
    """Row-major coordinates of ``idx`` over ``shape``; no division by 1 and no modulo on the
    outermost axis (``idx`` is in range)."""
    out = []
    stride = 1
    for i, s in enumerate(reversed(shape)):
        x = idx // stride if stride > 1 else idx
        out.append(x % s if i < len(shape) - 1 and s > 1 else (x if s > 1 else x * 0))
        stride *= s
    return list(reversed(out))


# ----------------------------------------------------------------------------- captured ops
def op_tiles(attrs: Mapping[str, Any], block_q: int, block_kv: int) -> TileCounts:
    """Tile counts of one attention map of a captured ``sparse_attention`` op (its ``attrs``,
    :mod:`workloads.sparse_attention`). A ``gna`` pattern is recounted for ``block_q`` x
    ``block_kv`` tiles; its ``extra_kv`` keys (attended by every query) add
    ``ceil(extra / block_kv)`` tiles per query block, full where both blocks are whole. A
    captured ``block_mask`` keeps the tiles of its own block size (the kernel skips at that
    granularity), whatever ``block_q`` / ``block_kv`` say."""
    q_len, kv_len = int(attrs["q_len"]), int(attrs["kv_len"])
    if "gna" not in attrs:
        bm = attrs["block_mask"]
        bq, bkv = int(bm["block_q"]), int(bm["block_kv"])
        return TileCounts(bq, bkv, int(bm["q_blocks"]), int(bm["kv_blocks_full"]),
                          int(bm["kv_blocks_partial"]), int(bm["max_visited"]),
                          int(attrs["attended_pairs"]), q_len * kv_len,
                          -(-q_len // bq) * -(-kv_len // bkv))
    cfg = GNAConfig.from_mapping(attrs["gna"])
    base = tile_counts(cfg, block_q, block_kv)
    extra = int(attrs.get("extra_kv", 0) or 0)
    if extra <= 0:
        return base
    whole_kv, tail_kv = divmod(extra, block_kv)
    whole_q = (cfg.problem_tokens // block_q) * cfg.groups
    full = whole_kv * whole_q
    partial = base.q_blocks * (whole_kv + (tail_kv > 0)) - full
    n = cfg.tokens
    return TileCounts(block_q, block_kv, base.q_blocks, base.full + full,
                      base.partial + partial, base.max_visited + -(-extra // block_kv),
                      base.attended_pairs + n * extra, n * (n + extra),
                      -(-n // block_q) * -(-(n + extra) // block_kv))


def dense_equivalent(workload):
    """``workload`` with every ``sparse_attention`` op replaced by the dense attention it
    stands for (same shapes and bytes, FLOPs ``dense_flops``): what a design without a
    block-sparse attention kernel runs. The workload itself when it has none. Made once per
    workload (:func:`workloads.memo.per_workload`)."""
    from workloads.memo import per_workload
    return per_workload(workload, "dense-equivalent", lambda: _dense_equivalent(workload))


def _dense_equivalent(workload):
    from dataclasses import replace as _replace

    from workloads import ir
    if not any(op.kind == ir.SPARSE_ATTENTION for op in workload.ops):
        return workload
    graph = workload.graph.copy()
    keys = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "value_dim")
    for name in graph.nodes:
        op = graph.nodes[name]["op"]
        if op.kind == ir.SPARSE_ATTENTION:
            flops = int(op.attrs["dense_flops"])
            graph.nodes[name]["op"] = _replace(
                op, kind=ir.ATTENTION, target="scaled_dot_product_attention", flops=flops,
                attrs={**{k: op.attrs[k] for k in keys}, "causal": False,
                       "causal_flops": flops})
    return _replace(workload, graph=graph)
