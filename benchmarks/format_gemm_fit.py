"""Fit the ``gpu`` template's kernel-family factors (``accelerators/gpu_formats.py``) on GEMM
times measured by ``benchmarks/format_gemm_measure.py``, and report the model on shapes the
fit did not see.

Split (fixed before looking at errors): the fit uses the (N, K) of Llama-7B's q/o projection
(4096 x 4096), MLP up-projection (11008 x 4096) and a 70B-class square (8192 x 8192) at token
counts that are powers of two; every other record is held out: the MLP down-projection
(4096 x 11008), Llama-3-8B's up-projection (14336 x 4096), and the off-grid token counts (3,
24, 96, 384, 1536) on every shape.

Each kernel is predicted by the template itself (``gpu`` with the preset of the measured
device and its shipped calibration), one ``linear`` op in the kernel's formats:
``bf16_mm`` plain bf16 (no factor fitted: the baseline's own error); ``fp8_scaled_mm``
(``native_fp8``; the rowwise variant is reported with the same factor); ``int8_int_mm``
(``native_int8``, at the padded token count the kernel ran); ``int4_w_tinygemm`` (the fused
weight-only family: ``fused_compute``, ``fused_memory``, ``fused_extra_s``);
``int4_w_dequant_mm`` (the unfused family with group-scaled weights: ``unfused_passes_group``,
``unfused_kernels_group``); ``fp8_w_dequant_mm`` (the unfused family casting plain fp8:
``unfused_passes_cast``, ``unfused_kernels_cast``). Factors are fitted by least squares on log
time (scipy), within bounds.

    python3 benchmarks/format_gemm_fit.py tests/data/format_gemm_h100.json \
        --write accelerators/calibration/format_kernels.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from accelerators import gpu_formats  # noqa: E402
from accelerators.gpu import DEVICE_PRESETS, GPU  # noqa: E402
from workloads.build import build_workload  # noqa: E402
from workloads.formats import apply_formats  # noqa: E402

FIT_NK = {(4096, 4096), (11008, 4096), (8192, 8192)}
#: Kernel -> (formats of the linear op, weight-only family, knobs it fits).
KERNELS: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "bf16_mm": (None, "fused", ()),
    "fp8_scaled_mm": ("head=fp8_e4m3,activations=fp8_e4m3", "fused", ("native_fp8",)),
    "fp8_scaled_mm_rowwise": ("head=fp8_e4m3,activations=fp8_e4m3", "fused", ()),
    "int8_int_mm": ("head=int8,activations=int8", "fused", ("native_int8",)),
    "int4_w_tinygemm": ("head=int4_g128", "fused",
                        ("fused_compute", "fused_memory", "fused_extra_s")),
    "int4_w_dequant_mm": ("head=int4_g128", "unfused",
                          ("unfused_passes_group", "unfused_kernels_group")),
    "fp8_w_dequant_mm": ("head=fp8_e4m3", "unfused",
                         ("unfused_passes_cast", "unfused_kernels_cast")),
}
BOUNDS = {"native_fp8": (0.2, 2.0), "native_int8": (0.2, 2.0), "fused_compute": (0.005, 1.5),
          "fused_memory": (0.05, 1.5), "fused_extra_s": (0.0, 1e-4),
          "unfused_passes_group": (0.5, 50.0), "unfused_kernels_group": (1.0, 50.0),
          "unfused_passes_cast": (0.5, 50.0), "unfused_kernels_cast": (1.0, 50.0)}
#: Kernels below this are launch-dominated; the target (median error <= 15 %) is for the rest.
MIN_REPORT_S = 50e-6


def is_fit(r: dict[str, Any]) -> bool:
    m = r["m"]
    return (r["n"], r["k"]) in FIT_NK and m & (m - 1) == 0


class Predictor:
    """The template's time of each record under candidate factors."""

    def __init__(self, device_name: str):
        preset = DEVICE_PRESETS.get(device_name, "h100")
        self.preset = preset
        self.gpus = {fam: GPU(preset, weight_only_kernel=fam) for fam in ("fused", "unfused")}
        self._ops: dict[tuple, Any] = {}

    def op(self, kernel: str, m: int, n: int, k: int):
        key = (kernel, m, n, k)
        if key not in self._ops:
            w = build_workload("linear", batch=1, arch={"m": m, "n": n, "k": k})
            fm = KERNELS[kernel][0]
            if fm:
                w = apply_formats(w, fm)
            self._ops[key] = next(op for op in w.ops if op.kind == "matmul")
        return self._ops[key]

    def __call__(self, r: dict[str, Any], knobs: dict[str, float]) -> float:
        g = self.gpus[KERNELS[r["kernel"]][1]]
        g.format_knobs = knobs
        g._cache.clear()
        return g.cost(self.op(r["kernel"], r["m_run"], r["n"], r["k"])).latency_s


def fit(records: list[dict[str, Any]], pred: Predictor) -> dict[str, float]:
    from scipy.optimize import least_squares

    knobs = dict(gpu_formats.DEFAULT_FAMILY_KNOBS)
    for kernel, (_, _, names) in KERNELS.items():
        if not names:
            continue
        rows = [r for r in records if r["kernel"] == kernel and is_fit(r)]
        if not rows:
            continue
        lo = np.array([BOUNDS[n][0] for n in names])
        hi = np.array([BOUNDS[n][1] for n in names])
        scale = np.array([1e-6 if n.endswith("_s") else 1.0 for n in names])
        x0 = np.clip(np.array([knobs[n] for n in names]) / scale, lo / scale, hi / scale)

        def resid(x, rows=rows, names=names, scale=scale):
            kk = {**knobs, **dict(zip(names, x * scale))}
            return [math.log(pred(r, kk) / r["time_s"]) for r in rows]
        res = least_squares(resid, x0, bounds=(lo / scale, hi / scale), diff_step=1e-3)
        knobs.update(dict(zip(names, (res.x * scale).tolist())))
    return knobs


def report(records: list[dict[str, Any]], pred: Predictor, knobs: dict[str, float]
           ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kernel in KERNELS:
        for split in ("fit", "heldout"):
            rows = [r for r in records if r["kernel"] == kernel
                    and is_fit(r) == (split == "fit")]
            errs = [(pred(r, knobs) / r["time_s"] - 1.0, r) for r in rows]
            big = [abs(e) for e, r in errs if r["time_s"] >= MIN_REPORT_S]
            out[f"{kernel}/{split}"] = {
                "n": len(errs), "median_abs_err": statistics.median([abs(e) for e, _ in errs])
                if errs else None,
                "n_ge_50us": len(big), "median_abs_err_ge_50us": statistics.median(big)
                if big else None,
                "worst_ge_50us": max(big) if big else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw")
    ap.add_argument("--write", help="write the calibration JSON here")
    args = ap.parse_args(argv)
    raw = json.loads(Path(args.raw).read_text())
    records = [r for r in raw["measurements"] if r.get("kernel") in KERNELS]
    pred = Predictor(raw["device"].get("name", ""))
    knobs = fit(records, pred)
    rep = report(records, pred, knobs)
    print(f"device {raw['device'].get('name')} (preset {pred.preset}), torch {raw.get('torch')}, "
          f"{len(records)} records")
    print("fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in knobs.items()
                                 if k in {n for _, _, ns in KERNELS.values() for n in ns}))
    print(f"{'kernel / split':34s} {'n':>4s} {'med|err|':>9s} {'n>=50us':>8s} {'med|err|':>9s}"
          f" {'worst':>7s}")
    for key, v in rep.items():
        f = (lambda x: f"{100 * x:8.1f}%" if x is not None else "        -")
        print(f"{key:34s} {v['n']:4d} {f(v['median_abs_err'])} {v['n_ge_50us']:8d} "
              f"{f(v['median_abs_err_ge_50us'])} {f(v['worst_ge_50us'])[:-1]:>7s}")
    if args.write:
        Path(args.write).write_text(json.dumps({
            "tool": "benchmarks/format_gemm_fit.py", "measured_on": raw["device"].get("name"),
            "torch": raw.get("torch"), "raw": Path(args.raw).name, "preset": pred.preset,
            "knobs": knobs, "report": rep,
            "split": "fit: (N, K) in {4096x4096, 11008x4096, 8192x8192} at power-of-two "
                     "token counts; held out: everything else"}, indent=1, sort_keys=True)
            + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
