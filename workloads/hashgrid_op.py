"""The multi-resolution grid encoding of instant-NGP as ONE custom op, ``dse::hash_grid_encode``.

The capture sees one ``hashgrid`` node whose arguments carry the whole configuration:

    hash_grid_encode(positions [N, d], table [levels, rows, features], levels, features,
                     log2_table_size, base_resolution, per_level_scale, dense)
        -> [N, levels * features]

Level ``l`` has ``N_l = floor(base_resolution * per_level_scale**l)`` cells per axis
(N_l + 1 vertices) [P: Mueller et al., "Instant Neural Graphics Primitives", SIGGRAPH 2022,
eq. 2]. A point ``x`` in [0, 1]^d is scaled by ``N_l``; the 2^d corners of its cell are looked up
and blended with (bi/tri)linear weights. A level whose vertex grid fits the table,
``(N_l + 1)**d <= rows``, indexes it directly (row-major); otherwise the corner is hashed as the
XOR of its integer coordinates times the primes (1, 2654435761, 805459861), masked to
``2**log2_table_size`` rows [P: same paper, eq. 4].

``dense=False`` (hash grid): ``rows`` must be ``2**log2_table_size``; coarse levels that fit are
direct, the others hashed. ``dense=True`` (dense grid): every level must fit the table and is
indexed directly, no hashing; ``rows`` is whatever the caller allocated.

The CPU implementation is plain torch (gathers over the 2^d corners, vectorised over points);
``register_fake`` gives the output shape so the op also runs on meta tensors and under
``torch.export``.
"""

from __future__ import annotations

import math

import torch

from dse.errors import BadInput

#: Spatial-hash primes, one per coordinate axis (dimensionless) [P: instant-NGP, eq. 4].
HASH_PRIMES = (1, 2654435761, 805459861)

#: Largest supported input dimensionality (one hash prime per axis).
MAX_DIMS = len(HASH_PRIMES)

#: Tolerance added before flooring ``base * scale**l`` so a scale computed as
#: ``(finest/base)**(1/(L-1))`` lands on ``finest`` despite rounding (cells per axis).
_RES_EPS = 1e-6


def level_resolutions(levels: int, base_resolution: int, per_level_scale: float) -> list[int]:
    """Cells per axis of each level: ``floor(base * scale**l)`` for l in 0..levels-1."""
    return [int(math.floor(base_resolution * per_level_scale ** level + _RES_EPS))
            for level in range(levels)]


def per_level_scale_for(levels: int, base_resolution: int, finest_resolution: int) -> float:
    """The growth factor b that takes ``base_resolution`` to ``finest_resolution`` in
    ``levels - 1`` steps [P: instant-NGP eq. 3]; 1.0 for a single level."""
    if levels <= 1:
        return 1.0
    return math.exp(math.log(finest_resolution / base_resolution) / (levels - 1))


def check_config(dims: int, table_shape: tuple[int, ...], levels: int, features: int,
                 log2_table_size: int, base_resolution: int, per_level_scale: float,
                 dense: bool) -> None:
    """Raise :class:`BadInput` when the op's arguments do not describe a valid encoding."""
    if not 1 <= dims <= MAX_DIMS:
        raise BadInput("positions", f"[N, {dims}]", f"expected 1 to {MAX_DIMS} coordinates")
    if levels < 1 or features < 1 or base_resolution < 1 or log2_table_size < 1:
        raise BadInput("hash_grid", (levels, features, base_resolution, log2_table_size),
                       "levels, features, base_resolution and log2_table_size must be >= 1")
    if not per_level_scale >= 1.0:
        raise BadInput("per_level_scale", per_level_scale, "expected >= 1.0")
    if len(table_shape) != 3 or table_shape[0] != levels or table_shape[2] != features:
        raise BadInput("table", tuple(table_shape), f"expected [{levels}, rows, {features}]")
    rows = table_shape[1]
    if dense:
        finest = level_resolutions(levels, base_resolution, per_level_scale)[-1]
        if (finest + 1) ** dims > rows:
            raise BadInput("table", tuple(table_shape),
                           f"a dense grid needs {(finest + 1) ** dims} rows for its finest level")
    elif rows != 2 ** log2_table_size:
        raise BadInput("table", tuple(table_shape),
                       f"a hash grid needs 2**{log2_table_size} = {2 ** log2_table_size} rows")


def _corner_index(corner: torch.Tensor, resolution: int, rows: int, direct: bool) -> torch.Tensor:
    """Row of each integer corner [N, d] (int64): direct row-major index or masked XOR hash."""
    dims = corner.shape[1]
    if direct:
        index = torch.zeros_like(corner[:, 0])
        stride = 1
        for axis in range(dims):
            index = index + corner[:, axis] * stride
            stride *= resolution + 1
        return index
    # int64 products keep the low 32 bits of instant-NGP's uint32 arithmetic, and the mask
    # keeps at most 32 bits (log2_table_size <= 32 in any real table).
    index = torch.zeros_like(corner[:, 0])
    for axis in range(dims):
        index = torch.bitwise_xor(index, corner[:, axis] * HASH_PRIMES[axis])
    return torch.bitwise_and(index, rows - 1)


def encode_reference(positions: torch.Tensor, table: torch.Tensor, levels: int, features: int,
                     log2_table_size: int, base_resolution: int, per_level_scale: float,
                     dense: bool) -> torch.Tensor:
    """Plain-torch encoding (the op's CPU implementation); see the module docstring."""
    check_config(positions.shape[1], tuple(table.shape), levels, features, log2_table_size,
                 base_resolution, per_level_scale, dense)
    n, dims = positions.shape
    rows = table.shape[1]
    x01 = positions.to(torch.float32).clamp(0.0, 1.0)
    outputs = []
    for level, resolution in enumerate(level_resolutions(levels, base_resolution,
                                                         per_level_scale)):
        direct = dense or (resolution + 1) ** dims <= rows
        scaled = x01 * resolution
        cell = scaled.floor().to(torch.int64).clamp(0, max(resolution - 1, 0))
        frac = scaled - cell.to(torch.float32)
        level_table = table[level].to(torch.float32)
        acc = torch.zeros(n, features, dtype=torch.float32, device=positions.device)
        for bits in range(2 ** dims):
            upper = [(bits >> axis) & 1 for axis in range(dims)]
            weight = torch.ones(n, dtype=torch.float32, device=positions.device)
            for axis in range(dims):
                weight = weight * (frac[:, axis] if upper[axis] else 1.0 - frac[:, axis])
            offset = torch.tensor(upper, dtype=torch.int64, device=positions.device)
            rows_of_corner = _corner_index(cell + offset, resolution, rows, direct)
            acc = acc + weight[:, None] * level_table[rows_of_corner]
        outputs.append(acc)
    return torch.cat(outputs, dim=1).to(table.dtype)


@torch.library.custom_op("dse::hash_grid_encode", mutates_args=())
def hash_grid_encode(positions: torch.Tensor, table: torch.Tensor, levels: int, features: int,
                     log2_table_size: int, base_resolution: int, per_level_scale: float,
                     dense: bool) -> torch.Tensor:
    """Multi-resolution grid encoding: [N, d] points in [0, 1] -> [N, levels * features]."""
    return encode_reference(positions, table, levels, features, log2_table_size,
                            base_resolution, per_level_scale, dense)


@hash_grid_encode.register_fake
def _hash_grid_encode_fake(positions, table, levels, features, log2_table_size,
                           base_resolution, per_level_scale, dense):
    check_config(positions.shape[1], tuple(table.shape), levels, features, log2_table_size,
                 base_resolution, per_level_scale, dense)
    return positions.new_empty((positions.shape[0], levels * features), dtype=table.dtype)
