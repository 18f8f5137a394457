"""Constraints are stored the way Optuna and optuna-dashboard read them (issue 20): Optuna's
``best_trials``, optuna-dashboard's view of each trial and our pareto.csv agree on which trials
are feasible and which form the front."""

import csv

import optuna
import pytest
import yaml

from dse.study.driver import run_study
from dse.study.loader import load_study_text
from dse.study.progress import is_feasible

SPEC = {
    "name": "t_dash", "seed": 7,
    "workloads": [{"model": "linear", "batch": 2}],
    "accelerator": {"template": "npu", "preset": "edge-32x32"},
    "search": {"hardware": {"rows": {"choices": [8, 16, 1024]}, "cols": {"choices": [8, 1024]},
                            "ifmap_sram_kb": {"choices": [1, 64]}}},
    "objectives": ["latency_s", "energy_j"],
    "constraints": ["area_mm2 <= 0.5", "latency_s <= 1"],
    "sampler": "grid",  # all 12 designs: feasible, too large, cannot run
    "trials": 12,
}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("dash") / "o"
    r = run_study(load_study_text(yaml.safe_dump(SPEC)), out=out, show_progress=False,
                  write_report=False)
    with open(r.pareto_csv, newline="") as f:
        front = {int(row["number"]) for row in csv.DictReader(f)}
    return optuna.load_study(study_name="t_dash", storage=f"sqlite:///{out}/study.db"), front


def test_optuna_best_trials_are_our_pareto_front(study):
    s, front = study
    assert {t.number for t in s.best_trials} == front
    assert s.user_attrs["constraints"] == ["area_mm2<=0.5", "latency_s<=1"]
    states = {t.state.name for t in s.trials}
    assert states == {"COMPLETE", "PRUNED"}
    assert any(not is_feasible(t) for t in s.trials if t.state.name == "COMPLETE")
    for t in s.trials:  # Optuna's list, one value per constraint in the study's order
        assert len(t.system_attrs["constraints"]) == 2


def test_optuna_dashboard_sees_the_same_feasible_trials_and_front(study):
    serializer = pytest.importorskip("optuna_dashboard._serializer")
    from optuna_dashboard._pareto_front import get_pareto_front_trials
    s, front = study
    system_attrs = s._storage.get_study_system_attrs(s._study_id)
    shown = {t.number: serializer.serialize_frozen_trial(s._study_id, t, system_attrs)
             for t in s.trials}
    complete = [t for t in s.trials if t.state.name == "COMPLETE"]
    for t in complete:  # the dashboard's rule: feasible when every constraint value <= 0
        assert all(c <= 0 for c in shown[t.number]["constraints"]) == is_feasible(t)
    feasible = [t for t in complete if all(c <= 0 for c in shown[t.number]["constraints"])]
    assert {t.number for t in get_pareto_front_trials(feasible, s.directions)} == front
