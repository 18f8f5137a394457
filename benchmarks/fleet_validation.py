"""How close the fleet solver's steady-state capacity profile is to simulation.

For a few request sizes (Mélange's buckets), the highest rate one instance sustains within a
TPOT SLO, two ways: :func:`simulators.fleet.profile` (the steady-state model of continuous
batching the fleet solver uses) and a search over full serving simulations
(:func:`simulators.serving.simulate_serving`, at least 1,000 requests and 20 s of arrivals
of that size per run: a rate passes when the mean TPOT is within the SLO and the queue does not
grow: the last quarter's mean TTFT stays within 3x the first quarter's + 0.25 s). Prints a table: size, both rates, their ratio, and the
simulated TPOT p50 / p99 at the profiled rate.

    python benchmarks/fleet_validation.py [--model llama2-7b] [--device gpu:a100] [--slo 0.12]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dse import api
from simulators import fleet as fl
from simulators.rate_search import max_rate
from simulators.schedulers import make_scheduler
from simulators.serving import simulate_serving
from workloads.requests import LengthDistribution
from workloads.traces import synthetic_trace

SIZES = ((32, 32), (64, 256), (256, 256), (512, 64), (1024, 256), (3000, 250))


def simulated_rate(cost, i: int, o: int, slo: float, requests: int) -> float:
    dist = LengthDistribution("b", float(i), float(o), cv=0.0, max_len=1 << 20)

    def ok(rate: float) -> bool:
        n = int(min(max(requests, rate * 20.0), 5 * requests))   # >= 20 s of arrivals
        r = simulate_serving(cost, synthetic_trace(dist, rate, n, seed=0),
                             make_scheduler("continuous"))
        p = r.per_request
        ttft = np.asarray(p["first_token_s"]) - np.asarray(p["arrival_s"])
        q = len(ttft) // 4
        growing = float(np.mean(ttft[-q:])) > 3.0 * float(np.mean(ttft[:q])) + 0.25
        return r.tpot_s["mean"] <= slo and not growing

    return max_rate(ok, 1.0, rel_tol=0.03)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--device", default="gpu:a100")
    ap.add_argument("--slo", type=float, default=0.12)
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    base = api._iteration_base(args.model, "bf16", None)
    cost = api._cost_model(base, api._target(args.device, None, None, None, None, None,
                                             "fast"), 4096)
    print(f"{args.model} on {args.device}, TPOT SLO {args.slo * 1e3:g} ms")
    print(f"{'in/out':>10} {'profile':>9} {'simulated':>9} {'ratio':>6} {'TPOT p50':>9} "
          f"{'TPOT p99':>9} {'wall s':>7}")
    ratios = []
    for i, o in SIZES:
        t = time.perf_counter()
        prof = fl.profile(cost, fl.Bucket((1, 2), (1, 2), 1.0, i, o), args.slo, None)
        sim = simulated_rate(cost, i, o, args.slo, args.requests)
        dist = LengthDistribution("b", float(i), float(o), cv=0.0, max_len=1 << 20)
        at = simulate_serving(cost, synthetic_trace(dist, prof, args.requests, seed=0),
                              make_scheduler("continuous")) if prof > 0 else None
        ratio = prof / sim if sim > 0 else float("nan")
        ratios.append(ratio)
        print(f"{f'{i}/{o}':>10} {prof:9.3g} {sim:9.3g} {ratio:6.3f} "
              f"{(at.tpot_s['p50'] if at else float('nan')) * 1e3:8.3g}m "
              f"{(at.tpot_s['p99'] if at else float('nan')) * 1e3:8.3g}m "
              f"{time.perf_counter() - t:7.1f}")
    r = np.array([x for x in ratios if np.isfinite(x)])
    print(f"profile / simulated: median {np.median(r):.3f}, range {r.min():.3f}-{r.max():.3f}")


if __name__ == "__main__":
    main()
