"""The fast screening path agrees with the event-driven simulator where nothing contends."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from accelerators.registry import get_template
from simulators.engine import simulate
from simulators.fast import evaluate_many, evaluate_points
from workloads.capture import capture


@pytest.fixture(scope="module")
def chain():
    """An MLP: every op depends on the previous one, so nothing can contend."""
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.LayerNorm(1024),
                          nn.Linear(1024, 256), nn.Softmax(dim=-1))
        x = torch.zeros(64, 512)
    return capture(m, (x,), model="mlp")


def designs():
    npu = get_template("npu")
    return [npu(rows=r, cols=c, dataflow=df) for r in (8, 32, 128) for c in (16, 128)
            for df in ("ws", "os", "is")]


def test_fast_equals_simpy_without_contention(chain):
    ds = designs()
    fast = evaluate_many(chain, ds)
    for i, d in enumerate(ds):
        r = simulate(chain, d)
        assert fast.latency_s[i] == pytest.approx(r.latency_s, rel=1e-9)
        assert fast.energy_j[i] == pytest.approx(r.energy_j, rel=1e-9)
        assert fast.area_mm2[i] == pytest.approx(r.area_mm2)
        assert fast.avg_power_w[i] == pytest.approx(r.avg_power_w, rel=1e-9)
        assert fast.throughput[i] == pytest.approx(r.throughput, rel=1e-9)


def test_fast_is_a_lower_bound_under_contention():
    from dse import api
    w = api.workload("gpt2", phase="decode", context=128, arch={"n_layer": 2})
    ds = designs()
    fast = evaluate_many(w, ds)
    for i, d in enumerate(ds):
        assert fast.latency_s[i] <= simulate(w, d).latency_s * (1 + 1e-9)


def test_invalid_points_are_infeasible_with_a_reason(chain):
    npu = get_template("npu")
    res = evaluate_points(chain, npu, [{"rows": 32}, {"rows": -4}, {"dataflow": "xx"}])
    assert np.isfinite(res.latency_s[0])
    assert np.isnan(res.latency_s[1]) and "hw.rows" in res.infeasible[1]
    assert "hw.dataflow" in res.infeasible[2]


def test_templates_that_cost_a_whole_workload_agree_too():
    """The wafer maps ops by the workload's phase (``costs``), not op by op: the fast path must
    ask it the same way the simulator does. A one-row prefill chain is where they differ."""
    from accelerators.registry import make_accelerator
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))
        x = torch.zeros(1, 512)
    w = capture(m, (x,), model="mlp", phase="prefill", seq=1)
    for spec in ("wafer:wse-1k", "npu", "gpu:a100"):
        d = make_accelerator(spec)
        assert evaluate_many(w, [d]).latency_s[0] == pytest.approx(simulate(w, d).latency_s,
                                                                   rel=1e-9), spec
