import json

import networkx as nx
import pytest

from simulators.engine import simulate
from tests.toy_template import Toy
from workloads.ir import Op, Workload


def make_workload(names, edges):
    g = nx.DiGraph()
    for i, n in enumerate(names):
        g.add_node(n, op=Op(name=n, kind="matmul", target="mm", input_shapes=(), output_shapes=(),
                            dtype="bf16", bytes_per_element=2, flops=100), index=i)
    for a, b in edges:
        g.add_edge(a, b, bytes=8)
    return Workload(graph=g, model="toy", phase="forward", dtype="bf16")


def test_chain_without_contention_takes_the_sum():
    w = make_workload(["x", "y", "z"], [("x", "y"), ("y", "z")])
    t = Toy({"x": ("a", 1e-3, 0), "y": ("b", 2e-3, 0), "z": ("a", 0, 4e6)})  # 4 MB at 1 GB/s
    r = simulate(w, t)
    assert r.latency_s == pytest.approx(1e-3 + 2e-3 + 4e-3)
    assert [o.name for o in sorted(r.ops, key=lambda o: o.start_s)] == ["x", "y", "z"]


def test_independent_ops_on_two_units_overlap():
    w = make_workload(["x", "y"], [])
    r = simulate(w, Toy({"x": ("a", 3e-3, 0), "y": ("b", 2e-3, 0)}))
    assert r.latency_s == pytest.approx(3e-3)
    assert r.busy_fraction["a"] == pytest.approx(1.0)
    assert r.busy_fraction["b"] == pytest.approx(2 / 3)


def test_independent_ops_on_one_unit_serialise():
    w = make_workload(["x", "y"], [])
    r = simulate(w, Toy({"x": ("a", 3e-3, 0), "y": ("a", 2e-3, 0)}))
    assert r.latency_s == pytest.approx(5e-3)


def test_memory_bound_ops_sharing_a_channel_take_the_sum_of_transfers():
    w = make_workload(["x", "y"], [])
    r = simulate(w, Toy({"x": ("a", 0, 2e6), "y": ("b", 0, 3e6)}))
    assert r.latency_s == pytest.approx(5e-3)
    # fluid sharing: both progress at half bandwidth until x finishes at 4 ms
    ends = {o.name: o.end_s for o in r.ops}
    assert ends["x"] == pytest.approx(4e-3)
    assert ends["y"] == pytest.approx(5e-3)


def test_compute_overlaps_another_ops_transfer():
    w = make_workload(["x", "y"], [])
    r = simulate(w, Toy({"x": ("a", 4e-3, 0), "y": ("b", 0, 3e6)}))
    assert r.latency_s == pytest.approx(4e-3)


def test_energy_includes_static_and_trace_exports():
    w = make_workload(["x"], [])
    r = simulate(w, Toy({"x": ("a", 2e-3, 0)}))
    assert r.energy_breakdown_j["static"] == pytest.approx(0.5 * 2e-3)
    assert r.energy_j == pytest.approx(1e-9 + 1e-3)
    assert r.avg_power_w == pytest.approx(r.energy_j / r.latency_s)
    trace = r.to_chrome_trace()
    json.dumps(trace)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert xs[0]["dur"] == pytest.approx(2000.0)


def test_deterministic():
    w = make_workload(["x", "y", "z"], [("x", "z"), ("y", "z")])
    t = Toy({"x": ("a", 1e-3, 1e6), "y": ("b", 2e-3, 2e6), "z": ("a", 0, 1e6)})
    a, b = simulate(w, t), simulate(w, t)
    assert a.to_dict() == b.to_dict()


def test_channel_finishes_slivers_below_the_clock_resolution():
    """A transfer whose last bytes take less time than the clock can resolve still ends."""
    import simpy
    from simulators.channel import FluidChannel
    env = simpy.Environment(initial_time=1.65)
    ch = FluidChannel(env, 936e9)
    a, b = ch.transfer(32768.0), ch.transfer(32768.0 + 5.5e-5)
    env.run(until=env.all_of([a, b]))
    assert env.now == pytest.approx(1.65 + 65536 / 936e9, rel=1e-9)
