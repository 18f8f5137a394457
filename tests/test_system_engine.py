"""The system engine: one device reproduces the single-device engine; collectives cost what
the collective model says when alone, contend on shared links, overlap with compute; the
symmetric shortcut equals simulating every device."""

import json

import networkx as nx
import pytest

from accelerators.system import System, make_system
from dse import api
from dse.errors import InfeasibleDesign
from simulators.engine import simulate
from simulators.system_engine import simulate_system
from tests.toy_template import Toy
from workloads.ir import Op, Workload
from workloads.parallel import Layout, ParallelWorkload, collective_op

TINY = {"n_layer": 2, "d_model": 64, "n_head": 8, "n_kv_head": 4, "d_ff": 128,
        "vocab_size": 256, "max_seq": 64}


def _op(name):
    return Op(name=name, kind="matmul", target="mm", input_shapes=(), output_shapes=(),
              dtype="bf16", bytes_per_element=2, flops=100)


def _graph(ops, edges):
    g = nx.DiGraph()
    for i, op in enumerate(ops):
        g.add_node(op.name, op=op, index=i)
    for a, b in edges:
        g.add_edge(a, b, bytes=8)
    return Workload(graph=g, model="toy", phase="forward", dtype="bf16")


def _tp2(ops, edges, table):
    """A tp=2 parallel workload whose two ranks run the graph of ``ops``."""
    w = _graph(ops, edges)
    pw = ParallelWorkload(w, Layout(tp=2), [w, w], [0, 0], 1, [0, 0], [0, 0])
    return pw, System(Toy(table), "hgx-h200", devices=2)


AR = 64 * 2**20


def test_one_device_system_is_the_single_device_engine():
    w = api.workload("llama2-7b", phase="decode", batch=4, context=16, arch=TINY)
    design = api.accelerator("gpu:h200")
    single = simulate(w, design)
    sys1 = simulate_system(w, System(design, "hgx-h200", devices=1), Layout())
    assert sys1.latency_s == pytest.approx(single.latency_s, rel=1e-12)
    assert sys1.energy_j == pytest.approx(single.energy_j, rel=1e-9)
    assert sys1.communication_s == 0


def test_a_lone_collective_takes_its_modelled_time():
    ar = collective_op("ar", "all_reduce", AR, "tp")
    pw, sysm = _tp2([_op("x"), ar, _op("y")], [("x", "ar"), ("ar", "y")],
                    {"x": ("a", 1e-3, 0), "y": ("a", 2e-3, 0)})
    r = simulate_system(pw, sysm)
    model = sysm.collective("all_reduce", AR, (0, 1))
    assert r.latency_s == pytest.approx(1e-3 + model.time_s + 2e-3, rel=1e-9)
    assert r.communication_s == pytest.approx(model.time_s, rel=1e-9)
    assert r.collectives[0]["end_s"] - r.collectives[0]["start_s"] == pytest.approx(
        model.time_s, rel=1e-9)
    assert r.energy_breakdown_j["network"] == pytest.approx(model.energy_j)
    assert 0 < r.link_utilisation["d0->sw"] < 1


def test_concurrent_collectives_share_the_links():
    a = collective_op("a", "all_reduce", AR, "tp")
    b = collective_op("b", "all_reduce", AR, "tp")
    pw, sysm = _tp2([_op("x"), a, b], [("x", "a"), ("x", "b")], {"x": ("a", 1e-6, 0)})
    r = simulate_system(pw, sysm)
    one = sysm.collective("all_reduce", AR, (0, 1))
    assert r.latency_s == pytest.approx(1e-6 + one.latency_s
                                        + 2 * one.bandwidth_s, rel=1e-6)


def test_compute_overlaps_a_collective_where_the_graph_allows():
    ar = collective_op("ar", "all_reduce", AR, "tp")
    pw, sysm = _tp2([_op("x"), ar, _op("y")], [("x", "ar"), ("x", "y")],
                    {"x": ("a", 1e-6, 0), "y": ("a", 5e-3, 0)})
    r = simulate_system(pw, sysm)
    t = sysm.collective("all_reduce", AR, (0, 1)).time_s
    assert r.latency_s == pytest.approx(1e-6 + max(t, 5e-3), rel=1e-9)


@pytest.mark.parametrize("system, layout", [
    ("hgx-h200", Layout(tp=2)), ("hgx-h200", Layout(tp=4, sequence_parallel=True)),
    ("hgx-h200", Layout(pp=2, microbatches=2)), ("hgx-h200", Layout(tp=2, pp=2, dp=2)),
    ("npu-ring", Layout(tp=4)), ("pcie-4x", Layout(tp=2, dp=2)),
])
def test_symmetric_shortcut_equals_every_device_simulated(system, layout):
    w = api.workload("llama2-7b", phase="decode", batch=8, context=16, arch=TINY)
    sysm = api.system(system, layout.devices)
    fast = simulate_system(w, sysm, layout)
    full = simulate_system(w, sysm, layout, symmetric=False)
    assert fast.latency_s == pytest.approx(full.latency_s, rel=1e-9)
    assert fast.energy_j == pytest.approx(full.energy_j, rel=1e-9)
    assert fast.events <= full.events
    assert len(fast.per_device) == layout.devices


def test_tensor_parallel_decode_on_hgx_speeds_up_and_reports_communication():
    w = api.workload("llama2-7b", phase="decode", batch=8, context=256, arch={"n_layer": 2})
    one = api.simulate(w, system="hgx-h200", parallel={"tp": 1})
    two = api.simulate(w, system="hgx-h200", parallel={"tp": 2})
    assert two.latency_s < one.latency_s
    assert two.communication_s > 0 and two.energy_breakdown_j["network"] > 0
    assert two.cost_usd > one.cost_usd
    kinds = {c["collective"] for c in two.collectives}
    assert kinds == {"all_reduce", "all_gather"}


def test_pipeline_decode_reports_steady_state_and_fill():
    w = api.workload("llama2-7b", phase="decode", batch=8, context=16, arch=TINY)
    r = api.simulate(w, system="hgx-h200", parallel={"pp": 2, "microbatches": 4})
    assert r.microbatches == 4
    assert r.latency_s <= r.fill_latency_s
    assert r.throughput == pytest.approx(8 / r.latency_s)


def test_a_one_microbatch_pipeline_decode_step_takes_the_whole_trip():
    """A decode token of a lone microbatch crosses every stage in turn: a two-stage pipeline
    is no faster than one device doing both halves (it was reported as the slower stage
    alone, half the time, when no op carried a microbatch suffix: found on two H200s)."""
    w = api.workload("llama2-7b", phase="decode", batch=1, context=16, arch=TINY)
    one = api.simulate(w, system="hgx-h200", devices=1, parallel={"tp": 1})
    pp2 = api.simulate(w, system="hgx-h200", parallel={"pp": 2, "microbatches": 1})
    assert pp2.microbatches == 1
    assert pp2.latency_s >= one.latency_s
    assert pp2.latency_s == pytest.approx(pp2.fill_latency_s)


def test_chrome_trace_has_a_process_per_device_and_the_links():
    w = api.workload("llama2-7b", phase="decode", batch=8, context=16, arch=TINY)
    r = api.simulate(w, system="hgx-h200", parallel={"tp": 4})
    trace = json.loads(json.dumps(r.to_chrome_trace()))
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"device 0", "device 1 (mirrors 0)", "device 2 (mirrors 0)",
                     "device 3 (mirrors 0)", "links"}
    assert any(e.get("cat") == "link" for e in trace["traceEvents"])
    assert r.to_dict()["per_device"][3]["representative"] == 0


def test_a_device_that_cannot_hold_its_part_is_infeasible():
    w70 = api.workload("llama2-70b", phase="decode", batch=1, context=128,
                       arch={"n_layer": 20})
    small = api.system("pcie-4x", 2, accelerator="gpu:t4")
    with pytest.raises(InfeasibleDesign, match="device 0: llama2-70b needs"):
        simulate_system(w70, small, Layout(tp=2))
    with pytest.raises(InfeasibleDesign, match="needs 2 devices but the system has 4"):
        simulate_system(w70, api.system("pcie-4x"), Layout(tp=2))
