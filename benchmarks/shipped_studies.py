"""Every shipped study answers: each runs (its own seed and sampler) until its first feasible
design, at most its default trial count, and the table says after how many trials.

    python benchmarks/shipped_studies.py                  # every study in studies/
    python benchmarks/shipped_studies.py --only npu_resnet50,serve_llama_slo

A study runs in chunks of 4, 16, 48 and then its default count of trials in total (each
chunk resumes the last in the same output directory), stopping at the first chunk with a
feasible design: the count reported is that chunk's, a bound on the trials the study needs.
``tests/test_study_shipped.py`` runs the same check for every study.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STUDIES = ROOT / "studies"
#: Trials in total after each chunk (then the study's default).
CHUNKS = (4, 16, 48)


def names() -> list[str]:
    return sorted(p.stem for p in STUDIES.glob("*.yaml"))


def until_feasible(name: str, out: Path) -> dict:
    """Run study ``name`` in :data:`CHUNKS` until a feasible design appears or its default
    trial count is spent; what happened."""
    from dse.study.driver import run_study
    from dse.study.loader import load_study
    s = load_study(STUDIES / f"{name}.yaml")
    default = s.spec.trials
    started = time.perf_counter()
    r = None
    for k in (*CHUNKS, default):
        n = min(k, default)
        r = run_study(s, trials=n, out=out, show_progress=False, write_report=False)
        if r.outcomes["feasible"] or n == default:
            break
    return {"study": name, "default_trials": default, "trials": n,
            "evaluated": r.outcomes["evaluated"], "feasible": r.outcomes["feasible"],
            "wall_s": round(time.perf_counter() - started, 1), "unmet": r.unmet}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated study names")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'study':24} {'default':>7} {'trials':>6} {'feasible':>8} {'wall s':>7}")
    for name in (args.only.split(",") if args.only else names()):
        with tempfile.TemporaryDirectory() as tmp:
            row = until_feasible(name, Path(tmp) / name)
        rows.append(row)
        print(f"{name:24} {row['default_trials']:7d} {row['trials']:6d} {row['feasible']:8d} "
              f"{row['wall_s']:7.1f}" + (f"  {'; '.join(row['unmet'])}" if row["unmet"] else ""),
              flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["feasible"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
