"""Every mixture-of-experts layer of a Hugging Face model as ONE ``moe`` op
(``dse::moe_experts``, :mod:`workloads.moe_op`), whatever class implements its experts.

* Families whose experts use transformers' experts interface (``@use_experts_implementation``:
  Mixtral, Qwen2/3-MoE, DeepSeek, OLMoE, gpt-oss, granite-MoE, PhiMoE, MiniMax, DBRX, Jamba
  and most others) are built with ``experts_implementation="dse"``: :func:`experts_forward`
  receives the routed token indices and weights and calls the op.
* Families whose MoE block bypasses that interface are routed by an adapter
  (:data:`ADAPTERS`, applied by :func:`routed` while a module is captured): DBRX's
  ``DbrxExperts`` loops over the experts a batch hits (data-dependent, which an export cannot
  trace on meta tensors); Llama-4's
  ``Llama4TextMoe`` runs every token through every expert as two dense ``bmm`` (its routing
  only zeroes the scores of experts a token did not pick), which a capture would count as 16x
  the routed work with ``active_params == params``; its adapter takes the router's top-k
  (sigmoid scores, as Llama-4 does) and calls the op with the same expert weights, plus the
  shared expert as before; Doge's ``DogeCDMoE`` (single-neuron experts picked by product
  keys, a gather of expert rows plus two batched matmuls) likewise; JetMoE's ``JetMoeMoE``
  (experts split by ``.tolist()`` of the routed counts) too, and its mixture of attention
  (routed query / output projections, no MLP: not an op) runs with the counts of a balanced
  route, so its work is exact. Llama-4 scales each expert's *input* by its score where the op
  scales the *output*: the work and bytes are the same.

:func:`set_routing` hands each experts block the load imbalance and capacity factor the
capture assumes (``--arch expert_imbalance=``, ``capacity_factor=``; :mod:`workloads.moe`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from workloads.moe_op import moe_experts

#: Hugging Face ``hidden_act`` names -> the op's activations.
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "relu": "relu",
               "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh"}


def _routing_args(block: nn.Module) -> tuple[float, float]:
    return (float(getattr(block, "dse_capacity_factor", 0.0)),
            float(getattr(block, "dse_imbalance", 1.0)))


def _activation(config) -> str:
    return ACTIVATIONS.get(str(getattr(config, "hidden_act", "silu")), "silu")


def experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """transformers' experts interface, through ``dse::moe_experts`` (one op per layer)."""
    if self.has_gate:
        w_up, b_up = self.gate_up_proj, getattr(self, "gate_up_proj_bias", None)
    else:
        w_up, b_up = self.up_proj, getattr(self, "up_proj_bias", None)
    w_down, b_down = self.down_proj, getattr(self, "down_proj_bias", None)
    if self.is_transposed:
        w_up, w_down = w_up.transpose(-2, -1), w_down.transpose(-2, -1)
    return moe_experts(hidden_states, top_k_index.long(), top_k_weights.to(hidden_states.dtype),
                       w_up, w_down, b_up if self.has_bias else None,
                       b_down if self.has_bias else None, bool(self.has_gate),
                       _activation(self.config), *_routing_args(self))


def register() -> None:
    """Register :func:`experts_forward` as transformers' experts implementation ``"dse"``."""
    from transformers.integrations.moe import ExpertsInterface
    ExpertsInterface.register("dse", experts_forward)


def _llama4_moe(self, hidden_states):
    """``Llama4TextMoe.forward`` with its routed experts as one op (see the module doc)."""
    h = hidden_states.reshape(-1, self.hidden_dim)
    logits = F.linear(h, self.router.weight)
    top_values, top_ids = torch.topk(logits, self.top_k, dim=1)
    weights = torch.sigmoid(top_values.float()).to(h.dtype)
    experts = self.experts   # gate_up_proj [E, d, 2f], down_proj [E, f, d]
    out = moe_experts(h, top_ids, weights, experts.gate_up_proj.transpose(1, 2),
                      experts.down_proj.transpose(1, 2), None, None, True,
                      _activation_of(experts.act_fn), *_routing_args(self))
    return self.shared_expert(h) + out, logits


def _activation_of(fn: nn.Module) -> str:
    """The op's name for an activation module (transformers' ``ACT2FN`` classes)."""
    name = type(fn).__name__.lower()
    if "silu" in name or "swish" in name:
        return "silu"
    if "gelu" in name:
        return "gelu_tanh" if ("tanh" in name or "new" in name or "fast" in name) else "gelu"
    return "relu" if "relu" in name else "silu"


def _dbrx_experts(self, hidden_states, top_k_index, top_k_weights):
    """``DbrxExperts.forward`` (a loop over the experts a batch hits, which an export cannot
    trace on meta tensors) as one op: DBRX keeps each expert's gate (``w1``), up (``v1``) and
    down (``w2``) projections as ``[E * f, d]`` stacks."""
    batch = hidden_states.shape[0]
    h = hidden_states.reshape(-1, self.hidden_size)
    shape = (self.num_experts, self.ffn_hidden_size, self.hidden_size)
    mlp = self.mlp
    out = moe_experts(h, top_k_index.long(), top_k_weights.to(h.dtype), mlp.v1.view(shape),
                      mlp.w2.view(shape).transpose(1, 2), None, None, True,
                      _activation_of(mlp.activation_fn), *_routing_args(self), mlp.w1.view(shape))
    return out.view(batch, -1, self.hidden_size)


def _doge_moe(self, hidden_states, **kwargs):
    """``DogeCDMoE.forward`` with its routed experts as one op. Doge's experts are single
    neurons (``down_embed[e]`` reads the token, ``up_embed[e]`` writes it back: an MLP of
    width 1, not gated) picked by product-key routing (two ``sqrt(E)`` key halves, then the
    top-k of their sums) [R: transformers ``modeling_doge``; Lample et al. 2019, product keys];
    beside them a dense gated MLP every token runs (kept as is). Doge scales each expert's
    activation by its score where the op scales its output: the same work, bytes and result."""
    bsz, seq_len, _ = hidden_states.shape
    router_logits = self.router_gate(hidden_states).view(2, bsz * seq_len, -1)
    (scores_x, scores_y), (indices_x, indices_y) = router_logits.topk(self.num_keys, dim=-1)
    all_scores = (scores_x.unsqueeze(-1) + scores_y.unsqueeze(-2)).flatten(-2)
    all_indices = (indices_x.unsqueeze(-1) * self.num_keys + indices_y.unsqueeze(-2)).flatten(-2)
    scores, position_indices = all_scores.topk(self.top_k, dim=-1)
    indices = all_indices.gather(-1, position_indices)
    weights = F.softmax(scores, dim=-1)
    if self.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    h = hidden_states.reshape(bsz * seq_len, -1)
    experts, d = self.down_embed.weight.shape   # [E, d] each: w_up [E, 1, d], w_down [E, d, 1]
    routed_out = moe_experts(h, indices.long(), weights.to(h.dtype),
                             self.down_embed.weight.view(experts, 1, d),
                             self.up_embed.weight.view(experts, d, 1), None, None, False,
                             _activation_of(self.act_fn), *_routing_args(self))
    shared = self.down_proj(self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))
    return shared + routed_out.view(bsz, seq_len, -1), router_logits


def _jetmoe_moe(self, layer_input):
    """``JetMoeMoE.forward`` (gated 1-layer experts; ``JetMoeParallelExperts`` splits the rows
    by ``expert_size.tolist()``, data-dependent) as one op: top-k of the router's logits,
    softmax over the k, experts ``input_linear.weight`` ``[E, 2f, d]`` (the first half gated by
    the activation) and ``output_linear.weight`` ``[E, d, f]``, plus the layer's bias
    [R: transformers ``modeling_jetmoe``]."""
    bsz, length, d = layer_input.shape
    h = layer_input.reshape(-1, d)
    logits = self.router.layer(h).float()
    top_logits, top_ids = logits.topk(self.router.top_k, dim=1)
    gates = torch.softmax(top_logits, dim=1).to(h.dtype)
    out = moe_experts(h, top_ids, gates, self.input_linear.weight, self.output_linear.weight,
                      None, None, True, _activation_of(self.activation), *_routing_args(self))
    return out.view(bsz, length, d) + self.bias


def _jetmoe_gating(self, hidden_states):
    """``JetMoeTopKGating.forward`` with the rows per expert of a balanced route (the
    capture's assumption for routed experts, ``expert_imbalance`` 1; the real sizes are
    data-dependent, ``.tolist()``): JetMoE's mixture of attention (``JetMoeMoA``: routed query
    and output projections, one per token and pick) then runs the same rows through the same
    number of expert projections, so its work is exact and only which expert serves which row
    differs. ``_jetmoe_moe`` routes the MLP experts without it."""
    logits = self.layer(hidden_states).float()
    top_logits, top_ids = logits.topk(self.top_k, dim=1)
    top_gates = torch.softmax(top_logits, dim=1).type_as(hidden_states)
    rows, experts = top_ids.numel(), self.num_experts
    expert_size = [rows // experts + (1 if i < rows % experts else 0) for i in range(experts)]
    _, index_sorted = top_ids.flatten().sort(0)
    batch_index = index_sorted.div(self.top_k, rounding_mode="trunc")
    return index_sorted, batch_index, top_gates.flatten()[index_sorted], expert_size, logits


#: MoE block classes (by name) that bypass the experts interface -> their routed forward.
ADAPTERS: dict[str, Callable[..., Any]] = {"Llama4TextMoe": _llama4_moe,
                                           "DbrxExperts": _dbrx_experts,
                                           "DogeCDMoE": _doge_moe,
                                           "JetMoeMoE": _jetmoe_moe,
                                           "JetMoeTopKGating": _jetmoe_gating}


def adapted(model: nn.Module) -> list[nn.Module]:
    """The blocks of ``model`` an adapter routes."""
    return [m for m in model.modules() if type(m).__name__ in ADAPTERS]


def set_routing(model: nn.Module, settings: dict[str, Any]) -> None:
    """Every experts block's routing assumptions (load imbalance, capacity factor)."""
    for m in model.modules():
        if hasattr(m, "_is_expert_parallel") or type(m).__name__ in ADAPTERS:
            m.dse_imbalance = settings["expert_imbalance"]
            m.dse_capacity_factor = settings["capacity_factor"]


@contextlib.contextmanager
def routed(model: nn.Module) -> Iterator[int]:
    """Within the block, every adapted MoE block of ``model`` runs its routed forward."""
    blocks = adapted(model)
    for m in blocks:
        m.forward = ADAPTERS[type(m).__name__].__get__(m)
    try:
        yield len(blocks)
    finally:
        for m in blocks:
            del m.forward
