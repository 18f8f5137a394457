"""Fit the ``gpu`` template's efficiency model to raw microbenchmark measurements.

Input: the JSON that :mod:`dse.calibrate.gpu_bench` writes. Output: the calibration dict the
``gpu`` template loads (``efficiency`` knobs of :mod:`accelerators.gpu_efficiency`, per-operator
``memory_ops``, the measured ceilings, power, and the held-out errors).

Method: the measurements are split into groups (copy, memory-bound operators, GEMM by dtype,
attention prefill/decode, convolution). Every 4th case of a group (by its order in the raw
file) is held out; the knobs of each group are fitted on the other three quarters by
minimising the mean absolute log error (deterministic Nelder-Mead on bounded, transformed
knobs), in dependency order (copy first, then what builds on it). The held-out cases then give
the reported error: |predicted / measured - 1|, median and 90th percentile per group.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from accelerators.gpu import DEVICE_PRESETS, preset_chip
from accelerators.gpu_efficiency import (DEFAULT_KNOBS, Chip, KernelModel, alignment_bytes,
                                         is_decode)

#: Schema of the calibration file written here.
CALIBRATION_SCHEMA = 1

#: Every HOLDOUT_EVERY-th case of each group (index % HOLDOUT_EVERY == HOLDOUT_EVERY - 1) is
#: held out of the fit.
HOLDOUT_EVERY = 4

#: Copies of at least this many bytes (read + write) are left out: inside a CUDA graph the
#: driver runs such memcpy nodes on the copy engines at ~2.77 TB/s (measured), while eager
#: copies (what a model runs) reach ~4.2 TB/s (the power section's 1 GiB copy loop).
GRAPH_MEMCPY_LIMIT_BYTES = 1 << 30

#: Knob bounds (low, high) for the fit; fractions are fitted through a logit, the rest in log.
BOUNDS = {
    "tensor_efficiency": (0.2, 1.0), "fp8_efficiency": (0.1, 1.0),
    "int8_efficiency": (0.1, 1.0), "fp32_efficiency": (0.1, 1.0),
    "tile_cost": (1.0, 400.0), "fp32_tile_cost": (1.0, 1000.0),
    "sm_bandwidth_Bps": (5e9, 1e12), "l2_spill_efficiency": (0.3, 1.0),
    "decode_sm_bandwidth_Bps": (5e9, 1e12), "tile_overhead_s": (1e-8, 2e-5),
    "gemm_launch_s": (1e-7, 2e-5),
    "splitk_overhead_s": (1e-8, 2e-5), "gemm_bandwidth_efficiency": (0.2, 1.2),
    "gemm_ramp_s": (1e-8, 2e-5), "gemm_ramp_bytes": (1e4, 1e9),
    "gemv_unaligned_memory": (0.05, 1.2),
    "align8_compute": (0.02, 1.0), "align4_compute": (0.02, 1.0),
    "align2_compute": (0.02, 1.0), "align8_memory": (0.05, 1.2),
    "align4_memory": (0.05, 1.2), "align2_memory": (0.05, 1.2),
    "attention_efficiency": (0.1, 1.0), "attention_score_s": (1e-15, 1e-10),
    "attention_tile_s": (1e-8, 5e-5), "attention_launch_s": (1e-7, 3e-5),
    "attention_causal_tail": (0.0, 3.0), "decode_split_keys": (16.0, 65536.0),
    "decode_launch_s": (1e-7, 3e-5), "decode_bandwidth_efficiency": (0.2, 1.2),
    "decode_block_s": (1e-8, 3e-5),
    "conv_efficiency": (0.02, 1.5), "conv_launch_s": (1e-7, 5e-5), "conv_transform": (0.0, 3.0),
    "conv1x1_efficiency": (0.05, 2.0), "conv_small_channel_efficiency": (0.005, 1.0),
    "bandwidth_efficiency": (0.3, 1.2), "mem_floor_s": (1e-7, 1e-5), "mem_ramp_s": (0.0, 1e-5),
    "mem_ramp_bytes": (1e4, 1e9),
}

_LINEAR = {"conv_transform", "mem_ramp_s", "attention_causal_tail"}


def chip_from_raw(raw: dict[str, Any]) -> Chip:
    """The :class:`Chip` of the benchmarked device: SMs and L2 as read off it, peaks, bandwidth
    and clock from its ``gpu`` preset's datasheet (:data:`accelerators.gpu.DEVICE_PRESETS`)."""
    dev = raw["device"]
    preset = DEVICE_PRESETS.get(dev.get("name"))
    if preset is None:
        raise ValueError(f"no datasheet numbers for {dev.get('name')!r}; add its preset to "
                         "accelerators.gpu.DEVICE_PRESETS")
    return preset_chip(preset, int(dev["sms"]), float(dev["l2_bytes"]))


def chip_dict(chip: Chip) -> dict[str, Any]:
    """The ``chip`` section of a calibration file (what ``gpu.calibration_chip`` reads)."""
    return {"sms": chip.sms, "clock_hz": chip.clock_hz, "peak_flops": dict(chip.peak_flops),
            "bandwidth_Bps": chip.bandwidth_Bps, "l2_bytes": chip.l2_bytes}


# --------------------------------------------------------------------------------------------
# Prediction of one measured case


def predict(model: KernelModel, r: dict[str, Any]) -> float:
    """The model's latency (s) of raw measurement ``r``."""
    kind = r["kind"]
    if kind == "gemm":
        return model.gemm(r["m"], r["n"], r["k"], r["batch"], r["dtype"])[0]
    if kind == "attention":
        return model.attention(r["batch"], r["heads"], r["kv_heads"], r["q_len"], r["kv_len"],
                               r["head_dim"], bool(r["causal"]), r["dtype"])[0]
    if kind == "conv":
        return model.conv(r["n"], r["c"], r["h"], r["w"], r["k"], r["r"], r["s"], r["p"],
                          r["q"], r["stride"], r["padding"], 1, r["dtype"])[0]
    if kind == "memory":
        target = MEMORY_TARGETS[r["op"]]
        return model.memory(r["bytes"], target, _MEMORY_KIND[r["op"]], rows=r.get("rows", 0),
                            width=r.get("width", 0), bytes_per_element=_es(r["dtype"]))[0]
    raise ValueError(kind)


#: Bench op names -> the ATen operator (``Op.target``) each stands for.
MEMORY_TARGETS = {
    "copy": "copy", "add": "add", "mul_scalar": "mul", "gelu": "gelu", "silu": "silu",
    "relu": "relu", "layer_norm": "layer_norm", "rms_norm": "rms_norm", "softmax": "softmax",
    "sum": "sum", "embedding": "embedding", "transpose": "contiguous", "cat": "cat",
    "batch_norm": "batch_norm", "max_pool": "max_pool2d", "avg_pool": "adaptive_avg_pool2d",
}
_MEMORY_KIND = {
    "copy": "data_movement", "add": "elementwise", "mul_scalar": "elementwise",
    "gelu": "elementwise", "silu": "elementwise", "relu": "elementwise", "layer_norm": "norm",
    "rms_norm": "norm", "softmax": "softmax", "sum": "reduction", "embedding": "embedding",
    "transpose": "data_movement", "cat": "data_movement", "batch_norm": "norm",
    "max_pool": "reduction", "avg_pool": "reduction",
}
#: Operators with a per-row overhead (rows x width layout).
_ROW_OPS = {"layer_norm", "rms_norm", "softmax", "sum"}


def _es(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}[dtype]


# --------------------------------------------------------------------------------------------
# Groups and the hold-out split


def groups(raw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Measurements by fit group, in raw-file order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in raw["measurements"]:
        if not r.get("time_s") or r["time_s"] <= 0:
            continue
        kind = r["kind"]
        if kind == "memory":
            if r["op"] == "copy" and r["dtype"] == "bf16":
                if r["bytes"] >= GRAPH_MEMCPY_LIMIT_BYTES:
                    continue
                g = "copy"
            else:
                g = f"memory:{r['op']}:{r['dtype']}"
        elif kind == "gemm":
            g = f"gemm:{r['dtype']}"
        elif kind == "attention":
            decode = is_decode(r["heads"], r["kv_heads"], r["q_len"])
            g = f"attention_{'decode' if decode else 'prefill'}:{r['dtype']}"
        elif kind == "conv":
            g = f"conv:{r['dtype']}"
        else:
            continue
        out.setdefault(g, []).append(r)
    return out


def split(cases: Sequence[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(fit, held-out): every HOLDOUT_EVERY-th case is held out."""
    fit = [c for i, c in enumerate(cases) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    held = [c for i, c in enumerate(cases) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    return fit, held


# --------------------------------------------------------------------------------------------
# Optimiser


def _to_free(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    x = min(max(value, lo), hi)
    if name in _LINEAR:
        t = (x - lo) / (hi - lo)
        t = min(max(t, 1e-6), 1 - 1e-6)
        return math.log(t / (1 - t))
    t = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    t = min(max(t, 1e-6), 1 - 1e-6)
    return math.log(t / (1 - t))


def _from_free(name: str, z: float) -> float:
    lo, hi = BOUNDS[name]
    t = 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))
    if name in _LINEAR:
        return lo + t * (hi - lo)
    return math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                iters: int = 400, tol: float = 1e-7) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (deterministic Nelder-Mead, standard coefficients)."""
    n = len(x0)
    simplex = [np.array(x0, dtype=float)]
    for i in range(n):
        x = np.array(x0, dtype=float)
        x[i] += step
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values, kind="stable")
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def _log_errors(model: KernelModel, cases: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([math.log(predict(model, c) / c["time_s"]) for c in cases])


def fit_knobs(chip: Chip, knobs: dict[str, float], memory_ops: dict[str, Any],
              names: Sequence[str], cases: Sequence[dict[str, Any]], iters: int = 400,
              restarts: int = 2) -> dict[str, float]:
    """Knobs ``names`` minimising the mean |log(pred / measured)| over ``cases``, the other
    knobs held at ``knobs``. Returns the updated knobs."""
    names = list(names)

    def model_for(z):
        trial = dict(knobs)
        trial.update({nm: _from_free(nm, v) for nm, v in zip(names, z)})
        return KernelModel(chip, trial, memory_ops)

    def objective(z):
        return float(np.mean(np.abs(_log_errors(model_for(z), cases))))

    z = np.array([_to_free(nm, knobs.get(nm, DEFAULT_KNOBS[nm])) for nm in names])
    for _ in range(restarts):
        z = nelder_mead(objective, z, iters=iters)
    out = dict(knobs)
    out.update({nm: _from_free(nm, v) for nm, v in zip(names, z)})
    return {k: float(f"{v:.6g}") for k, v in out.items()}


def fit_memory_op(chip: Chip, knobs: dict[str, float], memory_ops: dict[str, Any], target: str,
                  cases: Sequence[dict[str, Any]], with_rows: bool) -> tuple[float, ...]:
    """(efficiency, row elements, extra latency s, row latency s per element) of one operator
    from its cases; the row terms only for row-wise operators."""
    def values(z):
        eff = 1.5 / (1.0 + math.exp(-z[0]))
        extra = 1e-5 / (1.0 + math.exp(-z[1]))
        rows = math.exp(z[2]) if with_rows else 0.0
        row_s = 1e-8 / (1.0 + math.exp(-z[3])) if with_rows else 0.0
        return eff, rows, extra, row_s

    def objective(z):
        model = KernelModel(chip, knobs, {**memory_ops, target: values(z)})
        return float(np.mean(np.abs(_log_errors(model, cases))))

    z0 = np.array([0.0, -3.0, math.log(64.0), -4.0])
    z = z0 if with_rows else z0[:2]
    for _ in range(2):
        z = nelder_mead(objective, z, iters=400)
    full = np.concatenate([z, z0[len(z):]])
    return tuple(float(f"{v:.6g}") for v in values(full))


# --------------------------------------------------------------------------------------------
# The whole fit

#: Knob groups in fitting order: (label, group-name prefixes, knobs).
STAGES = [
    ("copy", ("copy",), ("bandwidth_efficiency", "mem_floor_s", "mem_ramp_s", "mem_ramp_bytes")),
    ("gemm aligned", ("gemm:bf16", "gemm:fp16"),
     ("tensor_efficiency", "tile_cost", "tile_overhead_s", "gemm_launch_s", "splitk_overhead_s",
      "gemm_bandwidth_efficiency", "gemm_ramp_s", "gemm_ramp_bytes", "sm_bandwidth_Bps",
      "l2_spill_efficiency")),
    ("gemm unaligned", ("gemm:bf16", "gemm:fp16"),
     ("align8_compute", "align4_compute", "align2_compute", "align8_memory", "align4_memory",
      "align2_memory", "gemv_unaligned_memory")),
    ("gemm fp32", ("gemm:fp32",), ("fp32_efficiency", "fp32_tile_cost")),
    ("gemm fp8", ("gemm:fp8",), ("fp8_efficiency",)),
    ("gemm int8", ("gemm:int8",), ("int8_efficiency",)),
    ("attention prefill", ("attention_prefill",),
     ("attention_efficiency", "attention_score_s", "attention_tile_s", "attention_launch_s",
      "attention_causal_tail")),
    ("attention decode", ("attention_decode",),
     ("decode_launch_s", "decode_bandwidth_efficiency", "decode_block_s", "decode_split_keys",
      "decode_sm_bandwidth_Bps")),
    ("conv", ("conv:bf16",), ("conv_efficiency", "conv1x1_efficiency",
                              "conv_small_channel_efficiency", "conv_launch_s", "conv_transform")),
]


def _aligned(r: dict[str, Any]) -> bool:
    es = _es(r["dtype"])
    return min(alignment_bytes(r["k"], es), alignment_bytes(r["n"], es)) >= 16


def fit_calibration(raw: dict[str, Any], iters: int = 400) -> dict[str, Any]:
    """The calibration dict for the ``gpu`` template from raw measurements ``raw``."""
    chip = chip_from_raw(raw)
    grouped = groups(raw)
    train = {g: split(c)[0] for g, c in grouped.items()}
    knobs: dict[str, float] = dict(DEFAULT_KNOBS)
    memory_ops: dict[str, tuple[float, float]] = {}
    for label, prefixes, names in STAGES:
        cases = [c for g, cs in train.items() if g.startswith(prefixes) for c in cs]
        if label == "gemm aligned":
            cases = [c for c in cases if _aligned(c)]
        elif label == "gemm unaligned":
            cases = [c for c in cases if not _aligned(c)]
        if not cases:
            continue
        knobs = fit_knobs(chip, knobs, memory_ops, names, cases, iters=iters)
        if label == "copy":
            for g, cs in sorted(train.items()):
                if not g.startswith("memory:") or not cs:
                    continue
                op = g.split(":")[1]
                if g.split(":")[2] != "bf16" or op == "copy":
                    continue
                memory_ops[MEMORY_TARGETS[op]] = fit_memory_op(
                    chip, knobs, memory_ops, MEMORY_TARGETS[op], cs, op in _ROW_OPS)
    model = KernelModel(chip, knobs, memory_ops)
    return {
        "schema": CALIBRATION_SCHEMA,
        "template": "gpu",
        "device": {k: raw["device"].get(k) for k in ("name", "sms", "l2_bytes", "memory_bytes",
                                                      "torch", "cuda", "cudnn")},
        "chip": chip_dict(chip),
        "raw_sha256": raw_digest(raw),
        "measured": measured_ceilings(raw),
        "efficiency": knobs,
        "memory_ops": {k: list(v) for k, v in sorted(memory_ops.items())},
        "holdout_every": HOLDOUT_EVERY,
        "heldout_error": heldout_summary(model, grouped),
        "errors": error_table(model, grouped),
    }


def heldout_summary(model: KernelModel, grouped: dict[str, list[dict[str, Any]]]
                    ) -> dict[str, Any]:
    """Median |pred/meas - 1| over the held-out GEMMs (all dtypes) and attention cases."""
    out: dict[str, Any] = {}
    for label, prefix in (("gemm", "gemm:"), ("attention", "attention_")):
        errs = [abs(predict(model, c) / c["time_s"] - 1.0)
                for g, cases in grouped.items() if g.startswith(prefix) for c in split(cases)[1]]
        if errs:
            out[f"{label}_median"] = round(float(np.median(errs)), 4)
            out[f"{label}_cases"] = len(errs)
    return out


def raw_digest(raw: dict[str, Any]) -> str:
    """SHA-256 of the measurements the fit used (stable under key order)."""
    blob = json.dumps(raw["measurements"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def measured_ceilings(raw: dict[str, Any]) -> dict[str, Any]:
    """Headline numbers of the run: best GEMM FLOP/s per dtype, copy B/s, launch floor, power."""
    best: dict[str, float] = {}
    for r in raw["measurements"]:
        if r["kind"] == "gemm" and r.get("time_s"):
            best[r["dtype"]] = max(best.get(r["dtype"], 0.0), r["flops"] / r["time_s"])
    copy = [r["bytes"] / r["time_s"] for r in raw["measurements"]
            if r["kind"] == "memory" and r["op"] == "copy" and r.get("time_s")
            and r["bytes"] < GRAPH_MEMCPY_LIMIT_BYTES]
    floor = raw.get("floor", {})
    power = raw.get("power", {})
    out = {"best_gemm_flops": {k: float(f"{v:.4g}") for k, v in sorted(best.items())},
           "best_copy_Bps": float(f"{max(copy):.4g}") if copy else None,
           "launch_floor_graph_s": floor.get("graph_per_kernel", {}).get("time_s"),
           "eager_launch_interval_s": floor.get("eager_launch_interval_s")}
    if power.get("idle"):
        out["power_w"] = {
            "idle": power["idle"].get("energy_power_w"),
            "gemm_bf16": power.get("gemm_bf16_8192", {}).get("energy_power_w"),
            "gemm_bf16_flops": power.get("gemm_bf16_8192", {}).get("achieved_flops_per_s"),
            "copy": power.get("copy_1GiB", {}).get("energy_power_w"),
            "copy_Bps": power.get("copy_1GiB", {}).get("achieved_bytes_per_s"),
            "limit": power.get("power_limit_w"),
        }
    return out


def error_table(model: KernelModel, grouped: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per group: cases fitted / held out, and |pred/meas - 1| on each (median, p90, max)."""
    table: dict[str, Any] = {}
    for g, cases in sorted(grouped.items()):
        fit, held = split(cases)
        row: dict[str, Any] = {"fit_cases": len(fit), "heldout_cases": len(held)}
        for label, cs in (("fit", fit), ("heldout", held)):
            if not cs:
                continue
            err = np.abs(np.array([predict(model, c) / c["time_s"] - 1.0 for c in cs]))
            row[label] = {"median": round(float(np.median(err)), 4),
                          "p90": round(float(np.quantile(err, 0.9)), 4),
                          "max": round(float(err.max()), 4)}
        table[g] = row
    return table


def heldout_errors(calibration: dict[str, Any], raw: dict[str, Any],
                   prefixes: Sequence[str]) -> np.ndarray:
    """|pred/meas - 1| of every held-out case whose group starts with one of ``prefixes``."""
    model = KernelModel(chip_from_raw(raw), calibration["efficiency"],
                        {k: tuple(v) for k, v in calibration["memory_ops"].items()})
    errs = []
    for g, cases in groups(raw).items():
        if g.startswith(tuple(prefixes)):
            errs += [abs(predict(model, c) / c["time_s"] - 1.0) for c in split(cases)[1]]
    return np.array(errs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.calibrate.fit",
                                     description="Fit the gpu template's calibration from raw "
                                     "gpu_bench measurements.")
    parser.add_argument("raw", help="raw measurements JSON (gpu_bench --out)")
    parser.add_argument("--out", required=True, help="calibration JSON to write")
    args = parser.parse_args(argv)
    raw = json.loads(Path(args.raw).read_text())
    cal = fit_calibration(raw)
    Path(args.out).write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    nan = float("nan")
    for g, row in cal["errors"].items():
        held = row.get("heldout", {})
        print(f"{g:<32} fit {row['fit_cases']:4d}  held-out {row['heldout_cases']:4d}  "
              f"median {held.get('median', nan):.3f}  p90 {held.get('p90', nan):.3f}")
    for label, prefixes in (("GEMM, all dtypes", ["gemm:"]), ("attention", ["attention_"])):
        errs = heldout_errors(cal, raw, prefixes)
        print(f"held-out {label}: {len(errs)} cases, median |error| {np.median(errs):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
