"""Transformer building blocks shared by the zoo's decoders, encoders and ViT.

Attention always goes through one ``F.scaled_dot_product_attention`` call, so the capture sees
one attention op. Grouped-query attention passes ``enable_gqa=True`` (checked on torch 2.13:
``torch.export`` keeps one ``aten.scaled_dot_product_attention`` node with the kwarg, and
``FlopCounterMode`` on meta tensors counts the GQA call exactly like the same call with K/V
repeated to all query heads).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput


def check_heads(d_model: int, n_head: int, n_kv_head: int | None = None) -> int:
    """Head size for ``d_model`` split over ``n_head`` heads; :class:`BadInput` when it does not
    divide, or when ``n_kv_head`` does not divide ``n_head``."""
    if d_model % n_head:
        raise BadInput("arch.n_head", n_head, f"expected a divisor of d_model={d_model}")
    if n_kv_head is not None and n_head % n_kv_head:
        raise BadInput("arch.n_kv_head", n_kv_head, f"expected a divisor of n_head={n_head}")
    return d_model // n_head


def rope_tables(max_seq: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [max_seq, head_dim] of rotary embeddings (rotate-half layout):
    frequency ``theta**(-2i/head_dim)`` for i < head_dim/2, each used for both halves."""
    if head_dim % 2:
        raise BadInput("head_dim", head_dim, "rotary embeddings need an even head size")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [batch, heads, seq, head_dim] by the angles in ``cos``/``sin``
    [seq, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Multi-head (grouped-query when ``n_kv_head < n_head``) self-attention.

    ``forward(x, past=None, rope=None, causal=False) -> (out, (k, v))``: ``past`` is a (k, v)
    pair [batch, kv_heads, context, head_dim] onto which the new keys and values are
    concatenated along the sequence; ``rope`` a (cos, sin) pair [seq, head_dim] for the new
    positions; the returned (k, v) is the cache after this step.
    """

    def __init__(self, d_model: int, n_head: int, n_kv_head: int, bias: bool):
        super().__init__()
        self.n_head, self.n_kv_head = n_head, n_kv_head
        self.head_dim = check_heads(d_model, n_head, n_kv_head)
        self.q_proj = nn.Linear(d_model, n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_head * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_head * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_head * self.head_dim, d_model, bias=bias)

    def _heads(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                causal: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, s, _ = x.shape
        q = self._heads(self.q_proj(x), self.n_head)
        k = self._heads(self.k_proj(x), self.n_kv_head)
        v = self._heads(self.v_proj(x), self.n_kv_head)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                             enable_gqa=self.n_kv_head != self.n_head)
        out = self.o_proj(out.transpose(1, 2).reshape(b, s, self.n_head * self.head_dim))
        return out, (k, v)


class GeluMLP(nn.Module):
    """Linear -> GELU -> Linear (GPT, BERT, ViT)."""

    def __init__(self, d_model: int, d_ff: int, approximate: str = "none"):
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff)
        self.fc_out = nn.Linear(d_ff, d_model)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x), approximate=self.approximate))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) without biases (Llama)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class PreNormBlock(nn.Module):
    """x + attn(norm(x)), then + mlp(norm(x)) (GPT, Llama, ViT); returns (x, (k, v))."""

    def __init__(self, attn: Attention, mlp: nn.Module, norm1: nn.Module, norm2: nn.Module):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp

    def forward(self, x, past=None, rope=None, causal=False):
        attn_out, present = self.attn(self.norm1(x), past, rope, causal)
        x = x + attn_out
        return x + self.mlp(self.norm2(x)), present


class PostNormBlock(nn.Module):
    """norm(x + attn(x)), then norm(x + mlp(x)) (BERT)."""

    def __init__(self, attn: Attention, mlp: nn.Module, norm1: nn.Module, norm2: nn.Module):
        super().__init__()
        self.attn, self.norm1, self.mlp, self.norm2 = attn, norm1, mlp, norm2

    def forward(self, x):
        x = self.norm1(x + self.attn(x)[0])
        return self.norm2(x + self.mlp(x))
