"""Floors on every path: random (design, workload) pairs per template and path, the count of
results below a first-principles floor (:mod:`simulators.floors`) and the worst margin.

    python benchmarks/floors.py                       # 10,000 pairs per template and path
    python benchmarks/floors.py --pairs 200 --paths event,fast --templates npu,gpu
    python benchmarks/floors.py --json floors.json

Designs: a template's preset with 0-4 of its parameters drawn from their declared ranges
(log-uniform where declared so), so most are buildable; an unbuildable or infeasible pair is
counted apart (a path may refuse it). Workloads: small zoo models (one or two layers,
re-shaped without a new capture) in every phase the model has, random batch, context and
dtype. Paths: ``event`` (SimPy), ``fast`` (one design), ``population`` (many designs in one
``evaluate_population``: npu designs as one array program, the others through
``evaluate_many``, the templates' vectorised ``cost_many`` where they have one), ``pairs``
(npu designs on re-shaped architectures in one ``evaluate_pairs``, as a study's batched
sampler scores a generation),
``generation``, ``serving`` (a short trace, every iteration checked), ``system`` (2-4
devices, tensor or pipeline parallel) and ``training`` (one step on a design or a system of
2-4 devices, a random layout, precision and optimizer). ``tests/test_floors.py`` runs a
fixed-seed sample.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelerators.base import Template  # noqa: E402
from accelerators.registry import get_template  # noqa: E402
from dse.errors import DSEError  # noqa: E402
from simulators import floors as fl  # noqa: E402

TEMPLATES = ("npu", "gpu", "pim", "npu_pim", "neural_graphics", "wafer", "cpu")
PATHS = ("event", "fast", "population", "pairs", "generation", "serving", "system",
         "training")

#: Workloads per template: (model, phases, architecture overrides); small so a pair costs
#: milliseconds. Each template gets the kinds of model it is built for as well as others.
LLM = [("gpt2", {"n_layer": 1}), ("tinyllama-1.1b", {"n_layer": 1}),
       ("llama3-8b", {"n_layer": 1}), ("mixtral-8x7b", {"n_layer": 1})]
VISION = [("resnet18", {}), ("vit-b16", {"n_layer": 1}), ("mobilenetv2", {})]
OTHER = [("bert-base", {"n_layer": 1}), ("nerf", {}), ("gna", {})]
#: Number formats a workload may take (per tensor role).
FORMATS = ["weights=int4_g128", "weights=fp8_e4m3,activations=fp8_e4m3,kv=fp8_e4m3",
           "weights=mxfp4,kv=fp8_e4m3"]
#: Parameters never drawn (they name files or change what a run means).
FIXED = {"calibration", "host_profile", "runtime", "gpu"}
#: Largest value drawn for these (the declared range allows designs that take minutes to
#: cost or are absurd for the workloads above).
CAPS = {"mesh_width": 1024, "mesh_height": 1024, "prefill_region_width": 1024,
        "prefill_region_height": 1024, "decode_region_width": 1024,
        "decode_region_height": 1024, "nfps": 256}


# ----------------------------------------------------------------------------- sampling
def random_design(template: str, rng: random.Random, changes: int | None = None) -> Template:
    """A preset of ``template`` with up to 4 parameters drawn from their ranges; raises
    :class:`DSEError` when the values are refused."""
    cls = get_template(template)
    preset = rng.choice(sorted(cls.PRESETS)) if cls.PRESETS else None
    params = [p for p in cls.PARAMS if p.name not in FIXED]
    k = rng.randint(0, 4) if changes is None else changes
    values: dict[str, Any] = {}
    for p in rng.sample(params, min(k, len(params))):
        values[p.name] = draw(p, rng)
    return cls(preset, **values)


def draw(p, rng: random.Random) -> Any:
    """A value of the template parameter ``p`` from its declared choices or range."""
    if p.choices is not None:
        return rng.choice(list(p.choices))
    if p.type is bool:
        return rng.random() < 0.5
    if p.low is None or p.high is None:
        return p.default
    lo, hi = float(p.low), float(min(p.high, CAPS.get(p.name, p.high)))
    if p.log and lo > 0:
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    else:
        x = rng.uniform(lo, hi)
    return int(round(x)) if p.type is int else x


@dataclass
class Case:
    """One workload: the zoo model and how it was built (for messages)."""

    model: str
    kwargs: dict[str, Any]

    def build(self):
        from dse import api
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return api.workload(self.model, **self.kwargs)

    def __str__(self) -> str:
        return f"{self.model} {self.kwargs}"


#: The pool of a quick run (tests): models whose capture is cheap, MoE included.
QUICK = {"llm": [("gpt2", {"n_layer": 1}), ("mixtral-8x7b", {"n_layer": 1})],
         "other": [("resnet18", {}), ("nerf", {})]}
POOL = {"llm": LLM, "other": VISION + OTHER}


def random_case(rng: random.Random, llm_only: bool = False, pool: dict | None = None) -> Case:
    """A random small zoo workload of ``pool`` (default :data:`POOL`): an LLM in prefill or
    decode, or (unless ``llm_only``) a vision, encoder or neural-graphics model."""
    pool = pool or POOL
    llms = pool["llm"]
    model, arch = rng.choice(llms if llm_only else llms + pool["other"])
    dtype = rng.choice(["bf16", "bf16", "fp16", "fp32", "fp8", "int8"])
    kw: dict[str, Any] = {"dtype": dtype, "arch": dict(arch) or None}
    if rng.random() < 0.2:   # number formats per tensor role (workloads/formats.py)
        kw["formats"] = rng.choice(FORMATS)
    if (model, arch) in llms:
        if llm_only or rng.random() < 0.5:
            kw.update(phase="decode", batch=rng.choice([1, 2, 8, 32]),
                      context=rng.choice([16, 128, 1024]))
        else:
            kw.update(phase="prefill", batch=rng.choice([1, 2]), seq=rng.choice([16, 64, 256]))
    elif model in ("nerf", "gna"):
        pass
    else:
        kw.update(batch=rng.choice([1, 2, 4]))
    return Case(model, kw)


# ----------------------------------------------------------------------------- paths
@dataclass
class Tally:
    """What one (template, path) run found."""

    pairs: int = 0
    checked: int = 0
    refused: int = 0
    violations: list[fl.Violation] = field(default_factory=list)
    worst_margin: float = math.inf
    wall_s: float = 0.0

    def add(self, violations: list[fl.Violation], margin: float) -> None:
        self.checked += 1
        self.violations += violations
        self.worst_margin = fl.rounded(min(self.worst_margin, margin,
                                           *(v.margin for v in violations)))

    def row(self) -> dict[str, Any]:
        by: dict[str, int] = {}
        for v in self.violations:
            key = f"{v.quantity} {'above' if v.ceiling else 'below'} {v.name}"
            by[key] = by.get(key, 0) + 1
        return {"pairs": self.pairs, "checked": self.checked, "refused": self.refused,
                "violations": len(self.violations), "by_bound": by,
                "worst_margin": self.worst_margin, "wall_s": self.wall_s,
                "examples": [str(v) for v in self.violations[:5]]}


def _event(template, rng, tally):
    from simulators.engine import simulate
    case = random_case(rng, pool=_POOL[0])
    w = case.build()
    d = random_design(template, rng)
    r = simulate(w, d)
    f = fl.floors(w, d)
    tally.add(_where(fl.check_result(r, w, d), case, d), f.worst_margin(r.latency_s, r.energy_j))


def _fast(template, rng, tally):
    from simulators.fast import evaluate_many
    case = random_case(rng, pool=_POOL[0])
    w = case.build()
    d = random_design(template, rng)
    r = evaluate_many(w, [d])
    if not math.isfinite(r.latency_s[0]):
        raise DSEError(r.infeasible[0] or "infeasible")
    f = fl.floors(w, d)
    tally.add(_where(fl.check_fast(r, w, [d]), case, d),
              f.worst_margin(float(r.latency_s[0]), float(r.energy_j[0])))


def _population(template, rng, tally, size: int = 16):
    """``size`` designs of one template on one workload in one call (counts ``size`` pairs):
    :func:`simulators.population.evaluate_population`, a study's batched path at fidelity
    fast on a ``device`` (npu designs as one array program, the others as
    :func:`~simulators.fast.evaluate_many`)."""
    from simulators.population import evaluate_population
    case = random_case(rng, pool=_POOL[0])
    w = case.build()
    designs = []
    for _ in range(size * 3):
        try:
            designs.append(random_design(template, rng))
        except DSEError:
            continue
        if len(designs) == size:
            break
    r = evaluate_population(w, designs, "cpu")
    ok = [i for i in range(len(designs)) if math.isfinite(r.latency_s[i])]
    tally.refused += len(designs) - len(ok)
    tally.pairs += len(designs) - 1
    if not ok:
        raise DSEError("no design of the population runs the workload")
    vs = [_where([v], case, designs[int(v.where.split()[-1])])[0]   # "design i"
          if v.where.split()[-1:] and v.where.split()[-1].isdigit() else v   # a design's own
          for v in fl.check_fast(r, w, designs, "population")]
    tally.checked += len(ok) - 1
    margins = [fl.floors(w, designs[i]).worst_margin(float(r.latency_s[i]),
                                                      float(r.energy_j[i])) for i in ok]
    tally.add(vs, min(margins))


#: Re-shaped families the pair path draws architectures of: (model, capture arguments,
#: fixed architecture values); sizes drawn per pair (:func:`_pairs`).
FAMILIES = [("gpt2", dict(phase="decode"), dict(n_head=4)),
            ("gpt2", dict(phase="prefill"), dict(n_head=4)),
            ("llama2-7b", dict(phase="decode"), dict(n_head=4, n_kv_head=2))]


def _pairs(template, rng, tally, size: int = 16):
    """``size`` (npu design, re-shaped architecture) pairs of one family in one
    :func:`simulators.population.evaluate_pairs` call, as a study's batched sampler scores
    a generation (counts ``size`` pairs); each handled pair checked against the floors of
    its architecture's workload built the ordinary way."""
    import numpy as np
    from simulators.population import evaluate_pairs
    from workloads import build, reshape, reshape_arrays
    model, kw, base = rng.choice(FAMILIES)
    kw = dict(kw, batch=rng.choice([1, 2, 8]), dtype=rng.choice(["bf16", "fp16", "fp32"]))
    kw.update(context=rng.choice([16, 128, 1024]) if kw["phase"] == "decode"
              else None, seq=rng.choice([16, 64]) if kw["phase"] == "prefill" else None)
    archs = [dict(base, n_layer=rng.randint(1, 6), d_model=32 * rng.randint(2, 32),
                  d_ff=rng.randint(64, 4096)) for _ in range(size)]
    designs = []
    while len(designs) < size:
        try:
            designs.append(random_design(template, rng))
        except DSEError:
            continue
    args = [build.resolve(model, kw["phase"], kw["batch"], kw["seq"], kw["context"],
                          kw["dtype"], a) for a in archs]
    fams = [reshape._family(x) for x in args]
    rule, variables, _ = fams[0]
    names = list(variables)
    arrays = reshape_arrays.family_arrays(reshape._template(args[0], fams[0], True),
                                          kw["dtype"], names, [f[1] for f in fams[:3]])
    if arrays is None:
        raise DSEError(f"{model} {kw}: no arrays for this family")
    vals = np.array([[f[1][n] for f in fams] for n in names], dtype=np.int64)
    depth = np.array([x["arch"][rule.depth] for x in args], dtype=np.int64)
    r = evaluate_pairs(arrays, vals, depth, designs, kw["phase"], kw["batch"],
                       kw["seq"] or 1)
    tally.pairs += size - 1
    tally.refused += int((~r.handled).sum())
    if not r.handled.any():
        raise DSEError("no pair handled")
    tally.checked += int(r.handled.sum()) - 1
    vs, margins = [], []
    for i in np.flatnonzero(r.handled):
        w = build.build_workload(model, kw["phase"], kw["batch"], kw["seq"], kw["context"],
                                 kw["dtype"], archs[i])
        f = fl.floors(w, designs[i])
        lat, e = float(r.latency_s[i]), float(r.energy_j[i])
        vs += _where(f.check("pairs", lat, e) + fl.design_violations(designs[i], w, "pairs"),
                     Case(model, dict(kw, arch=archs[i])), designs[i])
        margins.append(f.worst_margin(lat, e))
    tally.add(vs, min(margins))


def _llm_pair(template, rng):
    """A random LLM case, a random design, the case's batch-1 decode step (what generation
    and serving build iterations from) and a random fidelity."""
    from dse import api
    case = random_case(rng, llm_only=True, pool=_POOL[0])
    d = random_design(template, rng)
    base = api.workload(case.model, phase="decode", batch=1, context=1,
                        dtype=case.kwargs["dtype"], arch=case.kwargs["arch"],
                        formats=case.kwargs.get("formats"))
    return case, d, base, rng.choice(["fast", "event"])


def _generation(template, rng, tally):
    from dse import api
    case, d, base, fidelity = _llm_pair(template, rng)
    g = api.generate(base, input_len=rng.choice([8, 64, 300]),
                     output_len=rng.choice([2, 16, 64]), batch=rng.choice([1, 4, 16]),
                     accelerator=d, fidelity=fidelity)
    vs, m = fl.check_generation(g, base, d, f"generation/{fidelity}")
    tally.add(_where(vs, case, d), m)


def _serving(template, rng, tally):
    from dse import api
    case, d, base, fidelity = _llm_pair(template, rng)
    s = api.serve(base, trace=rng.choice(["sharegpt", "alpaca"]), rate=rng.choice([2, 20, 200]),
                  requests=rng.choice([8, 32]), accelerator=d, fidelity=fidelity,
                  scheduler=rng.choice(["continuous", "chunked", "static"]),
                  token_budget=512, max_batch=64, log_iterations=True,
                  seed=rng.randrange(1000))
    vs, m = fl.check_serving(s, serving_cost_model(base, d, fidelity, s, 512, 64),
                             f"serving/{fidelity}")
    tally.add(_where(vs, case, d), m)


def serving_cost_model(base, design, fidelity, s, token_budget, max_batch):
    """The iteration cost model ``api.serve`` used for ``s`` (its cache returns the same)."""
    from dse import api
    from simulators.iteration_cost import Target
    p = s.per_request
    longest = max(a + b for a, b in zip(p["input_len"], p["output_len"]))
    return api._cost_model(base, Target(design=design, fidelity=fidelity),
                           max(token_budget, max_batch, longest))


def _system(template, rng, tally):
    from dse import api
    from simulators.system_engine import simulate_system
    case = random_case(rng, llm_only=rng.random() < 0.8, pool=_POOL[0])
    devices = rng.choice([2, 4])
    par = rng.choice([{"tp": devices}, {"pp": devices, "microbatches": 2},
                      {"tp": 2, "pp": devices // 2}])
    arch = case.kwargs.get("arch") or {}
    if "n_layer" in arch:   # a stage holds a layer at least
        case.kwargs["arch"] = dict(arch, n_layer=max(arch["n_layer"], par["pp"])) \
            if "pp" in par else arch
    w = case.build()
    # a device of a system: at most 2 parameters drawn (a gpu with 4 drawn is mostly refused)
    d = random_design(template, rng, changes=rng.randint(0, 2))
    links = ["pcie-4x", None] if template == "gpu" else ["npu-ring", None]   # gpus: no serdes
    sysm = api.system(rng.choice(links), devices=devices, accelerator=d)
    from workloads.parallel import layout_from
    lay = layout_from(par)
    r = simulate_system(w, sysm, lay)
    vs, m = fl.check_system(r, w, sysm, lay)
    tally.add(_where(vs, case, d), m)


#: Models a training step is drawn from: (model, architecture overrides), small to capture.
TRAIN_MODELS = [("gpt2", {"n_layer": 2}), ("tinyllama-1.1b", {"n_layer": 2}),
                ("bert-base", {"n_layer": 1})]


def _training(template, rng, tally):
    """A training step of a small model on one design or a system of 2-4 devices under a
    random layout (data, tensor and pipeline parallelism, ZeRO 0-3, recompute, micro-batches,
    offload), precision and optimizer (:func:`simulators.floors.check_training`)."""
    from dse import api
    from simulators.training import simulate_training
    from workloads.train_build import zoo_train_workload
    from workloads.train_step import precision_from
    model, arch = rng.choice(TRAIN_MODELS)
    prec = rng.choice(["mixed", "mixed", "bf16", "fp32", "amp"])
    opt = rng.choice(["adamw", "adamw", "sgd", "momentum"])
    impl = rng.choice(["fused", "foreach", "for-loop"])
    mb = rng.choice([1, 2])
    p = precision_from(prec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = zoo_train_workload(model, batch=mb, seq=rng.choice([32, 128]), dtype=p.activations,
                               arch=arch, weights=p.weights if p.weights != p.activations
                               else None)
    devices = rng.choice([1, 1, 2, 4])
    lay = {"micro_batch": mb, "recompute": rng.choice(["none", "selective", "full"])}
    if devices > 1:
        lay.update(rng.choice([{"dp": devices}, {"tp": devices}, {"pp": 2, "dp": devices // 2},
                               {"tp": 2, "dp": devices // 2}]))
        if lay.get("dp", 1) > 1:
            lay["zero"] = rng.choice([0, 1, 2, 3])
    dp = lay.get("dp", 1)
    lay["global_batch"] = dp * mb * rng.choice([1, 2, 4])
    if rng.random() < 0.15:
        lay["offload_optimizer"] = "host"
    d = random_design(template, rng, changes=rng.randint(0, 2))
    target = d if devices == 1 else api.system(
        rng.choice(["pcie-4x", None] if template == "gpu" else ["npu-ring", None]),
        devices=devices, accelerator=d)
    if lay.get("pp", 1) > 1 and rng.random() < 0.5:   # a heterogeneous pipeline
        from accelerators.system import System
        from workloads.train_parallel import train_layout_from
        other = random_design(template, rng, changes=rng.randint(0, 2))
        tl = train_layout_from(lay)
        first = {tl.rank(dp=i, pp=0, tp=t) for i in range(tl.dp) for t in range(tl.tp)}
        target = System([d if i in first else other for i in range(devices)], None,
                        **dict(target.hw))
    r = simulate_training(w, target, lay, precision=prec, optimizer=opt, optimizer_impl=impl)
    vs, m = fl.check_training(r, w, target, lay, prec, opt, impl)
    tally.add(_where(vs, Case(model, dict(lay, precision=prec, optimizer=opt, impl=impl,
                                          arch=arch)), d), m)


RUNNERS: dict[str, Callable] = {"event": _event, "fast": _fast, "population": _population,
                                "pairs": _pairs, "generation": _generation,
                                "serving": _serving, "system": _system, "training": _training}
#: Paths that exist for some templates only (:func:`simulators.population.evaluate_pairs`
#: scores npu designs).
ONLY = {"pairs": {"npu"}}


def _where(vs: list[fl.Violation], case: Case, design: Template | None) -> list[fl.Violation]:
    from dataclasses import replace
    tag = f"{case}" + (f" on {dict(design.hw)}" if design is not None else "")
    return [replace(v, where=f"{v.where}; {tag}") for v in vs]


_POOL: list[dict] = [POOL]


def run(template: str, path: str, pairs: int, seed: int = 0, quick: bool = False) -> Tally:
    """``pairs`` random (design, workload) pairs of ``template`` on ``path`` (``quick``: the
    :data:`QUICK` pool of models)."""
    _POOL[0] = QUICK if quick else POOL
    rng = random.Random(f"{seed}/{template}/{path}")
    tally = Tally()
    started = time.perf_counter()
    while tally.pairs < pairs:
        tally.pairs += 1
        try:
            RUNNERS[path](template, rng, tally)
        except DSEError:
            tally.refused += 1
    tally.wall_s = time.perf_counter() - started
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--templates", default=",".join(TEMPLATES))
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'template':16} {'path':11} {'pairs':>6} {'checked':>7} {'refused':>7} "
          f"{'below':>5} {'worst margin':>12} {'wall s':>7}")
    for t in args.templates.split(","):
        for p in args.paths.split(","):
            if t not in ONLY.get(p, {t}):
                continue
            tally = run(t, p, args.pairs, args.seed)
            row = {"template": t, "path": p, **tally.row()}
            rows.append(row)
            print(f"{t:16} {p:11} {tally.pairs:6d} {tally.checked:7d} {tally.refused:7d} "
                  f"{len(tally.violations):5d} {tally.worst_margin:12.3%} {tally.wall_s:7.1f}",
                  flush=True)
            for key, n in row["by_bound"].items():
                print(f"    {n} x {key}")
            for ex in row["examples"][:1]:
                print("    e.g. " + ex[:300])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(r["violations"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
