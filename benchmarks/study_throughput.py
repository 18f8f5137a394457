"""Study throughput: trials per second of ``studies/codesign_gpt2_npu.yaml`` with the graph
captures cached, for 1 and 2 worker processes.

Every architecture of the study's space is captured first (the warm-up, not timed), then each
run starts a fresh study in a temporary directory and times the session (from the first trial
to the last, workers' start-up included), as ``dse study run`` reports it. The CPU seconds per
trial of the 1-worker run are printed too: on a machine shared with other jobs the wall-clock
rate depends on the load, the CPU cost does not. The 1-minute load average is printed with
each row.

Usage: python benchmarks/study_throughput.py [--trials 300] [--workers 1 2]
Target (issue: study): >= 20 trials/s on 2 cores with one worker.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STUDY = ROOT / "studies" / "codesign_gpt2_npu.yaml"


def warm_up(study) -> int:
    """Capture every architecture of the study's space (cached on disk for the workers)."""
    from dse import api
    arch_dims = [d for d in study.space.dimensions if d.name.startswith("arch.")]
    w = study.workloads[0]
    n = 0
    for values in itertools.product(*(d.choices for d in arch_dims)):
        arch = {d.name.split(".", 1)[1]: v for d, v in zip(arch_dims, values)}
        api.workload(w.model, phase=w.phase, batch=w.batch, seq=w.seq, context=w.context,
                     dtype=w.dtype, arch=arch)
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()

    from dse.study.driver import run_study
    from dse.study.loader import load_study

    study = load_study(STUDY)
    t = time.perf_counter()
    archs = warm_up(study)
    print(json.dumps({"warm_up": {"architectures": archs, "s": round(time.perf_counter() - t, 2)}}))
    for workers in args.workers:
        with tempfile.TemporaryDirectory() as tmp:
            cpu = time.process_time()
            load = os.getloadavg()[0]
            r = run_study(study, trials=args.trials, workers=workers, out=Path(tmp) / "out",
                          show_progress=False, write_report=False)
            cpu = time.process_time() - cpu
            row = {"workers": workers, "trials": r.session_trials,
                   "session_s": round(r.session_s, 2), "trials_per_s": round(r.trials_per_s, 1),
                   "load_avg_1min_before": round(load, 2)}
            if workers == 1:
                row["cpu_ms_per_trial"] = round(1000 * cpu / max(r.session_trials, 1), 1)
            print(json.dumps(row))


if __name__ == "__main__":
    main()
