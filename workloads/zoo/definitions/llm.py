"""Decoder-only language models: GPT-2, GPT-3 (NeuPIMs sizes) and the Llama family.

One module, :class:`DecoderLM`, covers both styles:

* ``gpt``: learned positions, LayerNorm (eps 1e-5), GELU (tanh) MLP, biases, tied embeddings.
* ``llama``: RoPE, RMSNorm (eps 1e-5), SwiGLU MLP, grouped-query attention, no biases, untied
  output head.

``forward(input_ids, kv_cache=None)`` returns logits. Prefill (no cache) runs causal attention
over the prompt; decode takes ``kv_cache``, a list with one (k, v) per layer, each
[batch, kv_heads, context, head_dim], appends the new token's keys/values with ``torch.cat``
along dim 2 and attends (not causal: one query) over context + 1 keys. With
``last_token_logits`` (default) only the last position goes through the output head, as an
inference server does; set it False for logits at every position.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dse.errors import BadInput
from workloads.zoo.definitions.checks import check_count, check_phase
from workloads.zoo.definitions.layers import (Attention, GeluMLP, PreNormBlock, SwiGLU,
                                              check_heads, rope_tables)
from workloads.zoo.registry import ModelSpec, SizeRule, register

PHASES = ("prefill", "decode")

#: LayerNorm epsilon of GPT-2 (dimensionless) [R HF openai-community/gpt2 config.json
#: layer_norm_epsilon]; GPT-3 follows GPT-2 [P Brown et al. 2020, sec. 2.1].
GPT_LN_EPS = 1e-5
#: RMSNorm epsilon of Llama 2 / Llama 3 / TinyLlama (dimensionless) [R HF config.json
#: rms_norm_eps of meta-llama/Llama-2-7b-hf, meta-llama/Meta-Llama-3-8B, TinyLlama-1.1B].
LLAMA_RMS_EPS = 1e-5


class DecoderLM(nn.Module):
    """A GPT- or Llama-style decoder; see the module docstring."""

    def __init__(self, arch: dict[str, Any], style: str):
        super().__init__()
        self.style = style
        self.last_token_logits = bool(arch["last_token_logits"])
        self.max_seq = arch["max_seq"]
        d, n_head = arch["d_model"], arch["n_head"]
        n_kv = arch.get("n_kv_head", n_head)
        head_dim = check_heads(d, n_head, n_kv)
        self.embed = nn.Embedding(arch["vocab_size"], d)
        blocks = []
        for _ in range(arch["n_layer"]):
            if style == "gpt":
                blocks.append(PreNormBlock(Attention(d, n_head, n_head, bias=True),
                                           GeluMLP(d, arch["d_ff"], approximate="tanh"),
                                           nn.LayerNorm(d, eps=GPT_LN_EPS),
                                           nn.LayerNorm(d, eps=GPT_LN_EPS)))
            else:
                blocks.append(PreNormBlock(Attention(d, n_head, n_kv, bias=False),
                                           SwiGLU(d, arch["d_ff"]),
                                           nn.RMSNorm(d, eps=LLAMA_RMS_EPS),
                                           nn.RMSNorm(d, eps=LLAMA_RMS_EPS)))
        self.blocks = nn.ModuleList(blocks)
        if style == "gpt":
            self.pos_embed = nn.Embedding(arch["max_seq"], d)
            self.norm = nn.LayerNorm(d, eps=GPT_LN_EPS)
            self.lm_head = nn.Linear(d, arch["vocab_size"], bias=False)
            self.lm_head.weight = self.embed.weight  # tied: counted once by parameters()
        else:
            cos, sin = rope_tables(arch["max_seq"], head_dim, arch["rope_theta"])
            # Non-persistent buffers: constants of the graph, never parameters.
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
            self.norm = nn.RMSNorm(d, eps=LLAMA_RMS_EPS)
            self.lm_head = nn.Linear(d, arch["vocab_size"], bias=False)

    def forward(self, input_ids: torch.Tensor, kv_cache=None, return_cache: bool = False):
        """Logits [batch, 1 or seq, vocab]; with ``return_cache`` also the (k, v) per layer."""
        b, s = input_ids.shape
        past = 0 if kv_cache is None else kv_cache[0][0].shape[2]
        if past + s > self.max_seq:
            raise BadInput("context", past + s, f"expected at most max_seq={self.max_seq} tokens")
        x = self.embed(input_ids)
        rope = None
        if self.style == "gpt":
            x = x + self.pos_embed(torch.arange(past, past + s, device=input_ids.device))
        else:
            rope = (self.rope_cos[past:past + s], self.rope_sin[past:past + s])
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, None if kv_cache is None else kv_cache[i], rope,
                               causal=kv_cache is None)
            presents.append(present)
        x = self.norm(x)
        if self.last_token_logits:
            x = x[:, -1:, :]
        logits = self.lm_head(x)
        return (logits, presents) if return_cache else logits


def _llm_inputs(name: str):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int, context: int = 0):
        """Token ids [batch, seq] (prefill) or [batch, 1] plus a KV cache of ``context`` tokens
        (decode; ``seq`` must be 0 or 1 there). Ids are deterministic (arange mod vocab)."""
        check_phase(name, phase, PHASES)
        check_count("batch", batch)
        if phase == "prefill":
            check_count("seq", seq)
            tokens, past = seq, 0
        else:
            if seq not in (0, 1):
                raise BadInput("seq", seq, "decode makes one token per step: expected 1")
            check_count("context", context, minimum=0)
            tokens, past = 1, context
        if past + tokens > arch["max_seq"]:  # name what the user gave: seq, or context
            field, given, most = (("seq", seq, arch["max_seq"]) if phase == "prefill"
                                  else ("context", context, arch["max_seq"] - 1))
            raise BadInput(field, given, f"expected at most {most}: {name} holds max_seq="
                           f"{arch['max_seq']} tokens"
                           + ("" if phase == "prefill" else ", the new one included"))
        ids = (torch.arange(batch * tokens) % arch["vocab_size"]).reshape(batch, tokens)
        if phase == "prefill":
            return (ids,), {}
        n_head = arch["n_head"]
        kv_heads = arch.get("n_kv_head", n_head)
        head_dim = check_heads(arch["d_model"], n_head, kv_heads)
        shape = (batch, kv_heads, past, head_dim)
        cache = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(arch["n_layer"])]
        return (ids,), {"kv_cache": cache}
    return inputs


def _size_variables(style: str):
    def variables(arch: dict[str, Any], phase: str, batch: int, seq: int,
                  context: int) -> dict[str, int] | None:
        """Batch, tokens (prefill seq, decode context), heads, head size, d_ff, vocabulary and
        positions; Llama splits heads into KV heads x group and counts head size in pairs
        (RoPE rotates halves). None for sizes the model refuses (the capture says why)."""
        d, h = arch["d_model"], arch["n_head"]
        kv = arch.get("n_kv_head", h)
        if d % h or h % kv or (style == "llama" and (d // h) % 2):
            return None
        if (seq if phase == "prefill" else context + 1) > arch["max_seq"]:
            return None
        tokens = {"T": seq} if phase == "prefill" else {"C": context}
        heads = ({"H": h, "hd": d // h} if style == "gpt"
                 else {"KV": kv, "G": h // kv, "hd2": d // h // 2})
        return {"B": batch, **tokens, **heads, "F": arch["d_ff"], "V": arch["vocab_size"],
                "M": arch["max_seq"]}

    def point(v: dict[str, int], phase: str, _: dict[str, Any]
              ) -> tuple[dict[str, Any], int, int, int]:
        if style == "gpt":
            arch = {"n_head": v["H"], "d_model": v["H"] * v["hd"]}
        else:
            h = v["KV"] * v["G"]
            arch = {"n_head": h, "n_kv_head": v["KV"], "d_model": h * 2 * v["hd2"]}
        arch.update(d_ff=v["F"], vocab_size=v["V"], max_seq=v["M"])
        return arch, v["B"], v.get("T", 1), v.get("C", 0)
    return SizeRule("n_layer", variables, point)


_SIZES = {style: _size_variables(style) for style in ("gpt", "llama")}


def _register(name: str, style: str, description: str, arch: dict[str, Any],
              published: int | None) -> None:
    arch = {**arch, "last_token_logits": True}
    register(ModelSpec(name=name, family="llm", description=description, arch=arch,
                       build=lambda a, style=style: DecoderLM(a, style),
                       inputs=_llm_inputs(name), phases=PHASES, published_params=published,
                       sizes=_SIZES[style]))


def _gpt(n_layer: int, d_model: int, n_head: int, vocab: int, max_seq: int) -> dict[str, Any]:
    return {"n_layer": n_layer, "d_model": d_model, "n_head": n_head, "d_ff": 4 * d_model,
            "vocab_size": vocab, "max_seq": max_seq}


def _llama(n_layer, d_model, n_head, n_kv_head, d_ff, vocab, max_seq, theta) -> dict[str, Any]:
    return {"n_layer": n_layer, "d_model": d_model, "n_head": n_head, "n_kv_head": n_kv_head,
            "d_ff": d_ff, "vocab_size": vocab, "max_seq": max_seq, "rope_theta": theta}


#: GPT-2 byte-level BPE vocabulary (tokens) [R HF openai-community/gpt2 config.json]; GPT-3
#: uses the same tokenizer [P Brown et al. 2020, sec. 2.1].
GPT2_VOCAB = 50257

# GPT-2 sizes: n_layer, n_embd, n_head, n_positions 1024 [R HF openai-community/gpt2*
# config.json]. Published counts: the parameter count of HF's GPT2LMHeadModel (tied head).
_register("gpt2", "gpt", "GPT-2 small (124M)", _gpt(12, 768, 12, GPT2_VOCAB, 1024), 124_439_808)
_register("gpt2-medium", "gpt", "GPT-2 medium (355M)", _gpt(24, 1024, 16, GPT2_VOCAB, 1024),
          354_823_168)
_register("gpt2-large", "gpt", "GPT-2 large (774M)", _gpt(36, 1280, 20, GPT2_VOCAB, 1024),
          774_030_080)
_register("gpt2-xl", "gpt", "GPT-2 XL (1.5B)", _gpt(48, 1600, 25, GPT2_VOCAB, 1024),
          1_557_611_200)

# GPT-3 as NeuPIMs configures it: heads and width [R casys-kaist/NeuPIMs
# configs/model_configs/gpt3-*.json], layers [P Brown et al. 2020 Table 2.1; 30B: 48 layers as
# OPT-30B, E], context 2048 [P]. NeuPIMs' repo pads the vocabulary to 50304 and simulates one
# layer; here vocab_size is GPT-2's 50257 (override ``vocab_size`` to match the repo).
# Published counts are the rounded sizes of the model names [P Table 2.1; NeuPIMs].
_register("gpt3-7b", "gpt", "GPT-3 6.7B (NeuPIMs GPT3-7B)", _gpt(32, 4096, 32, GPT2_VOCAB, 2048),
          6_700_000_000)
_register("gpt3-13b", "gpt", "GPT-3 13B (NeuPIMs GPT3-13B)",
          _gpt(40, 5120, 40, GPT2_VOCAB, 2048), 13_000_000_000)
_register("gpt3-30b", "gpt", "GPT-3-style 30B (NeuPIMs GPT3-30B)",
          _gpt(48, 7168, 56, GPT2_VOCAB, 2048), 30_000_000_000)
_register("gpt3-175b", "gpt", "GPT-3 175B (NeuPIMs GPT3-175B)",
          _gpt(96, 12288, 96, GPT2_VOCAB, 2048), 175_000_000_000)

# Llama family [R HF config.json of TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T,
# meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-13b-hf, meta-llama/Meta-Llama-3-8B]:
# num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
# intermediate_size, vocab_size, max_position_embeddings, rope_theta.
_register("tinyllama-1.1b", "llama", "TinyLlama 1.1B (GQA 32/4)",
          _llama(22, 2048, 32, 4, 5632, 32000, 2048, 10000.0), 1_100_048_384)
_register("llama2-7b", "llama", "Llama 2 7B",
          _llama(32, 4096, 32, 32, 11008, 32000, 4096, 10000.0), 6_738_415_616)
_register("llama2-13b", "llama", "Llama 2 13B",
          _llama(40, 5120, 40, 40, 13824, 32000, 4096, 10000.0), 13_015_864_320)
_register("llama3-8b", "llama", "Llama 3 8B (GQA 32/8)",
          _llama(32, 4096, 32, 8, 14336, 128256, 8192, 500000.0), 8_030_261_248)
# Llama 2 70B [R HF meta-llama/Llama-2-70b-hf config.json: 80 layers, hidden 8192, 64 heads,
# 8 KV heads, intermediate 28672, vocab 32000, 4096 positions, rope_theta 10000]; 68,976,648,192
# parameters (embedding and untied head 262,144,000 each + 80 x 855,654,400 + final norm 8,192).
_register("llama2-70b", "llama", "Llama 2 70B (GQA 64/8)",
          _llama(80, 8192, 64, 8, 28672, 32000, 4096, 10000.0), 68_976_648_192)
