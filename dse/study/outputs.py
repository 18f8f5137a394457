"""``trials.csv`` (every trial) and ``pareto.csv`` (feasible Pareto-optimal trials only).

Columns: ``number``, ``state`` (COMPLETE, PRUNED = infeasible design, FAIL, RUNNING),
``feasible``, ``reason`` (why infeasible or failed: the design's reason, or each violated
constraint with the metric's value and by how much), ``duration_s``, then every design
parameter (``design``, ``hw.*``, ``arch.*``, ``assign.*``: the searched ones under their
Optuna names plus the fixed ones and the preset's), ``quality_source`` (``WORKLOAD.
quality_source`` with several workloads: the proxy or published table entry that rated the
trial), every metric (the objectives first), each constraint's relative violation
(``violation:latency_s<=0.02``), and ``simulator_version``.
Rows are in trial order; files are written atomically (temporary file + rename).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

from optuna.trial import FrozenTrial, TrialState

from dse.quality import source_text
from dse.files import atomic_open
from dse.study.loader import ResolvedStudy
from dse.study.objectives import METRICS, Constraint
from dse.study.pareto import ParetoFront, first_of_each_design
from dse.study.progress import is_feasible


def design_columns(t: FrozenTrial, resolved: ResolvedStudy) -> dict[str, Any]:
    """The trial's design flattened to Optuna-style names (``hw.rows``, ``arch.n_layer``)."""
    d = t.user_attrs.get("design") or {}
    out: dict[str, Any] = {}
    many_designs = len(resolved.space.designs) > 1
    many_workloads = len(resolved.space.workloads) > 1
    if "design" in d:
        out["design"] = d["design"]
    for name, info in (d.get("designs") or {}).items():
        for k, v in (info.get("hw") or {}).items():
            out[f"hw.{name}.{k}" if many_designs else f"hw.{k}"] = v
    for w, arch in (d.get("arch") or {}).items():
        for k, v in arch.items():
            out[f"arch.{w}.{k}" if many_workloads else f"arch.{k}"] = v
    for w, subs in (d.get("assign") or {}).items():
        for i, s in enumerate(subs):
            out[f"assign.{w}.{i}"] = s
    for k, v in ((d.get("system") or {}).get("sys") or {}).items():
        out[f"sys.{k}"] = v
    for k, v in (d.get("parallel") or {}).items():
        out[f"par.{k}"] = v
    for w, q in (d.get("quality") or {}).items():  # which quality source rated the trial
        prefix = f"{w}." if many_workloads else ""
        out[f"{prefix}quality_source"] = source_text(q)
    for k, v in t.params.items():  # searched values, also when the design attr is missing
        out.setdefault(k, v)
    return out


def constraint_values(t: FrozenTrial, resolved: ResolvedStudy) -> dict[str, float]:
    """The trial's relative constraint violations by label: stored as Optuna's list (in the
    study's order) or, by studies of earlier versions, by name (``set_constraint``)."""
    stored = t.constraints
    labels = [c.label for c in resolved.constraints]
    return {label: stored.get(str(i), stored.get(label)) for i, label in enumerate(labels)
            if str(i) in stored or label in stored}


def violation_text(c: Constraint, value: float | None, violation: float) -> str:
    """``latency_s<=0.003: latency_s = 0.00412, 37% over``."""
    side = "over" if c.op in ("<=", "<") else "under"
    shown = f"{value:.4g}" if isinstance(value, (int, float)) else "not computed"
    return f"{c.label}: {c.metric} = {shown}, {abs(violation):.0%} {side}"


def infeasible_reason(t: FrozenTrial, resolved: ResolvedStudy) -> str:
    """Why a trial is not feasible ("" when it is, or when it did not finish)."""
    reason = t.user_attrs.get("infeasible_reason") or t.user_attrs.get("fail_reason") or ""
    if reason or t.state != TrialState.COMPLETE:
        return reason
    values = constraint_values(t, resolved)
    metrics = t.user_attrs.get("metrics") or {}
    broken = [violation_text(c, metrics.get(c.metric), values[c.label])
              for c in resolved.constraints if values.get(c.label, 0) > 0]
    return ("violates " + "; ".join(broken)) if broken else ""


def pareto_numbers(trials: Sequence[FrozenTrial], resolved: ResolvedStudy) -> list[int]:
    """Numbers of the feasible trials no other feasible trial dominates, one per design (the
    first trial of a design evaluated several times: :func:`first_of_each_design`). With
    ``fidelity: multi`` only the event-simulated (confirmed) trials compete: a fast-path
    point is a lower bound on latency and would otherwise shadow its own confirmation."""
    front = ParetoFront([o.sign for o in resolved.objectives])
    multi = resolved.spec.fidelity == "multi"
    for t in first_of_each_design(
            [t for t in trials if is_feasible(t)
             and (not multi or t.user_attrs.get("fidelity", "event") == "event")]):
        front.add(t.number, t.values)
    return front.keys()


def rows(trials: Sequence[FrozenTrial], resolved: ResolvedStudy) -> tuple[list[str], list[dict]]:
    """Column names and one row per trial."""
    objective_metrics = [o.metric for o in resolved.objectives]
    out = []
    design_keys: dict[str, None] = {}
    metric_keys: dict[str, None] = {m: None for m in objective_metrics}
    for m in METRICS:
        metric_keys.setdefault(m, None)
    extra_metrics: set[str] = set()
    for t in trials:
        design = design_columns(t, resolved)
        for k in design:
            design_keys.setdefault(k, None)
        metrics = t.user_attrs.get("metrics") or {}
        extra_metrics.update(k for k in metrics if k not in metric_keys)
        reason = infeasible_reason(t, resolved)
        duration = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else ""
        row = {"number": t.number, "state": t.state.name, "feasible": is_feasible(t),
               "reason": reason, "duration_s": duration, **design, **metrics,
               "simulator_version": t.user_attrs.get("simulator_version", ""),
               "fidelity": t.user_attrs.get("fidelity", ""),
               "confirms": t.user_attrs.get("confirms", "")}
        for label, v in constraint_values(t, resolved).items():
            row[f"violation:{label}"] = v
        out.append(row)
    for m in sorted(extra_metrics):
        metric_keys.setdefault(m, None)
    present_metrics = [m for m in metric_keys if any(m in r for r in out)] or objective_metrics
    columns = (["number", "state", "feasible", "reason", "duration_s"] + list(design_keys)
               + present_metrics + [f"violation:{c.label}" for c in resolved.constraints]
               + ["simulator_version", "fidelity", "confirms"])
    return columns, out


def _write_csv(path: Path, columns: list[str], data: list[dict]) -> None:
    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f)   # a DictWriter's rows, written as lists (a third of its time)
        w.writerow(columns)
        w.writerows([["" if (v := r.get(k)) is None else v for k in columns] for r in data])


def write_outputs(trials: Sequence[FrozenTrial], resolved: ResolvedStudy,
                  out_dir: Path) -> tuple[Path, Path, list[int]]:
    """Write ``trials.csv`` and ``pareto.csv`` into ``out_dir``; return their paths and the
    Pareto trial numbers."""
    trials = sorted(trials, key=lambda t: t.number)
    columns, data = rows(trials, resolved)
    front = set(pareto_numbers(trials, resolved))
    trials_path = out_dir / "trials.csv"
    pareto_path = out_dir / "pareto.csv"
    _write_csv(trials_path, columns, data)
    _write_csv(pareto_path, columns, [r for r in data if r["number"] in front])
    return trials_path, pareto_path, sorted(front)


def outcome_counts(trials: Sequence[FrozenTrial]) -> dict[str, int]:
    """``evaluated`` (COMPLETE or PRUNED) = ``feasible`` + ``infeasible``, the latter split in
    ``cannot_run`` (PRUNED) and ``violates_constraints`` (COMPLETE, a constraint > 0); and
    ``failed`` (FAIL, re-asked) and ``running``."""
    out = dict.fromkeys(("evaluated", "feasible", "infeasible", "cannot_run",
                         "violates_constraints", "failed", "running"), 0)
    for t in trials:
        if t.state == TrialState.COMPLETE:
            key = "feasible" if is_feasible(t) else "violates_constraints"
        else:
            key = {TrialState.PRUNED: "cannot_run", TrialState.FAIL: "failed"}.get(t.state,
                                                                                 "running")
        out[key] += 1
    out["infeasible"] = out["cannot_run"] + out["violates_constraints"]
    out["evaluated"] = out["feasible"] + out["infeasible"]
    return out


def state_counts(trials: Sequence[FrozenTrial]) -> dict[str, int]:
    out = {s.name: 0 for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                               TrialState.RUNNING, TrialState.WAITING)}
    for t in trials:
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def unmet_constraints(trials: Sequence[FrozenTrial], resolved: ResolvedStudy) -> list[str]:
    """Why a study has no feasible design, one line each (empty when one is feasible): each
    constraint no evaluated design met, with the closest design's value and by how much; or,
    when each was met by some design, the design closest to meeting all of them (least
    summed violation) and what it breaks; or, when no design ran, the commonest reason."""
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    if any(is_feasible(t) for t in done):
        return []
    if not done:
        reasons: dict[str, int] = {}
        for t in trials:
            r = t.user_attrs.get("infeasible_reason") or t.user_attrs.get("fail_reason")
            if r:
                reasons[r] = reasons.get(r, 0) + 1
        if not reasons:
            return []
        r, n = max(reasons.items(), key=lambda kv: kv[1])
        return [f"no design could run; the commonest reason ({n} of {len(trials)}): {r}"]
    values = {t.number: constraint_values(t, resolved) for t in done}
    out = []
    for c in resolved.constraints:
        got = [(v[c.label], t) for t in done if (v := values[t.number]).get(c.label) is not None]
        if not got:
            continue
        least, t = min(got, key=lambda vt: vt[0])
        if least > 0:
            metric = (t.user_attrs.get("metrics") or {}).get(c.metric)
            out.append(f"{c.label} cannot be met by the designs tried: the closest, trial "
                       f"{t.number}, has {violation_text(c, metric, least).split(': ', 1)[1]}")
    if not out:
        t = min(done, key=lambda t: sum(max(v, 0.0) for v in values[t.number].values()))
        out.append(f"each constraint was met by some design but none met all; the closest, "
                   f"trial {t.number}, {infeasible_reason(t, resolved)}")
    return out
