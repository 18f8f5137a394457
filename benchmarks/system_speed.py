"""Speed of a system simulation against the one-device simulation of the same model, in one
run: llama2-70b decode (batch 32, 1,024 tokens of context) on eight H200s with tensor
parallelism 8 (the split, every device's costs, the collectives and the SimPy run) against
the same workload on one H200 given enough memory to hold it (36-GB HBM3e stacks, 216 GB).

Target (issue 16): the 8-device TP=8 simulation costs at most 3x the one-device one.

Usage: python benchmarks/system_speed.py [--repeats 5] [--model llama2-70b] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _median_s(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default="llama2-70b")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dse import api
    from simulators.engine import simulate
    from simulators.system_engine import simulate_system
    from workloads.parallel import Layout

    w = api.workload(args.model, phase="decode", batch=32, context=1024)   # capture, cached
    one = api.accelerator("gpu:h200", {"memory_device_gb": 36, "memory_capacity_bytes": 216e9})
    system = api.system("hgx-h200", 8)
    rows = []
    for label, layout in (("tp=8", Layout(tp=8)), ("tp=4 pp=2", Layout(tp=4, pp=2)),
                          ("tp=2 pp=2 dp=2", Layout(tp=2, pp=2, dp=2))):
        t = time.perf_counter()
        simulate_system(w, system, layout)                    # cold: the split, its checks
        cold = time.perf_counter() - t
        simulate(w, one)                                      # warm every cost cache once
        t1, r1 = _median_s(lambda: simulate(w, one), args.repeats)
        t8, r8 = _median_s(lambda: simulate_system(w, system, layout), args.repeats)
        rows.append({"layout": label, "ops": len(w), "one_device_s": t1, "system_s": t8,
                     "system_cold_s": cold, "ratio": t8 / t1, "cold_ratio": cold / t1,
                     "one_device_latency_s": r1.latency_s,
                     "system_latency_s": r8.latency_s, "system_events": r8.events,
                     "one_device_events": r1.events})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.model} decode, batch 32, context 1024: simulation wall time (median of "
          f"{args.repeats})")
    print(f"{'layout':<16}{'1 H200 (s)':>12}{'8 H200 (s)':>12}{'ratio':>8}{'first (s)':>11}"
          f"{'ratio':>7}{'events 1/8':>16}{'latency 1 / 8 (ms)':>22}")
    for r in rows:
        print(f"{r['layout']:<16}{r['one_device_s']:>12.3f}{r['system_s']:>12.3f}"
              f"{r['ratio']:>8.2f}{r['system_cold_s']:>11.3f}{r['cold_ratio']:>7.2f}"
              f"{r['one_device_events']:>8}/{r['system_events']:<8}"
              f"{1e3 * r['one_device_latency_s']:>11.2f} / {1e3 * r['system_latency_s']:.2f}")
    print("first: the first simulation of the layout (the split and its per-device checks, "
          "cached for later systems); target: the tp=8 row's ratio <= 3")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
