"""Topologies, routes and collective costs against closed forms and their own invariants."""

import math

import pytest

from accelerators.collective_calibration import calibration
from accelerators.collectives import bus_factor, collective_cost
from accelerators.interconnect import PROTOCOLS, get_link, get_switch
from accelerators.topology import Topology, balanced_shape
from dse.errors import BadInput

NVLINK4 = get_link("nvlink4")


def switch(n, links=18):
    return Topology("switch", n, NVLINK4, links, switch=get_switch("nvswitch3"))


def test_switch_ports_carry_every_link_of_a_device():
    t = switch(8)
    assert t.links["d3->sw"].bandwidth_Bps == pytest.approx(18 * 25e9)
    assert t.links["sw->d3"].effective_Bps == pytest.approx(18 * 20.6e9)
    assert t.route(0, 5) == ("d0->sw", "sw->d5")


def test_torus_routes_go_the_short_way_round_in_dimension_order():
    t = Topology("torus", 64, get_link("ici"), 6, shape=(4, 4, 4))
    assert len(t.links) == 64 * 6
    # (0,0,0) -> (3,1,0): one hop back round x, then one up y
    dst = t.index((3, 1, 0))
    assert t.route(0, dst) == ("d0->d3", f"d3->d{dst}")
    mesh = Topology("mesh", 16, get_link("ici"), 4, shape=(4, 4))
    assert len(mesh.route(0, mesh.index((3, 0)))) == 3      # no wrap-around on a mesh


def test_balanced_shapes():
    assert balanced_shape(64, 3) == (4, 4, 4)
    assert balanced_shape(8, 2) == (4, 2)
    assert balanced_shape(7, 2) == (7, 1)


def test_ring_all_reduce_is_the_alpha_beta_closed_form():
    p, size = 8, 2**30
    c = collective_cost(switch(p), "all_reduce", size, algorithm="ring", protocol="simple")
    start, step = NVLINK4.protocols["simple"]
    # NCCL's per-port rate x the share the ring reached on the lent H100s (1 - loss / p)
    loss = calibration("nvlink4")["loss"]["all_reduce/ring"]
    bw = 18 * 20.6e9 * (1 - loss / p)
    expected = start + 2 * (p - 1) * step + 2 * (p - 1) / p * size / bw
    assert c.time_s == pytest.approx(expected, rel=1e-12)
    # nccl-tests' bus bandwidth of a bandwidth-bound ring is the port's sustained bandwidth
    assert c.bus_bandwidth_Bps == pytest.approx(bw, rel=0.02)
    assert c.bus_bandwidth_Bps == pytest.approx(c.algbw_Bps * 2 * (p - 1) / p)


def test_collective_calibration_issue_modes_and_refuses_bad_files(tmp_path, monkeypatch):
    """Eager calls back to back take the longer of the host's issue interval and the device
    time; a single call adds its launch; the device mode is the model alone. A calibration
    file out of range is one BadInput line."""
    from accelerators import collective_calibration as cc
    lat = calibration("nvlink4")["call_latency_s"]
    small = collective_cost(switch(2), "all_reduce", 4096, algorithm="ring")
    big = collective_cost(switch(2), "all_reduce", 2**30, algorithm="ring")
    b2b = collective_cost(switch(2), "all_reduce", 4096, algorithm="ring", call="eager_b2b")
    one = collective_cost(switch(2), "all_reduce", 4096, algorithm="ring", call="eager_call")
    assert b2b.time_s == pytest.approx(max(lat["eager_b2b"], small.time_s))
    assert one.time_s == pytest.approx(lat["eager_call"] + small.time_s)
    assert collective_cost(switch(2), "all_reduce", 2**30, algorithm="ring",
                           call="eager_b2b").time_s == pytest.approx(big.time_s)
    with pytest.raises(BadInput, match="call"):
        collective_cost(switch(2), "all_reduce", 4096, call="python")
    (tmp_path / "collectives_nvlink4.json").write_text(
        '{"loss": {"all_reduce/ring": 7}, "call_latency_s": {}}')
    monkeypatch.setattr(cc, "CALIBRATION_DIR", tmp_path)
    cc.calibration.cache_clear()
    try:
        with pytest.raises(BadInput, match="loss.all_reduce/ring"):
            cc.calibration("nvlink4")
    finally:
        cc.calibration.cache_clear()


def test_protocols_trade_latency_for_bandwidth():
    t = switch(8)
    small = collective_cost(t, "all_reduce", 4096, algorithm="ring")
    big = collective_cost(t, "all_reduce", 2**30, algorithm="ring")
    assert small.protocol == "ll" and big.protocol == "simple"
    ll = collective_cost(t, "all_reduce", 2**30, algorithm="ring", protocol="ll")
    assert ll.bus_bandwidth_Bps <= PROTOCOLS["ll"].max_device_Bps * 1.0001
    assert ll.time_s > big.time_s


def test_in_switch_reduction_only_where_the_switch_reduces():
    t = switch(8)
    c = collective_cost(t, "all_reduce", 2**30, algorithm="nccl")
    assert c.algorithm == "switch_reduce" and c.protocol == "simple"
    # each port carries S (1 + 1/p) each way
    assert c.link_bytes["d0->sw"] == pytest.approx(2**30 * (1 + 1 / 8))
    old = Topology("switch", 8, get_link("nvlink3"), 12, switch=get_switch("nvswitch2"))
    assert collective_cost(old, "all_reduce", 2**30, algorithm="nccl").algorithm == "ring"
    with pytest.raises(BadInput):
        collective_cost(old, "all_reduce", 2**30, algorithm="switch_reduce")


def test_torus_schedule_uses_every_link_of_a_3d_torus():
    t = Topology("torus", 64, get_link("ici"), 6, shape=(4, 4, 4))
    ring = collective_cost(t, "all_reduce", 2**28, algorithm="ring")
    torus = collective_cost(t, "all_reduce", 2**28, algorithm="torus")
    # a snake ring uses 2 of 6 links per device; concurrent dimension schedules use all 6
    assert ring.bandwidth_s / torus.bandwidth_s == pytest.approx(3.0, rel=0.05)
    assert collective_cost(t, "all_reduce", 2**28, algorithm="auto").algorithm == "torus"


def test_two_level_hierarchical_beats_a_flat_ring_through_the_nics():
    t = Topology("two_level", 16, NVLINK4, 18, group_size=8, switch=get_switch("nvswitch3"),
                 nic=get_link("ib_ndr"))
    flat = collective_cost(t, "all_reduce", 2**30, algorithm="ring")
    hier = collective_cost(t, "all_reduce", 2**30, algorithm="hierarchical")
    assert hier.time_s < flat.time_s
    assert any(n.endswith("->net") for n in hier.link_bytes)


def test_pcie_tree_uplinks_are_shared():
    t = Topology("pcie_tree", 4, get_link("pcie4x16"), 1, group_size=2,
                 switch=get_switch("pcie4_switch"))
    within = collective_cost(t, "all_reduce", 2**28, group=[0, 1])
    across = collective_cost(t, "all_reduce", 2**28, group=[0, 1, 2, 3])
    assert "leaf0->root" in across.link_bytes and "leaf0->root" not in within.link_bytes
    assert across.time_s > within.time_s


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_every_collective_has_a_cost_and_a_bus_bandwidth(kind):
    c = collective_cost(switch(4), kind, 2**26)
    assert c.time_s > 0 and math.isfinite(c.bus_bandwidth_Bps)
    assert c.bus_bandwidth_Bps == pytest.approx(c.algbw_Bps * bus_factor(kind, 4))
    assert c.energy_j > 0


def test_send_recv_crosses_the_route_once():
    t = Topology("ring", 8, get_link("serdes112x4"), 4)
    c = collective_cost(t, "send_recv", 1e6, group=[0, 3])
    assert set(c.link_bytes) == {"d0->d1", "d1->d2", "d2->d3"}
    assert collective_cost(switch(2), "all_reduce", 0).time_s == 0.0
    assert collective_cost(switch(8), "all_reduce", 1e6, group=[5]).time_s == 0.0


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": "allreduce"}, "collective"), ({"nbytes": -1}, "bytes"),
    ({"nbytes": float("nan")}, "bytes"), ({"group": [0, 0]}, "group"),
    ({"group": [0, 9]}, "group"), ({"algorithm": "magic"}, "algorithm"),
])
def test_bad_collective_input_names_the_field(kwargs, field):
    args = {"kind": "all_reduce", "nbytes": 1e6, **kwargs}
    with pytest.raises(BadInput) as exc:
        collective_cost(switch(8), args.pop("kind"), args.pop("nbytes"), **args)
    assert exc.value.field == field
