"""Architectures as arrays (issue 33): a re-shaped family's ops as functions of the size
variables (workloads/reshape_arrays.py) and (design, architecture) pairs scored as one array
program (simulators/population.evaluate_pairs), against building each architecture's workload
and the fast path (simulators.fast.evaluate_many)."""

import math
import random

import numpy as np
import pytest

from accelerators.npu import NPU
from simulators.fast import evaluate_many
from simulators.population import evaluate_pairs
from workloads import build, reshape, reshape_arrays
from workloads.footprint import memory_footprint, peak_live_activation_bytes

#: Float sums may run in another order than the fast path's (numpy sums a single design's
#: column pairwise, many designs row by row): equal to this relative tolerance.
REL = 1e-12

FAMILIES = [("gpt2", dict(phase="decode", batch=2, context=64), dict(n_head=4)),
            ("llama2-7b", dict(phase="decode", batch=1, context=64), dict(n_head=4, n_kv_head=2)),
            ("gpt2", dict(phase="prefill", batch=1, seq=32), dict(n_head=4))]


def _designs(n: int, seed: int) -> list[NPU]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        try:
            out.append(NPU(rows=rng.choice([8, 32, 128]), cols=rng.choice([8, 64, 256]),
                           dataflow=rng.choice(["ws", "os", "is"]),
                           arrays=rng.choice([1, 2, 4]), clock_hz=rng.uniform(3e8, 2e9),
                           ifmap_sram_kb=rng.choice([16, 256, 4096]),
                           filter_sram_kb=rng.choice([16, 256, 4096]),
                           ofmap_sram_kb=rng.choice([16, 256, 4096]),
                           dram_bandwidth_Bps=rng.uniform(1e10, 1e12),
                           vector_lanes=rng.choice([16, 256, 1024])))
        except Exception:
            continue
    return out


def _family(model, kw, archs):
    args = [build.resolve(model, kw["phase"], kw["batch"], kw.get("seq"), kw.get("context"),
                          "bf16", a) for a in archs]
    fams = [reshape._family(x) for x in args]
    assert len({f[2] for f in fams}) == 1
    rule, variables, _ = fams[0]
    template = reshape._template(args[0], fams[0], True)
    names = list(variables)
    arrays = reshape_arrays.family_arrays(template, "bf16", names, [f[1] for f in fams[:3]])
    vals = np.array([[f[1][n] for f in fams] for n in names], dtype=np.int64)
    depth = np.array([x["arch"][rule.depth] for x in args], dtype=np.int64)
    return template, arrays, vals, depth


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a)


@pytest.mark.parametrize("model,kw,base", FAMILIES)
def test_pairs_equal_the_fast_path_on_each_workload(model, kw, base):
    rng = random.Random(7)
    archs = [dict(base, n_layer=rng.randint(1, 5), d_model=32 * rng.randint(2, 8),
                  d_ff=rng.randint(64, 700)) for _ in range(16)]
    designs = _designs(16, 1)
    _, arrays, vals, depth = _family(model, kw, archs)
    assert arrays is not None
    res = evaluate_pairs(arrays, vals, depth, designs, kw["phase"], kw["batch"], 1)
    handled = 0
    for i, arch in enumerate(archs):
        w = build.build_workload(model, kw["phase"], kw["batch"], kw.get("seq"),
                                 kw.get("context"), "bf16", arch)
        ref = evaluate_many(w, [designs[i]])
        assert res.params[i] == w.params and res.flops[i] == w.flops
        if not res.handled[i]:
            assert ref.infeasible[0] is not None, (i, arch)   # left to the per-arch path
            continue
        handled += 1
        assert ref.infeasible[0] is None
        assert _rel(res.latency_s[i], ref.latency_s[0]) <= REL
        assert _rel(res.energy_j[i], ref.energy_j[0]) <= REL
    assert handled >= 4


def test_a_number_format_mac_unit_is_left_to_the_per_architecture_path():
    """A design whose MAC array is a number format (fp6_e2m3) cannot run a workload without
    number formats: the fast path refuses it, so the pairs must not score it (they did, with
    the bf16 bytes of its storage, below the DRAM floor: benchmarks/floors.py, issue 27)."""
    model, kw, base = FAMILIES[0]
    archs = [dict(base, n_layer=2, d_model=128, d_ff=512)] * 2
    designs = [NPU(rows=16, cols=32, dtype=dt, dram_bandwidth_Bps=1.28e10)
               for dt in ("fp6_e2m3", "bf16")]
    _, arrays, vals, depth = _family(model, kw, archs)
    res = evaluate_pairs(arrays, vals, depth, designs, kw["phase"], kw["batch"], 1)
    w = build.build_workload(model, kw["phase"], kw["batch"], kw.get("seq"), kw.get("context"),
                             "bf16", archs[0])
    ref = evaluate_many(w, designs)
    assert "number-format MAC unit" in ref.infeasible[0]
    assert list(res.handled) == [False, True]
    assert _rel(res.latency_s[1], ref.latency_s[1]) <= REL


@pytest.mark.parametrize("model,kw,base", FAMILIES[:2])
def test_footprint_at_any_depth(model, kw, base):
    """The live-activation peak of depth min(L, 3)'s graph is that of depth L's."""
    archs = [dict(base, n_layer=n, d_model=64, d_ff=200) for n in range(1, 8)]
    template, arrays, vals, depth = _family(model, kw, archs)
    numbers = arrays.op_numbers(vals)
    zero = np.zeros(len(archs), dtype=np.int64)
    for i, arch in enumerate(archs):
        w = build.build_workload(model, kw["phase"], kw["batch"], kw.get("seq"),
                                 kw.get("context"), "bf16", arch)
        d = min(arch["n_layer"], 3)
        peak = reshape_arrays.peak_activation_bytes(reshape_arrays.liveness_plan(template, d),
                                                    numbers, zero)
        assert peak[i] == peak_live_activation_bytes(w) == memory_footprint(w).activation_bytes


def test_a_family_whose_numbers_differ_is_refused(monkeypatch):
    model, kw, base = FAMILIES[0]
    arch = dict(base, n_layer=2, d_model=64, d_ff=100)
    template, arrays, _, _ = _family(model, kw, [arch])
    assert arrays is not None
    args = build.resolve(model, kw["phase"], kw["batch"], None, kw["context"], "bf16", arch)
    point = reshape._family(args)[1]
    reshape_arrays._CHECKED.clear()
    real = reshape_arrays.op_numbers

    def off_by_one(*args):
        out = real(*args)
        out["flops"] = out["flops"] + 1
        return out

    monkeypatch.setattr(reshape_arrays, "op_numbers", off_by_one)
    assert reshape_arrays.family_arrays(template, "bf16", list(point), [point]) is None
    reshape_arrays._CHECKED.clear()
