"""The physical model against published chips (docs/validation.md, "Physical model"): the
shipped area and power constants are what the calibration gives, leave-one-out leaves a die
out whole, and the errors stay at what was measured (issue 27's targets: median |area error|
<= 20 %, median |TDP error| <= 25 %, with the shipped constants and leave-one-out; every chip
on one energy method, GPUs and NPU-class chips alike; Groq's area, +38 %, misses issue 15's
each-within-35 %, docs/validation.md says why)."""

import pytest

from accelerators import physical, technology as tech, wafer
from accelerators.gpu import GPU
from accelerators.npu import NPU
from dse.calibrate import physical_fit as pf
from dse.calibrate.published_chips import BLOCKS, CHIPS

#: Measured with `python benchmarks/physical_validation.py` (rounded up to the next percent).
AREA_MEDIAN, AREA_MAX = 0.09, 0.39          # shipped constants
LOO_MEDIAN, LOO_MAX = 0.10, 0.77            # each die left out of the fit
TDP_MEDIAN, TDP_MAX = 0.19, 1.20            # the shipped power constant, fitted on these rows
TDP_LOO_MEDIAN, TDP_LOO_MAX = 0.22, 1.99    # each die left out of fit_power


@pytest.fixture(scope="module")
def rows():
    return pf.validation_rows()


def test_published_facts_are_complete():
    assert len({c.die for c in CHIPS}) >= 11 and len(CHIPS) >= 12
    assert all(c.die_source.startswith("[") and c.tdp_source.startswith("[") for c in CHIPS)
    assert all(b.source.startswith("[") and 0 < b.share < 1 for b in BLOCKS)
    dies = {c.die for c in CHIPS}
    assert all(b.die in dies or b.die_mm2 > 0 for b in BLOCKS)


def test_shipped_constants_are_the_calibration():
    u, e, base = pf.derived_constants()
    assert u == pytest.approx(tech.LOGIC_PLACEMENT_UTILISATION, abs=0.005)
    assert e == pytest.approx(tech.SRAM_ARRAY_EFFICIENCY, abs=0.005)
    fitted, shipped = pf.fit(), pf.Constants.shipped()
    assert base == pytest.approx(shipped.sm_base_mm2, rel=1e-3) == fitted.sm_base_mm2
    for name in ("control_overhead", "sram_overhead", "gpu_control_overhead"):
        assert getattr(fitted, name) == pytest.approx(getattr(shipped, name), rel=1e-3), name
    # SRAM pays its own overhead, much smaller than the logic's
    assert 0 < shipped.sram_overhead < shipped.control_overhead / 5
    # the fit does not depend on where it starts, nor leave the constants changed
    assert pf.Constants.shipped() == shipped


def test_wse2_core_is_counted_from_its_parts():
    assert wafer.WSE2_CORE_LOGIC_AREA_MM2 == pytest.approx(wafer.wse2_core_logic_area_mm2(), rel=1e-5)
    # more SRAM per core, more area; a finer node, less
    assert wafer.wse2_core_logic_area_mm2(7, 96 * 1024) > wafer.wse2_core_logic_area_mm2()
    assert wafer.wse2_core_logic_area_mm2(5) < wafer.wse2_core_logic_area_mm2(7)


def test_leave_one_out_leaves_a_die_out_whole():
    loo = pf.leave_one_out()
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
    assert med <= TDP_MEDIAN <= 0.25 and worst <= TDP_MAX
    med, worst = pf.median_max([r.loo_tdp_error for r in rows])
    assert med <= TDP_LOO_MEDIAN <= 0.25 and worst <= TDP_LOO_MAX


def test_one_energy_method_is_validated_on_gpus_and_npu_class_chips(rows):
    """Issue 27: GPUs are built bottom-up like every template and the one fitted power term
    is checked on at least three published chips of each kind."""
    gpus = [r for r in rows if r.chip.accelerator.startswith("gpu:")]
    npus = [r for r in rows if not r.chip.accelerator.startswith("gpu:")]
    assert len({r.chip.die for r in gpus}) >= 3 and len({r.chip.die for r in npus}) >= 3
    for r in gpus:
        assert r.tdp_w == pytest.approx(pf.design(r.chip).physical().tdp_w
                                        / pf.BOARD_POWER_EFFICIENCY)
    assert physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ == pytest.approx(pf.fit_power(), rel=1e-3)


def test_the_board_basis_is_explicit():
    h100 = next(c for c in CHIPS if c.name == "H100 SXM")
    tpu1 = next(c for c in CHIPS if c.name == "TPUv1")
    ph, pt = pf.design(h100).physical(), pf.design(tpu1).physical()
    assert h100.tdp_basis == "board" and tpu1.tdp_basis == "chip"
    assert pf.compared_tdp_w(h100, ph) == pytest.approx(ph.tdp_w / pf.BOARD_POWER_EFFICIENCY)
    # TPUv1's DDR3 is off the package: a chip TDP leaves it out
    assert pf.compared_tdp_w(tpu1, pt) == pytest.approx(pt.tdp_w - pf.memory_w(pt))


def test_datacenter_gpus_are_single_dies_under_the_reticle_and_hopper_is_no_bigger():
    phys = {p: GPU(p).physical() for p in ("a100", "h100", "h200")}
    for p, ph in phys.items():
        assert ph.dies == 1 and ph.die_mm2 <= physical.RETICLE_MM2, (p, ph.die_mm2)
    # GH100 (144 SMs of 2,048 tensor MACs) is 0.99x GA100 (128 SMs of 1,024): an SM is a base
    # plus its datapaths, so doubling the tensor MACs does not double it
    assert phys["h100"].area_mm2 < phys["a100"].area_mm2


def test_sram_pays_its_own_overhead_not_the_logic_one():
    small, big = NPU(ifmap_sram_kb=4096, chiplets=1), NPU(ifmap_sram_kb=4096 + 65536, chiplets=1)
    added = big.physical().area_mm2 - small.physical().area_mm2
    sram = tech.sram_area_mm2(65536 * 1024, small.hw.node_nm)
    assert added == pytest.approx(sram * (1 + physical.SRAM_OVERHEAD), rel=1e-6)
    more_pes = NPU(ifmap_sram_kb=4096, rows=256, chiplets=1)
    logic = more_pes.floorplan().compute_mm2 - small.floorplan().compute_mm2
    assert (more_pes.physical().area_breakdown_mm2["control"]
            - small.physical().area_breakdown_mm2["control"]) == pytest.approx(
                physical.CONTROL_OVERHEAD * logic, rel=1e-6)


def test_sram_access_energy_follows_its_bank():
    bank = tech.SRAM_BANK_BYTES
    horowitz_1mb = 100 / 8 * 1e-12 * tech.energy_scale(45)   # 64-bit read of 1 MB, per byte
    assert tech.sram_energy_j_per_byte(bank, 45) == pytest.approx(2.41e-12, rel=0.01)
    assert tech.sram_energy_j_per_byte(2**20, 45) < horowitz_1mb / 3
    sizes = [bank // 4, bank, 4 * bank, 2**20, 64 * 2**20]
    energies = [tech.sram_energy_j_per_byte(s, 7) for s in sizes]
    assert energies == sorted(energies)          # a bigger SRAM still costs more (its wires)
    assert energies[-1] < 3 * energies[1]        # ... but a bank, not the whole SRAM, is read
