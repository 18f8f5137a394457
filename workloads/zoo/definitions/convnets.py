"""ResNet-18/50 and MobileNetV2, written from their papers' layer tables (torchvision layout:
bias-free convolutions followed by BatchNorm, which the capture sees in eval mode).

ResNet [P He et al. 2016 Table 1]: 7x7/2 stem, 3x3/2 max-pool, four stages of basic (two 3x3)
or bottleneck (1x1, 3x3, 1x1, expansion 4) blocks, the stride on a stage's first 3x3 (the
"v1.5" placement torchvision uses), 1x1 projection shortcuts where the shape changes, global
average pool and a linear classifier.

MobileNetV2 [P Sandler et al. 2018 Table 2]: 3x3/2 stem of 32 channels, inverted residual
blocks (1x1 expand by ``t``, 3x3 depthwise, 1x1 linear projection; residual when stride 1 and
widths match), 1x1 conv to 1280, global average pool, linear classifier. Widths are scaled by
``width_mult`` and rounded to multiples of 8. Dropout is left out (identity in eval).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dse.errors import BadInput
from workloads.zoo.definitions.vision import image_inputs
from workloads.zoo.registry import ModelSpec, register


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Bias-free ``kernel`` x ``kernel`` conv ('same' padding), BatchNorm, optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        c_out = width * self.expansion
        self.body = nn.Sequential(conv_bn(c_in, width, 3, stride),
                                  conv_bn(width, c_out, 3, act=None))
        self.shortcut = (conv_bn(c_in, c_out, 1, stride, act=None)
                         if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class Bottleneck(BasicBlock):
    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int):
        nn.Module.__init__(self)
        c_out = width * self.expansion
        self.body = nn.Sequential(conv_bn(c_in, width, 1), conv_bn(width, width, 3, stride),
                                  conv_bn(width, c_out, 1, act=None))
        self.shortcut = (conv_bn(c_in, c_out, 1, stride, act=None)
                         if stride != 1 or c_in != c_out else nn.Identity())


BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(nn.Module):
    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        block = BLOCKS[arch["block"]]
        width = arch["base_width"]
        self.stem = nn.Sequential(conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, padding=1))
        stages, c_in = [], width
        for i in range(4):
            stage_width = width * 2 ** i
            for j in range(arch[f"blocks{i + 1}"]):
                stages.append(block(c_in, stage_width, 2 if (i > 0 and j == 0) else 1))
                c_in = stage_width * block.expansion
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, arch["num_classes"])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.stages(self.stem(images))).flatten(1))


def make_divisible(value: float, divisor: int = 8) -> int:
    """``value`` rounded to the nearest multiple of ``divisor`` (at least ``divisor``), bumped
    up one step when rounding down would lose more than 10 % [P Sandler et al. 2018 code
    convention, as in the TF/torchvision MobileNets]."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        layers = [] if expand == 1 else [conv_bn(c_in, hidden, 1, act=nn.ReLU6)]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   conv_bn(hidden, c_out, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


#: MobileNetV2 bottleneck table: (expansion t, output channels c, repeats n, first stride s)
#: [P Sandler et al. 2018 Table 2]. ``t == 6`` entries take the ``expand_ratio`` arch value.
MOBILENETV2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        mult, expand = arch["width_mult"], arch["expand_ratio"]
        c_in = make_divisible(32 * mult)
        layers: list[nn.Module] = [conv_bn(3, c_in, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in MOBILENETV2_STAGES:
            c_out = make_divisible(c * mult)
            for i in range(n):
                layers.append(InvertedResidual(c_in, c_out, s if i == 0 else 1,
                                               expand if t == 6 else t))
                c_in = c_out
        last = make_divisible(1280 * max(1.0, mult))
        layers.append(conv_bn(c_in, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(last, arch["num_classes"])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(images)).flatten(1))


def _check_image(arch: dict[str, Any], minimum: int) -> None:
    if arch["image_size"] < minimum:
        raise BadInput("arch.image_size", arch["image_size"], f"expected >= {minimum} pixels")


def _resnet(arch: dict[str, Any]) -> ResNet:
    _check_image(arch, 32)  # five stride-2 stages
    return ResNet(arch)


def _mobilenet(arch: dict[str, Any]) -> MobileNetV2:
    _check_image(arch, 32)  # five stride-2 stages
    return MobileNetV2(arch)


# Published counts: torchvision resnet18 / resnet50 / mobilenet_v2 (1000 classes) [R
# torchvision model docs: 11,689,512; 25,557,032; 3,504,872].
for _name, _blocks, _kind, _published in (("resnet18", (2, 2, 2, 2), "basic", 11_689_512),
                                          ("resnet50", (3, 4, 6, 3), "bottleneck", 25_557_032)):
    register(ModelSpec(
        name=_name, family="vision", description=f"ResNet-{_name[6:]} ({_kind} blocks), 224 px",
        arch={"image_size": 224, "num_classes": 1000, "base_width": 64, "block": _kind,
              **{f"blocks{i + 1}": b for i, b in enumerate(_blocks)}},
        arch_choices={"block": tuple(BLOCKS)},
        build=_resnet, inputs=image_inputs(_name), phases=("forward",),
        published_params=_published))

register(ModelSpec(
    name="mobilenetv2", family="vision", description="MobileNetV2 1.0, 224 px",
    arch={"image_size": 224, "num_classes": 1000, "width_mult": 1.0, "expand_ratio": 6},
    build=_mobilenet, inputs=image_inputs("mobilenetv2"), phases=("forward",),
    published_params=3_504_872))
