"""Sparse-attention workloads: the ``gna`` micro model and two diffusion transformers whose
attention switches from dense to Generalized Neighborhood Attention (GNA) by arch keys.

GNA arch keys (every model): ``grid`` (token grid, ``32768``, ``256x256``, ``30x48x80``),
``window``, ``stride``, ``dilation`` (same ``AxBxC`` form, one value broadcasts), ``causal``
(per axis, ``0x0x1``), ``layout`` (``row_major`` or ``tiled``), ``tile`` (the token tile of the
tiled layout, keys and values; empty: a 128-token default) and ``q_tile`` (the query tile;
empty: ``tile``); :mod:`workloads.gna` defines them. Inputs are row-major over the grid; a
tiled layout permutes q, k, v into tile order and the output back (copies, as NATTEN's token
permute), so the permute is costed like any other op.

* ``gna``: one GNA op, q/k/v [batch x arch batch, heads, tokens, head_dim] (defaults: NATTEN's
  1-D 32K-token, 2K-window profile [R: NATTEN docs/profiler.md]).
* ``flux-dit``: FLUX.1-like MMDiT [R: black-forest-labs/flux ``src/flux/model.py``,
  ``flux-dev`` config]: 19 double-stream blocks (separate text and image weights, joint
  attention) then 38 single-stream blocks (parallel attention + MLP), width 3072, 24 heads of
  128, MLP ratio 4, QK RMSNorm, 3-axis RoPE, 512 T5 tokens of 4096, CLIP pooled 768,
  guidance embedding, 16 latent channels in 2x2 patches (64 features per token). 12 B
  parameters [D: FLUX.1-dev model card]. Default grid 256x256 (4K images), the GNA paper's
  FLUX case (window 80x80, stride 16x16) [P: arXiv 2504.16922].
* ``hunyuan-dit``: HunyuanVideo-like [R: Tencent/HunyuanVideo ``hyvideo/modules/models.py``,
  ``HYVideo-T/2``]: 20 double-stream and 40 single-stream blocks of the same width, a 2-block
  text token refiner, 256 text tokens, 16 latent channels in 1x2x2 patches. 13 B parameters
  [D: HunyuanVideo model card]. Default grid 30x48x80 (720p, 117 frames), window 18x24x24,
  stride 16x8x8 [P: arXiv 2504.16922; R: NATTEN docs/profiler.md].

With ``attention=gna`` the image (video) tokens attend each other through GNA with the text
tokens as extra keys every image query sees (NATTEN's additional KV); text queries attend all
tokens densely. Weights are random; only shapes matter.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput
from workloads.gna import GNAConfig, parse_causal, parse_shape
from workloads.sparse_attention import from_layout, gna, to_layout
from workloads.zoo.definitions.checks import check_count, check_phase, example_floats
from workloads.zoo.registry import ModelSpec, register

#: GNA arch keys and the layouts allowed.
GNA_KEYS = ("grid", "window", "stride", "dilation", "causal", "layout", "tile", "q_tile")
_CHOICES = {"layout": ("row_major", "tiled"), "attention": ("dense", "gna")}

def _shape_check(value: Any, field: str) -> None:
    parse_shape(value, field)


def _tile_check(value: Any, field: str) -> None:
    if str(value).strip():          # empty: the template's default tile
        parse_shape(value, field)


def _causal_check(value: Any, field: str) -> None:
    parse_causal(value, field, len(str(value).split("x")))


#: What each GNA key's value must look like on its own (a study refuses the rest at load).
GNA_CHECKS = {"grid": _shape_check, "window": _shape_check, "stride": _shape_check,
              "dilation": _shape_check, "tile": _tile_check, "q_tile": _tile_check,
              "causal": _causal_check}

#: Frequency features of a timestep / guidance embedding (sinusoids) [R: flux ``timestep_embedding``].
TIME_FEATURES = 256


def gna_config(arch: dict[str, Any]) -> GNAConfig:
    """The GNA pattern of ``arch``; :class:`BadInput` names ``arch.<key>``."""
    return GNAConfig.from_mapping({k: arch[k] for k in GNA_KEYS}, prefix="arch.")


def grid_tokens(arch: dict[str, Any]) -> int:
    """Image / video tokens of a diffusion transformer (only ``grid`` is read, so a dense
    model ignores the other GNA keys)."""
    return math.prod(parse_shape(arch["grid"], "arch.grid"))


# ----------------------------------------------------------------------------- gna micro model
class GNAMicro(nn.Module):
    """One GNA op between the permutes of its layout."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        self.cfg = gna_config(arch)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        out = gna(to_layout(q, cfg, queries=True), to_layout(k, cfg), to_layout(v, cfg), cfg)
        return from_layout(out, cfg)


def _gna_inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
    """q, k, v [batch x arch batch, heads, tokens, head_dim], row-major over the grid."""
    check_phase("gna", phase, ("forward",))
    check_count("batch", batch)
    shape = (batch * arch["batch"], arch["heads"], gna_config(arch).tokens, arch["head_dim"])
    return tuple(example_floats(*shape) for _ in range(3)), {}


# ----------------------------------------------------------------------------- MMDiT
class _Modulation(nn.Module):
    """adaLN: ``n`` (shift, scale, gate) vectors from the conditioning vector."""

    def __init__(self, d: int, n: int):
        super().__init__()
        self.n = n
        self.lin = nn.Linear(d, 3 * n * d)

    def forward(self, vec: torch.Tensor) -> list[torch.Tensor]:
        return list(self.lin(F.silu(vec))[:, None, :].chunk(3 * self.n, dim=-1))


class _QKNorm(nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.q, self.k = nn.RMSNorm(head_dim, eps=1e-6), nn.RMSNorm(head_dim, eps=1e-6)


def _mlp(d: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))


def _embedder(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.SiLU(), nn.Linear(d, d))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on pairs of features, ``cos``/``sin`` [tokens, head_dim]."""
    pairs = x.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return x * cos + rotated * sin


class _JointAttention(nn.Module):
    """Attention over [text; image] tokens: dense, or GNA for image queries (text keys as extra
    keys) plus dense attention for text queries."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        self.cfg = gna_config(arch) if arch["attention"] == "gna" else None

    def forward(self, q, k, v, txt_tokens: int) -> torch.Tensor:
        cfg = self.cfg
        if cfg is None:
            return F.scaled_dot_product_attention(q, k, v)
        q_t, q_i = q[:, :, :txt_tokens], q[:, :, txt_tokens:]
        k_t, k_i = k[:, :, :txt_tokens], k[:, :, txt_tokens:]
        v_t, v_i = v[:, :, :txt_tokens], v[:, :, txt_tokens:]
        img = gna(to_layout(q_i, cfg, queries=True),
                  torch.cat([to_layout(k_i, cfg), k_t], dim=2),
                  torch.cat([to_layout(v_i, cfg), v_t], dim=2), cfg)
        txt = F.scaled_dot_product_attention(q_t, k, v)
        return torch.cat([txt, from_layout(img, cfg)], dim=2)


class _Stream(nn.Module):
    """One stream (text or image) of a double-stream block: its own weights."""

    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.mod = _Modulation(d, 2)
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.qk_norm = _QKNorm(d // heads)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = _mlp(d, hidden)
        self.heads = heads

    def qkv_heads(self, x: torch.Tensor, mod: list[torch.Tensor]):
        shift, scale = mod[0], mod[1]
        h = (1 + scale) * self.norm1(x) + shift
        q, k, v = self.qkv(h).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        return self.qk_norm.q(q), self.qk_norm.k(k), v

    def finish(self, x: torch.Tensor, attn: torch.Tensor, mod: list[torch.Tensor]):
        x = x + mod[2] * self.proj(attn)
        return x + mod[5] * self.mlp((1 + mod[4]) * self.norm2(x) + mod[3])


class DoubleBlock(nn.Module):
    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        d, heads = arch["d_model"], arch["heads"]
        self.img, self.txt = (_Stream(d, heads, arch["mlp_ratio"] * d) for _ in range(2))
        self.attn = _JointAttention(arch)

    def forward(self, img, txt, vec, cos, sin):
        mi, mt = self.img.mod(vec), self.txt.mod(vec)
        qi, ki, vi = self.img.qkv_heads(img, mi)
        qt, kt, vt = self.txt.qkv_heads(txt, mt)
        n_txt = txt.shape[1]
        q = _rope(torch.cat([qt, qi], dim=2), cos, sin)
        k = _rope(torch.cat([kt, ki], dim=2), cos, sin)
        out = self.attn(q, k, torch.cat([vt, vi], dim=2), n_txt).transpose(1, 2).flatten(2)
        return (self.img.finish(img, out[:, n_txt:], mi),
                self.txt.finish(txt, out[:, :n_txt], mt))


class SingleBlock(nn.Module):
    """Parallel attention and MLP from one fused input projection."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        d, self.heads = arch["d_model"], arch["heads"]
        self.hidden = arch["mlp_ratio"] * d
        self.mod = _Modulation(d, 1)
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.linear1 = nn.Linear(d, 3 * d + self.hidden)
        self.qk_norm = _QKNorm(d // self.heads)
        self.linear2 = nn.Linear(d + self.hidden, d)
        self.attn = _JointAttention(arch)

    def forward(self, x, vec, cos, sin, n_txt: int):
        shift, scale, gate = self.mod(vec)
        qkv, mlp = self.linear1((1 + scale) * self.norm(x) + shift).split(
            [3 * x.shape[-1], self.hidden], dim=-1)
        q, k, v = qkv.unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        q, k = _rope(self.qk_norm.q(q), cos, sin), _rope(self.qk_norm.k(k), cos, sin)
        attn = self.attn(q, k, v, n_txt).transpose(1, 2).flatten(2)
        return x + gate * self.linear2(torch.cat([attn, F.gelu(mlp, approximate="tanh")], -1))


class RefinerBlock(nn.Module):
    """HunyuanVideo's text token refiner block: self-attention + MLP over text tokens, gated by
    the timestep and pooled-text conditioning [R: ``hyvideo/modules/token_refiner.py``]."""

    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, d))
        self.mod = nn.Linear(d, 2 * d)
        self.heads = heads

    def forward(self, x, c):
        gate1, gate2 = self.mod(F.silu(c))[:, None, :].chunk(2, dim=-1)
        q, k, v = self.qkv(self.norm1(x)).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        x = x + gate1 * self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2))
        return x + gate2 * self.mlp(self.norm2(x))


class MMDiT(nn.Module):
    """FLUX / HunyuanVideo-style multimodal diffusion transformer (module docstring)."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        d, heads = arch["d_model"], arch["heads"]
        if d % heads or (d // heads) % 2:
            raise BadInput("arch.heads", heads, f"expected a divisor of d_model={d} leaving an "
                           "even head size")
        self.img_in = nn.Linear(arch["in_features"], d)
        self.time_in = _embedder(TIME_FEATURES, d)
        self.guidance_in = _embedder(TIME_FEATURES, d)
        self.vector_in = _embedder(arch["vec_dim"], d)
        self.txt_in = nn.Linear(arch["txt_dim"], d)
        hidden = arch["mlp_ratio"] * d
        if arch["refiner_blocks"]:   # HunyuanVideo: timestep + pooled-text conditioned refiner
            self.refiner_t = _embedder(TIME_FEATURES, d)
            self.refiner_c = _embedder(arch["txt_dim"], d)
            self.refiner = nn.ModuleList(RefinerBlock(d, heads, hidden)
                                         for _ in range(arch["refiner_blocks"]))
        self.doubles = nn.ModuleList(DoubleBlock(arch) for _ in range(arch["double_blocks"]))
        self.singles = nn.ModuleList(SingleBlock(arch) for _ in range(arch["single_blocks"]))
        self.final_mod = nn.Linear(d, 2 * d)
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final = nn.Linear(d, arch["in_features"])

    def forward(self, img, txt, vec, t_freq, g_freq, cos, sin):
        vec = self.time_in(t_freq) + self.guidance_in(g_freq) + self.vector_in(vec)
        x_img, x_txt = self.img_in(img), self.txt_in(txt)
        if hasattr(self, "refiner"):
            c = self.refiner_t(t_freq) + self.refiner_c(txt.mean(dim=1))
            for block in self.refiner:
                x_txt = block(x_txt, c)
        for block in self.doubles:
            x_img, x_txt = block(x_img, x_txt, vec, cos, sin)
        n_txt = x_txt.shape[1]
        x = torch.cat([x_txt, x_img], dim=1)
        for block in self.singles:
            x = block(x, vec, cos, sin, n_txt)
        shift, scale = self.final_mod(F.silu(vec))[:, None, :].chunk(2, dim=-1)
        return self.final((1 + scale) * self.final_norm(x[:, n_txt:]) + shift)


def _dit_inputs(name: str):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
        """Latent patches [batch, grid tokens, in_features], text [batch, txt_tokens, txt_dim],
        pooled vector, timestep and guidance frequencies [batch, 256], RoPE cos/sin [tokens,
        head_dim]; ``seq``/``context`` unused."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        n_img, n_txt = grid_tokens(arch), arch["txt_tokens"]
        head_dim = arch["d_model"] // arch["heads"]
        return (example_floats(batch, n_img, arch["in_features"]),
                example_floats(batch, n_txt, arch["txt_dim"]),
                example_floats(batch, arch["vec_dim"]),
                example_floats(batch, TIME_FEATURES), example_floats(batch, TIME_FEATURES),
                example_floats(n_txt + n_img, head_dim), example_floats(n_txt + n_img, head_dim)), {}
    return inputs


register(ModelSpec(
    name="gna", family="micro",
    description="one generalized neighborhood attention op on a 1-D/2-D/3-D token grid",
    arch={"grid": "32768", "window": "2048", "stride": "1", "dilation": "1", "causal": "0",
          "layout": "row_major", "tile": "", "q_tile": "", "heads": 1, "head_dim": 128,
          "batch": 1},
    arch_choices={"layout": _CHOICES["layout"]}, arch_checks=GNA_CHECKS,
    build=GNAMicro, inputs=_gna_inputs))

_DIT = {"d_model": 3072, "heads": 24, "mlp_ratio": 4, "in_features": 64, "txt_dim": 4096,
        "vec_dim": 768, "attention": "dense", "dilation": "1", "causal": "0", "layout": "tiled",
        "q_tile": ""}


def _register_dit(name: str, description: str, published: int, **arch: Any) -> None:
    register(ModelSpec(
        name=name, family="vision", description=description, arch={**_DIT, **arch},
        arch_choices=dict(_CHOICES, refiner_blocks=tuple(range(0, 9))), build=MMDiT,
        inputs=_dit_inputs(name), published_params=published,
        arch_checks={k: v for k, v in GNA_CHECKS.items() if k in {**_DIT, **arch}}))


_register_dit("flux-dit", "FLUX.1-like 2-D diffusion transformer (12 B), dense or GNA attention",
              12_000_000_000, double_blocks=19, single_blocks=38, refiner_blocks=0,
              txt_tokens=512, grid="256x256", window="80x80", stride="16x16", tile="16x8")
_register_dit("hunyuan-dit",
              "HunyuanVideo-like 3-D diffusion transformer (13 B), dense or GNA attention",
              13_000_000_000, double_blocks=20, single_blocks=40, refiner_blocks=2,
              txt_tokens=256, grid="30x48x80", window="18x24x24", stride="16x8x8",
              tile="2x8x8")
