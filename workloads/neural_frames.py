"""A neural-graphics frame: resolution x samples per pixel -> rays -> network queries, split
into ray batches; and the GPU-side "remaining kernels" of each batch as explicit IR ops.

A frame of ``width x height`` pixels at ``spp`` samples per pixel casts ``rays = pixels x spp``
rays; each ray makes ``queries_per_pixel`` network queries (NeRF: samples along the ray; NSDF:
sphere-tracing steps plus finite-difference normals; NVR: delta-tracking steps; GIA: one).
Around the network (the zoo model: grid encoding + MLP) the renderer runs GPU kernels that
generate rays and samples ("pre") and composite and present them ("post"). Their bytes and
FLOPs are derived here from the record layouts of instant-NGP's renderers [R NVlabs/instant-ngp
include/neural-graphics-primitives/nerf.h, src/testbed_{nerf,sdf,volume,image}.cu] and counted
per ray, per query and per ray-iteration (one compaction round).

This module knows no hardware: it builds ops; templates cost them. A template's ``plan`` turns
a frame into a pipeline of ray batches with :func:`pipeline`.

Simulated batches: a real renderer runs hundreds of ray batches per frame; the pipeline keeps
``sim_batches`` of them (16 by default), each standing for ``1 / sim_batches`` of the frame's
rays and queries. Every op here is linear in its points, so the work is exact; what changes is
the pipeline's fill and drain, one batch's worth of the non-bottleneck stages, at most
``1 / sim_batches`` of the frame time (under 7% at 16), and per-kernel launch overheads, paid
once per simulated batch instead of once per real batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import networkx as nx

from dse.errors import BadInput
from workloads import ir
from workloads.ir import Op, Workload

#: Named frame sizes, pixels (width, height) [D: ITU-R BT.709 720p and 1080p, VESA QHD 1440p,
#: ITU-R BT.2020 UHD-1 "4K" 3840 x 2160 and UHD-2 "8K" 7680 x 4320].
RESOLUTIONS = {"720p": (1280, 720), "1080p": (1920, 1080), "1440p": (2560, 1440),
               "4k": (3840, 2160), "8k": (7680, 4320)}

#: Key under which a frame's :class:`FrameSpec` rides in ``workload.graph.graph``.
FRAME_KEY = "neural_frame"

#: Default number of simulated ray batches per frame (see the module docstring).
DEFAULT_SIM_BATCHES = 16

#: Bytes of one displayed pixel, RGBA8 (B) [R instant-NGP render_buffer.cu: the frame buffer
#: is tonemapped to 8-bit RGBA for display].
DISPLAY_PIXEL_BYTES = 4
#: Bytes of one accumulated pixel, float4 RGBA (B) [R instant-NGP CudaRenderBuffer frame_buffer
#: Array4f].
ACCUM_PIXEL_BYTES = 16


@dataclass(frozen=True)
class KernelSpec:
    """One GPU kernel of a renderer, by its traffic and arithmetic per unit of work.

    Bytes (B) and FLOPs are given per ray (once per frame), per query (once per network query)
    and per ray-iteration (once per compaction round a live ray goes through). ``stage``
    ``"pre"`` runs before the network on a batch, ``"post"`` after it."""

    name: str
    stage: str
    kind: str = ir.ELEMENTWISE
    ray_read: int = 0
    ray_write: int = 0
    query_read: int = 0
    query_write: int = 0
    iter_read: int = 0
    iter_write: int = 0
    ray_flops: int = 0
    query_flops: int = 0
    iter_flops: int = 0

    def op(self, rays: float, queries: float, iterations: float, dtype: str,
           name: str) -> Op:
        """This kernel as an :class:`Op` for ``rays`` rays making ``queries`` queries over
        ``iterations`` compaction rounds per ray."""
        ray_iters = rays * iterations
        read = self.ray_read * rays + self.query_read * queries + self.iter_read * ray_iters
        write = self.ray_write * rays + self.query_write * queries + self.iter_write * ray_iters
        flops = self.ray_flops * rays + self.query_flops * queries + self.iter_flops * ray_iters
        elements = max(int(round(queries if self.query_read or self.query_write else rays)), 1)
        return Op(name=name, kind=self.kind, target=f"gpu::{self.name}",
                  input_shapes=((elements,),), output_shapes=((elements,),), dtype=dtype,
                  bytes_per_element=ir.DTYPE_BYTES[dtype], flops=int(round(flops)),
                  activation_bytes_read=int(round(read)),
                  activation_bytes_written=int(round(write)),
                  attrs={"elements": elements, "device": "gpu", "stage": self.stage,
                         "kernel": self.name, "rays": rays, "queries": queries})


@dataclass(frozen=True)
class AppRender:
    """How one app renders: its queries per pixel, compaction rhythm, the network's input and
    output records on the GPU, and its remaining kernels (unfused, as instant-NGP runs them).

    Fused, the same work is one "pre" kernel (writes the network inputs) and one "post" kernel
    (reads the network outputs at their real width plus ``fused_post_query_read`` more bytes
    per query, writes the displayed pixels), as in the paper's Vulkan implementation [P NGPC:
    fused pre- and post-processing kernels]."""

    app: str
    queries_per_pixel: float
    steps_per_iteration: float
    input_bytes: int
    output_bytes: int
    kernels: tuple[KernelSpec, ...]
    fused_post_query_read: int
    description: str = ""

    def iterations(self, queries_per_ray: float | None = None) -> float:
        """Compaction rounds per ray: ceil(queries per ray / steps between compactions), >= 1
        (``queries_per_ray`` defaults to the app's queries per pixel)."""
        q = self.queries_per_pixel if queries_per_ray is None else queries_per_ray
        return max(1.0, math.ceil(q / self.steps_per_iteration - 1e-9))


# Record sizes of instant-NGP's renderers (B) [R NVlabs/instant-ngp]:
#: NerfPayload: origin 12 + dir 12 + t 4 + max_weight 4 + idx 4 + n_steps 2 + alive 1 -> 40.
NERF_PAYLOAD = 40
#: NerfCoordinate (the network input of a NeRF sample): pos 12 + dt 4 + dir 12.
NERF_COORD = 28
#: Network output as the renderers read it: tiny-cuda-nn pads the output to 16 fp16 values
#: [R tiny-cuda-nn FullyFusedMLP padded_output_width = 16] -> 32 B. The volume renderer reads
#: four fp32 values (radiance_and_density, Array4f) -> 16 B [R testbed_volume.cu].
PADDED_OUTPUT = 32
VOLUME_OUTPUT = 16
#: SdfPayload: dir 12 + idx 4 + n_steps 4 + alive 4 [R testbed_sdf.cu SdfPayload]; a ray also
#: keeps its position (12) and distance (4) in RaysSdfSoa.
SDF_RAY = 24 + 12 + 4
#: VolPayload: dir 12 + col 16 + pixidx 4 [R testbed_volume.cu]; plus the position 12.
VOL_RAY = 32 + 12
#: A 3-D position, fp32 (the network input of NSDF and NVR).
POS3 = 12
#: A 2-D pixel coordinate, fp32 (GIA's network input).
POS2 = 8

#: FLOPs per unit of work [E, counted from the kernels' arithmetic]:
#: a camera ray (3x4 camera matrix, normalise, slab test against the AABB): ~60;
#: a NeRF marching step (advance t, cone step size, grid cell, Morton index): ~40;
#: a NeRF compositing step (alpha = 1 - exp(-sigma dt), transmittance, 3 colour FMAs): ~20;
#: a sphere-tracing advance (pos += d * dist, bounds, convergence test): ~20;
#: a delta-tracking step (RNG, -log(1 - u) free flight, bit-grid test, alpha blend): ~60;
#: tonemapping a pixel (exposure, sRGB curve for 3 channels, pack): ~20.
RAYGEN_FLOPS = 60
NERF_MARCH_FLOPS = 40
NERF_COMPOSITE_FLOPS = 20
SDF_ADVANCE_FLOPS = 20
VOLUME_STEP_FLOPS = 60
TONEMAP_FLOPS = 20
#: Shading an SDF hit (central-difference normal from 6 distances, Lambert + ambient): ~60.
SDF_SHADE_FLOPS = 60

_PRESENT = KernelSpec("present", "post", ray_read=ACCUM_PIXEL_BYTES,
                      ray_write=DISPLAY_PIXEL_BYTES, ray_flops=TONEMAP_FLOPS)

#: Queries per pixel of NeRF: the mean number of network samples along a camera ray after
#: occupancy-grid skipping and early termination. Calibrated [P-fit]: the value at which the
#: RTX 3090 baseline of this model renders NeRF at 4K at 60 / 55.50 = 1.081 FPS, the paper's
#: "gap of 55.50x" to 4K at 60 FPS (its slowest app); `python -m dse.reproduce.ngpc
#: --calibrate` recomputes it. The testbed caps a ray at NERF_STEPS() = 1024 [R].
NERF_QUERIES_PER_PIXEL = 40.01   # the gap is a step function of it: 54.9x at 40, 55.7x above
#: Queries per pixel of NSDF [E]: sphere tracing converges in ~10 steps on a hit pixel and
#: leaves the bounding box in a few on a miss (~6 on average over a frame), plus 6
#: finite-difference normal queries per hit pixel [R testbed_sdf.cu
#: FiniteDifferenceNormalsApproximator] on ~half the pixels -> ~9.
NSDF_QUERIES_PER_PIXEL = 9.0
#: Queries per pixel of NVR [E]: delta-tracking steps per pixel; most rays leave a cloud-like
#: volume or saturate (alpha > 0.99) within a few collisions; the testbed caps at 64
#: iterations [R testbed_volume.cu max_iter].
NVR_QUERIES_PER_PIXEL = 8.0

APPS: dict[str, AppRender] = {
    "nerf": AppRender(
        app="nerf", queries_per_pixel=NERF_QUERIES_PER_PIXEL,
        # MIN/MAX_STEPS_INBETWEEN_COMPACTION = 1 / 8 [R testbed_nerf.cu]: the mean is taken as 4.
        steps_per_iteration=4.0, input_bytes=NERF_COORD, output_bytes=PADDED_OUTPUT,
        kernels=(
            KernelSpec("nerf_init_rays", "pre", ray_write=NERF_PAYLOAD + ACCUM_PIXEL_BYTES + 4,
                       ray_flops=RAYGEN_FLOPS),
            KernelSpec("nerf_march", "pre", query_write=NERF_COORD,
                       iter_read=NERF_PAYLOAD, iter_write=NERF_PAYLOAD,
                       query_flops=NERF_MARCH_FLOPS),
            KernelSpec("nerf_composite", "post", query_read=PADDED_OUTPUT + NERF_COORD,
                       iter_read=NERF_PAYLOAD + ACCUM_PIXEL_BYTES + 4,
                       iter_write=ACCUM_PIXEL_BYTES + 4 + 4, query_flops=NERF_COMPOSITE_FLOPS),
            KernelSpec("nerf_compact", "post", kind=ir.DATA_MOVEMENT,
                       iter_read=NERF_PAYLOAD + ACCUM_PIXEL_BYTES + 4,
                       iter_write=NERF_PAYLOAD + ACCUM_PIXEL_BYTES + 4, iter_flops=4),
            _PRESENT),
        fused_post_query_read=4,  # the sample's dt
        description="ray marching with an occupancy grid, front-to-back compositing"),
    "nsdf": AppRender(
        app="nsdf", queries_per_pixel=NSDF_QUERIES_PER_PIXEL,
        # STEPS_INBETWEEN_COMPACTION = 4 [R testbed_sdf.cu SphereTracer::trace].
        steps_per_iteration=4.0, input_bytes=POS3, output_bytes=PADDED_OUTPUT,
        kernels=(
            KernelSpec("sdf_init_rays", "pre", ray_write=SDF_RAY + ACCUM_PIXEL_BYTES + 4,
                       ray_flops=RAYGEN_FLOPS),
            KernelSpec("sdf_advance", "post", query_read=PADDED_OUTPUT + SDF_RAY,
                       query_write=SDF_RAY, query_flops=SDF_ADVANCE_FLOPS),
            KernelSpec("sdf_compact", "post", kind=ir.DATA_MOVEMENT, iter_read=SDF_RAY,
                       iter_write=SDF_RAY, iter_flops=4),
            KernelSpec("sdf_shade", "post", ray_read=SDF_RAY + 3 * 4,
                       ray_write=ACCUM_PIXEL_BYTES, ray_flops=SDF_SHADE_FLOPS),
            _PRESENT),
        fused_post_query_read=0,
        description="sphere tracing with compaction every 4 steps, finite-difference normals"),
    "gia": AppRender(
        app="gia", queries_per_pixel=1.0, steps_per_iteration=1.0,
        input_bytes=POS2, output_bytes=PADDED_OUTPUT,
        kernels=(
            KernelSpec("image_coords", "pre", ray_write=POS2, ray_flops=10),
            KernelSpec("image_shade", "post", query_read=PADDED_OUTPUT,
                       ray_write=ACCUM_PIXEL_BYTES, query_flops=10),
            _PRESENT),
        fused_post_query_read=0,
        description="one network query per pixel of the viewport [R testbed_image.cu]"),
    "nvr": AppRender(
        app="nvr", queries_per_pixel=NVR_QUERIES_PER_PIXEL,
        # One query per iteration; atomicAdd compaction inside the step kernel [R].
        steps_per_iteration=1.0, input_bytes=POS3, output_bytes=VOLUME_OUTPUT,
        kernels=(
            KernelSpec("volume_init_rays", "pre", ray_write=VOL_RAY + 4,
                       ray_flops=RAYGEN_FLOPS + VOLUME_STEP_FLOPS),
            KernelSpec("volume_step", "post", query_read=VOLUME_OUTPUT + VOL_RAY,
                       query_write=VOL_RAY, query_flops=VOLUME_STEP_FLOPS),
            KernelSpec("volume_write", "post", ray_write=ACCUM_PIXEL_BYTES, ray_flops=4),
            _PRESENT),
        fused_post_query_read=0,
        description="delta tracking through the neural volume [R testbed_volume.cu]"),
}


def app_render(app: str) -> AppRender:
    """The :class:`AppRender` of a neural-field app (``nerf``, ``nsdf``, ``gia``, ``nvr``)."""
    try:
        return APPS[app]
    except KeyError:
        raise BadInput("app", app, "expected one of " + ", ".join(APPS)) from None


@dataclass(frozen=True)
class FrameSpec:
    """One frame of ``app``: ``width x height`` pixels at ``spp`` samples per pixel, each
    making ``queries_per_pixel`` network queries, simulated as ``sim_batches`` ray batches."""

    app: str
    width: int
    height: int
    spp: int = 1
    queries_per_pixel: float = 1.0
    sim_batches: int = DEFAULT_SIM_BATCHES

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def rays(self) -> int:
        return self.pixels * self.spp

    @property
    def queries(self) -> float:
        """Network queries (points) per frame."""
        return self.rays * self.queries_per_pixel

    @property
    def resolution(self) -> str:
        for name, size in RESOLUTIONS.items():
            if size == (self.width, self.height):
                return name
        return f"{self.width}x{self.height}"


def parse_resolution(resolution: str | Sequence[int]) -> tuple[int, int]:
    """``"4k"``-style names or ``(width, height)`` / ``"WxH"``; :class:`BadInput` otherwise."""
    allowed = "a name (" + ", ".join(RESOLUTIONS) + "), 'WxH' or (width, height) > 0"
    if isinstance(resolution, str):
        key = resolution.strip().lower()
        if key in RESOLUTIONS:
            return RESOLUTIONS[key]
        parts = key.split("x")
        try:
            width, height = (int(p) for p in parts)
        except ValueError:
            raise BadInput("resolution", resolution, f"expected {allowed}") from None
    else:
        try:
            width, height = (int(v) for v in resolution)
        except (TypeError, ValueError):
            raise BadInput("resolution", resolution, f"expected {allowed}") from None
    if width <= 0 or height <= 0:
        raise BadInput("resolution", resolution, f"expected {allowed}")
    return width, height


def frame_spec(app: str, resolution: str | Sequence[int] = "1080p", spp: int = 1,
               queries_per_pixel: float | None = None,
               sim_batches: int = DEFAULT_SIM_BATCHES) -> FrameSpec:
    """A validated :class:`FrameSpec` (``queries_per_pixel`` defaults to the app's)."""
    render = app_render(app)
    width, height = parse_resolution(resolution)
    if isinstance(spp, bool) or not isinstance(spp, int) or spp < 1:
        raise BadInput("spp", spp, "expected an int >= 1")
    q = render.queries_per_pixel if queries_per_pixel is None else queries_per_pixel
    if not isinstance(q, (int, float)) or isinstance(q, bool) or not q > 0 or not math.isfinite(q):
        raise BadInput("queries_per_pixel", queries_per_pixel, "expected a number > 0")
    if isinstance(sim_batches, bool) or not isinstance(sim_batches, int) or sim_batches < 1:
        raise BadInput("sim_batches", sim_batches, "expected an int >= 1")
    return FrameSpec(app=app, width=width, height=height, spp=spp, queries_per_pixel=float(q),
                     sim_batches=sim_batches)


# ------------------------------------------------------------------------ field scaling
def field_points(workload: Workload) -> int:
    """Points (queries) the captured field graph was built for: its hashgrid op's ``points``,
    else the workload's batch."""
    for op in workload.ops:
        if op.kind == ir.HASHGRID and op.attrs.get("points"):
            return int(op.attrs["points"])
    return max(int(workload.batch), 1)


def _scale_shape(shape: Sequence[int] | None, old: int, new: int):
    if shape and len(shape) >= 1 and shape[0] == old:
        return (new, *shape[1:])
    return shape


def scale_points(op: Op, old_points: int, new_points: float, name: str) -> Op:
    """``op`` of a per-point field graph rebuilt for ``new_points`` points: FLOPs and
    activation bytes scale with the points, parameters (weights, grid tables) do not; the
    points dimension of shapes and attrs (``points``, ``m``, ``elements``) follows."""
    factor = new_points / old_points
    n = max(int(round(new_points)), 1)
    attrs: dict[str, Any] = dict(op.attrs)
    if "points" in attrs:
        attrs["points"] = n
    if op.kind == ir.MATMUL and attrs.get("m") == old_points:
        attrs["m"] = n
    if "elements" in attrs:
        attrs["elements"] = max(int(round(attrs["elements"] * factor)), 1)
    return replace(
        op, name=name,
        input_shapes=tuple(_scale_shape(s, old_points, n) for s in op.input_shapes),
        output_shapes=tuple(_scale_shape(s, old_points, n) for s in op.output_shapes),
        flops=int(round(op.flops * factor)),
        activation_bytes_read=int(round(op.activation_bytes_read * factor)),
        activation_bytes_written=int(round(op.activation_bytes_written * factor)),
        attrs=attrs)


# ------------------------------------------------------------------------ GPU kernels
def remaining_ops(render: AppRender, rays: float, queries: float, dtype: str, prefix: str,
                  fused: bool, output_bytes: float | None = None) -> tuple[list[Op], list[Op]]:
    """The (pre, post) GPU ops of ``rays`` rays making ``queries`` queries.

    Unfused: one op per kernel of ``render.kernels``. Fused: one "pre" op (writes the network
    inputs) and one "post" op (reads the network outputs — ``output_bytes`` per query, the
    field's real output width; the padded record when None — and writes the displayed pixels),
    each carrying the unfused ops it replaces in ``attrs["fused_from"]`` so that a cost model
    can relate the two."""
    iterations = render.iterations(queries / rays if rays > 0 else None)
    unfused = {"pre": [], "post": []}
    for spec in render.kernels:
        unfused[spec.stage].append(spec.op(rays, queries, iterations, dtype,
                                           f"{prefix}{spec.name}"))
    if not fused:
        return unfused["pre"], unfused["post"]
    elem = ir.DTYPE_BYTES[dtype]
    pre = Op(name=f"{prefix}pre_fused", kind=ir.ELEMENTWISE, target="gpu::pre_fused",
             input_shapes=((max(int(rays), 1),),), output_shapes=((max(int(queries), 1),),),
             dtype=dtype, bytes_per_element=elem,
             flops=sum(o.flops for o in unfused["pre"]),
             activation_bytes_written=int(round(queries * render.input_bytes)),
             attrs={"elements": max(int(round(queries)), 1), "device": "gpu", "stage": "pre",
                    "kernel": "pre_fused", "rays": rays, "queries": queries,
                    "fused_from": tuple(unfused["pre"])})
    post = Op(name=f"{prefix}post_fused", kind=ir.ELEMENTWISE, target="gpu::post_fused",
              input_shapes=((max(int(queries), 1),),), output_shapes=((max(int(rays), 1),),),
              dtype=dtype, bytes_per_element=elem,
              flops=sum(o.flops for o in unfused["post"]),
              activation_bytes_read=int(round(queries * (render.fused_post_query_read + (
                  render.output_bytes if output_bytes is None else output_bytes)))),
              activation_bytes_written=int(round(rays * DISPLAY_PIXEL_BYTES)),
              attrs={"elements": max(int(round(rays)), 1), "device": "gpu", "stage": "post",
                     "kernel": "post_fused", "rays": rays, "queries": queries,
                     "fused_from": tuple(unfused["post"])})
    return [pre], [post]


# ------------------------------------------------------------------------ frames
def attach_frame(workload: Workload, spec: FrameSpec) -> Workload:
    """A copy of the field ``workload`` that carries ``spec``: a design's ``plan`` renders the
    whole frame instead of one batch of points. The cached workload is not modified."""
    if workload.model != spec.app:
        raise BadInput("app", spec.app, f"the workload is {workload.model!r}; frame and "
                       "field must be the same app")
    graph = workload.graph.copy()
    graph.graph[FRAME_KEY] = spec
    return Workload(graph=graph, model=workload.model, phase=workload.phase,
                    dtype=workload.dtype, batch=workload.batch, seq=workload.seq,
                    context=workload.context, arch=dict(workload.arch), params=workload.params,
                    unknown_targets=dict(workload.unknown_targets))


def frame_of(workload: Workload) -> FrameSpec:
    """The frame a workload stands for: the attached :class:`FrameSpec`, else one "frame" of
    the captured batch (``batch`` queries of the app: ``batch / queries_per_pixel`` rays in one
    row, in up to :data:`DEFAULT_SIM_BATCHES` ray batches). :class:`BadInput` when the model is
    no neural-field app."""
    spec = workload.graph.graph.get(FRAME_KEY)
    if isinstance(spec, FrameSpec):
        return spec
    render = app_render(workload.model)
    points = field_points(workload)
    rays = max(int(round(points / render.queries_per_pixel)), 1)
    return FrameSpec(app=workload.model, width=rays, height=1, spp=1,
                     queries_per_pixel=points / rays,
                     sim_batches=min(DEFAULT_SIM_BATCHES, rays))


def is_frame(workload: Workload) -> bool:
    """True when ``workload`` is already a planned frame pipeline (it has GPU-side ops)."""
    return workload.graph.graph.get("frame_pipeline") is not None


def pipeline(field_workload: Workload, spec: FrameSpec, fused: bool, batch: int = 1) -> Workload:
    """The frame as ``spec.sim_batches`` ray batches. Batch ``b``:
    pre ops (GPU, a chain) -> the field graph for the batch's queries -> post ops (GPU, a chain).
    Batches are independent, so a design with separate units overlaps batch ``b``'s GPU work
    with batch ``b + 1``'s field work (the engine decides; nothing is assumed here).

    ``batch`` is the workload's item count for throughput: 1 (a frame: the simulator's
    throughput is then frames per second) or the captured points."""
    render = app_render(spec.app)
    src = field_workload.graph
    old_points = field_points(field_workload)
    k = spec.sim_batches
    rays_b, queries_b = spec.rays / k, spec.queries / k
    field_ops = field_workload.ops
    sources = [op.name for op in field_ops if src.in_degree(op.name) == 0]
    sinks = [op.name for op in field_ops if src.out_degree(op.name) == 0]
    out_bytes = sum(src.nodes[t]["op"].activation_bytes_written for t in sinks) / old_points
    g = nx.DiGraph()
    index = 0

    def add(op: Op) -> None:
        nonlocal index
        g.add_node(op.name, op=op, index=index)
        index += 1

    for b in range(k):
        prefix = f"b{b}."
        pre, post = remaining_ops(render, rays_b, queries_b, field_workload.dtype, prefix, fused,
                                  output_bytes=out_bytes)
        for op in pre:
            add(op)
        for a, c in zip(pre, pre[1:]):
            g.add_edge(a.name, c.name, bytes=a.bytes_written)
        for op in field_ops:
            add(scale_points(op, old_points, queries_b, prefix + op.name))
        for u, v, data in src.edges(data=True):
            g.add_edge(prefix + u, prefix + v,
                       bytes=int(round(data.get("bytes", 0) * queries_b / old_points)))
        for s in sources:
            g.add_edge(pre[-1].name, prefix + s, bytes=int(queries_b * render.input_bytes))
        for op in post:
            add(op)
        for t in sinks:
            g.add_edge(prefix + t, post[0].name,
                       bytes=int(round(src.nodes[t]["op"].activation_bytes_written
                                       * queries_b / old_points)))
        for a, c in zip(post, post[1:]):
            g.add_edge(a.name, c.name, bytes=a.bytes_written)
    g.graph["frame_pipeline"] = spec
    g.graph[FRAME_KEY] = spec
    return Workload(graph=g, model=field_workload.model, phase=field_workload.phase,
                    dtype=field_workload.dtype, batch=max(int(batch), 1),
                    arch=dict(field_workload.arch), params=field_workload.params,
                    unknown_targets=dict(field_workload.unknown_targets))
