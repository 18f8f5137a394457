"""Attrs and FLOPs of the backward ops of a training step whose work is a GEMM's, not their
output size: attention backward and convolution backward (``workloads/training.py`` captures
the joint forward-backward graph that holds them).

FLOPs follow torch's ``FlopCounterMode`` (2 per multiply-accumulate):

* **attention backward** (flash-attention style, FA2 [P Dao 2023, Alg. 2]): the score matrix
  is recomputed (``Q K^T``), then ``dP = dO V^T``, ``dV = P^T dO``, ``dQ = dS K`` and
  ``dK = dS^T Q``: five products, ``2 b h sq skv (3 d + 2 dv)`` FLOPs (torch's
  ``sdpa_backward_flop_count``). The op keeps the forward's ``attention`` attrs with
  ``head_dim = 3 d`` and ``value_dim = 2 dv`` so that every template's attention cost (a
  function of ``2 b h sq skv (head_dim + value_dim)`` products) costs the five products at
  its attention rate; ``fwd_head_dim`` / ``fwd_value_dim`` keep the real sizes and
  ``backward`` is True. Its bytes are the tensors it really reads (``dO``, Q, K, V, O, the
  softmax statistics) and writes (dQ, dK, dV).
* **convolution backward**: the input gradient (when asked) and the weight gradient are each
  an implicit GEMM of the forward's size (torch's ``conv_backward_flop``: the same
  ``2 N K P Q C R S / groups``); the op keeps the forward's ``conv`` attrs with ``n`` (and
  ``gemm_m``) multiplied by the number of gradients computed, so a template costs it as that
  many forward convolutions. ``grads`` says which (``input``, ``weight``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from workloads.patterns import causal_visible


def schema_arg(node, name: str, default: Any = None) -> Any:
    """Argument ``name`` of an ATen call node, by its schema (positional or keyword)."""
    if name in node.kwargs:
        return node.kwargs[name]
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return default
    for i, arg in enumerate(schema.arguments):
        if arg.name == name:
            return node.args[i] if i < len(node.args) else default
    return default


def attention_backward_attrs(node, inputs: Sequence) -> tuple[dict[str, Any], int]:
    """(attrs, FLOPs) of an SDPA backward kernel: inputs ``dO, Q, K, V, ...``."""
    q, k, v = inputs[1], inputs[2], inputs[3]
    causal = bool(schema_arg(node, "is_causal", False))
    b = math.prod(q.shape[:-3]) if len(q.shape) > 3 else 1
    heads, sq, d = (q.shape[-3] if len(q.shape) >= 3 else 1), q.shape[-2], q.shape[-1]
    kv_heads, skv, dv = (k.shape[-3] if len(k.shape) >= 3 else 1), k.shape[-2], v.shape[-1]
    flops = 2 * b * heads * sq * skv * (3 * d + 2 * dv)
    causal_flops = flops * causal_visible(sq, skv) // (sq * skv) if causal else flops
    return {"batch": b, "heads": heads, "kv_heads": kv_heads, "q_len": sq, "kv_len": skv,
            "head_dim": 3 * d, "value_dim": 2 * dv, "causal": causal,
            "causal_flops": int(causal_flops), "backward": True, "fwd_head_dim": d,
            "fwd_value_dim": dv}, int(flops)


def conv_backward_attrs(node, inputs: Sequence, forward_attrs) -> tuple[dict[str, Any], int]:
    """(attrs, FLOPs) of ``convolution_backward(dO, input, weight, bias_sizes, stride,
    padding, dilation, transposed, output_padding, groups, output_mask)``;
    ``forward_attrs(x, w, out_shape, stride, padding, groups, transposed)`` gives the
    forward convolution's attrs (``capture``'s)."""
    grad_out, x, w = inputs[0], inputs[1], inputs[2]
    args = list(node.args) + [None] * 11
    stride, padding, transposed, groups = args[4], args[5], bool(args[7]), int(args[9] or 1)
    mask = args[10] if args[10] is not None else [True, True, True]
    grads = [name for name, on in zip(("input", "weight"), mask[:2]) if on]
    attrs = forward_attrs(x, w, grad_out.shape, stride, padding, groups, transposed)
    count = len(grads)
    flops = 2 * attrs["gemm_m"] * attrs["gemm_n"] * attrs["gemm_k"] * attrs["groups"] * count
    attrs = {**attrs, "n": attrs["n"] * max(count, 1), "gemm_m": attrs["gemm_m"] * max(count, 1),
             "backward": True, "grads": grads}
    return attrs, int(flops)
