"""Simulation wall time of the ``wafer`` template against the number of cores.

Simulates one LLaMA3-8B decode step (batch 1, 4K context, fp16) on square decode regions of
32^2 ... 1000^2 cores (the mesh is the region; SRAM per core is raised where the model would not
fit the region, so every design is feasible) and prints, per region: cores, SRAM per core, the
SimPy events, the wall time of the cost model and of the whole simulation (median of
``--repeat`` runs; the workload capture is cached and not timed), and the simulated step.

    python benchmarks/wafer_scaling.py [--repeat 5] [--sides 32,100,250,500,750,1000]

The issue's target: 750^2 in <= 1 s, and wall time flat in the core count (every op is costed
in closed form; the simulator runs one process per op, never one per core).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from accelerators.wafer import Wafer
from simulators.engine import simulate
from workloads.build import build_workload


def design(side: int, weight_bytes: float) -> Wafer:
    """A ``side`` x ``side`` mesh whose whole area is the decode region, with enough SRAM per
    core (a power of two of KB, at least WSE-2's 48 KB) for the model."""
    need_kb = 1.5 * weight_bytes / side**2 / 1024 + 8
    sram_kb = max(48.0, 2.0 ** math.ceil(math.log2(need_kb)))
    return Wafer("wse2", mesh_width=side, mesh_height=side, prefill_region_width=side,
                 prefill_region_height=side, decode_region_width=side, decode_region_height=side,
                 sram_per_core_kb=sram_kb, tdp_w=1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sides", default="32,100,250,500,750,1000")
    args = ap.parse_args()
    w = build_workload("llama3-8b", phase="decode", batch=1, context=4096, dtype="fp16")
    print(f"LLaMA3-8B decode step: {len(w)} ops; median of {args.repeat} runs")
    print(f"{'region':>11} {'cores':>9} {'SRAM/core':>10} {'events':>7} {'costs ms':>9} "
          f"{'simulate ms':>12} {'step us':>9} {'tokens/s':>9}")
    for side in (int(s) for s in args.sides.split(",")):
        t = design(side, w.weight_footprint_bytes)
        cost_ms, sim_ms = [], []
        result = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            t.costs(w)
            cost_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            result = simulate(w, t)  # check + costs + SimPy run
            sim_ms.append((time.perf_counter() - t0) * 1e3)
        print(f"{side:>5}x{side:<5} {t.cores:>9,} {t.hw.sram_per_core_kb:>7g} KB "
              f"{result.events:>7} {statistics.median(cost_ms):>9.1f} "
              f"{statistics.median(sim_ms):>12.1f} {result.latency_s * 1e6:>9.1f} "
              f"{result.throughput:>9.0f}")


if __name__ == "__main__":
    main()
