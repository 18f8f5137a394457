"""Block-sparse GNA on a real GPU with torch's flex_attention, against the ``gpu`` template's
``sparse_attention`` cost.

Two steps, on two machines:

* ``measure`` (one CUDA GPU with torch; imports only torch, numpy and :mod:`workloads.gna`)::

      python benchmarks/gna_flex_attention.py measure            # writes $OUT/gna_flex_h200.json

  For each case (1-D, 2-D and 3-D grids; neighbourhood, strided, blocked, dilated, causal;
  row-major and tiled layouts) it builds the GNA mask (:func:`workloads.gna.flex_mask_mod`),
  its 128 x 128 BlockMask (``create_block_mask`` on the GPU), and times, with CUDA events
  (median of ``--reps`` after warm-up), the compiled ``flex_attention`` with that BlockMask,
  the same compiled kernel without a mask (dense), and SDPA; the tiled layout's token permute
  (q, k, v in, output back) is timed apart. The BlockMask's full / partial tile counts are
  stored next to :func:`workloads.gna.tile_counts`'s. A time budget (``--budget-s``) skips the
  remaining cases rather than overrun; the JSON is rewritten after every case.
  ``--dry-run`` runs tiny cases on the CPU (eager flex_attention) to test the script.

* ``compare`` (here, with the project installed)::

      python benchmarks/gna_flex_attention.py compare tests/data/gna_flex_h100.json

  costs every measured case on the measured GPU's preset (128 x 128 tiles, ``partial_tiles``
  masking as flex_attention does, the ``flex`` kernel's fitted overheads; the dense flex kernel
  as the same kernel visiting every tile unmasked) and prints predicted against measured
  speed-up over the dense flex kernel (and over SDPA), the token permute, and the median
  absolute error, apart for the cases the overheads were fitted on and the held-out ones.

* ``fit`` (here): fits flex_attention's three overheads (per query block, per visited tile,
  per masked tile; :mod:`accelerators.gpu_sparse_attention`) to the speed-ups of every other
  measured case (the even-numbered ones, least squares on log speed-up, overheads >= 0) and
  writes them, with the cases used and the held-out error, to
  ``accelerators/calibration/flex_attention.json``::

      python benchmarks/gna_flex_attention.py fit tests/data/gna_flex_h100.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workloads.gna import GNAConfig, flex_mask_mod, tile_counts  # noqa: E402

BLOCK = 128
HEAD_DIM = 128

#: (name, grid, window, stride, dilation, causal, layout, tile, heads). Grids of 16K-64K
#: tokens fill the GPU; the list is ordered by importance (the budget cuts the tail).
CASES: list[tuple] = [
    ("1d-na", "32768", "2048", "1", "1", "0", "row_major", "", 8),
    ("1d-strided", "32768", "2048", "256", "1", "0", "row_major", "", 8),
    ("1d-blocked", "32768", "2048", "2048", "1", "0", "row_major", "", 8),
    ("2d-rm-na", "128x128", "32x32", "1", "1", "0", "row_major", "", 16),
    ("2d-tiled-na", "128x128", "32x32", "1", "1", "0", "tiled", "8x16", 16),
    ("2d-tiled-strided", "128x128", "32x32", "8x16", "1", "0", "tiled", "8x16", 16),
    ("2d-tiled-blocked", "128x128", "32x32", "32x32", "1", "0", "tiled", "8x16", 16),
    ("3d-rm-na", "16x32x32", "8x16x16", "1", "1", "0", "row_major", "", 16),
    ("3d-tiled-na", "16x32x32", "8x16x16", "1", "1", "0", "tiled", "2x8x8", 16),
    ("3d-tiled-strided", "16x32x32", "8x16x16", "4x8x8", "1", "0", "tiled", "2x8x8", 16),
    ("3d-tiled-blocked", "16x32x32", "8x16x16", "8x16x16", "1", "0", "tiled", "2x8x8", 16),
    ("flux-tiled-strided", "256x256", "80x80", "16x16", "1", "0", "tiled", "16x8", 4),
    ("flux-tiled-na", "256x256", "80x80", "1", "1", "0", "tiled", "16x8", 4),
    ("1d-na-512", "32768", "512", "1", "1", "0", "row_major", "", 8),
    ("1d-dilated", "32768", "1024", "1", "4", "0", "row_major", "", 8),
    ("1d-causal", "32768", "2048", "1", "1", "1", "row_major", "", 8),
    ("2d-rm-strided", "128x128", "32x32", "8x8", "1", "0", "row_major", "", 16),
    ("2d-tiled-na-64", "128x128", "64x64", "1", "1", "0", "tiled", "8x16", 16),
    ("2d-rm-na-64", "128x128", "64x64", "1", "1", "0", "row_major", "", 16),
    ("2d-tiled-odd", "128x128", "24x40", "1", "1", "0", "tiled", "16x8", 16),
    ("3d-tiled-na-small", "16x32x32", "4x8x8", "1", "1", "0", "tiled", "2x8x8", 16),
    ("3d-rm-strided", "16x32x32", "8x16x16", "4x8x8", "1", "0", "row_major", "", 16),
    ("3d-tiled-4x4x8", "16x32x32", "8x16x16", "1", "1", "0", "tiled", "4x4x8", 16),
    ("2d-causal-tiled", "128x128", "32x32", "1", "1", "0x1", "tiled", "8x16", 16),
]

#: Tiny cases of ``--dry-run`` (CPU, eager): one per dimensionality and layout.
DRY_CASES: list[tuple] = [
    ("dry-1d", "256", "64", "16", "1", "0", "row_major", "", 2),
    ("dry-2d-tiled", "16x16", "8x8", "1", "1", "0", "tiled", "4x8", 2),
    ("dry-3d-rm", "4x8x8", "2x4x4", "2x2x2", "1", "0", "row_major", "", 2),
]

OUT_NAME = "gna_flex_h100.json"


def config(case: tuple) -> GNAConfig:
    _, grid, window, stride, dilation, causal, layout, tile, _ = case
    return GNAConfig.parse(grid, window, stride, dilation, causal, layout, tile or None)


# ----------------------------------------------------------------------------- measure
def _time_ms(fn, reps: int, warmup: int, cuda: bool) -> float:
    import torch
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(cases: list[tuple], out: Path, reps: int, budget_s: float, dry_run: bool) -> dict:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    cuda = torch.cuda.is_available() and not dry_run
    dtype = torch.bfloat16 if cuda else torch.float32
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    flex = torch.compile(flex_attention, dynamic=False) if cuda else flex_attention
    block = BLOCK if cuda else 16
    warmup = 3 if cuda else 1
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)",
        "torch": torch.__version__, "block": [block, block], "head_dim": HEAD_DIM,
        "dtype": str(dtype).replace("torch.", ""), "reps": reps, "cases": [], "skipped": []}
    start = time.perf_counter()
    dense_cache: dict[tuple, tuple[float, float]] = {}
    for i, case in enumerate(cases):
        name = case[0]
        if time.perf_counter() - start > budget_s:
            result["skipped"].append(name)
            print(f"[{i + 1}/{len(cases)}] {name}: skipped (time budget {budget_s:.0f} s)",
                  flush=True)
            continue
        try:
            row = _measure_case(case, i, flex, block, reps, warmup, cuda, dense_cache)
        except Exception as exc:   # one failing case (compile, memory) must not lose the rest
            result["skipped"].append(name)
            print(f"[{i + 1}/{len(cases)}] {name}: failed: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            continue
        result["cases"].append(row)
        print(f"[{i + 1}/{len(cases)}] {name}: sparse {row['sparse_ms']:.3f} ms, dense flex "
              f"{row['dense_flex_ms']:.3f} ms (x{row['dense_flex_ms'] / row['sparse_ms']:.2f}), "
              f"sdpa {row['sdpa_ms']:.3f} ms, permute {row['permute_ms']:.3f} ms, tiles "
              f"{row['blockmask_full']}+{row['blockmask_partial']} (ours {row['ours_full']}+"
              f"{row['ours_partial']}), compile {row['compile_s']:.1f} s, "
              f"{time.perf_counter() - start:.0f} s total", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
    return result


def _measure_case(case: tuple, index: int, flex, block: int, reps: int, warmup: int,
                  cuda: bool, dense_cache: dict) -> dict[str, Any]:
    """One case's times and tile counts (``measure``)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask

    from workloads.sparse_attention import from_layout, to_layout

    name, heads = case[0], case[-1]
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    cfg = config(case)
    n = cfg.tokens
    gen = torch.Generator(device=device).manual_seed(index)
    q, k, v = (torch.randn(1, heads, n, HEAD_DIM, device=device, dtype=dtype,
                           generator=gen) for _ in range(3))
    t0 = time.perf_counter()
    bm = create_block_mask(flex_mask_mod(cfg), None, None, n, n, device=device,
                           BLOCK_SIZE=(block, block))
    mask_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    flex(q, k, v, block_mask=bm)
    if cuda:
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    sparse_ms = _time_ms(lambda: flex(q, k, v, block_mask=bm), reps, warmup, cuda)
    key = (n, heads)
    if key not in dense_cache:
        dense_cache[key] = (_time_ms(lambda: flex(q, k, v), reps, warmup, cuda),
                            _time_ms(lambda: F.scaled_dot_product_attention(q, k, v),
                                     reps, warmup, cuda))
    dense_flex_ms, sdpa_ms = dense_cache[key]
    permute_ms = 0.0
    if cfg.permutes:
        permute_ms = _time_ms(lambda: (to_layout(q, cfg, True), to_layout(k, cfg),
                                       to_layout(v, cfg), from_layout(q, cfg)),
                              reps, warmup, cuda)
    ours = tile_counts(cfg, block, block)
    return {"name": name, **cfg.to_dict(), "heads": heads, "tokens": n,
            "sparse_ms": sparse_ms, "dense_flex_ms": dense_flex_ms, "sdpa_ms": sdpa_ms,
            "permute_ms": permute_ms, "compile_s": compile_s, "block_mask_s": mask_s,
            "blockmask_full": int(bm.full_kv_num_blocks.sum()),
            "blockmask_partial": int(bm.kv_num_blocks.sum()),
            "ours_full": ours.full, "ours_partial": ours.partial}


# ----------------------------------------------------------------------------- compare
def predict(row: dict, block: int = BLOCK, hw: dict | None = None,
            accelerator: str = "gpu:h200",
            overheads: dict | None = None) -> dict[str, float]:
    """Predicted times (s) of one measured case on ``accelerator`` with ``block`` x ``block``
    tiles: the sparse flex kernel, the dense flex kernel (the same kernel visiting every tile,
    unmasked), SDPA's dense attention, and the token permute. ``overheads``: the flex kernel's
    (default: the fitted ones of ``accelerators/calibration/flex_attention.json``)."""
    from accelerators.gpu_sparse_attention import flex_overheads, sparse_attention_time
    from accelerators.registry import make_accelerator
    from workloads.build import build_workload
    from workloads.sparse_attention import with_gna_pattern

    gpu = make_accelerator(accelerator, {"attention_block_q": block, "attention_block_kv": block,
                                        "attention_mask_policy": "partial_tiles", **(hw or {})})
    arch = {k: ("x".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()
            if k in ("grid", "window", "stride", "dilation", "layout", "tile", "q_tile")}
    arch["causal"] = "x".join("1" if c else "0" for c in row["causal"])
    w = build_workload("gna", arch={**arch, "heads": row["heads"], "head_dim": HEAD_DIM})
    op = next(o for o in w.ops if o.kind == "sparse_attention")
    full = with_gna_pattern(w, window=arch["grid"], stride="1", dilation="1",
                            causal="x".join("0" for _ in row["causal"]))
    dense_op = next(o for o in full.ops if o.kind == "sparse_attention")
    over = flex_overheads() if overheads is None else overheads

    def flex_s(o) -> float:
        return sparse_attention_time(gpu.model, o.attrs, o.dtype, block, block, "partial_tiles",
                                     gpu.hw.peak_fp32_flops / 2, over).latency_s
    n = row["tokens"]
    sdpa = build_workload("sdpa", arch={"b": 1, "h": row["heads"], "sq": n, "skv": n,
                                        "d": HEAD_DIM, "causal": False,
                                        "kv_heads": row["heads"]})
    return {"sparse_s": flex_s(op), "dense_s": flex_s(dense_op),
            "sdpa_s": gpu.cost(sdpa.ops[0]).latency_s,
            "permute_s": sum(gpu.cost(o).latency_s for o in w.ops if o is not op)}


def fit_split(cases: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fit, held out): the even-numbered measured cases and the odd-numbered ones."""
    return cases[0::2], cases[1::2]


def fit(path: Path, out: Path | None = None) -> dict[str, Any]:
    """Fit the flex overheads on :func:`fit_split`'s first half of ``path``'s cases (least
    squares on log predicted / measured speed-up over the dense flex kernel, bounds >= 0),
    report the held-out half, write ``out`` (default the shipped calibration)."""
    import numpy as np
    from scipy.optimize import least_squares

    from accelerators.gpu_sparse_attention import FLEX_OVERHEADS_FILE, OVERHEAD_KEYS

    data = json.loads(path.read_text())
    accelerator = gpu_of(data["device"])
    fit_rows, held = fit_split(data["cases"])
    scale = 1e-8   # seconds; the solver works on overheads in units of 10 ns

    def errors(x, rows):
        over = dict(zip(OVERHEAD_KEYS, np.asarray(x) * scale))
        out = []
        for row in rows:
            p = predict(row, data["block"][0], accelerator=accelerator, overheads=over)
            out.append(math.log((p["dense_s"] / p["sparse_s"])
                                / (row["dense_flex_ms"] / row["sparse_ms"])))
        return np.array(out)

    sol = least_squares(errors, x0=np.full(len(OVERHEAD_KEYS), 1.0), args=(fit_rows,),
                        bounds=(0.0, np.inf))
    overheads = {k: float(v * scale) for k, v in zip(OVERHEAD_KEYS, sol.x)}

    def median_abs(rows):
        return statistics.median(abs(math.exp(e) - 1) for e in errors(sol.x, rows))
    result = {"template": "gpu", "kernel": "flex", "overheads": overheads,
              "source": {"measurements": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT)
                         else str(path), "device": data["device"], "torch": data["torch"],
                         "fit_cases": [r["name"] for r in fit_rows],
                         "held_out_cases": [r["name"] for r in held],
                         "command": "python benchmarks/gna_flex_attention.py fit "
                                    + (str(path.relative_to(ROOT))
                                       if path.is_relative_to(ROOT) else str(path))},
              "median_abs_error": {"fit": median_abs(fit_rows), "held_out": median_abs(held)}}
    target = out or FLEX_OVERHEADS_FILE
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


def gpu_of(device: str) -> str:
    """The ``gpu`` preset of a measured device name (:data:`accelerators.gpu.DEVICE_PRESETS`);
    a dry run's CPU rows are costed on ``gpu:h200``."""
    from accelerators.gpu import DEVICE_PRESETS
    if device.startswith("cpu"):
        return "gpu:h200"
    if device not in DEVICE_PRESETS:
        raise SystemExit(f"no gpu preset for the measured device {device!r}")
    return f"gpu:{DEVICE_PRESETS[device]}"


def compare(path: Path, overheads: dict | None = None) -> dict[str, Any]:
    """Predicted against measured speed-up over the dense flex kernel for every case, the
    median |error| over all, over the fitted and over the held-out cases."""
    data = json.loads(path.read_text())
    accelerator = gpu_of(data["device"])
    fitted = {r["name"] for r in fit_split(data["cases"])[0]}
    rows, errors = [], {"fit": [], "held_out": []}
    print(f"{data['device']} ({accelerator}), torch {data['torch']}; speed-up over the dense "
          "flex kernel (* = a case the flex overheads were fitted on)")
    print(f"{'case':23s} {'measured':>9s} {'predicted':>9s} {'error':>7s} {'vs sdpa':>8s} "
          f"{'permute ms meas/pred':>21s} tiles")
    for row in data["cases"]:
        p = predict(row, data["block"][0], accelerator=accelerator, overheads=overheads)
        measured = row["dense_flex_ms"] / row["sparse_ms"]
        predicted = p["dense_s"] / p["sparse_s"]
        err = predicted / measured - 1
        errors["fit" if row["name"] in fitted else "held_out"].append(abs(err))
        exact = (row["blockmask_full"], row["blockmask_partial"]) == (row["ours_full"],
                                                                      row["ours_partial"])
        rows.append({"name": row["name"], "measured": measured, "predicted": predicted,
                     "error": err, "tiles_exact": exact, "fitted": row["name"] in fitted})
        mark = "*" if row["name"] in fitted else " "
        print(f"{row['name']:22s}{mark} {measured:9.2f} {predicted:9.2f} {err:+7.1%} "
              f"{row['sdpa_ms'] / row['sparse_ms']:8.2f} "
              f"{row['permute_ms']:10.3f}/{p['permute_s'] * 1e3:<10.3f} "
              f"{'exact' if exact else 'DIFFER'}")
    every = errors["fit"] + errors["held_out"]
    median = statistics.median(every) if every else math.nan
    held = statistics.median(errors["held_out"]) if errors["held_out"] else math.nan
    print(f"median |error| of the predicted speed-up: {median:.1%} over {len(every)} cases; "
          f"held out {held:.1%} over {len(errors['held_out'])}")
    return {"accelerator": accelerator, "rows": rows, "median_abs_error": median,
            "held_out_median_abs_error": held}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, default=None,
                   help=f"JSON to write (default $OUT/{OUT_NAME}, else ./{OUT_NAME})")
    m.add_argument("--reps", type=int, default=10)
    m.add_argument("--budget-s", type=float, default=330.0,
                   help="skip the remaining cases after this many seconds")
    m.add_argument("--dry-run", action="store_true", help="tiny cases on the CPU")
    c = sub.add_parser("compare")
    c.add_argument("path", type=Path, nargs="?",
                   default=ROOT / "tests" / "data" / OUT_NAME)
    f = sub.add_parser("fit")
    f.add_argument("path", type=Path, nargs="?", default=ROOT / "tests" / "data" / OUT_NAME)
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        out = args.out or Path(os.environ.get("OUT", ".")) / OUT_NAME
        cases = DRY_CASES if args.dry_run else CASES
        measure(cases, out, args.reps if not args.dry_run else 2, args.budget_s, args.dry_run)
        print(f"wrote {out}")
    elif args.cmd == "fit":
        fit(args.path)
    else:
        compare(args.path)


if __name__ == "__main__":
    main()
