"""The routed experts of a mixture-of-experts layer as ONE custom op, ``dse::moe_experts``.

    moe_experts(x [T, d], topk_ids [T, k] int64, topk_weights [T, k],
                w_up [E, u, d], w_down [E, d, f], b_up [E, u]?, b_down [E, d]?,
                gated, activation, capacity_factor, imbalance, w_gate [E, f, d]?) -> [T, d]

Expert ``e`` maps a token ``x`` to ``w_down[e] @ h + b_down[e]`` where ``g = w_up[e] @ x +
b_up[e]`` and ``h = act(g[:f]) * g[f:]`` (``gated``, ``u = 2f``: SwiGLU/GeGLU) or ``act(g)``
(``u = f``); with a separate ``w_gate`` (DBRX keeps gate and up apart), ``h = act(w_gate[e] @
x) * (w_up[e] @ x)`` and ``u = f``; token ``t``'s output is ``sum_j topk_weights[t, j] *
expert_{topk_ids[t, j]}(x_t)``.
With ``capacity_factor > 0`` each expert processes at most ``ceil(capacity_factor * T * k / E)``
assignments, in token order, and drops the rest. ``imbalance`` does not change the result: it
tells the capture which load distribution to assume (``workloads/moe.py``), since a capture on
meta tensors sees no routing.

Keeping the experts one op (rather than a data-dependent loop that ``torch.export`` cannot trace
on meta tensors) is what lets the capture count their work; ``workloads.hf`` routes every
Hugging Face MoE model through it, and a zoo or user model calls :func:`moe_experts`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu,
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def experts_reference(x, topk_ids, topk_weights, w_up, w_down, b_up, b_down, gated: bool,
                      activation: str, capacity_factor: float,
                      w_gate: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch experts (the op's CPU implementation); see the module docstring."""
    act = ACTIVATIONS.get(activation, F.silu)
    tokens, k = topk_ids.shape
    experts = w_up.shape[0]
    capacity = math.ceil(capacity_factor * tokens * k / experts) if capacity_factor > 0 else None
    out = torch.zeros_like(x, dtype=torch.float32)
    flat_ids = topk_ids.reshape(-1)
    for e in range(experts):
        rows = (flat_ids == e).nonzero().flatten()
        if capacity is not None:
            rows = rows[:capacity]
        if rows.numel() == 0:
            continue
        tok = rows // k
        g = F.linear(x[tok].float(), w_up[e].float(), None if b_up is None else b_up[e].float())
        if w_gate is not None:
            h = act(F.linear(x[tok].float(), w_gate[e].float())) * g
        elif gated:
            half = g.shape[-1] // 2
            h = act(g[:, :half]) * g[:, half:]
        else:
            h = act(g)
        y = F.linear(h, w_down[e].float(), None if b_down is None else b_down[e].float())
        out.index_add_(0, tok, y * topk_weights.reshape(-1)[rows, None].float())
    return out.to(x.dtype)


@torch.library.custom_op("dse::moe_experts", mutates_args=())
def moe_experts(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                w_up: torch.Tensor, w_down: torch.Tensor, b_up: torch.Tensor | None,
                b_down: torch.Tensor | None, gated: bool, activation: str,
                capacity_factor: float, imbalance: float,
                w_gate: torch.Tensor | None = None) -> torch.Tensor:
    """Routed experts of one MoE layer: [T, d] tokens -> [T, d] (see the module docstring)."""
    return experts_reference(x, topk_ids, topk_weights, w_up, w_down, b_up, b_down, gated,
                             activation, capacity_factor, w_gate)


@moe_experts.register_fake
def _moe_experts_fake(x, topk_ids, topk_weights, w_up, w_down, b_up, b_down, gated, activation,
                      capacity_factor, imbalance, w_gate=None):
    torch._check(x.dim() == 2 and topk_ids.dim() == 2 and w_up.dim() == 3 and w_down.dim() == 3,
                 lambda: "moe_experts: x [T, d], topk_ids [T, k], w_up [E, u, d], w_down [E, d, f]")
    return torch.empty_like(x)
