"""Why Hugging Face GPT-2's batched decode is slower on a GPU than its shape says: kernel by
kernel, against Llama-shaped models, with each KV-cache update.

Measure (one CUDA GPU, torch + transformers only, random bf16 weights, no network; ~2 min;
it needs ``benchmarks/hf_models.py`` beside it)::

    python3 benchmarks/hf_decode_profile.py --out $OUT/hf_decode_profile.json
    python3 benchmarks/hf_decode_profile.py --dry-run --out /tmp/p.json     # CPU, tiny shapes

Rows: decode steps of one token per sequence at batch 1, 4, 16, 64 onto ``--context`` cached
tokens, for

* ``gpt2`` — GPT-2 small [R openai-community/gpt2 config.json: 12 layers, 768 wide, 12 heads,
  vocab 50257];
* ``llama-gpt2dims`` — a Llama with GPT-2 small's dims (12 layers, 768, 12 heads and 12 KV
  heads, FFN 3072, same vocab): the same work in another family's code, so a gap that GPT-2
  has and this one lacks is the family's implementation, not its shape;
* ``llama-1b`` — TinyLlama-1.1B's dims [R TinyLlama/TinyLlama-1.1B config.json];

each with the KV-cache updates ``dynamic`` (transformers' ``DynamicCache``: ``torch.cat`` of the
whole cache every step, ``kv_update concat``), ``static`` (``StaticCache``: ``index_copy_`` of
the new token, ``in_place``) and, for GPT-2, ``dynamic-contiguous`` (the dynamic cache fed
``.contiguous()`` copies of the new key and value; GPT-2 slices them out of its fused
``c_attn`` output, so they are strided views).

Per row: the device time of a step from CUDA events (median), and from ``torch.profiler`` the
kernel table (every kernel name: calls and device time per step) and the ATen ops by input
shapes with their device time per step. ``micro``: ``torch.cat([cache, new], dim=-2)`` at
GPT-2's shapes with the new entry contiguous or a strided view, and a contiguous copy of the
same bytes (the achieved bandwidth of each, for the cost model's copy efficiency).

The JSON is written after every row; a failing row records its error and the run goes on.

Compare (here; no GPU): every row's kernel time (the profiler's sum) against the project's
capture of the same config and step (``--hf-config`` semantics: ``concat`` for the dynamic
cache, ``in_place`` over all ``max_cache_len`` slots for the static one; the contiguous variant
captured with the same patch) simulated on the measured GPU's preset (runtime ``kernels``)::

    python benchmarks/hf_decode_profile.py --compare tests/data/hf_decode_profile_h200.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))   # hf_models, beside this script

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12,
        "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
MODELS: dict[str, dict[str, Any]] = {
    "gpt2": GPT2,
    "llama-gpt2dims": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                       "num_hidden_layers": 12, "hidden_size": 768, "intermediate_size": 3072,
                       "num_attention_heads": 12, "num_key_value_heads": 12,
                       "vocab_size": 50257, "max_position_embeddings": 1024,
                       "hidden_act": "gelu_pytorch_tanh", "mlp_bias": True,
                       "attention_bias": True},
    "llama-1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                 "num_hidden_layers": 22, "hidden_size": 2048, "intermediate_size": 5632,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
}
TINY = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "num_hidden_layers": 2,
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
CACHES = {"gpt2": ("dynamic", "dynamic-contiguous", "static"),
          "llama-gpt2dims": ("dynamic", "static"), "llama-1b": ("dynamic", "static")}
BATCHES = (1, 4, 16, 64)
#: Decode steps a static cache holds beyond the context (``hf_models.STATIC_SLACK``).
STATIC_SLACK = 64


def build(torch, cfg: dict[str, Any], device: str, tiny: bool):
    """The model with random bf16 weights (``benchmarks/hf_models.py``'s builder), at
    :data:`TINY` dims for the dry run."""
    from hf_models import build as build_hf
    cfg = dict(cfg)
    if tiny:
        cfg.update({k: v for k, v in TINY.items() if k in cfg})
        if "num_key_value_heads" in cfg:
            cfg["num_key_value_heads"] = min(cfg["num_key_value_heads"], 4)
    return build_hf(torch, cfg, device)


def make_cache(torch, config, kind: str, batch: int, context: int, device: str):
    """A cache of ``kind`` holding ``context`` random tokens per layer."""
    from hf_models import make_cache as make
    return make(torch, config, "static" if kind == "static" else "dynamic", batch, context,
                device)[0]


class contiguous_updates:
    """Within the block, ``DynamicLayer.update`` gets contiguous copies of the new entries."""

    def __enter__(self):
        from transformers.cache_utils import DynamicLayer
        self.cls, self.orig = DynamicLayer, DynamicLayer.update

        def update(layer, key_states, value_states, *args, **kwargs):
            return self.orig(layer, key_states.contiguous(), value_states.contiguous(),
                             *args, **kwargs)
        DynamicLayer.update = update
        return self

    def __exit__(self, *exc):
        self.cls.update = self.orig


def device_times(torch, fn, reps: int, cuda: bool) -> list[float]:
    """Device time of ``fn()`` per call from CUDA events (wall time on the CPU), s."""
    out = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e-3)
        else:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return out


def kernel_tables(torch, fn, reps: int, cuda: bool) -> dict[str, Any]:
    """Kernels (name -> calls, device s per step) and ATen ops by input shapes (device s per
    step), from ``torch.profiler`` over ``reps`` calls."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=True) as prof:
        for _ in range(reps):
            fn()
        if cuda:
            torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    total = 0.0
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            dur = ev.time_range.elapsed_us() * 1e-6
            total += dur
            k = kernels.setdefault(ev.name[:200], [0.0, 0.0])
            k[0] += 1 / reps
            k[1] += dur / reps
    ops = []
    for ev in prof.key_averages(group_by_input_shape=True):
        if not ev.key.startswith("aten::"):
            continue
        dev_us = getattr(ev, "self_device_time_total", None)
        if dev_us is None:
            dev_us = getattr(ev, "self_cuda_time_total", 0.0)
        cpu_us = ev.self_cpu_time_total
        if dev_us or not cuda:
            ops.append({"op": ev.key, "shapes": str(ev.input_shapes)[:300],
                        "calls": ev.count / reps, "device_s": dev_us * 1e-6 / reps,
                        "cpu_s": cpu_us * 1e-6 / reps})
    ops.sort(key=lambda r: -(r["device_s"] or r["cpu_s"]))
    table = sorted(({"kernel": n, "calls": c, "device_s": s} for n, (c, s) in kernels.items()),
                   key=lambda r: -r["device_s"])
    return {"kernel_sum_s": total / reps if cuda else None, "kernels": table,
            "aten_ops": ops[:40]}


def measure_row(torch, model, config, name: str, cache_kind: str, batch: int, context: int,
                device: str, reps: int) -> dict[str, Any]:
    cuda = device == "cuda"
    rec: dict[str, Any] = {"model": name, "cache": cache_kind, "batch": batch,
                           "context": context,
                           "kv_update": "in_place" if cache_kind == "static" else "concat"}
    cache = make_cache(torch, config, cache_kind, batch, context, device)
    ids = torch.randint(0, config.vocab_size, (batch, 1), device=device)
    steps = {"n": 0}

    def step():
        steps["n"] += 1
        with torch.no_grad():
            return model(input_ids=ids, past_key_values=cache, use_cache=True)
    ctx = contiguous_updates() if cache_kind == "dynamic-contiguous" else None
    if ctx:
        ctx.__enter__()
    try:
        for _ in range(2):
            step()
        start = steps["n"]
        times = device_times(torch, step, reps, cuda)
        rec["step_s"] = statistics.median(times)
        rec["context_timed"] = context + start + reps / 2
        start = steps["n"]
        rec.update(kernel_tables(torch, step, max(2, reps // 2), cuda))
        rec["context_profiled"] = context + start + max(2, reps // 2) / 2
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    if cache_kind == "static":
        rec["max_cache_len"] = context + STATIC_SLACK
    return rec


def micro(torch, device: str, context: int, batches, reps: int, tiny: bool) -> list[dict]:
    """``torch.cat`` onto a cache with the new entry contiguous or strided, and a plain copy."""
    cuda = device == "cuda"
    heads, hd = (4, 16) if tiny else (12, 64)
    rows = []
    for b in batches:
        cache = torch.randn(b, heads, context, hd, device=device, dtype=torch.bfloat16)
        qkv = torch.randn(b, 1, 3 * heads * hd, device=device, dtype=torch.bfloat16)
        strided = qkv[..., heads * hd:2 * heads * hd].view(b, 1, heads, hd).transpose(1, 2)
        contig = strided.contiguous()
        moved = 2 * cache.numel() * cache.element_size()   # read the cache + write it again
        cases = {"cat contiguous": lambda: torch.cat([cache, contig], dim=-2),
                 "cat strided": lambda: torch.cat([cache, strided], dim=-2),
                 "copy (clone)": lambda: cache.clone()}
        for case, fn in cases.items():
            try:
                for _ in range(3):
                    fn()
                t = statistics.median(device_times(torch, fn, reps, cuda))
                rows.append({"case": case, "batch": b, "shape": list(cache.shape),
                             "new_contiguous": case != "cat strided", "bytes_moved": moved,
                             "time_s": t, "GBps": moved / t / 1e9 if t > 0 else None})
            except Exception as exc:
                rows.append({"case": case, "batch": b, "error": f"{type(exc).__name__}: {exc}"[:300]})
    return rows


def predict_rows(data: dict[str, Any], preset: str | None = None) -> list[dict[str, Any]]:
    """Measured vs predicted kernel time of every row of a measurement file (see the module
    docstring, "Compare")."""
    import warnings
    from accelerators.gpu import DEVICE_PRESETS, GPU
    from simulators.engine import simulate
    from workloads.hf import workload_from_hf_config
    preset = preset or DEVICE_PRESETS.get(data["device"].get("name", ""), "h200")
    design = GPU(preset)
    rows = []
    for rec in data["rows"]:   # this script's rows, or benchmarks/hf_models.py's decode rows
        if not rec.get("kernel_sum_s") or rec.get("phase", "decode") != "decode":
            continue
        cfg = data["models"][rec["model"]]
        static = rec["cache"] == "static"
        context = (rec["max_cache_len"] - 1) if static else int(round(
            rec.get("context_profiled") or rec["context_profile"]))
        patch = contiguous_updates() if rec["cache"] == "dynamic-contiguous" else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if patch:
                patch.__enter__()
            try:
                w = workload_from_hf_config(dict(cfg), phase="decode", batch=rec["batch"],
                                            context=context, use_cache=False,
                                            kv_update="in_place" if static else "concat")
            finally:
                if patch:
                    patch.__exit__(None, None, None)
        r = simulate(w, design)
        appends = {op.name for op in w.ops if op.attrs.get("kv_append")}
        cat_s = sum(o.duration_s for o in r.ops if o.name in appends)
        kernels = rec["kernels"] if isinstance(rec.get("kernels"), list) else [
            {"kernel": k, "device_s": t} for k, t in rec.get("top_kernels_s", {}).items()]
        measured_cat = sum(k["device_s"] for k in kernels if "CatArrayBatchedCopy" in k["kernel"])
        rows.append({"model": rec["model"], "cache": rec["cache"], "batch": rec["batch"],
                     "measured_s": rec["kernel_sum_s"], "predicted_s": r.latency_s,
                     "error": r.latency_s / rec["kernel_sum_s"] - 1,
                     "measured_cat_s": measured_cat, "predicted_cat_s": cat_s})
    return rows


def print_comparison(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':<15} {'cache':<19} {'b':>3} {'measured ms':>11} {'predicted ms':>12} "
          f"{'error':>7}  {'cat meas/pred ms':>17}")
    for r in rows:
        cat = (f"{r['measured_cat_s'] * 1e3:7.3f}/{r['predicted_cat_s'] * 1e3:.3f}"
               if r["predicted_cat_s"] is not None else "")
        print(f"{r['model']:<15} {r['cache']:<19} {r['batch']:>3} {r['measured_s'] * 1e3:>11.3f} "
              f"{r['predicted_s'] * 1e3:>12.3f} {r['error']:>+7.1%}  {cat:>17}")
    errs = sorted(abs(r["error"]) for r in rows)
    if errs:
        print(f"\n{len(rows)} rows: median |error| {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%}, "
              f"within 25 %: {sum(e <= 0.25 for e in errs)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", type=Path, help="a measurement file: print measured vs "
                    "predicted kernel time (needs the project, not a GPU)")
    ap.add_argument("--out")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=130.0)
    ap.add_argument("--models", nargs="*", choices=list(MODELS), help="only these models")
    args = ap.parse_args(argv)
    if args.compare:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print_comparison(predict_rows(json.loads(args.compare.read_text())))
        return 0
    if not args.out:
        ap.error("--out is required to measure")
    import torch
    import transformers
    cuda = not args.dry_run
    if cuda and not torch.cuda.is_available():
        print("error: needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    context = 16 if args.dry_run else args.context
    batches = (1,) if args.dry_run else BATCHES
    reps = 1 if args.dry_run else args.reps
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "dry_run": args.dry_run}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update({"name": props.name, "sms": props.multi_processor_count,
                     "cuda": torch.version.cuda})
    result: dict[str, Any] = {"device": info, "models": MODELS, "context": context,
                              "rows": [], "micro": [], "method": __doc__.split("\n\n")[1].strip()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        out.write_text(json.dumps(result, indent=1))
    print(f"device {info.get('name', 'cpu')}, torch {info['torch']}, transformers "
          f"{info['transformers']}", flush=True)
    t0 = time.monotonic()
    try:
        result["micro"] = micro(torch, device, context, batches, max(reps, 5), args.dry_run)
    except Exception as exc:
        result["micro_error"] = f"{type(exc).__name__}: {exc}"[:300]
    save()
    for name, cfg in MODELS.items():
        if args.models and name not in args.models:
            continue
        if time.monotonic() - t0 > args.budget_s:
            result.setdefault("skipped", []).append(name)
            continue
        try:
            model, config = build(torch, cfg, device, args.dry_run)
        except Exception as exc:
            result["rows"].append({"model": name, "error": f"build: {type(exc).__name__}: {exc}"[:300]})
            save()
            continue
        for cache_kind in CACHES[name]:
            for b in batches:
                if time.monotonic() - t0 > args.budget_s:
                    result.setdefault("skipped", []).append(f"{name} {cache_kind} b{b}")
                    continue
                t = time.monotonic()
                try:
                    rec = measure_row(torch, model, config, name, cache_kind, b, context,
                                      device, reps)
                except Exception as exc:
                    rec = {"model": name, "cache": cache_kind, "batch": b,
                           "error": f"{type(exc).__name__}: {exc}"[:300],
                           "trace": traceback.format_exc()[-1500:]}
                rec["row_s"] = time.monotonic() - t
                result["rows"].append(rec)
                save()
                print(f"{name:<15} {cache_kind:<19} b{b:<3} "
                      + (f"step {rec['step_s'] * 1e3:8.3f} ms  kernels "
                         f"{(rec['kernel_sum_s'] or 0) * 1e3:8.3f} ms" if "step_s" in rec
                         else rec["error"][:100]), flush=True)
                if cuda:
                    torch.cuda.empty_cache()
        del model
    result["total_s"] = time.monotonic() - t0
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
