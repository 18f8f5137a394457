"""What a diffusion pipeline runs besides its transformer, once per generation: the VAE
decoders and text encoders of FLUX.1-dev and HunyuanVideo (random weights, published shapes;
``dse/reproduce/gna.py`` adds them to the generation time).

* ``flux-vae-decoder``: FLUX.1's autoencoder decoder [R: black-forest-labs/flux
  ``src/flux/modules/autoencoder.py`` ``Decoder``; ``ae_params`` of ``flux-dev`` and FLUX.1-dev
  ``vae/config.json``: ``ch`` 128, ``ch_mult`` 1,2,4,4, ``num_res_blocks`` 2, ``z_channels``
  16, GroupNorm of 32 groups, ``mid_block_add_attention``]: conv_in, a middle of ResNet,
  single-head attention over every latent pixel, ResNet, then four levels of
  ``num_res_blocks + 1`` ResNets from 512 down to 128 channels, each but the last followed by
  a 2x nearest upsample and a 3x3 conv; GroupNorm, SiLU, conv_out to RGB. Default latent
  512x512 (a 4096x4096 image, the GNA paper's FLUX case [P: arXiv 2504.16922 Sec. 4.3]).
* ``hunyuan-vae-decoder``: HunyuanVideo's causal 3-D VAE decoder [R: Tencent/HunyuanVideo
  ``hyvideo/vae/vae.py`` ``DecoderCausal3D`` and ``unet_causal_3d_blocks.py``; ``884-16c-hy``
  ``vae/config.json``: ``block_out_channels`` 128,256,512,512, ``layers_per_block`` 2,
  ``latent_channels`` 16, 32 groups, time compression 4, spatial 8]: the same structure with
  causal 3x3x3 convolutions (replicate padding, two frames in front), the middle attention
  causal over frames, spatial upsampling in the first three levels and temporal upsampling
  (every frame but the first doubled) in the second and third. Default latent 30x96x160:
  117 frames of 768x1280 (the GNA paper's 30x48x80 tokens in 1x2x2 patches [P: arXiv
  2504.16922 Sec. 4.2; STA, Zhang et al. 2025]). Decoded whole: the official pipeline tiles the
  decode (overlapping tiles: more convolution, far less attention), which is not modelled.
* ``t5-encoder``: T5 v1.1 encoder [R: HF google/t5-v1_1-xxl ``config.json``: 24 layers,
  ``d_model`` 4096, 64 heads of ``d_kv`` 64, ``d_ff`` 10240 ``gated-gelu``, vocab 32128],
  FLUX.1-dev's ``text_encoder_2`` run on 512 tokens. RMSNorm, no biases; the relative
  position bias (one add per attention score) is left out.
* ``clip-text``: CLIP ViT-L/14's text tower [R: HF openai/clip-vit-large-patch14
  ``config.json`` ``text_config``: 12 layers, width 768, 12 heads, MLP 3072 ``quick_gelu``,
  vocab 49408, 77 positions], causal, pre-LN; the CLIP-L encoder of both pipelines.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput
from workloads.gna import parse_shape
from workloads.zoo.definitions.checks import check_count, check_phase, example_floats
from workloads.zoo.definitions.encoders import _inputs as token_inputs
from workloads.zoo.definitions.layers import Attention, PreNormBlock
from workloads.zoo.registry import ModelSpec, register

#: GroupNorm epsilon of both VAEs [R: flux ``autoencoder.py`` and hyvideo ``vae.py``: 1e-6].
VAE_EPS = 1e-6


def _conv(dims: int, c_in: int, c_out: int, k: int) -> nn.Module:
    """A k x k (x k) convolution; 3-D ones are causal in time (:class:`CausalConv3d`)."""
    if dims == 2:
        return nn.Conv2d(c_in, c_out, k, padding=k // 2)
    return CausalConv3d(c_in, c_out, k)


class CausalConv3d(nn.Module):
    """Replicate padding, ``k - 1`` frames in front and none behind, then an unpadded conv
    [R: hyvideo ``CausalConv3d``]."""

    def __init__(self, c_in: int, c_out: int, k: int):
        super().__init__()
        self.pad = (k // 2, k // 2, k // 2, k // 2, k - 1, 0)
        self.conv = nn.Conv3d(c_in, c_out, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, self.pad, mode="replicate"))


class ResnetBlock(nn.Module):
    """GroupNorm, SiLU, conv, GroupNorm, SiLU, conv; a 1x1 conv shortcut when the width
    changes."""

    def __init__(self, dims: int, c_in: int, c_out: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in, eps=VAE_EPS)
        self.conv1 = _conv(dims, c_in, c_out, 3)
        self.norm2 = nn.GroupNorm(groups, c_out, eps=VAE_EPS)
        self.conv2 = _conv(dims, c_out, c_out, 3)
        self.shortcut = _conv(dims, c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.shortcut(x) if self.shortcut is not None else x) + h


class MidAttention(nn.Module):
    """GroupNorm, one head as wide as the channels over every latent position, projection,
    residual [R: flux ``AttnBlock``; diffusers ``Attention`` with ``heads=1``]. ``causal``:
    HunyuanVideo's mask lets a frame see its own and earlier frames; costed as token-causal
    (pairs ``N(N+1)/2`` against the mask's ``hw^2 T(T+1)/2``: ``1/T`` fewer)."""

    def __init__(self, channels: int, groups: int, causal: bool):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=VAE_EPS)
        self.q, self.k, self.v, self.out = (nn.Linear(channels, channels) for _ in range(4))
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        h = self.norm(x).reshape(b, c, -1).transpose(1, 2)          # [b, positions, c]
        q, k, v = (proj(h).unsqueeze(1) for proj in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal).squeeze(1)
        return x + self.out(a).transpose(1, 2).reshape(x.shape)


class Upsample(nn.Module):
    """2x nearest upsampling then a 3x3 conv. In 3-D the first frame is upsampled in space
    only and the others in time too when ``time`` [R: hyvideo ``UpsampleCausal3D``]."""

    def __init__(self, dims: int, channels: int, time: bool):
        super().__init__()
        self.dims, self.time = dims, time
        self.conv = _conv(dims, channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dims == 2:
            return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        first, rest = x[:, :, :1], x[:, :, 1:]
        first = F.interpolate(first.squeeze(2), scale_factor=2.0, mode="nearest").unsqueeze(2)
        if rest.shape[2]:
            rest = F.interpolate(rest, scale_factor=(2.0 if self.time else 1.0, 2.0, 2.0),
                                 mode="nearest")
            first = torch.cat([first, rest], dim=2)
        return self.conv(first)


def _multipliers(value: Any) -> list[int]:
    """``ch_mult`` ``1x2x4x4``: the width of each level over ``ch``, finest first."""
    parts = str(value).split("x")
    if not 1 <= len(parts) <= 8 or not all(p.strip().isdigit() and 1 <= int(p) <= 64
                                           for p in parts):
        raise BadInput("arch.ch_mult", value, "expected 1 to 8 ints in [1, 64] like 1x2x4x4")
    return [int(p) for p in parts]


class VAEDecoder(nn.Module):
    """Latent [batch, z_channels, (frames,) height, width] -> pixels [batch, out_channels,
    (frames,) 8 height, 8 width] (2-D when ``latent`` has two axes, causal 3-D with three)."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        dims = len(parse_shape(arch["latent"], "arch.latent"))
        if dims not in (2, 3):
            raise BadInput("arch.latent", arch["latent"], "expected HxW or TxHxW")
        mult = _multipliers(arch["ch_mult"])
        widths = [arch["ch"] * m for m in mult]
        groups, levels = arch["groups"], len(widths)
        for w in widths:
            if w % groups:
                raise BadInput("arch.groups", groups, f"expected a divisor of every width {widths}")
        check_count("arch.time_upsamples", arch["time_upsamples"], minimum=0)
        if arch["time_upsamples"] and dims == 2:
            raise BadInput("arch.time_upsamples", arch["time_upsamples"],
                           "expected 0 for a 2-D latent")
        if arch["time_upsamples"] > levels - 1:
            raise BadInput("arch.time_upsamples", arch["time_upsamples"],
                           f"expected at most {levels - 1} (levels with an upsample)")
        top = widths[-1]
        self.conv_in = _conv(dims, arch["z_channels"], top, 3)
        self.mid = nn.ModuleList([ResnetBlock(dims, top, top, groups),
                                  MidAttention(top, groups, causal=dims == 3),
                                  ResnetBlock(dims, top, top, groups)])
        self.up = nn.ModuleList()
        c = top
        for i, w in enumerate(reversed(widths)):
            blocks = []
            for _ in range(arch["num_res_blocks"] + 1):
                blocks.append(ResnetBlock(dims, c, w, groups))
                c = w
            if i < levels - 1:   # HunyuanVideo: time upsampling in the last levels that upsample
                blocks.append(Upsample(dims, w, time=i >= levels - 1 - arch["time_upsamples"]))
            self.up.append(nn.Sequential(*blocks))
        self.norm_out = nn.GroupNorm(groups, c, eps=VAE_EPS)
        self.conv_out = _conv(dims, c, arch["out_channels"], 3)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(z)
        for block in self.mid:
            x = block(x)
        for level in self.up:
            x = level(x)
        return self.conv_out(F.silu(self.norm_out(x)))


def _decoder_inputs(name: str):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
        """One latent [batch, z_channels, *latent]; ``seq``/``context`` unused."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        latent = parse_shape(arch["latent"], "arch.latent")
        return (example_floats(batch, arch["z_channels"], *latent),), {}
    return inputs


_VAE = {"z_channels": 16, "ch": 128, "ch_mult": "1x2x4x4", "num_res_blocks": 2, "groups": 32,
        "out_channels": 3}
register(ModelSpec(
    name="flux-vae-decoder", family="vision",
    description="FLUX.1's VAE decoder (2-D, 16 latent channels, x8), default 4096x4096 image",
    arch={**_VAE, "latent": "512x512", "time_upsamples": 0},
    build=VAEDecoder, inputs=_decoder_inputs("flux-vae-decoder"), published_params=49_545_475))
register(ModelSpec(
    name="hunyuan-vae-decoder", family="vision",
    description="HunyuanVideo's causal 3-D VAE decoder (x4 time, x8 space), default 117x768x1280",
    arch={**_VAE, "latent": "30x96x160", "time_upsamples": 2},
    build=VAEDecoder, inputs=_decoder_inputs("hunyuan-vae-decoder")))


# ----------------------------------------------------------------------------- text encoders
class GatedGelu(nn.Module):
    """wo(gelu_tanh(wi_0 x) * wi_1 x), no biases [R: HF ``T5DenseGatedActDense``]."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.wi_0, self.wi_1 = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class QuickGeluMLP(nn.Module):
    """fc2(quick_gelu(fc1 x)), quick_gelu(x) = x sigmoid(1.702 x) [R: HF ``CLIPMLP``]."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))


class TextEncoder(nn.Module):
    """Token ids [batch, seq] -> hidden states [batch, seq, d_model]: T5 (``style`` t5:
    RMSNorm, bidirectional, gated GELU, no biases) or CLIP's text tower (``clip``: learned
    positions, LayerNorm, causal, quick-GELU)."""

    def __init__(self, arch: dict[str, Any], style: str):
        super().__init__()
        d, heads, ff = arch["d_model"], arch["n_head"], arch["d_ff"]
        self.style = style
        self.word = nn.Embedding(arch["vocab_size"], d)
        if style == "clip":
            self.position = nn.Embedding(arch["max_seq"], d)
            norm, mlp, bias = (lambda: nn.LayerNorm(d, eps=1e-5)), QuickGeluMLP, True
        else:
            # T5's layer norm: scale only, no mean subtraction
            norm, mlp, bias = (lambda: nn.RMSNorm(d, eps=1e-6)), GatedGelu, False
        self.blocks = nn.ModuleList(PreNormBlock(Attention(d, heads, heads, bias=bias),
                                                 mlp(d, ff), norm(), norm())
                                    for _ in range(arch["n_layer"]))
        self.final_norm = norm()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.word(input_ids)
        if self.style == "clip":
            x = x + self.position(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.blocks:
            x = block(x, causal=self.style == "clip")[0]
        return self.final_norm(x)


# Parameter counts: T5 v1.1 XXL's encoder 4,762,310,656 (here 2,048 fewer: the 32 x 64
# relative-bias table), FLUX.1's VAE decoder 49,545,475 (exactly), CLIP-L's text tower
# 123,060,480 (exactly, its 768 x 768 projection left out) [R: the stable-diffusion-3-medium
# module table of ai-dynamo/aitune's inspect guide, whose VAE decoder is FLUX.1's].
for _name, _style, _description, _arch, _published in (
        ("t5-encoder", "t5", "T5 v1.1 XXL encoder (FLUX.1's text encoder)",
         {"n_layer": 24, "d_model": 4096, "n_head": 64, "d_ff": 10240, "vocab_size": 32128,
          "max_seq": 512}, 4_762_310_656),
        ("clip-text", "clip", "CLIP ViT-L/14 text tower (77 tokens)",
         {"n_layer": 12, "d_model": 768, "n_head": 12, "d_ff": 3072, "vocab_size": 49408,
          "max_seq": 77}, 123_060_480)):
    register(ModelSpec(name=_name, family="encoder", description=_description, arch=_arch,
                       build=lambda a, style=_style: TextEncoder(a, style),
                       inputs=token_inputs(_name), phases=("forward",),
                       published_params=_published))
