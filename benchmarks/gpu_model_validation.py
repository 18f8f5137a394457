"""Whole-model validation of the ``gpu`` template: measured GPU kernel time per forward pass
against ``dse simulate MODEL --accelerator gpu:h200``.

Two steps, on two machines:

* ``measure`` (a machine with a CUDA GPU and torch; imports only torch, the zoo and the
  standard library)::

      python3 benchmarks/gpu_model_validation.py measure \
          --out tests/data/h200_model_kernel_times.json

  Each zoo model is built in bf16 on the GPU with random weights (random KV cache too), warmed
  up, then run ``--reps`` times under the torch profiler: the measured time is the sum of the
  durations of every GPU activity (kernels, memcpy, memset) per forward pass, so host launch
  overhead is excluded. The forward is also captured in a CUDA graph and its replay timed with
  CUDA events (back-to-back kernels, no host overhead, inter-kernel gaps included). For
  decode, the time of the ``torch.cat`` kernels that append to the KV cache is recorded apart
  (the zoo's eager decode copies the whole cache; the simulator, like a serving stack, appends
  in place).

* ``compare`` (here, with the project installed)::

      python benchmarks/gpu_model_validation.py compare tests/data/h200_model_kernel_times.json

  simulates every measured row with :func:`dse.api.simulate` and prints the table and the
  median absolute error.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (model, phase, batch, seq, context) rows measured; ``seq`` for prefill/encoders, ``context``
#: (cached tokens) for decode.
ROWS: list[tuple[str, str, int, int, int]] = [
    ("gpt2", "prefill", 1, 512, 0),
    ("gpt2", "prefill", 8, 512, 0),
    ("gpt2", "decode", 1, 1, 512),
    ("gpt2", "decode", 16, 1, 512),
    ("llama2-7b", "prefill", 1, 512, 0),
    ("llama2-7b", "prefill", 4, 2048, 0),
    ("llama2-7b", "decode", 1, 1, 1024),
    ("llama2-7b", "decode", 16, 1, 1024),
    ("bert-base", "forward", 1, 128, 0),
    ("bert-base", "forward", 32, 128, 0),
    ("resnet50", "forward", 1, 0, 0),
    ("resnet50", "forward", 32, 0, 0),
    ("vit-b16", "forward", 1, 0, 0),
    ("vit-b16", "forward", 32, 0, 0),
]


def _label(row) -> str:
    model, phase, batch, seq, context = row
    extra = f" ctx{context}" if phase == "decode" else (f" s{seq}" if seq else "")
    return f"{model} {phase} b{batch}{extra}"


# --------------------------------------------------------------------------------------------
# measure (GPU machine)


def _prepare(torch, row):
    from workloads.zoo import get_model

    model_name, phase, batch, seq, context = row
    spec = get_model(model_name)
    arch = spec.resolve_arch({})
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # parameters are created in bf16, on the GPU
    try:
        with torch.device("cuda"):
            model = spec.build(arch)
            args, kwargs = spec.inputs(arch, phase, batch, seq, context)
    finally:
        torch.set_default_dtype(old)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()

    def to_gpu(x, randomise=False):
        if isinstance(x, torch.Tensor):
            x = x.to("cuda")
            if x.is_floating_point():
                x = torch.randn_like(x, dtype=torch.bfloat16) if randomise else x.bfloat16()
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(to_gpu(v, randomise) for v in x)
        if isinstance(x, dict):
            return {k: to_gpu(v, randomise or k == "kv_cache") for k, v in x.items()}
        return x

    return model, to_gpu(tuple(args)), to_gpu(dict(kwargs))


def _profile(torch, model, args, kwargs, reps: int, context: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            model(*args, **kwargs)
        torch.cuda.synchronize()
    device_total = 0.0
    kernels = 0
    by_kernel: dict[str, float] = {}
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            dur = ev.time_range.elapsed_us() * 1e-6
            device_total += dur
            kernels += 1
            by_kernel[ev.name[:120]] = by_kernel.get(ev.name[:120], 0.0) + dur
    by_op: dict[str, float] = {}
    for ev in prof.events():
        ks = getattr(ev, "kernels", None) or []
        if not ks or str(getattr(ev, "device_type", "")).endswith("CUDA"):
            continue
        dur = sum(k.duration for k in ks) * 1e-6
        by_op[ev.name] = by_op.get(ev.name, 0.0) + dur
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])[:12]
    return {"kernel_sum_s": device_total / reps, "kernels_per_forward": kernels / reps,
            "kv_cat_s": _kv_cat_time(torch, kwargs.get("kv_cache")) if context else 0.0,
            "by_op_s": {k: v / reps for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])},
            "top_kernels_s": {k: v / reps for k, v in top}}


def _kv_cat_time(torch, cache, reps: int = 10) -> float:
    """Kernel time per forward of the decode step's KV-cache appends: ``torch.cat`` of each
    layer's cached K and V [b, kv_heads, context, d] with one new token, as the zoo's eager
    decode runs it (timed under the profiler, the same way as the forward)."""
    from torch.profiler import ProfilerActivity, profile

    if not cache:
        return 0.0
    k = cache[0][0]
    new = torch.randn(k.shape[0], k.shape[1], 1, k.shape[3], device=k.device, dtype=k.dtype)
    for _ in range(3):
        torch.cat([k, new], dim=2)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            torch.cat([k, new], dim=2)
        torch.cuda.synchronize()
    total = sum(ev.time_range.elapsed_us() * 1e-6 for ev in prof.events()
                if str(getattr(ev, "device_type", "")).endswith("CUDA"))
    return total / reps * 2 * len(cache)


def _graph_time(torch, model, args, kwargs, reps: int = 10) -> float | None:
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(*args, **kwargs)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        del graph
        return statistics.median(times)
    except Exception as exc:  # capture can fail on some models; the profiler number stands
        print(f"  graph capture failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        torch.cuda.synchronize()
        return None


def measure(out: str, rows=ROWS, reps: int = 5) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        print("error: measuring needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        raise SystemExit(2)
    props = torch.cuda.get_device_properties(0)
    result: dict[str, Any] = {
        "device": {"name": props.name, "sms": props.multi_processor_count,
                   "torch": torch.__version__, "cuda": torch.version.cuda},
        "method": "sum of GPU activity durations per forward from torch.profiler "
                  f"(mean of {reps} forwards after 3 warm-ups), bf16, random weights; "
                  "graph_s: CUDA-graph replay of one forward timed with CUDA events (median of "
                  "10)",
        "rows": []}
    for row in rows:
        model_name, phase, batch, seq, context = row
        t0 = time.monotonic()
        rec: dict[str, Any] = {"model": model_name, "phase": phase, "batch": batch,
                               "seq": seq, "context": context, "dtype": "bf16"}
        try:
            model, args, kwargs = _prepare(torch, row)
            with torch.no_grad():
                for _ in range(3):
                    model(*args, **kwargs)
                torch.cuda.synchronize()
                rec.update(_profile(torch, model, args, kwargs, reps, context))
                rec["graph_s"] = _graph_time(torch, model, args, kwargs)
            del model, args, kwargs
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        torch.cuda.empty_cache()
        rec["wall_s"] = round(time.monotonic() - t0, 1)
        result["rows"].append(rec)
        print(f"{_label(row):<34} kernels {rec.get('kernel_sum_s', float('nan')) * 1e3:9.3f} ms"
              f"  graph {(rec.get('graph_s') or float('nan')) * 1e3:9.3f} ms"
              f"  kv-cat {rec.get('kv_cat_s', 0) * 1e3:7.3f} ms  ({rec['wall_s']} s)"
              + (f"  {rec['error']}" if "error" in rec else ""), flush=True)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


# --------------------------------------------------------------------------------------------
# compare (here)


def compare(path: str, accelerator: str = "gpu:h200") -> dict[str, Any]:
    """Simulate every measured row; returns rows with errors and the median absolute errors."""
    from dse import api
    from workloads import ir

    data = json.loads(Path(path).read_text())
    out_rows = []
    for rec in data["rows"]:
        if "kernel_sum_s" not in rec:
            continue
        kw = {"phase": rec["phase"], "batch": rec["batch"], "dtype": rec.get("dtype", "bf16")}
        if rec["phase"] == "decode":
            kw["context"] = rec["context"]
        elif rec["seq"]:
            kw["seq"] = rec["seq"]
        workload = api.workload(rec["model"], **kw)
        result = api.simulate(workload, accelerator=accelerator)
        design = api.accelerator(accelerator)
        kv_append_sim = sum(design.cost(op).latency_s for op in workload.ops
                            if op.kind == ir.DATA_MOVEMENT and op.attrs.get("kv_append"))
        measured = rec["kernel_sum_s"]
        adjusted = measured - rec.get("kv_cat_s", 0.0) + (kv_append_sim if rec.get("kv_cat_s")
                                                           else 0.0)
        row = {"row": _label((rec["model"], rec["phase"], rec["batch"], rec["seq"],
                              rec["context"])),
               "measured_s": measured, "graph_s": rec.get("graph_s"),
               "kv_cat_s": rec.get("kv_cat_s", 0.0), "measured_inplace_s": adjusted,
               "simulated_s": result.latency_s,
               "error": result.latency_s / measured - 1.0,
               "error_inplace": result.latency_s / adjusted - 1.0,
               "kernels": rec.get("kernels_per_forward"), "ops": len(workload)}
        out_rows.append(row)
    errs = [abs(r["error"]) for r in out_rows]
    errs_in = [abs(r["error_inplace"]) for r in out_rows]
    summary = {"rows": out_rows,
               "median_abs_error": statistics.median(errs) if errs else math.nan,
               "median_abs_error_inplace_kv": statistics.median(errs_in) if errs_in else math.nan}
    return summary


def print_table(summary: dict[str, Any], markdown: bool = False) -> None:
    if markdown:
        print("| model / phase | measured kernel sum (ms) | graph replay (ms) | KV-cache cat (ms) "
              "| simulated (ms) | error | error, in-place KV append |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for r in summary["rows"]:
        g = f"{r['graph_s'] * 1e3:.3f}" if r["graph_s"] else "-"
        if markdown:
            print(f"| {r['row']} | {r['measured_s'] * 1e3:.3f} | {g} | {r['kv_cat_s'] * 1e3:.3f} "
                  f"| {r['simulated_s'] * 1e3:.3f} | {r['error']:+.1%} "
                  f"| {r['error_inplace']:+.1%} |")
        else:
            print(f"{r['row']:<34} measured {r['measured_s'] * 1e3:9.3f} ms  graph {g:>9} ms  "
                  f"kv-cat {r['kv_cat_s'] * 1e3:7.3f}  simulated {r['simulated_s'] * 1e3:9.3f} ms"
                  f"  error {r['error']:+7.1%}  (in-place KV {r['error_inplace']:+7.1%})")
    print(f"median |error|: {summary['median_abs_error']:.1%}   with the KV append in place: "
          f"{summary['median_abs_error_inplace_kv']:.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure kernel time per forward on this GPU")
    m.add_argument("--out", required=True)
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--only", default="", help="comma-separated model names")
    c = sub.add_parser("compare", help="compare a measurement file against the simulator")
    c.add_argument("file")
    c.add_argument("--accelerator", default="gpu:h200")
    c.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd == "measure":
        rows = [r for r in ROWS if not args.only or r[0] in args.only.split(",")]
        measure(args.out, rows, args.reps)
        return 0
    print_table(compare(args.file, args.accelerator), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
