"""Cost per token (simulators/economics.py, issue 27): explicit parameters, the utilisation
the run measured by default, by hand."""

import pytest

from dse import api
from dse.errors import BadInput
from simulators.economics import HOURS_PER_YEAR, Economics, token_cost

ARCH = {"n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 8, "d_ff": 1024,
        "vocab_size": 1024, "max_seq": 4096}


def test_cost_per_token_by_hand():
    r = api.serve("llama2-7b", accelerator="gpu:h100", arch=ARCH, rate=50, requests=100)
    ec = r.economics
    u = r.busy_s / r.span_s
    assert 0 < u < 1 and ec["utilisation"] == pytest.approx(u)
    e = Economics()
    hours = e.amortisation_years * HOURS_PER_YEAR
    static = api.accelerator("gpu:h100").static_power_w()
    dynamic = r.energy_j - static * r.span_s
    power = dynamic / r.busy_s * u + static
    per_hour = (r.cost_usd + e.host_usd) / hours + e.pue * (power + e.host_w) / 1e3 * e.usd_per_kwh
    tokens_per_hour = r.output_tokens / r.span_s * 3600   # busy share = measured utilisation
    assert r.cost_per_mtok_usd == pytest.approx(per_hour / tokens_per_hour * 1e6, rel=1e-9)
    # a load that runs a tenth of the time: every token carries 10x the hardware and host
    slow = token_cost(Economics(utilisation=u / 10), r.output_tokens, r.span_s, r.busy_s,
                      dynamic, static, r.cost_usd)
    assert slow["usd_per_hour"]["hardware"] == pytest.approx(ec["usd_per_hour"]["hardware"])
    assert slow["cost_per_mtok_usd"] > 5 * r.cost_per_mtok_usd


def test_economics_parameters_are_checked():
    with pytest.raises(BadInput, match="economics.pue"):
        Economics(pue=0.9)
    with pytest.raises(BadInput, match="economics.bogus"):
        Economics.of({"bogus": 1})
    assert Economics.of({"pue": None}).pue == Economics().pue
