"""One serving iteration of an LLM as a graph: prefill chunks and decode tokens batched together.

A serving engine (vLLM, Sarathi) runs an iteration over a flat list of tokens: every
token-wise op (projections, FFN, norms, RoPE, embedding, LM head, KV append) sees all ``T``
tokens of the iteration at once, while attention is per request: a decode token attends over
its request's KV cache, a prefill chunk of ``c`` tokens after ``p`` cached ones attends
causally over ``p + c``. This module builds that graph from one captured decode step of
batch 1 (pure shape arithmetic, no hardware):

* :func:`scale_tokens`: the token-wise ops of a batch-1 step on ``T`` tokens (FLOPs, activation
  and appended KV bytes, the token dimension of shapes, ``m`` / ``elements`` scaled; weights
  read once), the LM head on one token per sequence that samples (:func:`logit_ops`);
* :func:`token_wise`: the same graph without its attention ops, LM head and MoE layers (their
  producers wired to their consumers): what costs the same for every mix of requests of ``T``
  tokens and is near-linear in ``T`` between tile steps (the experts ``T`` tokens route to are
  not: a concave count, which a straight line between two token counts under-counts);
* :func:`decode_attention` / :func:`prefill_attention`: one attention op of the step for a
  batch of decodes (per-request KV lengths, :mod:`workloads.requests`) or of prefill chunks;
* :func:`iteration_workload`: the whole iteration (token-wise ops on ``T`` tokens, each
  attention op split into the decodes' and the prefill chunks' attention), for direct
  simulation.
"""

from __future__ import annotations

from typing import Sequence

from dse.errors import BadInput
from workloads import ir
from workloads.formats import kv_bytes
from workloads.parallel import _rebuild, replace
from workloads.requests import KV_LENS


def _tokens_dim(shape: tuple, tokens: int) -> tuple:
    """``shape`` with its leading (token) dimension of 1 set to ``tokens``."""
    if shape and shape[0] == 1 and len(shape) >= 2:
        return (tokens, *shape[1:])
    return shape


def scale_op(op: ir.Op, tokens: int) -> ir.Op:
    """A token-wise op of a batch-1 step, on ``tokens`` tokens."""
    if op.kind in (ir.ATTENTION, ir.COLLECTIVE, ir.HOST) or tokens == 1:
        return op
    a = dict(op.attrs)
    if op.kind == ir.MATMUL:
        key = "m" if a.get("weight_operand") or "batch" not in a else "batch"
        a[key] = int(a.get(key, 1)) * tokens
    if "elements" in a:
        a["elements"] = int(a["elements"]) * tokens
    weights = op.weight_bytes * tokens if op.kind == ir.EMBEDDING else op.weight_bytes
    flops = op.flops * tokens
    if op.kind == ir.MOE:   # more tokens touch more experts: route them again
        from workloads.moe import with_tokens
        a, flops, weights = with_tokens(a, int(a["tokens"]) * tokens, op.bytes_per_element,
                                        op.weight_bytes)
    return replace(op, flops=flops, weight_bytes=weights,
                   activation_bytes_read=op.activation_bytes_read * tokens,
                   activation_bytes_written=op.activation_bytes_written * tokens,
                   kv_bytes_written=op.kv_bytes_written * tokens,
                   input_shapes=tuple(_tokens_dim(s, tokens) for s in op.input_shapes),
                   output_shapes=tuple(_tokens_dim(s, tokens) for s in op.output_shapes),
                   attrs=a)


def _check_base(w: ir.Workload) -> None:
    if w.phase != "decode" or w.batch != 1:
        raise BadInput("workload", f"{w.model} {w.phase} batch {w.batch}",
                       "expected a decode step of batch 1 (the iteration's template)")


def logit_ops(w: ir.Workload) -> set[str]:
    """The LM head: weight matmuls no op consumes. An engine computes logits only for the
    sequences that sample a token (one per decode and per prompt), as the zoo's prefill does
    (``last_token_logits``)."""
    return {op.name for op in w.ops if op.kind == ir.MATMUL and op.attrs.get("weight_operand")
            and not w.graph.out_degree(op.name)}


def scale_tokens(w: ir.Workload, tokens: int, logits: int | None = None) -> ir.Workload:
    """``w`` (a decode step of batch 1) with every token-wise op on ``tokens`` tokens and its
    LM head (:func:`logit_ops`) on ``logits`` (default ``tokens``); attention ops are kept as
    they are (replace them per request)."""
    _check_base(w)
    for name, v in (("tokens", tokens), ("logits", tokens if logits is None else logits)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(name, v, "expected a positive int")
    heads = logit_ops(w) if logits is not None else set()
    ops = [scale_op(op, logits if op.name in heads else tokens) for op in w.ops]
    edges = [(u, v, d.get("bytes", 0) * tokens) for u, v, d in w.graph.edges(data=True)]
    return _rebuild(w, ops, edges, w.params, batch=tokens)


def without(w: ir.Workload, names: set[str]) -> ir.Workload:
    """``w`` without the ops ``names``: each one's producers feed its consumers directly."""
    graph = w.graph
    keep = [op for op in w.ops if op.name not in names]
    if len(keep) == len(w.ops):
        return w

    def sources(n: str) -> list[tuple[str, float]]:
        out = []
        for p in graph.predecessors(n):
            if p in names:
                out.extend(sources(p))
            else:
                out.append((p, graph.edges[p, n].get("bytes", 0)))
        return out

    edges = []
    for u, v, d in graph.edges(data=True):
        if u in names or v in names:
            continue
        edges.append((u, v, d.get("bytes", 0)))
    for n in names:
        for s in graph.successors(n):
            if s not in names:
                edges.extend((p, s, nbytes) for p, nbytes in sources(n))
    return _rebuild(w, keep, edges, w.params)


def token_wise(w: ir.Workload) -> ir.Workload:
    """``w`` without its attention ops, its LM head and its MoE layers: what costs the same
    for every mix of requests with the same number of tokens, and is interpolated between
    token counts (the MoE layers' routed experts are costed at each count instead)."""
    return without(w, {op.name for op in w.ops if op.kind in (ir.ATTENTION, ir.MOE)}
                   | logit_ops(w))


def attention_ops(w: ir.Workload) -> list[ir.Op]:
    """The attention ops of ``w`` in order."""
    return [op for op in w.ops if op.kind == ir.ATTENTION]


def decode_attention(op: ir.Op, kv_lens: Sequence[int]) -> ir.Op:
    """Attention op ``op`` (one query token) for a batch of decodes with KV lengths ``kv_lens``
    (tokens, the new one included): KV bytes and FLOPs summed over requests, ``kv_len`` their
    rounded mean (as :func:`workloads.requests.with_kv_lengths`)."""
    kv_lens = tuple(int(x) for x in kv_lens)
    a = op.attrs
    heads, kv_heads, d, dv, per_q, per_out = _dims(op)
    total = sum(kv_lens)
    n = len(kv_lens)
    flops = 2 * heads * (d + dv) * total
    mean = max(1, round(total / n))
    return replace(op, flops=flops, kv_bytes_read=kv_bytes(op, total * kv_heads * ir.kv_row_elements(a), d),
                   activation_bytes_read=per_q * n, activation_bytes_written=per_out * n,
                   **_shapes(n, heads, kv_heads, 1, mean, d, dv),
                   attrs={**a, "batch": n, "q_len": 1, KV_LENS: kv_lens, "kv_len": mean,
                          "causal": False, "causal_flops": flops})


def _dims(op: ir.Op) -> tuple[int, int, int, int, int, int]:
    """Attention op ``op``'s query heads, KV heads, key and value head dims, and its
    activation bytes read and written per query token."""
    a = op.attrs
    heads, kv_heads = int(a["heads"]), int(a.get("kv_heads", a["heads"]))
    d, dv = int(a["head_dim"]), int(a.get("value_dim", a["head_dim"]))
    queries = max(int(a.get("batch", 1)) * int(a["q_len"]), 1)
    return (heads, kv_heads, d, dv, op.activation_bytes_read // queries,
            op.activation_bytes_written // queries)


def _shapes(n: int, heads: int, kv_heads: int, q: int, kv: int, d: int, dv: int) -> dict:
    """An attention op's operand shapes (query, keys, values; output) for ``n`` items."""
    return {"input_shapes": ((n, heads, q, d), (n, kv_heads, kv, d), (n, kv_heads, kv, dv)),
            "output_shapes": ((n, heads, q, dv),)}


def prefill_attention(op: ir.Op, chunks: Sequence[tuple[int, int]]) -> ir.Op:
    """Attention op ``op`` for prefill chunks ``(cached, new)``: each chunk's ``new`` query
    tokens attend causally over its ``cached + new`` keys. One op of batch ``len(chunks)`` at
    the chunks' mean query and key lengths; FLOPs (``causal_flops``: the pairs a causal kernel
    computes) and KV bytes are the exact sums."""
    chunks = [(int(p), int(c)) for p, c in chunks]
    a = op.attrs
    heads, kv_heads, d, dv, per_q, per_out = _dims(op)
    n = len(chunks)
    q = sum(c for _, c in chunks)
    keys = sum(p + c for p, c in chunks)
    pairs = sum(c * p + c * (c + 1) / 2 for p, c in chunks)
    full = sum(c * (p + c) for p, c in chunks)
    q_len, kv_len = max(1, round(q / n)), max(1, round(keys / n))
    return replace(op, flops=2 * heads * (d + dv) * full,
                   kv_bytes_read=kv_bytes(op, keys * kv_heads * ir.kv_row_elements(a), d),
                   activation_bytes_read=per_q * q, activation_bytes_written=per_out * q,
                   **_shapes(n, heads, kv_heads, q_len, kv_len, d, dv),
                   attrs={**{k: v for k, v in a.items() if k != KV_LENS}, "batch": n,
                          "q_len": q_len, "kv_len": kv_len, "causal": True,
                          "causal_flops": int(2 * heads * (d + dv) * pairs)})


def iteration_workload(base: ir.Workload, decode_kv_lens: Sequence[int] = (),
                       prefill_chunks: Sequence[tuple[int, int]] = ()) -> ir.Workload:
    """One iteration: decodes with KV lengths ``decode_kv_lens`` and prefill chunks
    ``(cached, new)`` batched together. Token-wise ops run on all tokens; each attention op is
    the decodes' attention followed by the prefill chunks' (one op for all chunks,
    :func:`prefill_attention`)."""
    _check_base(base)
    tokens = len(decode_kv_lens) + sum(int(c) for _, c in prefill_chunks)
    if tokens < 1:
        raise BadInput("iteration", tokens, "expected at least one token")
    scaled = scale_tokens(base, tokens, len(decode_kv_lens) + len(prefill_chunks))
    ops, rename = [], {}
    for op in scaled.ops:
        if op.kind != ir.ATTENTION:
            ops.append(op)
            continue
        parts = []
        if len(decode_kv_lens):
            parts.append(decode_attention(op, decode_kv_lens))
        if len(prefill_chunks):
            parts.append(replace(prefill_attention(op, prefill_chunks),
                                 name=f"{op.name}@prefill" if parts else op.name))
        ops.extend(parts)
        rename[op.name] = [p.name for p in parts]
    edges = []
    for u, v, d in scaled.graph.edges(data=True):
        edges.append((rename.get(u, [u])[-1], rename.get(v, [v])[0], d.get("bytes", 0)))
    for names in rename.values():
        edges.extend((a, b, 0) for a, b in zip(names, names[1:]))
    return _rebuild(scaled, ops, edges, base.params, batch=tokens)
