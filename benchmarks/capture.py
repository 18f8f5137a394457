"""Capture speed and memory: cold capture, in-process cache hit and disk cache hit.

Each row runs in a fresh subprocess so peak RSS (MB) is that capture's own.
Usage: python benchmarks/capture.py [--repeats 3]
Targets (issue: foundation): llama2-7b decode <= 5 s and <= 2 GB; llama2-13b decode <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
from workloads.build import build_workload, clear_memory_cache
model, phase, mode = sys.argv[1], sys.argv[2], sys.argv[3]
kw = dict(phase=phase, context=512, seq=512)
if mode != "cold":
    build_workload(model, **kw)            # populate the caches
if mode == "disk":
    clear_memory_cache()
t = time.perf_counter()
w = build_workload(model, use_cache=(mode != "cold"), **kw)
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "ops": len(w), "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(model: str, phase: str, mode: str, cache_dir: str) -> dict:
    env = {"DSE_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "ignore"}
    import os
    out = subprocess.run([sys.executable, "-c", CHILD, model, phase, mode], capture_output=True,
                         text=True, env={**os.environ, **env})
    if out.returncode:
        raise SystemExit(f"{model} {phase} {mode} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases = [("gpt2", "decode"), ("llama2-7b", "decode"), ("llama2-7b", "prefill"),
             ("llama2-13b", "decode")]
    print(f"{'model':<12} {'phase':<8} {'mode':<6} {'ops':>5} {'median s':>9} {'peak MB':>8}")
    for model, phase in cases:
        for mode in ("cold", "memory", "disk"):
            rows = []
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory() as d:
                    rows.append(run(model, phase, mode, d))
            print(f"{model:<12} {phase:<8} {mode:<6} {rows[0]['ops']:>5} "
                  f"{statistics.median(r['s'] for r in rows):>9.4f} "
                  f"{max(r['rss_mb'] for r in rows):>8.0f}")


if __name__ == "__main__":
    main()
