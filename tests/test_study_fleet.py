"""Disaggregated and fleet studies: they run, search what they say, and refuse bad input."""

import csv

import pytest

from dse.errors import BadInput
from dse.study.driver import run_study
from dse.study.loader import resolve

DISAGG = {
    "name": "t_disagg", "seed": 0,
    "disaggregated": {"model": "gpt2", "trace": "sharegpt", "rate": 100, "requests": 150,
                      "slo_ttft_s": 0.05, "slo_tpot_s": 0.003, "link": "pcie4x16"},
    "accelerators": [{"name": "a100", "template": "gpu", "preset": "a100"},
                     {"name": "l4", "template": "gpu", "preset": "l4"}],
    "search": {"pools": {"prefill_count": [1, 2], "decode_count": [1, 2],
                         "decode_device": ["a100", "l4"]}},
    "objectives": ["cost_per_mtok_usd", {"goodput_per_device_req_s": "maximize"}],
    "constraints": ["slo_attainment >= 0.5"],
    "fidelity": "fast", "sampler": "random", "trials": 4,
}
FLEET = {
    "name": "t_fleet", "seed": 0,
    "fleet": {"model": "gpt2", "trace": "sharegpt", "rate": 200, "slo_tpot_s": 0.004,
              "menu": [{"name": "l4", "accelerator": "gpu:l4", "price_usd_per_h": 0.7},
                       {"name": "a100", "accelerator": "gpu:a100", "price_usd_per_h": 3.67}],
              "price_basis": "a100"},
    "accelerator": {"template": "gpu", "preset": "a10g"},
    "search": {"hardware": {"memory_bandwidth_Bps": {"choices": [3.0e11, 6.0e11]}}},
    "objectives": ["fleet_cost_usd_per_h"],
    "fidelity": "fast", "sampler": "random", "trials": 2,
}


def _rows(r):
    with open(r.trials_csv, newline="") as f:
        return list(csv.DictReader(f))


def test_disaggregated_study_searches_pools(tmp_path):
    r = run_study(resolve(DISAGG), out=tmp_path / "d", show_progress=False,
                  write_report=False)
    rows = _rows(r)
    assert r.states["FAIL"] == 0 and len(rows) == 4
    done = [x for x in rows if x["state"] == "COMPLETE"]
    assert done
    for x in done:
        n = int(x["pool.prefill_count"]) + int(x["pool.decode_count"])
        assert float(x["devices"]) == n
        assert 0.0 <= float(x["slo_attainment"]) <= 1.0


def test_fleet_study_prices_the_design_and_beats_or_matches_the_menu(tmp_path):
    r = run_study(resolve(FLEET), out=tmp_path / "f", show_progress=False,
                  write_report=False)
    rows = [x for x in _rows(r) if x["state"] == "COMPLETE"]
    assert rows and r.states["FAIL"] == 0
    for x in rows:
        assert float(x["saving_vs_menu"]) >= -1e-9        # adding a device never costs more
        assert 0.0 <= float(x["design_share"]) <= 1.0
        assert float(x["fleet_cost_usd_per_h"]) > 0


@pytest.mark.parametrize("change, field", [
    ({"search": {"pools": {"prefill_count": [1, 2]}}, "disaggregated": None}, "search.pools"),
    ({"search": {"pools": {"decode_flavour": [1, 2]}}}, "search.pools.decode_flavour"),
    ({"disaggregated": {**DISAGG["disaggregated"], "prefill": {"count": 0}}},
     "disaggregated.prefill.count"),
])
def test_disaggregated_study_bad_input(change, field):
    data = {k: v for k, v in {**DISAGG, **change}.items() if v is not None}
    if "disaggregated" not in data:
        data["workloads"] = [{"model": "gpt2", "phase": "decode"}]
    with pytest.raises(BadInput) as exc:
        resolve(data)
    assert exc.value.field.startswith(field), exc.value


def test_fleet_study_bad_input():
    menu = FLEET["fleet"]["menu"]
    for fleet, field in (({**FLEET["fleet"], "slo_tpot_s": None}, "fleet.slo_tpot_s"),
                         ({**FLEET["fleet"], "menu": menu + [dict(menu[0], name="design")]},
                          "fleet.menu[2].name"),
                         ({**FLEET["fleet"], "price_basis": "tpu"}, "fleet.price_basis")):
        with pytest.raises(BadInput) as exc:
            resolve({**FLEET, "fleet": fleet})
        assert exc.value.field == field
