"""``fidelity: fast`` screens with the vectorised path; ``multi`` confirms its Pareto front with
the event-driven simulator, and only confirmed trials form the final front."""

import pytest

from dse import api
from simulators.engine import simulate
from tests.test_study_run import read_csv, run, stored, study


def test_fast_fidelity_equals_the_simulator_on_a_contention_free_workload(tmp_path):
    r = run(study(fidelity="fast", trials=6), tmp_path)
    trials = stored(r.out_dir, "t_run")
    assert {t.user_attrs["fidelity"] for t in trials} == {"fast"}
    for t in trials:
        if "metrics" not in t.user_attrs:
            continue
        d = t.user_attrs["design"]
        w = api.workload("linear", batch=2, arch=d["arch"]["linear"])
        hw = d["designs"]["npu"]["hw"]
        event = simulate(w, api.accelerator("npu:edge-32x32", hw))
        # the linear micro workload is one op: nothing contends, so both paths agree
        assert t.user_attrs["metrics"]["latency_s"] == pytest.approx(event.latency_s, rel=1e-9)


def test_multi_fidelity_confirms_the_fast_front_with_the_event_simulator(tmp_path):
    r = run(study(fidelity="multi", trials=12), tmp_path)
    rows = read_csv(r.trials_csv)
    fast = [x for x in rows if x["fidelity"] == "fast"]
    confirmations = [x for x in rows if x["fidelity"] == "event"]
    assert len(fast) == 12 and confirmations
    assert all(x["confirms"] for x in confirmations)
    screened = {x["number"]: x for x in fast}
    for x in confirmations:
        src = screened[x["confirms"]]
        assert {k: x[k] for k in x if k.startswith(("hw.", "arch."))} == \
               {k: src[k] for k in src if k.startswith(("hw.", "arch."))}
    front = read_csv(r.pareto_csv)
    assert front and all(x["fidelity"] == "event" for x in front)
    # a rerun confirms nothing twice
    again = run(study(fidelity="multi", trials=12), tmp_path)
    assert len(read_csv(again.trials_csv)) == len(rows)


def test_unknown_fidelity_is_a_one_line_error():
    from dse.errors import BadInput
    with pytest.raises(BadInput, match="fidelity"):
        study(fidelity="exact")


def _trial(number, values, fidelity, metrics, feasible=True, confirms=None, state=None):
    import optuna
    from optuna.trial import TrialState
    attrs = {"fidelity": fidelity, "metrics": metrics}
    if confirms is not None:
        attrs["confirms"] = confirms
    state = state or TrialState.COMPLETE
    t = optuna.trial.create_trial(
        state=state, values=values if state == TrialState.COMPLETE else None, params={},
        distributions={}, user_attrs=attrs,
        system_attrs={"constraints": [0.0 if feasible else 0.5]})
    t.number = number
    return t


def test_screening_counts_confirmed_dropped_and_unconfirmed_designs():
    from optuna.trial import TrialState
    from dse.study.screening import screening_summary
    s = study(fidelity="multi")   # objectives latency_s, energy_j; one constraint
    m = lambda lat, e: {"latency_s": lat, "energy_j": e}   # noqa: E731
    trials = [
        _trial(0, [1.0, 4.0], "fast", m(1.0, 4.0)),       # screened, confirmed
        _trial(1, [2.0, 3.0], "fast", m(2.0, 3.0)),       # screened, event infeasible
        _trial(2, [3.0, 2.0], "fast", m(3.0, 2.0)),       # screened, event dominated
        _trial(3, [4.0, 1.0], "fast", m(4.0, 1.0)),       # screened, never confirmed
        _trial(4, [5.0, 5.0], "fast", m(5.0, 5.0)),       # dominated: not screened
        _trial(5, [0.5, 0.5], "fast", m(0.5, 0.5), feasible=False),   # infeasible
        _trial(6, [1.25, 4.0], "event", m(1.25, 4.0), confirms=0),
        _trial(7, [2.5, 3.0], "event", m(2.5, 3.0), confirms=1, feasible=False),
        _trial(8, [3.0, 4.5], "event", m(3.0, 4.5), confirms=2),   # 6 dominates it
    ]
    r = screening_summary(trials, s)
    assert (r.screened, r.confirmed, r.dropped_infeasible, r.dropped_dominated,
            r.unconfirmed, r.dropped) == (4, 1, 1, 1, 1, 2)
    assert r.front_differs and r.from_earlier == 0
    assert r.max_rel_diff["latency_s"] == pytest.approx(0.25 / 1.25)    # trial 0: 1.0 vs 1.25
    assert r.max_rel_diff["energy_j"] == pytest.approx(2.5 / 4.5)       # trial 2: 2.0 vs 4.5
    # confirming every screened design unchanged: the fronts are the same
    same = [t for t in trials if t.number <= 5] + [
        _trial(10 + n, v, "event", m(*v), confirms=n)
        for n, v in ((0, [1.0, 4.0]), (1, [2.0, 3.0]), (2, [3.0, 2.0]), (3, [4.0, 1.0]))]
    r = screening_summary(same, s)
    assert (r.screened, r.confirmed, r.dropped, r.unconfirmed) == (4, 4, 0, 0)
    assert not r.front_differs and r.max_rel_diff["latency_s"] == 0.0
    # a failed confirmation drops out as infeasible
    failed = same[:-1] + [_trial(13, None, "event", {}, confirms=3, state=TrialState.FAIL)]
    assert screening_summary(failed, s).dropped_infeasible == 1


def test_a_multi_run_reports_its_screening_in_the_summary_and_json(tmp_path):
    import json
    from dse.study.driver import summary_dict
    r = run(study(fidelity="multi", trials=12), tmp_path)
    rows = read_csv(r.trials_csv)
    confirmations = [x for x in rows if x["fidelity"] == "event"]
    sc = r.screening
    assert sc.screened == len(confirmations) and sc.unconfirmed == 0
    assert sc.screened == sc.confirmed + sc.dropped
    assert sc.confirmed == len(read_csv(r.pareto_csv))
    out = json.loads(json.dumps(summary_dict(r)))["screening"]
    assert out["screened"] == sc.screened and out["dropped"] == sc.dropped
    assert set(out["max_rel_diff"]) == {"latency_s", "energy_j"}
    assert run(study(fidelity="fast", trials=4), tmp_path, name="fast").screening is None
