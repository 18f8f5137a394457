"""The search space: Optuna dimensions built from templates' ``Param``s and the zoo's
architecture defaults, and the ranges a study file writes for them.

A range in ``search.hardware`` / ``search.architecture`` is one of:

* ``null`` (or ``default``): the parameter's declared range (``Param.low``/``high``/``log``/
  ``step``, or its ``choices``); architecture keys declare choices only where the zoo lists
  ``arch_choices`` (and bools), so integer/float keys need an explicit range;
* a value: fixed (not searched);
* ``[low, high]`` for numbers (log scale and step as declared); three or more numbers, or any
  list for a categorical parameter, are the choices;
* ``{low, high, log, step}`` or ``{choices: [...]}``.

Ranges must lie inside the declared range. Nothing here is specific to one template: a template
added to the registry is searchable as soon as its ``PARAMS`` exist.

Optuna parameter names: ``hw.PARAM`` (``hw.NAME.PARAM`` with several accelerators),
``arch.KEY`` (``arch.WORKLOAD.KEY`` with several workloads), ``design`` (which alternative of
``accelerators``), ``assign.WORKLOAD.SEGMENT`` (which sub-accelerator runs a segment),
``sys.PARAM`` and ``par.KEY`` (a system's parameters and parallel layout).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution)

from dse.errors import BadInput

_RANGE_KEYS = ("low", "high", "log", "step", "choices")
_KIND_WORDS = {int: "an int", float: "a number", bool: "a bool", str: "a string"}


class Shown:
    """A value shown in an error message as YAML/JSON writes it (``"abc"``, ``[8, 1024]``)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        if self.value is _NOTHING:
            return "nothing"
        try:
            return json.dumps(self.value, default=str)
        except (TypeError, ValueError):  # e.g. a circular YAML alias
            return repr(self.value)


_NOTHING = object()


def bad(field_path: str, value: Any, allowed: str) -> BadInput:
    """A :class:`BadInput` whose value prints as YAML would write it."""
    return BadInput(field_path, Shown(value), allowed)


@dataclass(frozen=True)
class Target:
    """What a searchable key allows: its type, declared range or choices, and a ``check`` that
    coerces one value (raising :class:`BadInput`)."""

    key: str
    type: type
    unit: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    log: bool = False
    step: float | None = None
    check: Callable[[Any], Any] = lambda v: v
    owner: str = ""

    @property
    def categorical(self) -> bool:
        return self.choices is not None or self.type in (bool, str)

    def range_words(self) -> str:
        """``an int range like [4, 1024]``."""
        lo = self.low if self.low is not None else 1
        hi = self.high if self.high is not None else (64 if self.type is int else 1.0)
        if self.type is int:
            return f"an int range like [{int(lo)}, {int(hi)}]"
        return f"a number range like [{lo:g}, {hi:g}]"

    def choice_words(self) -> str:
        if self.choices is not None:
            return "a list of choices from " + json.dumps(list(self.choices))
        if self.type is bool:
            return "a list of choices from [false, true]"
        return "a list of choices (strings)"


@dataclass(frozen=True)
class Dimension:
    """One searched parameter."""

    name: str
    field: str
    kind: str  # "int" | "float" | "categorical"
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple = ()
    condition: tuple[str, Any] | None = None

    def distribution(self) -> BaseDistribution:
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log,
                                   step=int(self.step or 1))
        if self.kind == "float":
            return FloatDistribution(float(self.low), float(self.high), log=self.log,
                                     step=self.step)
        return CategoricalDistribution(list(self.choices))

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        if self.kind == "float":
            return trial.suggest_float(self.name, float(self.low), float(self.high),
                                       step=self.step, log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))

    def grid(self, points: int) -> list:
        """Values a grid search visits: every int step (or ``points`` log/linear points when
        there are more), ``points`` floats unless a step is given, every choice."""
        if self.kind == "categorical":
            return list(self.choices)
        lo, hi = float(self.low), float(self.high)
        if self.kind == "int":
            every = range(int(lo), int(hi) + 1, int(self.step or 1))
            if len(every) <= max(points, 2) or self.step:
                return list(every)
            vals = _spread(lo, hi, points, self.log)
            return sorted({int(round(v)) for v in vals})
        if self.step:
            return [lo + i * self.step for i in range(self._float_steps() + 1)]
        return _spread(lo, hi, points, self.log)

    def grid_size(self, points: int) -> int:
        """``len(self.grid(points))``, without building a long grid."""
        if self.kind == "int" and self.step:
            return len(range(int(self.low), int(self.high) + 1, int(self.step)))
        if self.kind == "float" and self.step:
            return self._float_steps() + 1
        return len(self.grid(points))

    def _float_steps(self) -> int:
        return int(math.floor((float(self.high) - float(self.low)) / self.step + 1e-9))


def _spread(lo: float, hi: float, points: int, log: bool) -> list[float]:
    if log:
        a, b = math.log(lo), math.log(hi)
        return [math.exp(a + (b - a) * i / (points - 1)) for i in range(points)]
    return [lo + (hi - lo) * i / (points - 1) for i in range(points)]


@dataclass(frozen=True)
class Fixed:
    """A key the study file fixes to one value."""

    value: Any


def parse_range(field_path: str, name: str, raw: Any, t: Target) -> Dimension | Fixed:
    """The dimension (or fixed value) that ``raw`` describes for target ``t``."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() == "default"):
        return _declared(field_path, name, t)
    if isinstance(raw, dict):
        for k in raw:
            if k not in _RANGE_KEYS:
                raise bad(f"{field_path}.{k}", raw[k], "unknown range key; expected low, high, "
                          "log, step or choices")
        if "choices" in raw:
            if len(raw) > 1:
                raise bad(field_path, raw, "expected {choices: [...]} alone, without "
                          "low/high/log/step")
            return _categorical(f"{field_path}.choices", name, raw["choices"], t)
        if t.categorical:
            raise bad(field_path, raw, "expected " + t.choice_words())
        low = raw.get("low", t.low)
        high = raw.get("high", t.high)
        if low is None or high is None:
            raise bad(field_path, raw, "expected both low and high (" + t.range_words() + ")")
        log = raw.get("log", t.log)
        if not isinstance(log, bool):
            raise bad(f"{field_path}.log", log, "expected true or false")
        step = raw.get("step", t.step if not log else None)
        return _numeric(field_path, name, raw, low, high, log, step, t)
    if isinstance(raw, list):
        if t.categorical:
            return _categorical(field_path, name, raw, t)
        if len(raw) >= 3:  # three or more values: the choices themselves
            return _categorical(field_path, name, raw, t)
        if len(raw) != 2:
            raise bad(field_path, raw, "expected " + t.range_words()
                      + " (or three or more values, or {choices: [...]})")
        return _numeric(field_path, name, raw, raw[0], raw[1], t.log, t.step, t)
    if isinstance(raw, (bool, int, float, str)):
        try:
            return Fixed(_check(field_path, raw, t))
        except BadInput:
            words = t.choice_words() if t.categorical else t.range_words()
            raise bad(field_path, raw, "expected " + words) from None
    raise bad(field_path, raw, "expected " + (t.choice_words() if t.categorical
                                               else t.range_words()))


def _check(field_path: str, value: Any, t: Target) -> Any:
    try:
        return t.check(value)
    except BadInput as exc:
        raise bad(field_path, value, exc.allowed) from None


def _declared(field_path: str, name: str, t: Target) -> Dimension:
    if t.choices is not None:
        return Dimension(name, field_path, "categorical", choices=tuple(t.choices))
    if t.type is bool:
        return Dimension(name, field_path, "categorical", choices=(False, True))
    if t.low is None or t.high is None or t.type not in (int, float):
        raise bad(field_path, None, "expected " + (t.choice_words() if t.categorical
                                                   else t.range_words())
                  + f" ({t.owner + ' ' if t.owner else ''}declares no range for {t.key})")
    return _numeric(field_path, name, None, t.low, t.high, t.log, t.step, t)


def _number(v: Any, integral: bool) -> float | int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if not math.isfinite(v):
        return None
    if integral:
        if float(v) != int(v):
            return None
        return int(v)
    return float(v)


def _numeric(field_path: str, name: str, raw: Any, low: Any, high: Any, log: bool,
             step: Any, t: Target) -> Dimension:
    shown = raw if raw is not None else [low, high]
    integral = t.type is int
    lo, hi = _number(low, integral), _number(high, integral)
    if lo is None or hi is None:
        raise bad(field_path, shown, "expected " + t.range_words())
    if lo >= hi:
        raise bad(field_path, shown, "expected low < high (the range is empty or inverted)")
    if t.low is not None and lo < t.low or t.high is not None and hi > t.high:
        unit = f" {t.unit}" if t.unit else ""
        raise bad(field_path, shown, f"expected a range within the declared "
                  f"[{t.low:g}, {t.high:g}]{unit}")
    if log and lo <= 0:
        raise bad(field_path, shown, "expected low > 0 for a log-scale range")
    if step is not None:
        st = _number(step, integral)
        if st is None or st <= 0:
            raise bad(f"{field_path}.step", step, "expected a positive "
                      + ("int" if integral else "number"))
        if log:
            raise bad(field_path, shown, "expected either log or step, not both")
        if integral and (hi - lo) % st:
            raise bad(field_path, shown, f"expected high - low to be a multiple of step {st}")
        step = st
    for v in (lo, hi):
        _check(field_path, v, t)
    if integral and step == 1:
        step = None
    return Dimension(name, field_path, "int" if integral else "float", lo, hi, bool(log), step)


def _categorical(field_path: str, name: str, raw: Any, t: Target) -> Dimension:
    if not isinstance(raw, list) or not raw:
        raise bad(field_path, raw, "expected " + t.choice_words() + " (non-empty)")
    values = []
    for i, v in enumerate(raw):
        if not isinstance(v, (bool, int, float, str)):
            raise bad(f"{field_path}[{i}]", v, "expected " + t.choice_words())
        values.append(_check(f"{field_path}[{i}]", v, t))
    if len(set(map(repr, values))) != len(values):
        raise bad(field_path, raw, "expected each choice once")
    return Dimension(name, field_path, "categorical", choices=tuple(values))


# ------------------------------------------------------------------------------ the space
#: ``json.dumps(value, sort_keys=True, default=str)`` with one encoder made once (the same
#: text; dumps makes an encoder per call when given options).
canonical_json = json.JSONEncoder(sort_keys=True, default=str).encode


@dataclass
class Point:
    """One sampled design point: which design, its hardware values, each workload's
    architecture overrides and each workload's segment assignment."""

    design: str
    hw: dict[str, dict[str, Any]]
    arch: dict[str, dict[str, Any]]
    assign: dict[str, list[str]]
    params: dict[str, Any] = field(default_factory=dict)
    sys: dict[str, Any] = field(default_factory=dict)
    parallel: dict[str, Any] = field(default_factory=dict)
    #: tensor role -> number format (``search.formats``; every workload's tensors)
    formats: dict[str, str] = field(default_factory=dict)
    pool: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """A canonical string of everything that decides the evaluation."""
        return canonical_json([self.design, self.hw, self.arch, self.assign, self.sys,
                               self.parallel] + ([self.formats] if self.formats else [])
                              + ([{"pool": self.pool}] if self.pool else []))


@dataclass
class SearchSpace:
    """The dimensions in sampling order, plus what the study file fixes."""

    dimensions: list[Dimension]
    designs: list[str]
    workloads: list[str]
    fixed_hw: dict[str, dict[str, Any]]
    fixed_arch: dict[str, dict[str, Any]]
    segments: int = 0
    alternatives: bool = False
    fixed_sys: dict[str, Any] = field(default_factory=dict)
    fixed_parallel: dict[str, Any] = field(default_factory=dict)
    #: a disaggregated study's fixed pool values (``pool.*`` dimensions search the rest)
    fixed_pool: dict[str, Any] = field(default_factory=dict)
    #: workload label -> published network name -> its full architecture (the ``network`` key)
    networks: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: tensor role -> number format that ``search.formats`` fixes
    fixed_formats: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def suggest(self, trial: optuna.Trial) -> Point:
        values: dict[str, Any] = {}
        for d in self.dimensions:
            if d.condition is not None and values.get(d.condition[0]) != d.condition[1]:
                continue
            values[d.name] = d.suggest(trial)
        return self.point(values)

    def point(self, values: dict[str, Any]) -> Point:
        """The :class:`Point` of sampled ``values`` (Optuna name -> value)."""
        design = values.get("design", self.designs[0]) if self.alternatives else self.designs[0]
        hw = {d: dict(self.fixed_hw.get(d, {})) for d in self.designs}
        arch = {w: dict(self.fixed_arch.get(w, {})) for w in self.workloads}
        assign = {w: [self.designs[0]] * self.segments for w in self.workloads} \
            if self.segments else {}
        many_designs = len(self.designs) > 1
        many_workloads = len(self.workloads) > 1
        sysv, par, pool = dict(self.fixed_sys), dict(self.fixed_parallel), dict(self.fixed_pool)
        fmts = dict(self.fixed_formats)
        for name, v in values.items():
            parts = name.split(".")
            if parts[0] == "hw":
                d, key = (parts[1], parts[2]) if many_designs else (self.designs[0], parts[1])
                hw[d][key] = v
            elif parts[0] == "arch":
                w, key = (parts[1], parts[2]) if many_workloads else (self.workloads[0], parts[1])
                if w in self.networks:  # its one key: the name of a published network
                    arch[w].update(self.networks[w][v])
                else:
                    arch[w][key] = v
            elif parts[0] == "assign":
                assign[parts[1]][int(parts[2])] = v
            elif parts[0] == "sys":
                sysv[parts[1]] = v
            elif parts[0] == "par":
                par[parts[1]] = v
            elif parts[0] == "fmt" and parts[1] == "scheme":   # a whole assignment
                fmts.update(dict(p.split("=") for p in v.split(",")) if v != "base" else {})
            elif parts[0] == "fmt":
                fmts[parts[1]] = v
            elif parts[0] == "pool":
                pool[parts[1]] = v
        if self.alternatives:
            hw = {design: hw[design]}
        return Point(design, hw, arch, assign, dict(values), sysv, par, fmts, pool)

    def distributions(self) -> dict[str, BaseDistribution]:
        made = self.__dict__.get("_distributions")   # made again if a dimension was added
        if made is None or len(made) != len(self.dimensions):
            made = self.__dict__["_distributions"] = {d.name: d.distribution()
                                                      for d in self.dimensions}
        return dict(made)
