"""torch's own count of a real training step's FLOPs, to check the captured joint graph against.

:func:`flop_counter_step` runs ``loss = L(model(x)); loss.backward()`` on real CPU tensors
under ``torch.utils.flop_counter.FlopCounterMode`` and returns its total (forward +
backward). torch's registry has no entry for the CPU's fused attention kernels
(``_scaled_dot_product_flash_attention_for_cpu`` and its backward), so they are mapped to
torch's own SDPA formulas (``sdpa_flop_count``, ``sdpa_backward_flop_count``, the ones it uses
for the CUDA kernels) through ``custom_mapping``; everything else is torch's registry as it is.
Compare with the captured workload's GEMM FLOPs (``matmul``, ``conv``, ``attention``: the ops
torch counts), causal attention counted in full as torch does.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from workloads import ir

#: Op kinds whose FLOPs FlopCounterMode counts.
COUNTED_KINDS = (ir.MATMUL, ir.CONV, ir.ATTENTION)


def _cpu_attention_mapping() -> dict[Any, Callable]:
    from torch.utils import flop_counter as fc
    aten = torch.ops.aten

    def fwd(query, key, value, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(query, key, value)

    def bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out, query, key, value)
    return {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd}


def flop_counter_step(module: torch.nn.Module, loss_of: Callable[[torch.nn.Module], torch.Tensor]
                      ) -> int:
    """FlopCounterMode's FLOPs of one forward + backward of ``module`` (real tensors)."""
    from torch.utils.flop_counter import FlopCounterMode
    module.train()
    with FlopCounterMode(display=False, custom_mapping=_cpu_attention_mapping()) as counter:
        loss_of(module).backward()
    return counter.get_total_flops()


def saved_storage_bytes(module: torch.nn.Module,
                        loss_of: Callable[[torch.nn.Module], torch.Tensor]) -> int:
    """Bytes of the storages autograd saves for backward in one forward of ``module`` (real
    tensors; ``torch.autograd.graph.saved_tensors_hooks``), its parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t
    module.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_of(module)
    return sum(seen.values())


def zoo_step_reference(model: str, batch: int, seq: int | None,
                       arch: dict | None = None) -> tuple[int, int]:
    """(FlopCounterMode's FLOPs, autograd's saved bytes) of a real fp32 CPU training step of
    zoo ``model`` with the loss :mod:`workloads.train_build` gives it."""
    from workloads.train_build import resolve_zoo
    from workloads.training import _loss_value
    from workloads.zoo import get_model
    args = resolve_zoo(model, batch, seq, "fp32", arch)
    spec = get_model(model)
    torch.manual_seed(0)
    module = spec.build(args["arch"])
    a, k = spec.inputs(args["arch"], args["forward_phase"], batch, args["seq"], 0)

    def loss_of(m):
        return _loss_value(m(*a, **k), args["loss"])
    return flop_counter_step(module, loss_of), saved_storage_bytes(module, loss_of)


def hf_step_reference(config_data: dict, batch: int, seq: int) -> int:
    """FlopCounterMode's FLOPs of a real fp32 CPU training step of a Hugging Face config with
    its task head's loss (the model :mod:`workloads.train_build` captures), attention run
    as the same fused kernel the capture traces."""
    from workloads import hf
    from workloads.train_build import hf_train_module
    from workloads.training import _fused_attention
    config = hf.make_config(dict(config_data))
    kind = hf.task(config)
    torch.manual_seed(0)
    model, _ = hf_train_module(config, kind, meta=False)
    vocab = getattr(config, "vocab_size", None) or 2
    if kind == "vision":
        c, h, w = hf._image_size(config)
        x = {"pixel_values": torch.randn(batch, c, h, w),
             "labels": torch.zeros(batch, dtype=torch.long)}
    else:
        ids = torch.randint(0, vocab, (batch, seq))
        x = {"input_ids": ids, "labels": ids}
    with _fused_attention(causal=kind == "causal"):
        return flop_counter_step(model, lambda m: m(**x).loss)


def counted_flops(w: ir.Workload) -> int:
    """The workload's FLOPs of the kinds FlopCounterMode counts, forward and backward (the
    optimizer's ops are not an autograd step's)."""
    return sum(op.flops for op in w.ops if op.kind in COUNTED_KINDS
               and op.attrs.get("pass") in ("fwd", "bwd"))
