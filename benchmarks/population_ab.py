"""Two checkouts against each other on the CPU rows of issue 33, in fresh processes alternating
A, B, A, B, ... (the load of a shared machine moves both alike): the 10,000-trial GPT-2 x NPU
co-search of ``benchmarks/population.py`` section 4 (cold capture cache, as there; run_study's
wall and CPU user+sys) or ``evaluate_batch`` on 4,096 points (designs x architectures per CPU
second, best of ``--calls`` calls, two by default). Prints one JSON line per run and the
medians.

Usage: python benchmarks/population_ab.py A_CHECKOUT B_CHECKOUT [--what cosearch|batch]
       [--pairs 4] [--trials 10000] [--warm] [--calls 2]

``--warm``: each co-search's cache directory first holds what one earlier co-search of the study
(200 trials, another process) left there (the family's re-shape template where the checkout
stores one, workloads/template_cache.py): "a family already captured once on this machine".
The warm-up is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

COSEARCH = r'''
import json, sys, time, warnings
warnings.simplefilter("ignore")
from benchmarks.population import STUDY
from dse.study.driver import run_study
from dse.study.loader import load_study_text
s = load_study_text(STUDY.format(name="pop", fidelity="fast",
                                 sampler="{name: nsga2-vectorized, population_size: 200}"))
t, c = time.perf_counter(), time.process_time()
r = run_study(s, trials=int(sys.argv[1]), out=sys.argv[2], show_progress=False,
              write_report=False)
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                  "trials": r.session_trials, "pareto": len(r.pareto)}))
'''
BATCH = r'''
import json, sys, time, warnings, numpy as np
warnings.simplefilter("ignore")
from benchmarks.population import STUDY
from dse.study.evaluate import Evaluator
from dse.study.loader import load_study_text
from dse.study.population import Encoding
s = load_study_text(STUDY.format(name="bench_pop", fidelity="fast",
                                 sampler="{name: nsga2-vectorized, population_size: 100}"))
enc = Encoding(s.space.dimensions)
pts = [s.space.point(v) for v in enc.decode(np.random.default_rng(0).random((4096, len(enc.dims))))]
Evaluator(s, fidelity="fast").evaluate_batch(pts[:10])   # the family's template made
cpu = []
for _ in range(int(sys.argv[1])):
    ev = Evaluator(s, fidelity="fast")
    c = time.process_time()
    ev.evaluate_batch(pts)
    cpu.append(time.process_time() - c)
print(json.dumps({"per_cpu_s": len(pts) / min(cpu), "cpu_s": cpu}))
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--what", choices=("cosearch", "batch"), default="cosearch")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--calls", type=int, default=2,
                    help="evaluate_batch calls per process (--what batch); the best is kept")
    ap.add_argument("--warm", action="store_true",
                    help="a 200-trial co-search in the same cache directory first (untimed)")
    args = ap.parse_args(argv)
    roots = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    runs: dict[str, list[dict]] = {k: [] for k in roots}
    for _ in range(args.pairs):
        for name, root in roots.items():
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "PYTHONPATH": root, "DSE_CACHE_DIR": d,
                       "PYTHONWARNINGS": "ignore"}
                if args.warm:
                    subprocess.run([sys.executable, "-c", COSEARCH, "200", d + "/warm"], cwd=root,
                                   capture_output=True, text=True, env=env, check=True)
                cmd = ([sys.executable, "-c", COSEARCH, str(args.trials), d + "/out"]
                       if args.what == "cosearch"
                       else [sys.executable, "-c", BATCH, str(args.calls)])
                load = os.getloadavg()[0]
                p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
            if p.returncode:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            r = {"load": round(load, 2), **json.loads(p.stdout.strip().splitlines()[-1])}
            runs[name].append(r)
            print(name, json.dumps(r), flush=True)
    key = "cpu_s" if args.what == "cosearch" else "per_cpu_s"
    for name, rs in runs.items():
        print(f"{name} ({roots[name]}): median {key} "
              f"{statistics.median(r[key] for r in rs):.2f}")
    ratios = [b[key] / a[key] for a, b in zip(runs["A"], runs["B"])]
    print(f"B / A {'CPU' if args.what == 'cosearch' else 'per CPU second'} per pair: "
          f"{min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
