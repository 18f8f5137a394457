"""Neural fields in the instant-NGP style: one multi-resolution grid encoding
(``dse::hash_grid_encode``) followed by small bias-free ReLU MLPs, per batch of points
(batch = rays x samples).

Apps [R NVlabs/instant-ngp configs/{nerf,sdf,volume,image}/base.json; P Mueller et al. 2022]:

* ``nerf``: 3-D positions + view directions -> density, RGB. Density MLP (1 hidden layer) makes
  16 geometry features, the first of which is log-density; the colour MLP (2 hidden layers)
  takes them with the degree-4 spherical-harmonics encoding of the direction (16 coefficients).
* ``nsdf``: 3-D positions -> signed distance (2 hidden layers).
* ``nvr``: 3-D positions -> RGB + density of a volume (2 hidden layers, ReLU output).
* ``gia``: 2-D pixel positions -> RGB of a gigapixel image (2 hidden layers).

Encodings (arch ``encoding``):

* ``hash``: the multi-resolution hash grid: ``levels`` levels from ``base_resolution`` to
  ``finest_resolution`` cells per axis, each a table of 2**log2_table_size rows (coarse levels
  that fit index it directly, the rest are hashed).
* ``dense``: the multi-resolution dense grid: the same levels, each indexed directly, with a
  table as large as the finest level's vertex grid, (finest + 1)**d rows.
* ``lowres_dense``: a low-resolution dense grid within the hash table's memory: the finest
  level is lowered to the largest resolution whose vertex grid fits 2**log2_table_size rows,
  and every level is dense [E: our reading of NGPC's "low resolution densegrid"].

The table is one parameter [levels, rows, features]; with ``hash`` the coarse levels leave
rows unused (instant-NGP allocates min(2**T, (N+1)**d) rows per level), so the parameter count
is the allocation, slightly above instant-NGP's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput
from workloads.hashgrid_op import (check_config, hash_grid_encode, level_resolutions,
                                   per_level_scale_for)
from workloads.zoo.definitions.checks import check_count, check_phase, example_floats
from workloads.zoo.registry import ModelSpec, register

ENCODINGS = ("hash", "dense", "lowres_dense")

#: Half-width of the uniform initialisation of grid features (dimensionless)
#: [P instant-NGP sec. 4: U(-1e-4, 1e-4)].
TABLE_INIT = 1e-4


class GridEncoding(nn.Module):
    """The grid encoding of ``dims``-D points in [0, 1]; output [N, levels * features]."""

    def __init__(self, arch: dict[str, Any], dims: int):
        super().__init__()
        levels, base = arch["levels"], arch["base_resolution"]
        log2_t, finest = arch["log2_table_size"], arch["finest_resolution"]
        mode = arch["encoding"]
        if finest < base:
            raise BadInput("arch.finest_resolution", finest,
                           f"expected >= base_resolution={base}")
        if mode == "lowres_dense":
            cap = int(math.floor(2 ** (log2_t / dims) + 1e-9)) - 1  # (cap + 1)**d <= 2**T
            while (cap + 1) ** dims > 2 ** log2_t:
                cap -= 1
            if cap < base:
                raise BadInput("arch.log2_table_size", log2_t,
                               f"a dense grid of base_resolution={base} needs "
                               f"{(base + 1) ** dims} rows")
            finest = min(finest, cap)
        self.scale = per_level_scale_for(levels, base, finest)
        self.resolutions = level_resolutions(levels, base, self.scale)
        self.dense = mode != "hash"
        rows = (self.resolutions[-1] + 1) ** dims if self.dense else 2 ** log2_t
        # The op's log2_table_size: the hash size, or the bits of a dense table's row count.
        self.log2_table_size = log2_t if not self.dense else max(1, math.ceil(math.log2(rows)))
        self.levels, self.features, self.base, self.dims = levels, arch["features"], base, dims
        check_config(dims, (levels, rows, self.features), levels, self.features,
                     self.log2_table_size, base, self.scale, self.dense)
        self.table = nn.Parameter(torch.empty(levels, rows, self.features))
        nn.init.uniform_(self.table, -TABLE_INIT, TABLE_INIT)

    @property
    def out_dim(self) -> int:
        return self.levels * self.features

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return hash_grid_encode(positions, self.table, self.levels, self.features,
                                self.log2_table_size, self.base, self.scale, self.dense)


def mlp(d_in: int, hidden: int, n_hidden_layers: int, d_out: int) -> nn.Sequential:
    """Bias-free ReLU MLP with ``n_hidden_layers`` hidden layers of width ``hidden``
    (n_hidden_layers + 1 weight matrices) [R tiny-cuda-nn FullyFusedMLP: no biases]."""
    layers: list[nn.Module] = []
    width = d_in
    for _ in range(n_hidden_layers):
        layers += [nn.Linear(width, hidden, bias=False), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, d_out, bias=False))
    return nn.Sequential(*layers)


def spherical_harmonics(dirs: torch.Tensor, degree: int) -> torch.Tensor:
    """Real spherical harmonics of unit directions [N, 3], bands l < ``degree``
    (degree**2 outputs), orthonormal on the sphere."""
    x, y, z = dirs[:, 0:1], dirs[:, 1:2], dirs[:, 2:3]
    pi = math.pi
    terms = [torch.full_like(x, 0.5 * math.sqrt(1 / pi))]
    if degree > 1:
        c1 = math.sqrt(3 / (4 * pi))
        terms += [-c1 * y, c1 * z, -c1 * x]
    if degree > 2:
        xx, yy, zz = x * x, y * y, z * z
        terms += [0.5 * math.sqrt(15 / pi) * x * y, -0.5 * math.sqrt(15 / pi) * y * z,
                  0.25 * math.sqrt(5 / pi) * (3 * zz - 1), -0.5 * math.sqrt(15 / pi) * x * z,
                  0.25 * math.sqrt(15 / pi) * (xx - yy)]
    if degree > 3:
        terms += [-0.25 * math.sqrt(35 / (2 * pi)) * y * (3 * xx - yy),
                  0.5 * math.sqrt(105 / pi) * x * y * z,
                  -0.25 * math.sqrt(21 / (2 * pi)) * y * (5 * zz - 1),
                  0.25 * math.sqrt(7 / pi) * z * (5 * zz - 3),
                  -0.25 * math.sqrt(21 / (2 * pi)) * x * (5 * zz - 1),
                  0.25 * math.sqrt(105 / pi) * z * (xx - yy),
                  -0.25 * math.sqrt(35 / (2 * pi)) * x * (xx - 3 * yy)]
    return torch.cat(terms, dim=1)


class NeRF(nn.Module):
    """positions [N, 3], directions [N, 3] (unit) -> (density [N, 1], rgb [N, 3])."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        self.encoding = GridEncoding(arch, dims=3)
        self.sh_degree = arch["sh_degree"]
        geo = arch["geo_features"]
        self.density_mlp = mlp(self.encoding.out_dim, arch["hidden"], arch["n_hidden_layers"], geo)
        self.color_mlp = mlp(geo + self.sh_degree ** 2, arch["hidden"],
                             arch["color_hidden_layers"], 3)

    def forward(self, positions: torch.Tensor, directions: torch.Tensor):
        geo = self.density_mlp(self.encoding(positions))
        sh = spherical_harmonics(directions, self.sh_degree)
        rgb = torch.sigmoid(self.color_mlp(torch.cat([geo, sh], dim=1)))
        return torch.exp(geo[:, :1]), rgb


class FieldMLP(nn.Module):
    """positions [N, dims] -> [N, d_out]: grid encoding then one MLP (NSDF, NVR, GIA)."""

    def __init__(self, arch: dict[str, Any], dims: int, d_out: int, relu_out: bool):
        super().__init__()
        self.encoding = GridEncoding(arch, dims)
        self.mlp = mlp(self.encoding.out_dim, arch["hidden"], arch["n_hidden_layers"], d_out)
        self.relu_out = relu_out

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        out = self.mlp(self.encoding(positions))
        return torch.relu(out) if self.relu_out else out


def _inputs(name: str, dims: int, with_dirs: bool):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
        """``batch`` points (rays x samples) in [0, 1]^dims, plus unit view directions for
        NeRF; ``seq``/``context`` unused."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        positions = example_floats(batch, dims, low=0.0, high=1.0)
        if not with_dirs:
            return (positions,), {}
        return (positions, F.normalize(example_floats(batch, 3), dim=1)), {}
    return inputs


def _grid_arch(log2_table_size: int, finest_resolution: int) -> dict[str, Any]:
    # L = 16, F = 2, N_min = 16 [R instant-NGP configs/*/base.json]; MLP width 64 [R].
    return {"levels": 16, "features": 2, "log2_table_size": log2_table_size,
            "base_resolution": 16, "finest_resolution": finest_resolution, "hidden": 64,
            "n_hidden_layers": 2, "encoding": "hash"}


#: Finest grid resolution over the unit cube, cells per axis [R instant-NGP src/testbed.cu:
#: desired_resolution = 2048 (x aabb_scale 1 for NeRF; used for SDF)]. For volumes the testbed
#: uses the volume's own resolution; 2048 is assumed for NVR [E].
FINEST_3D = 2048
#: Finest resolution of GIA, cells per axis: the testbed uses half the image's longest side
#: [R testbed.cu]; an 8192-pixel-wide (8K) image is assumed [E].
FINEST_GIA = 4096

_CHOICES = {"encoding": ENCODINGS}

register(ModelSpec(
    name="nerf", family="neural_field",
    description="instant-NGP NeRF: hash grid, density MLP (1 hidden), colour MLP (2 hidden), SH4",
    arch={**_grid_arch(19, FINEST_3D), "n_hidden_layers": 1, "color_hidden_layers": 2,
          "geo_features": 16, "sh_degree": 4},
    arch_choices={**_CHOICES, "sh_degree": (1, 2, 3, 4)},
    build=NeRF, inputs=_inputs("nerf", 3, True), phases=("forward",)))

# Output widths: NSDF 1 (signed distance) and GIA 3 (RGB) [R instant-NGP testbed];
# NVR 4 (RGB + density) with ReLU output [R configs/volume/base.json output_activation; E width].
for _name, _dims, _out, _relu, _log2_t, _finest, _desc in (
        ("nsdf", 3, 1, False, 19, FINEST_3D, "instant-NGP neural SDF"),
        ("nvr", 3, 4, True, 19, FINEST_3D, "instant-NGP neural volume rendering"),
        ("gia", 2, 3, False, 24, FINEST_GIA, "instant-NGP gigapixel image approximation")):
    register(ModelSpec(
        name=_name, family="neural_field", description=_desc + ": hash grid + MLP (2 hidden)",
        arch=_grid_arch(_log2_t, _finest), arch_choices=dict(_CHOICES),
        build=lambda a, d=_dims, o=_out, r=_relu: FieldMLP(a, d, o, r),
        inputs=_inputs(_name, _dims, False), phases=("forward",)))
