"""Cost per token (simulators/economics.py, issue 27): explicit parameters, the utilisation
the run measured by default, by hand."""

import pytest

from dse import api
from dse.errors import BadInput
from simulators.economics import HOURS_PER_YEAR, Economics, run_usd, token_cost

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
    # replicas, fleets and disaggregated pools cost a run with the same formula (run_usd)
    assert run_usd(e, r.cost_usd, r.energy_j, r.span_s) / r.output_tokens * 1e6 == \
        pytest.approx(r.cost_per_mtok_usd, rel=1e-9)


def test_economics_parameters_are_checked():
    with pytest.raises(BadInput, match="economics.pue"):
        Economics(pue=0.9)
    with pytest.raises(BadInput, match="economics.bogus"):
        Economics.of({"bogus": 1})
    assert Economics.of({"pue": None}).pue == Economics().pue


def test_a_fleet_design_s_derived_price_is_its_hour_at_tdp():
    """api.fleet's default price of a design (and a fleet study's price basis): the economics'
    hour of ownership at the design's TDP, host included, by hand."""
    from dse.serving_api import derived_price_usd_per_h
    from simulators.iteration_cost import Target
    d = api.accelerator("gpu:a100")
    p, e = d.physical(), Economics()
    hours = e.amortisation_years * HOURS_PER_YEAR
    by_hand = (p.cost_usd + e.host_usd) / hours + e.pue * (p.tdp_w + e.host_w) / 1e3 \
        * e.usd_per_kwh
    assert derived_price_usd_per_h(Target(design=d)) == pytest.approx(by_hand, rel=1e-12)
    assert derived_price_usd_per_h(Target(design=d), {"pue": 1.0}) < by_hand
