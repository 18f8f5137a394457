"""Calibrate the A100 preset's compute-bound GEMMs on published A100 measurements: Vidur's
profiles, and report the error on models that were not fitted.

Source: the MLP profiles in microsoft/vidur's repository, ``data/profiling/compute/a100/<model>
/mlp.csv`` (median time of each of a decoder layer's projections, fp16, measured by Vidur's
profiler on an A100 80 GB SXM at 1 to 4,096 tokens and tensor-parallel degrees 1, 2, 4, 8;
MIT license; read from a checkout, never copied into this repository). A row's GEMMs:
``attn_pre_proj`` (T x d -> the rank's Q, K, V heads), ``attn_post_proj`` (its heads -> d),
``mlp_up_proj`` (d -> gate and up, or up, over tp), ``mlp_down_proj`` (ff / tp -> d).

Fitted: the ``gpu`` template's ``tensor_efficiency`` (the share of the dense peak a large GEMM
sustains) and ``tile_cost`` (how much smaller tiles lose), on compute-bound rows (T >= 512
tokens) of the FIT models; reported on the HELD-OUT models (the 70B-class ones: the Vidur
comparison's Llama-2-70B among them) and, unchanged by these knobs, on memory-bound rows
(T <= 64) and mid-size rows (96-448 tokens, a batched decode step's GEMMs). ``--write``
stores the fit as ``accelerators/calibration/a100.json``.

Usage: python benchmarks/a100_gemm_calibration.py --vidur PATH_TO_VIDUR_CHECKOUT [--write] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIT = ("meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-8B", "microsoft/phi-2",
       "internlm/internlm-20b", "codellama/CodeLlama-34b-Instruct-hf")
HELD_OUT = ("meta-llama/Llama-2-70b-hf", "meta-llama/Meta-Llama-3-70B", "Qwen/Qwen-72B")
COMPUTE_TOKENS = (512, 768, 1024, 1536, 2048, 3072, 4096)
MEMORY_TOKENS = (1, 8, 16, 32, 64)
#: Between the two: a decode step's GEMMs at batch 96-448 (NeuPIMs' grid), not fitted.
MID_TOKENS = (96, 128, 160, 192, 224, 256, 288, 320, 384, 448)
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
EFFICIENCIES = [round(0.60 + 0.01 * i, 2) for i in range(41)]
TILE_COSTS = [0.0, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0]   # elements


def rows(vidur: Path, model: str, tokens: tuple[int, ...]) -> list[dict]:
    """(gemm, m, n, k, measured s) of ``model``'s profile at ``tokens``, every tp."""
    path = vidur / "data" / "profiling" / "compute" / "a100" / model / "mlp.csv"
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            t, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
            if t not in tokens:
                continue
            d, heads, kvh = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
            ff, hd = int(r["n_expanded_embd"]), int(r["n_embd"]) // int(r["n_head"])
            gated = r["use_gated_mlp"] == "True"
            q, kv = heads // tp, math.ceil(kvh / tp)
            shapes = {"attn_pre_proj": (d, (q + 2 * kv) * hd), "attn_post_proj": (q * hd, d),
                      "mlp_up_proj": (d, (2 if gated else 1) * ff // tp),
                      "mlp_down_proj": (ff // tp, d)}
            for g in GEMMS:
                ms = r.get(f"time_stats.{g}.median")
                if ms:
                    k, n = shapes[g]
                    out.append({"model": model, "gemm": g, "tp": tp, "m": t, "n": n, "k": k,
                                "measured_s": float(ms) / 1e3})
    return out


def errors(model, data: list[dict]) -> list[float]:
    return [model.gemm(r["m"], r["n"], r["k"], 1, "fp16")[0] / r["measured_s"] - 1
            for r in data]


def median_abs(e: list[float]) -> float:
    return statistics.median(abs(x) for x in e) if e else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", required=True, help="a checkout of microsoft/vidur")
    ap.add_argument("--write", action="store_true", help="write accelerators/calibration/a100.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from accelerators.gpu import GPU
    from accelerators.gpu_efficiency import KernelModel
    vidur = Path(args.vidur)
    fit = [r for m in FIT for r in rows(vidur, m, COMPUTE_TOKENS)]
    held = [r for m in HELD_OUT for r in rows(vidur, m, COMPUTE_TOKENS)]
    mem = [r for m in FIT + HELD_OUT for r in rows(vidur, m, MEMORY_TOKENS)]
    mid = [r for m in FIT + HELD_OUT for r in rows(vidur, m, MID_TOKENS)]
    base = GPU("a100", calibration="")            # the preset before this calibration
    chip, knobs = base.model.chip, dict(base.knobs)

    def model(eff: float, tile: float) -> KernelModel:
        return KernelModel(chip, {**knobs, "tensor_efficiency": eff, "tile_cost": tile})

    best = None
    for tile in TILE_COSTS:
        for eff in EFFICIENCIES:
            e = median_abs(errors(model(eff, tile), fit))
            if best is None or e < best[0]:
                best = (e, eff, tile)
    _, eff, tile = best
    before, after = base.model, model(eff, tile)
    table = {}
    for name, data in (("fit, compute-bound", fit), ("held-out, compute-bound", held),
                       ("memory-bound (all models)", mem),
                       ("mid-size (all models)", mid)):
        eb, ea = errors(before, data), errors(after, data)
        table[name] = {"rows": len(data), "before_median_abs": median_abs(eb),
                       "before_median": statistics.median(eb) if eb else math.nan,
                       "after_median_abs": median_abs(ea),
                       "after_median": statistics.median(ea) if ea else math.nan,
                       "after_p90_abs": (sorted(abs(x) for x in ea)[int(0.9 * len(ea))]
                                         if ea else math.nan)}
    result = {"tensor_efficiency": eff, "tile_cost": tile, "fit_models": list(FIT),
              "held_out_models": list(HELD_OUT), "errors": table}
    if args.write:
        cal = {"schema": 1, "template": "gpu",
               "source": ("microsoft/vidur data/profiling/compute/a100/*/mlp.csv (median "
                          "projection times, fp16, A100 80 GB SXM); fitted by "
                          "benchmarks/a100_gemm_calibration.py on compute-bound rows (>= 512 "
                          "tokens) of " + ", ".join(FIT)),
               "device": {"name": "NVIDIA A100-SXM4-80GB"},
               "chip": {"sms": chip.sms, "peak_flops": dict(chip.peak_flops),
                        "bandwidth_Bps": chip.bandwidth_Bps, "l2_bytes": chip.l2_bytes,
                        "clock_hz": chip.clock_hz},
               "efficiency": {"tensor_efficiency": eff, "tile_cost": tile},
               "errors": table}
        out = Path(__file__).resolve().parent.parent / "accelerators" / "calibration" / "a100.json"
        out.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"A100 GEMMs against Vidur's profiles: tensor_efficiency {eff:g}, tile_cost {tile:g} "
          f"(fitted on {len(fit)} compute-bound rows of {len(FIT)} models)")
    print(f"{'rows':<28}{'n':>6}{'before |err|':>14}{'before bias':>13}{'after |err|':>13}"
          f"{'after bias':>12}{'after p90':>11}")
    for name, t in table.items():
        print(f"{name:<28}{t['rows']:>6}{100 * t['before_median_abs']:>13.1f}%"
              f"{100 * t['before_median']:>+12.1f}%{100 * t['after_median_abs']:>12.1f}%"
              f"{100 * t['after_median']:>+11.1f}%{100 * t['after_p90_abs']:>10.1f}%")
    print("held-out: " + ", ".join(HELD_OUT) + " (not fitted)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
