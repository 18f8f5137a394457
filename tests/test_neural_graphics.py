"""The ``neural_graphics`` template (NGPC), its hash-grid cost formulas, the frame workloads and
the NGPC reproduction."""

import math

import pytest

from accelerators import hashgrid_cost as hc
from accelerators import neural_graphics as ng
from accelerators.neural_graphics import NGPC, gpu_baseline
from dse.errors import BadInput, InfeasibleDesign
from simulators.engine import simulate
from workloads import ir
from workloads import neural_frames as nf
from workloads.build import build_workload

POINTS = 65536


@pytest.fixture(scope="module")
def nsdf18():
    """NSDF with 2**18-row tables: every level fits a 1 MiB grid SRAM at fp16."""
    return build_workload("nsdf", batch=POINTS, dtype="fp16", arch={"log2_table_size": 18})


@pytest.fixture(scope="module")
def nsdf19():
    """NSDF with instant-NGP's 2**19-row tables: the fine levels need 2 MiB."""
    return build_workload("nsdf", batch=POINTS, dtype="fp16")


def _hash_op(w):
    return next(op for op in w.ops if op.kind == ir.HASHGRID)


def _enc(w):
    op = _hash_op(w)
    return hc.encoding_of(op.attrs, op.input_shapes[1], 2)


# ------------------------------------------------------------------- hash-grid formulas
def test_encoding_levels_follow_instant_ngp(nsdf19):
    enc = _enc(nsdf19)
    assert enc.dims == 3 and enc.corners == 8 and len(enc.levels) == 16
    # coarse levels whose vertex grid fits 2**19 rows are direct, the rest hashed at 2**19 rows
    assert enc.levels[0].direct and enc.levels[0].rows == 17 ** 3
    assert not enc.levels[-1].direct and enc.levels[-1].rows == 2 ** 19
    assert all(lv.row_bytes == 4 for lv in enc.levels)   # F = 2 fp16 features


def test_engine_does_8_lookups_per_point_and_level(nsdf18):
    enc = _enc(nsdf18)
    cfg = hc.EngineConfig(units=16, sram_bytes=1 << 20, lookups_per_cycle=8)
    e = hc.engine_cost(enc, 1000, cfg)
    assert e.lookups == 1000 * 16 * 8
    # one unit per level, 8 look-ups a cycle: one point per cycle (+ the pipeline fill)
    assert e.cycles == pytest.approx(1000 + hc.ENGINE_PIPELINE_CYCLES)
    assert e.dram_bytes == 0 and e.spilled_levels == 0
    # half the units: each runs two levels back to back
    e8 = hc.engine_cost(enc, 1000, hc.EngineConfig(units=8, sram_bytes=2 << 20,
                                                   lookups_per_cycle=8))
    assert e8.cycles == pytest.approx(2000 + hc.ENGINE_PIPELINE_CYCLES)


def test_level_over_sram_spills_to_dram_and_costs_more(nsdf19):
    enc = _enc(nsdf19)
    fits = hc.engine_cost(enc, 1e5, hc.EngineConfig(16, 2 << 20, 8))
    spills = hc.engine_cost(enc, 1e5, hc.EngineConfig(16, 1 << 20, 8))
    worse = hc.engine_cost(enc, 1e5, hc.EngineConfig(16, 256 << 10, 8))
    assert fits.dram_bytes == 0
    assert 0 < spills.dram_bytes < worse.dram_bytes
    # 11 hashed levels of 2 MiB on 1 MiB: half their look-ups miss; 4.5 sectors per point-level
    assert spills.spilled_levels == 11
    assert spills.dram_bytes == pytest.approx(1e5 * 11 * 0.5 * 4.5 * hc.SECTOR_BYTES)


def test_spill_shows_in_the_template_cost(nsdf19):
    op = _hash_op(nsdf19)
    big, small = NGPC("ngpc-8", grid_sram_kb=2048), NGPC("ngpc-8", grid_sram_kb=1024)
    a, b = big.cost(op), small.cost(op)
    assert b.traffic["dram"] > a.traffic.get("dram", 0) > 0   # positions are read either way
    assert b.latency_s > a.latency_s
    assert b.bound == "memory"


def test_2d_encoding_has_4_corners():
    attrs = {"dims": 2, "levels": 4, "features": 2, "base_resolution": 16,
             "per_level_scale": 2.0, "log2_table_size": 12}
    enc = hc.encoding_of(attrs, (4, 4096, 2), 2)
    e = hc.engine_cost(enc, 100, hc.EngineConfig(4, 1 << 20, 8))
    assert e.lookups == 100 * 4 * 4
    assert hc.sectors_per_point_level(2, 4) == pytest.approx(2 * 9 / 8)


def test_gpu_encoding_l2_vs_dram(nsdf18):
    enc = _enc(nsdf18)
    gpu = hc.GPU_CACHES["rtx3090"]
    c = hc.gpu_encode_cost(enc, 1e6, gpu)
    assert c.dram_bytes == 0 and c.l2_bytes > 0          # 1 MiB levels stay in the 6 MiB L2
    huge = hc.encoding_of({**_hash_op(nsdf18).attrs, "log2_table_size": 24}, (16, 2 ** 24, 2), 2)
    d = hc.gpu_encode_cost(huge, 1e6, gpu)
    assert d.dram_bytes > 0 and d.time_s > c.time_s


def test_mlp_array_cycles():
    # a 64 x 64 layer on a 64 x 64 output-stationary array: k cycles per 64 points
    assert hc.mlp_layer_cycles(6400, 64, 64, 64, 64) == 100 * 64 + 128
    assert hc.mlp_layer_cycles(6400, 32, 64, 64, 64) == 100 * 32 + 128
    assert hc.mlp_layer_cycles(0, 64, 64, 64, 64) == 0


# ----------------------------------------------------------------------- frames, overlap
def test_frame_counts():
    spec = nf.frame_spec("nerf", "4k", spp=2, queries_per_pixel=10)
    assert (spec.width, spec.height, spec.rays) == (3840, 2160, 3840 * 2160 * 2)
    assert spec.queries == pytest.approx(spec.rays * 10)
    assert spec.resolution == "4k"


def test_pipeline_overlaps_gpu_and_cluster(nsdf18):
    """Batch b's GPU kernels overlap batch b+1's encoding and MLP: the frame takes less than
    the sum of its parts, and more than its busiest unit."""
    d = NGPC("ngpc-16")
    spec = nf.frame_spec("nsdf", "1080p", sim_batches=16)
    r = simulate(nf.attach_frame(nsdf18, spec), d)
    busy = {}
    for o in r.ops:
        busy[o.unit] = busy.get(o.unit, 0.0) + o.duration_s
    assert set(busy) == {"gpu", "encoder", "mlp"}
    assert r.latency_s < 0.8 * sum(busy.values())
    assert r.latency_s >= max(busy.values()) * (1 - 1e-9)
    # one batch: nothing to overlap with, so the stages run one after the other
    one = simulate(nf.attach_frame(nsdf18, nf.frame_spec("nsdf", "1080p", sim_batches=1)), d)
    assert one.latency_s > r.latency_s
    assert r.throughput == pytest.approx(1 / r.latency_s)  # a frame: throughput is FPS


def test_pipeline_preserves_work(nsdf18):
    spec = nf.frame_spec("nsdf", "720p", sim_batches=4)
    p = nf.pipeline(nsdf18, spec, fused=True)
    field_flops = sum(op.flops for op in p.ops if op.attrs.get("device") != "gpu")
    assert field_flops == pytest.approx(nsdf18.flops * spec.queries / POINTS, rel=1e-4)
    gpu_ops = [op for op in p.ops if op.attrs.get("device") == "gpu"]
    assert len(gpu_ops) == 2 * 4                                   # fused pre + post per batch
    assert sum(op.attrs["queries"] for op in gpu_ops) == pytest.approx(2 * spec.queries)


def test_fused_kernels_are_faster_than_unfused(nsdf18):
    frame = nf.attach_frame(nsdf18, nf.frame_spec("nsdf", "1080p"))

    def gpu_time(design):
        planned = design.plan(frame)
        return sum(c.latency_s for c in design.costs(planned) if c.unit == "gpu")

    fused, unfused = NGPC("ngpc-64"), NGPC("ngpc-64", fuse_gpu_kernels=False)
    # fusion divides the kernels' time by fusion_speedup, down to the fused kernels' own
    # compulsory traffic over the bandwidth
    assert 5 < gpu_time(unfused) / gpu_time(fused) <= ng.FUSION_SPEEDUP * (1 + 1e-9)
    planned = fused.plan(frame)
    for op, c in zip(planned.ops, fused.costs(planned)):
        if op.attrs.get("fused_from"):
            parts = sum(unfused.cost(p).latency_s for p in op.attrs["fused_from"])
            floor = op.total_bytes / fused.dram_bandwidth_Bps
            assert c.latency_s == pytest.approx(max(parts / ng.FUSION_SPEEDUP, floor))
    assert simulate(frame, unfused).latency_s > simulate(frame, fused).latency_s


def test_more_nfps_is_faster_until_the_gpu_dominates(nsdf18):
    spec = nf.frame_spec("nsdf", "1080p")
    lat = {n: simulate(nf.attach_frame(nsdf18, spec), NGPC(f"ngpc-{n}")).latency_s
           for n in (8, 16, 64)}
    assert lat[8] > lat[16] > lat[64]
    base = gpu_baseline(nsdf18, spec)
    # the limit: the fused GPU kernels alone
    assert base.total_s / lat[64] <= base.total_s / (base.remaining_s / ng.FUSION_SPEEDUP) * 1.01


def test_plain_zoo_workload_runs_as_one_frame(nsdf18):
    r = simulate(nsdf18, NGPC("ngpc-8"))
    assert r.latency_s > 0 and r.throughput_unit == "samples/s"
    assert r.throughput == pytest.approx(POINTS / r.latency_s)


def test_deterministic(nsdf18):
    spec = nf.frame_spec("nsdf", "720p")
    a = simulate(nf.attach_frame(nsdf18, spec), NGPC("ngpc-32"))
    b = simulate(nf.attach_frame(nsdf18, spec), NGPC("ngpc-32"))
    assert a.to_dict() == b.to_dict()


# --------------------------------------------------------------------- GPU baseline, area
def test_gpu_baseline_parts(nsdf18):
    b = gpu_baseline(nsdf18, nf.frame_spec("nsdf", "4k"))
    assert b.encoding_s > 0 and b.mlp_s > 0 and b.remaining_s > 0
    assert 0 < b.encoding_mlp_share < 1
    assert b.fps == pytest.approx(1 / b.total_s)


def test_area_scales_with_nfps_and_sram_dominates():
    a8, a64 = NGPC("ngpc-8").cluster_area_mm2(), NGPC("ngpc-64").cluster_area_mm2()
    assert a64 == pytest.approx(8 * a8)
    parts = NGPC("ngpc-64").nfp_area_breakdown_mm2()
    assert parts["grid_sram"] > 0.8 * sum(parts.values())
    assert NGPC("ngpc-64", node_nm=45).cluster_area_mm2() > a64
    # the design is the GPU die with the cluster on it
    assert NGPC("ngpc-8").area_mm2() > NGPC("ngpc-8").gpu.area_mm2() + a8


@pytest.mark.xfail(strict=True, reason="our 7 nm SRAM (bit cell over array efficiency, "
                   "0.75 mm^2/MiB) makes NGPC-64's 1 GiB of grid SRAM alone larger than the 3090 "
                   "die; the paper's 36% implies <= 0.19 mm^2/MiB, below the N7 bit cell "
                   "(docs/validation.md (ngpc section))")
def test_ngpc64_area_is_about_36pct_of_rtx3090():
    from dse.reproduce.ngpc import GA102_DIE_MM2
    d = NGPC("ngpc-64")
    assert d.cluster_area_mm2() / GA102_DIE_MM2 == pytest.approx(0.36, rel=0.35)


def test_cluster_area_is_above_its_sram_bitcell_floor():
    """NGPC-64 holds 64 x 16 x 1 MiB of grid SRAM: its bit cells alone (N7 0.027 um^2) are
    232 mm^2, more than the paper's whole cluster (36.18 % of the 628.4 mm^2 GA102 = 227 mm^2),
    so that row cannot be met without a sub-bit-cell SRAM; ours stays above the floor."""
    from accelerators import technology as tech
    from dse.reproduce.ngpc import GA102_DIE_MM2, PAPER_AREA_FRACTION
    d = NGPC("ngpc-64")
    sram_bits = 8 * d.hw.nfps * d.hw.encoding_units * d.hw.grid_sram_kb * 1024
    floor_mm2 = sram_bits * tech.SRAM_BITCELL_UM2[d.hw.node_nm] * 1e-6
    assert d.cluster_area_mm2() > floor_mm2
    assert PAPER_AREA_FRACTION * GA102_DIE_MM2 < floor_mm2


def test_cluster_design_power_is_a_configuration_figure():
    """Fig. 15's power is per configuration (NGPC-8 +2.75 %, NGPC-64 +22.06 % of the 3090's:
    linear in N): the cluster with every engine busy, above its average over a frame, and the
    cluster's share of the design's peak power."""
    p8, p64 = NGPC("ngpc-8").cluster_design_power_w(), NGPC("ngpc-64").cluster_design_power_w()
    assert p64 == pytest.approx(8 * p8)
    d = NGPC("ngpc-64")
    assert d.floorplan().peak_dynamic_w == pytest.approx(
        d.gpu.floorplan().peak_dynamic_w + d.cluster_peak_dynamic_w())
    from dse.reproduce import ngpc
    r = ngpc.frame_rate("nsdf", "hash", "ngpc-64", (640, 360), arch={"log2_table_size": 18})
    assert 0 < ngpc.cluster_power_w(r) < p64


@pytest.mark.parametrize("app", ["nerf", "nvr"])
def test_cluster_reads_the_input_record_and_writes_the_outputs(app):
    """The cluster reads the network-input record the GPU's pre kernel wrote (NeRF: fp32
    position + direction, 24 of NerfCoordinate's 28 B; the post kernel reads dt) and writes
    the network outputs the GPU's post kernel reads: both on the DRAM channel."""
    from dse.reproduce import ngpc
    d = NGPC("ngpc-64")
    spec = nf.frame_spec(app, (640, 360))
    render = nf.app_render(app)
    planned = d.plan(nf.attach_frame(ngpc.field(app, "hash", {"log2_table_size": 18}), spec))
    cluster = post_read = 0.0
    for op in planned.ops:
        c = d.cost(op)
        if c.unit == "gpu":
            if op.attrs.get("stage") == "post":
                post_read += op.activation_bytes_read
        else:
            cluster += c.traffic.get("dram", 0.0)
    record = render.input_bytes - render.fused_post_query_read
    outputs = post_read - spec.queries * render.fused_post_query_read
    assert outputs > 0
    assert cluster >= spec.queries * record + outputs * (1 - 1e-6)


# ----------------------------------------------------------------------------- bad input
def test_zero_processors_is_bad_input():
    with pytest.raises(BadInput, match="nfps"):
        NGPC(nfps=0)


def test_grid_sram_too_small_for_a_level_is_infeasible(nsdf18):
    # 8 look-ups a cycle x 8 pipeline stages x 32-B sectors = 2 KiB in flight
    d = NGPC("ngpc-8", grid_sram_kb=1)
    assert "working set" in d.check(nsdf18)
    with pytest.raises(InfeasibleDesign, match="grid_sram_kb"):
        simulate(nsdf18, d)
    assert NGPC("ngpc-8", grid_sram_kb=2).check(nsdf18) is None   # runs, spilling


@pytest.mark.parametrize("res", [(0, 1080), (1920, 0), "0x1080", "huge", (-1, 5)])
def test_zero_resolution_is_bad_input(res):
    with pytest.raises(BadInput, match="resolution"):
        nf.frame_spec("nerf", res)


def test_other_bad_frame_inputs(nsdf18):
    with pytest.raises(BadInput, match="spp"):
        nf.frame_spec("nerf", "4k", spp=0)
    with pytest.raises(BadInput, match="app"):
        nf.frame_spec("gpt2", "4k")
    with pytest.raises(BadInput, match="app"):
        nf.attach_frame(nsdf18, nf.frame_spec("nerf", "4k"))
    with pytest.raises(BadInput, match="gpu"):
        NGPC(gpu="h100")


def test_frame_rate_api_and_targets():
    from dse.reproduce import ngpc
    arch = {"log2_table_size": 18}
    rates = ngpc.frame_rates("nsdf", "hash", "ngpc-64", arch=arch)
    assert list(rates) == ["1080p", "4k", "8k"]
    fps = [r.fps for r in rates.values()]
    assert fps[0] > fps[1] > fps[2] > 0                       # more pixels, fewer frames
    assert all(r.speedup > 1 for r in rates.values())
    ok, got = ngpc.meets_target("nsdf", "1080p", 60.0, design_spec="ngpc-64", arch=arch)
    assert ok and got == pytest.approx(fps[0])
    assert ngpc.meets_target("nsdf", "8k", 1e6, arch=arch)[0] is False
    with pytest.raises(BadInput, match="target_fps"):
        ngpc.meets_target("nsdf", "4k", 0.0)


# --------------------------------------------------------------------------- reproduction
@pytest.mark.slow
def test_reproduction_shape_and_tolerance():
    from dse.reproduce import ngpc
    from dse.reproduce.table import Row
    rows = ngpc.rows()
    assert rows and all(isinstance(r, Row) and math.isfinite(r.ours) for r in rows)
    by = {r.metric: r for r in rows}
    speedups = [r for r in rows if "speed-up" in r.metric]
    assert len(speedups) == 4
    assert all(r.within() for r in speedups[:3])      # NGPC-64's is 0.59 (docs/validation.md)
    ours = [r.ours for r in speedups]
    assert ours == sorted(ours)                                   # more NFPs, more speed-up
    assert ours[3] / ours[2] < ours[1] / ours[0]                  # saturating
    shares = [r for r in rows if "share" in r.metric]
    assert [r.within() for r in shares] == [True] * 3
    assert shares[0].ours > shares[1].ours > shares[2].ours       # the paper's order
    assert by["NGPC-64 nerf frame rate at 4K, FPS"].within()
    # the two fitted constants still fit (a changed gpu template needs `--calibrate`)
    assert shares[0].ratio == pytest.approx(1.0, abs=0.01)
    assert by["GPU gap to 4K at 60 FPS, slowest app (x)"].ratio == pytest.approx(1.0, abs=0.01)
    assert all(r.to_dict()["metric"] == r.metric for r in rows)
    # the fitted rows are flagged and not counted as predictions
    assert {r.metric for r in rows if r.fitted} == {
        "GPU share of time in encoding + MLP, hash (%)", "GPU gap to 4K at 60 FPS, slowest app (x)"}


def test_kernel_times_and_frame_traffic():
    """Kernel-level: the cluster's encoding and MLP engines against the GPU's own kernels, and
    the frame's DRAM traffic by side (the GPU's kernels dominate it)."""
    from dse.reproduce import ngpc
    r = ngpc.frame_rate("gia", "hash", "ngpc-8", (640, 360), arch={"log2_table_size": 18})
    k = ngpc.kernel_times(r)
    assert k["encoding_speedup"] == pytest.approx(k["encoding_gpu_s"] / k["encoding_ngpc_s"])
    assert k["encoding_speedup"] > 1 and k["mlp_speedup"] > 1
    t = ngpc.frame_traffic(r)
    assert t["gpu"] > 0 and t["cluster"] > 0
    assert t["gpu_share"] == pytest.approx(t["gpu"] / (t["gpu"] + t["cluster"]))


def test_random_dram_reads_are_activation_limited():
    """A random 32-B read opens a row: one access per tRRD_S / tFAW/4 / tRC-per-bank interval
    (GDDR6: 32 B per 6 ns), so hashed levels spilling to DRAM cost more than dense-indexed
    levels of the same size, on the GPU and in the cluster."""
    from accelerators.dram_timing import GDDR6, random_access_Bps
    assert random_access_Bps(GDDR6, 32, 16) == pytest.approx(32 / 6e-9)
    assert random_access_Bps(GDDR6, 32, 1) == pytest.approx(32 / 52e-9)   # one bank: tRC
    gpu = hc.GPU_CACHES["rtx3090"]
    assert gpu.dram_random_Bps == pytest.approx(24 * 32 / 6e-9)
    assert 0.1 < gpu.dram_random_efficiency < hc.DRAM_COHERENT_EFFICIENCY
    level = hc.GridLevel(index=0, resolution=4096, rows=1 << 24, direct=True, row_bytes=4)
    dense = hc.Encoding(dims=2, features=2, bytes_per_feature=2, levels=(level,))
    hashed = hc.Encoding(dims=2, features=2, bytes_per_feature=2,
                         levels=(hc.GridLevel(index=0, resolution=8192, rows=1 << 24, row_bytes=4,
                                              direct=False),))
    d, h = hc.gpu_encode_cost(dense, 1e7, gpu), hc.gpu_encode_cost(hashed, 1e7, gpu)
    assert h.dram_bytes == pytest.approx(d.dram_bytes) and h.time_s > 3 * d.time_s
    cfg = hc.EngineConfig(units=1, sram_bytes=1 << 20, lookups_per_cycle=8)
    assert hc.engine_cost(hashed, 1e5, cfg).dram_hashed_bytes > 0
    assert hc.engine_cost(dense, 1e5, cfg).dram_hashed_bytes == 0
