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
