"""Mamba's selective scan as ONE custom op, ``dse::selective_scan``.

    selective_scan(u [B, D, L], delta [B, D, L], A [D, N], Bm [B, N, L], Cm [B, N, L],
                   D [D]?, z [B, D, L]?, delta_bias [D]?, initial_state [B, D, N]?,
                   delta_softplus, return_last_state) -> (y [B, D, L], last_state)

The recurrence of Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces"
(2023), Algorithm 2 [P]: ``dt = softplus(delta + delta_bias)``, ``h_t = exp(dt_t A) h_{t-1} +
dt_t Bm_t u_t``, ``y_t = Cm_t . h_t + D u_t``, then ``y *= silu(z)``. ``last_state`` is ``h_L``
[B, D, N] when ``return_last_state`` (the recurrent state a decode step carries), else an empty
tensor. Without it a capture of Hugging Face's torch path unrolls one op per token; as one op
the capture counts it as the ``scan`` kind, with the FLOP convention of the reference
implementation [R state-spaces/mamba, issue 110]: ``9 B L D N`` for discretisation, state
update and output, plus ``B D L`` each for the ``D`` skip and the ``z`` gate.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def scan_flops(batch: int, channels: int, seq: int, state: int, with_d: bool, with_z: bool) -> int:
    """FLOPs of one selective scan (the reference convention above)."""
    return (9 * batch * seq * channels * state + (batch * channels * seq if with_d else 0)
            + (batch * channels * seq if with_z else 0))


def scan_reference(u, delta, A, Bm, Cm, D, z, delta_bias, initial_state, delta_softplus: bool,
                   return_last_state: bool):
    """Sequential plain-torch scan in fp32 (the op's CPU implementation)."""
    dt = delta.float()
    if delta_bias is not None:
        dt = dt + delta_bias.float()[None, :, None]
    if delta_softplus:
        dt = F.softplus(dt)
    batch, channels, seq = u.shape
    h = (initial_state.float() if initial_state is not None
         else u.new_zeros(batch, channels, A.shape[-1], dtype=torch.float32))
    ys = []
    for t in range(seq):
        h = torch.exp(dt[:, :, t, None] * A.float()) * h + (
            dt[:, :, t, None] * Bm[:, None, :, t].float() * u[:, :, t, None].float())
        ys.append((h * Cm[:, None, :, t].float()).sum(-1))
    y = torch.stack(ys, dim=-1)
    if D is not None:
        y = y + u.float() * D.float()[None, :, None]
    if z is not None:
        y = y * F.silu(z.float())
    last = h if return_last_state else u.new_empty(0, dtype=torch.float32)
    return y.to(u.dtype), last.to(u.dtype)


@torch.library.custom_op("dse::selective_scan", mutates_args=())
def selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor,
                   Cm: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None,
                   delta_bias: torch.Tensor | None, initial_state: torch.Tensor | None,
                   delta_softplus: bool, return_last_state: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Selective scan: [B, D, L] inputs -> ([B, D, L] outputs, last state or empty)."""
    return scan_reference(u, delta, A, Bm, Cm, D, z, delta_bias, initial_state, delta_softplus,
                          return_last_state)


@selective_scan.register_fake
def _selective_scan_fake(u, delta, A, Bm, Cm, D, z, delta_bias, initial_state, delta_softplus,
                         return_last_state):
    torch._check(u.dim() == 3 and A.dim() == 2, lambda: "selective_scan: u [B, D, L], A [D, N]")
    last = (u.new_empty(u.shape[0], u.shape[1], A.shape[-1]) if return_last_state
            else u.new_empty(0))
    return torch.empty_like(u), last
