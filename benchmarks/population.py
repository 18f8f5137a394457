"""Co-search speed: architectures without re-capture, populations scored at once.

Prints, in one run:

1. capture vs re-shape per new architecture (gpt2 and llama2-7b, prefill and decode at the
   zoo's sizes): the family's template (three small captures, once per process), a capture of
   a new architecture (``torch.export``), re-shaping to it (median over new architectures),
   and a check that the two workloads are equal;
2. a new GEMM or convolution through ``api.simulate`` (``linear`` / ``conv2d`` on the ``npu``
   set up as the SCALE-Sim runs; each call re-shapes its workload, the family's template made
   on a neighbouring shape first) against SCALE-Sim 3.0.0 on the same layer, run in
   this benchmark (``.refenv``, created by ``benchmarks/scalesim_reference.py`` if missing);
   recorded SCALE-Sim times (tests/data/scalesim_reference.json) only with ``--recorded``;
3. population evaluation rate on the CPU: layer-design evaluations/s (the npu's vectorised
   ``cost_many``, gpt2 decode's unique layers x random designs) and whole-model design
   evaluations/s (``evaluate_many``, llama2-7b decode, one architecture, random designs), and
   designs x architectures (``Evaluator.evaluate_batch`` of the co-search below on random
   points: each its own architecture; best of two calls; ``benchmarks/population_ab.py --what
   batch`` sets it against another checkout, per CPU second);
4. a co-search of GPT-2 architecture x NPU with the architecture varying continuously
   (``n_layer``, ``d_model`` in steps of 64, ``n_head``, ``d_ff``): ``nsga2-vectorized`` at
   fidelity fast, end to end (``run_study``: sampling, evaluation, SQLite storage), against
   today's path (TPE, event simulation, a capture per new architecture: ``DSE_RESHAPE=0``) on
   fewer trials, extrapolated per trial; the new path twice in one cache directory: cold
   (the family's three reference captures) and again with its template on disk
   (:mod:`workloads.template_cache`).

5. screening honesty: the shipped studies a ``fidelity: multi`` run applies to (all but the
   system study), run at ``fidelity: multi`` with fewer trials and several seeds: how many
   screened (fast-path) Pareto designs the event simulation confirmed, how many dropped out
   (infeasible under the event simulation, or dominated by another confirmation), how many
   runs' final front differs from the screened one, and the largest relative difference
   between a screened design's fast and event latency and energy
   (:func:`dse.study.screening.screening_summary`, also in ``dse study run --json``).

The per-template fast-path speed-up against the event simulation (gpt2 decode, llama2-7b
prefill) is section 1 of ``benchmarks/run.py``.

Usage: python benchmarks/population.py [--trials 10000] [--today-trials 40] [--sections 1 2 3 4 5]
       python benchmarks/population.py --sections 5 --screen-studies serve_llama_slo gna_dit \
           ngpc_nerf --screen-seeds 0          # the slow ones (quality proxies, serving)
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
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import _median_s  # noqa: E402  (after the path insert)

FAMILIES = [("gpt2", "decode", dict(context=512)), ("gpt2", "prefill", dict(seq=512)),
            ("llama2-7b", "decode", dict(context=512)), ("llama2-7b", "prefill", dict(seq=512))]
#: New architectures per family: (n_layer, d_model, n_head[, n_kv_head], d_ff) changes.
NEW_ARCHS = {"gpt2": [dict(n_layer=10, d_model=640, n_head=10, d_ff=2560),
                      dict(n_layer=14, d_model=896, n_head=14, d_ff=3000),
                      dict(n_layer=16, d_model=1024, n_head=16, d_ff=4096)],
             "llama2-7b": [dict(n_layer=30, d_model=3840, n_head=30, n_kv_head=10, d_ff=10240),
                           dict(n_layer=32, d_model=4096, n_head=32, n_kv_head=8, d_ff=14336),
                           dict(n_layer=28, d_model=3584, n_head=28, n_kv_head=4, d_ff=9728)]}
#: GEMMs of tests/data/scalesim_reference.json run side by side (m, k, n): ResNet-18's fc (in
#: benchmarks/run.py's default reference layers) and the three GEMMs SCALE-Sim runs in seconds.
GEMMS = [(1, 512, 1000), (64, 64, 64), (100, 300, 50), (128, 768, 768)]
#: ResNet-18 convolutions of benchmarks/run.py's default reference layers.
CONVS = ["layer2.0.downsample", "layer3.0.downsample"]

STUDY = """
name: {name}
seed: 0
workloads:
  - {{model: gpt2, phase: decode, batch: 8, context: 512}}
accelerator: {{template: npu, preset: datacenter-bf16}}
search:
  hardware:
    rows: {{choices: [32, 64, 128, 256]}}
    cols: {{choices: [32, 64, 128, 256]}}
    dataflow:
    arrays: {{choices: [1, 2, 4, 8]}}
    clock_hz: [5.0e8, 1.5e9]
    dram_bandwidth_Bps: [1.0e11, 1.2e12]
  architecture:
    n_layer: [2, 24]
    d_model: {{low: 256, high: 1536, step: 64}}
    n_head: {{choices: [4, 8, 16]}}
    d_ff: [512, 6144]
objectives: [latency_s, energy_j]
constraints: ["latency_s <= 0.003", "area_mm2 <= 80"]
fidelity: {fidelity}
sampler: {sampler}
"""


def _quiet():
    warnings.simplefilter("ignore")


# ----------------------------------------------------------------------------- 1. re-shape
def section_reshape() -> None:
    from workloads import build, reshape
    print("\n## 1. Capture vs re-shape per new architecture (zoo sizes; re-shape median of "
          "the new architectures, 20 calls each)")
    print("| model | phase | ops (last) | templates (once each) s | capture ms | re-shape ms | "
          "speed-up | equal |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for model, phase, sizes in FAMILIES:
        base = build.resolve(model, phase, 1, sizes.get("seq"), sizes.get("context"), "bf16")
        t = time.perf_counter()
        reshape.template_for(base)
        template_s = time.perf_counter() - t
        cap, shp, equal, ops = [], [], True, 0
        for arch in NEW_ARCHS[model]:
            if model == "gpt2":
                arch = {k: v for k, v in arch.items() if k != "n_kv_head"}
            args = build.resolve(model, phase, 1, sizes.get("seq"), sizes.get("context"),
                                 "bf16", arch)
            t = time.perf_counter()
            reshape.template_for(args)   # a new family (grouped-query heads): its own template
            template_s += time.perf_counter() - t
            t = time.perf_counter()
            real = build._capture_zoo(args)
            cap.append(time.perf_counter() - t)
            shp.append(_median_s(lambda: reshape.reshaped(args, make=False), 20))
            mine = reshape.reshaped(args, make=False)
            equal &= reshape.same_workload(mine, real) is None
            ops = len(real)
        c, r = statistics.median(cap), statistics.median(shp)
        print(f"| {model} | {phase} | {ops} | {template_s:.2f} | {c * 1e3:.0f} | {r * 1e3:.3f} | "
              f"{c / r:,.0f}x | {'yes' if equal else 'NO'} |")


# ----------------------------------------------------------------------------- 2. one GEMM
def section_gemm(recorded: bool) -> None:
    from benchmarks import scalesim_reference as ss
    from dse import api
    from workloads import build
    print("\n## 2. A new GEMM or convolution through api.simulate (npu as the SCALE-Sim runs: "
          "32x32, ws, 4 MiB SRAMs) vs SCALE-Sim 3.0.0 on the same layer")
    design = ss.reference_design("ws")
    hw = dict(design.hw)
    for m in (1, 3, 5, 7):   # the templates (m = 1 is a family of its own: a size-1 dimension
        # may trace differently) and the first calls' one-off costs, on other shapes; each
        # layer's family (a convolution's filter, stride, padding) is made on a neighbour
        api.simulate("linear", "npu", hw=hw, arch={"m": m, "k": 5, "n": 7}, dtype="int8")
    ref = {r["layer"]: r for r in json.load(open(ROOT / "tests/data/scalesim_reference.json"))
           ["records"] if r["dataflow"] == "ws"}
    py = None
    if not recorded:
        try:
            py = ss.ensure_refenv()
        except Exception as exc:   # no network, no pip: fall back to the recorded times
            print(f"SCALE-Sim not installable here ({type(exc).__name__}): recorded times")
    source = "run now" if py else "recorded (tests/data/scalesim_reference.json)"
    print(f"| layer (M x K x N) | api.simulate ms (re-shaped, median of 5) | cycles ours | "
          f"SCALE-Sim s ({source}) | cycles SCALE-Sim | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = []
    convs = {x["name"]: x for x in ss.resnet18_layers()}
    cases = [("linear", {"m": m, "k": k, "n": n},
              ss._gemm("fc" if (m, k, n) == (1, 512, 1000) else f"gemm_m{m}_k{k}_n{n}", m, k, n))
             for m, k, n in GEMMS]
    cases += [("conv2d", {key: convs[c][key] for key in ("c", "h", "w", "k", "r", "s", "stride",
                                                         "padding")}, convs[c]) for c in CONVS]
    for model, arch, layer in cases:
        api.simulate(model, "npu", hw=hw, arch={**arch, "k": arch["k"] + 1}, dtype="int8")
        times = []
        for _ in range(5):   # each call re-shapes the workload anew (the memory cache emptied)
            build._MEMORY.clear()
            t = time.perf_counter()
            r = api.simulate(model, "npu", hw=hw, arch=arch, dtype="int8")
            times.append(time.perf_counter() - t)
        ours_s = statistics.median(times)
        if py:
            with tempfile.TemporaryDirectory() as d:
                s = ss.run_scalesim(py, layer, "ws", Path(d))
            ref_s, ref_cycles = s["wall_s"], s["total_cycles"] - s["stall_cycles"]
        else:
            rec = ref[layer["name"]]
            ref_s, ref_cycles = rec["scalesim_wall_s"], rec["scalesim_compute_cycles"]
        cycles = round(r.ops[0].compute_cycles)
        ratios.append(ref_s / ours_s)
        shape = (f"{layer['m']} x {layer['k']} x {layer['n']}" if model == "linear" else
                 f"{layer['name']} ({layer['gemm_m']} x {layer['gemm_k']} x {layer['gemm_n']})")
        print(f"| {model} {shape} | {ours_s * 1e3:.2f} | {cycles:,} | {ref_s:.2f} | "
              f"{ref_cycles:,} | {ref_s / ours_s:,.0f}x |")
    print(f"median speed-up {statistics.median(ratios):,.0f}x (target >= 1,000x)")


# ----------------------------------------------------------------------------- 3. populations
def random_npus(n: int, seed: int, workload=None):
    """``n`` random npu designs (:func:`population_gpu.random_npus`), each running
    ``workload`` when given."""
    from population_gpu import random_npus as draw
    return draw(n, seed, None if workload is None else lambda d: d.check(workload) is None)


def _best(fn, repeats: int = 3) -> float:
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def section_population(designs: int, points: int) -> None:
    from accelerators.npu import NPU
    from dse import api
    from dse.study.evaluate import Evaluator
    from dse.study.loader import load_study_text
    from simulators.fast import evaluate_many
    from workloads.structure import of as structure_of
    print(f"\n## 3. Population evaluation rate (CPU, {os.cpu_count()} cores, numpy)")
    gpt2 = api.workload("gpt2", phase="decode", batch=8, context=512)
    ops = structure_of(gpt2).unique_ops
    pool = random_npus(designs, 0)
    t = _best(lambda: NPU.cost_many(pool, ops))
    print(f"| what | designs | per call | rate |\n|---|---:|---:|---:|")
    print(f"| layer-design evaluations (gpt2 decode's {len(ops)} unique layers, cost_many) | "
          f"{designs:,} | {t * 1e3:.1f} ms | {designs * len(ops) / t:,.0f} /s |")
    layers = list(ops)   # more layers per call: the designs' own set-up is paid once a call
    for extra in (api.workload("llama2-7b", phase="prefill", batch=1, seq=512),
                  api.workload("resnet50", batch=1)):
        layers += structure_of(extra).unique_ops
    t = _best(lambda: NPU.cost_many(pool, layers))
    print(f"| layer-design evaluations (the {len(layers)} unique layers of gpt2 decode, "
          f"llama2-7b prefill and resnet50, cost_many) | {designs:,} | {t * 1e3:.1f} ms | "
          f"{designs * len(layers) / t:,.0f} /s |")
    llama = api.workload("llama2-7b", phase="decode", batch=1, context=512)
    fit = random_npus(designs, 1, llama)
    evaluate_many(llama, fit[:64])
    t = _best(lambda: evaluate_many(llama, fit))
    print(f"| whole-model design evaluations (llama2-7b decode, {len(llama)} ops, "
          f"evaluate_many) | {designs:,} | {t * 1e3:.0f} ms | {designs / t:,.0f} /s |")
    s = load_study_text(STUDY.format(name="bench_pop", fidelity="fast",
                                     sampler="{name: nsga2-vectorized, population_size: 100}"))
    from dse.study.population import Encoding
    import numpy as np
    enc = Encoding(s.space.dimensions)
    pts = [s.space.point(v) for v in enc.decode(np.random.default_rng(0).random(
        (points, len(enc.dims))))]
    Evaluator(s, fidelity="fast").evaluate_batch(pts[:10])   # templates made
    # best of two calls, each a fresh evaluator: the process's one-time work (the family's
    # arrays checked against its template, the npu reference designs of npu_batch) is paid
    # once a co-search, not once a generation
    t = _best(lambda: Evaluator(s, fidelity="fast").evaluate_batch(pts), 2)
    archs = len({json.dumps(p.arch, sort_keys=True) for p in pts})
    print(f"| designs x architectures (gpt2 decode x npu, {archs} architectures, "
          f"evaluate_batch: designs built, metrics, records) | {points:,} | {t * 1e3:.0f} ms | "
          f"{points / t:,.0f} /s |")
    # the same pairs as one array program, designs built beforehand (as the rows above)
    from simulators.population import evaluate_pairs
    from workloads import build, reshape, reshape_arrays
    w = s.workloads[0]
    args = [build.resolve(w.model, w.phase, w.batch, w.seq, w.context, w.dtype,
                          p.arch[w.label]) for p in pts]
    fams = [reshape._family(x) for x in args]
    rule, variables, _ = fams[0]
    names = list(variables)
    template = reshape._template(args[0], fams[0], True)
    arrays = reshape_arrays.family_arrays(template, w.dtype, names, [f[1] for f in fams[:3]])
    ev = Evaluator(s, fidelity="fast")
    designs = [ev._build(p.design, p.hw[p.design]) for p in pts]
    vals = np.array([[f[1][n] for f in fams] for n in names], dtype=np.int64)
    depth = np.array([x["arch"][rule.depth] for x in args], dtype=np.int64)
    t = _best(lambda: evaluate_pairs(arrays, vals, depth, designs, w.phase, w.batch, 1))
    print(f"| designs x architectures as arrays (the same {points:,} pairs, evaluate_pairs, "
          f"designs built beforehand) | {points:,} | {t * 1e3:.1f} ms | {points / t:,.0f} /s |")


# ----------------------------------------------------------------------------- 5. screening
#: Studies of section 5 and their search trials (fewer than shipped where a trial is slow;
#: the system study ``llama70b_system`` is event-only). The slow ones (a quality proxy trains
#: per architecture, a serving run simulates 1,000 requests: 3-12 s a trial) are left to
#: ``--screen-studies``.
SCREEN_STUDIES = {"codesign_gpt2_npu": 200, "gpu_vs_npu_llama2": 150, "min_cost_llama_decode": 300,
                  "npu_resnet50": 200, "nasaic_multitask": 60, "nasaic_published": 60,
                  "neupims": 48, "pim_gpt": 48, "wafer_llama3": 48}
SLOW_SCREEN_STUDIES = {"serve_llama_slo": 30, "gna_dit": 30, "ngpc_nerf": 30}


def section_screening(names: list[str], seeds: list[int], trials: int | None) -> None:
    import yaml
    from dse.study.driver import run_study
    from dse.study.loader import load_study_text, read_study_file
    print(f"\n## 5. Screening honesty: fidelity multi, seeds {seeds} (screened = feasible "
          f"fast-path Pareto designs; each re-run with the event simulation)")
    print("| study | fast trials / seed | screened | confirmed | dropped: infeasible | "
          "dropped: dominated | runs whose front differs | max latency diff | "
          "max energy diff | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals = [0, 0, 0, 0, 0, 0]
    for name in names:
        path = ROOT / "studies" / f"{name}.yaml"
        n = trials or SCREEN_STUDIES.get(name) or SLOW_SCREEN_STUDIES.get(name) or 50
        counts = [0, 0, 0, 0, 0]
        worst = {"latency_s": None, "energy_j": None}
        t = time.perf_counter()
        for seed in seeds:
            data = yaml.safe_load(read_study_file(path))
            data.update(fidelity="multi", seed=seed, trials=n)
            study = load_study_text(yaml.safe_dump(data, sort_keys=False), source=str(path))
            with tempfile.TemporaryDirectory() as d:
                sc = run_study(study, out=d, show_progress=False, write_report=False).screening
            counts = [a + b for a, b in zip(counts, (
                sc.screened, sc.confirmed, sc.dropped_infeasible, sc.dropped_dominated,
                int(sc.front_differs)))]
            for m in worst:
                v = sc.max_rel_diff.get(m)
                if v is not None:
                    worst[m] = v if worst[m] is None else max(worst[m], v)
        totals = [a + b for a, b in zip(totals, counts + [len(seeds)])]
        shown = {m: "—" if v is None else f"{v:.1%}" for m, v in worst.items()}
        print(f"| {name} | {n} | {counts[0]} | {counts[1]} | {counts[2]} | {counts[3]} | "
              f"{counts[4]} of {len(seeds)} | {shown['latency_s']} | {shown['energy_j']} | "
              f"{time.perf_counter() - t:.0f} |")
    print(f"| all | | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} | "
          f"{totals[4]} of {totals[5]} | | | |")
    print("max diff: |fast - event| / event over the screened designs of every seed (the fast "
          "path is a lower bound on latency where ops contend).")


# ----------------------------------------------------------------------------- 4. co-search
CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from dse.study.driver import run_study
from dse.study.loader import load_study_text
text, trials, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = load_study_text(text)
t, c = time.perf_counter(), time.process_time()
r = run_study(s, trials=trials, out=out, show_progress=False, write_report=False)
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "cpu_s": time.process_time() - c, "trials": r.session_trials,
                  "states": dict(r.states), "pareto": len(r.pareto)}))
"""


def _run_study(text: str, trials: int, env: dict, cache: str | None = None) -> dict:
    """One study in a fresh process; ``cache``: its ``DSE_CACHE_DIR`` (default a new one)."""
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([sys.executable, "-c", CHILD, text, str(trials), str(Path(d) / "out")],
                           capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore",
                                "DSE_CACHE_DIR": cache or d, **env})
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def section_cosearch(trials: int, today_trials: int) -> None:
    print(f"\n## 4. Co-search of GPT-2 architecture x NPU (continuous n_layer, d_model, d_ff; "
          f"end to end, one process, SQLite)")
    text = STUDY.format(name="pop", fidelity="fast",
                        sampler="{name: nsga2-vectorized, population_size: 200}")
    with tempfile.TemporaryDirectory() as cache:
        new = _run_study(text, trials, {}, cache)     # cold: the family's template captured
        warm = _run_study(text, trials, {}, cache)    # the template stored on disk by the first
    today = _run_study(STUDY.format(name="today", fidelity="event", sampler="tpe"),
                       today_trials, {"DSE_RESHAPE": "0"})
    print("| path | trials | wall s | CPU s | trials/s | states |\n|---|---:|---:|---:|---:|---|")
    for label, r in (("nsga2-vectorized, fast, re-shape; cold cache (3 captures)", new),
                     ("the same, family captured before (template on disk)", warm),
                     ("today: tpe, event, capture per architecture", today)):
        print(f"| {label} | {r['trials']:,} | {r['s']:.1f} | {r['cpu_s']:.1f} | "
              f"{r['trials'] / r['s']:,.1f} | {r['states']} |")
    rate_new, rate_today = new["trials"] / new["s"], today["trials"] / today["s"]
    print(f"today's path extrapolated to {trials:,} trials: {trials / rate_today:,.0f} s; "
          f"speed-up {rate_new / rate_today:,.0f}x (cold)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", nargs="+", type=int, default=[1, 2, 3, 4, 5],
                    choices=[1, 2, 3, 4, 5])
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--today-trials", type=int, default=40)
    ap.add_argument("--designs", type=int, default=4096)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--screen-studies", nargs="+", default=list(SCREEN_STUDIES),
                    choices=list(SCREEN_STUDIES) + list(SLOW_SCREEN_STUDIES))
    ap.add_argument("--screen-seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--screen-trials", type=int, default=None,
                    help="search trials per study and seed (default: each study's own)")
    ap.add_argument("--recorded", action="store_true",
                    help="compare with SCALE-Sim's recorded times instead of running it")
    args = ap.parse_args(argv)
    _quiet()
    os.environ.setdefault("DSE_CACHE_DIR", tempfile.mkdtemp())
    print(f"# co-search speed — python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}")
    if 1 in args.sections:
        section_reshape()
    if 2 in args.sections:
        section_gemm(args.recorded)
    if 3 in args.sections:
        section_population(args.designs, args.points)
    if 4 in args.sections:
        section_cosearch(args.trials, args.today_trials)
    if 5 in args.sections:
        section_screening(args.screen_studies, args.screen_seeds, args.screen_trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
