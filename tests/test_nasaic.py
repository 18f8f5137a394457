"""NASAIC reproduction: the step model (concurrent sub-accelerators, shared budgets), specs from
the reference design, and a reduced run of both flows with the paper's orderings."""

import json

import pytest

from cli_runner import run_cli
from dse.reproduce import nasaic
from dse.reproduce.table import Row

#: A reduced version: three networks per task (150 trials per flow and two seeds below).
SMALL = {"mobilenet": ["mobilenet_v2_1.0_224", "mobilenet_v2_0.75_160", "mobilenet_v2_1.4_224"],
         "resnet": ["resnet18", "resnet34", "resnet152"]}


@pytest.fixture(scope="module")
def ev():
    return nasaic.Evaluator(SMALL)


def test_tasks_on_one_sub_accelerator_run_one_after_the_other(ev):
    hw = ((32, 32, 1.28e10), (16, 16, 6.4e9))
    nets = ("mobilenet_v2_1.0_224", "resnet18")
    apart = ev.metrics(nasaic.Design(nets, hw, ("nvdla", "shidiannao")))
    shared = ev.metrics(nasaic.Design(nets, hw, ("nvdla", "nvdla")))
    a = ev.run_alone(nets[0], "nvdla", hw[0])
    b = ev.run_alone(nets[1], "shidiannao", hw[1])
    c = ev.run_alone(nets[1], "nvdla", hw[0])
    assert apart["latency_s"] == pytest.approx(max(a[0], b[0]))
    assert shared["latency_s"] == pytest.approx(a[0] + c[0])
    static_w = sum(ev.sub_accelerator(s, h).static_power_w()
                   for s, h in zip(("nvdla", "shidiannao"), hw))
    assert shared["energy_j"] == pytest.approx(a[1] + c[1] + static_w * shared["latency_s"])
    assert apart["total_pes"] == 32 * 32 + 16 * 16
    assert apart["total_bandwidth_Bps"] == pytest.approx(1.92e10)
    assert apart["area_mm2"] == shared["area_mm2"]
    assert apart["mean_top1_pct"] == pytest.approx((71.8 + 69.758) / 2)


def test_the_specs_are_what_the_reference_design_does(ev):
    design, m = nasaic.reference(ev)
    specs = nasaic.specs_of(ev)
    assert design.nets == ("mobilenet_v2_1.0_224", "resnet18")
    assert (specs.latency_s, specs.energy_j, specs.area_mm2) == (
        m["latency_s"], m["energy_j"], m["area_mm2"])
    v = specs.violations(m)
    assert v["latency_s"] == v["energy_j"] == v["area_mm2"] == 0.0
    assert v["total_pes"] < 0 and v["total_bandwidth_Bps"] == 0.0
    big = dict(m, total_pes=8192.0)
    assert specs.violations(big)["total_pes"] == pytest.approx(1.0)


def test_a_seed_gives_the_same_design(ev):
    specs = nasaic.specs_of(ev)
    one = nasaic.co_exploration(ev, specs, 25, seed=4)
    two = nasaic.co_exploration(ev, specs, 25, seed=4)
    assert one.design == two.design and one.metrics == two.metrics


def test_reduced_reproduction_has_the_papers_orderings():
    rows = nasaic.rows(trials=150, seeds=(0, 1), networks=SMALL)
    assert len(rows) == 6 and all(isinstance(r, Row) for r in rows)
    by = {r.metric.split(":")[0].split(",")[0]: r for r in rows}
    assert rows[0].ours == 1.0, rows[0].note      # the sequential flow violates the specs
    assert rows[1].ours == 1.0, rows[1].note      # co-exploration meets them
    assert by["latency"].ours < 1.0               # lower latency
    assert by["energy"].ours > 1.0                # lower energy
    assert by["area"].ours > 1.0                  # smaller area
    assert rows[5].ours > 0                       # at some accuracy loss
    assert "resnet152" in rows[0].note and "specs (the reference design)" in rows[0].note


def test_cli_json(monkeypatch, capsys):
    monkeypatch.setattr(nasaic, "TRIALS", 20)
    monkeypatch.setattr(nasaic, "SEEDS", (0,))
    real = nasaic.Evaluator
    monkeypatch.setattr(nasaic, "Evaluator", lambda networks=None: real(networks or SMALL))
    code, out, err = run_cli(capsys, "reproduce", "nasaic", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["rows"]) == 6
    for r in data["rows"]:
        assert set(r) >= {"metric", "paper", "ours", "ratio", "within_35pct", "note"}
        assert r["ratio"] == pytest.approx(r["ours"] / r["paper"])


def test_unknown_networks_are_refused():
    with pytest.raises(ValueError, match="resnet999"):
        nasaic.Evaluator({"resnet": ["resnet999"]})
