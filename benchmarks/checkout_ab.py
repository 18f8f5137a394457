"""The same measurement in two checkouts, alternated A B A B, medians per checkout: how much a
change slowed the NPU's fast path and event simulation (``benchmarks/run.py`` section 1's rows)
and the co-search (section 2's CPU time per trial); with ``--what reshape``, re-shaping a new
architecture of a captured family (``benchmarks/population.py`` section 1's new architectures).

    git worktree add /tmp/before REV
    python benchmarks/checkout_ab.py /tmp/before . --rounds 5
    python benchmarks/checkout_ab.py /tmp/before . --rounds 3 --what reshape

Each run is a fresh interpreter in that checkout (its own ``PYTHONPATH`` and capture cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: Runs inside a checkout: the fast path over 64 NPU designs and one event simulation, per
#: workload, medians of 5 (ms).
_CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, '.')
from dse import api
from simulators.engine import simulate
from simulators.fast import evaluate_many
out = {}
for name, kw in {"gpt2 decode": dict(phase="decode", batch=1, context=512),
                 "llama2-7b prefill": dict(phase="prefill", batch=1, seq=512)}.items():
    w = api.workload(name.split()[0], **kw)
    designs = [api.accelerator("npu", {"rows": r, "cols": c}) for r in (32, 64, 128, 256)
               for c in (32, 64, 128, 256)] * 4
    evaluate_many(w, designs)
    fast = []
    for _ in range(5):
        t = time.perf_counter(); evaluate_many(w, designs)
        fast.append((time.perf_counter() - t) / len(designs) * 1e3)
    d = api.accelerator("npu")
    simulate(w, d)
    sim = []
    for _ in range(5):
        t = time.perf_counter(); simulate(w, d); sim.append((time.perf_counter() - t) * 1e3)
    out[name + ": fast path ms/design"] = statistics.median(fast)
    out[name + ": simulate ms"] = statistics.median(sim)
print(json.dumps(out))
"""


#: Runs inside a checkout: per family, re-shaping each of population.py's new architectures
#: (templates made first), median and mean of 50 calls each (ms), the collector left on.
_RESHAPE_CHILD = r"""
import json, statistics, sys, time, warnings
sys.path.insert(0, '.')
warnings.simplefilter('ignore')
from benchmarks.population import FAMILIES, NEW_ARCHS
from workloads import build, reshape
out = {}
for model, phase, sizes in FAMILIES:
    med, mean = [], []
    for arch in NEW_ARCHS[model]:
        if model == 'gpt2':
            arch = {k: v for k, v in arch.items() if k != 'n_kv_head'}
        args = build.resolve(model, phase, 1, sizes.get('seq'), sizes.get('context'), 'bf16', arch)
        reshape.template_for(args)
        times = []
        for _ in range(50):
            t = time.perf_counter(); w = reshape.reshaped(args, make=False)
            times.append(time.perf_counter() - t)
        med.append(statistics.median(times) * 1e3)
        mean.append(statistics.mean(times) * 1e3)
    ops = len(w)
    out[f"{model} {phase} ({ops} ops): re-shape ms, median"] = statistics.median(med)
    out[f"{model} {phase} ({ops} ops): re-shape ms, mean"] = statistics.median(mean)
print(json.dumps(out))
"""


def _run(tree: Path, argv: list[str]) -> dict | None:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONWARNINGS="ignore",
               DSE_CACHE_DIR=f"/tmp/dse-ab-cache-{abs(hash(str(tree)))}")
    p = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True,
                       text=True)
    if p.returncode:
        print(f"{tree}: failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--study-trials", type=int, default=300)
    ap.add_argument("--what", choices=["fast", "reshape"], default="fast",
                    help="fast: fast path, simulation and study (default); reshape: re-shaping")
    args = ap.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    got: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.rounds):
        for k, tree in trees.items():
            if args.what == "reshape":
                row = _run(tree, ["-c", _RESHAPE_CHILD])
                if row:
                    got[k].append(row)
                continue
            row = _run(tree, ["-c", _CHILD])
            study = _run(tree, ["benchmarks/study_throughput.py", "--trials",
                                str(args.study_trials), "--workers", "1"])
            if row and study:
                row["study: CPU ms/trial"] = study["cpu_ms_per_trial"]
                got[k].append(row)
    print(f"| measurement (median of {args.rounds}) | before | after | after / before |")
    print("|---|---:|---:|---:|")
    for m in got["after"][0]:
        b = statistics.median(r[m] for r in got["before"])
        a = statistics.median(r[m] for r in got["after"])
        print(f"| {m} | {b:.3f} | {a:.3f} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
