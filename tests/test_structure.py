"""workloads/structure.py, the one place for a workload's op structure: the groups of equal ops,
each op's producers and the counts, equal whether a re-shaped workload's builder hands them over
(workloads/reshape.py) or they are computed from signatures and the graph; the fast path's
results equal either way."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from accelerators.npu import NPU
from simulators.fast import evaluate_many
from simulators.population import evaluate_designs
from accelerators.npu_vector import DesignArrays
from workloads import build, reshape, structure
from workloads.ir import op_signature

ARCH = {"n_layer": 3, "n_head": 4, "d_model": 32, "d_ff": 40, "vocab_size": 50,
        "max_seq": 64, "n_kv_head": 2}


@pytest.fixture(scope="module")
def pair():
    """A re-shaped llama decode workload (structure handed over) and its capture (none)."""
    args = build.resolve("llama2-7b", "decode", 2, None, 16, "bf16", ARCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = reshape.reshaped(args)
        real = build._capture_zoo(args)
    assert mine is not None and reshape.same_workload(mine, real) is None
    return mine, real


def _by_signature(w):
    first: dict[str, int] = {}
    return [first.setdefault(op_signature(op), len(first)) for op in w.ops]


def test_structure_equals_signatures_and_graph(pair):
    mine, real = pair
    assert structure._hint(mine) is not None and structure._hint(real) is None
    for w in (mine, real):
        st = structure.of(w)
        assert st is structure.of(w)                       # made once per workload
        names = [op.name for op in w.ops]
        graph_preds = [sorted(names.index(p) for p in w.graph.predecessors(n)) for n in names]
        assert [sorted(p) for p in st.preds] == graph_preds
        assert st.counts.sum() == len(w.ops)
        assert [st.unique_ops[u] is w.ops[i] for i, u in enumerate(st.unique_of)].count(
            True) == len(st.unique_ops)                    # each group's first op stands for it
        sigs = [op_signature(op) for op in w.ops]
        for u in range(len(st.unique_ops)):                # a group is ops of one signature
            assert len({sigs[i] for i in np.nonzero(st.unique_of == u)[0]}) == 1
    # computed from signatures: exactly the signature groups; handed over: those groups or
    # finer (the copies of one template op; two template ops may have one signature)
    assert structure.of(real).unique_of.tolist() == _by_signature(real)
    sig, hint = _by_signature(mine), structure.of(mine).unique_of.tolist()
    assert len(set(zip(hint, sig))) == len(set(hint)) >= len(set(sig))
    # without dedupe every op is its own; with contexts the pair (signature, context) decides
    solo = structure.of(real, dedupe=False)
    assert solo.unique_of.tolist() == list(range(len(real.ops)))
    ctx = structure.Structure(real, True, [i % 2 for i in range(len(real.ops))])
    assert len(ctx.unique_ops) >= len(structure.of(real).unique_ops)
    assert ctx.unique_contexts == [i % 2 for i in
                                   [ctx.unique_of.tolist().index(u) for u in
                                    range(len(ctx.unique_ops))]]


def test_fast_and_population_paths_equal_on_either_structure(pair):
    mine, real = pair
    designs = [NPU("datacenter-bf16", rows=r, cols=c, ifmap_sram_kb=s)
               for r, c, s in ((16, 16, 512), (32, 64, 2048), (128, 128, 8192))]
    a, b = evaluate_many(mine, designs), evaluate_many(real, designs)
    # finer groups sum the same terms grouped otherwise (the floors' weighted sums): last bits
    np.testing.assert_allclose(a.latency_s, b.latency_s, rtol=1e-12)
    np.testing.assert_allclose(a.energy_j, b.energy_j, rtol=1e-12)
    arrays = DesignArrays(designs)
    pop = evaluate_designs(real, arrays)   # one structure: the two paths equal exactly
    assert np.array_equal(pop.latency_s, b.latency_s, equal_nan=True)
    assert np.array_equal(pop.energy_j, b.energy_j, equal_nan=True)
    pop = evaluate_designs(mine, arrays)   # (here 1 ulp apart, as on main before the move)
    np.testing.assert_allclose(pop.latency_s, a.latency_s, rtol=1e-12)
    np.testing.assert_allclose(pop.energy_j, a.energy_j, rtol=1e-12)
