"""Studies of systems: the system section, searched topology / links / layout, system metrics,
pruned layouts with their reason, and one-line errors."""

import csv
from pathlib import Path

import pytest

from dse.errors import BadInput
from dse.study.driver import run_study
from dse.study.loader import load_study, load_study_text

STUDY = """
name: t_system
seed: 3
workloads:
  - model: llama2-7b
    phase: decode
    batch: 8
    context: 16
accelerator:
  template: gpu
  preset: h100
system: {sys: {switch_planes: 2}}
search:
  architecture:
    n_layer: {choices: [2]}
    d_model: {choices: [64]}
    n_head: {choices: [8]}
    n_kv_head: {choices: [4]}
    d_ff: {choices: [128]}
    vocab_size: {choices: [256]}
    max_seq: {choices: [64]}
  system:
    topology: {choices: [switch, ring]}
    links_per_device: {choices: [4, 18]}
  parallel:
    tp: {choices: [1, 2, 3, 4]}
objectives: [cost_usd, latency_s]
trials: 12
sampler: random
"""


def test_a_system_study_searches_topology_links_and_layout(tmp_path):
    s = load_study_text(STUDY)
    names = [d.name for d in s.space.dimensions]
    assert {"sys.topology", "sys.links_per_device", "par.tp"} <= set(names)
    r = run_study(s, trials=12, out=tmp_path, show_progress=False, write_report=False)
    assert r.states["FAIL"] == 0
    rows = list(csv.DictReader(open(r.trials_csv, newline="")))
    done = [x for x in rows if x["state"] == "COMPLETE"]
    assert done
    for x in done:
        assert float(x["devices"]) == int(x["par.tp"])
        assert x["sys.topology"] in ("switch", "ring")
        assert float(x["cost_usd"]) > 0
        if int(x["par.tp"]) > 1:
            assert float(x["communication_s"]) > 0
    three = [x for x in rows if x["par.tp"] == "3"]
    assert all("does not divide the 8 attention heads" in x["reason"] for x in three)
    # more devices cost more: the system's cost, not one chip's
    by_tp = {}
    for x in done:
        by_tp.setdefault(int(x["par.tp"]), []).append(float(x["cost_usd"]))
    if 1 in by_tp and 4 in by_tp:
        assert min(by_tp[4]) > max(by_tp[1])


def test_the_shipped_system_study_is_valid():
    s = load_study(Path(__file__).resolve().parent.parent / "studies" / "llama70b_system.yaml")
    names = {d.name for d in s.space.dimensions}
    assert {"design", "sys.topology", "sys.link", "par.tp", "par.pp"} <= names
    assert [o.metric for o in s.objectives] == ["cost_usd"]


@pytest.mark.parametrize("edit, field", [
    (("system: {sys: {switch_planes: 2}}\n", ""), "search.system"),
    (("system: {sys: {switch_planes: 2}}", "system: {sys: {wires: 2}}"), "system.sys.wires"),
    (("system: {sys: {switch_planes: 2}}", "system: {parallel: {tq: 2}}"),
     "system.parallel.tq"),
    (("system: {sys: {switch_planes: 2}}", "system: {preset: dgx-z}"), "system.preset"),
    (("sampler: random", "sampler: random\nfidelity: fast"), "fidelity"),
    (("    tp: {choices: [1, 2, 3, 4]}", "    tp: [0, 4]"), "search.parallel.tp"),
])
def test_bad_system_study_input_names_the_key(edit, field):
    with pytest.raises(BadInput) as exc:
        load_study_text(STUDY.replace(*edit))
    assert exc.value.field == field
