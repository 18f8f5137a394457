"""nsga2-vectorized (dse/study/population.py): whole generations scored at once and stored in
the study's Optuna storage like any worker's trials; resume, reports, same seed same result."""

import numpy as np
import optuna
import pytest
import yaml

from dse.errors import BadInput
from dse.study.driver import run_study
from dse.study.evaluate import Evaluator
from dse.study.loader import load_study_text
from dse.study import population

STUDY = """
name: t_pop
seed: 3
workloads:
  - model: gpt2
    phase: decode
    context: 32
accelerator:
  template: npu
  preset: edge-32x32
search:
  hardware:
    rows: {choices: [8, 16, 32]}
    cols: {choices: [8, 16, 32]}
    dram_bandwidth_Bps: [2.0e9, 5.0e10]
  architecture:
    n_layer: [1, 4]
    d_model: {choices: [64, 128]}
    n_head: {choices: [2, 4]}
    d_ff: [64, 512]
objectives: [latency_s, energy_j]
constraints: ["area_mm2 <= 6.0"]
fidelity: fast
sampler: {name: nsga2-vectorized, population_size: 8}
trials: 20
"""


def study(**changes):
    data = yaml.safe_load(STUDY)
    data.update(changes)
    return load_study_text(yaml.safe_dump(data, sort_keys=False))


def run(s, tmp_path, name="out", **kw):
    return run_study(s, out=tmp_path / name, show_progress=False, **kw)


def stored(r):
    return optuna.load_study(study_name="t_pop", storage=f"sqlite:///{r.out_dir}/study.db").trials


def test_a_population_study_stores_trials_resumes_and_reports(tmp_path):
    first = run(study(), tmp_path, trials=12, write_report=False)
    assert sum(first.states.values()) == 12
    trials = stored(first)
    assert len(trials) == 12
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(set(t.user_attrs) >= {"metrics", "design", "simulator_version"}
                        for t in done)
    t = done[0]
    assert t.user_attrs["fidelity"] == "fast"
    assert t.user_attrs["metrics"]["latency_s"] == t.values[0]
    assert isinstance(t.system_attrs["constraints"], list)
    # the stored metrics are what one-by-one evaluation gives
    s = study()
    point = s.space.point(t.params)
    assert Evaluator(s, fidelity="fast").evaluate(point).metrics == t.user_attrs["metrics"]
    again = run(study(), tmp_path, trials=20, write_report=True)
    assert again.resumed_from == 12 and again.session_trials == 8
    assert len(stored(again)) == 20 and again.pareto
    assert (again.out_dir / "report.html").exists() or any(again.out_dir.glob("*.html"))


def test_same_seed_same_result(tmp_path):
    a, b = (run(study(), tmp_path, n, write_report=False) for n in ("a", "b"))
    ta, tb = stored(a), stored(b)
    assert [t.params for t in ta] == [t.params for t in tb]
    assert [t.values for t in ta] == [t.values for t in tb]
    c = run(study(seed=4), tmp_path, "c", write_report=False)
    assert [t.params for t in stored(c)] != [t.params for t in ta]


def test_alternatives_are_refused():
    data = yaml.safe_load(STUDY)
    del data["accelerator"], data["search"]["hardware"]
    data["accelerators"] = [{"name": "a", "template": "npu"}, {"name": "b", "template": "npu"}]
    with pytest.raises(BadInput, match="sampler.name"):
        load_study_text(yaml.safe_dump(data, sort_keys=False))


def test_selection_prefers_feasible_non_dominated_spread_points():
    f = np.array([[1.0, 4.0], [2.0, 2.0], [4.0, 1.0], [3.0, 3.0], [0.5, 0.5]])
    viol = np.array([0.0, 0.0, 0.0, 0.0, 0.7])          # the best point breaks a constraint
    rank = population.fronts(f, viol)
    assert rank.tolist() == [0, 0, 0, 1, 2]
    assert set(population.survivors(f, viol, 3).tolist()) == {0, 1, 2}
    enc = population.Encoding(study().space.dimensions)
    genes = np.random.default_rng(0).random((5, len(enc.dims)))
    for values in enc.decode(genes):
        assert np.allclose(enc.decode(enc.encode(values)[None])[0]["hw.dram_bandwidth_Bps"],
                           values["hw.dram_bandwidth_Bps"])


def test_dominance_matrix_follows_the_definition():
    """population.dominates against Deb's constrained dominance written pair by pair: ties,
    NaN objectives, infeasible rows, one to three objectives."""
    rng = np.random.default_rng(3)
    for m in (1, 2, 3):
        f = rng.integers(0, 4, (40, m)).astype(float)
        f[::9, m - 1] = np.nan
        viol = np.where(rng.random(40) < 0.3, rng.integers(1, 4, 40) / 2, 0.0)
        want = np.zeros((40, 40), dtype=bool)
        for i in range(40):
            for j in range(40):
                if viol[i] <= 0 and viol[j] <= 0:
                    want[i, j] = all(f[i] <= f[j]) and any(f[i] < f[j])
                else:
                    want[i, j] = viol[i] <= 0 or (viol[j] > 0 and viol[i] < viol[j])
        assert (population.dominates(f, viol) == want).all()


def test_a_generation_is_stored_as_optuna_stores_it(tmp_path):
    """The one-transaction write of a generation equals Optuna's own add_trial path."""
    from dse.study.batched_storage import BatchedStorage
    from dse.study.storage import open_storage
    dists = {"a": optuna.distributions.IntDistribution(1, 100, log=True),
             "b": optuna.distributions.CategoricalDistribution(["p", "q"])}
    done = optuna.trial.TrialState.COMPLETE
    made = [optuna.trial.create_trial(   # an infinite value: stored as Optuna's enum says
        state=done, values=[float(a), v], params={"a": a, "b": b}, distributions=dists,
        user_attrs={"metrics": {"x": a}}, system_attrs={"constraints": [a - 50.0]})
        for a, b, v in ((3, "p", 1.0), (70, "q", float("inf")))]
    made.append(optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED, params={"a": 5, "b": "q"}, distributions=dists,
        user_attrs={"infeasible_reason": "x"}))
    out = []
    for batch in (True, False):
        url = f"sqlite:///{tmp_path}/g{batch}.db"
        storage = BatchedStorage(open_storage(url), batch=batch)
        st = optuna.create_study(study_name="x", storage=storage, directions=["minimize"] * 2)
        st.tell(st.ask(), [1.0, 2.0])
        storage.add_finished_trials(st._study_id, made)
        reread = optuna.load_study(study_name="x", storage=url).trials
        out.append([(t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs,
                     t.distributions) for t in reread])
        assert [(t.datetime_start, t.datetime_complete) for t in reread[1:]] == [
            (t.datetime_start, t.datetime_complete) for t in made]
    assert out[0] == out[1] and [x[0] for x in out[0]] == [0, 1, 2, 3]


def test_the_array_device_scores_the_same_trials(tmp_path):
    """``sampler.device`` (issue 33): a generation's npu designs costed as one array program
    (numpy here; torch where it is installed) store the trials the fast path stores."""
    ref = stored(run(study(trials=16), tmp_path, "ref", write_report=False))
    devices = ["cpu"]
    try:
        import torch  # noqa: F401
        devices.append("torch")
    except ImportError:
        pass
    for device in devices:
        s = study(trials=16, sampler={"name": "nsga2-vectorized", "population_size": 8,
                                      "device": device})
        got = stored(run(s, tmp_path, device, write_report=False))
        assert [t.params for t in got] == [t.params for t in ref]
        assert [t.values for t in got] == [t.values for t in ref]
        assert ([t.user_attrs.get("metrics") for t in got]
                == [t.user_attrs.get("metrics") for t in ref])
        assert ([t.user_attrs.get("infeasible_reason") for t in got]
                == [t.user_attrs.get("infeasible_reason") for t in ref])


def test_a_device_needs_the_vectorised_sampler_and_a_visible_gpu():
    with pytest.raises(BadInput, match="sampler.device"):
        study(sampler={"name": "tpe", "device": "cpu"})
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        with pytest.raises(BadInput, match="sampler.device.*no CUDA"):
            study(sampler={"name": "nsga2-vectorized", "device": "cuda"})


def test_read_trials_equals_optunas_read(tmp_path):
    """dse.study.batched_storage.read_trials (the driver's end-of-run read) gives the trials
    Optuna's own read gives: every field, every state."""
    from dse.study.batched_storage import read_trials
    from dse.study.storage import open_storage
    r = run(study(trials=10), tmp_path, write_report=False)
    url = f"sqlite:///{r.out_dir}/study.db"
    s = optuna.load_study(study_name="t_pop", storage=url)
    s.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                          user_attrs={"fail_reason": "x"}))
    s.enqueue_trial({"hw.rows": 8})
    rdb = open_storage(url)
    try:
        mine = read_trials(rdb, s._study_id)
    finally:
        rdb.engine.dispose()
    theirs = optuna.load_study(study_name="t_pop", storage=url).get_trials(deepcopy=False)
    assert len(mine) == len(theirs) == 12
    for a, b in zip(mine, theirs):
        for f in ("number", "state", "values", "params", "distributions", "user_attrs",
                  "system_attrs", "datetime_start", "datetime_complete", "_trial_id"):
            assert getattr(a, f) == getattr(b, f), f


def test_evox_operators_run_repeat_and_keep_feasible_designs(tmp_path):
    """``operators: evox`` (EvoX's SBX, polynomial mutation, tournaments and environmental
    selection; constraints as constraint domination): same seed, same trials; the survivors
    put feasible designs first."""
    pytest.importorskip("evox")
    from dse.study import evox_operators
    s = study(trials=24, sampler={"name": "nsga2-vectorized", "population_size": 8,
                                  "operators": "evox"})
    a = stored(run(s, tmp_path, "a", write_report=False))
    b = stored(run(s, tmp_path, "b", write_report=False))
    assert len(a) == 24 and [t.params for t in a] == [t.params for t in b]
    assert [t.params for t in a] != [t.params for t in stored(run(study(trials=24), tmp_path,
                                                                  "numpy", write_report=False))]
    f = np.array([[1.0, 5.0], [2.0, 1.0], [0.5, 0.5], [3.0, 3.0]])
    viol = np.array([0.0, 0.0, 2.0, 0.0])
    assert set(evox_operators.survivors(f, viol, 2).tolist()) == {0, 1}
    assert set(evox_operators.survivors(f, viol, 3).tolist()) == {0, 1, 3}


def test_evox_operators_need_evox(monkeypatch):
    from dse.study import evox_operators
    monkeypatch.setattr(evox_operators, "available", lambda: False)
    with pytest.raises(BadInput, match="sampler.operators.*accel-dse\\[evox\\]"):
        study(sampler={"name": "nsga2-vectorized", "operators": "evox"})
    with pytest.raises(BadInput, match="sampler.operators"):
        study(sampler={"name": "tpe", "operators": "evox"})


def test_a_points_key_is_its_canonical_json():
    """Point.key (one encoder made once) is json.dumps(..., sort_keys=True, default=str) of the
    point's parts: the evaluation cache's key, unchanged."""
    import json
    from dse.study.space import Point, canonical_json
    p = Point("npu", {"npu": {"rows": 32, "clock_hz": 1.5e9, "z": float("nan"), "a": -0.0}},
              {"gpt2": {"n_layer": 3, "d_ff": (1, 2), "x": {3}}}, {}, sys={"b": True},
              formats={"kv": "int8"})
    want = json.dumps([p.design, p.hw, p.arch, p.assign, p.sys, p.parallel, p.formats],
                      sort_keys=True, default=str)
    assert p.key() == want and canonical_json({"b": 1, "a": [2.0]}) == '{"a": [2.0], "b": 1}'
