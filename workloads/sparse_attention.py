"""Sparse attention in a model: the ``dse::gna_attention`` custom op, token permutes into the
tiled layout, and the attributes the capture gives a ``sparse_attention`` op.

Two ways in:

* ``dse::gna_attention(q, k, v, grid, window, stride, dilation, causal, layout, tile, q_tile)``
  (the plain parameter set): ``q`` [..., heads, N, d] with the N grid tokens in the GNA
  layout's order (:func:`to_layout` makes it; in the tiled layout with dilation the dilation
  groups are consecutive runs of N / groups tokens), ``k``/``v`` [..., kv_heads, N + extra, d]:
  keys past the grid (text tokens of a diffusion transformer) are attended by every query, as
  NATTEN's "additional KV". The capture reads the pattern from the arguments, so every
  template can recount its tiles for its own tile shape (:func:`workloads.gna.tile_counts`).
* ``torch.nn.attention.flex_attention(q, k, v, block_mask=...)`` with any mask function: the
  capture evaluates the exported mask graph on the CPU over every query-key pair (exact, up to
  :data:`MAX_MASK_PAIRS` pairs) and records the attended pairs and the full / partial tiles of
  the BlockMask's own block size. flex_attention refuses meta tensors: capture such models on
  CPU tensors (``torch._subclasses.FakeTensorMode`` avoids allocating large ones), with the
  BlockMask built outside ``forward``.

Op attributes (``Op.attrs`` of kind ``sparse_attention``): ``batch, heads, kv_heads, q_len,
kv_len, head_dim, value_dim`` as for dense attention; ``dense_flops`` (the dense-equivalent
FLOPs, 2 per MAC over every pair); ``attended_pairs`` (per batch entry and head; ``Op.flops``
counts these only); either ``gna`` (the :class:`~workloads.gna.GNAConfig` as a dict) and
``extra_kv``, or ``block_mask`` (``block_q, block_kv, q_blocks, kv_blocks_full,
kv_blocks_partial, max_visited`` of the captured mask); ``mask_ops``: operations per score
that apply the mask (:func:`score_ops`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch

from dse.errors import BadInput, CaptureError
from workloads.gna import GNAConfig, flex_mask_mod

#: Query-key pairs (per batch entry and head the mask depends on) that the capture evaluates a
#: flex_attention mask over at most (about a minute of CPU time at the limit) [E].
MAX_MASK_PAIRS = 1 << 30

#: Pairs the op's CPU implementation materialises as a dense mask at most (memory guard).
MAX_CPU_PAIRS = 1 << 26


# ----------------------------------------------------------------------------- the custom op
def config_of(grid, window, stride, dilation, causal, layout, tile, q_tile) -> GNAConfig:
    return GNAConfig.parse(list(grid), list(window), list(stride), list(dilation),
                           list(causal), layout, list(tile), list(q_tile))


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: GNAConfig) -> int:
    """Extra keys past the grid; :class:`BadInput` when the shapes do not fit the pattern."""
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim():
        raise BadInput("gna_attention", (tuple(q.shape), tuple(k.shape)),
                       "expected q, k, v of shape [..., heads, tokens, head_dim]")
    if q.shape[-2] != cfg.tokens:
        raise BadInput("gna_attention.q", tuple(q.shape),
                       f"expected {cfg.tokens} query tokens (the grid {cfg.grid})")
    extra = k.shape[-2] - cfg.tokens
    if extra < 0 or v.shape[-2] != k.shape[-2]:
        raise BadInput("gna_attention.k", tuple(k.shape),
                       f"expected at least {cfg.tokens} key tokens, as many values")
    if q.shape[-3] % k.shape[-3] or q.shape[-1] != k.shape[-1]:
        raise BadInput("gna_attention.k", tuple(k.shape),
                       "expected kv heads dividing the query heads and q's head_dim")
    return extra


def dense_mask(cfg: GNAConfig, extra_kv: int = 0) -> torch.Tensor:
    """The [N, N + extra_kv] boolean attention mask of ``cfg`` in its layout's token order
    (tiled layout with dilation: the groups are consecutive runs of ``problem_tokens``)."""
    m, g = cfg.problem_tokens, cfg.groups
    idx = torch.arange(cfg.tokens)
    mask = flex_mask_mod(cfg)(0, 0, (idx % m)[:, None], (idx % m)[None, :])
    mask = mask & ((idx // m)[:, None] == (idx // m)[None, :]) if g > 1 else mask
    return torch.cat([mask, torch.ones(cfg.tokens, extra_kv, dtype=torch.bool)], dim=1)


@torch.library.custom_op("dse::gna_attention", mutates_args=())
def gna_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grid: list[int],
                  window: list[int], stride: list[int], dilation: list[int], causal: list[bool],
                  layout: str, tile: list[int], q_tile: list[int]) -> torch.Tensor:
    """Generalized neighborhood attention (module docstring); CPU: dense masked attention."""
    cfg = config_of(grid, window, stride, dilation, causal, layout, tile, q_tile)
    extra = _check_shapes(q, k, v, cfg)
    if cfg.tokens * (cfg.tokens + extra) > MAX_CPU_PAIRS:
        raise BadInput("gna_attention", f"{cfg.tokens} x {cfg.tokens + extra} pairs",
                       f"the CPU implementation handles at most {MAX_CPU_PAIRS} pairs")
    mask = dense_mask(cfg, extra).to(q.device)
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=q.shape[-3] != k.shape[-3])


@gna_attention.register_fake
def _gna_attention_fake(q, k, v, grid, window, stride, dilation, causal, layout, tile, q_tile):
    cfg = config_of(grid, window, stride, dilation, causal, layout, tile, q_tile)
    _check_shapes(q, k, v, cfg)
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


def gna(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: GNAConfig) -> torch.Tensor:
    """Call ``dse::gna_attention`` with ``cfg`` (tokens already in ``cfg``'s layout)."""
    return gna_attention(q, k, v, list(cfg.grid), list(cfg.window), list(cfg.stride),
                         list(cfg.dilation), list(cfg.causal), cfg.layout, list(cfg.tile),
                         list(cfg.q_tile))


# ----------------------------------------------------------------------------- token permute
def _split_axes(cfg: GNAConfig, tile: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Sizes of ``x.view(..., *sizes, d)`` splitting every grid axis into (tiles, tile,
    dilation), and the permutation to (dilation groups, tiles, tile offsets)."""
    sizes: list[int] = []
    for n, t, d in zip(cfg.grid, tile, cfg.dilation):
        sizes += [n // (t * d), t, d]
    nd = cfg.ndim
    order = [3 * i + 2 for i in range(nd)] + [3 * i for i in range(nd)] + [
        3 * i + 1 for i in range(nd)]
    return sizes, order


def to_layout(x: torch.Tensor, cfg: GNAConfig, queries: bool = False) -> torch.Tensor:
    """``x`` [..., N, d] with the N tokens row-major over the grid, reordered into ``cfg``'s
    layout (the query tile when ``queries``): a copy (NATTEN's token permute); unchanged in
    row-major."""
    if not cfg.permutes:
        return x
    sizes, order = _split_axes(cfg, cfg.q_tile if queries else cfg.tile)
    lead = x.dim() - 2
    y = x.reshape(*x.shape[:lead], *sizes, x.shape[-1])
    y = y.permute(*range(lead), *(lead + i for i in order), lead + len(sizes))
    return y.clone(memory_format=torch.contiguous_format).reshape(x.shape)


def from_layout(x: torch.Tensor, cfg: GNAConfig) -> torch.Tensor:
    """The inverse of :func:`to_layout` for query-ordered tokens (the op's output)."""
    if not cfg.permutes:
        return x
    sizes, order = _split_axes(cfg, cfg.q_tile)
    lead = x.dim() - 2
    y = x.reshape(*x.shape[:lead], *(sizes[i] for i in order), x.shape[-1])
    inverse = [order.index(i) for i in range(len(order))]
    y = y.permute(*range(lead), *(lead + i for i in inverse), lead + len(sizes))
    return y.clone(memory_format=torch.contiguous_format).reshape(x.shape)


# ----------------------------------------------------------------------------- capture side
def _dims(q_shape, k_shape, v_shape) -> dict[str, int]:
    return {"batch": math.prod(q_shape[:-3]) if len(q_shape) > 3 else 1,
            "heads": q_shape[-3] if len(q_shape) >= 3 else 1, "q_len": q_shape[-2],
            "head_dim": q_shape[-1], "kv_heads": k_shape[-3] if len(k_shape) >= 3 else 1,
            "kv_len": k_shape[-2], "value_dim": v_shape[-1]}


def _finish(dims: dict[str, int], pairs: int, extra: dict[str, Any]) -> dict[str, Any]:
    per_pair = 2 * (dims["head_dim"] + dims["value_dim"])
    bh = dims["batch"] * dims["heads"]
    return {**dims, "attended_pairs": int(pairs),
            "dense_flops": bh * dims["q_len"] * dims["kv_len"] * per_pair,
            "_flops": bh * int(pairs) * per_pair, **extra}


def capture_attrs(node, shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    """Attrs (and ``_flops``) of a ``gna_attention`` or ``flex_attention`` node whose first
    three tensor inputs (q, k, v) have ``shapes``."""
    if len(shapes) < 3:
        raise CaptureError(f"{node.name}: a sparse attention op needs q, k and v")
    dims = _dims(*shapes[:3])
    target = getattr(node.target, "name", lambda: str(node.target))()
    if "gna_attention" in target:
        cfg = config_of(*node.args[3:11])
        extra = dims["kv_len"] - cfg.tokens
        return _finish(dims, cfg.attended_pairs() + cfg.tokens * extra,
                       {"gna": cfg.to_dict(), "extra_kv": extra, "mask_ops": mask_op_count(cfg)})
    return _finish(dims, *_flex_mask_stats(node, dims))


@lru_cache(maxsize=128)
def mask_op_count(cfg: GNAConfig) -> int:
    """Per-score operations of ``cfg``'s mask (:func:`score_ops` of
    :func:`workloads.gna.flex_mask_mod` traced on scalars)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    b, h, q, kv = (torch.zeros((), dtype=torch.int32) for _ in range(4))  # distinct inputs
    return score_ops(make_fx(flex_mask_mod(cfg))(b, h, q, kv).graph)


def score_ops(graph) -> int:
    """Operations a kernel runs per score to apply a ``mask_mod(b, h, q_idx, kv_idx)`` graph:
    the nodes that depend on both the query and the key index (a tile evaluates the others
    once per row or column, as flex_attention's generated kernels do), plus one select that
    applies the mask."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    deps: dict[Any, frozenset] = {n: frozenset({i}) for i, n in enumerate(placeholders)}
    count = 0

    def of(a) -> frozenset:
        if isinstance(a, (list, tuple)):
            return frozenset().union(*(of(x) for x in a)) if a else frozenset()
        return deps.get(a, frozenset())

    for n in graph.nodes:
        if n.op != "call_function":
            continue
        deps[n] = of(list(n.args) + list(n.kwargs.values()))
        count += {2, 3} <= deps[n]
    return count + 1


def _flex_mask_stats(node, dims: dict[str, int]) -> tuple[int, dict[str, Any]]:
    """(attended pairs per batch entry and head, extra attrs) of a flex_attention HOP node,
    by evaluating its exported mask graph on the CPU."""
    block_mask = node.args[4]
    mask_node = block_mask[-1]
    block_q, block_kv = int(block_mask[-3]), int(block_mask[-2])
    mask_graph = getattr(node.graph.owning_module, mask_node.target)
    if node.args[8]:
        raise CaptureError(f"{node.name}: flex_attention mask reads tensors "
                           f"({len(node.args[8])} captured buffers) that the capture cannot "
                           "evaluate; describe the pattern with dse::gna_attention instead")
    placeholders = [n for n in mask_graph.graph.nodes if n.op == "placeholder"]
    uses_b, uses_h = (len(placeholders[i].users) > 0 for i in (0, 1))
    batches = dims["batch"] if uses_b else 1
    heads = dims["heads"] if uses_h else 1
    sq, skv = dims["q_len"], dims["kv_len"]
    if sq * skv * batches * heads > MAX_MASK_PAIRS:
        raise CaptureError(
            f"{node.name}: flex_attention mask over {batches * heads} x {sq} x {skv} pairs is "
            f"over the {MAX_MASK_PAIRS} pairs the capture evaluates exactly; describe the "
            "pattern with dse::gna_attention (workloads.sparse_attention.gna) instead")
    full = partial = max_visited = pairs = 0
    n_kv = -(-skv // block_kv)
    kv = torch.arange(skv)[None, :]
    with torch.no_grad():
        for b in range(batches):
            for h in range(heads):
                for r in range(0, sq, block_q):
                    rows = torch.arange(r, min(r + block_q, sq))[:, None]
                    keep = mask_graph(torch.tensor(b), torch.tensor(h), rows, kv)
                    keep = torch.broadcast_to(keep, (rows.shape[0], skv)).to(torch.int64)
                    pairs += int(keep.sum())
                    padded = torch.nn.functional.pad(keep, (0, n_kv * block_kv - skv))
                    per_tile = padded.view(rows.shape[0], n_kv, block_kv).sum(dim=(0, 2))
                    full += int((per_tile == block_q * block_kv).sum())
                    visited = int((per_tile > 0).sum())
                    partial += visited - int((per_tile == block_q * block_kv).sum())
                    max_visited = max(max_visited, visited)
    # counts per (batch, head) problem: averaged when the mask varies across them
    scale = batches * heads
    q_blocks = -(-sq // block_q)
    mask_ops = score_ops(mask_graph.graph)
    return pairs // scale, {"block_mask": {
        "block_q": block_q, "block_kv": block_kv, "q_blocks": q_blocks,
        "kv_blocks_full": full // scale, "kv_blocks_partial": partial // scale,
        "max_visited": max_visited}, "mask_ops": mask_ops}


# ----------------------------------------------------------------------------- re-patterning
def with_gna_pattern(workload, **pattern: Any):
    """``workload`` with every GNA ``sparse_attention`` op's pattern changed by ``pattern``
    (GNA keys: ``window``, ``stride``, ``dilation``, ``causal``, ``layout``, ``tile``,
    ``q_tile``; the grid stays): attended pairs, FLOPs and mask operations recomputed as a
    capture computes them (:func:`capture_attrs`), everything else unchanged. Sparse attention
    ops carry their whole pattern, so a model captured once with GNA can be asked about other
    windows and strides without capturing it again (the token permutes depend only on the
    layout and tiles, which a caller changing them must capture anew)."""
    from dataclasses import replace as _replace
    from workloads.requests import rebuild

    changed = {}
    for op in workload.ops:
        gna_attrs = op.attrs.get("gna") if op.kind == "sparse_attention" else None
        if gna_attrs is None:
            continue
        cfg = GNAConfig.from_mapping({**gna_attrs, **pattern})
        extra = int(op.attrs.get("extra_kv", 0) or 0)
        dims = {k: op.attrs[k] for k in ("batch", "heads", "q_len", "head_dim", "kv_heads",
                                         "kv_len", "value_dim")}
        attrs = _finish(dims, cfg.attended_pairs() + cfg.tokens * extra,
                        {"gna": cfg.to_dict(), "extra_kv": extra,
                         "mask_ops": mask_op_count(cfg)})
        flops = attrs.pop("_flops")
        changed[op.name] = _replace(op.with_attrs(**attrs), flops=flops)
    if not changed:
        return workload
    return rebuild(workload, changed, arch={**workload.arch, **pattern})
