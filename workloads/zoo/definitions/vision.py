"""Vision Transformer (ViT-B/16) and the image inputs shared by the vision models.

ViT: a stride-``patch_size`` convolution cuts the image into patches, a class token is
prepended, learned positions are added, pre-LN blocks (exact GELU, LayerNorm eps 1e-6) follow,
and a linear head classifies the final class token.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dse.errors import BadInput
from workloads.zoo.definitions.checks import check_count, check_phase, example_floats
from workloads.zoo.definitions.layers import Attention, GeluMLP, PreNormBlock
from workloads.zoo.registry import ModelSpec, register

#: LayerNorm epsilon of ViT (dimensionless) [R torchvision models/vision_transformer.py,
#: ``partial(nn.LayerNorm, eps=1e-6)``].
VIT_LN_EPS = 1e-6


def image_inputs(name: str):
    """``inputs`` for a vision model: one image batch [batch, 3, image_size, image_size]."""
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
        """Images [batch, 3, image_size, image_size] in [0, 1]; ``seq``/``context`` unused."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        size = arch["image_size"]
        return (example_floats(batch, 3, size, size, low=0.0, high=1.0),), {}
    return inputs


class ViT(nn.Module):
    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        size, patch, d = arch["image_size"], arch["patch_size"], arch["d_model"]
        if size % patch:
            raise BadInput("arch.patch_size", patch, f"expected a divisor of image_size={size}")
        tokens = (size // patch) ** 2 + 1
        self.patch_embed = nn.Conv2d(3, d, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, d))
        self.blocks = nn.ModuleList(
            PreNormBlock(Attention(d, arch["n_head"], arch["n_head"], bias=True),
                         GeluMLP(d, arch["d_ff"]),
                         nn.LayerNorm(d, eps=VIT_LN_EPS), nn.LayerNorm(d, eps=VIT_LN_EPS))
            for _ in range(arch["n_layer"]))
        self.norm = nn.LayerNorm(d, eps=VIT_LN_EPS)
        self.head = nn.Linear(d, arch["num_classes"])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [b, patches, d]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)[0]
        return self.head(self.norm(x[:, 0]))


# ViT-B/16: 12 layers, width 768, 12 heads, MLP 3072, patch 16, 224 px [P Dosovitskiy et al.
# 2021 Table 1]; published count: torchvision vit_b_16 (1000-class head) 86,567,656 [R].
register(ModelSpec(
    name="vit-b16", family="vision", description="ViT-Base, 16x16 patches, 224 px",
    arch={"image_size": 224, "patch_size": 16, "n_layer": 12, "d_model": 768, "n_head": 12,
          "d_ff": 3072, "num_classes": 1000},
    build=ViT, inputs=image_inputs("vit-b16"), phases=("forward",),
    published_params=86_567_656))
