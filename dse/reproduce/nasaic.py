"""Reproduction of NASAIC (Yang et al., "Co-Exploration of Neural Architectures and
Heterogeneous ASIC Accelerator Designs Targeting Multiple Tasks", DAC 2020): co-exploring the
networks and a heterogeneous accelerator against NAS followed by ASIC design.

Paper [P abstract]: the sequential flow violates the design specs; co-exploration meets them
with 17.77 % lower latency, 2.49x lower energy and 2.32x smaller area at 0.76 % accuracy loss.

Our setting (docs/validation.md, NASAIC section, says where it differs from the paper's):

* Two tasks, each ImageNet classification by a trained network with published top-1
  (:mod:`dse.quality.published`): task ``mobilenet`` picks one of the 22 MobileNetV2 width x
  resolution networks, task ``resnet`` one of ResNet-18/34/50/101/152.
* A heterogeneous accelerator of two ``npu`` sub-accelerators from the ``edge-32x32`` preset:
  ``nvdla`` weight-stationary and ``shidiannao`` output-stationary (NASAIC's NVDLA- and
  ShiDianNao-style templates), each with searched rows, columns and DRAM bandwidth; each task's
  network is assigned whole to one of them. Budgets shared by both (those of
  ``studies/nasaic_multitask.yaml``): 4096 PEs, 25.6 GB/s.
* One step runs one input of every task: tasks on different sub-accelerators run
  concurrently, tasks on the same one after each other. Latency = the step's makespan; energy
  = both tasks' dynamic energy + every sub-accelerator's static power over the makespan; area
  = the sum of the sub-accelerators' ``area_mm2()``.
* Specs, fixed before any search and never tuned: what the reference design does, i.e. the
  zoo's default networks (MobileNetV2 1.0 at 224 px, ResNet-18) on the two sub-accelerators
  as the preset has them (32 x 32, 12.8 GB/s each), in the better of the two one-task-each
  assignments: its latency, energy and area are the specs' upper bounds. As in NASAIC there is
  no accuracy floor: accuracy is what the search maximises.
* Sequential flow: NAS (hardware-blind: the most accurate networks, half the trials), then the
  best hardware for those networks (the other half): the feasible design of lowest
  ``cost = latency/spec + energy/spec + area/spec``, or, when none meets the specs, the one that
  violates them least. Co-exploration: one search of networks and hardware together for the
  highest mean top-1 under the specs and budgets (ties: lowest cost). Both run Optuna's TPE
  with the same trial budget and seed; specs and budgets are constraints
  (``trial.set_constraint``), as in studies.

Rows: the share of seeds where the sequential flow violates the specs and where
co-exploration meets them; latency (co / sequential), energy and area (sequential / co) and
accuracy loss (mean top-1 over the tasks, sequential - co, percentage points), each the mean
over the seeds.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from dse.reproduce.table import Row

#: Paper values [P abstract]: latency co / sequential (17.77 % lower), energy and area
#: sequential / co, accuracy loss (percentage points of top-1).
PAPER = {"latency": 1.0 - 0.1777, "energy": 2.49, "area": 2.32, "accuracy_loss_pp": 0.76}

#: Tasks: label -> zoo model whose published networks the task chooses among.
TASKS = {"mobilenet": "mobilenetv2", "resnet": "resnet18"}
#: Sub-accelerators: name -> dataflow [P NASAIC's templates: NVDLA-style, ShiDianNao-style].
SUBS = {"nvdla": "ws", "shidiannao": "os"}
PRESET = "edge-32x32"
#: Searched array sides (rows and columns, PEs) and DRAM bandwidths (B/s: 1/4 to 2 LPDDR4
#: x32 channels of the preset's 12.8 GB/s) of each sub-accelerator.
SIDES = (8, 16, 32, 64, 128)
BANDWIDTHS_BPS = (3.2e9, 6.4e9, 12.8e9, 25.6e9)
#: Shared budgets, those of studies/nasaic_multitask.yaml: PEs and DRAM bandwidth, B/s.
BUDGET_PES = 4096
BUDGET_BANDWIDTH_BPS = 2.56e10
#: Element type of the captured networks (the preset's int8 datapath).
DTYPE = "int8"
#: Trials per flow and seed (the sequential flow splits them between NAS and hardware), and
#: the seeds. 1000 trials cost about 8 s per flow and seed once the networks are captured.
TRIALS = 1000
SEEDS = (0, 1, 2)
#: Share of the sequential flow's trials spent on NAS (the rest designs the hardware).
NAS_SHARE = 0.5


@dataclass(frozen=True)
class Design:
    """Networks (one table entry name per task), each sub-accelerator's ``(rows, cols,
    dram_bandwidth_Bps)`` and the sub-accelerator of each task."""

    nets: tuple[str, ...]
    hw: tuple[tuple[int, int, float], ...]
    assign: tuple[str, ...]


class Evaluator:
    """Latency, energy, area, budgets and accuracy of :class:`Design` points; every network
    is captured once and every (network, sub-accelerator) pair simulated once."""

    def __init__(self, networks: dict[str, Sequence[str]] | None = None):
        from dse.quality.published import load_table

        self.table = load_table()
        self.tasks = list(TASKS)
        self.choices: dict[str, list[str]] = {}
        for task, model in TASKS.items():
            allowed = [e.name for e in self.table.networks_for(model)]
            chosen = list((networks or {}).get(task, allowed))
            unknown = [n for n in chosen if n not in allowed]
            if unknown or not chosen:
                raise ValueError(f"{task}: networks {unknown or chosen} not among {allowed}")
            self.choices[task] = chosen
        self.entries = {e.name: e for e in self.table.entries}
        self._workloads: dict[str, Any] = {}
        self._runs: dict[tuple, tuple[float, float]] = {}

    def reference_nets(self) -> tuple[str, ...]:
        return tuple(self.table.lookup(model, None).name for model in TASKS.values())

    def top1(self, nets: Sequence[str]) -> list[float]:
        return [self.entries[n].top1_pct for n in nets]

    def sub_accelerator(self, name: str, hw: tuple[int, int, float]):
        """Sub-accelerator ``name`` (its dataflow) of the preset with ``(rows, cols, B/s)``."""
        from accelerators.npu import NPU

        rows, cols, bw = hw
        return NPU(PRESET, dataflow=SUBS[name], rows=rows, cols=cols, dram_bandwidth_Bps=bw)

    def run_alone(self, net: str, sub: str, hw: tuple[int, int, float]) -> tuple[float, float]:
        """(latency_s, dynamic energy_j) of one network alone on one sub-accelerator."""
        key = (net, sub, hw)
        if key not in self._runs:
            from simulators.engine import simulate
            from workloads.build import build_workload

            if net not in self._workloads:
                e = self.entries[net]
                self._workloads[net] = build_workload(e.model, phase="forward", batch=1,
                                                      dtype=DTYPE, arch=e.arch)
            r = simulate(self._workloads[net], self.sub_accelerator(sub, hw))
            self._runs[key] = (r.latency_s, r.energy_j - r.energy_breakdown_j.get("static", 0.0))
        return self._runs[key]

    def metrics(self, d: Design) -> dict[str, float]:
        from accelerators.heterogeneous import Heterogeneous, offchip_bandwidth_Bps, pe_count

        subs = {name: self.sub_accelerator(name, hw) for name, hw in zip(SUBS, d.hw)}
        busy = dict.fromkeys(SUBS, 0.0)
        dynamic_j = 0.0
        for net, sub in zip(d.nets, d.assign):
            latency_s, energy_j = self.run_alone(net, sub, d.hw[list(SUBS).index(sub)])
            busy[sub] += latency_s
            dynamic_j += energy_j
        whole = Heterogeneous(subs)
        makespan_s = max(busy.values())
        top1 = self.top1(d.nets)
        return {"latency_s": makespan_s,
                "energy_j": dynamic_j + whole.static_power_w() * makespan_s,
                "area_mm2": whole.area_mm2(),
                "total_pes": float(sum(pe_count(s) for s in subs.values())),
                "total_bandwidth_Bps": sum(offchip_bandwidth_Bps(s) for s in subs.values()),
                "mean_top1_pct": sum(top1) / len(top1),
                **{f"{t}.top1_pct": v for t, v in zip(self.tasks, top1)}}


@dataclass(frozen=True)
class Specs:
    """Upper bounds on latency (s), energy (J) and area (mm²)."""

    latency_s: float
    energy_j: float
    area_mm2: float

    def violations(self, m: dict[str, float]) -> dict[str, float]:
        """Relative violation of each spec and budget, <= 0 when met (as studies store them)."""
        out = {k: (m[k] - getattr(self, k)) / getattr(self, k)
               for k in ("latency_s", "energy_j", "area_mm2")}
        out["total_pes"] = (m["total_pes"] - BUDGET_PES) / BUDGET_PES
        out["total_bandwidth_Bps"] = (m["total_bandwidth_Bps"] - BUDGET_BANDWIDTH_BPS) \
            / BUDGET_BANDWIDTH_BPS
        return out

    def cost(self, m: dict[str, float]) -> float:
        """Hardware cost of a design relative to the specs (dimensionless)."""
        return m["latency_s"] / self.latency_s + m["energy_j"] / self.energy_j \
            + m["area_mm2"] / self.area_mm2


def reference(ev: Evaluator) -> tuple[Design, dict[str, float]]:
    """The reference design (the preset's sub-accelerators, the zoo's default networks) in
    the one-task-each assignment of lower latency, and its metrics."""
    from accelerators.npu import PRESETS

    p = PRESETS[PRESET]
    hw = tuple((p["rows"], p["cols"], p["dram_bandwidth_Bps"]) for _ in SUBS)
    nets = ev.reference_nets()
    subs = list(SUBS)
    options = [Design(nets, hw, (subs[0], subs[1])), Design(nets, hw, (subs[1], subs[0]))]
    scored = [(ev.metrics(d)["latency_s"], i) for i, d in enumerate(options)]
    best = options[min(scored)[1]]
    return best, ev.metrics(best)


def specs_of(ev: Evaluator, scale: float = 1.0) -> Specs:
    """The reference design's latency, energy and area, each times ``scale`` (1: the
    reproduction's specs; larger values only for the sensitivity benchmark)."""
    _, m = reference(ev)
    return Specs(m["latency_s"] * scale, m["energy_j"] * scale, m["area_mm2"] * scale)


@dataclass
class Record:
    """One evaluated design: its metrics and each spec's and budget's relative violation."""

    design: Design
    metrics: dict[str, float]
    violations: dict[str, float]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())

    @property
    def total_violation(self) -> float:
        return sum(max(v, 0.0) for v in self.violations.values())


def _sample_hw(trial) -> tuple[tuple[tuple[int, int, float], ...], tuple[str, ...]]:
    hw = tuple((trial.suggest_categorical(f"{s}.rows", list(SIDES)),
                trial.suggest_categorical(f"{s}.cols", list(SIDES)),
                trial.suggest_categorical(f"{s}.dram_bandwidth_Bps", list(BANDWIDTHS_BPS)))
               for s in SUBS)
    assign = tuple(trial.suggest_categorical(f"assign.{t}", list(SUBS)) for t in TASKS)
    return hw, assign


def _sample_nets(trial, ev: Evaluator) -> tuple[str, ...]:
    return tuple(trial.suggest_categorical(f"net.{t}", ev.choices[t]) for t in ev.tasks)


def _optimize(direction: str, seed: int, trials: int, fn) -> Any:
    """``trials`` trials of Optuna's multivariate TPE (seeded) on ``fn(trial) -> float``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
        study = optuna.create_study(direction=direction, sampler=sampler)
        study.optimize(fn, n_trials=trials)
    return study


def _search(ev: Evaluator, specs: Specs, trials: int, seed: int, direction: str,
            sample, objective, best_feasible) -> Record:
    """Search ``sample(trial) -> Design`` for ``objective(record)``, specs and budgets as the
    trials' constraints; the feasible record ``best_feasible`` ranks lowest, or, when none is
    feasible, the one that violates the specs least (ties: lowest cost)."""
    records: list[Record] = []

    def evaluate(trial) -> float:
        d = sample(trial)
        m = ev.metrics(d)
        rec = Record(d, m, specs.violations(m))
        for k, v in rec.violations.items():
            trial.set_constraint(k, v)
        records.append(rec)
        return objective(rec)

    _optimize(direction, seed, trials, evaluate)
    feasible = [r for r in records if r.feasible]
    if feasible:
        return min(feasible, key=best_feasible)
    return min(records, key=lambda r: (r.total_violation, specs.cost(r.metrics)))


def co_exploration(ev: Evaluator, specs: Specs, trials: int, seed: int) -> Record:
    """One search of networks and hardware: the highest mean top-1 under the specs (ties:
    the lowest cost)."""
    return _search(ev, specs, trials, seed, "maximize",
                   lambda t: Design(_sample_nets(t, ev), *_sample_hw(t)),
                   lambda r: r.metrics["mean_top1_pct"],
                   lambda r: (-r.metrics["mean_top1_pct"], specs.cost(r.metrics)))


def sequential(ev: Evaluator, specs: Specs, trials: int, seed: int) -> Record:
    """NAS for accuracy alone (hardware-blind), then the lowest-cost hardware for the networks
    it found under the specs and budgets."""
    nas_trials = max(1, round(trials * NAS_SHARE))
    nas = _optimize("maximize", seed, nas_trials,
                    lambda t: sum(ev.top1(_sample_nets(t, ev))) / len(ev.tasks))
    nets = tuple(nas.best_params[f"net.{t}"] for t in ev.tasks)
    cost = lambda r: specs.cost(r.metrics)  # noqa: E731
    return _search(ev, specs, max(1, trials - nas_trials), seed, "minimize",
                   lambda t: Design(nets, *_sample_hw(t)), cost, cost)


def describe(rec: Record) -> str:
    d = rec.design
    hw = ", ".join(f"{s} {r}x{c} {bw / 1e9:g} GB/s" for s, (r, c, bw) in zip(SUBS, d.hw))
    nets = ", ".join(f"{n} on {s}" for n, s in zip(d.nets, d.assign))
    m = rec.metrics
    return (f"{nets}; {hw}: {m['latency_s'] * 1e3:.2f} ms, {m['energy_j'] * 1e3:.2f} mJ, "
            f"{m['area_mm2']:.2f} mm², top-1 {m['mean_top1_pct']:.2f} %"
            + ("" if rec.feasible else " (violates the specs)"))


def run(trials: int | None = None, seeds: Sequence[int] | None = None,
        networks: dict[str, Sequence[str]] | None = None, spec_scale: float = 1.0,
        ev: Evaluator | None = None) -> dict[str, Any]:
    """Both flows on every seed (default :data:`TRIALS`, :data:`SEEDS`); ``networks``
    restricts each task's choices (table entry names); ``spec_scale`` loosens the specs
    (:func:`specs_of`); ``ev`` reuses an evaluator's captures and simulations."""
    trials = trials or TRIALS
    seeds = SEEDS if seeds is None else seeds
    ev = ev or Evaluator(networks)
    specs = specs_of(ev, spec_scale)
    per_seed = []
    for seed in seeds:
        seq, co = sequential(ev, specs, trials, seed), co_exploration(ev, specs, trials, seed)
        s, c = seq.metrics, co.metrics
        per_seed.append({"seed": seed, "sequential": seq, "co": co,
                         "latency": c["latency_s"] / s["latency_s"],
                         "energy": s["energy_j"] / c["energy_j"],
                         "area": s["area_mm2"] / c["area_mm2"],
                         "accuracy_loss_pp": s["mean_top1_pct"] - c["mean_top1_pct"]})
    return {"specs": specs, "trials": trials, "per_seed": per_seed}


def rows(trials: int | None = None, seeds: Sequence[int] | None = None,
         networks: dict[str, Sequence[str]] | None = None) -> list[Row]:
    """The reproduction's rows (see the module docstring); arguments as :func:`run`."""
    out = run(trials, seeds, networks)
    trials = out["trials"]
    specs, runs = out["specs"], out["per_seed"]
    n = len(runs)
    spec_text = (f"specs (the reference design): latency <= {specs.latency_s * 1e3:.3f} ms, "
                 f"energy <= {specs.energy_j * 1e3:.3f} mJ, area <= {specs.area_mm2:.3f} mm²"
                 f"; {trials} trials per flow, seeds {', '.join(str(r['seed']) for r in runs)}")
    seq_text = "; ".join(f"seed {r['seed']}: {describe(r['sequential'])}" for r in runs)
    co_text = "; ".join(f"seed {r['seed']}: {describe(r['co'])}" for r in runs)

    def mean(key: str) -> float:
        return sum(r[key] for r in runs) / n

    def values(key: str) -> str:
        return "per seed " + ", ".join(f"{r[key]:.3f}" for r in runs)

    return [
        Row("sequential flow (NAS, then ASIC) violates the specs: share of seeds", 1.0,
            sum(not r["sequential"].feasible for r in runs) / n, f"{spec_text}. {seq_text}"),
        Row("co-exploration meets the specs: share of seeds", 1.0,
            sum(r["co"].feasible for r in runs) / n, co_text),
        Row("latency, co-exploration / sequential (17.77 % lower)", PAPER["latency"],
            mean("latency"), values("latency")),
        Row("energy, sequential / co-exploration", PAPER["energy"], mean("energy"),
            values("energy")),
        Row("area, sequential / co-exploration", PAPER["area"], mean("area"), values("area")),
        Row("accuracy loss of co-exploration, mean top-1 over the tasks, percentage points",
            PAPER["accuracy_loss_pp"], mean("accuracy_loss_pp"), values("accuracy_loss_pp")),
    ]


__all__ = ["PAPER", "Design", "Evaluator", "Specs", "co_exploration", "reference", "rows",
           "run", "sequential", "specs_of"]
