"""npu designs built as arrays (accelerators/npu_batch.py) equal the constructor's: every
attribute, the physical assessment field by field (exactly, not within a tolerance), on random
designs with feasible, infeasible (too many memory devices, no die option, interposer, power
density, scratchpad) and bad parameters; an infeasible or bad one is left to the constructor,
whose reason is then the prune reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from accelerators.npu import NPU
from accelerators.npu_batch import build_batch, build_npus
from accelerators.npu_vector import DesignArrays
from dse.errors import DSEError


def _random_hw(rng, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        hw = {"rows": int(rng.choice([4, 32, 128, 256, 1024])),
              "cols": int(rng.choice([4, 32, 128, 256, 1024])),
              "dataflow": str(rng.choice(["ws", "os", "is"])),
              "arrays": int(rng.choice([1, 2, 8, 64])),
              "clock_hz": float(10 ** rng.uniform(8, 9.5)),
              "dram_bandwidth_Bps": float(10 ** rng.uniform(9, 13))}
        if rng.random() < 0.3:
            hw["dram"] = str(rng.choice(["hbm2", "hbm3", "gddr6", "lpddr5", "ddr5"]))
        if rng.random() < 0.15:
            hw["chiplets"] = int(rng.integers(0, 5))
        if rng.random() < 0.15:
            hw["node_nm"] = int(rng.choice([5, 7, 16, 28]))
        if rng.random() < 0.1:
            hw["ifmap_sram_kb"] = int(rng.choice([1, 64, 8192]))
        if rng.random() < 0.1:
            hw["host_interface"] = str(rng.choice(["none", "pcie5x16"]))
        if rng.random() < 0.05:
            hw["dram_devices"] = int(rng.integers(1, 4))
        if rng.random() < 0.03:
            hw["rows"] = 2            # below the range: BadInput
        if rng.random() < 0.02:
            hw["bogus"] = 1           # not a parameter: BadInput
        out.append(hw)
    return out


def _same(a, b, where: str) -> None:
    assert type(a) is type(b), where
    if isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("preset", ["datacenter-bf16", "edge-32x32"])
def test_designs_built_as_arrays_equal_the_constructors(preset):
    rng = np.random.default_rng(7)
    hws = _random_hw(rng, 600)
    got = build_npus(preset, hws)
    kinds = {"batch": 0, "scratchpad": 0, "infeasible": 0, "bad": 0}
    for hw, d in zip(hws, got):
        try:
            want = NPU(preset, **hw)
        except DSEError:
            assert d is None, hw
            kinds["bad"] += 1
            continue
        problem = want.physical().problem   # a scratchpad's (want._problem) is an attribute
        if d is None:
            # left to the constructor: a problem it names, or a pinned device count
            assert problem or hw.get("dram_devices"), hw
            kinds["infeasible"] += 1
            continue
        assert problem is None, (hw, problem)
        assert set(vars(d)) == set(vars(want)), hw
        for k in vars(want):
            if k == "hw":
                assert list(d.hw.items()) == list(want.hw.items())
            else:
                _same(getattr(d, k), getattr(want, k), k)
        assert d.area_mm2() == want.area_mm2() and d.static_power_w() == want.static_power_w()
        kinds["scratchpad" if want._problem else "batch"] += 1
    # every kind of design occurs, and the constructor's problems are of several sorts
    assert min(kinds.values()) >= 5, kinds


@pytest.mark.parametrize("preset", ["datacenter-bf16", "edge-32x32"])
def test_a_batch_as_arrays_equals_its_designs_as_arrays(preset):
    """What the study reads of a batch without making its objects (the design arrays, area,
    cost, TDP, capacity, parameters) is bit for bit what the constructor's designs give, and
    no object is made to give it."""
    hws = _random_hw(np.random.default_rng(5), 400)
    batch, slots = build_batch(preset, hws)
    ks = [k for k in slots if k is not None]
    assert len(ks) >= 100
    got = batch.arrays.take(ks)
    assert not batch._objects   # nothing made so far
    want_designs = [NPU(preset, **hws[i]) for i, k in enumerate(slots) if k is not None]
    want = DesignArrays(want_designs)
    for name in ("_iv", "_fv", "_c_elems", "_side", "area_mm2", "static_power_w",
                 "capacity_bytes", "buildable"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert list(got._df) == list(want._df) and list(got._dtype) == list(want._dtype)
    problems = [[a.problem_texts[c - 1] if c else None for c in a.problem_codes.tolist()]
                for a in (got, want)]
    assert problems[0] == problems[1] and any(problems[1])
    for k, d in zip(ks, want_designs):
        phys = d.physical()
        assert (batch.area_mm2[k], batch.cost_usd[k], batch.tdp_w[k], batch.capacity_bytes[k]
                ) == (d.area_mm2(), phys.cost_usd, phys.tdp_w, d.memory_capacity_bytes())
        assert batch.hw[k] == dict(d.hw.items())
    assert not batch._objects
    assert got.designs[3] is batch.design(ks[3])   # made on demand, once


def test_the_problems_the_arrays_flag_are_the_constructors():
    rng = np.random.default_rng(11)
    hws = _random_hw(rng, 400)
    got = build_npus("datacenter-bf16", hws)
    reasons = set()
    for hw, d in zip(hws, got):
        if d is None and not hw.get("dram_devices"):
            try:
                want = NPU("datacenter-bf16", **hw)
            except DSEError:
                continue
            reason = want.physical().problem
            assert reason, hw
            reasons.add(reason.split(" ")[0])
    assert len(reasons) >= 2, reasons


STUDY = """
name: npu_batch
seed: 0
workloads:
  - {model: gpt2, phase: decode, batch: 2, context: 32}
accelerator: {template: npu, preset: datacenter-bf16}
search:
  hardware:
    rows: {choices: [4, 32, 256, 1024]}
    cols: {choices: [4, 32, 256, 1024]}
    dataflow:
    arrays: {choices: [1, 8, 64]}
    clock_hz: [1.0e8, 3.0e9]
    dram_bandwidth_Bps: [1.0e10, 1.0e13]
  architecture:
    n_layer: [1, 6]
    d_model: {low: 64, high: 256, step: 64}
    n_head: {choices: [2, 4]}
objectives: [latency_s, energy_j]
fidelity: fast
sampler: {name: nsga2-vectorized, population_size: 50}
"""


def test_a_batch_scores_the_same_with_designs_built_together(monkeypatch):
    """Evaluator.evaluate_batch with the npu designs built as arrays gives the evaluations it
    gives with each built by the constructor (metrics, records and prune reasons)."""
    from dse.study.evaluate import Evaluator
    from dse.study.loader import load_study_text
    from dse.study.population import Encoding
    s = load_study_text(STUDY)
    enc = Encoding(s.space.dimensions)
    pts = [s.space.point(v) for v in enc.decode(np.random.default_rng(3).random(
        (240, len(enc.dims))))]
    together = Evaluator(s, fidelity="fast").evaluate_batch(pts)
    monkeypatch.setattr(Evaluator, "_prebuild", lambda self, points: None)
    alone = Evaluator(s, fidelity="fast").evaluate_batch(pts)
    assert together == alone
    reasons = {e.infeasible.split(" ")[0] for e in together if e.infeasible}
    assert sum(e.metrics is not None for e in together) >= 40 and len(reasons) >= 2, reasons


TWO = """
name: npu_batch_two
seed: 0
workloads:
  - {model: gpt2, name: dec, phase: decode, batch: 2, context: 32, weight: 3}
  - {model: gpt2, name: pre, phase: prefill, batch: 1, seq: 16}
accelerator: {template: npu, preset: datacenter-bf16}
search:
  hardware:
    rows: {choices: [4, 32, 256, 1024]}
    cols: {choices: [4, 32, 256, 1024]}
    arrays: {choices: [1, 8, 64]}
    clock_hz: [1.0e8, 3.0e9]
    dram_bandwidth_Bps: [1.0e10, 1.0e13]
  architecture:
    dec.n_layer: [1, 6]
    dec.d_model: {low: 64, high: 256, step: 64}
    pre.n_head: {choices: [2, 4]}
    pre.d_ff: [64, 512]
objectives: [latency_s, energy_j]
fidelity: fast
sampler: {name: nsga2-vectorized, population_size: 50}
"""


@pytest.mark.parametrize("text, prefill_pairs", [(STUDY, True), (TWO, True), (TWO, False)],
                         ids=["one", "two-weighted", "two-one-without-pairs"])
def test_pair_scored_points_are_recorded_as_the_general_path_records_them(monkeypatch, text,
                                                                          prefill_pairs):
    """evaluate_batch answers a plain study's pair-scored points without the general
    _evaluate (Evaluator._evaluate_scored, from what was scored per point): the same
    Evaluations, dict key order included, as with that shortcut off (the pairs then looked up
    by architecture and design; one and two weighted workloads; feasible, pruned and repeated
    points)."""
    import json
    from dse.study.evaluate import Evaluator
    from dse.study.loader import load_study_text
    from dse.study.population import Encoding
    if not prefill_pairs:   # one workload left to its per-architecture build: the other's pairs
        family = Evaluator._score_family   # are then read by the general path
        monkeypatch.setattr(Evaluator, "_score_family", lambda self, w, *a: None
                            if w.phase == "prefill" else family(self, w, *a))
    s = load_study_text(text)
    enc = Encoding(s.space.dimensions)
    pts = [s.space.point(v) for v in enc.decode(np.random.default_rng(5).random(
        (160, len(enc.dims))))]
    pts += pts[:8]   # the same points again: answered from the cache
    taken = []
    scored = Evaluator._evaluate_scored

    def counting(self, point):
        ev = scored(self, point)
        taken.append(ev is not None)
        return ev
    monkeypatch.setattr(Evaluator, "_evaluate_scored", counting)
    short = Evaluator(s, fidelity="fast").evaluate_batch(pts)
    off = Evaluator(s, fidelity="fast")
    off._plain = False   # as a study with a system or quality: the general path on the pairs
    general = off.evaluate_batch(pts)
    assert short == general
    assert json.dumps([e.__dict__ for e in short]) == json.dumps([e.__dict__ for e in general])
    assert sum(taken) >= (20 if prefill_pairs else 0)
    assert sum(e.infeasible is not None for e in short) >= 10
