"""Graph passes that recognise a multi-op pattern as the one op a template costs it as.

:func:`fuse_eager_attention`: eager attention — ``scores = Q @ K^T`` (two activations), at most a
few elementwise ops (scale, mask add, masked_fill, casts), ``softmax``, at most a few more
(dropout, casts), ``out = P @ V`` — becomes one ``attention`` op with the same FLOPs (the two
matmuls, as ``FlopCounterMode`` counts them) and the compulsory bytes of a fused kernel (Q, K,
V, the mask in; the output out; the score matrix never leaves the chip).
"""

from __future__ import annotations

import math

import networkx as nx

from workloads import ir

#: Most elementwise ops between a matmul and the softmax, and between the softmax and the
#: second matmul (scale, bias, mask, soft-capping as div/tanh/mul, casts; dropout is free).
_MAX_BETWEEN = 6
_BETWEEN_KINDS = (ir.ELEMENTWISE, ir.DATA_MOVEMENT)


def causal_visible(q_len: int, kv_len: int) -> int:
    """Score entries a causal mask keeps: query ``i`` (top-left aligned) sees ``min(i + 1,
    kv_len)`` keys."""
    m = min(q_len, kv_len)
    return m * (m + 1) // 2 + max(0, q_len - kv_len) * kv_len


def fuse_eager_attention(graph: nx.DiGraph, causal: bool = False) -> int:
    """Fuse every eager attention pattern of ``graph`` in place; returns how many. ``causal``:
    attention with equal query and key lengths is causal (the capture of a causal LM)."""
    fused = 0
    for name in [n for n, d in graph.nodes(data=True) if d["op"].kind == ir.SOFTMAX]:
        if name not in graph:
            continue
        chain = _match(graph, name)
        if chain is not None:
            _fuse(graph, chain, causal)
            fused += 1
    return fused


def _op(graph: nx.DiGraph, name: str) -> ir.Op:
    return graph.nodes[name]["op"]


def _activation_matmul(op: ir.Op) -> bool:
    return op.kind == ir.MATMUL and not op.attrs.get("weight_operand") and op.weight_bytes == 0


def _match(graph: nx.DiGraph, softmax: str) -> list[str] | None:
    """``[Q@K^T, between..., softmax, between..., P@V]`` ending at ``softmax``'s consumers, or
    None. Every op but the last may feed only the next one."""
    if graph.out_degree(softmax) != 1:
        return None
    before = _back_to_matmul(graph, softmax, _MAX_BETWEEN)
    if before is None:
        return None
    after, cur = [], softmax
    for _ in range(_MAX_BETWEEN + 1):
        (nxt,) = graph.successors(cur)
        op = _op(graph, nxt)
        if _activation_matmul(op):
            out_shapes = _op(graph, cur).output_shapes
            if op.input_shapes and out_shapes and math.prod(op.input_shapes[0]) == math.prod(out_shapes[0]):
                return before + [softmax] + after + [nxt]
            return None
        if op.kind not in _BETWEEN_KINDS or graph.out_degree(nxt) != 1:
            return None
        after.append(nxt)
        cur = nxt
    return None


def _back_to_matmul(graph: nx.DiGraph, node: str, depth: int) -> list[str] | None:
    """The chain ``[Q@K^T, between...]`` feeding ``node``, nearest first found."""
    for pred in graph.predecessors(node):
        op = _op(graph, pred)
        if graph.out_degree(pred) != 1:
            continue
        if _activation_matmul(op):
            return [pred]
        if depth > 0 and op.kind in _BETWEEN_KINDS:
            found = _back_to_matmul(graph, pred, depth - 1)
            if found is not None:
                return found + [pred]
    return None


def _fuse(graph: nx.DiGraph, chain: list[str], causal_hint: bool) -> None:
    members = set(chain)
    ops = [_op(graph, n) for n in chain]
    qk, pv = ops[0], ops[-1]
    internal = sum(d["bytes"] for u, v, d in graph.edges(data=True)
                   if u in members and v in members)
    q_shape, k_shape = qk.input_shapes[0], qk.input_shapes[1]
    v_shape = pv.input_shapes[1] if len(pv.input_shapes) > 1 else k_shape
    total = max(int(qk.attrs.get("batch", 1)), 1)        # batch x heads of the scores
    heads = q_shape[-3] if len(q_shape) >= 4 and total % max(q_shape[-3], 1) == 0 else total
    batch = total // heads
    sq, d = int(qk.attrs.get("m", q_shape[-2])), int(qk.attrs.get("k", q_shape[-1]))
    skv, dv = int(qk.attrs.get("n", k_shape[-1])), int(pv.attrs.get("n", v_shape[-1]))
    flops = qk.flops + pv.flops
    causal = causal_hint and sq == skv and sq > 1
    masked = any(len(o.input_shapes) > 1 for o in ops[1:-1])   # a mask or bias tensor joins
    attrs = {"batch": batch, "heads": heads, "kv_heads": heads, "q_len": sq, "kv_len": skv,
             "head_dim": d, "value_dim": dv, "causal": causal,
             "causal_flops": flops * causal_visible(sq, skv) // (sq * skv) if causal else flops,
             "eager": True, "masked": masked, "fused_ops": len(chain)}
    fused = ir.Op(name=f"{qk.name}_attention", kind=ir.ATTENTION, target="eager_attention",
                  input_shapes=(q_shape, k_shape, v_shape), output_shapes=pv.output_shapes,
                  dtype=qk.dtype, bytes_per_element=qk.bytes_per_element, flops=flops,
                  weight_bytes=sum(o.weight_bytes for o in ops),
                  activation_bytes_read=sum(o.activation_bytes_read for o in ops) - internal,
                  activation_bytes_written=pv.activation_bytes_written,
                  kv_bytes_read=sum(o.kv_bytes_read for o in ops),
                  kv_bytes_written=pv.kv_bytes_written, attrs=attrs)
    ins: dict[str, int] = {}
    outs: dict[str, int] = {}
    for n in chain:
        for u, _, data in graph.in_edges(n, data=True):
            if u not in members:
                ins[u] = ins.get(u, 0) + data["bytes"]
        for _, v, data in graph.out_edges(n, data=True):
            if v not in members:
                outs[v] = outs.get(v, 0) + data["bytes"]
    index = graph.nodes[chain[0]]["index"]
    graph.remove_nodes_from(chain)
    graph.add_node(fused.name, op=fused, index=index)
    graph.add_edges_from((u, fused.name, {"bytes": b}) for u, b in ins.items())
    graph.add_edges_from((fused.name, v, {"bytes": b}) for v, b in outs.items())
