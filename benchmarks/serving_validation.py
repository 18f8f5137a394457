"""The serving layer's approximations against direct simulation, printed as tables (the numbers
in docs/validation.md, "Serving"):

1. the iteration cost model (``g(T)`` interpolated + attention and LM head costed per
   iteration) against simulating each whole iteration graph, on random iterations of the shapes
   serving makes (0-255 decodes with KV lengths 2-2000, at most 100k KV tokens in all, 0-4 prompt chunks with or without
   cached tokens): median and largest relative error of latency and energy;
2. generation with interpolated decode steps against simulating every step (TTFT exact):
   largest per-step and end-to-end error, and how many steps were simulated;
3. the serving invariants on llama2-7b: at low load TTFT and TPOT against one prefill and one
   decode step (api.generate at batch 1); Little's law at 20 requests/s.

Usage: python benchmarks/serving_validation.py [--iterations 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DESIGNS = (("gpu:h200", None, None), ("gpu:h100", None, None),
           ("npu:datacenter-bf16", {"arrays": 16, "clock_hz": 1.4e9, "dram": "hbm3",
                                    "dram_devices": 8}, None),
           ("gpu:h200", None, {"system": "hgx-h200", "tp": 2}))


def cost_model_rows(n: int) -> list[dict]:
    from dse import api
    from simulators.iteration_cost import IterationCostModel
    from workloads.iteration import iteration_workload
    base = api.workload("llama2-7b", phase="decode", batch=1, context=1)
    rows = []
    for spec, hw, system in DESIGNS:
        target = api._target(spec, hw, system and system["system"], None,
                             {"tp": system["tp"]} if system else None, None, "fast")
        model = IterationCostModel(base, target, 2048)
        rng = random.Random(0)
        lat_err, e_err = [], []
        for _ in range(n if not system else max(4, n // 4)):
            d = rng.choice([0, 1, 8, 33, 100, 255])
            kv = [rng.randint(2, min(2000, 100_000 // max(d, 1))) for _ in range(d)]
            chunks = [(rng.choice([0, 0, 512]), rng.randint(1, 512))
                      for _ in range(rng.choice([0, 1, 2, 4]))]
            if not kv and not chunks:
                chunks = [(0, 100)]
            lat, energy = target.run(iteration_workload(base, kv, chunks))
            ml, md = model.cost(len(kv), sum(kv), chunks)
            lat_err.append(abs(ml / lat - 1))
            e_err.append(abs((md + model.static_w * ml) / energy - 1))
        rows.append({"design": spec + (f" tp={system['tp']} on {system['system']}" if system
                                       else " (npu: 16 arrays, hbm3 x8)" if hw else ""),
                     "iterations": len(lat_err), "grid_points": len(model.grid),
                     "latency_median": statistics.median(lat_err), "latency_max": max(lat_err),
                     "energy_median": statistics.median(e_err), "energy_max": max(e_err)})
    return rows


def generation_rows() -> list[dict]:
    import numpy as np
    from dse import api
    rows = []
    for acc, batch, i, o in (("gpu:h200", 1, 2048, 128), ("gpu:h200", 16, 512, 256),
                             ("gpu:h200", 64, 128, 512), ("npu:datacenter-bf16", 8, 1024, 128)):
        hw = {"dram": "hbm3", "dram_devices": 4} if acc.startswith("npu") else None
        g = api.generate("llama2-7b", i, o, batch, accelerator=acc, hw=hw)
        e = api.generate("llama2-7b", i, o, batch, accelerator=acc, hw=hw, exact=True)
        s, x = np.array(g.step_latency_s), np.array(e.step_latency_s)
        rows.append({"design": acc, "batch": batch, "input": i, "output": o,
                     "simulated": len(g.simulated_steps), "steps": o - 1,
                     "step_max_err": float(np.max(np.abs(s / x - 1))),
                     "e2e_err": abs(g.e2e_s / e.e2e_s - 1),
                     "energy_err": abs(g.energy_j / e.energy_j - 1),
                     "ttft_s": g.ttft_s, "tpot_s": g.tpot_s})
    return rows


def invariant_rows() -> list[dict]:
    from dse import api
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sparse.csv"
        trace.write_text("arrival_s,input_len,output_len\n"
                         + "".join(f"{20.0 * k},512,128\n" for k in range(5)))
        r = api.serve("llama2-7b", accelerator="gpu:h200", trace=str(trace))
    g = api.generate("llama2-7b", 512, 128, 1, accelerator="gpu:h200")
    s = api.serve("llama2-7b", accelerator="gpu:h200", trace="sharegpt", rate=20,
                  requests=2000)
    rate = s.completed / s.span_s
    return [{"check": "low load: TTFT p50 / one prefill", "ratio": r.ttft_s["p50"] / g.ttft_s},
            {"check": "low load: TPOT p50 / one decode step (mean)",
             "ratio": r.tpot_s["p50"] / g.tpot_s},
            {"check": "Little's law at 20 req/s: mean in system / (rate x mean E2E)",
             "ratio": s.mean_in_system / (rate * s.e2e_s["mean"])}]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = {"cost_model": cost_model_rows(args.iterations), "generation": generation_rows(),
           "invariants": invariant_rows()}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print("1. iteration cost model vs direct simulation of whole iterations (llama2-7b)")
    print(f"{'design':<40} {'iters':>5} {'grid':>5} {'lat med':>8} {'lat max':>8} "
          f"{'E med':>8} {'E max':>8}")
    for r in out["cost_model"]:
        print(f"{r['design']:<40} {r['iterations']:>5} {r['grid_points']:>5} "
              f"{100 * r['latency_median']:>7.3f}% {100 * r['latency_max']:>7.3f}% "
              f"{100 * r['energy_median']:>7.3f}% {100 * r['energy_max']:>7.3f}%")
    print("\n2. generation: interpolated decode steps vs every step simulated (llama2-7b)")
    print(f"{'design':<22} {'batch':>5} {'in':>5} {'out':>5} {'simulated':>10} {'step max':>9} "
          f"{'E2E':>8} {'energy':>8} {'TTFT':>9} {'TPOT':>9}")
    for r in out["generation"]:
        print(f"{r['design']:<22} {r['batch']:>5} {r['input']:>5} {r['output']:>5} "
              f"{r['simulated']:>4} of {r['steps']:<3} {100 * r['step_max_err']:>8.3f}% "
              f"{100 * r['e2e_err']:>7.3f}% {100 * r['energy_err']:>7.3f}% "
              f"{r['ttft_s'] * 1e3:>7.2f}ms {r['tpot_s'] * 1e3:>7.3f}ms")
    print("\n3. invariants (llama2-7b on gpu:h200)")
    for r in out["invariants"]:
        print(f"{r['check']:<64} {r['ratio']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
