"""Fast screening path against the SimPy simulator on random ``npu`` designs.

For gpt2 decode (context 512), llama2-7b prefill (seq 512) and resnet50 (batch 1), on
``--designs`` random feasible NPU designs (a random preset, each parameter then redrawn with
probability 0.7 from its range, log-uniform where the parameter is log-scaled; designs whose
scratchpads cannot hold a minimal tile are redrawn), prints:

* SimPy ms/design: median of ``simulate()`` over ``--simpy`` of the designs;
* fast ms/design before: ``evaluate_many(..., vectorised=False)`` (the per-design ``cost()``
  loop), total wall time / designs, best of ``--repeats``;
* fast ms/design after: ``evaluate_many`` with the NPU's vectorised ``cost_many``;
* the ratios SimPy / fast;
* agreement on the SimPy subset: the largest fast / SimPy latency ratio (must be <= 1: the
  fast path ignores contention, so it is a lower bound) and how many are equal to 1e-9.

A last row runs the contention-free chain of tests/test_fast.py (an MLP: every op waits for
the one before it), where fast and SimPy latencies must all be equal.

Every timed call gets freshly built designs (``NPU.cost`` memoises per design), so no call
profits from an earlier one; building them is not timed. Captures come from the on-disk cache
(the first run captures them).

Usage: python benchmarks/fast_path.py [--designs 256] [--simpy 10] [--repeats 3] [--seed 0]
Target (issue: fast screening path): >= 100x faster per design than SimPy.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOADS = {
    "gpt2 decode ctx512": dict(model="gpt2", phase="decode", context=512),
    "llama2-7b prefill 512": dict(model="llama2-7b", phase="prefill", seq=512),
    "resnet50": dict(model="resnet50"),
}

#: Probability that a random design redraws a parameter instead of keeping its preset's value.
REDRAW = 0.7


def mlp_chain():
    """tests/test_fast.py's chain: Linear-GELU-Linear-LayerNorm-Linear-Softmax on 64 x 512."""
    import torch
    import torch.nn as nn
    from workloads.capture import capture
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024),
                          nn.LayerNorm(1024), nn.Linear(1024, 256), nn.Softmax(dim=-1))
        x = torch.zeros(64, 512)
    return capture(m, (x,), model="mlp")


def random_points(workload, n: int, seed: int) -> list[tuple[str, dict]]:
    """``n`` (preset, overrides) pairs of NPU designs that can run ``workload``."""
    from accelerators.npu import NPU
    rng = random.Random(seed)
    out: list[tuple[str, dict]] = []
    while len(out) < n:
        preset = rng.choice(sorted(NPU.PRESETS))
        values = {}
        for p in NPU.PARAMS:
            if rng.random() >= REDRAW:
                continue
            if p.choices is not None:
                values[p.name] = rng.choice(p.choices)
            elif p.log:
                x = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
                values[p.name] = int(round(x)) if p.type is int else x
            else:
                x = rng.uniform(p.low, p.high)
                values[p.name] = int(round(x)) if p.type is int else x
        if NPU(preset, **values).check(workload) is None:
            out.append((preset, values))
    return out


def build(points):
    from accelerators.npu import NPU
    return [NPU(preset, **values) for preset, values in points]


def time_fast(workload, points, vectorised: bool, repeats: int):
    """Best wall time of ``evaluate_many`` over ``repeats`` runs on fresh designs, s."""
    from simulators.fast import evaluate_many
    best, result = math.inf, None
    for _ in range(repeats):
        designs = build(points)
        t0 = time.perf_counter()
        result = evaluate_many(workload, designs, vectorised=vectorised)
        best = min(best, time.perf_counter() - t0)
    return best, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=256)
    parser.add_argument("--simpy", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import numpy as np
    from dse import api
    from simulators.engine import simulate

    print(f"{args.designs} random feasible npu designs (seed {args.seed}); SimPy median over "
          f"{args.simpy}; fast = best of {args.repeats} evaluate_many calls / designs")
    header = (f"{'workload':<26} {'ops':>4} {'uniq':>4} {'SimPy ms':>9} {'before ms':>10} "
              f"{'after ms':>9} {'SimPy/before':>12} {'SimPy/after':>11} {'max fast/SimPy':>14} "
              f"{'equal':>6}")
    print(header)
    print("-" * len(header))
    from simulators.fast import _Structure
    rows = [(label, dict(spec)) for label, spec in WORKLOADS.items()]
    rows.append(("mlp chain (no contention)", None))
    for label, spec in rows:
        w = mlp_chain() if spec is None else api.workload(spec.pop("model"), **spec)
        points = random_points(w, args.designs, args.seed)
        before_s, before = time_fast(w, points, False, args.repeats)
        after_s, after = time_fast(w, points, True, args.repeats)
        same = (np.array_equal(before.latency_s, after.latency_s, equal_nan=True)
                and np.array_equal(before.energy_j, after.energy_j, equal_nan=True)
                and before.infeasible == after.infeasible)
        if not same:
            raise SystemExit(f"{label}: the vectorised fast path differs from the per-design loop")
        simpy_s, ratios, equal = [], [], 0
        for i, d in enumerate(build(points[:args.simpy])):
            t0 = time.perf_counter()
            r = simulate(w, d)
            simpy_s.append(time.perf_counter() - t0)
            ratios.append(after.latency_s[i] / r.latency_s)
            equal += abs(after.latency_s[i] / r.latency_s - 1) <= 1e-9
        simpy_ms = statistics.median(simpy_s) * 1e3
        b_ms, a_ms = before_s / len(points) * 1e3, after_s / len(points) * 1e3
        print(f"{label:<26} {len(w.ops):>4} {len(_Structure(w).unique_ops):>4} {simpy_ms:>9.3f} "
              f"{b_ms:>10.4f} {a_ms:>9.4f} {simpy_ms / b_ms:>11.0f}x {simpy_ms / a_ms:>10.0f}x "
              f"{max(ratios):>14.6f} {equal:>3}/{len(ratios)}")
        if max(ratios) > 1 + 1e-9 or (spec is None and equal != len(ratios)):
            raise SystemExit(f"{label}: the fast path disagrees with SimPy")


if __name__ == "__main__":
    main()
