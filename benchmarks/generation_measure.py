"""Batched generation on one real GPU: time to first token and time per output token of a
Llama-2-7B-shaped decoder, for comparison with ``api.generate``.

Measure (one CUDA GPU, torch only; ~1-2 minutes on an H200)::

    python3 benchmarks/generation_measure.py --out $OUT/generation_h200.json

For each (batch, input tokens, output tokens) point of :data:`POINTS` it builds the
Llama-2-7B shape (32 layers, hidden 4096, 32 heads, FFN 11008, vocab 32000
[R HF meta-llama/Llama-2-7b-hf config.json]) with random bf16 weights and a preallocated KV
cache (the stack of ``benchmarks/multi_gpu_measure.py`` at TP = 1), then runs one generation
as a serving engine does with a static cache:

* **prefill** of the whole batch's prompts in one eager forward — the time to first token
  (TTFT) of a statically batched request; median of ``--reps`` runs;
* **every decode step** of the generation, each step captured as its own CUDA graph (the
  cache slice grows by one token a step, so one graph per context length; captures are not
  timed) and replayed once, timed with CUDA events — the per-step time per output token
  (TPOT); the mean over the steps and the first and last steps are stored.

Results go to ``--out`` (JSON), progress is printed. ``--dry-run`` runs a tiny shape on the CPU
(eager steps, no graphs) to test the script.

Compare (here; no GPU)::

    python benchmarks/generation_measure.py --compare tests/data/generation_h100.json

prints ``api.generate("llama2-7b", ...)`` on the measured GPU's preset (runtime ``kernels``:
device time, what a CUDA-graph decode step and a device-bound prefill take) against every
point: TTFT, mean TPOT, first and last step, and the median |error| of TTFT and TPOT.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from multi_gpu_measure import TINY, build_stack, elapsed_s  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dse.calibrate.gpu_bench import capture_graph  # noqa: E402

#: The Llama-2-7B shape [R HF meta-llama/Llama-2-7b-hf config.json].
LLAMA2_7B = dict(d=4096, heads=32, kv_heads=32, ff=11008, vocab=32000)
LAYERS_7B = 32
#: (batch, input tokens, output tokens).
POINTS = [(1, 512, 128), (8, 1024, 128), (16, 2048, 64), (32, 512, 128), (32, 1024, 64)]
TINY_POINTS = [(1, 16, 4), (2, 8, 3)]


def measure_point(torch, F, fwd, shape, batch, input_len, output_len, reps, cuda) -> dict:
    """TTFT and every decode step's time of one generation (see the module doc)."""
    device = "cuda" if cuda else "cpu"
    prompt = torch.randint(0, shape["vocab"], (batch, input_len), device=device)
    for _ in range(2):
        fwd(prompt, 0)
    ttft = [elapsed_s(torch, lambda: fwd(prompt, 0), cuda) for _ in range(reps)]
    token = torch.randint(0, shape["vocab"], (batch, 1), device=device)
    steps = []
    for step in range(output_len - 1):      # the first output token comes from the prefill
        pos = input_len + step
        if cuda:
            g = capture_graph(torch, lambda p=pos: fwd(token, p))
            steps.append(elapsed_s(torch, g.replay, True))
            del g
        else:
            steps.append(elapsed_s(torch, lambda p=pos: fwd(token, p), False))
    return {"batch": batch, "input_len": input_len, "output_len": output_len,
            "ttft_s": statistics.median(ttft), "ttft_runs_s": ttft,
            "tpot_mean_s": statistics.fmean(steps), "tpot_first_s": steps[0],
            "tpot_last_s": steps[-1], "tpot_steps_s": steps,
            "e2e_s": statistics.median(ttft) + sum(steps)}


def run(args) -> dict:
    import torch
    import torch.nn.functional as F

    cuda = torch.cuda.is_available() and not args.dry_run
    shape, layers = (TINY, 2) if args.dry_run else (LLAMA2_7B, args.layers)
    points = TINY_POINTS if args.dry_run else POINTS
    dtype = torch.bfloat16 if cuda else torch.float32
    device = torch.device("cuda" if cuda else "cpu")
    t0 = time.time()
    result = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch":
              torch.__version__, "dtype": str(dtype).replace("torch.", ""), "shape": shape,
              "layers": layers, "dry_run": args.dry_run, "decode": "cuda_graph_per_step"
              if cuda else "eager", "points": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    max_batch = max(b for b, _, _ in points)
    max_len = max(i + o for _, i, o in points)
    with torch.no_grad():
        fwd = build_stack(torch, F, None, shape, layers, 1, 0, max_batch, max_len, device,
                          dtype)
        for batch, input_len, output_len in points:
            t = time.time()
            row = measure_point(torch, F, fwd, shape, batch, input_len, output_len,
                                args.reps, cuda)
            result["points"].append(row)
            print(f"b={batch:<3} in={input_len:<5} out={output_len:<4} TTFT "
                  f"{row['ttft_s'] * 1e3:9.3f} ms  TPOT {row['tpot_mean_s'] * 1e3:8.3f} ms "
                  f"(first {row['tpot_first_s'] * 1e3:.3f}, last {row['tpot_last_s'] * 1e3:.3f})"
                  f"  {time.time() - t:.0f} s", flush=True)
            result["wall_s"] = time.time() - t0
            out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out} ({time.time() - t0:.0f} s)")
    return result


def compare(path: str) -> dict:
    """``api.generate`` against every measured point (see the module doc)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dse import api
    data = json.loads(Path(path).read_text())
    from gna_flex_attention import gpu_of
    gpu = gpu_of(data["device"])
    shape = data["shape"]
    arch = {"n_layer": data["layers"], "d_model": shape["d"], "n_head": shape["heads"],
            "n_kv_head": shape["kv_heads"], "d_ff": shape["ff"], "vocab_size": shape["vocab"]}
    rows = []
    for m in data["points"]:
        g = api.generate("llama2-7b", input_len=m["input_len"], output_len=m["output_len"],
                         batch=m["batch"], accelerator=gpu, arch=arch,
                         dtype={"bfloat16": "bf16", "float16": "fp16"}.get(data["dtype"], "fp32"))
        rows.append({"batch": m["batch"], "input_len": m["input_len"],
                     "output_len": m["output_len"],
                     "ttft_measured_s": m["ttft_s"], "ttft_model_s": g.ttft_s,
                     "ttft_error": g.ttft_s / m["ttft_s"] - 1,
                     "tpot_measured_s": m["tpot_mean_s"], "tpot_model_s": g.tpot_s,
                     "tpot_error": g.tpot_s / m["tpot_mean_s"] - 1})
    med = {k: statistics.median(abs(r[f"{k}_error"]) for r in rows) for k in ("ttft", "tpot")}
    return {"device": data["device"], "accelerator": gpu, "rows": rows,
            "median_abs_error": med}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="JSON", help="compare a measurement with the model")
    ap.add_argument("--out", default="generation_h200.json", help="output JSON")
    ap.add_argument("--layers", type=int, default=LAYERS_7B, help="decoder layers")
    ap.add_argument("--reps", type=int, default=5, help="timed prefill runs per point")
    ap.add_argument("--dry-run", action="store_true", help="tiny shape on the CPU")
    args = ap.parse_args(argv)
    if args.compare:
        res = compare(args.compare)
        print(f"{res['device']} ({res['accelerator']}): measured / model")
        for r in res["rows"]:
            print(f"b={r['batch']:<3} in={r['input_len']:<5} out={r['output_len']:<4} TTFT "
                  f"{r['ttft_measured_s'] * 1e3:8.2f} / {r['ttft_model_s'] * 1e3:8.2f} ms "
                  f"{100 * r['ttft_error']:+6.1f}%   TPOT {r['tpot_measured_s'] * 1e3:7.3f} / "
                  f"{r['tpot_model_s'] * 1e3:7.3f} ms {100 * r['tpot_error']:+6.1f}%")
        print("median |error|: " + ", ".join(f"{k.upper()} {100 * v:.1f}%"
                                             for k, v in res["median_abs_error"].items()))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
