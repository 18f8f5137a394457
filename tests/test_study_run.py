"""Running studies end to end on a small workload: outputs, Pareto front, resume, determinism,
infeasible and failing trials, samplers, alternative and heterogeneous designs."""

import csv
import importlib.util
import math

import optuna
import pytest
import yaml

from dse.errors import BadInput
from dse.study.batched_storage import BatchedStorage
from dse.study.driver import run_study
from dse.study.loader import load_study_text
from dse.study.pareto import dominates
from dse.study.storage import open_storage

STUDY = """
name: t_run
seed: 7
workloads:
  - model: linear
    batch: 2
accelerator:
  template: npu
  preset: edge-32x32
search:
  hardware:
    rows: {choices: [8, 16, 32, 64]}
    cols: {choices: [8, 16, 32, 64]}
    dataflow:
    dram_bandwidth_Bps: [2.0e9, 5.0e10]
  architecture:
    m: {choices: [64, 128]}
    n: {choices: [128, 256]}
objectives: [latency_s, energy_j]
constraints: ["area_mm2 <= 6.0"]
trials: 10
"""


def study(text=STUDY, **changes):
    data = yaml.safe_load(text)
    data.update(changes)
    return load_study_text(yaml.safe_dump(data, sort_keys=False))


def run(s, tmp_path, name="out", **kw):
    kw.setdefault("show_progress", False)
    kw.setdefault("write_report", False)
    return run_study(s, out=tmp_path / name, **kw)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stored(out_dir, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out_dir}/study.db").trials


def test_a_run_writes_every_trial_and_the_feasible_pareto_front(tmp_path):
    s = study()
    r = run(s, tmp_path)
    assert sum(r.states.values()) == 10 and r.session_trials == 10
    rows = read_csv(r.trials_csv)
    assert [int(x["number"]) for x in rows] == list(range(10))
    for col in ("hw.rows", "hw.clock_hz", "arch.m", "arch.k", "latency_s", "energy_j",
                "area_mm2", "avg_power_w", "edp", "throughput", "params", "flops",
                "violation:area_mm2<=6", "simulator_version"):
        assert col in rows[0], col
    feasible = [x for x in rows if x["feasible"] == "True"]
    assert all(float(x["area_mm2"]) <= 6.0 for x in feasible)
    assert all(float(x["area_mm2"]) > 6.0 for x in rows if x["feasible"] == "False"
               and x["state"] == "COMPLETE")
    front = read_csv(r.pareto_csv)
    assert front and {x["number"] for x in front} <= {x["number"] for x in feasible}
    vec = {x["number"]: (float(x["latency_s"]), float(x["energy_j"])) for x in feasible}
    for x in front:  # nothing feasible dominates a front member, and the front is complete
        assert not any(dominates(v, vec[x["number"]]) for v in vec.values())
    others = set(vec) - {x["number"] for x in front}
    assert all(any(dominates(vec[f["number"]], vec[o]) for f in front) for o in others)
    # every trial stores its metrics, design and the simulator version
    t = stored(r.out_dir, "t_run")[0]
    assert set(t.user_attrs) >= {"metrics", "design", "simulator_version"}
    assert t.user_attrs["design"]["designs"]["npu"]["hw"]["node_nm"] == 28  # preset value
    assert t.user_attrs["metrics"]["latency_s"] == t.values[0]
    # constraints as Optuna's list (what best_trials and optuna-dashboard read), named in order
    # by the study's user attr
    assert isinstance(t.system_attrs["constraints"], list) and set(t.constraints) == {"0"}
    stored_study = optuna.load_study(study_name="t_run",
                                     storage=f"sqlite:///{r.out_dir}/study.db")
    assert stored_study.user_attrs["constraints"] == ["area_mm2<=6"]


def test_rerunning_resumes_and_counts_finished_trials(tmp_path):
    s = study()
    first = run(s, tmp_path, trials=4)
    before = {t.number: t.params for t in stored(first.out_dir, "t_run")}
    again = run(s, tmp_path, trials=9)
    assert again.resumed_from == 4 and again.session_trials == 5
    after = stored(again.out_dir, "t_run")
    assert len(after) == 9
    assert {t.number: t.params for t in after if t.number < 4} == before
    done = run(s, tmp_path, trials=9)
    assert done.session_trials == 0 and len(read_csv(done.trials_csv)) == 9


def test_resuming_with_another_spec_is_refused(tmp_path):
    run(study(), tmp_path, trials=2)
    other = study(objectives=["latency_s", "area_mm2"])
    with pytest.raises(BadInput, match="^study: expected the spec the stored study was made"):
        run(other, tmp_path)


def test_same_seed_same_trials_and_front(tmp_path):
    a = run(study(), tmp_path, "a")
    b = run(study(), tmp_path, "b")
    ta, tb = stored(a.out_dir, "t_run"), stored(b.out_dir, "t_run")
    assert [t.params for t in ta] == [t.params for t in tb]
    assert [t.values for t in ta] == [t.values for t in tb]
    assert a.pareto == b.pareto
    c = run(study(seed=8), tmp_path, "c")
    assert [t.params for t in stored(c.out_dir, "t_run")] != [t.params for t in ta]


def test_infeasible_designs_are_pruned_with_their_reason_and_the_search_goes_on(tmp_path):
    s = study(search={"hardware": {"rows": {"choices": [64, 1024]},
                                   "ifmap_sram_kb": {"choices": [1, 64]}}})
    r = run(s, tmp_path, trials=12)
    rows = read_csv(r.trials_csv)
    assert len(rows) == 12
    pruned = [x for x in rows if x["state"] == "PRUNED"]
    assert pruned and all("ifmap_sram_kb" in x["reason"] for x in pruned)
    assert any(x["state"] == "COMPLETE" for x in rows)
    t = [t for t in stored(r.out_dir, "t_run") if t.state.name == "PRUNED"][0]
    assert "cannot hold one minimal tile" in t.user_attrs["infeasible_reason"]
    assert all(v > 0 for v in t.constraints.values())


def failing_quality(arch):
    """A user quality function that fails for one architecture."""
    if arch["m"] == 128:
        raise RuntimeError("no score for m=128")
    return arch["n"] / 256


def test_a_failing_trial_is_recorded_and_the_search_goes_on(tmp_path):
    s = study(quality={"python": "tests.test_study_run:failing_quality"},
              objectives=["latency_s", "quality"])
    r = run(s, tmp_path, trials=10)
    rows = read_csv(r.trials_csv)
    failed = [x for x in rows if x["state"] == "FAIL"]
    assert failed and all("RuntimeError: no score for m=128" in x["reason"] for x in failed)
    done = [x for x in rows if x["state"] == "COMPLETE"]
    assert done and all(float(x["quality"]) == int(x["arch.n"]) / 256 for x in done)


SAMPLERS = ["random", "grid", "nsga2", "nsga3", "tpe",
            pytest.param("qmc", marks=pytest.mark.skipif(
                importlib.util.find_spec("scipy") is None, reason="qmc needs scipy")),
            pytest.param("gp", marks=pytest.mark.skipif(
                importlib.util.find_spec("scipy") is None, reason="gp needs scipy"))]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_samplers_run(tmp_path, sampler):
    r = run(study(sampler=sampler, trials=5), tmp_path)
    assert sum(r.states.values()) == 5


@pytest.mark.skipif(importlib.util.find_spec("cmaes") is None, reason="cmaes not installed")
def test_cmaes_runs_one_objective(tmp_path):
    r = run(study(sampler="cmaes", objectives=["edp"], trials=5), tmp_path)
    assert sum(r.states.values()) == 5


def test_alternative_designs_pick_one_per_trial(tmp_path):
    s = study(accelerator=None, accelerators=[
        {"name": "edge", "template": "npu", "preset": "edge-32x32"},
        {"name": "big", "template": "npu", "preset": "datacenter-bf16"}],
        search={"hardware": {"edge.rows": {"choices": [16, 32]}},
                "architecture": {"m": {"choices": [64, 128]}}}, trials=8)
    r = run(s, tmp_path)
    rows = read_csv(r.trials_csv)
    assert {x["design"] for x in rows} <= {"edge", "big"}
    for x in rows:
        if x["design"] == "big":
            assert x["hw.big.rows"] == "128" and x["hw.edge.rows"] == ""
        else:
            assert x["hw.edge.rows"] in ("16", "32")


def test_heterogeneous_sub_accelerators_with_budgets(tmp_path):
    s = study(accelerator=None, sub_accelerators=[
        {"name": "a", "template": "npu", "preset": "edge-32x32", "hw": {"dataflow": "ws"}},
        {"name": "b", "template": "npu", "preset": "edge-32x32", "hw": {"dataflow": "os"}}],
        budgets={"total_pes": 2048, "total_bandwidth_Bps": 2.0e10},
        assignment={"segments": 1},
        workloads=[{"model": "linear", "name": "l1"},
                   {"model": "linear", "name": "l2", "weight": 2}],
        search={"hardware": {"a.rows": {"choices": [16, 64]}, "b.rows": {"choices": [16, 64]}},
                "architecture": {"l1.m": {"choices": [64, 128]}}},
        objectives=["latency_s", "energy_j"],
        constraints=["l2.latency_s <= 0.01"], trials=8)
    assert [c.label for c in s.constraints] == ["l2.latency_s<=0.01", "total_pes<=2048",
                                                "total_bandwidth_Bps<=2e+10"]
    r = run(s, tmp_path)
    rows = read_csv(r.trials_csv)
    for x in rows:
        assert x["assign.l1.0"] in ("a", "b") and x["assign.l2.0"] in ("a", "b")
        pes = int(x["hw.a.rows"]) * int(x["hw.a.cols"]) + int(x["hw.b.rows"]) * int(x["hw.b.cols"])
        assert float(x["total_pes"]) == pes
        lat = float(x["l1.latency_s"]) + 2 * float(x["l2.latency_s"])
        assert float(x["latency_s"]) == pytest.approx(lat)
        energy = float(x["l1.energy_j"]) + 2 * float(x["l2.energy_j"])
        assert float(x["energy_j"]) == pytest.approx(energy)
        assert (x["feasible"] == "True") == (pes <= 2048 and float(x["l2.latency_s"]) <= 0.01
                                             and float(x["total_bandwidth_Bps"]) <= 2e10)


def test_batched_and_plain_storage_store_the_same_trial(tmp_path):
    """The one-transaction write stores exactly what Optuna's own methods store."""
    out = []
    for batch in (True, False):
        storage = BatchedStorage(open_storage(f"sqlite:///{tmp_path}/b{batch}.db"), batch=batch)
        st = optuna.create_study(study_name="x", storage=storage, directions=["minimize"] * 2,
                                 sampler=optuna.samplers.RandomSampler(seed=0))
        for _ in range(3):
            t = st.ask()
            a = t.suggest_int("a", 1, 100, log=True)
            b = t.suggest_categorical("b", ["p", "q"])
            t.set_user_attr("metrics", {"x": a, "y": math.inf})
            t.set_constraint("c", a - 50.0)
            st.tell(t, [a, float("inf") if b == "p" else 1.0])
        reread = optuna.load_study(study_name="x", storage=f"sqlite:///{tmp_path}/b{batch}.db")
        out.append([(t.number, t.state, t.values, t.params, t.user_attrs, t.constraints,
                     t.distributions) for t in reread.trials])
        assert all(t.datetime_complete >= t.datetime_start for t in reread.trials)
    assert out[0] == out[1]


def test_timeout_stops_starting_trials(tmp_path):
    r = run(study(timeout_s=0.5, trials=100000), tmp_path)
    assert 0 < r.session_trials < 100000
    assert len(read_csv(r.trials_csv)) == r.session_trials


def test_cli_run_json_summary(tmp_path, capsys):
    import json

    from dse.cli import main
    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    with pytest.raises(SystemExit) as exc:
        main(["study", "run", str(path), "--out", str(tmp_path / "o"), "--trials", "3", "--json"])
        raise SystemExit(0)
    assert (exc.value.code or 0) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["study"] == "t_run" and info["session_trials"] == 3
    assert info["states"]["COMPLETE"] + info["states"]["PRUNED"] == 3
    assert (tmp_path / "o" / "trials.csv").exists() and (tmp_path / "o" / "study.db").exists()


def test_grid_visits_each_point_once_and_stops(tmp_path):
    s = study(sampler="grid", trials=50,
              search={"hardware": {"rows": {"choices": [8, 16]}, "dataflow": None}})
    r = run(s, tmp_path)
    rows = read_csv(r.trials_csv)
    assert r.target == 6 and len(rows) == 6
    assert len({(x["hw.rows"], x["hw.dataflow"]) for x in rows}) == 6
