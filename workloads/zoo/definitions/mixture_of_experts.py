"""Mixture-of-experts decoders: Mixtral 8x7B and DeepSeekMoE 16B (fine-grained experts plus
shared experts).

A Llama-style :class:`~workloads.zoo.definitions.llm.DecoderLM` whose feed-forward blocks, from
layer ``first_dense`` on, are :class:`MoE`: a router (linear -> softmax -> top-k, optionally
renormalised over the picked experts), the routed experts as one ``dse::moe_experts`` op
(SwiGLU experts of width ``moe_d_ff``) and, for DeepSeek, ``n_shared`` always-on experts fused
into one SwiGLU of width ``n_shared * moe_d_ff`` [P Dai et al., "DeepSeekMoE", 2024, sec. 3].
``expert_imbalance`` and ``capacity_factor`` are the routing assumptions of the capture
(``workloads/moe.py``); they do not change the module.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput
from workloads.moe import MAX_EXPERTS
from workloads.moe_op import moe_experts
from workloads.zoo.definitions.layers import SwiGLU
from workloads.zoo.definitions.llm import PHASES, DecoderLM, _llm_inputs
from workloads.zoo.registry import ModelSpec, register


class MoE(nn.Module):
    """Router + routed SwiGLU experts (+ shared experts): [b, s, d] -> [b, s, d]."""

    def __init__(self, d: int, moe_d_ff: int, experts: int, top_k: int, shared: int,
                 renormalize: bool, imbalance: float, capacity_factor: float):
        super().__init__()
        if not 1 <= top_k <= experts <= MAX_EXPERTS:
            raise BadInput("arch.top_k", top_k, f"expected 1 <= top_k <= n_experts={experts}")
        self.top_k, self.renormalize = top_k, renormalize
        self.imbalance, self.capacity_factor = float(imbalance), float(capacity_factor)
        self.router = nn.Linear(d, experts, bias=False)
        self.w_up = nn.Parameter(torch.empty(experts, 2 * moe_d_ff, d))   # gate and up
        self.w_down = nn.Parameter(torch.empty(experts, d, moe_d_ff))
        self.shared = SwiGLU(d, shared * moe_d_ff) if shared else None
        for w, fan_in in ((self.w_up, d), (self.w_down, moe_d_ff)):   # as nn.Linear's default
            nn.init.uniform_(w, -fan_in ** -0.5, fan_in ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        tokens = x.reshape(b * s, d)
        probs = F.softmax(self.router(tokens), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        y = moe_experts(tokens, ids, weights, self.w_up, self.w_down, None, None, True, "silu",
                        self.capacity_factor, self.imbalance)
        if self.shared is not None:
            y = y + self.shared(tokens)
        return y.reshape(b, s, d)


class MoEDecoderLM(DecoderLM):
    """Llama-style decoder whose feed-forward blocks from ``first_dense`` on are :class:`MoE`."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__(arch, "llama")
        if arch["first_dense"] > arch["n_layer"]:
            raise BadInput("arch.first_dense", arch["first_dense"],
                           f"expected at most n_layer={arch['n_layer']}")
        for block in list(self.blocks)[arch["first_dense"]:]:
            block.mlp = MoE(arch["d_model"], arch["moe_d_ff"], arch["n_experts"], arch["top_k"],
                            arch["n_shared"], arch["renormalize"], arch["expert_imbalance"],
                            arch["capacity_factor"])


def _register(name: str, description: str, arch: dict[str, Any], published: int,
              published_active: int) -> None:
    arch = {**arch, "expert_imbalance": 1.0, "capacity_factor": 0.0, "last_token_logits": True}
    register(ModelSpec(name=name, family="llm", description=description, arch=arch,
                       build=MoEDecoderLM, inputs=_llm_inputs(name), phases=PHASES,
                       published_params=published, published_active_params=published_active,
                       arch_min={"first_dense": 0, "n_shared": 0, "capacity_factor": 0.0}))


# Mixtral 8x7B [R HF mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads,
# 8 KV heads, intermediate 14336, 8 local experts, 2 per token, vocab 32000, 32768 positions,
# rope_theta 1e6]; published 46.7B total / 12.9B active parameters [P Jiang et al., "Mixtral of
# Experts", 2024: "47B parameters ... 13B active"; R the model card's 46.7B].
_register("mixtral-8x7b", "Mixtral 8x7B (8 experts, top-2)",
          {"n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "d_ff": 14336,
           "moe_d_ff": 14336, "n_experts": 8, "top_k": 2, "n_shared": 0, "first_dense": 0,
           "renormalize": True, "vocab_size": 32000, "max_seq": 32768, "rope_theta": 1e6},
          46_700_000_000, 12_900_000_000)

# DeepSeekMoE 16B [R HF deepseek-ai/deepseek-moe-16b-base config.json: 28 layers, hidden 2048,
# 16 heads, intermediate 10944 (the first, dense layer), moe_intermediate_size 1408, 64 routed
# experts, 6 per token, 2 shared experts, first_k_dense_replace 1, norm_topk_prob false, vocab
# 102400, 4096 positions]; published 16.4B total / 2.8B activated [P Dai et al. 2024, Table 1
# of the DeepSeekMoE paper, 16B model].
_register("deepseek-moe-16b", "DeepSeekMoE 16B (64 fine-grained experts, top-6, 2 shared)",
          {"n_layer": 28, "d_model": 2048, "n_head": 16, "n_kv_head": 16, "d_ff": 10944,
           "moe_d_ff": 1408, "n_experts": 64, "top_k": 6, "n_shared": 2, "first_dense": 1,
           "renormalize": False, "vocab_size": 102400, "max_seq": 4096, "rope_theta": 10000.0},
          16_400_000_000, 2_800_000_000)
