"""The fast path of the plan-based templates and the wafer (issue 22) against the event
simulation, and the shortcuts it takes: planned graphs shared by designs with equal
``plan_key``, wafer ops costed once per (signature, context), capacity checks over unique
shapes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from accelerators import dram_timing as dt
from benchmarks.fast_path import mlp_chain
from accelerators.npu_pim import NeuPIMs
from dse.errors import InfeasibleDesign
from accelerators.pim import PIM, attention_dims, capacity_problem, weight_gemv
from accelerators.wafer import Wafer
from accelerators.neural_graphics import NGPC
from simulators.engine import simulate
from simulators.fast import evaluate_many
from workloads import ir
from workloads.requests import Request, attention_kv_lens, batched_decode

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def chain():
    """An MLP: every op waits for the one before it, so nothing contends."""
    return mlp_chain()


@pytest.fixture(scope="module")
def decode():
    """A small batched decode step (requests of different lengths: the channel assignment and
    the sub-batches depend on the design)."""
    reqs = [Request(c, 8, 0) for c in (40, 300, 120, 64, 500, 33)]
    return batched_decode("gpt2", reqs, arch=dict(n_layer=2, d_model=256, n_head=4, d_ff=1024,
                                                  vocab_size=1000, max_seq=1024))


design_sets = {
    "pim": lambda: [PIM(), PIM("hbm2-pim"), PIM(None, channels=32, macs_per_bank=8),
                    PIM(None, asic_lanes=64, clock_hz=1.5e9)],
    "npu_pim": lambda: [NeuPIMs(), NeuPIMs("npu+pim"), NeuPIMs(None, rows=64, cols=64),
                        NeuPIMs(None, channels=16, load_balancing="round_robin"),
                        NeuPIMs("npu-only")],
    "neural_graphics": lambda: [NGPC(), NGPC("ngpc-8"), NGPC(None, mlp_rows=32),
                                NGPC(None, fuse_gpu_kernels=False)],
    "wafer": lambda: [Wafer("wse-1k"), Wafer("wse-1k", allreduce="ring"),
                      Wafer("wse-1k", gemm_algorithm="summa", clock_hz=0.9e9),
                      Wafer("wse-1k", prefill_region_width=16, decode_region_width=16)],
}


@pytest.mark.parametrize("template", sorted(design_sets))
def test_fast_equals_event_simulation_on_a_chain(chain, template):
    """Nothing contends on a chain: the fast path's critical path is the event simulation's
    latency, its energy the same sum, design by design (several designs in one call)."""
    designs = design_sets[template]()
    fast = evaluate_many(chain, designs)
    for i, d in enumerate(designs):
        r = simulate(chain, d)
        assert fast.latency_s[i] == pytest.approx(r.latency_s, rel=1e-12), (template, i)
        assert fast.energy_j[i] == pytest.approx(r.energy_j, rel=1e-12), (template, i)
        assert fast.area_mm2[i] == r.area_mm2


@pytest.mark.parametrize("template", sorted(design_sets))
def test_fast_is_a_lower_bound_on_a_decode_step(decode, template):
    """With branches (q, k, v) and several units the event simulation may only be slower."""
    designs = design_sets[template]()
    fast = evaluate_many(decode, designs)
    for i, d in enumerate(designs):
        reason = d.check(decode)
        if reason:
            assert fast.infeasible[i] == reason
            continue
        r = simulate(decode, d)
        assert fast.latency_s[i] <= r.latency_s * (1 + 1e-12), (template, i)
        assert fast.latency_s[i] > 0.5 * r.latency_s


@SETTINGS
@given(channels=st.sampled_from([4, 8, 16, 32]), ranks=st.sampled_from([1, 2]),
       balance=st.sampled_from(["greedy", "round_robin"]), interleave=st.booleans(),
       dot=st.integers(1, 8), clock=st.sampled_from([0.5e9, 1e9, 2e9]),
       rows=st.sampled_from([32, 128]))
def test_npu_pim_shared_plan_is_its_own_plan(decode, channels, ranks, balance, interleave,
                                            dot, clock, rows):
    """A design's planned graph, shared through its plan key, is the graph its own plan()
    makes: same ops in the same order with the same attributes and edges; and the fast path
    over the shared plan stays a lower bound of the event simulation."""
    d = NeuPIMs(None, channels=channels, ranks=ranks, banks_per_channel=16 * ranks,
                load_balancing=balance, sub_batch_interleaving=interleave, dot_cycles=dot,
                pim_clock_hz=clock, rows=rows)
    shared, own = d.planned(decode), d.plan(decode)
    assert [(o.name, o.kind, o.attrs) for o in shared.ops] == \
        [(o.name, o.kind, o.attrs) for o in own.ops]
    assert sorted(shared.graph.edges) == sorted(own.graph.edges)
    assert d.planned(decode) is shared
    if d.check(decode) is None:
        assert evaluate_many(decode, [d]).latency_s[0] <= simulate(decode, d).latency_s * (
            1 + 1e-12)


def test_plan_keys_share_graphs_only_where_plans_agree(decode):
    """pim's split reads no parameter; neural_graphics' reads one; npu_pim's is its request
    assignment (round robin ignores the PIM timing, greedy does not)."""
    assert PIM().planned(decode) is PIM("hbm2-pim").planned(decode)
    assert NGPC().planned(decode) is NGPC("ngpc-8").planned(decode)
    assert NGPC().planned(decode) is not NGPC(None, fuse_gpu_kernels=False).planned(decode)
    rr = dict(load_balancing="round_robin")
    assert NeuPIMs(None, **rr).planned(decode) is NeuPIMs(None, dot_cycles=7, **rr).planned(decode)
    assert NeuPIMs(None, **rr).planned(decode) is not NeuPIMs().planned(decode)


# ----------------------------------------------------------------------------- wafer
def _memory_per_core_op_by_op(design: Wafer, workload: ir.Workload) -> dict[str, float]:
    """Wafer.memory_per_core as it was, op by op (the reference)."""
    width, height = design.region(workload.phase)
    cores, b = width * height, design.bytes_per_elem
    weight_elems, tiled, kv_elems, act_elems = 0.0, 0.0, 0.0, 0.0
    for op in workload.ops:
        a = op.attrs
        if op.kind == ir.MATMUL and a.get("weight_operand"):
            k, n, batch = a.get("k", 1), a.get("n", 1), a.get("batch", 1)
            weight_elems += math.ceil(k / height) * math.ceil(n / width) * batch
            tiled += float(k) * n * batch
        elif op.kind == ir.CONV and op.weight_bytes:
            k, n, groups = a.get("gemm_k", 1), a.get("gemm_n", 1), a.get("groups", 1)
            weight_elems += math.ceil(k / height) * math.ceil(n / width) * groups
            tiled += float(k) * n * groups
        if op.kind == ir.ATTENTION:
            kvh = a.get("kv_heads", a.get("heads", 1))
            dims = a.get("head_dim", 1) + a.get("value_dim", a.get("head_dim", 1))
            kv_elems += a.get("batch", 1) * math.ceil(a.get("kv_len", 1) / height) \
                * math.ceil(kvh * dims / width)
        act_elems = max(act_elems, design._plan_op(op, workload.phase).act_elems_per_core)
    params = workload.params or sum(op.weight_bytes for op in workload.ops) / 2
    weight_elems += max(params - tiled, 0.0) / cores
    return {"weights": weight_elems * b, "kv_cache": kv_elems * b,
            "activations": act_elems * b, "reserved": design.hw.reserved_sram_per_core_kb * 1024.0}


@SETTINGS
@given(side=st.sampled_from([8, 16, 31, 32]), wide=st.sampled_from([5, 16, 32]),
       allreduce=st.sampled_from(["ktree", "ring", "pipeline"]),
       gemm=st.sampled_from(["meshgemm", "cannon", "summa", "allgather"]),
       dtype=st.sampled_from(["fp16", "fp32", "int8"]))
def test_wafer_unique_ops_equal_op_by_op(decode, chain, side, wide, allreduce, gemm, dtype):
    """Costs through (signature, context) and the capacity over unique ops are exactly the
    op-by-op ones."""
    d = Wafer("wse-1k", decode_region_width=side, decode_region_height=wide,
              prefill_region_width=wide, prefill_region_height=side, allreduce=allreduce,
              gemm_algorithm=gemm, dtype=dtype, placement="region")   # the reference's layout
    for w in (decode, chain):
        assert d.memory_per_core(w) == _memory_per_core_op_by_op(d, w)
        fresh = Wafer("wse-1k", decode_region_width=side, decode_region_height=wide,
                      prefill_region_width=wide, prefill_region_height=side,
                      allreduce=allreduce, gemm_algorithm=gemm, dtype=dtype,
                      placement="region")
        io = {op.name: c for op, c in zip(w.ops, Wafer.op_contexts(w))}
        for op, cost in zip(w.ops, d.costs(w)):
            assert cost == fresh.cost_in(op, io[op.name])
        fast = evaluate_many(w, [d])
        if fast.infeasible[0] is None:
            r = simulate(w, fresh)
            static_w = fresh.static_power_w()
            assert fast.energy_j[0] - static_w * fast.latency_s[0] == pytest.approx(
                r.energy_j - r.energy_breakdown_j["static"], rel=1e-9)   # dynamic energy
            assert fast.latency_s[0] <= r.latency_s * (1 + 1e-12)


# ----------------------------------------------------------------------------- pim capacity
def _pim_capacity_op_by_op(w, g, eb, kv_channels):
    """pim.capacity_problem's sums as they were, op by op: (need, busiest bank) in bytes."""
    share = (lambda n: n) if kv_channels is None else (lambda n: n * kv_channels / g.channels)

    def kv_footprint(rows: int, cols: int, segment: int = 0) -> int:
        return dt.bank_footprint_bytes(g, dt.Gemv(rows, cols, segment=segment), kv_channels)

    kv = bank = 0.0
    for op in w.ops:
        if op.kind in (ir.MATMUL, ir.CONV) and op.attrs.get("weight_operand", op.kind == ir.CONV):
            (gemv, repeats) = weight_gemv(op)
            bank += repeats * dt.bank_footprint_bytes(g, dt.Gemv(gemv.rows, gemv.cols))
            continue
        if op.kind != ir.ATTENTION:
            continue
        kv += op.kv_bytes_read * (eb / op.bytes_per_element)
        _, kvh, _, d, dv = attention_dims(op)
        part = op.attrs.get("part")
        for kv_len, n in Counter(attention_kv_lens(op)).items():
            qk = kv_footprint(kv_len, kvh * d, d) if part != "attend" else 0
            pv = kvh * kv_footprint(dv, kv_len) if part != "logits" else 0
            bank += (qk + pv) * share(n)
    return w.params * eb + kv, bank


@SETTINGS
@given(channels=st.sampled_from([2, 4, 16, 32]), banks=st.sampled_from([4, 16, 32]),
       page=st.sampled_from([256, 1024, 2048]), cap=st.sampled_from([1 / 64, 1 / 16, 0.5]),
       kv_channels=st.sampled_from([None, 1]))
def test_pim_capacity_over_unique_shapes(decode, channels, banks, page, cap, kv_channels):
    """The capacity check over merged shapes refuses exactly where the op-by-op sums exceed
    the device or a bank (power-of-two channels: the sums are exact either way)."""
    d = PIM(None, channels=channels, banks_per_channel=banks, page_bytes=page,
            channel_capacity_gib=cap)
    for w in (decode, d.plan(decode)):
        need, bank = _pim_capacity_op_by_op(w, d.geom, 2, kv_channels)
        got = capacity_problem(w, d.geom, cap, 2, kv_channels)
        if need > channels * cap * 2 ** 30:
            assert got is not None and got.startswith("model needs")
        elif bank > cap * 2 ** 30 / banks:
            assert got is not None and f"{bank / 2**20:.1f} MiB" in got
        else:
            assert got is None


# ----------------------------------------------------------------------------- the memo
def test_memo_is_dropped_with_its_workload_and_bounded():
    import gc

    from workloads import memo
    w = mlp_chain()
    wid = id(w)
    assert memo.per_workload(w, "k", lambda: 1) == 1
    assert memo.per_workload(w, "k", lambda: 2) == 1           # computed once
    assert memo.per_workload(w, "self", lambda: w) is w        # itself, without keeping it
    for i in range(5):
        memo.per_workload_bounded(w, "plans", i, lambda i=i: i, limit=3)
    assert list(memo.per_workload(w, "plans", dict)) == [2, 3, 4]
    assert memo.per_workload_bounded(w, "plans", 4, lambda: -1, limit=3) == 4
    del w
    gc.collect()
    assert wid not in memo._MEMO


# ----------------------------------------------------------------------------- npu_pim
@SETTINGS
@given(dataflow=st.sampled_from(["ws", "os", "is"]), double=st.booleans(),
       rows=st.sampled_from([8, 32, 128]), cols=st.sampled_from([16, 128]),
       spad=st.sampled_from([16, 64, 512]), where=st.sampled_from(["pim", "npu"]),
       dtype=st.sampled_from(["bf16", "int8", "fp32"]))
def test_npu_pim_cost_many_equals_its_cost(decode, dataflow, double, rows, cols, spad, where,
                                           dtype):
    """The vectorised hook gives exactly the scalar costs and the first error per design,
    on the planned decode step's unique ops, with designs of other kinds in the same call."""
    from workloads.structure import of as structure_of
    designs = [NeuPIMs(None, dataflow=dataflow, npu_weight_double_buffering=double, rows=rows,
                       cols=cols, ifmap_sram_kb=spad, attention_on=where, dtype=dtype),
               NeuPIMs(), NeuPIMs("npu-only"), NeuPIMs(None, dataflow="os", rows=16)]
    ops = structure_of(designs[0].planned(decode)).unique_ops + list(decode.ops[:3])
    many = NeuPIMs.cost_many(designs, ops)
    for i, d in enumerate(designs):
        first = None
        for j, op in enumerate(ops):
            try:
                c = d.cost(op)
            except InfeasibleDesign as exc:
                first = first or exc
                assert np.isnan(many.latency_s[j, i])
                continue
            assert many.latency_s[j, i] == c.latency_s and many.energy_j[j, i] == c.total_energy_j
        assert str(many.errors[i]) == str(first)
    fast = evaluate_many(decode, designs)
    loop = evaluate_many(decode, designs, vectorised=False)
    assert np.array_equal(fast.latency_s, loop.latency_s, equal_nan=True)
    assert np.array_equal(fast.energy_j, loop.energy_j, equal_nan=True)
    assert fast.infeasible == loop.infeasible


@SETTINGS
@given(lens=st.lists(st.sampled_from([16, 33, 64, 200, 512, 700]), min_size=1, max_size=40),
       channels=st.sampled_from([1, 2, 3, 8, 32]))
def test_npu_pim_greedy_channels_as_a_linear_scan(decode, lens, channels):
    """The heap in assign_channels picks what a scan for the least-loaded, lowest-index
    channel picks."""
    d = NeuPIMs(None, channels=channels)
    op = next(o for o in decode.ops if o.kind == ir.ATTENTION)
    cost = {s: d.request_cycles(op, s) for s in set(lens)}
    load, want = [0.0] * channels, [0] * len(lens)
    for i in sorted(range(len(lens)), key=lambda i: (-cost[lens[i]], i)):
        ch = min(range(channels), key=lambda j: (load[j], j))
        load[ch] += cost[lens[i]]
        want[i] = ch
    assert d.assign_channels(op, lens) == want
