"""Number formats on the ``gpu`` template: which datapath runs an op's operands, and at what
cost (the kernel families of low-bit GEMMs).

**Datapaths** are the chip's dense tensor-core peaks per element type (parameters of the
``gpu`` template; presets from datasheets, never the 2x "with sparsity" figures):

* bf16 / fp16 / fp32 / fp8 / int8: the template's historic peaks;
* ``peak_int4_ops`` [D: A100 SXM 1,248 TOPS (A100 datasheet); T4 260 (T4 datasheet); RTX 3090
  568 (GA102 whitepaper, Appendix A); RTX 4090 1,321.2 (Ada whitepaper, Appendix A: FP8 and
  INT8 660.6, INT4 twice that); L40S 1,466 (L40S datasheet: INT8 733, INT4 twice, check)];
  Hopper (H100, H200) and the MI300X have none;
* ``peak_fp6_flops``, ``peak_fp4_flops`` [D: HGX B200, per GPU: FP4 9 PFLOP/s dense (18
  sparse), FP6 at the FP8 rate 4.5 (the tcgen05 kind::f8f6f4 MMA runs every mix of FP8, FP6
  and FP4 operands at the FP8 rate; FP4 x FP4 at twice it)];
* ``block_scaling``: which block scales the tensor cores apply in the MMA itself: ``mx`` (OCP
  MX, E8M0 per 32) and ``nv`` (NVFP4, E4M3 per 16) on Blackwell [D: PTX ISA 8.7,
  ``mma ... .block_scale``]; ``none`` elsewhere.

**What runs where** (:func:`plan`). A GEMM multiplies activations by weights; attention
queries by the KV cache:

* ``native`` — both operands' elements have one datapath the chip has (fp8 x fp8 on H100,
  int4 x int4 on A100, MXFP4 x MXFP4 on B200), block scales only where ``block_scaling``
  applies them (integer group scales multiply each K group's partial sum in the kernel, as
  COMET's and Atom's W4A4 kernels do); the kernel runs at that datapath's peak;
* weight-only (the weights in a narrower format than the activations, whose datapath the chip
  has, and exactly representable in it): ``fused`` dequantises the weights in registers
  before the MMA (Marlin, tinygemm's ``_weight_int4pack_mm``); ``unfused`` dequantises them
  into a full-width copy in memory first, then runs a plain GEMM; ``lut`` is LUT-GEMM (Park et
  al., ICLR 2024: activations' partial sums in look-up tables, CUDA cores only) — chosen by
  the template's ``weight_only_kernel``;
* refused — activations (or KV cache with queries) in an element type the chip has no
  datapath for (FP4 activations on an H100), naming what it has.

**Costs** of each family come from the template's kernel model
(:class:`accelerators.gpu_efficiency.KernelModel`) at the datapath's peak, with the op's own
bytes (formats already applied), and the family's factors of :data:`DEFAULT_FAMILY_KNOBS` or
the shipped calibration ``calibration/format_kernels.json``, fitted on GEMMs measured on an
H100 by ``benchmarks/format_gemm_measure.py`` (``benchmarks/format_gemm_fit.py``). The gap
between a datapath's peak and what a kernel reaches is the kernel family's, not the chip's, so
the factors apply to every preset.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from accelerators.base import OpCost, Param
from accelerators.mac_formats import embeds
from workloads import ir
from workloads.formats import Format, GEMM_KINDS, has_formats, op_formats
from workloads.memo import per_workload

#: Parameters the gpu template adds for number formats.
PARAMS = (
    Param("peak_fp6_flops", float, "FLOP/s", 0.0, "dense fp6 tensor-core peak; 0: no fp6 "
          "datapath", 0.0, 1e17),
    Param("peak_fp4_flops", float, "FLOP/s", 0.0, "dense fp4 (x fp4) tensor-core peak; 0: "
          "no fp4 datapath", 0.0, 1e17),
    Param("peak_int4_ops", float, "OP/s", 0.0, "dense int4 tensor-core peak; 0: no int4 "
          "datapath", 0.0, 1e17),
    Param("block_scaling", str, "", "none", "block scales the tensor cores apply in the MMA: "
          "none, mx (OCP MX, E8M0 per 32), mx_nv (and NVFP4, E4M3 per 16)",
          choices=("none", "mx", "mx_nv")),
    Param("weight_only_kernel", str, "", "fused", "kernel family of weight-only GEMMs: fused "
          "(dequantise in registers, Marlin / tinygemm), unfused (dequantise to a copy, then "
          "GEMM), lut (LUT-GEMM on the CUDA cores)", choices=("fused", "unfused", "lut")),
)

#: Format datapaths of presets beyond the historic peaks [D, see the module docstring].
PRESET_DATAPATHS: dict[str, dict[str, Any]] = {
    "a100": dict(peak_int4_ops=1248e12), "a100-40gb": dict(peak_int4_ops=1248e12),
    "t4": dict(peak_int4_ops=260e12), "rtx3090": dict(peak_int4_ops=568e12),
    "rtx4090": dict(peak_int4_ops=1321.2e12), "l40s": dict(peak_int4_ops=1466e12),
    "b200": dict(peak_fp6_flops=4.5e15, peak_fp4_flops=9.0e15, block_scaling="mx_nv"),
}


def add_preset_datapaths(presets: dict[str, dict[str, Any]]) -> None:
    """Merge :data:`PRESET_DATAPATHS` into the gpu template's presets."""
    for name, extra in PRESET_DATAPATHS.items():
        if name in presets:
            presets[name] = {**presets[name], **extra}


#: Kernel-family factors [E unless the shipped calibration replaces them]: ``native_*`` scale
#: a native datapath's sustained rate (the template's ``fp8_efficiency`` /
#: ``int8_efficiency`` times this); a fused weight-only kernel is a roofline of its own (it is
#: not a tiled cuBLAS GEMM): ``fused_compute`` of the activation datapath's peak,
#: ``fused_memory`` of the DRAM bandwidth, plus ``fused_extra_s``; the unfused family's
#: dequantisation moves ``unfused_passes_*`` times (narrow weights read + full-width copy
#: written) in ``unfused_kernels_*`` kernels, ``group`` for block- or group-scaled weights
#: (unpack, then scale), ``cast`` for a plain conversion; ``lut_mu`` is LUT-GEMM's
#: activations per table and ``lut_rate`` the CUDA-core rate of its look-up-and-adds as a
#: fraction of the fp32 peak.
DEFAULT_FAMILY_KNOBS: dict[str, float] = {
    "native_fp8": 1.0, "native_int8": 1.0, "native_fp4": 1.0, "native_int4": 1.0,
    "fused_compute": 0.5, "fused_memory": 0.8, "fused_extra_s": 2.0e-6,
    "unfused_passes_group": 1.0, "unfused_kernels_group": 1.0,
    "unfused_passes_cast": 1.0, "unfused_kernels_cast": 1.0,
    "lut_mu": 8.0, "lut_rate": 0.5,
}

#: The shipped kernel-family calibration (written by ``benchmarks/format_gemm_fit.py``).
CALIBRATION = Path(__file__).resolve().parent / "calibration" / "format_kernels.json"


@lru_cache(maxsize=1)
def family_knobs() -> dict[str, float]:
    """:data:`DEFAULT_FAMILY_KNOBS` with the shipped calibration's fitted values."""
    knobs = dict(DEFAULT_FAMILY_KNOBS)
    if CALIBRATION.is_file():
        fitted = json.loads(CALIBRATION.read_text()).get("knobs", {})
        knobs.update({k: float(v) for k, v in fitted.items() if k in knobs})
    return knobs


#: Element type -> the datapath that multiplies it (None: no tensor-core datapath).
DATAPATH_OF = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16",
               "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp6_e2m3": "fp6", "fp6_e3m2": "fp6",
               "fp4_e2m1": "fp4", "int8": "int8", "int4": "int4"}
#: A datapath the kernel model does not time itself -> the one it is timed as (rate scaled by
#: the peaks' ratio).
_TIMED_AS = {"fp6": "fp8", "fp4": "fp8", "int4": "int8", "tf32": "fp16"}
_NATIVE_KNOB = {"fp8": "native_fp8", "fp6": "native_fp8", "fp4": "native_fp4",
                "int8": "native_int8", "int4": "native_int4"}


def peaks(hw) -> dict[str, float]:
    """Dense peak per datapath of a gpu design's parameters, FLOP/s (0: none)."""
    return {"fp32": hw["peak_fp32_flops"], "tf32": 0.5 * hw["peak_fp16_flops"]
            if hw["peak_bf16_flops"] > 0 else 0.0, "bf16": hw["peak_bf16_flops"],
            "fp16": hw["peak_fp16_flops"], "fp8": hw["peak_fp8_flops"],
            "fp6": hw["peak_fp6_flops"], "fp4": hw["peak_fp4_flops"],
            "int8": hw["peak_int8_ops"], "int4": hw["peak_int4_ops"]}


def _scales_ok(f: Format, hw) -> bool:
    """True when the tensor cores apply ``f``'s scales themselves (per-tensor always)."""
    if f.scaling == "tensor":
        return True
    return f.scaling in {"none": (), "mx": ("mx",), "mx_nv": ("mx", "nv")}[hw["block_scaling"]]


def plan(hw, a: Format, w: Format) -> tuple[str, str] | str:
    """``(family, datapath)`` running activations ``a`` times weights (or KV) ``w`` on a gpu
    design of parameters ``hw``, or why it cannot (a message naming what it can)."""
    p = peaks(hw)
    da, dw = DATAPATH_OF.get(a.element_format.name), DATAPATH_OF.get(w.element_format.name)
    if da is None or p.get(da, 0.0) <= 0 or not (
            _scales_ok(a, hw) or a.scaling == "group"):
        have = ", ".join(d for d, v in p.items() if v > 0)
        why = "no datapath for" if da is None or p.get(da, 0.0) <= 0 else \
            f"no {a.scaling} block scaling in its tensor cores for"
        return (f"the gpu has {why} activations in {a.name} (its tensor cores run {have}; "
                f"block scaling: {hw['block_scaling']})")
    native = dw is not None and p.get(dw, 0.0) > 0 and _scales_ok(w, hw) and a.scaling in (
        "tensor", w.scaling)
    if native and da == dw:
        return "native", da
    if da == dw and "group" in (a.scaling, w.scaling) and a.element_format.kind == "int":
        return "native", da     # integer groups: the scales multiply each K group's sum
    f8f6f4 = ("fp8", "fp6", "fp4")
    if native and da in f8f6f4 and dw in f8f6f4 and hw["block_scaling"] != "none":
        return "native", "fp8"      # Blackwell's kind::f8f6f4: mixed operands at the fp8 rate
    if embeds(w.element_format, a.element_format) and w.bits_per_element <= \
            a.bits_per_element:
        family = hw["weight_only_kernel"]
        if family == "lut" and (w.element_format.kind != "int" or w.bits > 4):
            family = "fused"        # LUT-GEMM takes binary-coded integers of <= 4 bits
        return family, da
    return (f"the gpu cannot multiply {a.name} activations by {w.name} operands: neither one "
            f"datapath for both (it has " + ", ".join(d for d, v in p.items() if v > 0)
            + f") nor {w.name} exactly representable in {a.element_format.name}")


def is_base(op: ir.Op) -> bool:
    """True when ``op``'s operands are all in its base dtype (the historic path costs it)."""
    f = op_formats(op)
    if f is None:
        return True
    x, y = f.operands(op.kind)
    return x.name == f.base.name and y.name == f.base.name


def op_plan(hw, op: ir.Op) -> tuple[str, str] | str | None:
    """:func:`plan` of a GEMM-class op in number formats; None for one in its base dtype."""
    if op.kind not in GEMM_KINDS or op.kind == ir.MOE or is_base(op):
        return None
    x, y = op_formats(op).operands(op.kind)
    return plan(hw, x, y)


def workload_problem(gpu, workload: ir.Workload) -> str | None:
    """Why ``gpu`` cannot run ``workload``'s formats (the first op, by name), or None."""
    if not has_formats(workload):
        return None

    def first() -> str | None:
        seen: set = set()
        for op in workload.ops:
            key = (op.kind, op.attrs.get("formats"))
            if key in seen:
                continue
            seen.add(key)
            p = op_plan(gpu.hw, op)
            if isinstance(p, str):
                return f"{p} (op {op.name})"
        return None
    return per_workload(workload, ("gpu-format-problem", repr(sorted(gpu.hw.items()))), first)


def _timed(hw, datapath: str) -> tuple[str, float]:
    """(the datapath the kernel model times, rate factor for ``datapath``'s peak)."""
    key = _TIMED_AS.get(datapath, datapath)
    p = peaks(hw)
    return key, (p[datapath] / p[key] if p[key] > 0 else 1.0)


def gemm_time(gpu, family: str, datapath: str, m: int, n: int, k: int, batch: int,
              nbytes: float, w_fmt_bytes: float, w_elems: float, scaled: bool = True
              ) -> tuple[float, float, float]:
    """(latency_s, compute_s, memory_s) of one GEMM of ``family`` on ``datapath`` moving
    ``nbytes`` (its weights ``w_fmt_bytes`` of them, ``w_elems`` elements; ``scaled``: the
    weights carry block or group scales)."""
    model, hw = gpu.model, gpu.hw
    kn = getattr(gpu, "format_knobs", None) or family_knobs()   # a fit sets its candidates
    key, rate = _timed(hw, datapath)
    if family == "native":
        factor = kn.get(_NATIVE_KNOB.get(datapath, ""), 1.0)
        return model.gemm(m, n, k, batch, key, bytes_hbm=nbytes, rate_factor=rate * factor)
    if family == "fused":       # a roofline: dequantise in registers, then MMA
        comp = 2.0 * batch * m * n * k / (peaks(hw)[datapath] * kn["fused_compute"])
        mem = nbytes / (hw["memory_bandwidth_Bps"] * kn["fused_memory"])
        return kn["fused_extra_s"] + max(comp, mem), comp, mem
    es = _ELEMENT_BYTES.get(key, 2)
    if family == "unfused":     # dequantise to a full-width copy, then a plain GEMM
        copy = w_elems * es
        how = "group" if scaled else "cast"
        kernels = kn[f"unfused_kernels_{how}"]
        d_lat = model.memory(kn[f"unfused_passes_{how}"] * (w_fmt_bytes + copy),
                             "*elementwise")[0] + (kernels - 1) * model.k["mem_floor_s"]
        lat, comp, mem = model.gemm(m, n, k, batch, key,
                                    bytes_hbm=nbytes - w_fmt_bytes + copy, rate_factor=rate)
        return lat + d_lat, comp, mem + d_lat
    # lut: table builds and look-up-adds on the CUDA cores, weights streamed once
    bits = max(1.0, w_fmt_bytes * 8 / max(w_elems, 1))
    mu = kn["lut_mu"]
    ops = batch * m * (k / mu) * (2 ** mu + n * bits)
    comp = ops / (hw["peak_fp32_flops"] * kn["lut_rate"])
    mem = nbytes / (hw["memory_bandwidth_Bps"] * model.k["gemm_bandwidth_efficiency"])
    return model.k["gemm_launch_s"] + max(comp, mem), comp, mem


_ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def _rescaled(out: tuple[float, float, float], bytes_ratio: float, compute_ratio: float = 1.0
              ) -> tuple[float, float, float]:
    """A kernel time ``(latency, compute, memory)`` with its memory part times
    ``bytes_ratio`` (the op's format bytes over what the model assumed) and its compute part
    times ``compute_ratio``."""
    lat, comp, mem = out
    fixed = lat - max(comp, mem)
    comp, mem = comp * compute_ratio, mem * bytes_ratio
    return fixed + max(comp, mem), comp, mem


def cost(gpu, op: ir.Op) -> OpCost | None:
    """The :class:`OpCost` of a GEMM-class ``op`` in number formats on ``gpu``, or None for
    an op the historic path costs (no formats, every operand in the base dtype, not a GEMM).
    :class:`InfeasibleDesign` for formats the chip cannot run."""
    from dse.errors import InfeasibleDesign
    p = op_plan(gpu.hw, op)
    if p is None:
        return None
    if isinstance(p, str):
        raise InfeasibleDesign(p)
    family, datapath = p
    key, rate = _timed(gpu.hw, datapath)
    a = op.attrs
    nbytes = float(op.total_bytes)
    flops = op.flops
    details: dict[str, Any] = {"kernel_family": family, "datapath": datapath}
    es = _ELEMENT_BYTES.get(key, 2)
    if op.kind == ir.MATMUL and all(a.get(x) for x in ("m", "n", "k")):
        m, n, k, batch = int(a["m"]), int(a["n"]), int(a["k"]), int(a.get("batch", 1))
        w_elems = float(k * n * (1 if a.get("weight_operand") else batch))
        w_bytes = float(op.weight_bytes) if a.get("weight_operand") else 0.0
        w_fmt = op_formats(op).w
        lat, comp, mem = gemm_time(gpu, family, datapath, m, n, k, batch, nbytes, w_bytes,
                                   w_elems, scaled=w_fmt.scaling != "tensor")
    elif op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION) and all(
            a.get(x) for x in ("heads", "q_len", "kv_len", "head_dim")):
        b, h = int(a.get("batch", 1)), int(a["heads"])
        kvh, q, kv = int(a.get("kv_heads") or h), int(a["q_len"]), int(a["kv_len"])
        d, dv = int(a["head_dim"]), int(a.get("value_dim") or d)
        base = gpu.model.attention(b, h, kvh, q, kv, d, bool(a.get("causal")), key, dv)
        modelled = es * (b * h * q * (d + dv) + b * kvh * kv * (d + dv))
        lat, comp, mem = _rescaled(base, nbytes / modelled if modelled else 1.0, 1.0 / rate)
        if a.get("causal"):
            flops = int(a.get("causal_flops", flops))
    elif op.kind == ir.CONV and all(a.get(x) for x in ("n", "c", "k", "p", "q")):
        from accelerators.gpu import _first
        base = gpu.model.conv(int(a["n"]), int(a["c"]), int(a.get("h", 1)), int(a.get("w", 1)),
                              int(a["k"]), int(a.get("r", 1)), int(a.get("s", 1)), int(a["p"]),
                              int(a["q"]), _first(a.get("stride", 1)),
                              _first(a.get("padding", 0)), int(a.get("groups", 1)), key)
        g = int(a.get("groups", 1) or 1)
        modelled = es * (int(a["n"]) * int(a["c"]) * int(a.get("h", 1)) * int(a.get("w", 1))
                         + int(a["n"]) * int(a["k"]) * int(a["p"]) * int(a["q"])
                         + int(a["k"]) * (int(a["c"]) // g) * int(a.get("r", 1))
                         * int(a.get("s", 1)))
        lat, comp, mem = _rescaled(base, nbytes / modelled if modelled else 1.0, 1.0 / rate)
    else:
        return None
    lat = max(lat, nbytes / gpu.hw.memory_bandwidth_Bps)
    e = gpu._energy
    flop_j = e["flop"].get(key, e["flop"]["bf16"]) / rate
    return OpCost(unit="sm", latency_s=lat, compute_s=min(comp, lat), clock_hz=gpu.hw.clock_hz,
                  traffic={"hbm": nbytes}, bytes_by_level={"hbm": nbytes},
                  energy_j={"compute": flops * flop_j + e["active_w"] * lat,
                            "offchip_memory": nbytes * e["dram"],
                            "onchip_memory": nbytes * e["l2"]},
                  bound="compute" if comp >= mem else "memory", details=details)
