"""PSNR of fitting a procedurally generated image with a neural field's grid encoding + MLP.

The architecture's multi-resolution grid (levels, features per level, table size, base and
finest resolution, hash / dense / low-resolution dense, as the zoo builds it) and its MLP
(width ``hidden``, ``n_hidden_layers``) learn a 2-D image -> RGB map with Adam for ``steps``
full-image steps on the CPU; the score is the PSNR of the fitted image, dB. This is
instant-NGP's gigapixel-image task (Mueller et al., SIGGRAPH 2022, Sec. 5.1) at laptop scale.

Scaling to the proxy's image, exact where it can be: resolutions finer than the image's pixel
pitch carry no information, so ``finest_resolution`` (and ``base_resolution``) are clamped to
``FIT_IMAGE_PX``; the table is capped at the rows a fully direct-indexed grid of that image
needs, which leaves the result unchanged (every level then indexes its rows directly, and
unused rows never receive a gradient). Table sizes below the cap still collide as in the full
model. View-dependent parts of a NeRF (colour MLP, spherical harmonics) have no 2-D
counterpart and are not used.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from workloads.hashgrid_op import HASH_PRIMES

#: Side of the fitted image, pixels [E: 128 px keeps a 300-step fit to seconds on 2 cores].
FIT_IMAGE_PX = 128
#: Adam learning rate and betas, epsilon [P Mueller et al. 2022, Sec. 4: lr 1e-2,
#: beta1 0.9, beta2 0.99, eps 1e-15].
FIT_LR = 1e-2
FIT_BETAS = (0.9, 0.99)
FIT_EPS = 1e-15
#: Seed of the initialisation (dimensionless).
FIT_SEED = 0


def target_image(px: int = FIT_IMAGE_PX) -> torch.Tensor:
    """A deterministic test image [px * px, 3] in [0, 1]: smooth gradients, rings of rising
    frequency, hard-edged discs and squares and a fine checkerboard, so that coarse and fine
    grid levels both matter."""
    t = (torch.arange(px, dtype=torch.float32) + 0.5) / px
    y, x = torch.meshgrid(t, t, indexing="ij")
    two_pi = 2 * math.pi
    chans = []
    for c, phase in enumerate((0.0, 2.1, 4.2)):
        v = 0.5 + 0.2 * torch.sin(two_pi * (1.5 * x + (c + 1) * 0.7 * y) + phase)
        r = torch.sqrt((x - 0.3) ** 2 + (y - 0.35) ** 2)
        v = v + 0.15 * torch.cos(two_pi * (4 + 20 * r) * r + phase) * (r < 0.25)
        chans.append(v)
    img = torch.stack(chans, dim=-1)
    shapes = [((0.72, 0.3), 0.12, (0.9, 0.2, 0.1)), ((0.25, 0.78), 0.09, (0.1, 0.3, 0.9)),
              ((0.6, 0.7), 0.05, (0.95, 0.95, 0.2))]
    for (cx, cy), rad, col in shapes:
        mask = ((x - cx) ** 2 + (y - cy) ** 2) < rad ** 2
        img[mask] = torch.tensor(col)
    square = (x > 0.45) & (x < 0.58) & (y > 0.08) & (y < 0.2)
    img[square] = torch.tensor([0.05, 0.6, 0.2])
    quad = (x > 0.75) & (y > 0.75)
    checker = ((torch.floor(x * px / 2) + torch.floor(y * px / 2)) % 2).unsqueeze(-1)
    img = torch.where(quad.unsqueeze(-1), 0.2 + 0.6 * checker.expand_as(img), img)
    return img.clamp(0, 1).reshape(px * px, 3)


def fit_arch(arch: dict[str, Any], px: int = FIT_IMAGE_PX) -> dict[str, Any]:
    """``arch`` scaled to a ``px`` x ``px`` image (see the module docstring)."""
    out = dict(arch)
    finest = min(int(arch["finest_resolution"]), px)
    out["finest_resolution"] = finest
    out["base_resolution"] = min(int(arch["base_resolution"]), finest)
    direct_rows_log2 = math.ceil(math.log2((px + 1) ** 2))
    out["log2_table_size"] = min(int(arch["log2_table_size"]), direct_rows_log2)
    return out


def corner_tables(pos: torch.Tensor, resolutions: list[int], rows: int,
                  dense: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Row of each level's table and bilinear weight of each of the 4 cell corners of every
    point: ``(index [levels, 4, N] into the flattened [levels * rows] table, weight
    [levels, 4, N])``. The same encoding as ``workloads.hashgrid_op.encode_reference``
    (direct row-major index where the level's vertex grid fits, else the XOR hash), computed
    once because the fitted pixels never move."""
    n, dims = pos.shape
    index, weight = [], []
    for level, res in enumerate(resolutions):
        direct = dense or (res + 1) ** dims <= rows
        scaled = pos.clamp(0.0, 1.0) * res
        cell = scaled.floor().to(torch.int64).clamp(0, max(res - 1, 0))
        frac = scaled - cell.to(torch.float32)
        idx_l, w_l = [], []
        for bits in range(2 ** dims):
            upper = [(bits >> axis) & 1 for axis in range(dims)]
            corner = cell + torch.tensor(upper, dtype=torch.int64)
            w = torch.ones(n)
            for axis in range(dims):
                w = w * (frac[:, axis] if upper[axis] else 1.0 - frac[:, axis])
            if direct:
                idx = torch.zeros(n, dtype=torch.int64)
                stride = 1
                for axis in range(dims):
                    idx = idx + corner[:, axis] * stride
                    stride *= res + 1
            else:
                idx = torch.zeros(n, dtype=torch.int64)
                for axis in range(dims):
                    idx = torch.bitwise_xor(idx, corner[:, axis] * HASH_PRIMES[axis])
                idx = torch.bitwise_and(idx, rows - 1)
            idx_l.append(idx + level * rows)
            w_l.append(w)
        index.append(torch.stack(idx_l))
        weight.append(torch.stack(w_l))
    return torch.stack(index), torch.stack(weight)


def encode(table: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Features [N, levels * features] from ``table`` [levels, rows, features] and
    :func:`corner_tables`; one gather (``index_select``, fast on the CPU) per call."""
    levels, _, features = table.shape
    _, corners, n = index.shape
    rows_of = torch.index_select(table.reshape(-1, features), 0, index.reshape(-1))
    feats = (rows_of.reshape(levels, corners, n, features) * weight[..., None]).sum(dim=1)
    return feats.permute(1, 0, 2).reshape(n, levels * features)


def fit_psnr(arch: dict[str, Any], steps: int, px: int = FIT_IMAGE_PX) -> float:
    """PSNR (dB) of the image fitted by ``arch``'s grid + MLP after ``steps`` Adam steps."""
    from workloads.zoo.definitions.neural_fields import GridEncoding, mlp

    torch.manual_seed(FIT_SEED)
    a = fit_arch(arch, px)
    enc = GridEncoding(a, dims=2)
    net = mlp(enc.out_dim, int(a["hidden"]), int(a["n_hidden_layers"]), 3)
    target = target_image(px)
    t = (torch.arange(px, dtype=torch.float32) + 0.5) / px
    yy, xx = torch.meshgrid(t, t, indexing="ij")
    pos = torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=1)
    index, weight = corner_tables(pos, enc.resolutions, enc.table.shape[1], enc.dense)
    params = [enc.table, *net.parameters()]
    opt = torch.optim.Adam(params, lr=FIT_LR, betas=FIT_BETAS, eps=FIT_EPS)

    def predict() -> torch.Tensor:
        return torch.sigmoid(net(encode(enc.table, index, weight)))

    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.mean((predict() - target) ** 2)
        loss.backward()
        opt.step()
    with torch.no_grad():
        mse = float(torch.mean((predict() - target) ** 2))
    return 10.0 * math.log10(1.0 / max(mse, 1e-12))
