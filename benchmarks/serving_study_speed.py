"""A shipped serving study run two ways back to back: a baseline checkout (default: ``main``,
today's code, extracted with ``git archive``) and this checkout, each in a fresh interpreter
with its own ``DSE_CACHE_DIR`` (a copy of your capture cache, so captures are read from disk,
and no fitted iteration cost model: every design's model is fitted in the run, as in a fresh
study). Prints, per run: wall and CPU time (the child's user + system), trials, the front's
devices (a design's template and the hardware it searched), and whether each front point is an
event-simulation trial confirming a screened one (``fidelity: multi``), then the ratio of the
two runs' times measured in the same invocation, with the load average.

    python benchmarks/serving_study_speed.py                       # main vs this checkout
    python benchmarks/serving_study_speed.py --before HEAD~3 --rounds 2 --json

Issue 33 item 6 target: ``serve_llama_slo`` at its default trials <= 1/3 of today's time, the
front's devices the same and confirmed by the event simulation.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _capture_cache() -> Path:
    """The capture cache this machine has (workloads/ under $DSE_CACHE_DIR or the default)."""
    sys.path.insert(0, str(ROOT))
    from workloads import build
    return build.cache_dir()


def _checkout(ref: str, where: Path) -> Path:
    """``ref`` of this repository extracted into ``where`` (no git worktree made)."""
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def _front_devices(out: Path) -> list[dict]:
    """Each Pareto row: trial, design, the searched hardware, fidelity, what it confirms."""
    rows = list(csv.DictReader(open(out / "pareto.csv", newline="")))
    front = []
    for r in rows:
        design = r.get("design", "")
        hw = {k.split(".", 2)[2]: r[k] for k in ("hw.npu.arrays", "hw.npu.clock_hz",
                                                  "hw.npu.dram", "hw.npu.dram_devices")
              if design == "npu" and r.get(k)}
        arch = {k.split(".", 1)[1]: r[k] for k in ("arch.n_layer", "arch.d_model") if r.get(k)}
        front.append({"trial": int(r["number"]), "design": design, "hw": hw, "arch": arch,
                      "fidelity": r.get("fidelity"), "confirms": r.get("confirms") or None,
                      "cost_usd": float(r["cost_usd"]) if r.get("cost_usd") else None,
                      "ttft_p99_s": float(r["ttft_p99_s"]) if r.get("ttft_p99_s") else None,
                      "tpot_p99_s": float(r["tpot_p99_s"]) if r.get("tpot_p99_s") else None})
    return front


def run_once(checkout: Path, study: str, captures: Path, label: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir(mode=0o700)
        if captures.is_dir():
            shutil.copytree(captures, cache / "workloads")
        out = Path(tmp) / "out"
        env = {**os.environ, "DSE_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout)}
        cmd = [sys.executable, "-m", "dse", "study", "run", study, "-o", str(out),
               "--no-progress", "--json"]
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode:
            raise SystemExit(f"{label}: study failed: {p.stderr.strip().splitlines()[-3:]}")
        summary = json.loads(p.stdout[p.stdout.index("{"):])
        front = _front_devices(out)
    return {"run": label, "wall_s": wall,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "trials": sum(summary["states"].values()), "front": front,
            "screening": summary.get("screening"), "load_before": load,
            "load_after": os.getloadavg()[0]}


def device_of(point: dict) -> str:
    hw = point["hw"]
    if not hw:
        return point["design"]
    return (f"{point['design']} {hw.get('arrays')} arrays {float(hw.get('clock_hz', 0)) / 1e9:g}"
            f" GHz {hw.get('dram_devices')}x{hw.get('dram')}")


def confirmed(point: dict) -> bool:
    """An event-simulation trial that re-ran a screened design (``fidelity: multi``)."""
    return point["fidelity"] == "event" and point["confirms"] is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="studies/serve_llama_slo.yaml")
    ap.add_argument("--before", default="main", help="git ref of the baseline")
    ap.add_argument("--rounds", type=int, default=1, help="baseline, this checkout; repeated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    captures = _capture_cache()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = _checkout(args.before, Path(tmp) / "before")
        for _ in range(args.rounds):
            rows.append(run_once(base, args.study, captures, f"before ({args.before})"))
            rows.append(run_once(ROOT, args.study, captures, "this checkout"))
    result = {"study": args.study, "uptime": subprocess.run(["uptime"], capture_output=True,
                                                             text=True).stdout.strip(),
              "rows": rows}
    by = {}
    for r in rows:
        by.setdefault(r["run"], []).append(r)
    (b_label, b), (a_label, a) = list(by.items())
    result["cpu_ratio"] = statistics.median(x["cpu_s"] for x in a) / statistics.median(
        x["cpu_s"] for x in b)
    result["wall_ratio"] = statistics.median(x["wall_s"] for x in a) / statistics.median(
        x["wall_s"] for x in b)
    devices = [sorted({device_of(p) for p in r["front"]}) for r in rows]
    result["same_front_devices"] = all(d == devices[0] for d in devices)
    result["all_confirmed"] = all(confirmed(p) for r in rows for p in r["front"])
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{args.study}: fresh cost-model cache per run, captures cached")
    print(f"{'run':<18} {'wall s':>7} {'CPU s':>7} {'trials':>6} {'load':>9}  front "
          "(trial: device, arch, cost US$, event-confirmed)")
    for r in rows:
        pts = "; ".join(
            f"{p['trial']}: {device_of(p)}, {p['arch'].get('n_layer')}x"
            f"{p['arch'].get('d_model')}, {p['cost_usd']:.0f}, "
            f"{'yes (of ' + str(p['confirms']) + ')' if confirmed(p) else 'NO'}"
            for p in r["front"])
        print(f"{r['run']:<18} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['trials']:>6} "
              f"{r['load_before']:>4.1f}-{r['load_after']:<4.1f}  {pts}")
    print(f"this checkout / before: CPU {result['cpu_ratio']:.3f}, wall "
          f"{result['wall_ratio']:.3f} (medians); same front devices: "
          f"{result['same_front_devices']}; every front point event-confirmed: "
          f"{result['all_confirmed']}")
    print(result["uptime"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
