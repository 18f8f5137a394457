"""Multi-head latent attention (MLA) as serving engines run it, for Hugging Face models.

transformers caches MLA's compressed latent (``kv_lora_rank`` + ``qk_rope_head_dim`` elements
per token, 576 for DeepSeek-V3) and, every step, re-expands the whole cache through
``kv_b_proj`` into per-head keys and values before attention: at DeepSeek-V3's shapes and 1,024
tokens of context that is 27.7x the decode FLOPs of the absorbed form and, at 4,096 tokens,
tens of GB of activation traffic per step. Serving engines (FlashMLA, vLLM, SGLang) absorb the
up-projections instead [P DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.2]: ``q_latent = q_nope
W^UK`` per head, attention over the cached latent rows (:mod:`workloads.mla_op`), and
``out = o_latent W^UV^T`` per head, then ``o_proj``.

:func:`absorbed` applies that form to every MLA attention module of a model (a module with
``kv_b_proj``, ``expand_kv`` and the MLA head sizes: DeepSeek-V2/V3, Kimi, MiniCPM3, GLM-MoE-
lite, Mistral-4, LongCat-Flash and the others built from DeepSeek's code) while a decode step
is captured: ``expand_kv`` hands the cached latent and rope keys through unexpanded, and the
SDPA call transformers makes becomes the absorbed computation. The cache layout, the
projections before it and ``o_proj`` after it are transformers' own. ``mla=expanded`` (``--arch
mla=expanded``) keeps transformers' form; prefill keeps it always (engines expand the latent
for long prompts too).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from workloads.mla_op import mla_attention

#: How a decode step runs MLA: ``absorbed`` (serving engines; the default) or ``expanded``
#: (transformers' code as written).
FORMS = ("absorbed", "expanded")
_ATTRS = ("kv_b_proj", "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "v_head_dim")


def mla_modules(model: nn.Module) -> list[nn.Module]:
    """The MLA attention modules of ``model``."""
    return [m for m in model.modules()
            if all(hasattr(m, a) for a in _ATTRS) and callable(getattr(m, "expand_kv", None))]


def _heads(module: nn.Module) -> int:
    for name in ("num_heads", "num_attention_heads"):
        if isinstance(getattr(module, name, None), int):
            return getattr(module, name)
    return module.config.num_attention_heads


def absorbed_attention(module: nn.Module, query: torch.Tensor, latent: torch.Tensor,
                       k_rope: torch.Tensor, scaling: float) -> torch.Tensor:
    """``[b, s, H, v_head_dim]``: MLA of ``query`` (``[b, H, s, nope + rope]``, as
    transformers builds it) over the cached ``latent`` (``[b, 1, n, r]``) and ``k_rope``
    (``[b, 1, n, rope]``), the up-projections absorbed."""
    nope, rope = module.qk_nope_head_dim, module.qk_rope_head_dim
    r, v, heads = module.kv_lora_rank, module.v_head_dim, _heads(module)
    w = module.kv_b_proj.weight.view(heads, nope + v, r)
    q_nope, q_rope = query.split([nope, rope], dim=-1)
    q_latent = torch.matmul(q_nope, w[:, :nope])                      # [b, H, s, r]
    out = mla_attention(q_latent, q_rope, latent, k_rope, float(scaling))
    out = torch.matmul(out, w[:, nope:].transpose(-1, -2))            # [b, H, s, v]
    return out.transpose(1, 2).contiguous()


@contextlib.contextmanager
def absorbed(model: nn.Module) -> Iterator[int]:
    """Within the block, ``model``'s MLA modules run absorbed (yields how many there are)."""
    modules = mla_modules(model)
    if not modules:
        yield 0
        return
    from transformers.modeling_utils import AttentionInterface
    table = AttentionInterface._global_mapping
    original = table["sdpa"]

    def sdpa(module, query, key, value, attention_mask, scaling=None, **kwargs):
        if getattr(module, "_dse_absorbed", False):
            scale = scaling if scaling is not None else query.shape[-1] ** -0.5
            return absorbed_attention(module, query, key, value, scale), None
        return original(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    for m in modules:
        m._dse_absorbed = True
        m.expand_kv = lambda latent, k_rope: (latent, k_rope)   # the cache, unexpanded
    table["sdpa"] = sdpa
    try:
        yield len(modules)
    finally:
        table["sdpa"] = original
        for m in modules:
            del m._dse_absorbed
            del m.expand_kv
