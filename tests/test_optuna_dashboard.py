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
    url = f"sqlite:///{out}/study.db"
    return optuna.load_study(study_name="t_dash", storage=url), front, url


def test_optuna_best_trials_are_our_pareto_front(study):
    s, front, _ = study
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
    s, front, _ = study
    system_attrs = s._storage.get_study_system_attrs(s._study_id)
    shown = {t.number: serializer.serialize_frozen_trial(s._study_id, t, system_attrs)
             for t in s.trials}
    complete = [t for t in s.trials if t.state.name == "COMPLETE"]
    for t in complete:  # the dashboard's rule: feasible when every constraint value <= 0
        assert all(c <= 0 for c in shown[t.number]["constraints"]) == is_feasible(t)
    feasible = [t for t in complete if all(c <= 0 for c in shown[t.number]["constraints"])]
    assert {t.number for t in get_pareto_front_trials(feasible, s.directions)} == front


def _get(app, path):
    """``GET path`` on a WSGI app: (status, parsed JSON)."""
    import io
    import json
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"] = status
    env = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "x",
           "SERVER_PORT": "80", "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http",
           "wsgi.errors": io.StringIO()}
    body = b"".join(app(env, start_response))
    return got["status"], json.loads(body)


def test_dse_dashboard_api_names_the_feasible_front_as_best(study):
    """Issue 27: optuna-dashboard's own API (``GET /api/studies/<id>``) names every
    non-dominated COMPLETE trial best, infeasible ones included; `dse study dashboard` serves
    it with the best trials the feasible front (what pareto.csv and Optuna's best_trials
    hold). Asked through the dashboard's WSGI API, not a filtered list."""
    pytest.importorskip("optuna_dashboard")
    import optuna_dashboard
    from dse.study.dashboard import create_app
    s, front, url = study
    status, detail = _get(create_app(url), f"/api/studies/{s._study_id}")
    assert status.startswith("200")
    assert {t["number"] for t in detail["best_trials"]} == front
    assert all(all(c <= 0 for c in t["constraints"]) for t in detail["best_trials"])
    status, stock = _get(optuna_dashboard.wsgi(url), f"/api/studies/{s._study_id}")
    infeasible = {t.number for t in s.trials if t.state.name == "COMPLETE"
                  and not is_feasible(t)}
    assert {t["number"] for t in stock["best_trials"]} & infeasible   # the stock view's flaw


def test_a_design_evaluated_twice_is_on_the_front_once():
    """Issue 27: a front listed one L40S confirmed 16 times as 16 designs; pareto.csv (and
    the report) keep the first trial of each design."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from dse.study.outputs import pareto_numbers
    resolved = load_study_text(yaml.safe_dump(SPEC))

    def trial(n, rows, values):
        t = create_trial(state=TrialState.COMPLETE, values=values,
                         params={"hw.rows": rows},
                         distributions={"hw.rows": CategoricalDistribution([8, 16, 1024])},
                         user_attrs={"design": {"designs": {"npu": {"hw": {"rows": rows}}}}},
                         system_attrs={"constraints": [-1.0, -1.0]})
        t.number = n
        return t
    trials = [trial(0, 8, [1.0, 2.0]), trial(1, 8, [1.0, 2.0]), trial(2, 16, [2.0, 1.0]),
              trial(3, 8, [1.0, 2.0])]
    assert pareto_numbers(trials, resolved) == [0, 2]
