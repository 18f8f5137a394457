"""Parallel layouts as graph transforms: conservation, collectives inserted, infeasible splits."""

import math

import networkx as nx
import pytest

from dse import api
from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.ir import Op, Workload
from workloads.parallel import (COLLECTIVE, MOE, Layout, layout_from, parallelize,
                                pipeline_stages, split_batch)

TINY = {"n_layer": 2, "d_model": 64, "n_head": 8, "n_kv_head": 4, "d_ff": 128,
        "vocab_size": 256, "max_seq": 64}


@pytest.fixture(scope="module")
def decode():
    return api.workload("llama2-7b", phase="decode", batch=8, context=16, arch=TINY)


@pytest.fixture(scope="module")
def prefill():
    return api.workload("llama2-7b", phase="prefill", batch=2, seq=8, arch=TINY)


def _weights(w):
    return sum(op.weight_bytes for op in w.ops)


def _collectives(w):
    return [op for op in w.ops if op.kind == COLLECTIVE]


def _is_topological(w):
    pos = {op.name: i for i, op in enumerate(w.ops)}
    return all(pos[u] < pos[v] for u, v in w.graph.edges)


@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_conserves_flops_and_splits_weights_exactly(decode, tp):
    pw = parallelize(decode, Layout(tp=tp))
    g = pw.graphs[0]
    assert all(x is g for x in pw.graphs) and pw.representative == [0] * tp
    assert _is_topological(g)
    # what each rank runs in full is reported; everything else is split exactly
    replicated = pw.replicated_flops[0]
    assert pw.flops() == decode.flops + (tp - 1) * replicated
    whole = sum(op.weight_bytes for op in decode.ops
                if op.kind not in (ir.MATMUL,) and op.weight_bytes)
    assert tp * _weights(g) == _weights(decode) + (tp - 1) * whole
    # Megatron: one all-reduce after attention and one after the MLP per layer, and the
    # LM head's logits gathered
    kinds = [op.attrs["collective"] for op in _collectives(g)]
    assert kinds.count("all_reduce") == 2 * TINY["n_layer"]
    assert kinds.count("all_gather") == 1
    assert all(op.flops == 0 and op.total_bytes == 0 for op in _collectives(g))
    attn = [op for op in g.ops if op.kind == ir.ATTENTION][0]
    assert attn.attrs["heads"] == TINY["n_head"] // tp
    assert attn.attrs["kv_heads"] == TINY["n_kv_head"] // tp
    # the all-reduce moves the whole hidden state of the batch
    ar = [op for op in _collectives(g) if op.attrs["collective"] == "all_reduce"][0]
    assert ar.attrs["bytes"] == decode.batch * TINY["d_model"] * 2


def test_sequence_parallel_splits_everything(decode, prefill):
    for w in (decode, prefill):
        pw = parallelize(w, Layout(tp=4, sequence_parallel=True))
        assert pw.flops() == w.flops
        assert sum(pw.replicated_flops) == 0
        kinds = {op.attrs["collective"] for op in _collectives(pw.graphs[0])}
        assert kinds == {"all_gather", "reduce_scatter"}
        # KV cache split by heads
        kv = sum(op.kv_bytes_read + op.kv_bytes_written for op in w.ops)
        assert 4 * sum(op.kv_bytes_read + op.kv_bytes_written
                       for op in pw.graphs[0].ops) == kv


def test_pipeline_stages_cut_at_layer_boundaries_and_conserve(decode):
    stages = pipeline_stages(decode, 2)
    assert set(stages.values()) == {0, 1}
    pw = parallelize(decode, Layout(pp=2, microbatches=4))
    assert pw.flops() == decode.flops
    assert pw.microbatches == 4
    assert sum(g.params for g in pw.graphs) == decode.params
    sends = [op for op in _collectives(pw.graphs[0]) if op.attrs["collective"] == "send_recv"]
    # one tensor (the residual stream) crosses a layer boundary, once per microbatch
    assert len(sends) == 4
    assert all(op in pw.graphs[1].ops for op in sends)
    for g in pw.graphs:
        assert _is_topological(g)
    # microbatch k+1 starts on a stage after microbatch k
    g0 = pw.graphs[0]
    first1 = [op.name for op in g0.ops if op.name.endswith("@1")][0]
    assert nx.has_path(g0.graph, [op.name for op in g0.ops if op.name.endswith("@0")][0],
                       first1)


def test_data_parallel_replicas_split_the_batch(decode):
    pw = parallelize(decode, Layout(dp=2, tp=2))
    assert pw.devices == 4 and pw.representative == [0, 0, 0, 0]
    assert pw.graphs[0].batch == decode.batch // 2
    assert pw.flops() == decode.flops + 2 * (2 - 1) * pw.replicated_flops[0]
    half = split_batch(decode, 2)
    assert 2 * half.flops == decode.flops
    assert _weights(half) < _weights(decode)        # the embedding gathers fewer rows
    assert half.params == decode.params


def _moe_workload(tokens=64, experts=8, top_k=2, d=32, f=64, per_expert=None):
    """embedding -> norm -> router -> moe -> add: a synthetic mixture-of-experts layer."""
    b = 8
    ops = [
        Op("embedding", ir.EMBEDDING, "embedding", ((1000, d), (b, tokens // b)),
           ((b, tokens // b, d),), "bf16", 2, 0, 2 * tokens * d, 0, 2 * tokens * d,
           attrs={"elements": tokens * d}),
        Op("norm", ir.NORM, "rms_norm", ((b, tokens // b, d),), ((b, tokens // b, d),), "bf16",
           2, 5 * tokens * d, 2 * d, 2 * tokens * d, 2 * tokens * d,
           attrs={"elements": tokens * d}),
        Op("router", ir.MATMUL, "linear", ((b, tokens // b, d), (experts, d)),
           ((b, tokens // b, experts),), "bf16", 2, 2 * tokens * d * experts,
           2 * d * experts, 2 * tokens * d, 2 * tokens * experts,
           attrs={"m": tokens, "n": experts, "k": d, "batch": 1, "weight_operand": True}),
        Op("experts", MOE, "moe", ((tokens, d),), ((tokens, d),), "bf16", 2,
           2 * tokens * top_k * 3 * d * f, 2 * experts * 3 * d * f,
           2 * tokens * d * top_k, 2 * tokens * d * top_k,
           attrs={"experts": experts, "top_k": top_k, "tokens": tokens,
                  "params_per_expert": 3 * d * f,
                  **({"tokens_per_expert": per_expert,
                      "touch_probability": [1.0] * experts} if per_expert else {})}),
        Op("add", ir.ELEMENTWISE, "add", ((b, tokens // b, d),), ((b, tokens // b, d),),
           "bf16", 2, tokens * d, 0, 4 * tokens * d, 2 * tokens * d,
           attrs={"elements": tokens * d}),
    ]
    g = nx.DiGraph()
    for i, op in enumerate(ops):
        g.add_node(op.name, op=op, index=i)
    for a, c in [("embedding", "norm"), ("norm", "router"), ("router", "experts"),
                 ("norm", "experts"), ("experts", "add"), ("embedding", "add")]:
        g.add_edge(a, c, bytes=2 * tokens * d)
    params = 1000 * d + d + d * experts + experts * 3 * d * f
    return Workload(graph=g, model="moe-toy", phase="prefill", dtype="bf16", batch=b,
                    seq=tokens // b, params=params)


def test_expert_parallel_splits_experts_with_all_to_all():
    w = _moe_workload()
    pw = parallelize(w, Layout(ep=4))
    assert pw.representative == [0, 0, 0, 0]
    g = pw.graphs[0]
    moe = [op for op in g.ops if op.kind == MOE][0]
    assert moe.attrs["experts"] == 2
    kinds = [op.attrs["collective"] for op in _collectives(g)]
    assert kinds == ["all_to_all", "all_to_all"]        # dispatch, combine
    a2a = _collectives(g)[0]
    assert a2a.attrs["bytes"] == (64 // 4) * 2 * 32 * 2  # local tokens x top-k x d x 2 B
    src_moe = [op for op in w.ops if op.kind == MOE][0]
    assert 4 * moe.flops == src_moe.flops
    assert 4 * moe.weight_bytes == src_moe.weight_bytes
    # the dense part runs data parallel over the expert-parallel ranks
    dense = sum(op.flops for op in w.ops if op.kind != MOE)
    assert 4 * sum(op.flops for op in g.ops if op.kind not in (MOE, COLLECTIVE)) == dense
    assert pw.flops() == w.flops


def test_expert_imbalance_makes_a_hot_rank():
    w = _moe_workload()
    pw = parallelize(w, Layout(ep=4, ep_imbalance=2.0))
    assert pw.representative == [0, 1, 1, 1]
    hot = [op for op in pw.graphs[0].ops if op.kind == MOE][0]
    cold = [op for op in pw.graphs[1].ops if op.kind == MOE][0]
    assert hot.flops == pytest.approx(2 * (hot.flops + 3 * cold.flops) / 4, rel=1e-6)
    assert hot.flops + 3 * cold.flops == pytest.approx(
        [op for op in w.ops if op.kind == MOE][0].flops, abs=4)


def test_expert_load_from_the_routing_table():
    per = [40.0, 30.0, 20.0, 10.0, 10.0, 6.0, 6.0, 6.0]
    w = _moe_workload(per_expert=per)
    pw = parallelize(w, Layout(ep=2))
    assert pw.representative == [0, 1]
    loads = [[op for op in pw.graphs[r].ops if op.kind == MOE][0].attrs["tokens_per_expert"]
             for r in (0, 1)]
    assert loads == [[40.0, 20.0, 10.0, 6.0], [30.0, 10.0, 6.0, 6.0]]   # dealt round-robin


def test_moe_with_tensor_parallelism_reduces_after_the_experts():
    pw = parallelize(_moe_workload(), Layout(tp=2))
    kinds = [op.attrs["collective"] for op in _collectives(pw.graphs[0])]
    assert kinds == ["all_reduce"]


@pytest.mark.parametrize("layout, words", [
    (Layout(tp=3), "does not divide the 8 attention heads"),
    (Layout(tp=8), "8 attention heads and 4 key/value heads"),
    (Layout(dp=3), "batch of 8"),
    (Layout(ep=2), "needs a mixture-of-experts model"),
    (Layout(tp=2, sequence_parallel=True, dp=8), "tokens"),
])
def test_infeasible_layouts_say_why(decode, layout, words):
    with pytest.raises(InfeasibleDesign) as exc:
        parallelize(decode, layout)
    assert words in str(exc.value)


def test_experts_must_divide():
    with pytest.raises(InfeasibleDesign, match="does not divide the 8 experts"):
        parallelize(_moe_workload(), Layout(ep=3, dp=1))


@pytest.mark.parametrize("raw, field", [({"tp": 0}, "parallel.tp"), ({"tp": 2.5}, "parallel.tp"),
                                         ({"pipeline": 2}, "parallel.pipeline"),
                                         ({"ep": 2, "ep_imbalance": 3}, "parallel.ep_imbalance")])
def test_bad_layouts_name_the_field(raw, field):
    with pytest.raises(BadInput) as exc:
        layout_from(raw)
    assert exc.value.field == field


def test_layout_ranks_put_tensor_parallel_innermost():
    lay = Layout(tp=2, pp=2, dp=2)
    assert [lay.coords(r) for r in range(4)] == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 1, 0, 0),
                                                (0, 1, 0, 1)]
    assert all(lay.rank(*lay.coords(r)) == r for r in range(lay.devices))
    assert math.prod((lay.tp, lay.pp, lay.dp)) == lay.devices
