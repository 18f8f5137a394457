"""Study file (YAML) -> validated, resolved study. Every problem is one :class:`BadInput` line
naming the key path, the value and what is allowed; nothing is written while loading.

Steps: safe YAML (duplicate keys are errors; a regular file of at most ``MAX_STUDY_BYTES``;
at most ``MAX_YAML_NODES`` values once aliases are expanded; no YAML 1.1 sexagesimal or octal
numbers) -> :class:`~dse.study.spec.StudySpec` (pydantic) -> checks against the zoo and the
template registry -> :class:`ResolvedStudy` with its search space, objectives and constraints.

Loading imports no code named by the file: ``quality.python`` is checked for its form only and
imported when the study runs (:func:`load_quality_function`), so ``dse study validate`` is safe
on a file from anyone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from dse.errors import BadInput, redact_url
from dse.safe_io import read_regular
from dse.quality import BUILTIN, QualityConfig, load_function
from dse.study import objectives as obj
from dse.study.networks import NETWORK_KEY, check_published_coverage, network_dimension
from dse.study.space import (Dimension, Fixed, SearchSpace, Shown, Target, _NOTHING, bad,
                             parse_range)
from dse.study.spec import StudySpec
from workloads.formats import parse_formats

#: Samplers and the module each needs beyond Optuna.
SAMPLER_NEEDS = {"gp": "scipy", "qmc": "scipy", "cmaes": "cmaes"}
#: Storage URL schemes a study can use (SQLite files, PostgreSQL servers).
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg2", "postgresql+psycopg")
#: Largest study file read, bytes [E: the ready studies are under 3 kB].
MAX_STUDY_BYTES = 2**20
#: Most values (scalars, lists, mappings) a study file may hold once its aliases are expanded
#: [E: the ready studies hold under 200; a "billion laughs" alias bomb holds 10**9].
MAX_YAML_NODES = 100_000
#: Most points a grid search may have: Optuna's GridSampler holds every point in memory
#: [E: 100,000 points of ten parameters take about 15 MB].
MAX_GRID_POINTS = 100_000


# ------------------------------------------------------------------------------ YAML
class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = loader.construct_object(value_node, deep=deep)
    return seen


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_mapping)

# YAML 1.1 (PyYAML) reads ``1.0e11`` and ``1e11`` as strings (it wants ``1.0e+11``); YAML 1.2
# and every user read them as numbers. A copy of the resolver table keeps yaml.SafeLoader as is.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_FLOAT_1_2 = re.compile(r"""^[-+]?(?:[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?
                            |[0-9]+[eE][-+]?[0-9]+
                            |\.[0-9]+(?:[eE][-+]?[0-9]+)?)$""", re.X)
# YAML 1.1 also reads ``1:30`` as 90 (base 60), ``010`` as 8 (octal) and ``5_12`` as 512
# (underscores between digits); YAML 1.2 has none of them, so they stay strings here (and a
# field that wants a number says so).
_NOT_A_NUMBER_1_2 = re.compile(r"^(?:[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"
                               r"|[-+]?0[0-9_]+"
                               r"|[-+]?[0-9.]*_[0-9_.]*(?:[eE][-+]?[0-9_]+)?)$")
# YAML 1.1 reads yes / no / on / off as booleans; YAML 1.2 only true / false.
_NOT_A_BOOL_1_2 = re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$")
for _first in "-+0123456789.":
    _UniqueKeyLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, ("tag:yaml.org,2002:float", _FLOAT_1_2))
    _UniqueKeyLoader.yaml_implicit_resolvers[_first].insert(
        0, ("tag:yaml.org,2002:str", _NOT_A_NUMBER_1_2))
for _first in "yYnNoO":
    _UniqueKeyLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, ("tag:yaml.org,2002:str", _NOT_A_BOOL_1_2))


class _TooLarge(Exception):
    pass


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` holds with every alias expanded; :class:`_TooLarge` past
    ``limit`` (counted without expanding: an aliased node's size is computed once)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        if n > limit:
            raise _TooLarge
        sizes[id(node)] = n
        return n

    return size(root)


def parse_yaml(text: str, source: str = "study file") -> Any:
    """``text`` as YAML (safe types only); syntax errors become one :class:`BadInput` line."""
    loader = None
    try:
        loader = _UniqueKeyLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_nodes(node, MAX_YAML_NODES)
        return loader.construct_document(node)
    except _TooLarge:
        raise BadInput(source, Shown(_NOTHING), f"expected at most {MAX_YAML_NODES:,} values "
                       "once YAML aliases (*name) are expanded") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = ""
        if mark is not None:
            lines = text.splitlines()
            line = lines[mark.line].strip() if 0 <= mark.line < len(lines) else ""
        raise BadInput(where, Shown(line) if line else Shown(_NOTHING),
                       f"invalid YAML ({problem})") from None
    except RecursionError:
        raise BadInput(source, Shown(_NOTHING), "invalid YAML (nested too deeply)") from None
    finally:
        if loader is not None:
            loader.dispose()


# ------------------------------------------------------------------------------ pydantic errors
def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "study"


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] | None = StudySpec
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _inner_model(model.model_fields[part].annotation)
    return model


def _is_union_tag(part: Any) -> bool:
    """pydantic names the member of a union that failed in the error's location."""
    return isinstance(part, str) and (part in ("bool", "int", "float", "str") or "[" in part)


_TYPE_WORDS = {
    "int_parsing": "expected an int", "int_type": "expected an int",
    "int_from_float": "expected an int", "float_parsing": "expected a number",
    "float_type": "expected a number", "finite_number": "expected a finite number",
    "string_type": "expected a string", "bool_type": "expected true or false",
    "bool_parsing": "expected true or false", "dict_type": "expected a mapping",
    "model_type": "expected a mapping", "model_attributes_type": "expected a mapping",
    "list_type": "expected a list", "missing": "required",
    "string_pattern_mismatch": "expected a name of letters, digits, '_' and '-', starting with "
                               "a letter (at most 64 characters)",
}
#: Pattern messages of fields that are not names.
_PATTERN_WORDS = {"python": "expected 'package.module:function' (Python identifiers)"}


def from_validation_error(exc: ValidationError) -> BadInput:
    """The first problem of a pydantic error as one :class:`BadInput` line."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    raw_loc = tuple(err.get("loc", ()))
    loc = tuple(p for p in raw_loc if not _is_union_tag(p))
    if len(loc) != len(raw_loc):  # a value of a union type (a fixed hw value: a scalar)
        return BadInput(_path(loc), Shown(err.get("input", _NOTHING)),
                        "expected one value: a number, a string or true/false")
    kind = err.get("type", "")
    value = err.get("input", _NOTHING)
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        keys = ", ".join(parent.model_fields) if parent else ""
        return BadInput(_path(loc), Shown(value), "unknown key" + (f"; expected one of {keys}"
                                                                  if keys else ""))
    if kind == "missing":
        return BadInput(_path(loc), Shown(_NOTHING), "required")
    if kind == "literal_error":
        allowed = "expected one of " + str(ctx.get("expected", "")).replace("'", "")
    elif kind == "string_pattern_mismatch" and loc and loc[-1] in _PATTERN_WORDS:
        allowed = _PATTERN_WORDS[loc[-1]]
    elif kind in _TYPE_WORDS:
        allowed = _TYPE_WORDS[kind]
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "")
        allowed = f"expected a value {op} {bound}"
    elif kind in ("too_short", "too_long"):
        n = ctx.get("min_length" if kind == "too_short" else "max_length")
        allowed = f"expected {'at least' if kind == 'too_short' else 'at most'} {n} item(s)"
    elif kind == "value_error":
        allowed = str(err.get("msg", "")).removeprefix("Value error, ")
    else:
        msg = str(err.get("msg", "invalid value"))
        allowed = "expected " + msg[:1].lower() + msg[1:]
    return BadInput(_path(loc), Shown(value), allowed)


# ------------------------------------------------------------------------------ resolved study
@dataclass(frozen=True)
class ResolvedWorkload:
    """A workload with its capture arguments validated and defaulted."""

    label: str
    model: str
    family: str
    phase: str
    batch: int
    seq: int | None
    context: int | None
    dtype: str
    weight: float
    arch_defaults: dict[str, Any]
    #: tensor role -> number format the study file fixes for this workload
    formats: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedDesign:
    """A named template with its preset and the fixed parameter values of the study file."""

    name: str
    template: str
    preset: str | None
    fixed_hw: dict[str, Any]


@dataclass
class ResolvedStudy:
    """Everything a run needs, validated."""

    spec: StudySpec
    space: SearchSpace
    objectives: list[obj.Objective]
    constraints: list[obj.Constraint]
    workloads: list[ResolvedWorkload]
    designs: list[ResolvedDesign]
    quality: QualityConfig
    needs_quality: bool
    source: str | None = None
    metric_names: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    def fingerprint(self) -> str:
        """A hash of what decides the trials' meaning (not the trial count, time or storage):
        a study in storage can be resumed only by a spec with the same fingerprint."""
        d = self.spec.model_dump(mode="json")
        for k in ("trials", "timeout_s", "storage", "output", "description"):
            d.pop(k, None)
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_study(path: str | Path) -> ResolvedStudy:
    """Read, validate and resolve the study file at ``path``."""
    return load_study_text(read_study_file(path), source=str(path))


def read_study_file(path: str | Path) -> str:
    """The text of a regular file of at most ``MAX_STUDY_BYTES`` (opened without blocking,
    so a named pipe or a device is refused instead of read forever)."""
    blob = read_regular(path, "study file", MAX_STUDY_BYTES, "a regular YAML file")
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("study file", str(path), "expected UTF-8 text") from None


def load_study_text(text: str, source: str = "study file") -> ResolvedStudy:
    """Validate and resolve a study given as YAML text."""
    return resolve(parse_yaml(text, source), source)


def validate_spec(data: Any) -> StudySpec:
    """``data`` (parsed YAML) as a :class:`StudySpec`, or one :class:`BadInput` line."""
    if not isinstance(data, dict):
        raise BadInput("study", Shown(data), "expected a mapping of study keys (name, "
                       "workloads, accelerator, search, objectives, ...)")
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise BadInput(_path((bad_keys[0],)), Shown(data[bad_keys[0]]),
                       "expected string keys")
    try:
        return StudySpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    except RecursionError:
        raise BadInput("study", Shown(_NOTHING), "nested too deeply") from None


def resolve(data: Any, source: str | None = None) -> ResolvedStudy:
    """Parsed YAML -> :class:`ResolvedStudy` (see the module docstring)."""
    spec = validate_spec(data)
    _check_forms(spec)
    _check_quality_source(spec)
    form = _served_form(spec)
    try:
        workloads = [_resolve_workload(i, w) for i, w in enumerate(spec.workloads)]
    except BadInput as exc:
        if form is None:
            raise
        section = getattr(spec, form)
        if exc.field.endswith(".model"):
            raise BadInput(f"{form}.model", Shown(section.model), exc.allowed) from None
        raise bad(f"{form}.model", section.model, "expected an LLM (a model with a "
                  f"decode phase; {exc.allowed})") from None
    designs = _resolve_designs(spec)
    space = _build_space(spec, designs, workloads)
    _add_system_space(spec, space)
    _add_pool_space(spec, space)
    labels = [w.label for w in workloads]
    allowed = obj.allowed_metrics(labels, spec.heterogeneous, spec.system is not None,
                                  spec.serving is not None,
                                  form if form in ("disaggregated", "fleet") else "",
                                  training=spec.training is not None)
    objectives = [obj.parse_objective(o, f"objectives[{i}]", allowed)
                  for i, o in enumerate(spec.objectives)]
    if len({o.metric for o in objectives}) != len(objectives):
        raise bad("objectives", spec.objectives, "expected each metric once")
    constraints = [obj.parse_constraint(c, f"constraints[{i}]", allowed)
                   for i, c in enumerate(spec.constraints)]
    if spec.budgets is not None:  # shared budgets are constraints on the summed resources
        for key in ("total_pes", "total_bandwidth_Bps"):
            value = getattr(spec.budgets, key)
            if value is not None:
                constraints.append(obj.Constraint(key, "<=", float(value)))
    q = spec.quality
    quality = QualityConfig(python=q.python, tokens=q.tokens, tokens_per_param=q.tokens_per_param,
                            steps=q.steps, source=q.source, table=q.table,
                            method=q.method) if q else QualityConfig()
    published = quality.source == "published"
    uses = [(f"objectives[{i}]", o.metric) for i, o in enumerate(objectives)] + \
           [(f"constraints[{i}]", c.metric) for i, c in enumerate(constraints)]
    needs_quality = False
    rated: set[str] = set()
    for where, metric in uses:
        if obj.base_metric(metric) != "quality":
            continue
        needs_quality = True
        scope = [w for w in workloads if "." not in metric or metric.split(".")[0] == w.label]
        rated.update(w.label for w in scope)
        for w in scope:
            if not quality.python and not published and w.family not in BUILTIN:
                raise bad(where, metric, f"expected a quality proxy for {w.model} "
                          f"({w.family} models "
                          "have none built in); give quality: {python: 'package.module:function'}")
            if not quality.python and not published:   # the reference is always rated
                from dse.quality import check_proxy_size
                from workloads.zoo import get_model
                zoo = get_model(w.model)
                check_proxy_size(zoo, zoo.resolve_arch(None), BUILTIN[w.family])
    for where, metric in uses:
        if metric == "total_pes":
            from accelerators.registry import get_template
            for d in designs:
                params = get_template(d.template).params()
                if "rows" not in params or "cols" not in params:
                    raise bad(where, metric, "expected sub-accelerators with a PE count (rows x "
                              f"cols); {d.name} ({d.template}) has none")
    llms = {w.label for w in workloads if w.family == "llm"}
    if published and rated - llms:
        check_published_coverage(space, workloads, rated - llms, _table(spec))
    if published and rated & llms:
        _check_format_table(spec, [w for w in workloads if w.label in rated & llms])
    _check_sampler(spec, objectives)
    if spec.storage is not None:
        spec.storage = check_storage_url(spec.storage, "storage")
    study = ResolvedStudy(spec=spec, space=space, objectives=objectives, constraints=constraints,
                          workloads=workloads, designs=designs, quality=quality,
                          needs_quality=needs_quality, source=source, metric_names=allowed)
    if spec.sampler.name == "grid":
        grid_points(study)
    return study


#: Study forms that serve one model instead of timing ``workloads``.
SERVED_FORMS = ("serving", "disaggregated", "fleet")


def _served_form(spec: StudySpec) -> str | None:
    """``serving``, ``disaggregated`` or ``fleet`` when the study has that section."""
    return next((f for f in SERVED_FORMS if getattr(spec, f) is not None), None)


def _check_forms(spec: StudySpec) -> None:
    given = [f for f in ("workloads",) + SERVED_FORMS if getattr(spec, f) is not None]
    if not given:
        raise BadInput("workloads", Shown(_NOTHING), "required")
    if len(given) > 1:
        raise bad(given[1], getattr(spec, given[1]) if given[1] == "workloads" else
                  getattr(spec, given[1]).model_dump(), "expected exactly one of workloads, "
                  + ", ".join(SERVED_FORMS))
    for form in ("disaggregated", "fleet"):
        section = getattr(spec, form)
        if section is None:
            continue
        from dse.study.spec import WorkloadSpec
        from workloads.requests import DISTRIBUTIONS
        if spec.sub_accelerators is not None or spec.system is not None:
            raise bad(form, section.model, f"expected accelerator or accelerators (a {form} "
                      "study places its own devices; no sub_accelerators or system)")
        if section.trace in DISTRIBUTIONS and section.rate is None:
            raise bad(f"{form}.rate", None, "expected a number > 0 (requests/s) for a "
                      f"{section.trace} trace")
        if form == "disaggregated":
            from accelerators.interconnect import get_link
            get_link(section.link, "disaggregated.link")
        if form == "fleet":
            if section.slo_ttft_s is None and section.slo_tpot_s is None:
                raise bad("fleet.slo_tpot_s", None, "expected a TPOT or TTFT objective, s")
            names = [e.name for e in section.menu]
            for i, n in enumerate(names):
                if n in names[:i] or n == "design":
                    raise bad(f"fleet.menu[{i}].name", n, "expected a name of its own (not "
                              "'design': the study's accelerator joins the menu as that)")
            if section.price_basis is not None and section.price_basis not in names:
                raise bad("fleet.price_basis", section.price_basis, "expected a menu entry: "
                          + ", ".join(names))
        spec.workloads = [WorkloadSpec(model=section.model, phase="decode", batch=1,
                                       context=1, dtype=section.dtype)]
    if spec.serving is not None:
        from dse.study.spec import WorkloadSpec
        sv = spec.serving
        if spec.sub_accelerators is not None:
            raise bad("serving", sv.model, "expected accelerator or accelerators (serving on "
                      "a heterogeneous design is not a study form)")
        if sv.trace in ("sharegpt", "alpaca") and sv.rate is None:
            raise bad("serving.rate", None, "expected a number > 0 (requests/s) for a "
                      f"{sv.trace} trace")
        _check_trace(sv)
        # the served model's iterations are built from its decode step of batch 1
        spec.workloads = [WorkloadSpec(model=sv.model, phase="decode", batch=1, context=1,
                                       dtype=sv.dtype, formats=sv.formats)]
    if spec.training is not None:
        _check_training(spec)
    given = [k for k in ("accelerator", "accelerators", "sub_accelerators")
             if getattr(spec, k) is not None]
    if len(given) != 1:
        raise BadInput(given[1] if len(given) > 1 else "accelerator",
                       Shown(getattr(spec, given[1]).model_dump() if len(given) > 1
                             and not isinstance(getattr(spec, given[1]), list)
                             else _NOTHING if not given else given),
                       "expected exactly one of accelerator, accelerators, sub_accelerators")
    if not spec.heterogeneous:
        for key in ("budgets", "assignment"):
            if getattr(spec, key) is not None:
                raise bad(key, getattr(spec, key).model_dump(), "expected no " + key
                          + " without sub_accelerators")
    labels = [w.label for w in spec.workloads]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            raise bad(f"workloads[{i}]", label, "expected a label of its own: give each "
                      "workload of the same model a `name`")
    for group in ("accelerators", "sub_accelerators"):
        names = [a.name for a in getattr(spec, group) or []]
        for i, n in enumerate(names):
            if n in names[:i]:
                raise bad(f"{group}[{i}].name", n, "expected a name of its own")


def _check_training(spec: StudySpec) -> None:
    """A training study: one workload, on a system, its batch and phase the layout's."""
    tr = spec.training
    if spec.serving is not None or spec.workloads is None or len(spec.workloads) != 1:
        raise bad("training", tr.model_dump(), "expected exactly one workload (and no "
                  "serving) in a training study")
    if spec.system is None:
        raise bad("training", tr.model_dump(), "expected a `system:` section (the devices "
                  "and the training layout)")
    if spec.sub_accelerators is not None:
        raise bad("training", tr.model_dump(), "expected accelerator or accelerators")
    w = spec.workloads[0]
    for key in ("phase", "batch", "context"):
        if getattr(w, key) is not None:
            raise bad(f"workloads[0].{key}", getattr(w, key), "expected none in a training "
                      "study (the step is a training step; micro_batch is a layout key)")


def _check_quality_source(spec: StudySpec) -> None:
    q = spec.quality
    if q is not None and q.source == "published" and q.python:
        raise bad("quality.python", q.python, "expected either python or source: published, "
                  "not both")
    if q is not None and q.table and q.source != "published":
        raise bad("quality.table", q.table, "expected source: published with a table")


def _remap(prefix: str, exc: BadInput) -> BadInput:
    field_name = exc.field.split(".")[-1] if exc.field else ""
    return BadInput(f"{prefix}.{field_name}" if field_name else prefix, exc.value, exc.allowed)


def _resolve_workload(i: int, w) -> ResolvedWorkload:
    from workloads.build import check_sizes_apply, resolve as resolve_capture
    from workloads.zoo import get_model

    where = f"workloads[{i}]"
    try:
        model = get_model(w.model)
    except BadInput as exc:
        raise BadInput(f"{where}.model", Shown(w.model), exc.allowed) from None
    try:
        check_sizes_apply(w.model, w.phase, w.seq, w.context)
        args = resolve_capture(w.model, phase=w.phase, batch=w.batch, seq=w.seq,
                               context=w.context, dtype=w.dtype)
    except BadInput as exc:
        raise _remap(where, exc) from None
    fm = parse_formats(w.formats, args["dtype"], f"{where}.formats") if w.formats else None
    return ResolvedWorkload(label=w.label, model=w.model, family=model.family,
                            phase=args["phase"], batch=args["batch"],
                            seq=w.seq, context=w.context, dtype=args["dtype"],
                            weight=w.weight, arch_defaults=dict(args["arch"]),
                            formats=dict(fm.roles) if fm else {})


def _design_field(spec: StudySpec, i: int) -> str:
    if spec.accelerator is not None:
        return "accelerator"
    return f"{'accelerators' if spec.alternatives else 'sub_accelerators'}[{i}]"


def _resolve_designs(spec: StudySpec) -> list[ResolvedDesign]:
    from accelerators.registry import get_template

    out = []
    for i, d in enumerate(spec.designs):
        where = _design_field(spec, i)
        try:
            cls = get_template(d.template)
        except BadInput as exc:
            raise BadInput(f"{where}.template", Shown(d.template), exc.allowed) from None
        preset = d.preset if d.preset is not None else cls.DEFAULT_PRESET
        if preset is not None and preset not in cls.PRESETS:
            raise bad(f"{where}.preset", d.preset, f"expected a {d.template} preset: "
                      + (", ".join(sorted(cls.PRESETS)) or "(none)"))
        params = cls.params()
        fixed = {}
        for key, value in d.hw.items():
            if key not in params:
                raise bad(f"{where}.hw.{key}", value, f"expected a {d.template} parameter: "
                          + ", ".join(params))
            try:
                fixed[key] = params[key].coerce(value, f"{where}.hw.{key}")
            except BadInput as exc:
                raise BadInput(exc.field, Shown(value), exc.allowed) from None
        out.append(ResolvedDesign(d.name, d.template, preset, fixed))
    if spec.heterogeneous and spec.budgets and spec.budgets.total_pes is not None:
        for i, d in enumerate(out):
            params = get_template(d.template).params()
            if "rows" not in params or "cols" not in params:
                raise bad("budgets.total_pes", spec.budgets.total_pes,
                          f"expected sub-accelerators with a PE count (rows x cols); "
                          f"{d.name} ({d.template}) has none")
    return out


def _names_or_mapping(raw: Any, field_path: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        for i, k in enumerate(raw):
            if not isinstance(k, str):
                raise bad(f"{field_path}[{i}]", k, "expected a parameter name")
        if len(set(raw)) != len(raw):
            raise bad(field_path, raw, "expected each name once")
        return {k: None for k in raw}
    if isinstance(raw, dict):
        for k in raw:
            if not isinstance(k, str):
                raise bad(f"{field_path}.{k}", raw[k], "expected a parameter name as key")
        return dict(raw)
    raise bad(field_path, raw, "expected a mapping of parameter -> range, or a list of names")


def _hw_target(param, template: str) -> Target:
    return Target(key=param.name, type=param.type, unit=param.unit, low=param.low,
                  high=param.high, choices=tuple(param.choices) if param.choices else None,
                  log=param.log, step=param.step, check=param.coerce, owner=template)


def _arch_target(model_name: str, key: str, default: Any) -> Target:
    from workloads.zoo import get_model

    spec = get_model(model_name)
    choices = spec.arch_choices.get(key)
    low, high = (spec.arch_range(key) if isinstance(default, int) else None) or (None, None)

    def check(v: Any, _spec=spec, _key=key) -> Any:
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if numeric and isinstance(v, str):
            raise BadInput(f"arch.{_key}", v, "expected " + ("an int" if isinstance(default, int)
                                                            else "a number"))
        return _spec.resolve_arch({_key: v})[_key]

    kind = bool if isinstance(default, bool) else type(default)
    if kind not in (bool, int, float, str):
        kind = str
    return Target(key=key, type=kind, low=low, high=high,
                  choices=tuple(choices) if choices else None, check=check, owner=model_name)


def _build_space(spec: StudySpec, designs: list[ResolvedDesign],
                 workloads: list[ResolvedWorkload]) -> SearchSpace:
    from accelerators.registry import get_template

    dims: list[Dimension] = []
    many = len(designs) > 1
    names = [d.name for d in designs]
    fixed_hw = {d.name: dict(d.fixed_hw) for d in designs}
    if spec.alternatives:
        dims.append(Dimension("design", "accelerators", "categorical", choices=tuple(names)))
    hw_raw = _names_or_mapping(spec.search.hardware, "search.hardware")
    for key, raw in hw_raw.items():
        where = f"search.hardware.{key}"
        if many:
            dname, dot, pname = key.partition(".")
            if not dot or dname not in names:
                raise bad(where, raw, "expected NAME.parameter with NAME one of "
                          + ", ".join(names))
        else:
            dname, pname = names[0], key
        design = designs[names.index(dname)]
        params = get_template(design.template).params()
        if pname not in params:
            raise bad(where, raw, f"expected a {design.template} parameter: "
                      + ", ".join(params) + f" ({pname!s} is not one)")
        if pname in design.fixed_hw:
            raise bad(where, raw, f"expected a parameter that is not also fixed in "
                      f"{_design_field(spec, names.index(dname))}.hw")
        opt_name = f"hw.{dname}.{pname}" if many else f"hw.{pname}"
        got = parse_range(where, opt_name, raw, _hw_target(params[pname], design.template))
        if isinstance(got, Fixed):
            fixed_hw[dname][pname] = got.value
        else:
            if spec.alternatives:
                got = Dimension(**{**got.__dict__, "condition": ("design", dname)})
            dims.append(got)
    labels = [w.label for w in workloads]
    fixed_arch: dict[str, dict[str, Any]] = {w: {} for w in labels}
    networks: dict[str, dict[str, dict[str, Any]]] = {}
    arch_raw = _names_or_mapping(spec.search.architecture, "search.architecture")
    for key, raw in arch_raw.items():
        where = f"search.architecture.{key}"
        if len(workloads) > 1:
            wlabel, dot, akey = key.partition(".")
            if not dot or wlabel not in labels:
                raise bad(where, raw, "expected WORKLOAD.key with WORKLOAD one of "
                          + ", ".join(labels))
        else:
            wlabel, akey = labels[0], key
        w = workloads[labels.index(wlabel)]
        opt_name = f"arch.{wlabel}.{akey}" if len(workloads) > 1 else f"arch.{akey}"
        if akey == NETWORK_KEY and akey not in w.arch_defaults:
            others = [k for k in arch_raw if k != key and (len(workloads) == 1
                                                           or k.startswith(wlabel + "."))]
            if others:
                raise bad(f"search.architecture.{others[0]}", arch_raw[others[0]],
                          f"expected no other architecture key of {wlabel} beside {key}")
            got, archs = network_dimension(where, opt_name, raw, w.model, _table(spec))
            if isinstance(got, Fixed):
                fixed_arch[wlabel].update(archs[got.value])
            else:
                networks[wlabel] = archs
                dims.append(got)
            continue
        if akey not in w.arch_defaults:
            raise bad(where, raw, f"expected a {w.model} architecture key: "
                      + ", ".join(w.arch_defaults))
        got = parse_range(where, opt_name, raw,
                          _arch_target(w.model, akey, w.arch_defaults[akey]))
        if isinstance(got, Fixed):
            fixed_arch[wlabel][akey] = got.value
        else:
            dims.append(got)
    fixed_formats = _format_dimensions(spec, dims)
    segments = 0
    if spec.heterogeneous:
        segments = spec.assignment.segments if spec.assignment else 1
        for w in labels:
            for s in range(segments):
                dims.append(Dimension(f"assign.{w}.{s}", "assignment", "categorical",
                                      choices=tuple(names)))
    if not dims and not (spec.system is not None and (spec.search.system
                                                      or spec.search.parallel)):
        raise bad("search", spec.search.model_dump(), "expected at least one searched "
                  "parameter in search.hardware, search.architecture, search.formats, "
                  "search.system or search.parallel")
    return SearchSpace(dimensions=dims, designs=names, workloads=labels, fixed_hw=fixed_hw,
                       fixed_arch=fixed_arch, segments=segments, alternatives=spec.alternatives,
                       networks=networks, fixed_formats=fixed_formats)


def _format_dimensions(spec: StudySpec, dims: list[Dimension]) -> dict[str, str]:
    """``search.formats``: a categorical ``fmt.ROLE`` per role given a list of formats
    (appended to ``dims``); the roles given one format, returned fixed."""
    from workloads.formats import ROLES, get_format

    raw = spec.search.formats
    if isinstance(raw, list):   # whole assignments: one categorical over them
        schemes = []
        for i, item in enumerate(raw):
            fm = parse_formats(item, "bf16", f"search.formats[{i}]") if isinstance(
                item, dict) else None
            if fm is None:
                raise bad(f"search.formats[{i}]", item, "expected a mapping of role -> format")
            text = ",".join(f"{r}={n}" for r, n in fm.roles) or "base"
            if text not in schemes:
                schemes.append(text)
        if len(schemes) == 1:
            return dict(p.split("=") for p in schemes[0].split(",")) if schemes[0] != "base" \
                else {}
        dims.append(Dimension("fmt.scheme", "search.formats", "categorical",
                              choices=tuple(schemes)))
        return {}
    if not isinstance(raw, dict):
        raise bad("search.formats", raw, "expected a mapping of tensor role -> format(s), or "
                  "a list of such mappings")
    fixed: dict[str, str] = {}
    for role, value in raw.items():
        where = f"search.formats.{role}"
        if role not in ROLES:
            raise bad(where, role, "expected a tensor role: " + ", ".join(ROLES))
        if isinstance(value, dict) and set(value) == {"choices"}:
            value = value["choices"]
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) for v in values):
            raise bad(where, value, "expected a format name or a list of format names")
        names = []
        for v in values:
            name = get_format(v, where).name
            if name not in names:
                names.append(name)
        if len(names) == 1:
            fixed[role] = names[0]
        else:
            dims.append(Dimension(f"fmt.{role}", where, "categorical", choices=tuple(names)))
    return fixed


def _check_format_table(spec: StudySpec, workloads: list[ResolvedWorkload]) -> None:
    """With ``quality: published`` on LLM workloads: the format-quality table loads and holds
    each model's 16-bit baseline (format combinations it lacks become pruned trials)."""
    from dse.quality.format_quality import load_format_table

    table = load_format_table(spec.quality.table if spec.quality else None)
    for w in workloads:
        if not any(e.model == w.model and not e.formats for e in table.entries):
            raise bad("quality", "published", f"expected {w.model} in the format-quality table "
                      f"{table.path}, which covers: "
                      + ", ".join(sorted({e.model for e in table.entries})))


def _table(spec: StudySpec):
    """The accuracy table a study's ``quality.table`` names (default: the shipped one)."""
    from dse.quality.published import load_table

    return load_table(spec.quality.table if spec.quality else None)


#: The parallel layout's keys as parameters (``search.parallel``, ``system.parallel``).
def _parallel_params():
    from accelerators.base import Param
    return {p.name: p for p in (
        Param("tp", int, "ranks", 1, "tensor-parallel ranks", 1, 4096, log=True),
        Param("pp", int, "stages", 1, "pipeline stages", 1, 4096, log=True),
        Param("ep", int, "ranks", 1, "expert-parallel ranks", 1, 4096, log=True),
        Param("dp", int, "replicas", 1, "data-parallel replicas", 1, 4096, log=True),
        Param("sequence_parallel", bool, "", False, "sequence parallelism"),
        Param("microbatches", int, "", 0, "pipeline microbatches (0: pp)", 0, 4096),
        Param("ep_imbalance", float, "", 1.0, "hottest expert rank's load over the mean",
              1.0, 4096.0))}


#: A training layout's keys as parameters (:class:`workloads.train_parallel.TrainLayout`).
def _train_parallel_params():
    from accelerators.base import Param
    from workloads.train_parallel import OFFLOAD_TARGETS, SCHEDULES
    from workloads.train_step import RECOMPUTE_MODES
    return {p.name: p for p in (
        Param("dp", int, "replicas", 1, "data-parallel replicas", 1, 65536, log=True),
        Param("tp", int, "ranks", 1, "tensor-parallel ranks", 1, 1024, log=True),
        Param("pp", int, "stages", 1, "pipeline stages", 1, 1024, log=True),
        Param("cp", int, "ranks", 1, "context-parallel ranks", 1, 1024, log=True),
        Param("sp", bool, "", False, "sequence parallelism (with tp)"),
        Param("zero", int, "", 0, "ZeRO stage", 0, 3),
        Param("micro_batch", int, "samples", 1, "samples per micro-batch", 1, 65536, log=True),
        Param("schedule", str, "", "1f1b", "pipeline schedule", choices=SCHEDULES),
        Param("chunks", int, "", 1, "model chunks per stage (interleaved)", 1, 64),
        Param("recompute", str, "", "none", "activation recomputation",
              choices=RECOMPUTE_MODES),
        Param("bucket_mb", float, "MB", 25.0, "gradient bucket", 1.0, 10000.0),
        Param("overlap_grad_reduce", bool, "", True, "overlap the gradient reduction"),
        Param("offload_optimizer", str, "", "none", "optimizer offload",
              choices=OFFLOAD_TARGETS),
        Param("offload_params", str, "", "none", "parameter offload", choices=OFFLOAD_TARGETS))}


def _add_system_space(spec: StudySpec, space: SearchSpace) -> None:
    """The system's fixed values and searched dimensions (``sys.*``, ``par.*``)."""
    from accelerators.system import SYSTEM_PRESETS, System

    searched = bool(spec.search.system) or bool(spec.search.parallel)
    if spec.system is None:
        if searched:
            raise bad("search.system" if spec.search.system else "search.parallel",
                      spec.search.system or spec.search.parallel,
                      "expected a `system:` section to search a system or its layout")
        return
    sysspec = spec.system
    if spec.heterogeneous:
        raise bad("system", sysspec.model_dump(), "expected accelerator or accelerators (a "
                  "system of heterogeneous chips is not a study form)")
    if spec.fidelity != "event":
        raise bad("fidelity", spec.fidelity, "expected event for a study of a system (the "
                  "fast path models no links)")
    if sysspec.preset is not None and sysspec.preset not in SYSTEM_PRESETS:
        raise bad("system.preset", sysspec.preset, "expected a system preset: "
                  + ", ".join(sorted(SYSTEM_PRESETS)))
    layout_params = _train_parallel_params() if spec.training is not None else _parallel_params()
    groups = (("sys", System.params(), sysspec.sys, spec.search.system, "system"),
              ("par", layout_params, sysspec.parallel, spec.search.parallel, "parallel"))
    for prefix, params, fixed_raw, search_raw, word in groups:
        fixed = {}
        for key, value in fixed_raw.items():
            if key not in params:
                raise bad(f"system.{'sys' if prefix == 'sys' else 'parallel'}.{key}", value,
                          f"expected a {word} parameter: " + ", ".join(params))
            fixed[key] = params[key].coerce(value, f"system.{prefix}.{key}")
        for key, raw in _names_or_mapping(search_raw, f"search.{word}").items():
            where = f"search.{word}.{key}"
            if key not in params:
                raise bad(where, raw, f"expected a {word} parameter: " + ", ".join(params))
            if key in fixed:
                raise bad(where, raw, f"expected a parameter that is not also fixed in "
                          f"system.{'sys' if prefix == 'sys' else 'parallel'}")
            got = parse_range(where, f"{prefix}.{key}", raw, _hw_target(params[key], word))
            if isinstance(got, Fixed):
                fixed[key] = got.value
            else:
                space.dimensions.append(got)
        if prefix == "sys":
            space.fixed_sys = fixed
        else:
            space.fixed_parallel = fixed


def _pool_params(names: list[str]):
    from accelerators.base import Param
    return {p.name: p for p in (
        Param("prefill_count", int, "instances", 1, "prefill instances", 1, 4096, log=True),
        Param("decode_count", int, "instances", 1, "decode instances", 1, 4096, log=True),
        Param("prefill_tp", int, "devices", 1, "tensor-parallel devices per prefill instance",
              1, 64, log=True),
        Param("decode_tp", int, "devices", 1, "tensor-parallel devices per decode instance",
              1, 64, log=True),
        Param("prefill_device", str, "", names[0], "accelerator of the prefill pool",
              choices=tuple(names)),
        Param("decode_device", str, "", names[0], "accelerator of the decode pool",
              choices=tuple(names)))}


def _add_pool_space(spec: StudySpec, space: SearchSpace) -> None:
    """A disaggregated study's fixed pool values and searched dimensions (``pool.*``): the
    pools pick among the study's accelerators, so the ``design`` choice of ``accelerators``
    is theirs."""
    dg = spec.disaggregated
    if dg is None:
        if spec.search.pools:
            raise bad("search.pools", spec.search.pools, "expected a `disaggregated:` "
                      "section to search pools")
        return
    names = list(space.designs)
    if spec.alternatives and spec.search.hardware:
        raise bad("search.hardware", spec.search.hardware, "expected no hardware search with "
                  "several accelerators in a disaggregated study (each is a device type the "
                  "pools pick; search one accelerator's parameters instead)")
    params = _pool_params(names)
    fixed: dict[str, Any] = {}
    for pool in ("prefill", "decode"):
        section = getattr(dg, pool)
        for key, value in (("count", section.count), ("tp", section.tp),
                           ("device", section.device)):
            if value is not None:
                fixed[f"{pool}_{key}"] = params[f"{pool}_{key}"].coerce(
                    value, f"disaggregated.{pool}.{key}")
    for key, raw in _names_or_mapping(spec.search.pools, "search.pools").items():
        where = f"search.pools.{key}"
        if key not in params:
            raise bad(where, raw, "expected a pool parameter: " + ", ".join(params))
        if key in fixed:
            pool, _, what = key.partition("_")
            raise bad(where, raw, f"expected a parameter not also fixed in "
                      f"disaggregated.{pool}.{what}")
        got = parse_range(where, f"pool.{key}", raw, _hw_target(params[key], "pool"))
        if isinstance(got, Fixed):
            fixed[key] = got.value
        else:
            space.dimensions.append(got)
    space.dimensions = [d for d in space.dimensions if d.name != "design"]
    space.alternatives = False
    space.fixed_pool = {**{k: p.default for k, p in params.items()}, **fixed}


def _check_sampler(spec: StudySpec, objectives: list[obj.Objective]) -> None:
    name = spec.sampler.name
    need = SAMPLER_NEEDS.get(name)
    if need and importlib.util.find_spec(need) is None:
        raise bad("sampler.name", name, "expected a sampler whose package is installed: "
                  f"{name} needs "
                  f"`pip install {need}` (or use tpe, nsga2, nsga3, random or grid)")
    if name == "nsga2-vectorized" and spec.accelerators is not None:
        raise bad("sampler.name", name, "expected one accelerator (or sub_accelerators) for "
                  "nsga2-vectorized, whose genes cannot be conditional; use tpe or nsga2")
    if spec.sampler.operators != "numpy" and name != "nsga2-vectorized":
        raise bad("sampler.operators", spec.sampler.operators, "expected numpy for " + name
                  + " (operators are nsga2-vectorized's)")
    if spec.sampler.operators == "evox":
        from dse.study.evox_operators import available
        if not available():
            raise bad("sampler.operators", "evox", "expected numpy, or evox installed: "
                      "pip install 'accel-dse[evox]'")
    device = spec.sampler.device
    if device is not None and name != "nsga2-vectorized":
        raise bad("sampler.device", device, "expected no device for " + name
                  + " (only nsga2-vectorized scores generations as arrays)")
    if device == "cuda":
        from accelerators.array_ns import namespace
        try:
            namespace("cuda")
        except BadInput:
            raise bad("sampler.device", device, "expected cpu, torch or auto: no CUDA device "
                      "is visible") from None
    if name == "cmaes" and len(objectives) != 1:
        raise bad("sampler.name", name, f"expected a multi-objective sampler for {len(objectives)} "
                  "objectives (cmaes optimises one): tpe, nsga2, nsga3, gp, random, grid or qmc")


def grid_points(study: "ResolvedStudy") -> int:
    """Points of the study's grid search; :class:`BadInput` past ``MAX_GRID_POINTS`` (counted
    without building the grid)."""
    per_range = study.spec.sampler.grid_points
    n = 1
    for d in study.space.dimensions:
        n *= d.grid_size(per_range)
        if n > MAX_GRID_POINTS:
            raise bad("sampler.grid_points", per_range, f"expected a grid of at most "
                      f"{MAX_GRID_POINTS:,} points; this search space makes more (search fewer "
                      "parameters, give int ranges a step, or lower grid_points)")
    return n


def _check_trace(sv) -> None:
    """Read and check the serving study's trace now (a CSV's every row), as each trial will:
    a missing, unreadable or malformed trace is one line at load, not a study of pruned
    trials (and nothing of a file that is not a trace reaches the study's outputs)."""
    from workloads.traces import trace_from
    try:
        trace_from(sv.trace, sv.rate, sv.requests, None, sv.arrival, sv.burstiness, sv.seed)
    except BadInput as exc:
        raise BadInput(f"serving.trace ({exc.field})", Shown(exc.value), exc.allowed) from None


def load_quality_function(study: "ResolvedStudy"):
    """Import the study's ``quality.python`` function (user code: only when the study runs),
    or None; :class:`BadInput` when it cannot be imported."""
    return load_function(study.quality.python) if study.quality.python else None


def _masked(url: Any) -> Any:
    return redact_url(url) if isinstance(url, str) else url


def check_storage_url(url: Any, field_name: str = "storage") -> str:
    """``url`` if it names a storage a study can use (normalised: ``postgresql://`` gets the
    installed driver, since SQLAlchemy 2.1 defaults to psycopg 3); :class:`BadInput` otherwise."""
    if not isinstance(url, str) or "://" not in url:
        raise bad(field_name, _masked(url), "expected a URL like sqlite:///path/study.db or "
                  "postgresql://user:password@host/db")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in STORAGE_SCHEMES:
        raise bad(field_name, _masked(url), "expected a sqlite:/// or postgresql:// URL")
    if scheme.startswith("postgresql"):
        drivers = {"postgresql+psycopg2": "psycopg2", "postgresql+psycopg": "psycopg"}
        if scheme == "postgresql":
            found = [s for s, mod in drivers.items() if importlib.util.find_spec(mod)]
            if not found:
                raise bad(field_name, _masked(url), "expected psycopg2 to be installed for "
                          "PostgreSQL: pip install 'accel-dse[postgres]'")
            return f"{found[0]}://{rest}"
        if importlib.util.find_spec(drivers[scheme]) is None:
            raise bad(field_name, _masked(url), f"expected {drivers[scheme]} to be installed for "
                      "PostgreSQL: pip install 'accel-dse[postgres]'")
        return url
    if url.rstrip("/") in ("sqlite:", "sqlite:/", "sqlite://"):
        raise bad(field_name, _masked(url), "expected a file: sqlite:///path/study.db")
    if ":memory:" in url:
        raise bad(field_name, _masked(url), "expected a file (an in-memory database cannot be "
                  "shared or resumed)")
    return url
