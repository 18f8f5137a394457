"""Read a study from its Optuna storage into plain rows the report can plot.

What the report expects in the storage (the contract with ``dse/study``):

* objectives: ``study.metric_names`` (``set_metric_names``); else a study user attr
  ``objectives`` (``{metric: direction}``, names, or ``{"metric": ...}`` dicts); else
  ``objective_i``.
* constraints, for drawing thresholds: study user attr ``constraints``, a list of labels
  ``"KEY<=V"`` / ``"KEY>=V"`` (what ``dse.study`` writes), of ``{"metric": KEY, "max": V}`` /
  ``{"metric": KEY, "min": V}``, or a dict ``{KEY: {"max": V}}``; failing that, constraint names of the form ``KEY<=V`` / ``KEY>=V``.
  Per-trial feasibility from the trial's Optuna constraints (``trial.set_constraint``, system
  attrs ``constraints:NAME``; or the older ``constraints_func`` list): feasible when every value
  is <= 0; else from the thresholds; else infeasible when a user attr ``infeasible_reason`` is set.
* metrics: numeric trial user attrs (and a nested ``metrics`` dict, if any).
* the design, for re-simulating Pareto designs (:mod:`dse.report.resimulate`): trial user
  attr ``design`` as ``dse.study`` writes it (``{"designs": {NAME: {"template", "preset",
  "hw"}}, "arch": {WORKLOAD: {...}}, "assign": ..., "design": NAME}``, the workloads from the
  study user attr ``dse_spec``), or self-contained: ``{"accelerator": "template[:preset]",
  "hw": {...}, "workloads": [{"model", "phase", "batch", "seq", "context", "dtype", "arch"}]}``.
* trials that could not run: any state but COMPLETE (``dse.study``: PRUNED = infeasible design
  with ``infeasible_reason``, FAIL with ``fail_reason``), or COMPLETE with a non-finite
  objective value.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import BadInput, first_line, redact_url

#: Default storage file of a study output directory [R dse/study: ``study.db`` in the out dir].
STUDY_DB = "study.db"
#: File naming the storage of a study that ran elsewhere [R dse/study/driver.py STORAGE_NOTE].
STORAGE_NOTE = "storage.txt"

#: User-attr keys read as the reason a design is infeasible or could not run, first found wins.
REASON_KEYS = ("infeasible_reason", "fail_reason", "infeasible", "error", "reason")

#: Rows compared at once in the dominance test (memory: n x chunk x objectives booleans) [E].
PARETO_CHUNK = 512

#: A serving study's headline metrics [R dse/study/objectives.py SERVING_METRICS]: listed
#: after the objectives, and each objective is also plotted against them.
SERVING_KEYS = ("ttft_p99_s", "tpot_p99_s", "throughput_tok_s", "cost_per_mtok_usd")

#: Trial statuses, as shown in the report.
PARETO, DOMINATED, INFEASIBLE, FAILED = "Pareto", "dominated", "infeasible", "could not run"


@dataclass(frozen=True)
class Constraint:
    """``metric <= max`` and/or ``metric >= min``."""

    metric: str
    max: float | None = None
    min: float | None = None

    def ok(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return (self.max is None or value <= self.max) and (self.min is None or value >= self.min)

    def label(self, fmt_value=None) -> str:
        f = fmt_value or (lambda v: f"{v:g}")
        parts = []
        if self.min is not None:
            parts.append(f"{self.metric} ≥ {f(self.min)}")
        if self.max is not None:
            parts.append(f"{self.metric} ≤ {f(self.max)}")
        return " and ".join(parts)


@dataclass
class TrialRow:
    """One trial: its objective and metric values (by key), params, status and reason."""

    number: int
    state: str
    values: dict[str, float]
    params: dict[str, Any]
    status: str = FAILED
    reason: str | None = None
    violations: list[str] = field(default_factory=list)
    design: dict[str, Any] | None = None
    fidelity: str = "event"   # which simulator produced the metrics: event, or fast (screening)


@dataclass
class StudyData:
    """A study as the report sees it."""

    name: str
    objectives: list[str]
    directions: list[str]          # "minimize" / "maximize", one per objective
    constraints: list[Constraint]
    trials: list[TrialRow]
    param_units: dict[str, str]
    user_attrs: dict[str, Any]
    storage: str = ""
    metric_units: dict[str, str] = field(default_factory=dict)
    simulator_versions: list[str] = field(default_factory=list)

    @property
    def plotted(self) -> list[TrialRow]:
        """Trials with finite objective values (Pareto, dominated or infeasible)."""
        return [t for t in self.trials if t.status != FAILED]

    @property
    def pareto(self) -> list[TrialRow]:
        """Pareto designs, best first on the first objective."""
        sign = 1 if self.directions[0] == "minimize" else -1
        return sorted((t for t in self.trials if t.status == PARETO),
                      key=lambda t: (sign * t.values[self.objectives[0]], t.number))

    @property
    def metric_keys(self) -> list[str]:
        """Objectives first, then the constrained metrics (a single-objective study plots
        its objective against them: a serving study's p99 TTFT and TPOT), then a serving
        study's :data:`SERVING_KEYS`, then every other metric any plotted trial has, sorted."""
        present = {k for t in self.plotted for k in t.values}
        first = list(dict.fromkeys(list(self.objectives) + [
            c.metric for c in self.constraints if c.metric in present]
            + [k for k in SERVING_KEYS if k in present]))
        return first + sorted(present - set(first))

    @property
    def param_keys(self) -> list[str]:
        return sorted({k for t in self.trials for k in t.params})

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in (PARETO, DOMINATED, INFEASIBLE, FAILED)}
        for t in self.trials:
            out[t.status] += 1
        return out


# ----------------------------------------------------------------------------- opening
redact = redact_url  # a storage URL without its password, fit to print


def storage_url(source: str | Path) -> str:
    """An Optuna storage URL from a URL, a study output directory or a ``.db`` file."""
    text = str(source)
    if "://" in text:
        return text
    path = Path(text)
    if path.is_dir():
        db = path / STUDY_DB
        note = path / STORAGE_NOTE
        if not db.is_file() and note.is_file():
            where = note.read_text(errors="replace").strip()[:200]
            raise BadInput("DIR", text, f"expected {STUDY_DB}: this study ran in the storage "
                           f"{where}; pass --storage with that URL (and its password)")
        if not db.is_file():
            raise BadInput("DIR", text, f"expected a study output directory holding {STUDY_DB}")
        return f"sqlite:///{db.resolve()}"
    if path.is_file():
        return f"sqlite:///{path.resolve()}"
    raise BadInput("DIR", text, "expected a study output directory, a .db file or a storage URL")


def open_study(source: Any, study_name: str | None = None):
    """The ``optuna.Study`` of ``source`` (a study, a storage URL, a directory or a .db file).

    ``study_name`` may be left out when the storage holds exactly one study.
    """
    import optuna
    if isinstance(source, optuna.Study):
        return source
    url = storage_url(source)
    try:
        names = optuna.get_all_study_names(storage=url)
    except Exception as exc:  # unreachable database, bad URL, not an Optuna database
        raise BadInput("--storage", redact(url), "expected a readable Optuna storage ("
                       + first_line(exc) + ")") from None
    if not names:
        raise BadInput("--storage", redact(url), "expected a storage holding a study (it holds none)")
    if study_name is None:
        if len(names) > 1:
            raise BadInput("--study", None, "the storage holds several studies; pick one of "
                           + ", ".join(names))
        study_name = names[0]
    if study_name not in names:
        raise BadInput("--study", study_name, "expected one of " + ", ".join(names))
    return optuna.load_study(study_name=study_name, storage=url)


# ----------------------------------------------------------------------------- reading
def _objectives(study) -> tuple[list[str], list[str]]:
    dirs = [d.name.lower() for d in study.directions]
    names = getattr(study, "metric_names", None)
    if not names:
        attr = study.user_attrs.get("objectives")
        if isinstance(attr, dict) and len(attr) == len(dirs):  # {metric: direction}, in order
            names = list(attr)
        elif isinstance(attr, list) and len(attr) == len(dirs):
            names = [a.get("metric") or a.get("name") if isinstance(a, dict) else str(a) for a in attr]
    if not names or len(names) != len(dirs) or any(not n for n in names):
        names = [f"objective_{i}" for i in range(len(dirs))]
    return [str(n) for n in names], dirs


def _constraints(attr: Any) -> list[Constraint]:
    out: list[Constraint] = []
    items: list[tuple[str, dict]] = []
    if isinstance(attr, dict):
        items = [(k, v) for k, v in attr.items() if isinstance(v, dict)]
    elif isinstance(attr, list):
        items = [(c.get("metric"), c) for c in attr if isinstance(c, dict) and c.get("metric")]
        for c in attr:  # labels such as "latency_s<=0.02" (what dse.study writes)
            m = _BOUND_NAME.match(c) if isinstance(c, str) else None
            if m:
                op = "max" if m.group(2) in ("<=", "≤") else "min"
                items.append((m.group(1), {op: float(m.group(3))}))
    for metric, spec in items:
        hi = spec.get("max", spec.get("le", spec.get("<=")))
        lo = spec.get("min", spec.get("ge", spec.get(">=")))
        try:
            hi = float(hi) if hi is not None else None
            lo = float(lo) if lo is not None else None
        except (TypeError, ValueError):
            continue
        if hi is not None or lo is not None:
            out.append(Constraint(str(metric), hi, lo))
    return out


def trial_constraints(trial) -> dict[str, float]:
    """A trial's constraint values by name (feasible when all <= 0): Optuna 5's
    ``set_constraint`` (system attrs ``constraints:NAME``) or the older ``constraints_func``
    list (system attr ``constraints``, named by position)."""
    out: dict[str, float] = {}
    for k, v in trial.system_attrs.items():
        if k.startswith("constraints:") and _number(v) is not None:
            out[k[len("constraints:"):]] = float(v)
    legacy = trial.system_attrs.get("constraints")
    if isinstance(legacy, (list, tuple)):
        out.update({str(i): float(v) for i, v in enumerate(legacy) if _number(v) is not None})
    return out


#: A constraint name that states its threshold: ``latency_s<=0.01``, ``area_mm2 >= 1``.
_BOUND_NAME = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|≤|≥|<|>)\s*([-+0-9.eE]+)\s*$")


def _constraints_from_keys(trials) -> list[Constraint]:
    """Thresholds from constraint names of the form ``metric<=value`` (when the study does
    not list its constraints as a user attr)."""
    for t in trials:
        names = trial_constraints(t)
        if not names:
            continue
        out = []
        for name in names:
            m = _BOUND_NAME.match(name)
            if m:
                metric, op, value = m.group(1), m.group(2), float(m.group(3))
                out.append(Constraint(metric, max=value) if op in ("<=", "≤", "<")
                           else Constraint(metric, min=value))
        return out
    return []


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _metrics(user_attrs: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    nested = user_attrs.get("metrics")
    for source in (nested if isinstance(nested, dict) else {}, user_attrs):
        for k, v in source.items():
            x = _number(v)
            if x is not None and math.isfinite(x):
                out.setdefault(str(k), x)
    return out


def _design(user_attrs: dict[str, Any]) -> dict[str, Any] | None:
    d = user_attrs.get("design")
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except ValueError:
            return None
    return d if isinstance(d, dict) else None


def _reason(trial) -> str | None:
    for k in REASON_KEYS:
        v = trial.user_attrs.get(k)
        if isinstance(v, str) and v:
            return v
    v = trial.system_attrs.get("fail_reason")
    return str(v) if v else None


def read_study(study, storage: str = "") -> StudyData:
    """Every trial of ``study`` as a :class:`TrialRow`, with statuses and the Pareto set."""
    objectives, directions = _objectives(study)
    try:
        trials = study.get_trials(deepcopy=False)
    except Exception as exc:  # a storage written by other code: rows Optuna cannot read back
        raise BadInput("--storage", storage or study.study_name, "expected trials Optuna can read "
                       f"back ({type(exc).__name__}: {first_line(exc)})") from None
    constraints = _constraints(study.user_attrs.get("constraints")) or _constraints_from_keys(trials)
    rows: list[TrialRow] = []
    units: dict[str, set[str]] = {}  # metric -> units the trials stored as "<metric>_unit"
    versions: set[str] = set()
    for t in trials:
        values = _metrics(t.user_attrs)
        state = t.state.name
        row = TrialRow(number=t.number, state=state, values=values, params=dict(t.params),
                       design=_design(t.user_attrs), reason=_reason(t),
                       fidelity=str(t.user_attrs.get("fidelity", "event")))
        finite = (state == "COMPLETE" and t.values is not None
                  and all(v is not None and math.isfinite(v) for v in t.values))
        if finite:
            for name, v in zip(objectives, t.values):
                values[name] = float(v)
            row.violations = [c.label() for c in constraints if not c.ok(values.get(c.metric))
                              and c.metric in values]
            stored = trial_constraints(t)
            if stored:
                feasible = all(v <= 0 for v in stored.values())
            elif constraints:
                feasible = not row.violations
            else:
                feasible = row.reason is None
            row.status = DOMINATED if feasible else INFEASIBLE
            if not feasible and row.reason is None and row.violations:
                row.reason = "violates " + "; ".join(row.violations)
        else:
            row.status = FAILED
            if row.reason is None:
                row.reason = "no objective values" if state == "COMPLETE" else f"trial {state.lower()}"
        rows.append(row)
        if isinstance(t.user_attrs.get("simulator_version"), str):
            versions.add(t.user_attrs["simulator_version"])
        for k, v in t.user_attrs.items():
            if k.endswith("_unit") and isinstance(v, str):
                units.setdefault(k[: -len("_unit")], set()).add(v)
    spec = study.user_attrs.get("dse_spec")
    multi = isinstance(spec, dict) and spec.get("fidelity") == "multi"
    # with fidelity: multi the front is over confirmed (event-simulated) trials, as in pareto.csv
    mark_pareto([r for r in rows if not multi or r.fidelity == "event"], objectives, directions)
    if "throughput" not in units:
        unit = _throughput_unit(spec)
        if unit:
            units["throughput"] = {unit}
    return StudyData(name=study.study_name, objectives=objectives, directions=directions,
                     constraints=constraints, trials=rows, param_units=_param_units(rows),
                     user_attrs=dict(study.user_attrs), storage=storage,
                     metric_units={k: v.pop() for k, v in units.items() if len(v) == 1},
                     simulator_versions=sorted(versions))


def _throughput_unit(spec: Any) -> str | None:
    """What ``throughput`` counts in a ``dse.study`` spec [R dse/study/objectives.py]: tokens/s
    for one LLM workload (prefill or decode), samples/s for one other, multi-task steps/s for
    several."""
    workloads = spec.get("workloads") if isinstance(spec, dict) else None
    if not workloads:
        return None
    if len(workloads) > 1:
        return "steps/s"
    phase = workloads[0].get("phase")
    if phase is None:  # the model's first phase
        try:
            from workloads.zoo import get_model
            phase = get_model(workloads[0]["model"]).phases[0]
        except Exception:  # unknown model here: leave the unit open
            return None
    return "tokens/s" if phase in ("prefill", "decode") else "samples/s"


def mark_pareto(rows: list[TrialRow], objectives: list[str], directions: list[str]) -> None:
    """Set ``status = PARETO`` on the feasible rows no other feasible row dominates."""
    import numpy as np
    feas = [r for r in rows if r.status == DOMINATED]
    if not feas:
        return
    sign = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    a = np.array([[r.values[o] for o in objectives] for r in feas]) * sign  # minimise all
    dominated = np.zeros(len(feas), dtype=bool)
    for lo in range(0, len(feas), PARETO_CHUNK):
        b = a[lo:lo + PARETO_CHUNK]
        le = (a[:, None, :] <= b[None, :, :]).all(axis=2)  # le[j, i]: j no worse than i anywhere
        lt = (a[:, None, :] < b[None, :, :]).any(axis=2)   # lt[j, i]: j better than i somewhere
        dominated[lo:lo + PARETO_CHUNK] = (le & lt).any(axis=0)
    for r, d in zip(feas, dominated):
        if not d:
            r.status = PARETO


def _param_units(rows: list[TrialRow]) -> dict[str, str]:
    """Units of parameters from the design's template (``hw.rows``, ``hw.NAME.rows`` or
    ``rows`` -> its Param), else from the key's suffix."""
    from dse.report.units import unit_of
    template_units: dict[str, str] = {}
    for r in rows:
        spec = (r.design or {}).get("accelerator")
        if isinstance(spec, str):
            try:
                from accelerators.registry import get_template
                template_units = {p.name: p.unit for p in get_template(spec.split(":")[0]).PARAMS}
            except Exception:  # template not registered here: fall back to key suffixes
                template_units = {}
            break
    keys = {k for r in rows for k in r.params}
    out = {}
    for k in keys:
        short = k.rsplit(".", 1)[-1] if k.startswith("hw.") else k
        out[k] = template_units.get(short) or unit_of(k)
    return out
