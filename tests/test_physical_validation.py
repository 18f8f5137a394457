"""The physical model against published chips (docs/validation.md, "Physical model"): the
shipped area constants are what the calibration gives, leave-one-out leaves a die out whole,
and the errors stay at what was measured (the issue's targets, median |area error| <= 20 %,
each <= 35 %, TDP <= 25 %, are not met; the docs say why)."""

import pytest

from accelerators import technology as tech, wafer
from accelerators.gpu import GPU
from dse.calibrate import physical_fit as pf
from dse.calibrate.published_chips import BLOCKS, CHIPS

#: Measured with `python benchmarks/physical_validation.py` (rounded up to the next percent).
AREA_MEDIAN, AREA_MAX = 0.25, 0.55          # shipped constants
LOO_MEDIAN, LOO_MAX = 0.26, 0.76            # each die left out of the fit
TDP_MEDIAN, TDP_MAX = 0.37, 10.04


@pytest.fixture(scope="module")
def rows():
    return pf.validation_rows()


def test_published_facts_are_complete():
    assert len({c.die for c in CHIPS}) >= 11 and len(CHIPS) >= 12
    assert all(c.die_source.startswith("[") and c.tdp_source.startswith("[") for c in CHIPS)
    assert all(b.source.startswith("[") and 0 < b.share < 1 for b in BLOCKS)
    dies = {c.die for c in CHIPS}
    assert all(b.die in dies for b in BLOCKS)


def test_shipped_constants_are_the_calibration():
    u, e = pf.derived_constants()
    assert u == pytest.approx(tech.LOGIC_PLACEMENT_UTILISATION, abs=0.005)
    assert e == pytest.approx(tech.SRAM_ARRAY_EFFICIENCY, abs=0.005)
    fitted, shipped = pf.fit(), pf.Constants.shipped()
    assert fitted.control_overhead == pytest.approx(shipped.control_overhead, rel=1e-3)
    assert fitted.sm_overhead == pytest.approx(shipped.sm_overhead, rel=1e-3)
    # the fit does not depend on where it starts, nor leave the constants changed
    assert pf.Constants.shipped() == shipped


def test_wse2_core_is_counted_from_its_parts():
    assert wafer.WSE2_CORE_LOGIC_AREA_MM2 == pytest.approx(wafer.wse2_core_logic_area_mm2(), rel=1e-5)
    # more SRAM per core, more area; a finer node, less
    assert wafer.wse2_core_logic_area_mm2(7, 96 * 1024) > wafer.wse2_core_logic_area_mm2()
    assert wafer.wse2_core_logic_area_mm2(5) < wafer.wse2_core_logic_area_mm2(7)


def test_leave_one_out_leaves_a_die_out_whole():
    loo = pf.leave_one_out()
    # the graphics GPUs are checked, not fitted: leaving them out changes nothing
    assert loo["T4"][1] == loo["RTX 3090"][1] == pf.fit()
    assert loo["H100 SXM"][1] == loo["H200 SXM"][1]     # one die, left out together
    assert loo["H100 SXM"][1] != loo["A100 SXM"][1]
    # TPUv4i's CMEM is one of the blocks that set the SRAM efficiency: out with its die
    assert loo["TPUv4i"][1].sram_array_efficiency != pf.Constants.shipped().sram_array_efficiency


def test_every_published_chip_is_a_buildable_preset(rows):
    for r in rows:
        assert pf.design(r.chip).physical().problem is None, r.chip.name
        assert r.area_mm2 > 0 and r.tdp_w > 0 and r.cost_usd > 0


def test_area_errors_are_what_was_measured(rows):
    med, worst = pf.median_max([r.area_error for r in rows])
    assert med <= AREA_MEDIAN and worst <= AREA_MAX
    med, worst = pf.median_max([r.loo_error for r in rows])
    assert med <= LOO_MEDIAN and worst <= LOO_MAX


def test_tdp_errors_are_what_was_measured(rows):
    med, worst = pf.median_max([r.tdp_error for r in rows])
    assert med <= TDP_MEDIAN and worst <= TDP_MAX


def test_gpu_component_tdp_counts_tensor_memory_and_leakage():
    h100 = pf.design(next(c for c in CHIPS if c.name == "H100 SXM"))
    full = pf.gpu_component_tdp_w(h100)
    slower = pf.gpu_component_tdp_w(GPU("h100", clock_hz=h100.hw.clock_hz / 2))
    assert 0 < slower < full
    assert full > h100.memory.bandwidth_Bps * h100.memory.energy_j_per_byte
