"""The vectorised ``npu`` cost (accelerators/npu_vector.py) equals the scalar ``NPU.cost``.

Random designs over every parameter's range, dataflow, preset and dtype, against random ops of
every kind (matmul, conv, attention, vector ops, hash grid) including degenerate and malformed
ones; plus the fast path's hook (simulators/fast.py) against its per-design loop.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from accelerators import npu_vector
from accelerators.mac_formats import storage_bytes
from accelerators.npu import NPU, PARAMS
from dse.errors import BadInput, InfeasibleDesign
from simulators import fast
from workloads import ir
from workloads.ir import DTYPE_BYTES, Op, Workload

#: The contract: vectorised and scalar costs agree to this relative tolerance (the brief's).
REL = 1e-9

PARAM = {p.name: p for p in PARAMS}


def _ranged_int(name: str, small: int | None = None) -> st.SearchStrategy[int]:
    """An int of parameter ``name``: its ends, powers of two, anything in range."""
    p = PARAM[name]
    lo, hi = int(p.low), int(p.high)
    pows = [2 ** i for i in range(int(math.log2(hi)) + 1) if lo <= 2 ** i <= hi]
    options = [st.sampled_from([lo, hi] + pows), st.integers(lo, hi)]
    if small is not None:
        options.append(st.integers(lo, min(hi, small)))
    return st.one_of(*options)


def _ranged_float(name: str) -> st.SearchStrategy[float]:
    p = PARAM[name]
    return st.one_of(st.sampled_from([p.low, p.high]),
                     st.floats(math.log(p.low), math.log(p.high)).map(math.exp)
                     .map(lambda x: min(max(x, p.low), p.high)))


_VALUES = {
    "rows": _ranged_int("rows", 64), "cols": _ranged_int("cols", 64),
    "dataflow": st.sampled_from(PARAM["dataflow"].choices),
    "arrays": _ranged_int("arrays", 8), "clock_hz": _ranged_float("clock_hz"),
    "dtype": st.sampled_from(PARAM["dtype"].choices),
    "ifmap_sram_kb": _ranged_int("ifmap_sram_kb", 64),
    "filter_sram_kb": _ranged_int("filter_sram_kb", 64),
    "ofmap_sram_kb": _ranged_int("ofmap_sram_kb", 64),
    "dram_bandwidth_Bps": _ranged_float("dram_bandwidth_Bps"),
    "dram": st.sampled_from(PARAM["dram"].choices),
    "vector_lanes": _ranged_int("vector_lanes", 256),
    "node_nm": st.sampled_from(PARAM["node_nm"].choices),
}


@st.composite
def designs(draw) -> NPU:
    """A preset (or none) with any subset of its parameters redrawn."""
    preset = draw(st.sampled_from([None] + sorted(NPU.PRESETS)))
    names = draw(st.sets(st.sampled_from(sorted(_VALUES))))
    values = {n: draw(_VALUES[n]) for n in sorted(names)}
    if "dram" in values:   # a preset's device capacity is one of its own standard's
        values["dram_device_gb"] = 0.0
    return NPU(preset, **values)


@st.composite
def tight_designs(draw) -> NPU:
    """Scratchpads at or just above the smallest that holds a minimal tile (two halves of one
    array edge: max(rows, cols) x arrays operands, 32-bit partial sums in the ofmap one), where
    tiling, re-fetch and partial-sum chunking are at their limits."""
    rows, cols = draw(_VALUES["rows"]), draw(_VALUES["cols"])
    arrays, dtype = draw(_VALUES["arrays"]), draw(_VALUES["dtype"])
    edge = max(rows, cols) * arrays
    values = dict(rows=rows, cols=cols, arrays=arrays, dtype=dtype,
                  dataflow=draw(_VALUES["dataflow"]), vector_lanes=draw(_VALUES["vector_lanes"]))
    for pad, elem in (("ifmap", storage_bytes(dtype)), ("filter", storage_bytes(dtype)),
                      ("ofmap", 4)):
        least = -(-2 * edge * elem // 1024)
        values[f"{pad}_sram_kb"] = min(131072, least * draw(st.sampled_from([1, 1, 2, 3]))
                                       + draw(st.sampled_from([0, 0, 1, 7])))
    return NPU(**values)


dims = st.one_of(st.integers(1, 4), st.integers(1, 300), st.integers(1, 70000),
                 st.sampled_from([0, 1, 64, 128, 768, 4096, 2 ** 20]))
bpes = st.sampled_from([1, 2, 4, 0])


def _bytes(draw, *counts):
    """Compulsory bytes: those of the shapes, or none (the model then uses its own)."""
    return draw(st.sampled_from([counts, tuple(0 for _ in counts)]))


@st.composite
def matmuls(draw) -> Op:
    m, n, k = draw(dims), draw(dims), draw(dims)
    batch = draw(st.sampled_from([1, 1, 2, 8, 0]))
    shared = draw(st.booleans())
    b = draw(bpes)
    w, ar, aw = _bytes(draw, k * n * max(b, 1), batch * m * k * max(b, 1), batch * m * n * max(b, 1))
    attrs = {"m": m, "n": n, "k": k, "batch": batch, "weight_operand": shared}
    form = draw(st.sampled_from(["attrs", "shapes", "no-batch", "broken"]))
    shapes = ((batch, m, k), (k, n))
    if form == "shapes":
        attrs = {"weight_operand": shared}
    elif form == "no-batch":
        attrs.pop("batch")
    elif form == "broken":   # neither m, n, k nor two operand shapes: BadInput
        attrs, shapes = {"m": m}, ((m,),)
    return Op("mm", ir.MATMUL, "aten.mm", shapes, ((batch, m, n),), "bf16", b,
              flops=2 * batch * m * n * k, weight_bytes=w, activation_bytes_read=ar,
              activation_bytes_written=aw, attrs=attrs)


@st.composite
def convs(draw) -> Op:
    n_, c, h = draw(st.integers(1, 4)), draw(st.integers(1, 512)), draw(st.integers(1, 224))
    k, r = draw(st.integers(1, 1024)), draw(st.sampled_from([1, 3, 7]))
    groups = draw(st.sampled_from([1, 1, 2, c]))
    p = max(1, h // draw(st.sampled_from([1, 2])))
    gm, gn, gk = n_ * p * p, k // groups or draw(st.sampled_from([0, 1])), r * r * (c // groups)
    b = draw(bpes)
    attrs = {"gemm_m": gm, "gemm_n": gn, "gemm_k": gk, "groups": groups}
    if draw(st.booleans()):
        attrs.update(n=n_, c=c, h=h, w=h, k=k, r=r, s=r, p=p, q=p)
    if draw(st.integers(0, 9)) == 0:
        attrs.pop("gemm_k")   # BadInput
    w, ar, aw = _bytes(draw, k * gk * max(b, 1), n_ * c * h * h * max(b, 1), gm * k * max(b, 1))
    return Op("conv", ir.CONV, "aten.conv2d", ((n_, c, h, h),), ((n_, k, p, p),), "bf16", b,
              flops=2 * gm * gn * gk * groups, weight_bytes=w, activation_bytes_read=ar,
              activation_bytes_written=aw, attrs=attrs)


@st.composite
def attentions(draw) -> Op:
    batch, heads = draw(st.integers(1, 8)), draw(st.sampled_from([1, 8, 12, 32, 64]))
    kv_heads = draw(st.sampled_from([heads, 1, max(1, heads // 4), 0, None]))
    q, kv = draw(st.one_of(st.just(1), st.integers(1, 4096))), draw(st.integers(0, 8192))
    d = draw(st.sampled_from([64, 128, 80, 1, 0]))
    causal = draw(st.booleans())
    b = draw(bpes)
    flops = 4 * batch * heads * q * kv * d
    visible = sum(min(i + 1, kv) for i in range(min(q, 64))) * max(1, q // 64)
    attrs = {"batch": batch, "heads": heads, "q_len": q, "kv_len": kv, "head_dim": d,
             "causal": causal, "causal_flops": flops * visible // max(1, q * kv)}
    if kv_heads is not None:
        attrs["kv_heads"] = kv_heads
    if draw(st.booleans()):
        attrs["value_dim"] = draw(st.sampled_from([d, 2 * d + 1, 0]))
    if draw(st.integers(0, 9)) == 0:
        attrs.pop("heads")   # BadInput
    ar, kvr, aw = _bytes(draw, batch * heads * q * d * max(b, 1),
                         2 * batch * (kv_heads or heads) * kv * d * max(b, 1),
                         batch * heads * q * d * max(b, 1))
    return Op("attn", ir.ATTENTION, "aten.sdpa", (), (), "bf16", b,
              flops=draw(st.sampled_from([flops, 0])), activation_bytes_read=ar,
              kv_bytes_read=kvr, activation_bytes_written=aw, attrs=attrs)


@st.composite
def vector_ops(draw) -> Op:
    kind = draw(st.sampled_from([ir.ELEMENTWISE, ir.NORM, ir.SOFTMAX, ir.REDUCTION,
                                 ir.EMBEDDING, ir.DATA_MOVEMENT, ir.UNKNOWN, ir.HASHGRID,
                                 "not-a-kind"]))
    elements = draw(st.one_of(st.integers(1, 1 << 24), st.sampled_from([1, 0, -5, 2.5])))
    b = draw(bpes)
    attrs: dict = {}
    if draw(st.booleans()):
        attrs["elements"] = elements
    if kind == ir.HASHGRID:
        attrs.update(points=draw(st.integers(1, 1 << 20)), levels=draw(st.integers(1, 16)),
                     features=draw(st.integers(1, 4)), dims=draw(st.sampled_from([2, 3])))
    out = draw(st.sampled_from([((max(1, int(elements)),),), (), (None,), ((0,),)]))
    read = draw(st.sampled_from([0, max(1, int(elements)) * max(b, 1), 1000]))
    written = draw(st.sampled_from([0, max(1, int(elements)) * max(b, 1)]))
    return Op("v", kind, f"aten.{kind}", ((max(1, int(elements)),),), out, "bf16", b,
              activation_bytes_read=read, activation_bytes_written=written, attrs=attrs)


any_op = st.one_of(matmuls(), convs(), attentions(), vector_ops())


def _scalar(design: NPU, op: Op):
    """(latency_s, total_energy_j, None) or (nan, nan, the exception) of a fresh scalar cost."""
    try:
        c = design.cost(op)
    except Exception as exc:
        return math.nan, math.nan, exc
    return c.latency_s, c.total_energy_j, None


def _rel(x: float, y: float) -> float:
    return abs(x - y) / abs(x) if x else abs(y)


def _assert_equal(ds: list[NPU], ops: list[Op]) -> float:
    """cost_many == cost() on every (op, design); returns the largest relative deviation."""
    many = npu_vector.cost_many(ds, ops)
    worst = 0.0
    for i, d in enumerate(ds):
        first = None
        for j, op in enumerate(ops):
            lat, en, exc = _scalar(d, op)
            got = many.op_errors(j)[i]
            if exc is not None:
                first = first or exc
                assert type(got) is type(exc) and str(got) == str(exc), (op, dict(d.hw))
                assert math.isnan(many.latency_s[j, i]) and math.isnan(many.energy_j[j, i])
                continue
            assert got is None, (got, op, dict(d.hw))
            worst = max(worst, _rel(lat, many.latency_s[j, i]), _rel(en, many.energy_j[j, i]))
            assert _rel(lat, many.latency_s[j, i]) <= REL, (op, dict(d.hw))
            assert _rel(en, many.energy_j[j, i]) <= REL, (op, dict(d.hw))
        assert (many.errors[i] is None) == (first is None)
        if first is not None:
            assert type(many.errors[i]) is type(first) and str(many.errors[i]) == str(first)
    np.testing.assert_array_equal(many.area_mm2, [d.area_mm2() for d in ds])
    np.testing.assert_array_equal(many.static_power_w, [d.static_power_w() for d in ds])
    return worst


# ----------------------------------------------------------------------------- equality
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(designs(), min_size=1, max_size=6), st.lists(any_op, min_size=1, max_size=6))
def test_vectorised_cost_equals_scalar_cost(ds, ops):
    _assert_equal(ds, ops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(designs(), min_size=1, max_size=4),
       st.lists(st.one_of(matmuls(), convs()), min_size=1, max_size=4))
def test_gemms_equal_scalar_cost(ds, ops):
    _assert_equal(ds, ops)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tight_designs(), min_size=1, max_size=6), st.lists(any_op, min_size=1, max_size=4))
def test_tight_scratchpads_equal_scalar_cost(ds, ops):
    _assert_equal(ds, ops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(designs(), min_size=1, max_size=4), st.lists(attentions(), min_size=1, max_size=4))
def test_attention_equals_scalar_cost(ds, ops):
    _assert_equal(ds, ops)


def _torch_or_skip():
    pytest.importorskip("torch")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(designs(), min_size=1, max_size=5), st.lists(any_op, min_size=1, max_size=5))
def test_torch_backend_equals_numpy(ds, ops):
    """The same kernels on torch (its CPU build here; CUDA on a GPU machine, benchmarks/
    population.py section 6): the same float64 operations, equal results and errors."""
    _torch_or_skip()
    a = npu_vector.cost_many(ds, ops)
    b = npu_vector.cost_many(ds, ops, device="torch")
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    np.testing.assert_array_equal(a.energy_j, b.energy_j)
    assert [repr(e) for e in a.errors] == [repr(e) for e in b.errors]
    for j in range(len(ops)):
        assert [repr(e) for e in a.op_errors(j)] == [repr(e) for e in b.op_errors(j)]


def test_design_arrays_take_repeats_designs():
    ds = [NPU(), NPU("edge-32x32"), NPU(dataflow="os", rows=64)]
    op = Op("mm", ir.MATMUL, "aten.mm", ((64, 64), (64, 64)), ((64, 64),), "bf16", 2,
            weight_bytes=8192, activation_bytes_read=8192, activation_bytes_written=8192,
            attrs={"m": 64, "n": 64, "k": 64})
    whole = npu_vector.cost_many(ds, [op])
    tiled = npu_vector.cost_many(npu_vector.DesignArrays(ds).take([2, 0, 2, 1]), [op])
    np.testing.assert_array_equal(tiled.latency_s[0], whole.latency_s[0, [2, 0, 2, 1]])


def test_cost_op_gives_arrays_mask_and_reasons():
    tiny = NPU(rows=1024, cols=1024, arrays=1, ifmap_sram_kb=2)   # no minimal tile fits
    ok = NPU()
    op = Op("mm", ir.MATMUL, "aten.mm", ((64, 64), (64, 64)), ((64, 64),), "bf16", 2,
            flops=2 * 64 ** 3, weight_bytes=8192, activation_bytes_read=8192,
            activation_bytes_written=8192, attrs={"m": 64, "n": 64, "k": 64})
    res = npu_vector.cost_op([ok, tiny, ok], op)
    assert res.latency_s.shape == res.energy_j.shape == (3,)
    assert res.infeasible.tolist() == [False, True, False]
    assert res.latency_s[0] == ok.cost(op).latency_s
    assert res.energy_j[2] == ok.cost(op).total_energy_j
    with pytest.raises(InfeasibleDesign) as err:
        tiny.cost(op)
    assert isinstance(res.errors[1], InfeasibleDesign)
    assert res.reasons[1] == err.value.reason and "ifmap_sram_kb = 2 KiB" in res.reasons[1]
    assert np.isnan(res.latency_s[1])


def test_designs_with_every_preset_and_dtype_on_one_op():
    ds = [NPU(p) for p in NPU.PRESETS] + [NPU(dtype=t) for t in DTYPE_BYTES]
    ds += [NPU(dataflow=df, rows=r, cols=c) for df in ("ws", "os", "is") for r, c in
           ((4, 1024), (1024, 4), (37, 129))]
    op = Op("mm", ir.MATMUL, "aten.mm", ((512, 4096), (4096, 11008)), ((512, 11008),), "bf16", 2,
            flops=2 * 512 * 4096 * 11008, weight_bytes=4096 * 11008 * 2,
            activation_bytes_read=512 * 4096 * 2, activation_bytes_written=512 * 11008 * 2,
            attrs={"m": 512, "n": 11008, "k": 4096, "batch": 1, "weight_operand": True})
    assert _assert_equal(ds, [op]) == 0.0   # same operations in the same order: bit-identical


def test_operands_exactly_half_a_scratchpad():
    """The fit tests (``<=``) at equality: A, B and one K/V group of exactly 128 KiB against
    256 KiB scratchpads (128 KiB usable, the other half prefetches)."""
    ds = [NPU(ifmap_sram_kb=i, filter_sram_kb=f, ofmap_sram_kb=o, dataflow=df, arrays=1,
              rows=32, cols=32) for i, f, o in ((256, 256, 256), (256, 256, 64), (128, 256, 1),
                                                (256, 128, 1)) for df in ("ws", "os", "is")]
    # 128 x 512 @ 512 x 128 in bf16: A and B 128 KiB each; with a 1 KiB ofmap scratchpad only
    # small output blocks fit, so whether the other operand "fits" decides the re-fetches
    mm = Op("mm", ir.MATMUL, "aten.mm", ((128, 512), (512, 128)), ((128, 128),), "bf16", 2,
            weight_bytes=512 * 128 * 2, activation_bytes_read=128 * 512 * 2,
            activation_bytes_written=128 * 128 * 2, attrs={"m": 128, "n": 128, "k": 512})
    attn = Op("attn", ir.ATTENTION, "aten.sdpa", (), (), "bf16", 2,
              attrs={"heads": 8, "q_len": 2048, "kv_len": 512, "head_dim": 64})
    below = Op("attn", ir.ATTENTION, "aten.sdpa", (), (), "bf16", 2,
               attrs={"heads": 8, "q_len": 2048, "kv_len": 513, "head_dim": 64})
    assert ds[0].cost(below).traffic["dram"] > ds[0].cost(attn).traffic["dram"] * 1.5
    assert ds[6].cost(mm).traffic["dram"] == mm.total_bytes   # B fits exactly: read once
    _assert_equal(ds, [mm, attn, below])


def test_huge_ops_fall_back_to_the_scalar_code_and_still_agree():
    big = 1 << 22   # M N K = 2**66: past float64's exact integers
    op = Op("mm", ir.MATMUL, "aten.mm", ((big, big), (big, big)), ((big, big),), "bf16", 2,
            attrs={"m": big, "n": big, "k": big})
    _assert_equal([NPU(), NPU("edge-32x32")], [op])


def test_non_npu_designs_are_bad_input():
    with pytest.raises(BadInput, match="designs"):
        npu_vector.cost_many([object()], [])


def test_subclasses_are_costed_by_their_own_cost():
    class Doubled(NPU):
        def cost(self, op):
            c = super().cost(op)
            return type(c)(**{**{f: getattr(c, f) for f in c.__dataclass_fields__},
                              "latency_s": 2 * c.latency_s})

    op = Op("e", ir.ELEMENTWISE, "aten.add", ((1024,),), ((1024,),), "bf16", 2,
            activation_bytes_read=4096, activation_bytes_written=2048, attrs={"elements": 1024})
    many = npu_vector.cost_many([Doubled(), NPU()], [op])
    assert many.latency_s[0, 0] == Doubled().cost(op).latency_s == 2 * many.latency_s[0, 1]


# ----------------------------------------------------------------------------- the fast path hook
@pytest.fixture(scope="module")
def small_gpt2():
    from dse import api
    return api.workload("gpt2", phase="decode", context=128, arch={"n_layer": 2})


def _same(a, b):
    for f in ("latency_s", "energy_j", "area_mm2", "avg_power_w", "throughput"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert a.infeasible == b.infeasible


def test_fast_path_vectorised_equals_per_design_loop(small_gpt2):
    from accelerators.gpu import GPU
    ds = [NPU(rows=r, cols=c, dataflow=df, arrays=a, ofmap_sram_kb=kb)
          for r in (8, 128, 1024) for c in (16, 512) for df in ("ws", "os", "is")
          for a, kb in ((1, 4096), (8, 16))]
    # infeasible: 8 arrays with an edge of 512 or 1024 PEs need 2 x 8 x edge x 4 B > 16 KiB of
    # ofmap scratchpad; 4 (rows, cols) pairs x 3 dataflows
    ds += [GPU("h100"), NPU("tpu-v1-like"), NPU("edge-32x32")]   # a template without the hook
    vec = fast.evaluate_many(small_gpt2, ds)
    loop = fast.evaluate_many(small_gpt2, ds, vectorised=False)
    _same(vec, loop)
    assert sum(r is not None for r in vec.infeasible) == 12
    assert np.isfinite(vec.latency_s[-3:]).all()


def test_fast_path_uses_the_hook_only_for_big_enough_batches(small_gpt2, monkeypatch):
    calls = []
    original = NPU.cost_many.__func__

    def spy(cls, designs, ops):
        calls.append(len(designs))
        return original(cls, designs, ops)

    monkeypatch.setattr(NPU, "cost_many", classmethod(spy))
    one = fast.evaluate_many(small_gpt2, [NPU()])
    assert calls == []   # 1 design x a few unique ops: under VECTOR_MIN_CALLS, the scalar loop
    monkeypatch.setattr(fast, "VECTOR_MIN_CALLS", 0)
    _same(fast.evaluate_many(small_gpt2, [NPU()]), one)
    assert calls == [1]


def test_fast_path_raises_what_the_scalar_path_raises(monkeypatch):
    """An op the model cannot take (a zero head dimension divides by zero in the scalar
    code) fails the same way in both paths."""
    op = Op("attn", ir.ATTENTION, "aten.sdpa", (), (), "bf16", 2, flops=0,
            attrs={"heads": 4, "q_len": 8, "kv_len": 8, "head_dim": 0})
    g = nx.DiGraph()
    g.add_node("attn", op=op, index=0)
    w = Workload(graph=g, model="x", phase="forward", dtype="bf16")
    monkeypatch.setattr(fast, "VECTOR_MIN_CALLS", 0)
    for vectorised in (True, False):
        with pytest.raises(ZeroDivisionError):
            fast.evaluate_many(w, [NPU(), NPU("edge-32x32")], vectorised=vectorised)
    bad = Op("attn", ir.ATTENTION, "aten.sdpa", (), (), "bf16", 2, attrs={"q_len": 8})
    g2 = nx.DiGraph()
    g2.add_node("attn", op=bad, index=0)
    w2 = Workload(graph=g2, model="x", phase="forward", dtype="bf16")
    res = [fast.evaluate_many(w2, [NPU()] * 2, vectorised=v) for v in (True, False)]
    assert res[0].infeasible == res[1].infeasible and "heads" in res[0].infeasible[0]


def test_population_path_equals_the_fast_path(small_gpt2):
    """simulators/population.py: latency and energy of a population as one array program, and
    evaluate_population's whole FastResults, equal evaluate_many's (infeasible designs too)."""
    from simulators.population import evaluate_population
    ds = [NPU(), NPU("edge-32x32"), NPU(dataflow="os", rows=64), NPU(rows=1024, cols=1024,
                                                                    ifmap_sram_kb=2),
          NPU("tpu-v1-like"), NPU(vector_lanes=7, clock_hz=3e8)]
    ref = fast.evaluate_many(small_gpt2, ds)
    for device in ("cpu", "torch"):
        if device == "torch":
            _torch_or_skip()
        got = evaluate_population(small_gpt2, ds, device)
        _same(got, ref)
        for f in ("cost_usd", "tdp_w"):
            np.testing.assert_array_equal(getattr(got, f), getattr(ref, f))
