"""Checks on the arguments of a spec's ``inputs(arch, phase, batch, seq, context)``, and
deterministic example tensors."""

from __future__ import annotations

import torch

from dse.errors import BadInput


def check_phase(name: str, phase: str, phases: tuple[str, ...]) -> None:
    if phase not in phases:
        raise BadInput("phase", phase, f"{name} runs phases " + ", ".join(phases))


def check_count(field: str, value: int, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, else :class:`BadInput`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInput(field, value, f"expected an int >= {minimum}")
    return value


def example_floats(*shape: int, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """A deterministic float32 tensor of ``shape`` with values spread over [low, high]
    (``sin`` of a ramp), made on the current default device (meta allocates nothing)."""
    count = 1
    for size in shape:
        count *= size
    # Step 0.7548776662 rad (arbitrary, irrational-like) so values do not repeat; sin in [-1, 1].
    unit = (torch.arange(count, dtype=torch.float32) * 0.7548776662).sin()
    return (low + (unit + 1.0) * (0.5 * (high - low))).reshape(shape)
