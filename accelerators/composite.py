"""The cost of a composite op (``moe``, ``scan``, ``recurrent``): the sum of its parts' costs.

``workloads.composite.parts`` splits the op into simpler ops with expected counts (per-expert
matmuls, per-step recurrent matmuls, ...); each template costs the parts with its own model and
this adds them up, scaled by their counts: latency, compute time, channel traffic, bytes per
level and energy add (the parts run one after another on the one device the op is given). The
op holds the unit of its slowest part and also every other unit a part uses.
"""

from __future__ import annotations

from typing import Callable

from accelerators.base import OpCost
from workloads.composite import make_part, parts
from workloads.ir import ELEMENTWISE, Op


def cost_composite(op: Op, cost: Callable[[Op], OpCost], fixed_s: float = 0.0) -> OpCost:
    """``op``'s cost from ``cost`` (a template's per-op cost) applied to its parts.

    ``fixed_s``: a fixed time (kernel launch) each part's latency includes that the op, run as
    one grouped kernel, pays once rather than once per part."""
    costed = [(count, cost(part)) for count, part in parts(op)] or [
        (1.0, cost(make_part(op, "empty", ELEMENTWISE)))]   # no work: the template's floor
    return chain_costs(costed, fixed_s)


def chain_costs(costed: list[tuple[float, OpCost]], fixed_s: float = 0.0) -> OpCost:
    """One op's cost from parts run one after another on one device, each ``(count, cost)``:
    latency, compute time, traffic, bytes per level and energy add, scaled by the counts; the
    unit is the slowest part's, which also holds every other part's unit. ``fixed_s`` as in
    :func:`cost_composite`."""
    main = max(costed, key=lambda cc: cc[0] * cc[1].latency_s)[1]

    def add(field: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for count, c in costed:
            for key, value in getattr(c, field).items():
                out[key] = out.get(key, 0.0) + count * value
        return out
    units = {c.unit for _, c in costed} | {u for _, c in costed for u in c.also_holds}
    latency = sum(n * max(c.latency_s - fixed_s, 0.0) for n, c in costed) + fixed_s
    return OpCost(unit=main.unit, latency_s=max(latency, main.latency_s),
                  compute_s=sum(n * c.compute_s for n, c in costed), clock_hz=main.clock_hz,
                  traffic=add("traffic"), bytes_by_level=add("bytes_by_level"),
                  energy_j=add("energy_j"), bound=main.bound,
                  also_holds=tuple(sorted(units - {main.unit})))
