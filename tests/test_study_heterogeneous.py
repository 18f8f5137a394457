"""The heterogeneous design: sub-accelerators side by side, ops assigned to them."""

import networkx as nx
import pytest

from accelerators.npu import NPU
from dse.errors import InfeasibleDesign
from dse.study.heterogeneous import (Heterogeneous, offchip_bandwidth_Bps, pe_count,
                                     segment_ops, sub_workload)
from simulators.engine import simulate
from workloads.ir import Op, Workload


def chain(sizes):
    """A chain of matmuls, op i of m x k @ k x n with (m, k, n) = sizes[i]."""
    g = nx.DiGraph()
    names = []
    for i, (m, k, n) in enumerate(sizes):
        name = f"mm{i}"
        op = Op(name=name, kind="matmul", target="aten.mm", input_shapes=((m, k), (k, n)),
                output_shapes=((m, n),), dtype="bf16", bytes_per_element=2, flops=2 * m * n * k,
                weight_bytes=2 * k * n, activation_bytes_read=2 * m * k,
                activation_bytes_written=2 * m * n,
                attrs={"m": m, "n": n, "k": k, "batch": 1, "weight_operand": True})
        g.add_node(name, op=op, index=i)
        if names:
            g.add_edge(names[-1], name, bytes=2 * m * k)
        names.append(name)
    return Workload(graph=g, model="chain", phase="forward", dtype="bf16",
                    params=sum(k * n for _, k, n in sizes))


def test_segments_are_contiguous_and_balanced_by_flops():
    w = chain([(64, 64, 64)] * 6 + [(64, 64, 384)])  # the last op holds half the FLOPs
    groups = segment_ops(w, 2)
    assert sum(groups, []) == [op.name for op in w.ops]
    assert groups == [[f"mm{i}" for i in range(6)], ["mm6"]]
    assert segment_ops(w, 1) == [[op.name for op in w.ops]]
    assert len(segment_ops(chain([(8, 8, 8)]), 3)) == 3  # more segments than ops: some empty


def test_all_ops_on_one_sub_accelerator_is_that_accelerator():
    w = chain([(256, 512, 512), (256, 512, 1024), (256, 1024, 512)])
    a, b = NPU("edge-32x32", dataflow="ws"), NPU("edge-32x32", dataflow="os", rows=16)
    het = Heterogeneous({"a": a, "b": b}).with_assignment({op.name: "a" for op in w.ops})
    alone, both = simulate(w, a), simulate(w, het)
    assert both.latency_s == pytest.approx(alone.latency_s)
    assert set(both.utilisation) == {"a/array", "a/vector", "b/array", "b/vector"}
    assert both.utilisation["b/array"] == 0.0
    assert both.area_mm2 == pytest.approx(a.area_mm2() + b.area_mm2())
    # dynamic energy is a's; static energy counts both sub-accelerators' leakage
    assert both.energy_j == pytest.approx(
        alone.energy_j + b.static_power_w() * alone.latency_s, rel=1e-9)


def test_a_split_workload_runs_each_part_on_its_own_units_and_channel():
    w = chain([(256, 512, 512), (256, 512, 1024), (256, 1024, 512)])
    a, b = NPU("edge-32x32"), NPU("edge-32x32", dram_bandwidth_Bps=1e9)
    het = Heterogeneous({"a": a, "b": b}).with_assignment({"mm0": "a", "mm1": "b", "mm2": "a"})
    r = simulate(w, het)
    units = {o.name: o.unit for o in r.ops}
    assert units == {"mm0": "a/array", "mm1": "b/array", "mm2": "a/array"}
    # a chain: the latency is the sum of each op's cost on its own sub-accelerator
    expect = a.cost(w.ops[0]).latency_s + b.cost(w.ops[1]).latency_s + a.cost(w.ops[2]).latency_s
    assert r.latency_s == pytest.approx(expect)
    assert het.resources().channels == {"a/dram": 0.8 * 1.28e10, "b/dram": 0.8 * 1e9}  # LPDDR4


def test_unassigned_ops_and_capacity_problems_are_infeasible():
    w = chain([(64, 64, 64), (64, 64, 64)])
    het = Heterogeneous({"a": NPU("edge-32x32")}).with_assignment({"mm0": "a"})
    with pytest.raises(InfeasibleDesign, match="mm1 is assigned to no sub-accelerator"):
        simulate(w, het)
    tiny = NPU("edge-32x32", rows=1024, ifmap_sram_kb=1)
    het = Heterogeneous({"a": NPU("edge-32x32"), "t": tiny}).with_assignment(
        {"mm0": "a", "mm1": "t"})
    assert het.check(w).startswith("t: ifmap_sram_kb")


def test_budget_metrics():
    a = NPU("edge-32x32", rows=16, cols=8, arrays=2)
    assert pe_count(a) == 256
    assert offchip_bandwidth_Bps(a) == a.hw.dram_bandwidth_Bps
    part = sub_workload(chain([(8, 16, 32), (8, 32, 4)]), ["mm1"])
    assert [op.name for op in part.ops] == ["mm1"] and part.params == 32 * 4
