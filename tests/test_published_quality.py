"""Published accuracy (``quality: published``): the shipped ImageNet top-1 table is the networks
we capture, bad tables and uncovered architectures are one-line errors, and studies say which
quality source rated each trial."""

import csv
import json

import pytest
import yaml

from cli_runner import run_cli
from dse.errors import BadInput
from dse.quality import QualityConfig, QualityModel, count_params
from dse.quality.published import DEFAULT_TABLE, load_table, parse_table
from dse.study.loader import load_study_text
from workloads.build import build_workload
from workloads.ir import ATTENTION, CONV, MATMUL
from workloads.zoo import get_model

TABLE = load_table()


def test_the_shipped_table_holds_every_family_with_its_source_and_licence():
    names = {e.name for e in TABLE.entries}
    assert len(TABLE.entries) == 31
    assert {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vit_b_16",
            "vit_l_32", "mobilenet_v2_1.4_224", "mobilenet_v2_0.35_96"} <= names
    for source in TABLE.sources.values():
        assert source["url"].startswith("https://") and source["licence"]
    assert all(e.confidence == "R" and 0 < e.top1_pct <= 100 for e in TABLE.entries)


@pytest.mark.parametrize("entry", TABLE.entries, ids=lambda e: e.name)
def test_each_entry_is_the_network_its_source_counted(entry):
    """Parameters exact for torchvision's counts; TF-slim counts about 1 % fewer (it lists
    1001 classes and counts BatchNorm differently)."""
    spec = get_model(entry.model)
    ours = count_params(spec, spec.resolve_arch(entry.arch))
    tolerance = 0 if entry.source == "torchvision" else 0.02
    assert abs(ours - entry.published_params) <= tolerance * entry.published_params, ours


@pytest.mark.parametrize("name", ["mobilenet_v2_1.4_224", "mobilenet_v2_0.35_96",
                                  "mobilenet_v2_0.75_160", "resnet34", "vit_b_32"])
def test_captured_macs_match_the_published_counts(name):
    """MACs of the captured graph (conv, matmul, attention FLOPs / 2) within 3 % (or the 1.5 M
    that TF-slim's rounding to whole millions and its classifier convention allow)."""
    e = next(x for x in TABLE.entries if x.name == name)
    w = build_workload(e.model, phase="forward", batch=1, arch=e.arch)
    macs = sum(op.flops for op in w.ops if op.kind in (CONV, MATMUL, ATTENTION)) / 2
    assert abs(macs - e.published_macs) <= max(0.03 * e.published_macs, 1.5e6), macs


def test_lookup_finds_the_same_network_whatever_zoo_model_names_it():
    resnet101 = dict(get_model("resnet50").arch, blocks3=23)
    assert TABLE.lookup("resnet18", resnet101).name == "resnet101"   # same build, same arch
    assert TABLE.lookup("resnet50", {"blocks3": 23}).name == "resnet101"
    assert TABLE.lookup("resnet18", None).name == "resnet18"
    assert TABLE.lookup("mobilenetv2", {"width_mult": 1.4, "image_size": 96}) is None
    assert [e.name for e in TABLE.networks_for("resnet18")] == [
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
    assert TABLE.networks_for("gpt2") == []


def test_published_quality_is_top1_relative_to_the_reference():
    q = QualityModel(QualityConfig(source="published"))
    v = q("resnet50", dict(get_model("resnet50").arch, blocks2=8, blocks3=36))
    assert v.method == "published" and v.raw == 78.312
    assert v.value == pytest.approx(78.312 / 76.130)
    assert v.detail == "resnet152 (torchvision, [R])"
    with pytest.raises(BadInput, match="covers"):
        q("mobilenetv2", {"width_mult": 1.4, "image_size": 96})


# ----------------------------------------------------------------------------- bad tables
def _table(**changes) -> dict:
    data = json.loads(DEFAULT_TABLE.read_text())
    data["entries"] = data["entries"][:3]
    for k, v in changes.items():
        if v is None:
            data["entries"][1].pop(k)
        else:
            data["entries"][1][k] = v
    return data


@pytest.mark.parametrize("changes, field, words", [
    ({"top1_pct": 101}, "entries[1].top1_pct", "(0, 100]"),
    ({"top1_pct": 0}, "entries[1].top1_pct", "(0, 100]"),
    ({"top1_pct": "74.4"}, "entries[1].top1_pct", "(0, 100]"),
    ({"top1_pct": None}, "entries[1].top1_pct", "(0, 100]"),
    ({"source": "blog"}, "entries[1].source", "sources"),
    ({"confidence": "X"}, "entries[1].confidence", "P, R, D, E"),
    ({"model": "nope"}, "entries[1].model", "expected one of"),
    ({"arch": {"depth": 3}}, "entries[1].arch.depth", "architecture keys"),
    ({"arch": {"width_mult": 1.0, "image_size": 224}}, "entries[2]", "each network once"),
    ({"name": "mobilenet_v2_1.4_224"}, "entries[1].name", "a name of its own"),
    ({"extra": 1}, "entries[1].extra", "unknown key"),
])
def test_bad_tables_are_one_line_errors_naming_the_entry(changes, field, words):
    with pytest.raises(BadInput) as exc:
        parse_table(json.dumps(_table(**changes)))
    msg = str(exc.value)
    assert field in msg and words in msg and "\n" not in msg


def test_nan_and_infinity_are_refused():
    text = json.dumps(_table()).replace('"top1_pct": 74.4', '"top1_pct": NaN')
    with pytest.raises(BadInput, match="JSON table"):
        parse_table(text)
    with pytest.raises(BadInput, match="JSON table"):
        parse_table(text.replace("NaN", "Infinity"))


# ----------------------------------------------------------------------------- studies
STUDY = """
name: t_published
seed: 3
workloads:
  - model: resnet18
    batch: 1
  - model: mobilenetv2
    batch: 1
sub_accelerators:
  - {name: ws, template: npu, preset: edge-32x32, hw: {dataflow: ws}}
  - {name: os, template: npu, preset: edge-32x32, hw: {dataflow: os}}
search:
  hardware:
    ws.rows: {choices: [16, 32]}
  architecture:
    resnet18.network: [resnet18, resnet34]
    mobilenetv2.width_mult: {choices: [0.5, 1.0]}
    mobilenetv2.image_size: {choices: [128, 160]}
quality: published
objectives: [quality, energy_j]
sampler: random
trials: 4
"""


def study(edits: dict | None = None) -> str:
    """STUDY with the keys at slash-separated paths set (None writes null)."""
    data = yaml.safe_load(STUDY)
    for path, value in (edits or {}).items():
        node = data
        *parents, last = path.split("/")
        for p in parents:
            node = node[p]
        node[last] = value
    return yaml.safe_dump(data)


def test_a_published_study_resolves_networks_to_whole_architectures():
    s = load_study_text(study())
    dim = next(d for d in s.space.dimensions if d.name == "arch.resnet18.network")
    assert dim.choices == ("resnet18", "resnet34")
    point = s.space.point({"arch.resnet18.network": "resnet34"})
    assert point.arch["resnet18"]["blocks3"] == 6 and point.arch["resnet18"]["block"] == "basic"
    assert s.quality.source == "published"
    everything = load_study_text(study({"search/architecture/resnet18.network": None}))
    dim = next(d for d in everything.space.dimensions if d.name == "arch.resnet18.network")
    assert len(dim.choices) == 5


@pytest.mark.parametrize("edits, words", [
    ({"search/architecture/mobilenetv2.image_size": {"choices": [128, 200]}},
     'quality: expected architectures the published table covers'),
    ({"search/architecture/mobilenetv2.image_size": [96, 224]},
     "search.architecture.mobilenetv2.image_size: expected {choices: [...]}"),
    ({"search/architecture/resnet18.network": ["resnet34", "resnet999"]},
     "search.architecture.resnet18.network[1]: expected one of resnet18"),
    ({"search/architecture/resnet18.base_width": {"choices": [32, 64]}},
     "expected no other architecture key of resnet18"),
    ({"quality": "publishd"}, "quality.source: expected one of proxy or published"),
    ({"quality": {"source": "published", "python": "math:sqrt"}},
     "quality.python: expected either python or source: published"),
    ({"quality": {"table": "t.json"}}, "quality.table: expected source: published"),
    ({"quality": {"source": "published", "table": "/nonexistent/t.json"}},
     "quality.table: no such file"),
])
def test_bad_published_studies_are_one_line_errors(edits, words):
    with pytest.raises(BadInput) as exc:
        load_study_text(study(edits))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_cli_rejects_a_table_with_nan_and_an_uncovered_architecture(tmp_path, capsys):
    table = tmp_path / "t.json"
    table.write_text(json.dumps(_table()).replace('"top1_pct": 74.4', '"top1_pct": NaN'))
    path = tmp_path / "s.yaml"
    path.write_text(study({"quality": {"source": "published", "table": str(table)}}))
    code, out, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and "quality.table" in err and "NaN" in err
    assert not (tmp_path / "o").exists()
    path.write_text(study({"search/architecture/mobilenetv2.image_size": {"choices": [200]}}))
    code, out, err = run_cli(capsys, "study", "validate", str(path))
    assert code == 2 and err.count("\n") == 1 and '"image_size": 200' in err


def test_trials_csv_says_which_quality_source_rated_each_trial(tmp_path):
    from dse.study.driver import run_study

    s = load_study_text(study())
    r = run_study(s, trials=4, out=tmp_path / "o", show_progress=False, write_report=False)
    with open(r.trials_csv, newline="") as f:
        rows = [x for x in csv.DictReader(f) if x["state"] == "COMPLETE"]
    assert rows
    for x in rows:
        net = x["arch.resnet18.network"]
        assert x["resnet18.quality_source"] == f"published: {net} (torchvision, [R])"
        assert x["arch.resnet18.blocks3"] == {"resnet18": "2", "resnet34": "6"}[net]
        width = {"0.5": "0.5", "1.0": "1.0"}[x["arch.mobilenetv2.width_mult"]]
        mobilenet = f"mobilenet_v2_{width}_{x['arch.mobilenetv2.image_size']}"
        assert x["mobilenetv2.quality_source"] == (
            f"published: {mobilenet} (tf-slim-mobilenet-v2, [R])")
        top1 = {"resnet18": 69.758, "resnet34": 73.314}[net]
        assert float(x["resnet18.quality"]) == pytest.approx(top1 / 69.758)
