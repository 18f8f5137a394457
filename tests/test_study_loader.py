"""Study files: validation, one-line errors with the key path, exit code 2 and nothing written."""

import json
from pathlib import Path

import pytest
import yaml

from cli_runner import run_cli
from dse.errors import BadInput
from dse.study.loader import load_study, load_study_text, parse_yaml

BASE = """
name: t_loader
seed: 1
workloads:
  - model: linear
accelerator:
  template: npu
  preset: edge-32x32
search:
  hardware:
    rows: [8, 64]
    cols: {choices: [8, 16, 32]}
    dataflow:
    dram_bandwidth_Bps: [1.0e9, 1.0e11]
  architecture:
    m: {low: 64, high: 256, step: 64}
objectives:
  - latency_s
  - energy_j: minimize
constraints:
  - latency_s <= 0.02
  - area_mm2 <= 100
trials: 5
"""


def edit(path: str, value):
    """BASE with the key at dotted ``path`` set to ``value`` (None deletes it)."""
    data = yaml.safe_load(BASE)
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return yaml.safe_dump(data, sort_keys=False)


def error_of(text: str) -> str:
    with pytest.raises(BadInput) as exc:
        load_study_text(text, source="s.yaml")
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_list_of_names_searches_their_declared_ranges():
    s = load_study_text(edit("search.hardware", ["rows", "dataflow", "dram"]))
    rows, dataflow, dram = s.space.dimensions[:3]
    assert (rows.low, rows.high, rows.log) == (4, 1024, True)
    assert dataflow.choices == ("ws", "os", "is") and "hbm3" in dram.choices


def test_three_or_more_numbers_are_choices():
    s = load_study_text(edit("search.hardware.rows", [16, 32, 64]))
    assert s.space.dimensions[0].choices == (16, 32, 64)


def test_a_valid_study_resolves_to_its_search_space():
    s = load_study_text(BASE)
    dims = {d.name: d for d in s.space.dimensions}
    assert list(dims) == ["hw.rows", "hw.cols", "hw.dataflow", "hw.dram_bandwidth_Bps", "arch.m"]
    assert dims["hw.rows"].kind == "int" and dims["hw.rows"].log  # log as npu declares
    assert dims["hw.cols"].choices == (8, 16, 32)
    assert dims["hw.dataflow"].choices == ("ws", "os", "is")  # null: the declared choices
    assert dims["hw.dram_bandwidth_Bps"].low == 1.0e9  # 1.0e9 is a number, not a string
    assert (dims["arch.m"].low, dims["arch.m"].high, dims["arch.m"].step) == (64, 256, 64)
    assert [o.direction for o in s.objectives] == ["minimize", "minimize"]
    assert [c.label for c in s.constraints] == ["latency_s<=0.02", "area_mm2<=100"]


def test_the_issue_example_message():
    assert error_of(edit("search.hardware.rows", "abc")) == \
        'search.hardware.rows: expected an int range like [4, 1024], got "abc"'


@pytest.mark.parametrize("path,value,expect", [
    ("colour", "red", 'colour: unknown key; expected one of name, description'),
    ("workloads.0.batchsize", 4, "workloads[0].batchsize: unknown key"),
    ("trials", "many", 'trials: expected an int, got "many"'),
    ("seed", -1, "seed: expected a value >= 0, got -1"),
    ("search.hardware.rows", [], "search.hardware.rows: expected an int range like"),
    ("search.hardware.rows", [64, 8], "expected low < high (the range is empty or inverted), "
                                      "got [64, 8]"),
    ("search.hardware.rows", [8, 8], "expected low < high"),
    ("search.hardware.rows", [2, 4096], "expected a range within the declared [4, 1024] PEs"),
    ("search.hardware.cols", {"choices": []}, "search.hardware.cols.choices: expected a list"),
    ("search.hardware.dataflow", ["ws", "zz"], "search.hardware.dataflow[1]: expected one of "
                                               "'ws', 'os', 'is', got \"zz\""),
    ("search.hardware.banks", [1, 4], "search.hardware.banks: expected a npu parameter: rows"),
    ("search.hardware.rows", {"low": 8, "high": 64, "log": True, "step": 8},
     "expected either log or step"),
    ("search.hardware.rows", {"low": 8, "hi": 64}, "search.hardware.rows.hi: unknown range key"),
    ("search.architecture.m", None, "search.architecture.m: expected an int range like"),
    ("search.architecture.depth", [1, 2], "expected a linear architecture key: m, k, n, bias"),
    ("objectives", ["latency_s", "speed"], "objectives[1]: expected a metric: latency_s"),
    ("objectives", [{"latency_s": "smallest"}], "objectives[0].latency_s: expected minimize or "
                                                "maximize"),
    ("constraints", ["power <= 3"], 'constraints[0]: expected a metric: latency_s, energy_j'),
    ("constraints", ["latency_s == 3"], "expected 'metric <= value' or 'metric >= value'"),
    ("constraints", ["latency_s <= fast"], "expected a finite number after the operator"),
    ("accelerator.template", "tpu", "accelerator.template: expected one of npu"),
    ("accelerator.preset", "huge", "accelerator.preset: expected a npu preset: datacenter-bf16"),
    ("accelerator.hw", {"rows": 0}, "accelerator.hw.rows: expected an int in [4, 1024] PEs"),
    ("workloads.0.model", "gpt5", "workloads[0].model: expected one of"),
    ("workloads.0.phase", "decode", "workloads[0].phase: linear runs phases forward"),
    ("sampler", "annealing", "sampler.name: expected one of tpe, nsga2"),
    ("budgets", {"total_pes": 100}, "budgets: expected no budgets without sub_accelerators"),
    ("accelerators", [{"name": "a", "template": "npu"}, {"name": "b", "template": "npu"}],
     "expected exactly one of accelerator, accelerators, sub_accelerators"),
    ("name", "no spaces", "name: expected a name of letters, digits"),
    ("objectives", ["quality"], "objectives[0]: expected a quality proxy for linear"),
    ("storage", "redis://host", "storage: expected a sqlite:/// or postgresql:// URL"),
    ("workloads", None, "workloads: required, got nothing"),
])
def test_bad_input_is_one_line_naming_the_key(path, value, expect):
    text = edit(path, value) if value is not None or path == "workloads" else edit(path, None)
    if value is None and path == "search.architecture.m":
        text = edit(path, "default")
    assert expect in error_of(text)


def test_cmaes_needs_one_objective_or_its_package():
    msg = error_of(edit("sampler", "cmaes"))
    assert msg.startswith("sampler.name: ")
    assert "cmaes" in msg


def test_yaml_syntax_errors_and_duplicate_keys_name_the_line():
    msg = error_of("name: x\nworkloads: [model: linear\n")
    assert msg.startswith("s.yaml:") and "invalid YAML" in msg
    msg = error_of(BASE + "trials: 6\n")
    assert "duplicate key 'trials'" in msg and msg.startswith("s.yaml:")


def test_not_a_mapping():
    assert error_of("- a\n- b\n").startswith("study: expected a mapping of study keys")
    assert error_of("").startswith("study: expected a mapping")


def test_yaml_is_loaded_safely():
    with pytest.raises(BadInput):
        parse_yaml("!!python/object/apply:os.system ['echo hacked']")


def test_missing_file():
    with pytest.raises(BadInput, match="no such file"):
        load_study("/nonexistent/study.yaml")


def test_cli_bad_study_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(edit("search.hardware.rows", "abc"))
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "study", "run", str(path), "--out", str(out))
    assert code == 2
    assert err == 'error: search.hardware.rows: expected an int range like [4, 1024], ' \
                  'got "abc"\n'
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_cli_bad_flags_exit_2_and_write_nothing(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(BASE)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(out), "--workers", "0")
    assert code == 2 and err.startswith("error: --workers: expected an int in [1, 256]")
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(out), "--storage",
                           "mysql://x/y")
    assert code == 2 and err.startswith("error: --storage: ")
    assert not out.exists()


def test_schema_is_json_schema_of_the_study_file(capsys):
    code, out, _ = run_cli(capsys, "study", "schema")
    assert code == 0
    schema = json.loads(out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"name", "workloads", "accelerator", "sub_accelerators", "search", "objectives",
            "constraints", "sampler", "trials", "storage"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"name", "objectives"}
    assert schema["oneOf"] == [{"required": ["workloads"]}, {"required": ["serving"]},
                               {"required": ["disaggregated"]}, {"required": ["fleet"]}]


def test_validate_prints_the_space(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(BASE)
    code, out, _ = run_cli(capsys, "study", "validate", str(path), "--json")
    assert code == 0
    info = json.loads(out)
    assert [d["name"] for d in info["dimensions"]][:2] == ["hw.rows", "hw.cols"]
    assert not (tmp_path / "runs").exists()


STUDIES = [Path(__file__).resolve().parent.parent / "studies" / f"{n}.yaml"
           for n in ("npu_resnet50", "gpu_vs_npu_llama2", "codesign_gpt2_npu", "nasaic_multitask",
                     "nasaic_published")]


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_studies_are_valid(path):
    s = load_study(path)
    assert s.name == path.stem
    assert s.space.dimensions
