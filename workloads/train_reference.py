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


def counted_flops(w: ir.Workload) -> int:
    """The workload's FLOPs of the kinds FlopCounterMode counts, forward and backward (the
    optimizer's ops are not an autograd step's)."""
    return sum(op.flops for op in w.ops if op.kind in COUNTED_KINDS
               and op.attrs.get("pass") in ("fwd", "bwd"))
