"""End-to-end generation of a batch: one prefill, then every decode step with its growing context.

A batch of ``batch`` sequences of ``input_len`` prompt tokens generates ``output_len`` tokens
each: the prefill makes the first (time to first token, TTFT), then decode step ``j``
(``j = 2 .. output_len``) feeds token ``j - 1`` and attends over ``input_len + j - 1`` cached
tokens. Each iteration is the graph of :func:`workloads.iteration.iteration_workload`,
simulated on the target (:class:`simulators.iteration_cost.Target`).

The steps differ only in their KV length and their cost is smooth in it, so not every step is
simulated: :func:`generate` simulates the first and last step and a few evenly spaced between,
then bisects every interval whose simulated midpoint differs from the straight line through its
ends by more than ``tolerance`` (relative, latency or energy), and interpolates the rest
linearly. ``tests/test_generation.py`` checks the result against simulating every step
(within 1 %); ``exact=True`` simulates every step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from dse.errors import BadInput
from simulators.iteration_cost import Target
from workloads.iteration import iteration_workload
from workloads.ir import Workload

#: Relative gap between a simulated midpoint and the line through its interval's ends past
#: which the interval is split [E: 0.2 %, five times under the 1 % bound the tests check].
TOLERANCE = 0.002
#: Evenly spaced decode steps simulated before bisection starts (ends included).
START_POINTS = 5


@dataclass
class Generation:
    """A batch's generation: ``ttft_s`` (the prefill), ``tpot_s`` (mean decode step),
    ``step_latency_s`` (every decode step, s), ``e2e_s`` (prefill + every step), ``tokens_per_s``
    (``batch x output_len / e2e_s``), ``energy_j`` (all of it, static included),
    ``energy_per_token_j``, ``prefill_energy_j``; ``simulated_steps``: the KV lengths whose
    step was simulated (the others are interpolated)."""

    model: str
    batch: int
    input_len: int
    output_len: int
    ttft_s: float
    tpot_s: float
    e2e_s: float
    tokens_per_s: float
    energy_j: float
    energy_per_token_j: float
    prefill_energy_j: float
    step_latency_s: list[float] = field(default_factory=list)
    step_energy_j: list[float] = field(default_factory=list)
    simulated_steps: list[int] = field(default_factory=list)
    target: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_lengths(input_len: Any, output_len: Any, batch: Any) -> None:
    for name, v in (("input_len", input_len), ("output_len", output_len), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**20:
            raise BadInput(name, v, "expected an int in [1, 1048576]")


def sample_adaptively(f: Callable[[int], tuple[float, float]], lo: int, hi: int,
                      tolerance: float = TOLERANCE, start: int = START_POINTS
                      ) -> dict[int, tuple[float, float]]:
    """``f`` (an x -> (latency, energy) pair) at integer points of ``[lo, hi]``: ``start``
    evenly spaced ones, then the midpoint of every interval whose midpoint ``f`` is off the
    straight line through its ends by more than ``tolerance`` (relative), recursively."""
    xs = sorted({int(round(x)) for x in np.linspace(lo, hi, min(start, hi - lo + 1))})
    known = {x: f(x) for x in xs}
    todo = list(zip(xs, xs[1:]))
    while todo:
        a, b = todo.pop()
        if b - a < 2:
            continue
        m = (a + b) // 2
        known[m] = f(m)
        off = max(abs(known[a][k] + (known[b][k] - known[a][k]) * (m - a) / (b - a)
                      - known[m][k]) / max(abs(known[m][k]), 1e-30) for k in (0, 1))
        if off > tolerance:
            todo.extend(((a, m), (m, b)))
    return known


def generate(base: Workload, target: Target, input_len: int, output_len: int, batch: int,
             tolerance: float = TOLERANCE, exact: bool = False) -> Generation:
    """Generate ``output_len`` tokens for ``batch`` prompts of ``input_len`` tokens of
    ``base``'s model (a decode step of batch 1) on ``target``; see the module docstring."""
    check_lengths(input_len, output_len, batch)
    if not 0 < tolerance < 0.1:
        raise BadInput("tolerance", tolerance, "expected a number in (0, 0.1)")
    ttft, e_prefill = target.run(iteration_workload(base, (), [(0, input_len)] * batch),
                                 fill=True)

    def step(kv_len: int) -> tuple[float, float]:
        return target.run(iteration_workload(base, [kv_len] * batch))

    kv = np.arange(input_len + 1, input_len + output_len, dtype=np.int64)  # steps 2..output_len
    lat = np.zeros(0)
    energy = np.zeros(0)
    simulated: list[int] = []
    if len(kv):
        lo, hi = int(kv[0]), int(kv[-1])
        known = ({x: step(x) for x in range(lo, hi + 1)} if exact
                 else sample_adaptively(step, lo, hi, tolerance))
        simulated = sorted(known)
        xs = np.array(simulated, dtype=float)
        lat = np.interp(kv, xs, [known[x][0] for x in simulated])
        energy = np.interp(kv, xs, [known[x][1] for x in simulated])
    e2e = ttft + float(lat.sum())
    total_e = e_prefill + float(energy.sum())
    tokens = batch * output_len
    return Generation(
        model=base.model, batch=batch, input_len=input_len, output_len=output_len,
        ttft_s=ttft, tpot_s=float(lat.mean()) if len(lat) else 0.0, e2e_s=e2e,
        tokens_per_s=tokens / e2e, energy_j=total_e, energy_per_token_j=total_e / tokens,
        prefill_energy_j=e_prefill, step_latency_s=lat.tolist(),
        step_energy_j=energy.tolist(), simulated_steps=simulated, target=target.describe())
