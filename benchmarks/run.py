"""One benchmark command: every row measured in this run, medians over repeats, peak memory.

Sections:
  1. simulation speed of every template on gpt2 decode, llama2-7b prefill (512), resnet50
     (batch 1): wall time, ops/s, simulated events/s, and the fast screening path's speed-up;
  2. co-search throughput of studies/codesign_gpt2_npu.yaml with 1 and 2 workers;
  3. cost growth: wall time against op count (gpt2 with 6..96 layers) and against mesh size
     (wafer 100^2..1000^2), with the fitted log-log exponent;
  4. side by side with SCALE-Sim 3.0.0 and ZigZag on ResNet-18 layers and GEMMs, 32x32 array,
     each dataflow: wall-time ratio and cycle / latency / energy deviation (the reference tools
     run in their own virtual environments, created by their scripts);
  5. co-search speed (benchmarks/population.py): capture vs re-shape per new architecture, a new
     GEMM through api.simulate vs SCALE-Sim, population evaluation rates, and a 10,000-trial
     GPT-2 x NPU co-search with nsga2-vectorized against today's path, and screening honesty
     (the shipped studies at fidelity multi: screened Pareto designs confirmed or dropped by
     the event simulation; ~5 min).

Each row runs in a fresh subprocess, so its peak RSS (MB) is its own; captures are warmed
first (the on-disk cache), so rows time simulation, not torch.export.

Usage: python benchmarks/run.py [--repeats 5] [--sections 1 2 3 4 5] [--reference-layers NAME... | all]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOADS = {
    "gpt2 decode": dict(model="gpt2", phase="decode", batch=1, context=512),
    "llama2-7b prefill": dict(model="llama2-7b", phase="prefill", batch=1, seq=512),
    "resnet50": dict(model="resnet50", batch=1),
}
#: Designs per fast-path call: its per-design cost is amortised over a batch, as a search uses it.
FAST_DESIGNS = 64
TEMPLATES = ["npu", "gpu:h200", "pim", "npu_pim", "neural_graphics", "wafer"]


# ----------------------------------------------------------------------------- child rows
def _median_s(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, s."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _child_simulate(spec: dict) -> dict:
    """Median simulation wall time of one (template, workload) with a cached capture."""
    from dse import api
    from dse.errors import DSEError
    from simulators.engine import simulate
    from simulators.fast import evaluate_many
    args = dict(spec["workload"])
    model = args.pop("model")
    arch = args.pop("arch", None)
    w = api.workload(model, arch=arch, **args)
    try:
        design = api.accelerator(spec["template"], spec.get("hw"))
        r = simulate(w, design)  # warm
    except DSEError as exc:
        return {"skip": str(exc)}
    designs = [design] * FAST_DESIGNS  # the fast path's cost per design, amortised
    evaluate_many(w, designs)  # warm (graph structure cache), as the simulation is warmed
    fast_s = _median_s(lambda: evaluate_many(w, designs), spec["repeats"]) / FAST_DESIGNS
    return {"s": _median_s(lambda: simulate(w, design), spec["repeats"]), "ops": len(r.ops),
            "events": r.events, "fast_s": fast_s, "latency_s": r.latency_s}


def _child_growth_layers(spec: dict) -> dict:
    from dse import api
    from simulators.engine import simulate
    w = api.workload("gpt2", phase="decode", context=512, arch={"n_layer": spec["layers"]})
    design = api.accelerator("npu")
    simulate(w, design)
    return {"s": _median_s(lambda: simulate(w, design), spec["repeats"]), "ops": len(w)}


def _child_growth_mesh(spec: dict) -> dict:
    from benchmarks.wafer_scaling import design as wafer_design
    from dse import api
    from simulators.engine import simulate
    n = spec["side"]
    w = api.workload("llama3-8b", phase="decode", context=4096, dtype="fp16")
    design = wafer_design(n, w.weight_footprint_bytes)
    simulate(w, design)
    return {"s": _median_s(lambda: simulate(w, design), spec["repeats"]), "cores": n * n}


CHILDREN = {"simulate": _child_simulate, "layers": _child_growth_layers,
            "mesh": _child_growth_mesh}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_row(kind: str, spec: dict) -> dict:
    """Run one row in a fresh interpreter; add its peak RSS in MB."""
    code = ("import json, resource, sys; sys.path.insert(0, %r); from benchmarks.run import CHILDREN; "
            "r = CHILDREN[%r](json.loads(sys.argv[1])); "
            "r['rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024; "
            "print(json.dumps(r))" % (str(ROOT), kind))
    p = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True,
                       text=True, env=_env(), cwd=ROOT)
    if p.returncode:
        return {"skip": (p.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def fitted_exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


# ----------------------------------------------------------------------------- sections
def section_simulation(repeats: int) -> None:
    print("\n## 1. Simulation speed (capture cached; median of %d)" % repeats)
    print("| template | workload | ops | wall ms | ops/s | events/s | fast path ms/design | fast speed-up | peak MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for tmpl in TEMPLATES:
        for wname, wl in WORKLOADS.items():
            r = run_row("simulate", {"template": tmpl, "workload": wl, "repeats": repeats})
            if "skip" in r:
                print(f"| {tmpl} | {wname} | — | n/a: {r['skip']} | | | | | |")
                continue
            print(f"| {tmpl} | {wname} | {r['ops']} | {r['s'] * 1e3:.2f} | {r['ops'] / r['s']:,.0f} | "
                  f"{r['events'] / r['s']:,.0f} | {r['fast_s'] * 1e3:.3f} | {r['s'] / r['fast_s']:.0f}x | "
                  f"{r['rss_mb']:.0f} |")


def section_study(trials: int) -> None:
    print(f"\n## 2. Co-search throughput (studies/codesign_gpt2_npu.yaml, {trials} trials, captures cached)")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "study_throughput.py"),
                        "--trials", str(trials), "--workers", "1", "2"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT)
    print(p.stdout if p.returncode == 0 else f"n/a ({(p.stderr.strip().splitlines() or ['failed'])[-1]})")


def _growth_table(kind: str, sizes, spec_of, label_of, size_key: str, header: str,
                  note: str, repeats: int) -> None:
    """One cost-growth table: a row per size, then the fitted log-log exponent."""
    print(f"\n| {header} | {size_key} | wall ms | peak MB |")
    print("|---|---:|---:|---:|")
    xs, ys = [], []
    for size in sizes:
        r = run_row(kind, {**spec_of(size), "repeats": repeats})
        if "skip" in r:
            print(f"| {label_of(size)} | n/a: {r['skip']} | | |")
            continue
        xs.append(r[size_key])
        ys.append(r["s"])
        print(f"| {label_of(size)} | {r[size_key]:,} | {r['s'] * 1e3:.2f} | {r['rss_mb']:.0f} |")
    if len(xs) > 1:
        print(f"\nfitted exponent of wall time vs {size_key}: {fitted_exponent(xs, ys):.3f} ({note})")


def section_growth(repeats: int) -> None:
    print("\n## 3. Cost growth")
    _growth_table("layers", (6, 12, 24, 48, 96), lambda n: {"layers": n}, str, "ops",
                  "gpt2 decode layers", "<= 1 is at most linear", repeats)
    _growth_table("mesh", (100, 250, 500, 750, 1000), lambda n: {"side": n},
                  lambda n: f"{n}x{n}", "cores", "wafer region (llama3-8b decode)",
                  "~0: does not grow with cores", repeats)


#: Reference layers run by default: small ones, so SCALE-Sim finishes in minutes (it takes
#: 10-110 s per large ResNet-18 layer); ``--reference-layers all`` runs the whole list.
DEFAULT_REFERENCE_LAYERS = ["layer2.0.downsample", "layer3.0.downsample", "fc", "gemm_m64_k64_n64"]


def section_references(layers: list[str]) -> None:
    print(f"\n## 4. Side by side with SCALE-Sim 3.0.0 and ZigZag ({', '.join(layers)}; each dataflow)")
    for script, label in (("scalesim_reference.py", "SCALE-Sim"), ("zigzag_compare.py", "ZigZag")):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "ref.json"
            mod = __import__(f"benchmarks.{script[:-3]}", fromlist=["all_layers"])
            names = [layer["name"] for layer in mod.all_layers()
                     if layers == ["all"] or layer["name"] in layers]
            t = time.perf_counter()
            p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--out", str(out),
                                "--only", *names], capture_output=True, text=True, env=_env(), cwd=ROOT)
            dt = time.perf_counter() - t
            if p.returncode or not out.exists():
                print(f"{label}: n/a ({(p.stderr.strip().splitlines() or ['failed'])[-1][:160]})")
                continue
            print(f"\n### {label} ({dt:.0f} s for the run)")
            p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--out", str(out), "--table"],
                               capture_output=True, text=True, env=_env(), cwd=ROOT)
            print(p.stdout)


def section_population(trials: int) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "population.py"), "--trials",
                        str(trials)], capture_output=True, text=True, env=_env(), cwd=ROOT)
    print("\n## 5. Co-search speed (benchmarks/population.py)")
    print(p.stdout.split("\n", 1)[-1] if p.returncode == 0 else
          f"n/a ({(p.stderr.strip().splitlines() or ['failed'])[-1][:160]})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sections", nargs="+", type=int, default=[1, 2, 3, 4, 5],
                    choices=[1, 2, 3, 4, 5])
    ap.add_argument("--population-trials", type=int, default=10000,
                    help="trials of section 5's co-search")
    ap.add_argument("--study-trials", type=int, default=1000)
    ap.add_argument("--reference-layers", nargs="+", default=DEFAULT_REFERENCE_LAYERS,
                    help="layer names run through SCALE-Sim and ZigZag ('all' for every one)")
    args = ap.parse_args(argv)
    print(f"# accel-dse benchmarks — python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    if 1 in args.sections:
        section_simulation(args.repeats)
    if 2 in args.sections:
        section_study(args.study_trials)
    if 3 in args.sections:
        section_growth(args.repeats)
    if 4 in args.sections:
        section_references(args.reference_layers)
    if 5 in args.sections:
        section_population(args.population_trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
