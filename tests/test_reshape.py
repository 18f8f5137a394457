"""Architectures without re-capture (workloads/reshape.py): a workload rebuilt from its family's
template equals a real capture at the same sizes, op by op (every field and attr), edge by edge,
with the same parameter and view-op counts."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from workloads import build, reshape

SETTINGS = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _check(model, phase, arch, batch=1, seq=None, context=None, dtype="bf16"):
    args = build.resolve(model, phase, batch, seq, context, dtype, arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = reshape.reshaped(args)
        assert mine is not None, reshape.refusal(args)
        real = build._capture_zoo(args)
    assert reshape.same_workload(mine, real) is None
    assert mine.flops == real.flops and mine.traffic_bytes() == real.traffic_bytes()


@st.composite
def _llm(draw, style):
    n_kv = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3)) if style == "llama" else 1
    n_head = n_kv * group
    head = draw(st.integers(1, 8)) * (2 if style == "llama" else 1)
    arch = {"n_layer": draw(st.integers(1, 4)), "n_head": n_head, "d_model": n_head * head,
            "d_ff": draw(st.integers(1, 48)), "vocab_size": draw(st.integers(2, 40)),
            "max_seq": 64}
    if style == "llama":
        arch["n_kv_head"] = n_kv
    return arch, draw(st.integers(1, 3)), draw(st.integers(1, 12)), draw(st.integers(1, 12))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("model,style", [("gpt2", "gpt"), ("llama2-7b", "llama")])
def test_a_reshaped_transformer_equals_its_capture(model, style, phase):
    @SETTINGS
    @given(_llm(style))
    def check(case):
        arch, batch, seq, context = case
        _check(model, phase, arch, batch, seq if phase == "prefill" else None,
               context if phase == "decode" else None)
    check()


@SETTINGS
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), st.booleans(),
       st.integers(1, 4))
def test_a_reshaped_gemm_equals_its_capture(m, k, n, bias, batch):
    _check("linear", None, {"m": m, "k": k, "n": n, "bias": bias}, batch)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 64), st.integers(1, 64),
       st.integers(1, 64), st.booleans())
def test_a_reshaped_attention_equals_its_capture(kv, group, sq, skv, d, causal):
    _check("sdpa", None, {"kv_heads": kv, "h": kv * group, "sq": sq, "skv": skv, "d": d,
                          "causal": causal})


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 40), st.integers(1, 40),
       st.sampled_from([(1, 0), (3, 1), (3, 0), (7, 3), (5, 2)]), st.integers(1, 2),
       st.sampled_from([1, 2]), st.booleans())
def test_a_reshaped_convolution_equals_its_capture(cg, kg, h, w, rp, stride, groups, bias):
    r, pad = rp
    if h + 2 * pad < r or w + 2 * pad < r:
        return
    arch = {"c": cg * groups, "k": kg * groups, "h": h, "w": w, "r": r, "s": r,
            "stride": stride, "padding": pad, "groups": groups, "bias": bias}
    _check("conv2d", None, arch, 1)


def test_other_dtypes_and_the_builder_use_the_template(tmp_path, monkeypatch):
    _check("gpt2", "decode", {"n_layer": 2, "d_model": 64, "n_head": 4}, context=9, dtype="fp32")
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))   # no disk hit: the builder re-shapes
    build.clear_memory_cache()
    args = build.resolve("gpt2", "decode", 1, None, 9, "bf16", {"n_layer": 2, "d_model": 64,
                                                                 "n_head": 4})
    first = build.build_workload("gpt2", "decode", context=9, arch={"n_layer": 2, "d_model": 64,
                                                                    "n_head": 4})
    assert reshape.template_for(args, make=False) is not None
    other = build.build_workload("gpt2", "decode", context=9, arch={"n_layer": 3, "d_model": 96,
                                                                    "n_head": 4})
    assert len(other) > len(first) and other.arch["d_model"] == 96


def test_a_model_without_a_size_rule_or_a_refused_fit_is_captured():
    args = build.resolve("conv2d", None, 1, None, None, "bf16", {"h": 9, "r": 3, "stride": 3,
                                                                  "padding": 0})
    assert reshape.reshaped(args) is None      # the last window leaves 2 rows: captured
    args = build.resolve("resnet18", None, 1, None, None, "bf16", None)
    assert reshape.reshaped(args) is None and reshape.refusal(args)
    with pytest.raises(reshape.Refused):
        reshape._fit(14, 31, [7], [11])          # neither c * v^e + e' nor constant
    assert reshape._ev(reshape._fit(8, 12, [7], [11]), [23]) == 24   # context + 1


def test_sizes_the_model_or_torch_refuses_are_left_to_the_capture():
    from dse.errors import BadInput
    with pytest.raises(BadInput, match="context"):   # refused before any re-shape
        build.resolve("llama2-7b", "decode", 1, None, 4096, "bf16", {"n_layer": 1})
    huge = build.resolve("gpt2", "prefill", 2**31, 2**20, None, "bf16",
                         {"d_model": 2**20, "max_seq": 2**20, "n_head": 1, "n_layer": 1})
    assert reshape.reshaped(huge) is None



def test_renamed_copies_are_ops_equal_to_dataclasses_replace():
    import dataclasses
    from workloads import ir
    protos = [ir.Op("a", ir.MATMUL, "linear", ((2, 3), (4, 3)), ((2, 4),), "bf16", 2, 48, 24,
                    12, 16, 0, 0, {"m": 2, "n": 4, "k": 3}),
              ir.Op("b", ir.ATTENTION, "sdpa", ((1, 2),), ((1, 2),), "fp8", 1, 7, 0, 3, 5, 11, 13)]
    names, which = ["x", "y", "z"], [1, 0, 1]
    got = ir.renamed_copies(protos, names, which)
    for op, n, u in zip(got, names, which):
        want = dataclasses.replace(protos[u], name=n)
        assert type(op) is ir.Op and op == want and hash(op) == hash(want)
        assert all(getattr(op, f.name) == getattr(want, f.name) for f in dataclasses.fields(op))
        assert op.attrs is protos[u].attrs   # shared, as replace shares it
        with pytest.raises(dataclasses.FrozenInstanceError):
            op.name = "changed"


def test_a_reshaped_graph_is_a_plain_networkx_digraph():
    import networkx as nx
    args = build.resolve("gpt2", "decode", 2, None, 9, "bf16",
                         {"n_layer": 3, "n_head": 2, "d_model": 8, "d_ff": 16, "vocab_size": 11,
                          "max_seq": 64})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = reshape.reshaped(args)
    g = w.graph
    copy = nx.DiGraph(g)   # rebuilt through networkx's own API
    assert list(copy.nodes) == list(g.nodes) and list(copy.edges(data=True)) == \
        list(g.edges(data=True))
    assert all(g.pred[v][u] is g.succ[u][v] for u, v in g.edges)   # one data dict an edge
    assert len({id(d) for _, _, d in g.edges(data=True)}) == g.number_of_edges()
    assert list(nx.topological_sort(g)) and [op.name for op in w.ops] == list(g.nodes)


def test_resolve_checks_the_architecture_before_a_given_context():
    """build.resolve (build.resolver per architecture: what does not depend on it checked
    once) keeps its order and defaults: the architecture's error before a given context's,
    the context defaulted from max_seq, decode's seq 1, prefill's context 0."""
    from dse.errors import BadInput
    with pytest.raises(BadInput, match="arch.n_layer"):
        build.resolve("gpt2", "decode", 1, None, 0, "bf16", {"n_layer": 0})
    with pytest.raises(BadInput, match="^context"):
        build.resolve("gpt2", "decode", 1, None, 0, "bf16", {"n_layer": 2})
    with pytest.raises(BadInput, match="^batch"):
        build.resolver("gpt2", "decode", 0, None, 8, "bf16")
    with pytest.raises(BadInput, match="^context.*at most 63"):
        build.resolve("gpt2", "decode", 1, None, 64, "bf16", {"max_seq": 64})
    of = build.resolver("gpt2", "decode", 2, 5, None, "bf16")
    a, b = of({"max_seq": 64}), of(None)
    assert (a["context"], a["seq"], a["batch"], a["arch"]["max_seq"]) == (63, 1, 2, 64)
    assert b == build.resolve("gpt2", "decode", 2, 5, None, "bf16") and b["arch"]["n_layer"] == 12
    p = build.resolve("gpt2", "prefill", 1, 16, 40, "bf16", {"n_layer": 2.0})
    assert (p["context"], p["seq"], p["arch"]["n_layer"]) == (0, 16, 2)
