"""BERT encoders: word + token-type + position embeddings, post-LN blocks, exact GELU, pooler.

``forward(input_ids, token_type_ids=None) -> (hidden [batch, seq, d], pooled [batch, d])``;
attention is bidirectional (no mask: every sequence is full length).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dse.errors import BadInput
from workloads.zoo.definitions.checks import check_count, check_phase
from workloads.zoo.definitions.layers import Attention, GeluMLP, PostNormBlock
from workloads.zoo.registry import ModelSpec, register

#: LayerNorm epsilon of BERT (dimensionless) [R HF google-bert/bert-base-uncased config.json
#: layer_norm_eps].
BERT_LN_EPS = 1e-12


class Bert(nn.Module):
    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        d = arch["d_model"]
        self.word = nn.Embedding(arch["vocab_size"], d)
        self.position = nn.Embedding(arch["max_seq"], d)
        self.token_type = nn.Embedding(arch["type_vocab_size"], d)
        self.embed_norm = nn.LayerNorm(d, eps=BERT_LN_EPS)
        self.blocks = nn.ModuleList(
            PostNormBlock(Attention(d, arch["n_head"], arch["n_head"], bias=True),
                          GeluMLP(d, arch["d_ff"]),
                          nn.LayerNorm(d, eps=BERT_LN_EPS), nn.LayerNorm(d, eps=BERT_LN_EPS))
            for _ in range(arch["n_layer"]))
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None):
        s = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (self.word(input_ids) + self.token_type(token_type_ids)
             + self.position(torch.arange(s, device=input_ids.device)))
        x = self.embed_norm(x)
        for block in self.blocks:
            x = block(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


def _inputs(name: str):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int, context: int = 0):
        """Token ids [batch, seq] (deterministic: arange mod vocab); ``context`` is unused."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        check_count("seq", seq)
        if seq > arch["max_seq"]:
            raise BadInput("seq", seq, f"{name} takes at most max_seq={arch['max_seq']} tokens")
        ids = (torch.arange(batch * seq) % arch["vocab_size"]).reshape(batch, seq)
        return (ids,), {}
    return inputs


def _bert(n_layer: int, d_model: int, n_head: int) -> dict[str, Any]:
    # vocab 30522, 512 positions, 2 token types, d_ff = 4 d [R HF google-bert/bert-*-uncased
    # config.json].
    return {"n_layer": n_layer, "d_model": d_model, "n_head": n_head, "d_ff": 4 * d_model,
            "vocab_size": 30522, "max_seq": 512, "type_vocab_size": 2}


# Published counts: HF BertModel (with pooler) parameter count; bert-base 110M and
# bert-large 340M [P Devlin et al. 2019].
for _name, _cfg, _published in (("bert-base", _bert(12, 768, 12), 109_482_240),
                                ("bert-large", _bert(24, 1024, 16), 335_141_888)):
    register(ModelSpec(name=_name, family="encoder",
                       description=f"BERT {_name.split('-')[1]} encoder with pooler",
                       arch=_cfg, build=Bert, inputs=_inputs(_name), phases=("forward",),
                       published_params=_published))
