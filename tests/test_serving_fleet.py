"""Fleets (Mélange), disaggregated prefill / decode pools and speculative decoding: their
conservation laws, first-principles floors, the solver against brute force, and bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cli_runner import run_cli
from dse import api
from dse.errors import BadInput, InfeasibleDesign
from simulators import fleet as fl
from simulators.rate_search import max_rate
from simulators.speculative import acceptance_for, expected_tokens
from workloads.traces import trace_from

MENU = [{"name": "l4", "accelerator": "gpu:l4", "price_usd_per_h": 0.70},
        {"name": "a100", "accelerator": "gpu:a100", "price_usd_per_h": 3.67}]
FLEET = dict(trace="sharegpt", rate=200.0, requests=300, slo_tpot_s=0.004)


@pytest.fixture(scope="module")
def fleet_result():
    return api.fleet("gpt2", MENU, **FLEET)


def _floor_weights_s(accelerator: str, model: str = "gpt2") -> float:
    """Reading the weights once from DRAM: no decode step or prefill is faster."""
    from simulators.iteration_cost import Target
    from workloads.footprint import memory_footprint
    base = api._iteration_base(model, "bf16", None)
    d = api.accelerator(accelerator)
    return memory_footprint(Target(design=d).share(base)).weights_bytes / d.hw.memory_bandwidth_Bps


# ------------------------------------------------------------------------------------ fleets
def test_fleet_cost_is_instances_times_price_and_beats_every_single_type(fleet_result):
    f = fleet_result
    price = {m["name"]: m["price_usd_per_h"] for m in MENU}
    assert f.cost_usd_per_h == pytest.approx(sum(n * price[k] for k, n in f.counts.items()))
    assert f.counts and all(n >= 1 for n in f.counts.values())
    for single in f.single.values():
        if single is not None:
            assert f.cost_usd_per_h <= single["cost_usd_per_h"] + 1e-9
    assert f.saving == pytest.approx(1 - f.cost_usd_per_h / f.single[f.best_single]
                                     ["cost_usd_per_h"])
    for weights in f.routing.values():
        assert sum(weights.values()) == pytest.approx(1.0)
        assert set(weights) <= set(f.counts)
    # the load each type carries fits its instances
    for name, load in f.load.items():
        assert load <= f.counts[name] + 1e-9


def test_fleet_serves_every_request_once_with_its_tokens(fleet_result):
    f = fleet_result
    c = f.confirm
    tr = trace_from("sharegpt", FLEET["rate"], FLEET["requests"])
    assert c["requests"] == c["completed"] == len(tr) and c["rejected"] == 0
    assert sum(c["requests_per_type"].values()) == len(tr)
    assert c["output_tokens"] == int(tr.output_len.sum())
    # no request decodes faster than its device reads the weights
    assert c["tpot_s"]["p50"] >= min(_floor_weights_s(m["accelerator"]) for m in MENU)


def test_solver_matches_brute_force_on_a_small_instance():
    buckets = [fl.Bucket((1, 2), (1, 2), s, 10, 10) for s in (0.5, 0.3, 0.2)]
    devices = [fl.MenuDevice("cheap", 1.0, object()), fl.MenuDevice("big", 2.7, object())]
    rates = np.array([[3.0, 11.0], [1.0, 5.0], [0.0, 4.0]])   # bucket 3 only on "big"
    rate = 6.0
    sol = fl.solve(buckets, rate, devices, rates, slice_factor=1)
    best = math.inf
    for assign in itertools.product(range(2), repeat=3):
        if any(rates[b, g] == 0 for b, g in enumerate(assign)):
            continue
        load = [sum(buckets[b].share * rate / rates[b, g] for b, g2 in enumerate(assign)
                    if g2 == g) for g in range(2)]
        best = min(best, sum(math.ceil(x - 1e-9) * d.price_usd_per_h
                             for x, d in zip(load, devices)))
    assert sol["objective"] == pytest.approx(best)
    assert sol["y"] @ np.array([1.0, 2.7]) == pytest.approx(best)


def test_steady_state_profile_is_a_rate_the_simulation_sustains():
    """At the profiled rate the simulated instance keeps TPOT within the SLO on average; at
    twice it, it does not keep up or misses it (the steady-state model is not optimistic)."""
    from simulators.serving import simulate_serving
    from simulators.schedulers import make_scheduler
    from workloads.requests import LengthDistribution
    from workloads.traces import synthetic_trace
    base = api._iteration_base("gpt2", "bf16", None)
    cost = api._cost_model(base, api._target("gpu:a100", None, None, None, None, None,
                                             "fast"), 2048)
    bucket = fl.Bucket((64, 256), (64, 256), 1.0, 100, 100)
    slo = 0.004
    r = fl.profile(cost, bucket, slo, None)
    assert r > 0
    dist = LengthDistribution("b", 100.0, 100.0, cv=0.0, max_len=1 << 20)

    def run(rate):
        return simulate_serving(cost, synthetic_trace(dist, rate, 1500, seed=0),
                                make_scheduler("continuous"))
    ok = run(0.9 * r)
    assert ok.tpot_s["mean"] <= slo
    over = run(2.0 * r)
    assert over.tpot_s["mean"] > slo or over.ttft_s["p90"] > 10 * ok.ttft_s["p90"]


def test_max_rate_brackets_and_bisects():
    assert max_rate(lambda r: r <= 7.3, 1.0) == pytest.approx(7.3, rel=0.02)
    assert max_rate(lambda r: r <= 0.05, 4.0) == pytest.approx(0.05, rel=0.02)
    assert max_rate(lambda r: False, 1.0) == 0.0


def test_fleet_bad_input():
    with pytest.raises(BadInput, match="menu"):
        api.fleet("gpt2", [{"name": "tiny", "accelerator": "gpu:l4",
                            "hw": {"memory_capacity_bytes": 2e8}, "price_usd_per_h": 1.0}],
                  **FLEET, confirm=False)
    with pytest.raises(BadInput, match="slo_tpot_s: expected SLOs some device"):
        api.fleet("gpt2", MENU, **{**FLEET, "slo_tpot_s": 1e-6}, confirm=False)
    with pytest.raises(BadInput, match=r"routing\.\*: expected weights summing to 1"):
        api.fleet("gpt2", MENU, **FLEET, counts={"l4": 1, "a100": 1},
                  routing={"*": {"l4": 0.5, "a100": 0.6}})
    with pytest.raises(BadInput, match="a fleet of zero devices"):
        api.fleet("gpt2", MENU, **FLEET, counts={"l4": 0}, routing={"*": {"l4": 1.0}})
    with pytest.raises(BadInput, match=r"menu\[0\]\.price_usd_per_h"):
        api.fleet("gpt2", [{**MENU[0], "price_usd_per_h": -1}], **FLEET)
    with pytest.raises(BadInput, match="slo_tpot_s: expected a TPOT or a TTFT"):
        api.fleet("gpt2", MENU, trace="sharegpt", rate=10)


def test_given_fleet_is_simulated_as_routed():
    f = api.fleet("gpt2", MENU, **FLEET, counts={"l4": 3, "a100": 1},
                  routing={"*": {"l4": 0.75, "a100": 0.25}})
    assert f.cost_usd_per_h == pytest.approx(3 * 0.70 + 3.67)
    served = f.confirm["requests_per_type"]
    assert served["l4"] + served["a100"] == FLEET["requests"]
    assert served["a100"] == pytest.approx(0.25 * FLEET["requests"], abs=3)


def test_fleet_cli_bad_input_is_one_line(capsys):
    code, _, err = run_cli(capsys, "fleet", "gpt2", "--device", "gpu:l4=0.7", "--trace",
                           "sharegpt", "--rate", "10")
    assert code == 2 and err.count("\n") == 1 and "slo_tpot_s" in err


# ------------------------------------------------------------------------ disaggregated
@pytest.fixture(scope="module")
def disagg():
    return api.serve_disaggregated("gpt2", prefill={"accelerator": "gpu:a100", "count": 2},
                                   decode={"accelerator": "gpu:a100", "count": 1},
                                   link="pcie4x16", links=1, trace="sharegpt", rate=60,
                                   requests=200, slo_ttft_s=0.05, slo_tpot_s=0.005)


def test_disaggregated_every_token_once_and_kv_moved_equals_kv_written(disagg):
    o = disagg.outcome
    assert o.done.all()
    assert (o.generated == o.output_len).all()
    assert (o.first_token_s >= o.arrival_s).all() and (o.finish_s >= o.first_token_s).all()
    per_token = disagg.kv_bytes_written / float(o.input_len.sum())
    moved = float(o.input_len[o.output_len > 1].sum()) * per_token
    assert disagg.kv_bytes_transferred == pytest.approx(moved)
    assert disagg.per_pool["transfers"] == int((o.output_len > 1).sum())


def test_disaggregated_latencies_respect_floors(disagg):
    o = disagg.outcome
    floor = _floor_weights_s("gpu:a100")
    assert o.ttft_s().min() >= floor            # a prefill reads the weights at least once
    multi = o.output_len > 1
    assert np.nanmin(o.tpot_s()[multi]) >= floor  # so does every decode step
    link = disagg.link
    per_token = disagg.kv_bytes_written / float(o.input_len.sum())
    t = disagg.transfer_s[multi]
    assert (t >= link["latency_s"] + o.input_len[multi] * per_token / link["bandwidth_Bps"]
            - 1e-12).all()
    s = disagg.summary()
    assert s["devices"] == 3 and s["goodput_per_device_req_s"] == pytest.approx(
        s["goodput_req_s"] / 3)


def test_disaggregated_bad_input():
    kw = dict(trace="sharegpt", rate=10, requests=20)
    with pytest.raises(BadInput, match=r"prefill\.count: .*a pool of zero devices"):
        api.serve_disaggregated("gpt2", {"accelerator": "gpu:a100", "count": 0},
                                {"accelerator": "gpu:a100"}, **kw)
    with pytest.raises(BadInput, match="link: expected a link standard"):
        api.serve_disaggregated("gpt2", {"accelerator": "gpu:a100"},
                                {"accelerator": "gpu:a100"}, link="carrier-pigeon", **kw)
    with pytest.raises(BadInput, match=r"decode\.colour"):
        api.serve_disaggregated("gpt2", {"accelerator": "gpu:a100"}, {"colour": "red"}, **kw)
    # an unbuildable pool's reason comes out once (SimPy re-raised it as "infeasible design:
    # infeasible design: ...")
    with pytest.raises(InfeasibleDesign, match=r"^infeasible design: 1 dies of") as exc:
        api.serve_disaggregated("gpt2", {"accelerator": "gpu", "hw": {"sms": 400,
                                                                      "sms_on_die": 400}},
                                {"accelerator": "gpu:a100"}, **kw)
    assert str(exc.value).count("infeasible design") == 1


# -------------------------------------------------------------------------- speculative
def test_expected_tokens_and_its_inverse():
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    for a in (0.1, 0.6, 0.95):
        assert acceptance_for(expected_tokens(a, 5), 5) == pytest.approx(a, abs=1e-9)


def test_speculation_produces_every_token_once_and_respects_floors():
    kw = dict(draft="gpt2", accelerator="gpu:a100", input_len=64, output_len=97, batch=3)
    full = api.speculate("gpt2-medium", k=4, acceptance=1.0, **kw)
    assert full.output_tokens == 3 * 97
    assert full.rounds == math.ceil(96 / 5) and full.tokens_per_round <= 5
    none = api.speculate("gpt2-medium", k=4, acceptance=0.0, **kw)
    assert none.output_tokens == 3 * 97 and none.tokens_per_round == 1.0
    assert none.speedup < 1.0 < full.speedup          # drafting is pure cost when all rejected
    floor = _floor_weights_s("gpu:a100", "gpt2-medium")
    assert full.verify_s >= floor and full.baseline_tpot_s >= floor
    half = api.speculate("gpt2-medium", k=4, acceptance=0.7, seed=3, **kw)
    assert 1.0 <= half.tokens_per_round <= 5.0
    assert half.output_tokens == 3 * 97


def test_overlapped_drafting_is_never_slower_than_serial():
    kw = dict(draft={"model": "gpt2", "accelerator": "gpu:a100"}, accelerator="gpu:a100",
              k=3, acceptance=0.8, output_len=64)
    serial = api.speculate("gpt2-medium", **kw)
    parallel = api.speculate("gpt2-medium", overlap=True, **kw)
    assert parallel.round_s <= serial.round_s + 1e-12
    assert parallel.round_s == pytest.approx(max(parallel.draft_s, parallel.verify_s))


def test_speculation_bad_input():
    with pytest.raises(BadInput, match=r"acceptance: expected .* \[0, 1\]"):
        api.speculate("gpt2-medium", draft="gpt2", acceptance=1.5, accelerator="gpu:a100")
    with pytest.raises(BadInput, match="draft: expected a draft smaller than the target"):
        api.speculate("gpt2", draft="gpt2-medium", acceptance=0.5, accelerator="gpu:a100")
    with pytest.raises(BadInput, match=r"k: expected"):
        api.speculate("gpt2-medium", draft="gpt2", k=0, acceptance=0.5, accelerator="gpu:a100")
    with pytest.raises(BadInput, match="accepted_tokens"):
        api.speculate("gpt2-medium", draft="gpt2", k=2, accepted_tokens=4.0,
                      accelerator="gpu:a100")
    with pytest.raises(BadInput, match="overlap"):
        api.speculate("gpt2-medium", draft="gpt2", acceptance=0.5, accelerator="gpu:a100",
                      overlap=True)
