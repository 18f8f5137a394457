"""Attrs and FLOPs of the exported ops whose work is not a plain function of their output size:
``einsum`` (from its equation), recurrent layers (``lstm``/``gru``/``rnn_*``), the routed
experts of a mixture of experts and the selective scan.

Each function takes the exported node, its tensor inputs and outputs (``capture._Tensor``:
``shape``, ``numel``, ``itemsize``, ``role``) and returns ``(attrs, flops)``; the ``moe`` one also
the weight bytes it reads. FLOPs are 2 per multiply-accumulate, as torch's ``FlopCounterMode``
counts the matmuls these ops decompose into (einsum, recurrent layers); the grouped experts and
the scan are custom ops it does not count, so theirs are analytic (``workloads/moe.py``,
``workloads/scan_op.py``).
"""

from __future__ import annotations

import math
import string
from typing import Any, Sequence

from dse.errors import CaptureError
from workloads import moe


def einsum_attrs(node, inputs: Sequence) -> tuple[dict[str, Any], int]:
    """An einsum contracted pairwise, left to right (torch's order without opt_einsum): FLOPs
    ``2 * prod(sizes of every index of the pair)`` per pairwise contraction, as the ``bmm`` it
    becomes; attrs are the batched-GEMM view of the largest contraction."""
    equation = str(node.args[0]).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(inputs):
        raise CaptureError(f"einsum {equation!r}: {len(terms)} terms but {len(inputs)} operands")
    spare = iter(c for c in string.ascii_uppercase + string.ascii_lowercase if c not in equation)
    ellipsis: list[str] = []
    sizes: dict[str, int] = {}
    expanded = []
    for term, t in zip(terms, inputs):
        if "..." in term:
            n_ell = len(t.shape) - (len(term) - 3)
            while len(ellipsis) < n_ell:
                ellipsis.insert(0, next(spare))
            term = term.replace("...", "".join(ellipsis[len(ellipsis) - n_ell:]))
        for c, s in zip(term, t.shape):
            sizes[c] = max(sizes.get(c, 1), int(s))
        expanded.append(term)
    if arrow:
        out = rhs.replace("...", "".join(ellipsis))
    else:
        seen = "".join(expanded)
        out = "".join(ellipsis) + "".join(sorted(c for c in set(seen) if seen.count(c) == 1
                                                 and c not in ellipsis))
    flops, best = 0, {"m": 1, "n": 1, "k": 1, "batch": 1}
    left = expanded[0]
    for i, right in enumerate(expanded[1:], start=1):
        later = set(out).union(*map(set, expanded[i + 1:]))
        keep = set(left) | set(right)
        result = "".join(c for c in dict.fromkeys(left + right) if c in later)
        prod = lambda idx: math.prod(sizes[c] for c in idx)  # noqa: E731
        pair_flops = 2 * prod(keep)
        flops += pair_flops
        if pair_flops >= 2 * best["m"] * best["n"] * best["k"] * best["batch"]:
            batch = [c for c in keep if c in left and c in right and c in result]
            k = [c for c in keep if c in left and c in right and c not in result]
            m = [c for c in left if c not in right and c in result]
            n = [c for c in right if c not in left and c in result]
            best = {"batch": prod(batch), "m": prod(m), "n": prod(n), "k": prod(k)}
        left = result
    attrs = {**best, "equation": equation, "weight_operand": any(
        getattr(t, "role", "") == "weight" for t in inputs[1:])}
    return attrs, flops


def recurrent_attrs(name: str, node, inputs: Sequence) -> tuple[dict[str, Any], int]:
    """``aten.lstm/gru/rnn_tanh/rnn_relu(input, hx, params, has_biases, num_layers, dropout,
    train, bidirectional, batch_first)``: every 2-D parameter is one matmul per step, so FLOPs
    are ``2 * batch * steps * numel(W)`` summed over the weight matrices."""
    x = inputs[0]
    args = list(node.args)
    num_layers, bidirectional, batch_first = int(args[4]), bool(args[7]), bool(args[8])
    steps = x.shape[1] if (batch_first and len(x.shape) == 3) else x.shape[0]
    rows = x.numel // max(x.shape[-1], 1)          # batch x steps
    weights = [t for t in inputs if t.role == "weight" and len(t.shape) == 2]
    flops = sum(2 * rows * t.numel for t in weights)
    gates = {"lstm": 4, "gru": 3}.get(name, 1)
    directions = 2 if bidirectional else 1
    attrs = {"mode": name, "batch": rows // max(steps, 1), "steps": steps,
             "input_size": x.shape[-1], "hidden": weights[0].shape[0] // gates,
             "layers": num_layers, "directions": directions, "gates": gates,
             # per layer and direction, in order: the input matmul (all steps at once), then
             # the matmuls each step runs on the previous state (W_hh, and W_hr with proj_size)
             "weight_shapes": [list(t.shape) for t in weights],
             "weights_per_cell": len(weights) // max(num_layers * directions, 1)}
    return attrs, flops


def moe_experts_attrs(node, inputs: Sequence) -> tuple[dict[str, Any], int, int]:
    """``dse::moe_experts(x, topk_ids, topk_weights, w_up, w_down, b_up?, b_down?, gated,
    activation, capacity_factor, imbalance, w_gate?)`` (``workloads/moe_op.py``)."""
    import torch
    args = list(node.args) + [None] * 12
    kw = node.kwargs
    positions = [i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node)]
    at = dict(zip(positions, inputs))   # the capture's tensors by argument position
    x, ids, w_up, w_down = at[0], at[1], at[3], at[4]
    w_gate = at.get(11)
    biases = [t for t in (at.get(5), at.get(6)) if t is not None]
    gated = bool(kw.get("gated", args[7]))
    cf = float(kw.get("capacity_factor", args[9]) or 0.0)
    imbalance = float(kw.get("imbalance", args[10]) or 1.0)
    experts, up_n, d = w_up.shape
    f = w_down.shape[2]
    gemms = [(up_n, d), (w_down.shape[1], f)]
    if w_gate is not None:   # gate and up kept apart: both f x d
        gemms = [(w_gate.shape[1], d)] + gemms
    per_expert = (w_up.numel + w_down.numel + sum(b.numel for b in biases)
                  + (w_gate.numel if w_gate is not None else 0)) // experts
    attrs, flops, weight = moe.moe_attrs(
        tokens=x.shape[0], top_k=ids.shape[1], experts=experts, gemms=gemms,
        act_elements_per_token=up_n // 2 if gated and w_gate is None else up_n,
        params_per_expert=per_expert, itemsize=w_up.itemsize, imbalance=imbalance,
        capacity_factor=cf)
    return {**attrs, "gated": gated}, flops, weight


def grouped_mm_attrs(node, inputs: Sequence) -> tuple[dict[str, Any], int, int]:
    """A bare grouped matmul ``(x [S, k], w [E, k, n], offs [E])`` (``torch._grouped_mm``,
    transformers' fallback): S rows spread uniformly over the E experts (the routing is data)."""
    x, w = inputs[0], inputs[1]
    experts, k, n = w.shape
    attrs, flops, weight = moe.moe_attrs(
        tokens=x.shape[0], top_k=None, experts=experts, gemms=[(n, k)], act_elements_per_token=0,
        params_per_expert=k * n, itemsize=w.itemsize)
    return attrs, flops, weight


def scan_attrs(node, inputs: Sequence, outputs: Sequence) -> tuple[dict[str, Any], int]:
    """``dse::selective_scan`` (``workloads/scan_op.py``)."""
    from workloads.scan_op import scan_flops
    args = list(node.args) + [None] * 11
    u, a = inputs[0], inputs[2]
    batch, channels, seq = u.shape
    state = a.shape[-1]
    b_shape = inputs[3].shape
    with_d = args[5] is not None or node.kwargs.get("D") is not None
    with_z = args[6] is not None or node.kwargs.get("z") is not None
    attrs = {"batch": batch, "channels": channels, "seq": seq, "state": state,
             "groups": b_shape[1] if len(b_shape) == 4 else 1,
             "elements": batch * channels * seq}
    return attrs, scan_flops(batch, channels, seq, state, with_d, with_z)
