"""Fast screening path against the SimPy simulator on random designs of every template.

For each template and workload (gpt2 decode, context 512; llama2-7b prefill, seq 512; resnet50
batch 1 for the npu; a NeRF frame for neural_graphics), on ``--designs`` random feasible designs
of the template (a random preset, each parameter then redrawn with probability ``REDRAW``
from its range, log-uniform where the parameter is log-scaled; designs the template refuses,
or that cannot run the workload, are drawn again), prints:

* SimPy ms/design: median of ``simulate()`` over ``--simpy`` of the designs;
* loop ms/design: ``evaluate_many(..., vectorised=False)`` (unique ops costed design by design),
  total wall time / designs, best of ``--repeats``;
* fast ms/design: ``evaluate_many`` (a template's vectorised ``cost_many`` where it has one);
* with ``--before CHECKOUT``: the same fast path in another checkout (e.g. main before a
  change, ``git worktree add /tmp/before <commit>``), same designs, run in the same session;
* the ratios SimPy / fast;
* agreement on the SimPy subset: the largest fast / SimPy latency ratio (must be <= 1: the
  fast path ignores contention, so it is a lower bound) and how many are equal to 1e-9.

A last row runs the contention-free chain of tests/test_fast.py (an MLP: every op waits for
the one before it) on the npu, where fast and SimPy latencies must all be equal.

Every timed call gets freshly built designs (templates memoise per design), so no call
profits from an earlier one; building them is not timed. Each row runs in its own process
(per checkout); captures come from the on-disk cache (the first run captures them).

Usage: python benchmarks/fast_path.py [--designs 256] [--simpy 10] [--repeats 3] [--seed 0]
       [--templates npu pim npu_pim neural_graphics wafer] [--before CHECKOUT]
Targets: >= 100x faster per design than SimPy (npu); >= 30x for every template on gpt2 decode
and llama2-7b prefill (issue 22).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKLOADS = {
    "gpt2 decode ctx512": dict(model="gpt2", phase="decode", context=512),
    "llama2-7b prefill 512": dict(model="llama2-7b", phase="prefill", seq=512),
    "resnet50": dict(model="resnet50"),
    "nerf frame 1080p": dict(field="nerf", resolution="1080p"),
}
#: Workloads per template: the issue's two LLM rows for every template, plus the npu's CNN and
#: the neural-graphics cluster's own kind of workload (a neural field rendered as a frame).
ROWS = {
    "npu": ["gpt2 decode ctx512", "llama2-7b prefill 512", "resnet50"],
    "pim": ["gpt2 decode ctx512", "llama2-7b prefill 512"],
    "npu_pim": ["gpt2 decode ctx512", "llama2-7b prefill 512"],
    "neural_graphics": ["gpt2 decode ctx512", "llama2-7b prefill 512", "nerf frame 1080p"],
    "wafer": ["gpt2 decode ctx512", "llama2-7b prefill 512"],
}
#: Probability that a random design redraws a parameter instead of keeping its preset's value
#: (lower for templates with many coupled parameters, whose fully random designs rarely run).
REDRAW = {"npu": 0.7}
REDRAW_DEFAULT = 0.3
#: Draws per wanted design before a row gives up on finding more feasible ones.
MAX_DRAWS_PER_DESIGN = 50


def mlp_chain():
    """tests/test_fast.py's chain: Linear-GELU-Linear-LayerNorm-Linear-Softmax on 64 x 512."""
    import torch
    import torch.nn as nn
    from workloads.capture import capture
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024),
                          nn.LayerNorm(1024), nn.Linear(1024, 256), nn.Softmax(dim=-1))
        x = torch.zeros(64, 512)
    return capture(m, (x,), model="mlp")


def load_workload(label: str):
    """The workload of a row label (``mlp chain`` or a key of :data:`WORKLOADS`)."""
    if label.startswith("mlp chain"):
        return mlp_chain()
    spec = dict(WORKLOADS[label])
    if "field" in spec:
        from workloads import neural_frames as nf
        from workloads.build import build_workload
        field = build_workload(spec["field"], batch=65536, dtype="fp16")
        return nf.attach_frame(field, nf.frame_spec(spec["field"], spec["resolution"]))
    from dse import api
    return api.workload(spec.pop("model"), **spec)


def random_points(template: str, workload, n: int, seed: int) -> list[tuple[str | None, dict]]:
    """Up to ``n`` (preset, overrides) pairs of ``template`` designs that can run ``workload``."""
    from accelerators.registry import get_template
    from dse.errors import DSEError
    cls = get_template(template)
    redraw = REDRAW.get(template, REDRAW_DEFAULT)
    rng = random.Random(seed)
    out: list[tuple[str | None, dict]] = []
    for _ in range(n * MAX_DRAWS_PER_DESIGN):
        if len(out) == n:
            break
        preset = rng.choice(sorted(cls.PRESETS)) if cls.PRESETS else None
        values = {}
        for p in cls.PARAMS:
            if rng.random() >= redraw:
                continue
            if p.choices is not None:
                values[p.name] = rng.choice(p.choices)
            elif p.type is bool:
                values[p.name] = rng.random() < 0.5
            elif p.type is str or p.low is None or p.high is None:
                continue
            elif p.log:
                x = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
                values[p.name] = int(round(x)) if p.type is int else x
            else:
                x = rng.uniform(p.low, p.high)
                values[p.name] = int(round(x)) if p.type is int else x
        try:
            if cls(preset, **values).check(workload) is None:
                out.append((preset, values))
        except DSEError:
            continue
    return out


def build(template: str, points):
    from accelerators.registry import get_template
    cls = get_template(template)
    return [cls(preset, **values) for preset, values in points]


def time_fast(workload, template, points, vectorised: bool, repeats: int):
    """Best wall time of ``evaluate_many`` over ``repeats`` runs on fresh designs, s."""
    from simulators.fast import evaluate_many
    best, result = math.inf, None
    for _ in range(repeats):
        designs = build(template, points)
        t0 = time.perf_counter()
        result = evaluate_many(workload, designs, vectorised=vectorised)
        best = min(best, time.perf_counter() - t0)
    return best, result


def measure(spec: dict) -> dict:
    """One row in this process: SimPy, the per-design loop and the fast path on the same
    random designs (see the module docstring)."""
    import numpy as np
    from simulators.engine import simulate
    template, label = spec["template"], spec["workload"]
    w = load_workload(label)
    points = random_points(template, w, spec["designs"], spec["seed"])
    if not points:
        return {"skip": f"no feasible random {template} design in "
                        f"{spec['designs'] * MAX_DRAWS_PER_DESIGN} draws"}
    time_fast(w, template, points[:1], True, 1)   # warm (graph caches), as SimPy is warmed
    loop_s, loop = time_fast(w, template, points, False, spec["repeats"])
    fast_s, fast = time_fast(w, template, points, True, spec["repeats"])
    same = (np.array_equal(loop.latency_s, fast.latency_s, equal_nan=True)
            and np.array_equal(loop.energy_j, fast.energy_j, equal_nan=True)
            and loop.infeasible == fast.infeasible)
    simpy_s, ratios, equal = [], [], 0
    designs = build(template, points[:spec["simpy"]])
    simulate(w, build(template, points[:1])[0])   # warm
    for i, d in enumerate(designs):
        t0 = time.perf_counter()
        r = simulate(w, d)
        simpy_s.append(time.perf_counter() - t0)
        ratios.append(fast.latency_s[i] / r.latency_s)
        equal += abs(fast.latency_s[i] / r.latency_s - 1) <= 1e-9
    return {"designs": len(points), "ops": len(w.ops), "same": bool(same),
            "simpy_ms": statistics.median(simpy_s) * 1e3,
            "loop_ms": loop_s / len(points) * 1e3, "fast_ms": fast_s / len(points) * 1e3,
            "max_ratio": max(ratios), "equal": int(equal), "checked": len(ratios)}


def run_row(root: Path, spec: dict) -> dict:
    """:func:`measure` in a fresh interpreter that imports the checkout at ``root`` (this
    script's code, that checkout's templates and fast path)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(root))
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                       capture_output=True, text=True, env=env, cwd=root)
    if p.returncode:
        return {"skip": (p.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=256)
    parser.add_argument("--simpy", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--templates", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout to time the same fast path in (same designs)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(json.loads(args.child))))
        return

    print(f"up to {args.designs} random feasible designs per row (seed {args.seed}); SimPy "
          f"median over {args.simpy}; loop / fast = best of {args.repeats} evaluate_many calls "
          f"/ designs" + (f"; before = {args.before}" if args.before else ""))
    print("| template | workload | ops | designs | SimPy ms | loop ms | "
          + ("before ms | SimPy/before | " if args.before else "")
          + "fast ms | SimPy/fast | max fast/SimPy | equal |")
    print("|---|---|---:|---:|---:|---:|" + ("---:|---:|" if args.before else "")
          + "---:|---:|---:|---:|")
    rows = [(t, label) for t in args.templates for label in ROWS[t]]
    if "npu" in args.templates:
        rows.append(("npu", "mlp chain (no contention)"))
    failed = []
    for template, label in rows:
        spec = {"template": template, "workload": label, "designs": args.designs,
                "simpy": args.simpy, "repeats": args.repeats, "seed": args.seed}
        before = run_row(args.before, spec) if args.before else None
        r = run_row(ROOT, spec)
        if "skip" in r:
            print(f"| {template} | {label} | n/a: {r['skip']} |")
            continue
        b_cols = ""
        if before is not None:
            b_cols = ("n/a | | " if "skip" in before else
                      f"{before['fast_ms']:.4f} | {before['simpy_ms'] / before['fast_ms']:.0f}x | ")
        print(f"| {template} | {label} | {r['ops']} | {r['designs']} | {r['simpy_ms']:.3f} | "
              f"{r['loop_ms']:.4f} | {b_cols}{r['fast_ms']:.4f} | "
              f"{r['simpy_ms'] / r['fast_ms']:.0f}x | {r['max_ratio']:.6f} | "
              f"{r['equal']}/{r['checked']} |", flush=True)
        if not r["same"]:
            failed.append(f"{template} {label}: the vectorised fast path differs from the loop")
        if r["max_ratio"] > 1 + 1e-9 or (label.startswith("mlp") and r["equal"] != r["checked"]):
            failed.append(f"{template} {label}: the fast path disagrees with SimPy")
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
