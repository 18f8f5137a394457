"""Fuzzing the study loader: no input may produce anything but a resolved study or one
:class:`BadInput` line (never a traceback)."""

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.errors import BadInput
from dse.study.loader import ResolvedStudy, load_study_text, resolve

VALID = yaml.safe_load("""
name: fuzz
workloads:
  - model: linear
    batch: 2
accelerator:
  template: npu
  preset: edge-32x32
  hw: {clock_hz: 5.0e8}
search:
  hardware:
    rows: [8, 64]
    cols: {choices: [8, 16]}
    dataflow:
  architecture:
    m: {low: 64, high: 256, step: 64}
objectives: [latency_s, {energy_j: minimize}]
constraints: ["latency_s <= 0.02", {metric: area_mm2, op: "<=", value: 100}]
sampler: {name: nsga2, population_size: 4}
trials: 5
""")

KEYS = ["name", "seed", "workloads", "accelerator", "accelerators", "sub_accelerators",
        "budgets", "assignment", "search", "hardware", "architecture", "objectives",
        "constraints", "sampler", "trials", "timeout_s", "storage", "quality", "model", "phase",
        "batch", "template", "preset", "hw", "rows", "cols", "dataflow", "low", "high", "log",
        "step", "choices", "name", "weight", "m", "latency_s", "quality", "python", "segments"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["latency_s <= 1", "abc", "npu", "linear", "ws", "tpe", "cmaes", "1e400",
                     "quality >= 0.8", "default", "-", "os:getcwd", "sqlite:///x.db", "null"]))
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6), st.integers()),
                        children, max_size=4)),
    max_leaves=20)


def check(result):
    assert isinstance(result, ResolvedStudy)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(VALID) if p]


def _set(data, path, value):
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _outcome(fn, *args):
    try:
        check(fn(*args))
    except BadInput as exc:
        assert "\n" not in str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_PATHS), values)
def test_mutating_one_value_of_a_valid_study(path, value):
    data = copy.deepcopy(VALID)
    _set(data, path, value)
    _outcome(resolve, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=8))
def test_random_documents(data):
    _outcome(resolve, data)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text(text):
    _outcome(load_study_text, text)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(ALL_PATHS), st.text(alphabet=":-[]{}!&*#|>'\"%@`, \n\t?", max_size=8))
def test_yaml_special_characters_in_a_valid_file(path, junk):
    data = copy.deepcopy(VALID)
    _set(data, path, "X")
    text = yaml.safe_dump(data).replace("X", junk, 1)
    _outcome(load_study_text, text)


def test_the_valid_document_is_valid():
    check(resolve(copy.deepcopy(VALID)))
