"""NASWOT, a zero-cost proxy of how well an untrained network separates inputs.

Mellor, Turner, Storkey and Crowley, "Neural Architecture Search without Training", ICML 2021
(arXiv:2006.04647), Section 3: run a mini-batch of ``n`` inputs through the randomly
initialised network; each input's binary code ``c_i`` says which rectified units are active
(pre-activation > 0). With ``N_A`` units, ``K[i, j] = N_A - hamming(c_i, c_j)`` (the number of
units on which inputs i and j agree), and the score is ``log |det K|``: higher when inputs land
in different linear regions. Higher scores went with higher trained accuracy on NAS-Bench-201.

What we do differently, and why:

* No data set can be downloaded, so the mini-batch is standard-normal images from a seeded
  generator (the paper used real images); batch and resolution are smaller to bound CPU time.
* Codes are taken at every ReLU, ReLU6/hardtanh, leaky ReLU, GELU, SiLU and hardswish call
  (module or functional, intercepted with a ``TorchFunctionMode``); "active" always means
  pre-activation > 0, the sign pattern that the ReLU case defines.
* BatchNorm uses batch statistics (modules in training mode, as in the paper's code path), no
  gradients are taken.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

#: Inputs per mini-batch (count); the paper used 128 [P Mellor et al. 2021, Sec. 4]; 16 here
#: to keep one score of a ResNet-50 to about a second on 2 CPU cores [E].
NASWOT_BATCH = 16
#: Side of the square random input images, pixels [E: 64 px keeps ResNet-50 under a second;
#: ViTs round it to a multiple of their patch].
NASWOT_IMAGE_PX = 64
#: Seed of the weight initialisation and of the inputs (dimensionless).
NASWOT_SEED = 0

#: Rectifier-like activations whose input sign is recorded (``nn.ReLU6`` calls ``hardtanh``).
_ACTIVATIONS = {torch.relu, torch.relu_, F.relu, F.relu_, F.relu6, F.hardtanh, F.hardtanh_,
                F.leaky_relu, F.gelu, F.silu, F.hardswish, torch.Tensor.relu, torch.Tensor.relu_}


class _ActivationCodes(TorchFunctionMode):
    """Accumulates ``K`` from the sign pattern of every activation's input."""

    def __init__(self, batch: int):
        super().__init__()
        self.kernel = torch.zeros(batch, batch, dtype=torch.float64)
        self.units = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _ACTIVATIONS:
            x = args[0] if args else kwargs.get("input")
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == self.kernel.shape[0]:
                code = (x.detach() > 0).reshape(x.shape[0], -1).to(torch.float32)
                units = code.shape[1]
                # agreements = units - |c_i| - |c_j| + 2 c_i.c_j; fp32 sums of 0/1 are exact
                # below 2**24 units per call, then accumulated in fp64.
                gram = (code @ code.T).to(torch.float64)
                active = code.sum(dim=1, dtype=torch.float64)
                self.kernel += units - active[:, None] - active[None, :] + 2 * gram
                self.units += units
        return func(*args, **kwargs)


def naswot_score(module: torch.nn.Module, inputs: torch.Tensor) -> float:
    """``log |det K|`` of ``module`` on the mini-batch ``inputs`` ([batch, ...]); ``-inf`` when
    the codes do not tell the inputs apart (singular ``K``) or nothing is rectified."""
    module.train()
    codes = _ActivationCodes(inputs.shape[0])
    with torch.no_grad(), codes:
        module(inputs)
    if codes.units == 0:
        return -math.inf
    sign, logdet = torch.linalg.slogdet(codes.kernel)
    return float(logdet) if float(sign) > 0 else -math.inf


def vision_arch_for_proxy(arch: dict[str, Any]) -> dict[str, Any]:
    """``arch`` at the proxy's image size (a multiple of ``patch_size`` for ViTs)."""
    out = dict(arch)
    if "image_size" in out:
        px = NASWOT_IMAGE_PX
        patch = out.get("patch_size")
        if patch:
            px = max(patch, round(px / patch) * patch)
        out["image_size"] = px
    return out


def score_vision(build, arch: dict[str, Any]) -> float:
    """NASWOT of a zoo vision model (``build(arch) -> nn.Module``) at the proxy's settings."""
    proxy_arch = vision_arch_for_proxy(arch)
    px = proxy_arch.get("image_size", NASWOT_IMAGE_PX)
    torch.manual_seed(NASWOT_SEED)
    module = build(proxy_arch)
    gen = torch.Generator().manual_seed(NASWOT_SEED)
    images = torch.randn(NASWOT_BATCH, 3, px, px, generator=gen)
    return naswot_score(module, images)
