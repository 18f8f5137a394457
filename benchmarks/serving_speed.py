"""Speed of a serving simulation: ShareGPT-like requests on llama2-7b on one H200 (gpu:h200),
continuous batching, Poisson arrivals at 20 requests/s, for 1k, 2k, 5k and 10k requests.

Each row times ``api.serve`` end to end in a fresh cost-model cache (the iteration cost model's
fit on the design, the trace, the request-level loop, the metrics), with the capture of the
batch-1 decode step done once before (it is cached on disk for every later run). The fit is
also shown apart. Targets (issue 17): 10,000 requests in <= 30 s on 2 cores, and the loop's
time growing at most linearly in the number of requests (``per_1k_s`` flat or falling).

Usage: python benchmarks/serving_speed.py [--counts 1000,2000,5000,10000] [--rate 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1000,2000,5000,10000")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--accelerator", default="gpu:h200")
    ap.add_argument("--scheduler", default="continuous")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dse import api

    api.workload(args.model, phase="decode", batch=1, context=1)      # capture, cached
    rows = []
    for n in (int(x) for x in args.counts.split(",")):
        api._COST_MODELS.clear()
        t = time.perf_counter()
        r = api.serve(args.model, accelerator=args.accelerator, trace="sharegpt",
                      rate=args.rate, requests=n, scheduler=args.scheduler)
        total = time.perf_counter() - t
        rows.append({"requests": n, "total_s": total, "loop_s": r.sim_wall_s,
                     "fit_s": total - r.sim_wall_s, "per_1k_s": r.sim_wall_s / n * 1000,
                     "iterations": r.iterations, "simulated_span_s": r.span_s,
                     "ttft_p99_s": r.ttft_s["p99"], "tpot_p99_s": r.tpot_s["p99"],
                     "throughput_tok_s": r.throughput_tok_s})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.model} on {args.accelerator}, sharegpt at {args.rate:g} req/s, "
          f"{args.scheduler} batching")
    print(f"{'requests':>8} {'total s':>8} {'fit s':>7} {'loop s':>7} {'loop/1k':>8} "
          f"{'iters':>8} {'span s':>8} {'TTFT p99':>9} {'TPOT p99':>9} {'tok/s':>8}")
    for x in rows:
        print(f"{x['requests']:>8} {x['total_s']:>8.2f} {x['fit_s']:>7.2f} {x['loop_s']:>7.2f} "
              f"{x['per_1k_s']:>8.3f} {x['iterations']:>8} {x['simulated_span_s']:>8.1f} "
              f"{x['ttft_p99_s'] * 1e3:>7.1f}ms {x['tpot_p99_s'] * 1e3:>7.2f}ms "
              f"{x['throughput_tok_s']:>8.0f}")
    last = rows[-1]
    print(f"{last['requests']} requests: {last['total_s']:.1f} s (target <= 30 s); loop time "
          f"per 1k requests {rows[0]['per_1k_s']:.3f} s at {rows[0]['requests']} -> "
          f"{last['per_1k_s']:.3f} s at {last['requests']} (linear or better: "
          f"{'yes' if last['per_1k_s'] <= 1.2 * rows[0]['per_1k_s'] else 'NO'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
