"""Multi-head latent attention over the compressed cache as ONE custom op,
``dse::mla_attention``: the absorbed form serving engines run for MLA decode (DeepSeek-V2/V3,
Kimi, MiniCPM3, GLM-MoE-lite...).

    mla_attention(q_latent [b, H, s, r], q_rope [b, H, s, p], latent [b, 1, n, r],
                  k_rope [b, 1, n, p], scale) -> [b, H, s, r]

``scores[h, t] = scale * (q_latent[h] . latent[t] + q_rope[h] . k_rope[t])``, softmax over
``t`` (causal, bottom-right aligned, when ``s > 1``), output ``sum_t p[h, t] latent[t]``: every
head attends to the same cached rows, which are both its keys (latent and rope parts) and its
values (the latent part), so an engine reads each cached row once per step (FlashMLA's
``[latent | rope]`` rows of ``r + p = 576`` elements for DeepSeek-V3 [R deepseek-ai/FlashMLA
README; DeepSeek-V2 paper, arXiv 2405.04434, Sec. 2.1.2 "absorb W^UK into W^Q, W^UV into
W^O"]). The query's ``W^UK`` absorption and the output's ``W^UV`` are ordinary matmuls around
it (:mod:`workloads.hf_mla`).

The capture reads it as an ``attention`` op with ``kv_heads`` 1, ``head_dim`` ``r + p``,
``value_dim`` ``r`` and ``kv_shared`` (the values are a prefix of the keys' rows: K/V bytes are
counted once); its FLOPs are ``2 b H s n (r + p) + 2 b H s n r``, the two matmuls of the
eager form (torch's ``FlopCounterMode`` does not see inside a custom op).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch


@torch.library.custom_op("dse::mla_attention", mutates_args=())
def mla_attention(q_latent: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor,
                  k_rope: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of ``q`` over the latent cache (see the module docstring)."""
    scores = (q_latent.float() @ latent.float().transpose(-1, -2)
              + q_rope.float() @ k_rope.float().transpose(-1, -2)) * scale
    s, n = scores.shape[-2], scores.shape[-1]
    if s > 1:   # query i sees keys up to n - s + i
        keep = torch.ones(s, n, dtype=torch.bool, device=scores.device).tril(n - s)
        scores = scores.masked_fill(~keep, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ latent.float()).to(q_latent.dtype)


@mla_attention.register_fake
def _mla_attention_fake(q_latent, q_rope, latent, k_rope, scale):
    torch._check(q_latent.dim() == 4 and latent.dim() == 4,
                 lambda: "mla_attention: q_latent [b, H, s, r], latent [b, 1, n, r]")
    return q_latent.new_empty(q_latent.shape)


def capture_attrs(inputs: Sequence) -> tuple[dict[str, Any], int]:
    """Attention attrs and FLOPs of a captured ``dse::mla_attention`` (inputs: the capture's
    tensors, in argument order)."""
    q, qr, lat = inputs[0].shape, inputs[1].shape, inputs[2].shape
    b, heads, s, r = math.prod(q[:-3]), q[-3], q[-2], q[-1]
    p, n = qr[-1], lat[-2]
    flops = 2 * b * heads * s * n * (r + p) + 2 * b * heads * s * n * r
    causal = s > 1
    visible = (s * n - s * (s - 1) // 2) if causal else s * n   # bottom-right aligned
    return ({"batch": b, "heads": heads, "kv_heads": 1, "q_len": s, "kv_len": n,
             "head_dim": r + p, "value_dim": r, "kv_shared": True, "causal": causal,
             "causal_flops": flops * visible // (s * n), "mla": "absorbed"}, flops)
