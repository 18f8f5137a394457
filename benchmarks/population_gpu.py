"""Populations on a GPU: the npu's vectorised cost and the whole-model fast path as torch
programs (CUDA), against the same code on numpy (CPU) in the same run.

Prints a table and writes a JSON file (``--out``):

* layer-design evaluations/s: ``npu_vector.cost_many`` of a workload's unique layers on N
  designs (gpt2 decode batch 8 / context 512, llama2-7b decode batch 1 / context 512);
* whole-model designs/s: :func:`simulators.population.evaluate_designs` on llama2-7b decode
  (835 ops: unique ops costed on all designs, the critical path and energy over the graph);
* the GPU-vs-CPU ratio of each (CPU: numpy, one process, in the same run), and whether the
  GPU's results equal the CPU's (max relative difference over the designs both ran; NaN
  where both are infeasible), and the CPU array path against the existing fast path
  (``simulators.fast.evaluate_many``).

Designs: a pool of random npu designs built in Python (each a design object, its physical
assessment and capacity check, the set-up a study pays once per design) repeated to N on the
device (:meth:`DesignArrays.take`): every evaluation is computed, none deduplicated; the set-up
time is reported apart. Workloads come from ``--workloads DIR`` (JSON written by
``--save-workloads DIR`` on a machine with the capture's torch) so the GPU machine needs no
capture.

Needs numpy, networkx, torch (CUDA for ``--device cuda``) and the project's ``accelerators/``,
``workloads/``, ``simulators/`` and ``dse/errors.py``; not pydantic, optuna or plotly.

Usage: python benchmarks/population_gpu.py --device cuda --designs 1048576 --out gpu.json
       python benchmarks/population_gpu.py --device torch --designs 4096 --dry-run
       python benchmarks/population_gpu.py --save-workloads DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import numpy as np  # noqa: E402

#: Workloads measured: (file stem, model, build arguments).
WORKLOADS = {"gpt2_decode": ("gpt2", dict(phase="decode", batch=8, context=512)),
             "llama2_7b_decode": ("llama2-7b", dict(phase="decode", batch=1, context=512))}
#: GPU speed-ups reported for EvoX's tensorised evolutionary multi-objective algorithms over
#: their CPU versions, for the table [P Liang et al., "Bridging evolutionary multiobjective
#: optimization and GPU acceleration via tensorization", IEEE TEVC 2025, arXiv 2503.20286:
#: NSGA-III, MOEA/D, HypE up to 1113x; P Li, Liang, Cheng, "GPU-accelerated evolutionary
#: many-objective optimization using tensorized NSGA-III", CEC 2025, arXiv 2504.06067: up to
#: 3629x]. Those are whole algorithms (selection included) on numerical problems; ours is the
#: design evaluation alone.
EVOX_REPORTED = ("EvoX's tensorised EMO (TEVC 2025): up to 1,113x over CPU; TensorNSGA-III "
                 "(CEC 2025): up to 3,629x")


def _sync(xp) -> None:
    if getattr(xp, "name", "") == "torch" and xp.device.type == "cuda":
        xp.torch.cuda.synchronize()


def _timed(xp, fn, repeats: int) -> tuple[float, object]:
    """Median wall time of ``fn()`` over ``repeats`` calls after one warm-up, and its last
    result."""
    out = fn()
    _sync(xp)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        _sync(xp)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def random_npus(n: int, seed: int, accept=None):
    """``n`` random npu designs over every parameter's range (invalid draws skipped, and
    those ``accept`` refuses when given)."""
    from accelerators.npu import NPU
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        values = {}
        for p in NPU.PARAMS:
            if p.name == "dtype" or rng.random() >= 0.7:
                continue
            if p.choices is not None:
                values[p.name] = rng.choice(p.choices)
            else:
                lo, hi = (math.log(p.low), math.log(p.high)) if p.log else (p.low, p.high)
                x = rng.uniform(lo, hi)
                x = math.exp(x) if p.log else x
                values[p.name] = int(round(x)) if p.type is int else x
        try:
            d = NPU("datacenter-bf16", **values)
        except Exception:
            continue
        if accept is None or accept(d):
            out.append(d)
    return out


def load_workloads(folder: Path | None) -> dict:
    from workloads import ir_json
    out = {}
    for stem, (model, kw) in WORKLOADS.items():
        path = folder / f"{stem}.json.gz" if folder else None
        if path is not None and path.exists():
            out[stem] = ir_json.loads(gzip.decompress(path.read_bytes()), stem)
        else:
            from workloads import build
            out[stem] = build.build_workload(model, **kw)
    return out


def save_workloads(folder: Path) -> None:
    from workloads import build, ir_json
    folder.mkdir(parents=True, exist_ok=True)
    for stem, (model, kw) in WORKLOADS.items():
        w = build.build_workload(model, **kw)
        (folder / f"{stem}.json.gz").write_bytes(gzip.compress(ir_json.dumps(w, stem)))
        print(f"wrote {folder / stem}.json.gz ({len(w)} ops)")


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest relative difference where either is finite; inf where only one is."""
    fa, fb = np.isfinite(a), np.isfinite(b)
    if (fa != fb).any():
        return math.inf
    if not fa.any():
        return 0.0
    x, y = a[fa], b[fa]
    den = np.where(x != 0, np.abs(x), 1.0)
    return float(np.max(np.abs(x - y) / den))


def measure(args) -> dict:
    from accelerators import npu_vector
    from accelerators.array_ns import namespace
    from simulators.fast import evaluate_many
    from workloads.structure import of as structure_of
    from simulators.population import check_designs, evaluate_designs

    rec: dict = {"device": args.device, "designs": args.designs, "cpu_designs": args.cpu_designs,
                 "pool": args.pool, "python": platform.python_version(),
                 "numpy": np.__version__, "cpu_count": os.cpu_count(),
                 "evox_reported": EVOX_REPORTED, "cases": []}
    xp = namespace(args.device)
    if getattr(xp, "name", "") == "torch":
        torch = xp.torch
        rec["torch"] = torch.__version__
        if xp.device.type == "cuda":
            rec["gpu"] = torch.cuda.get_device_name(xp.device)
    cpu = namespace("cpu")
    t = time.perf_counter()
    workloads = load_workloads(Path(args.workloads) if args.workloads else None)
    rec["workloads_s"] = time.perf_counter() - t
    t = time.perf_counter()
    pool = random_npus(args.pool, 0)
    rec["pool_build_s"] = time.perf_counter() - t
    rng = np.random.default_rng(0)
    index = rng.integers(0, len(pool), args.designs)
    index[:len(pool)] = np.arange(len(pool))   # every pool design present
    base = npu_vector.DesignArrays(pool, cpu)
    t = time.perf_counter()
    dev_designs = npu_vector.DesignArrays(pool, xp).take(index)
    rec["device_arrays_s"] = time.perf_counter() - t
    cpu_designs = base.take(index[:args.cpu_designs])

    for stem, w in workloads.items():
        ops = structure_of(w).unique_ops
        case = {"what": "layer-design evaluations", "workload": stem, "unique_ops": len(ops)}
        try:
            g_s, g = _timed(xp, lambda: npu_vector.cost_many(dev_designs, ops, on_device=True),
                            args.repeats)
            c_s, c = _timed(cpu, lambda: npu_vector.cost_many(cpu_designs, ops), args.repeats)
            m = args.cpu_designs
            gl = xp.to_numpy(g.latency_s[:, :m])
            ge = xp.to_numpy(g.energy_j[:, :m])
            case.update(gpu_s=g_s, cpu_s=c_s, gpu_rate=len(ops) * args.designs / g_s,
                        cpu_rate=len(ops) * m / c_s,
                        max_rel_latency=_rel_diff(gl, c.latency_s),
                        max_rel_energy=_rel_diff(ge, c.energy_j),
                        equal=bool(np.array_equal(gl, c.latency_s, equal_nan=True)
                                   and np.array_equal(ge, c.energy_j, equal_nan=True)))
            case["ratio"] = case["gpu_rate"] / case["cpu_rate"]
        except Exception as exc:   # record it and go on
            case["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            traceback.print_exc()
        rec["cases"].append(case)

    for stem, w in workloads.items():   # the same evaluations in parts of the population
        for size in args.chunks:
            rec["cases"].append(_chunk_case(xp, npu_vector, stem, structure_of(w).unique_ops,
                                            dev_designs, size, args.repeats))
    if args.profile:
        ops = structure_of(workloads["gpt2_decode"]).unique_ops
        rec["profile"] = _profile(xp, lambda: npu_vector.cost_many(dev_designs, ops,
                                                                   on_device=True))

    w = workloads["llama2_7b_decode"]
    case = {"what": "whole-model designs", "workload": "llama2_7b_decode", "ops": len(w)}
    try:
        t = time.perf_counter()
        fits_pool = check_designs(w, pool)
        case["check_pool_s"] = time.perf_counter() - t
        fits = fits_pool[index]
        g_s, g = _timed(xp, lambda: evaluate_designs(w, dev_designs, fits), args.repeats)
        m = args.cpu_designs
        c_s, c = _timed(cpu, lambda: evaluate_designs(w, cpu_designs, fits[:m]), args.repeats)
        gl, ge = xp.to_numpy(g.latency_s[:m]), xp.to_numpy(g.energy_j[:m])
        case.update(gpu_s=g_s, cpu_s=c_s, gpu_rate=args.designs / g_s, cpu_rate=m / c_s,
                    feasible=int(xp.to_numpy(g.feasible).sum()),
                    max_rel_latency=_rel_diff(gl, c.latency_s),
                    max_rel_energy=_rel_diff(ge, c.energy_j),
                    equal=bool(np.array_equal(gl, c.latency_s, equal_nan=True)
                               and np.array_equal(ge, c.energy_j, equal_nan=True)))
        case["ratio"] = case["gpu_rate"] / case["cpu_rate"]
        k = min(args.fast_designs, m)   # the existing fast path, design by design objects
        t = time.perf_counter()
        ref = evaluate_many(w, cpu_designs.designs[:k])
        case["fast_path_s"] = time.perf_counter() - t
        case["fast_path_rate"] = k / case["fast_path_s"]
        case["max_rel_vs_fast_path"] = max(_rel_diff(gl[:k], ref.latency_s),
                                           _rel_diff(ge[:k], ref.energy_j))
    except Exception as exc:
        case["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        traceback.print_exc()
    rec["cases"].append(case)
    return rec


def _same(xp, x, y) -> bool:
    """``x`` and ``y`` (arrays of one namespace) equal, NaN equal to NaN."""
    return bool(xp.to_numpy(((x == y) | ((x != x) & (y != y))).all()))


def _chunk_case(xp, npu_vector, stem: str, ops, designs, size: int, repeats: int) -> dict:
    """Layer-design evaluations of ``designs`` in parts of ``size`` designs (one
    ``cost_many`` call each, results written into one array), against one call."""
    case = {"what": f"layer-design evaluations in parts of {size:,}", "workload": stem,
            "unique_ops": len(ops), "chunk": size}
    try:
        n = designs.n
        parts = [(s, designs.take(np.arange(s, min(n, s + size)))) for s in range(0, n, size)]

        def run():
            lat, en = xp.full((len(ops), n), math.nan), xp.full((len(ops), n), math.nan)
            for s, part in parts:
                c = npu_vector.cost_many(part, ops, on_device=True)
                lat[:, s:s + part.n], en[:, s:s + part.n] = c.latency_s, c.energy_j
            return lat, en

        g_s, (lat, en) = _timed(xp, run, repeats)
        whole = npu_vector.cost_many(designs, ops, on_device=True)
        case.update(gpu_s=g_s, gpu_rate=len(ops) * n / g_s,
                    equal_to_one_call=_same(xp, lat, whole.latency_s)
                    and _same(xp, en, whole.energy_j))
    except Exception as exc:   # record it and go on
        case["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        traceback.print_exc()
    return case


def _profile(xp, fn) -> dict:
    """torch.profiler's busiest kernels (device time where CUDA, else CPU) over one call."""
    out: dict = {}
    try:
        from torch.profiler import ProfilerActivity, profile
        cuda = xp.device.type == "cuda"
        fn()
        _sync(xp)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        t = time.perf_counter()
        with profile(activities=acts) as prof:
            fn()
            _sync(xp)
        out["wall_s"] = time.perf_counter() - t

        def dev_us(e):
            for k in ("self_device_time_total", "self_cuda_time_total"):
                if cuda and hasattr(e, k):
                    return float(getattr(e, k))
            return float(e.self_cpu_time_total)

        events = sorted(prof.key_averages(), key=dev_us, reverse=True)
        out["device_s"] = sum(dev_us(e) for e in events) / 1e6
        out["top"] = [{"name": e.key[:80], "calls": int(e.count), "self_s": dev_us(e) / 1e6}
                      for e in events[:15]]
        out["calls"] = int(sum(e.count for e in events))
    except Exception as exc:   # record it and go on
        out["error"] = repr(exc)[:300]
        traceback.print_exc()
    return out


def table(rec: dict) -> str:
    lines = [f"# populations on {rec.get('gpu', rec['device'])} (torch {rec.get('torch', '-')}) "
             f"vs numpy on the CPU, same run; pool {rec['pool']} designs built in "
             f"{rec['pool_build_s']:.1f} s, repeated to {rec['designs']:,} on the device",
             "| what | workload | GPU designs | GPU s | GPU rate /s | CPU designs | CPU s | "
             "CPU rate /s | GPU / CPU | max rel diff | equal |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in rec["cases"]:
        if "chunk" in c and "error" not in c:
            lines.append(f"| {c['what']} | {c['workload']} | {rec['designs']:,} | "
                         f"{c['gpu_s']:.4f} | {c['gpu_rate']:,.0f} | | | | | | "
                         f"{'yes' if c['equal_to_one_call'] else 'no'} |")
            continue
        if "error" in c:
            lines.append(f"| {c['what']} | {c['workload']} | error: {c['error'][:120]} |")
            continue
        diff = max(c["max_rel_latency"], c["max_rel_energy"])
        lines.append(f"| {c['what']} | {c['workload']} | {rec['designs']:,} | {c['gpu_s']:.4f} | "
                     f"{c['gpu_rate']:,.0f} | {rec['cpu_designs']:,} | {c['cpu_s']:.4f} | "
                     f"{c['cpu_rate']:,.0f} | {c['ratio']:,.0f}x | {diff:.1e} | "
                     f"{'yes' if c['equal'] else 'no'} |")
    whole = [c for c in rec["cases"] if c["what"] == "whole-model designs" and "error" not in c]
    for c in whole:
        lines.append(f"existing fast path (evaluate_many, design objects): "
                     f"{c['fast_path_rate']:,.0f} designs/s; max rel diff to the array path "
                     f"{c['max_rel_vs_fast_path']:.1e}")
    p = rec.get("profile")
    if p and "error" not in p:
        lines.append(f"profile (gpt2_decode, one call): wall {p['wall_s']:.4f} s, busiest "
                     f"{p['device_s']:.4f} s in {p['calls']} calls; top: "
                     + ", ".join(f"{e['name']} {e['self_s'] * 1e3:.1f} ms" for e in p["top"][:5]))
    lines.append(f"reported elsewhere: {rec['evox_reported']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, torch (CPU build) or cpu")
    ap.add_argument("--designs", type=int, default=1 << 20)
    ap.add_argument("--cpu-designs", type=int, default=1 << 15)
    ap.add_argument("--fast-designs", type=int, default=512)
    ap.add_argument("--pool", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workloads", default=None, help="folder of saved workloads")
    ap.add_argument("--save-workloads", default=None, help="write the workloads and stop")
    ap.add_argument("--chunks", default="", help="comma-separated part sizes: the layer-design "
                    "rows again, evaluated in parts of that many designs")
    ap.add_argument("--profile", action="store_true", help="torch.profiler of one call")
    ap.add_argument("--out", default=None, help="JSON results file")
    ap.add_argument("--dry-run", action="store_true", help="small sizes (a check of the script)")
    args = ap.parse_args(argv)
    if args.save_workloads:
        save_workloads(Path(args.save_workloads))
        return 0
    args.chunks = [int(x) for x in args.chunks.split(",") if x.strip()]
    if args.dry_run:
        args.designs, args.cpu_designs, args.pool, args.repeats = 2048, 512, 64, 1
        args.fast_designs = 64
    args.cpu_designs = min(args.cpu_designs, args.designs)
    args.pool = min(args.pool, args.designs)
    try:
        rec = measure(args)
    except Exception as exc:
        rec = {"device": args.device, "error": repr(exc), "cases": []}
        traceback.print_exc()
    if args.out:
        Path(args.out).write_text(json.dumps(rec, indent=1))
    if "error" in rec:
        print(rec["error"])
        return 1
    print(table(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
