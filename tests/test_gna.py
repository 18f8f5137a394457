"""Generalized neighborhood attention: tile counts exact against torch's create_block_mask,
the mask against an independent reading of NATTEN's definition, capture of the GNA op and of
flex_attention, the templates' costs, the zoo models and bad input."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

import workloads.gna as gna_mod
from accelerators.gpu import GPU
from accelerators.npu import NPU
from dse.errors import BadInput
from simulators.engine import simulate
from tests.cli_runner import run_cli
from workloads.build import build_workload
from workloads.capture import capture
from workloads.gna import GNAConfig, flex_mask_mod, tile_counts
from workloads.sparse_attention import dense_mask, from_layout, gna, to_layout


# ----------------------------------------------------------------------------- references
def reference_counts(cfg: GNAConfig, block_q: int, block_kv: int) -> tuple[int, int, int, int]:
    """(full, partial, most visited per query block, attended pairs) from torch's
    create_block_mask / create_mask on ``cfg``'s mask (one problem, times the groups)."""
    m = cfg.problem_tokens
    mask_mod = flex_mask_mod(cfg)
    bm = create_block_mask(mask_mod, None, None, m, m, device="cpu",
                           BLOCK_SIZE=(block_q, block_kv))
    pairs = int(create_mask(mask_mod, None, None, m, m, device="cpu").sum())
    g = cfg.groups
    visited = bm.kv_num_blocks + bm.full_kv_num_blocks
    return (int(bm.full_kv_num_blocks.sum()) * g, int(bm.kv_num_blocks.sum()) * g,
            int(visited.max()), pairs * g)


def natten_axis_keys(n: int, w: int, s: int, d: int, causal: bool, x: int) -> set[int]:
    """Keys one query coordinate ``x`` attends on one axis, written from NATTEN's description
    (arXiv 2504.16922 and NATTEN's docs): dilation groups, stride groups sharing the window of
    their leader (centre query, or last query when causal), windows centred on the leader and
    clamped so they keep ``w`` keys; causal windows end at the query."""
    g, c = x % d, x // d
    n_g = len(range(g, n, d))
    if causal:
        leader = min((c // s) * s + s - 1, n_g - 1)
        group = [k for k in range(n_g) if k <= c and leader - k < w]
    else:
        left, right = w // 2, w // 2 + (w % 2) - 1
        leader = min((c // s) * s + s // 2, n_g - 1)
        center = min(max(leader, left), n_g - 1 - right)
        group = [k for k in range(n_g) if center - left <= k <= center + right]
    return {g + d * k for k in group}


@st.composite
def configs(draw):
    """A GNA pattern on a small 1-D, 2-D or 3-D grid, row-major or tiled."""
    nd = draw(st.integers(1, 3))
    layout = draw(st.sampled_from(("row_major", "tiled")))
    cap = {1: 300, 2: 20, 3: 8}[nd]
    grid, window, stride, dilation, tile, q_tile = [], [], [], [], [], []
    for _ in range(nd):
        d = draw(st.integers(1, 3))
        if layout == "tiled":
            t, qt = draw(st.integers(1, 4)), draw(st.integers(1, 4))
            n = d * t * qt * draw(st.integers(1, max(1, cap // (d * t * qt))))
            tile.append(t)
            q_tile.append(qt)
        else:
            n = draw(st.integers(d, cap))
        w = draw(st.integers(1, n // d))
        grid.append(n), window.append(w), dilation.append(d)
        stride.append(draw(st.integers(1, w)))
    causal = [draw(st.booleans()) for _ in range(nd)]
    return GNAConfig.parse(grid, window, stride, dilation, causal, layout,
                           tile or None, q_tile or None)


# ----------------------------------------------------------------------------- geometry
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), block_q=st.sampled_from((1, 2, 3, 8, 16, 32)),
       block_kv=st.sampled_from((1, 2, 4, 5, 16, 32)))
def test_tile_counts_equal_create_block_mask(cfg, block_q, block_kv):
    c = tile_counts(cfg, block_q, block_kv)
    assert (c.full, c.partial, c.max_visited, c.attended_pairs) == reference_counts(
        cfg, block_q, block_kv)
    assert c.dense_pairs == cfg.tokens ** 2
    assert c.q_blocks == cfg.groups * -(-cfg.problem_tokens // block_q)


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_mask_is_natten_definition(cfg):
    """Row-major masks against the per-axis reading of NATTEN's definition, pair by pair; a
    tiled layout holds the same pairs as row-major (the permute only reorders tokens)."""
    row = GNAConfig.parse(cfg.grid, cfg.window, cfg.stride, cfg.dilation, cfg.causal)
    mask = dense_mask(row)
    coords = [list(x) for x in zip(*[[(i // math.prod(row.grid[a + 1:])) % n
                                      for a, n in enumerate(row.grid)]
                                     for i in range(row.tokens)])]
    for i in range(0, row.tokens, max(1, row.tokens // 17)):
        keys = [natten_axis_keys(n, w, s, d, c, coords[a][i]) for a, (n, w, s, d, c) in
                enumerate(zip(row.grid, row.window, row.stride, row.dilation, row.causal))]
        expected = [all(coords[a][j] in keys[a] for a in range(row.ndim))
                    for j in range(row.tokens)]
        assert mask[i].tolist() == expected
    assert int(mask.sum()) == cfg.attended_pairs() == row.attended_pairs()


def test_general_path_equals_product_path(monkeypatch):
    cfg = GNAConfig.parse("24x16", "7x5", "2x3", 1, "0x1", "tiled", "4x4", "4x8")
    fast = tile_counts(cfg, 32, 16)
    monkeypatch.setattr(gna_mod, "_product_grid", lambda blocks, block: None)
    tile_counts.cache_clear()
    assert tile_counts(cfg, 32, 16) == fast
    tile_counts.cache_clear()


def test_one_dimensional_neighbourhood_in_closed_form():
    """32K tokens, window 2048, 128 x 128 tiles: query blocks whose windows are clamped at the
    ends (8 per end) need 16 full tiles; every other one 15 full and 2 partial (the window
    edges fall inside a tile). Stride 256 and blocked attention align the windows to tiles."""
    na = tile_counts(GNAConfig.parse(32768, 2048), 128, 128)
    assert (na.q_blocks, na.full, na.partial, na.max_visited) == (256, 16 * 16 + 240 * 15,
                                                                   240 * 2, 17)
    assert na.attended_pairs == 32768 * 2048 and na.flop_bound_speedup == 16.0
    for stride in (256, 2048):
        c = tile_counts(GNAConfig.parse(32768, 2048, stride), 128, 128)
        assert (c.full, c.partial, c.block_bound_speedup) == (256 * 16, 0, 16.0)


def test_large_grids_fully_block_sparse_when_stride_and_tiles_align():
    flux = tile_counts(GNAConfig.parse("256x256", "80x80", "16x16", layout="tiled",
                                       tile="16x8"), 128, 128)
    assert flux.partial == 0 and flux.full == 512 * 50 and flux.block_bound_speedup == 10.24
    video = tile_counts(GNAConfig.parse("30x48x80", "18x24x24", "16x8x8", layout="tiled",
                                        tile="2x8x8"), 128, 128)
    assert video.partial == 0 and video.full == 900 * 81
    row_major = tile_counts(GNAConfig.parse("30x48x80", "18x24x24"), 128, 128)
    assert row_major.full == 0   # a 128-token run of an 80-wide row: never a whole window
    assert row_major.block_bound_speedup < 4 < video.block_bound_speedup


# ----------------------------------------------------------------------------- the op
def test_tiled_op_equals_row_major_attention():
    cfg = GNAConfig.parse("8x12", "5x3", "2x3", "1x2", "0x1", "tiled", "4x2", "2x6")
    q, k, v = (torch.randn(2, 3, cfg.tokens, 8, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    out = from_layout(gna(to_layout(q, cfg, True), to_layout(k, cfg), to_layout(v, cfg), cfg),
                      cfg)
    row = GNAConfig.parse(cfg.grid, cfg.window, cfg.stride, cfg.dilation, cfg.causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask(row))
    torch.testing.assert_close(out, ref)


def test_capture_gna_and_flex_agree_and_count_attended_pairs():
    cfg = GNAConfig.parse("16x24", "5x7", "2x3", "1x2", "0x1")
    q = torch.randn(2, 3, cfg.tokens, 16)

    class WithOp(torch.nn.Module):
        def forward(self, q, k, v):
            return gna(q, k, v, cfg)

    block = create_block_mask(flex_mask_mod(cfg), None, None, cfg.tokens, cfg.tokens,
                              device="cpu", BLOCK_SIZE=(32, 16))

    class WithFlex(torch.nn.Module):
        def forward(self, q, k, v):
            return flex_attention(q, k, v, block_mask=block)

    op = capture(WithOp(), (q, q, q)).ops[0]
    flex = capture(WithFlex(), (q, q, q)).ops[0]
    pairs = cfg.attended_pairs()
    for o in (op, flex):
        assert o.kind == "sparse_attention" and o.attrs["attended_pairs"] == pairs
        assert o.flops == 2 * (2 * 3) * pairs * (16 + 16)    # 2 per MAC, batch x heads maps
        assert o.attrs["dense_flops"] == 2 * (2 * 3) * cfg.tokens ** 2 * 32
    c = tile_counts(cfg, 32, 16)
    bm = flex.attrs["block_mask"]
    assert (bm["kv_blocks_full"], bm["kv_blocks_partial"], bm["max_visited"]) == (
        c.full, c.partial, c.max_visited)
    assert op.attrs["mask_ops"] >= 2 * 3  # compares per axis, and a select


def test_dense_flops_match_torch_flop_counter():
    """dense_flops is what torch's FlopCounterMode counts for SDPA of the same shape."""
    from torch.utils.flop_counter import FlopCounterMode
    w = build_workload("gna", arch={"grid": "12x10", "window": "5x4", "heads": 2,
                                    "head_dim": 8}, use_cache=False)
    op = w.ops[0]
    q = torch.zeros(1, 2, 120, 8, device="meta")
    with FlopCounterMode(display=False) as fc:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert op.attrs["dense_flops"] == fc.get_total_flops()


# ----------------------------------------------------------------------------- templates
def _gna_op(**arch):
    w = build_workload("gna", arch={"heads": 8, **arch})
    return w, next(o for o in w.ops if o.kind == "sparse_attention")


def test_gpu_self_attention_window_costs_like_dense_attention():
    """A window as large as the grid visits every tile: the sparse kernel model gives the
    dense kernel's time (same waves, same per-tile cost, nothing masked)."""
    gpu = GPU("h200")
    _, op = _gna_op(grid="4096", window="4096")
    dense = build_workload("sdpa", arch={"b": 1, "h": 8, "sq": 4096, "skv": 4096, "d": 128,
                                         "causal": False, "kv_heads": 8})
    assert gpu.cost(op).latency_s == pytest.approx(gpu.cost(dense.ops[0]).latency_s, rel=0.02)


def test_gpu_sparse_time_follows_visited_and_masked_tiles():
    gpu = GPU("h200")
    _, na = _gna_op(grid="32768", window="2048")
    _, strided = _gna_op(grid="32768", window="2048", stride="256")
    t_na, t_st = gpu.cost(na), gpu.cost(strided)
    assert t_st.latency_s < t_na.latency_s          # one tile fewer per block, nothing masked
    assert t_na.details["kv_blocks_partial"] == 480 and t_st.details["masked_tiles"] == 0
    whole = GPU("h200", attention_mask_policy="whole_problem").cost(na)
    assert whole.details["masked_tiles"] == 4336 and whole.latency_s > t_na.latency_s
    wide = GPU("h200", attention_block_q=256).cost(strided)
    assert wide.details["q_blocks"] == 128 and wide.details["block_bound_speedup"] == 16.0


def test_result_json_shows_tiles_per_attention_op():
    w, _ = _gna_op(grid="64x64", window="16x16", stride="8x8", layout="tiled", tile="8x16")
    d = simulate(w, GPU("h200")).to_dict()
    sparse = [o for o in d["ops"] if o["kind"] == "sparse_attention"]
    assert len(sparse) == 1 and len(d["ops"]) == 5        # + 3 permutes in, 1 out
    det = sparse[0]["details"]
    for key in ("q_blocks", "kv_blocks_full", "kv_blocks_partial", "flop_bound_speedup",
                "block_bound_speedup"):
        assert key in det
    assert det["flop_bound_speedup"] == 16.0
    assert all("details" not in o for o in d["ops"] if o["kind"] != "sparse_attention")
    json.dumps(d)


def test_npu_skips_whole_tiles_and_its_tile_shape_matters():
    _, op = _gna_op(grid="64x64", window="16x16", stride="16x16", layout="tiled", tile="16x8")
    dense = build_workload("sdpa", arch={"b": 1, "h": 8, "sq": 4096, "skv": 4096, "d": 128,
                                         "causal": False, "kv_heads": 8}).ops[0]
    aligned = NPU(rows=128, cols=128).cost(op)     # a 16x8 tile is one array block
    assert aligned.details["kv_blocks_partial"] == 0
    assert aligned.latency_s < NPU(rows=128, cols=128).cost(dense).latency_s / 5
    odd = NPU(rows=96, cols=96).cost(op)
    assert odd.details["kv_blocks_partial"] > 0 and odd.details["block_bound_speedup"] < (
        aligned.details["block_bound_speedup"])


def test_npu_vectorised_path_equals_scalar_costs():
    """The fast path's vectorised NPU hands sparse attention to the scalar cost, so many
    designs at once give each design's own latency."""
    from simulators.fast import evaluate_many
    w, _ = _gna_op(grid="32x32", window="8x8", layout="tiled", tile="8x8")
    designs = [NPU(rows=r, cols=c) for r in (32, 64, 128) for c in (32, 64)] * 3
    fast = evaluate_many(w, designs)
    scalar = evaluate_many(w, designs, vectorised=False)
    assert fast.latency_s.tolist() == scalar.latency_s.tolist()
    assert fast.energy_j.tolist() == scalar.energy_j.tolist()


# ----------------------------------------------------------------------------- zoo
def test_diffusion_models_switch_attention_and_keep_published_sizes():
    small = {"double_blocks": 1, "single_blocks": 1}
    dense = build_workload("flux-dit", arch=small)
    sparse = build_workload("flux-dit", arch={**small, "attention": "gna"})
    assert dense.params == sparse.params
    kinds = sparse.ops_by_kind()
    assert kinds["sparse_attention"] == 2 and "sparse_attention" not in dense.ops_by_kind()
    op = next(o for o in sparse.ops if o.kind == "sparse_attention")
    assert op.attrs["extra_kv"] == 512 and op.attrs["q_len"] == 65536
    with torch.device("meta"):
        from workloads.zoo import get_model
        for name, published in (("flux-dit", 12e9), ("hunyuan-dit", 13e9)):
            spec = get_model(name)
            n = sum(p.numel() for p in spec.build(spec.resolve_arch({})).parameters())
            assert abs(n / published - 1) < 0.02   # 11.90 B (-0.8 %), 12.82 B (-1.4 %)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("arch,field", [
    ({"grid": "64x64", "window": "80x80"}, "arch.window"),
    ({"grid": "64", "window": "16", "stride": "32"}, "arch.stride"),
    ({"grid": "64x60", "window": "8x8", "layout": "tiled", "tile": "8x16"}, "arch.tile"),
    ({"grid": "64x64", "window": "8x8x8"}, "arch.window"),
    ({"grid": "0x64"}, "arch.grid"),
    ({"grid": "64", "causal": "maybe"}, "arch.causal"),
    ({"grid": "64", "window": "16", "dilation": "8"}, "arch.window"),
])
def test_bad_patterns_are_one_line_errors(capsys, arch, field):
    args = [x for k, v in arch.items() for x in ("--arch", f"{k}={v}")]
    code, out, err = run_cli(capsys, "workload", "gna", *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {field}:"), err
    with pytest.raises(BadInput):
        build_workload("gna", arch=arch, use_cache=False)


def test_flex_capture_refuses_masks_it_cannot_evaluate():
    from dse.errors import CaptureError
    offsets = torch.arange(64)

    def mask(b, h, q, kv):
        return offsets[q] >= offsets[kv]

    block = create_block_mask(mask, None, None, 64, 64, device="cpu")

    class M(torch.nn.Module):
        def forward(self, q, k, v):
            return flex_attention(q, k, v, block_mask=block)

    q = torch.randn(1, 1, 64, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            w = capture(M(), (q, q, q))
        except CaptureError as exc:
            assert "dse::gna_attention" in str(exc)
        else:   # torch folded the tensor into the mask graph: then it must be exact
            assert w.ops[-1].attrs["attended_pairs"] == 64 * 65 // 2


# ----------------------------------------------------------------------------- benchmark, study
def test_flex_benchmark_dry_run_and_compare(tmp_path):
    """The GPU benchmark's script on tiny CPU cases: every case measured, the BlockMask's tiles
    equal ours, and the comparison costs every case."""
    from benchmarks import gna_flex_attention as bench
    out = tmp_path / "flex.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bench.main(["measure", "--dry-run", "--out", str(out)])
    data = json.loads(out.read_text())
    assert [c["name"] for c in data["cases"]] == [c[0] for c in bench.DRY_CASES]
    res = bench.compare(out)
    assert len(res["rows"]) == len(bench.DRY_CASES) and all(r["tiles_exact"]
                                                            for r in res["rows"])


def test_measured_flex_cases_against_the_model():
    """The real-GPU measurements shipped in tests/data (benchmarks/gna_flex_attention.py, on a
    lent H100): the GPU's BlockMask tile counts equal ours on every case, and the predicted
    speed-up over the dense flex kernel, with flex_attention's overheads fitted on the
    even-numbered cases, keeps the held-out error measured when they were fitted (7.6 %,
    docs/validation.md)."""
    from benchmarks import gna_flex_attention as bench
    from dse.reproduce.neupims import spearman
    paths = sorted((bench.ROOT / "tests" / "data").glob("gna_flex_*.json"))
    assert paths, "no gna_flex_*.json in tests/data"
    for path in paths:
        res = bench.compare(path)
        assert len(res["rows"]) >= 20 and all(r["tiles_exact"] for r in res["rows"])
        assert res["held_out_median_abs_error"] < 0.12
        assert sum(r["fitted"] for r in res["rows"]) == len(res["rows"]) // 2
        # the ordering holds: the predicted speed-up ranks the cases as measured
        assert spearman([r["measured"] for r in res["rows"]],
                        [r["predicted"] for r in res["rows"]]) > 0.8


def test_flex_overheads_file_names_its_fit():
    from accelerators.gpu_sparse_attention import FLEX_OVERHEADS_FILE, OVERHEAD_KEYS
    data = json.loads(FLEX_OVERHEADS_FILE.read_text())
    src = data["source"]
    assert set(data["overheads"]) == set(OVERHEAD_KEYS)
    assert all(v >= 0 for v in data["overheads"].values())
    assert not set(src["fit_cases"]) & set(src["held_out_cases"])
    assert data["median_abs_error"]["held_out"] < 0.12


def test_repatterned_gna_op_equals_a_capture():
    """workloads.sparse_attention.with_gna_pattern: another window and stride of a captured
    GNA op are the op a capture of that pattern gives (attrs and FLOPs)."""
    from workloads.sparse_attention import with_gna_pattern
    base = dict(grid="16x24x40", heads=2, head_dim=64, layout="tiled", tile="2x8x8",
                q_tile="2x8x8")
    a = build_workload("gna", arch={**base, "window": "8x12x12", "stride": "8x8x8"})
    b = build_workload("gna", arch={**base, "window": "16x20x20", "stride": "1x16x8"})
    r = with_gna_pattern(a, window="16x20x20", stride="1x16x8")
    assert [(o.flops, o.attrs) for o in r.ops] == [(o.flops, o.attrs) for o in b.ops]
    assert r.arch["window"] == "16x20x20"


@pytest.mark.slow
def test_gna_dit_study_runs_with_few_trials(tmp_path):
    from pathlib import Path

    from dse.study.driver import run_study
    from dse.study.loader import load_study
    study = load_study(Path(__file__).resolve().parent.parent / "studies" / "gna_dit.yaml")
    r = run_study(study, trials=3, out=tmp_path / "gna", show_progress=False,
                  write_report=False)
    assert r.states["COMPLETE"] == 3


def test_example_quality_function_is_the_prior_mass_kept():
    """dse.quality.gna_locality against a brute-force sum over every query-key pair."""
    import numpy as np

    from dse.quality.gna_locality import LOCALITY_FRACTION, attention_mass_retained
    arch = {"grid": "12x10", "window": "5x4", "stride": "2x3", "dilation": "2x1",
            "causal": "0x1"}
    cfg = GNAConfig.parse("12x10", "5x4", "2x3", "2x1", "0x1")
    idx = np.arange(cfg.tokens)
    r, c = idx // 10, idx % 10
    weight = np.exp(-abs(r[:, None] - r[None, :]) / (LOCALITY_FRACTION * 12)
                    - abs(c[:, None] - c[None, :]) / (LOCALITY_FRACTION * 10))
    reference = weight * (c[None, :] <= c[:, None])       # causal on the second axis
    kept = (weight * dense_mask(cfg).numpy()).sum(1) / reference.sum(1)
    assert attention_mass_retained(arch) == pytest.approx(kept.mean(), rel=1e-12)
    assert attention_mass_retained({**arch, "attention": "dense"}) == 1.0
    wide = attention_mass_retained({"grid": "64x64", "window": "32x32"})
    assert wide > attention_mass_retained({"grid": "64x64", "window": "16x16"})
    assert wide > attention_mass_retained({"grid": "64x64", "window": "32x32", "stride": "16"})


@pytest.mark.parametrize("template", ["pim", "wafer", "neural_graphics"])
def test_designs_without_a_sparse_kernel_run_the_dense_attention(template):
    """No block-sparse attention kernel on these templates: a GNA op costs what the dense
    attention it stands for costs there (never a free lunch from an unknown op kind)."""
    from accelerators.registry import make_accelerator
    from workloads.gna import dense_equivalent
    w, _ = _gna_op(grid="64x64", window="16x16")
    design = make_accelerator(template)
    r = simulate(w, design)
    dense = dense_equivalent(w)
    assert [o.kind for o in dense.ops] == ["attention"]
    assert r.latency_s == simulate(dense, design).latency_s
    assert dense.ops[0].flops == w.ops[0].attrs["dense_flops"]


# ----------------------------------------------------------------------------- reproduction
def test_reproduction_kernel_rows_and_orderings():
    """15 of 17 kernel rows within 35 %; the two misses are the 1-D neighbourhood rows
    (docs/validation.md, GNA); neighbourhood slower than strided / blocked everywhere."""
    from dse.reproduce import gna as rep
    rows = {r.metric: r for r in rep.kernel_rows()}
    misses = sorted(m for m, r in rows.items() if not r.within())
    assert misses == ["1d neighbourhood: B200 speed-up over dense",
                      "1d neighbourhood: H100 speed-up over dense"]
    assert all(rows[m].ratio > 1 for m in misses)   # we are optimistic there, not pessimistic
    for case, c in rep.CASES.items():
        assert rows[next(m for m in rows if m.startswith(case) and "FLOP-bound" in m)].within(
            0.01)
        variants = list(c["strides"])
        for device in rep.DEVICES:
            ours = [rows[f"{case} {v}: {device.upper()} speed-up over dense"].ours
                    for v in variants]
            paper = [rep.PAPER_SPEEDUP[(case, v)][device] for v in variants]
            assert ours[0] < min(ours[1:]) and paper[0] < min(paper[1:])


@pytest.mark.parametrize("name,latent,out", [("flux-vae-decoder", "4x6", (1, 3, 32, 48)),
                                              ("hunyuan-vae-decoder", "3x4x6", (1, 3, 9, 32, 48))])
def test_vae_decoder_flops_match_flop_counter(name, latent, out):
    """A reduced VAE decoder (published structure, narrow) run for real: x8 in space, x4 in
    time less the causal first frame; the captured conv / matmul / attention FLOPs equal
    torch's FlopCounterMode on the same module (on meta tensors, where SDPA is counted)."""
    from torch.utils.flop_counter import FlopCounterMode
    from workloads.zoo import get_model
    arch = {"latent": latent, "ch": 8, "groups": 4}
    spec = get_model(name)
    a = spec.resolve_arch(arch)
    torch.manual_seed(0)
    module = spec.build(a).eval()
    (z,), _ = spec.inputs(a, "forward", 1)
    with torch.no_grad():
        y = module(z)
    assert tuple(y.shape) == out and bool(torch.isfinite(y).all())
    with torch.device("meta"):
        (zm,), _ = spec.inputs(a, "forward", 1)
        with FlopCounterMode(display=False) as fc:
            module.to("meta")(zm)
    w = build_workload(name, arch=arch, use_cache=False)
    assert sum(op.flops for op in w.ops
               if op.kind in ("matmul", "conv", "attention")) == fc.get_total_flops()
    assert w.params == sum(p.numel() for p in module.parameters())


def test_generation_holds_text_encoders_and_vae_decode():
    """A FLUX generation on the B200 adds the VAE decode and both text encoders once, each
    no faster than its FLOPs at the datasheet peak; the schedule's speed-up counts them in
    both generations."""
    from dse.reproduce import gna as rep
    gpu = rep.design("b200")
    parts, flops = rep.once_per_generation("flux-dit", gpu)
    assert set(parts) == {"flux-vae-decoder", "t5-encoder", "clip-text"}
    vae = build_workload("flux-vae-decoder")
    assert vae.flops > 2.5e14     # 4096 x 4096 pixels: ~300 TFLOP, most of it convolution
    assert parts["flux-vae-decoder"] >= vae.flops / gpu.peaks("bf16").flops_per_s["sm"]
    assert flops > vae.flops and all(s > 0 for s in parts.values())
    assert rep.schedule_speedup(2.0, 1.0, 0, 10) == 2.0
    assert rep.schedule_speedup(2.0, 1.0, 0, 10, once=10.0) == pytest.approx(1.5)


#: End-to-end rows of `dse reproduce gna` outside +-35 %: every one where the paper's
#: HunyuanVideo / FLUX attention share (about 61 % / 52 % of a step's FLOPs, implied by its
#: FLOP-wise bounds) sets the figure; ours is 86 % / 78 %, as STA measured (docs/validation.md);
#: the text encoders and the VAE decode, added once per generation, move them by under 1 %.
GNA_E2E_KNOWN_MISSES = {
    "hunyuan-dit window 30x40x40 stride 30x40x40: end-to-end speed-up on B200, GNA in all 50 "
    "steps",
    "hunyuan-dit window 18x24x24 stride 18x24x24: end-to-end speed-up on B200, GNA in all 50 "
    "steps",
    "hunyuan-dit window 18x24x24 stride 16x8x8: end-to-end speed-up on B200, GNA in all 50 "
    "steps",
    "hunyuan-dit window 18x24x24: FLOP-wise end-to-end speed-up, all steps",
    "hunyuan-dit: GNA's share of the generation (attention of the GNA steps)",
    "flux-dit: GNA's share of the generation (attention of the GNA steps)",
}


@pytest.mark.slow
def test_reproduction_end_to_end_rows():
    """The paper's end-to-end configurations: misses only where its attention share sets the
    figure; the speed-ups order as the paper's (more sparsity, more stride: faster) and no
    scheduled speed-up beats its own FLOP-wise bound."""
    from dse.reproduce import gna as rep
    rows = rep.e2e_rows()
    by = {r.metric: r for r in rows}
    for r in rows:
        assert r.within() != (r.metric in GNA_E2E_KNOWN_MISSES), (r.metric, r.ours, r.ratio)
    flux = [r.ours for m, r in by.items() if m.startswith("flux-dit window 80x80 stride")]
    assert flux == sorted(flux) and max(flux) <= by[
        "flux-dit window 80x80, GNA in 19 of 28 steps: FLOP-wise end-to-end bound"].ours
    na = "hunyuan-dit window {} stride 1x1x1: end-to-end speed-up on B200, GNA in all 50 steps"
    assert by[na.format("30x40x40")].ours < by[na.format("18x24x24")].ours
    # a generation is its DiT steps plus the text encoders and the VAE decode, run once
    gpu, dense_w, _ = rep.dit_steps("hunyuan-dit", "b200")
    parts, _ = rep.once_per_generation("hunyuan-dit", gpu)
    assert parts["hunyuan-vae-decoder"] > 1.0     # 2.4 PFLOP on the B200
    assert by["hunyuan-dit: self-attention generation time on B200, 50 steps (s)"].ours == (
        pytest.approx(50 * rep.step_time(gpu, dense_w)[0] + sum(parts.values())))
