"""Systems as data: presets, link PHYs on device dies, switch chips, NICs, bad parameters."""

import pytest

from accelerators.registry import make_accelerator
from accelerators.system import SYSTEM_PRESETS, System, make_system
from dse.errors import BadInput


@pytest.mark.parametrize("name", sorted(SYSTEM_PRESETS))
def test_every_preset_is_buildable_and_priced(name):
    s = make_system(name)
    phys = s.physical()
    assert phys.problem is None
    assert phys.cost_usd > 0 and phys.tdp_w > 0 and phys.area_mm2 > 0
    assert s.devices == SYSTEM_PRESETS[name]["devices"]
    assert len(s.topology.links) > 0


def test_gpu_systems_count_nvswitch_chips_and_their_cost():
    dgx = make_system("dgx-h100")
    assert dgx.physical().switch_chips == 4
    one = make_system("dgx-h100", devices=1).physical()
    assert one.switch_chips == 0
    gpu = make_accelerator("gpu:h100")
    # eight GPUs and four switch dies
    assert dgx.physical().cost_breakdown_usd["devices"] == pytest.approx(8 * gpu.physical().cost_usd)
    assert dgx.physical().cost_breakdown_usd["switches"] > 0
    # sixteen GPUs spread their 18 links over 5 planes of 64 ports; 80 exceed one stage
    assert make_system("dgx-h100", devices=16).physical().switch_chips == 5
    assert "single stage" in make_system("dgx-h100", devices=80).check()


def test_a_gpu_needs_the_peer_links_the_topology_asks_for():
    t4 = make_accelerator("gpu:t4")
    s = System(t4, "hgx-h200")
    assert "but gpu:t4 has 2" in s.check()   # TU104 has two NVLink PHYs
    h100 = make_accelerator("gpu:h100")
    assert "needs 24" in System(h100, "hgx-h200", links_per_device=24).check()


def test_npu_dies_pay_for_their_link_phys():
    ring = make_system("npu-ring")
    npu = ring.device(0)
    alone = npu.physical()
    with_links = ring._device_physical(npu)[0]
    assert with_links.area_breakdown_mm2["link_phy"] == pytest.approx(8 * 1.6)
    assert with_links.area_mm2 > alone.area_mm2
    assert with_links.cost_usd > alone.cost_usd
    assert with_links.tdp_w > alone.tdp_w
    faster = make_system("npu-ring", link_bandwidth_Bps=100e9)
    assert faster._device_physical(npu)[0].area_breakdown_mm2["link_phy"] == pytest.approx(
        2 * 8 * 1.6)
    edge = make_accelerator("npu:edge-32x32")
    assert "no host interface" in System(edge, "pcie-4x").check()


def test_two_level_systems_pay_for_nics_and_a_fabric():
    s = make_system("hgx-h200", devices=16, topology="two_level", group_size=8)
    phys = s.physical()
    assert phys.nics == 16 and phys.cost_breakdown_usd["nics"] > 0
    assert phys.switch_chips == 8                    # four NVSwitches per node
    assert any(n.endswith("->net") for n in s.topology.links)


def test_torus_shape_from_dims_or_given():
    assert make_system("tpu-v4-slice").topology.shape == (4, 4, 4)
    assert make_system("tpu-v4-slice", devices=16, dims=2).topology.shape == (4, 4)
    assert make_system("tpu-v4-slice", devices=8, shape="2x4").topology.shape == (2, 4)


@pytest.mark.parametrize("values, field", [
    ({"topology": "hypercube"}, "sys.topology"), ({"devices": 0}, "sys.devices"),
    ({"link": "nvlink9"}, "sys.link"), ({"wires": 3}, "sys.wires"),
    ({"devices": 8, "shape": "3x3"}, "sys.shape"),
    ({"topology": "two_level", "group_size": 3}, "sys.group_size"),
    ({"switch": "pcie4_switch"}, "sys.switch"),
])
def test_bad_system_parameters_name_the_field(values, field):
    with pytest.raises(BadInput) as exc:
        make_system("hgx-h200" if "shape" not in values else "tpu-v4-slice", **values)
    assert exc.value.field == field


def test_unknown_preset():
    with pytest.raises(BadInput, match="dgx-a100"):
        make_system("dgx-z9")
