"""dse.study.objectives.totals: its one-workload shortcut gives what the general sum gives
(same keys in the same order, same values to the bit), on random metrics incl. signed zeros,
serving-style power and EDP, and an extra entry."""

from __future__ import annotations

import math

import numpy as np

from dse.study import objectives as obj


def _same(a: float, b: float) -> bool:
    return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)


def test_one_workload_shortcut_equals_the_general_sum():
    rng = np.random.default_rng(5)
    for i in range(400):
        own = {"latency_s": float(rng.choice([0.0, -0.0, rng.lognormal()])),
               "energy_j": float(rng.choice([-0.0, rng.lognormal()])),
               "throughput": float(rng.lognormal()),
               "params": float(rng.integers(0, 10**9)), "flops": float(rng.lognormal(20))}
        if i % 3 == 0:
            own["avg_power_w"], own["edp"] = float(rng.lognormal()), float(rng.lognormal())
        design = {k: float(rng.lognormal()) for k in obj.DESIGN_METRICS}
        args = ({"w": own}, {"w": float(rng.choice([1.0, 0.5, 3]))}, design,
                {"devices": 4.0} if i % 5 else None)
        fast, general = obj.totals(*args), obj._totals(*args)
        assert list(fast) == list(general)
        assert all(_same(fast[k], general[k]) for k in fast), (fast, general)
    served = {"w": {**own, next(iter(obj._SUMMED)): 1.0}}   # a summed metric: the general path
    assert obj.totals(served, {"w": 1.0}, design) == obj._totals(served, {"w": 1.0}, design,
                                                                     None)
