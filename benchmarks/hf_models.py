"""Whole Hugging Face models on a GPU: kernel time, eager wall time, CUDA-graph replay, generate.

Measure side (a machine with a CUDA GPU, torch and transformers; no internet: every model is
built from a config dict below with random bf16 weights)::

    python3 benchmarks/hf_models.py measure --out hf.json [--budget-s 200] [--device cpu --tiny]

Rows (:data:`ROWS`): GPT-2 small and a Llama-style 1B (TinyLlama dims) and 7B (Llama-2 dims);
prefill at 128-8192 tokens (no cache, as ``--hf-config`` captures it); decode steps at batch
1-64 with transformers' default ``DynamicCache`` (``torch.cat``: ``kv_update concat``) and with
a ``StaticCache`` (``index_copy_`` into a preallocated cache: ``in_place``; its attention reads
all ``max_cache_len`` slots, recorded as ``kv_len``); ``generate`` per token. Per row:

* ``kernel_sum_s`` — GPU activity (kernels, memcpy, memset) per call from ``torch.profiler``,
  the sum the ``kernels`` runtime predicts; ``kernels`` per call; ``aten_ops`` top-level ATen
  calls per call (what eager dispatches), by name;
* ``wall_s`` — host wall time of one call started on an idle GPU and synchronised after it
  (median of ``reps``): what the ``eager`` runtime predicts (Hugging Face ``generate`` also
  synchronises every step);
* ``graph_s`` / ``graph_wall_s`` — static-cache decode captured in a CUDA graph: device time of a
  replay (CUDA events) and host wall time of replay + sync (``cuda_graphs``);
* ``generate``: ``wall_per_token_s`` = (time of ``generate`` for 33 tokens - for 1) / 32.

A decode step appends to the cache, so the context grows by one per call; each measurement
records the mean context it ran at (``context_wall``, ``context_profile``). The JSON is written
after every row (a run cut short keeps what it measured) and holds each model's config.

Compare side: :func:`hf_workload` captures the same config and row with the project's capture
(prefill through ``workloads.hf``; decode through a wrapper that builds the ``DynamicCache``
from the ``kv_cache`` input), for ``benchmarks/gpu_baselines.py compare``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Model configs (Hugging Face ``config.json`` keys) [R: openai-community/gpt2 config.json;
#: TinyLlama/TinyLlama-1.1B config.json (positions raised to 8192 for the long prefills);
#: meta-llama/Llama-2-7b-hf config.json].
MODELS: dict[str, dict[str, Any]] = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12,
             "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
    "gpt2-8k": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12,
                "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 8192},
    "llama-1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                 "num_hidden_layers": 22, "hidden_size": 2048, "intermediate_size": 5632,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                 "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "llama-7b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                 "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
                 "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
}
#: Tiny versions for ``--tiny`` (the CPU dry run): same families, 2 layers, 64 wide.
TINY = {
    "gpt2": {**MODELS["gpt2"], "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512,
             "bos_token_id": 0, "eos_token_id": 0},
    "gpt2-8k": {**MODELS["gpt2-8k"], "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512,
                "bos_token_id": 0, "eos_token_id": 0},
    "llama-1b": {**MODELS["llama-1b"], "num_hidden_layers": 2, "hidden_size": 64,
                 "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 512},
    "llama-7b": {**MODELS["llama-7b"], "num_hidden_layers": 2, "hidden_size": 64,
                 "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 4,
                 "vocab_size": 512},
}

#: (model, phase, batch, seq or context, cache): prefill ``seq`` tokens without a cache;
#: decode one token onto ``context`` cached ones; generate ``context`` new tokens after a
#: 16-token prompt. Grouped by model (each model is built once).
ROWS: list[tuple[str, str, int, int, str | None]] = [
    ("gpt2", "prefill", 1, 128, None), ("gpt2", "prefill", 1, 512, None),
    ("gpt2", "prefill", 8, 512, None),
    *[("gpt2", "decode", b, 512, "dynamic") for b in (1, 4, 16, 64)],
    *[("gpt2", "decode", b, 512, "static") for b in (1, 16, 64)],
    ("gpt2", "generate", 1, 32, "dynamic"),
    *[("gpt2-8k", "prefill", 1, s, None) for s in (2048, 4096, 8192)],
    ("gpt2-8k", "prefill", 4, 2048, None),
    *[("llama-1b", "prefill", 1, s, None) for s in (512, 2048, 8192)],
    *[("llama-1b", "decode", b, 1024, "dynamic") for b in (1, 8, 32, 64)],
    *[("llama-1b", "decode", b, 1024, "static") for b in (1, 8, 32, 64)],
    ("llama-1b", "generate", 1, 32, "dynamic"),
    ("llama-7b", "prefill", 1, 2048, None),
    *[("llama-7b", "decode", b, 1024, "dynamic") for b in (1, 16)],
    *[("llama-7b", "decode", b, 1024, "static") for b in (1, 16)],
]
#: Context sizes of the tiny dry run (decode contexts and prefill lengths are scaled down).
TINY_MAX_TOKENS = 64

#: Decode steps a static cache must hold beyond the context (warm-ups, timed calls, profiled
#: calls, graph replays all write one slot each).
STATIC_SLACK = 64


def label(row) -> str:
    model, phase, batch, n, cache = row
    size = f"ctx{n}" if phase == "decode" else (f"{n} tokens" if phase == "generate" else f"s{n}")
    return f"{model} {phase} b{batch} {size}" + (f" {cache}" if cache else "")


# --------------------------------------------------------------------------------------------
# measure (GPU machine)


def build(torch, cfg: dict[str, Any], device: str):
    """A causal LM with random bf16 weights from a config dict (built on ``device``)."""
    import transformers
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(old)
    return model.to(device=device, dtype=torch.bfloat16).eval(), config


def _kv_shape(config, batch: int, tokens: int) -> tuple[int, int, int, int]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return batch, kv_heads, tokens, config.hidden_size // heads


def make_cache(torch, config, kind: str, batch: int, context: int, device: str):
    """A ``DynamicCache`` or ``StaticCache`` holding ``context`` random tokens per layer."""
    import transformers
    shape = _kv_shape(config, batch, context)
    layers = config.num_hidden_layers
    if kind == "dynamic":
        cache = transformers.DynamicCache()
        for i in range(layers):
            cache.update(torch.randn(shape, device=device, dtype=torch.bfloat16),
                         torch.randn(shape, device=device, dtype=torch.bfloat16), i)
        return cache, context + 1
    length = context + STATIC_SLACK
    try:  # transformers 5: the cache sizes itself on its first update
        cache = transformers.StaticCache(config=config, max_cache_len=length)
    except TypeError:  # transformers 4
        cache = transformers.StaticCache(config=config, max_batch_size=batch,
                                         max_cache_len=length, device=device,
                                         dtype=torch.bfloat16)
    pos = torch.arange(context, device=device)
    for i in range(layers):
        cache.update(torch.randn(shape, device=device, dtype=torch.bfloat16),
                     torch.randn(shape, device=device, dtype=torch.bfloat16), i,
                     {"cache_position": pos})
    return cache, length


def _sync(torch, cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def time_wall(torch, fn, reps: int, cuda: bool) -> list[float]:
    """Host wall time of ``fn()`` started on an idle GPU and synchronised, ``reps`` times, s."""
    out = []
    for _ in range(reps):
        _sync(torch, cuda)
        t = time.perf_counter()
        fn()
        _sync(torch, cuda)
        out.append(time.perf_counter() - t)
    return out


def profile(torch, fn, reps: int, cuda: bool) -> dict[str, Any]:
    """GPU activity per call (kernels, memcpy, memset), kernels per call, top-level ATen calls
    per call by name, from ``torch.profiler`` over ``reps`` calls."""
    from torch.profiler import ProfilerActivity, profile as prof_ctx
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with prof_ctx(activities=acts) as prof:
        for _ in range(reps):
            fn()
        _sync(torch, cuda)
    device_s, kernels = 0.0, 0
    by_kernel: dict[str, float] = {}
    aten: dict[str, int] = {}
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            dur = ev.time_range.elapsed_us() * 1e-6
            device_s += dur
            kernels += 1
            by_kernel[ev.name[:100]] = by_kernel.get(ev.name[:100], 0.0) + dur
        elif ev.name.startswith("aten::"):
            parent = getattr(ev, "cpu_parent", None)
            if parent is None or not parent.name.startswith("aten::"):
                aten[ev.name] = aten.get(ev.name, 0) + 1
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])[:12]
    return {"kernel_sum_s": device_s / reps if cuda else None,
            "kernels": kernels / reps, "aten_ops": sum(aten.values()) / reps,
            "aten_ops_by_name": {k: v / reps for k, v in sorted(aten.items(),
                                                                key=lambda kv: -kv[1])},
            "top_kernels_s": {k: v / reps for k, v in top}}


def graph_times(torch, fn, reps: int = 10) -> dict[str, Any]:
    """Capture ``fn`` in a CUDA graph; device time of a replay (CUDA events) and host wall
    time of replay + sync, medians of ``reps``, s."""
    from dse.calibrate.gpu_bench import capture_graph
    graph = capture_graph(torch, fn)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev, wall = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        wall.append(time.perf_counter() - t)
        dev.append(start.elapsed_time(end) * 1e-3)
    del graph
    return {"graph_s": statistics.median(dev), "graph_wall_s": statistics.median(wall)}


class _Steps:
    """Decode steps onto one cache: ``fn()`` runs a step; ``contexts`` the context of each."""

    def __init__(self, model, ids, cache, context: int):
        self.model, self.ids, self.cache, self.context = model, ids, cache, context
        self.contexts: list[int] = []

    def __call__(self):
        self.contexts.append(self.context + len(self.contexts))
        return self.model(input_ids=self.ids, past_key_values=self.cache, use_cache=True)

    def mean_since(self, start: int) -> float:
        return statistics.fmean(self.contexts[start:]) if self.contexts[start:] else math.nan


def measure_row(torch, model, config, row, device: str, reps: int) -> dict[str, Any]:
    name, phase, batch, n, cache_kind = row
    cuda = device == "cuda"
    vocab = config.vocab_size
    rec: dict[str, Any] = {"model": name, "phase": phase, "batch": batch, "cache": cache_kind,
                           "dtype": "bf16"}
    gen = torch.Generator(device="cpu").manual_seed(0)
    if phase == "generate":
        ids = torch.randint(0, vocab, (batch, 16), generator=gen).to(device)
        mask = torch.ones_like(ids)

        def run(new):
            return model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                  min_new_tokens=new, do_sample=False, pad_token_id=0)
        run(2)
        one = statistics.median(time_wall(torch, lambda: run(1), 3, cuda))
        many = statistics.median(time_wall(torch, lambda: run(n + 1), 3, cuda))
        rec.update({"prompt": 16, "new_tokens": n, "wall_per_token_s": (many - one) / n,
                    "generate_1_s": one})
        return rec
    if phase == "prefill":
        ids = torch.randint(0, vocab, (batch, n), generator=gen).to(device)
        rec["seq"] = n

        def fn():
            return model(input_ids=ids, use_cache=False)
        for _ in range(2):
            fn()
        rec["wall_s"] = statistics.median(time_wall(torch, fn, reps, cuda))
        rec.update(profile(torch, fn, max(2, reps // 2), cuda))
        return rec
    cache, kv_len = make_cache(torch, config, cache_kind, batch, n, device)
    ids = torch.randint(0, vocab, (batch, 1), generator=gen).to(device)
    steps = _Steps(model, ids, cache, n)
    rec.update({"context": n, "kv_update": "concat" if cache_kind == "dynamic" else "in_place",
                "max_cache_len": kv_len if cache_kind == "static" else None})
    for _ in range(2):
        steps()
    start = len(steps.contexts)
    rec["wall_s"] = statistics.median(time_wall(torch, steps, reps, cuda))
    rec["context_wall"] = steps.mean_since(start)
    start = len(steps.contexts)
    rec.update(profile(torch, steps, max(2, reps // 2), cuda))
    rec["context_profile"] = steps.mean_since(start)
    if cache_kind == "static" and cuda:
        try:
            rec.update(graph_times(torch, steps))
        except Exception as exc:  # capture can fail (a host sync in the model): keep the rest
            rec["graph_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            torch.cuda.synchronize()
    return rec


def measure(out: str | Path, device: str = "cuda", tiny: bool = False, budget_s: float = 240.0,
            reps: int = 10, only: str = "") -> dict[str, Any]:
    """Measure every row (within ``budget_s``), writing ``out`` after each."""
    import torch
    import transformers
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: measuring needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        raise SystemExit(2)
    models = TINY if tiny else MODELS
    rows = [r for r in ROWS if not only or r[0] in only.split(",")]
    if tiny:  # small contexts and prompts, one row per (model, phase, cache), two families
        seen, small = set(), []
        for m, ph, b, n, c in rows:
            if m in ("gpt2", "llama-1b") and (m, ph, c) not in seen:
                seen.add((m, ph, c))
                small.append((m, ph, min(b, 2), min(n, TINY_MAX_TOKENS), c))
        rows = small
    dev_info: dict[str, Any] = {"torch": torch.__version__, "transformers":
                                transformers.__version__, "python": platform.python_version()}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        dev_info.update({"name": props.name, "sms": props.multi_processor_count,
                         "cuda": torch.version.cuda})
    result: dict[str, Any] = {"device": dev_info, "tiny": tiny, "models": models,
                              "method": __doc__.split("\n\n")[2].strip(), "rows": []}
    t0 = time.monotonic()
    model = config = None
    built = None
    for row in rows:
        if time.monotonic() - t0 > budget_s:
            result["rows"].append({"model": row[0], "phase": row[1], "batch": row[2],
                                   "skipped": "time budget"})
            continue
        t = time.monotonic()
        try:
            if built != row[0]:
                model = config = None
                if cuda:
                    torch.cuda.empty_cache()
                model, config = build(torch, models[row[0]], device)
                built = row[0]
            with torch.no_grad():
                rec = measure_row(torch, model, config, row, device, reps)
        except Exception as exc:  # one row must not lose the run
            rec = {"model": row[0], "phase": row[1], "batch": row[2], "cache": row[4],
                   "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
            if cuda:
                torch.cuda.synchronize()
        rec["row_s"] = round(time.monotonic() - t, 1)
        result["rows"].append(rec)
        print(f"{label(row):<36} kernels {_ms(rec.get('kernel_sum_s'))}  wall "
              f"{_ms(rec.get('wall_s') or rec.get('wall_per_token_s'))}  graph "
              f"{_ms(rec.get('graph_wall_s'))}  ({rec['row_s']} s)"
              + (f"  {rec['error']}" if "error" in rec else ""), flush=True)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def _ms(x) -> str:
    return f"{x * 1e3:8.3f} ms" if isinstance(x, (int, float)) and math.isfinite(x) else "       -   "


# --------------------------------------------------------------------------------------------
# compare side: the same rows as captured workloads


def hf_workload(cfg: dict[str, Any], phase: str, batch: int, tokens: int,
                kv_update: str = "concat", dtype: str = "bf16"):
    """The workload of one measured row: ``prefill`` of ``tokens`` (through ``workloads.hf``,
    no cache, as measured) or one ``decode`` step reading ``tokens`` cached keys per layer
    (HF's ``DynamicCache`` built inside the forward from the ``kv_cache`` input, so its
    ``cat`` is a KV append; the cache's own first fill is not part of the step and is
    dropped), costed with ``kv_update``."""
    import tempfile
    import warnings

    import torch
    import transformers

    from workloads.capture import capture
    from workloads.hf import workload_from_hf_config
    if phase == "prefill":
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "config.json"
            path.write_text(json.dumps(cfg))
            return workload_from_hf_config(path, phase="prefill", batch=batch, seq=tokens,
                                           dtype=dtype, kv_update=kv_update)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        module = transformers.AutoModelForCausalLM.from_config(config)

    class Step(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, kv_cache):
            cache = transformers.DynamicCache()
            for i, (k, v) in enumerate(kv_cache):
                cache.update(k, v, i)
            return self.lm(input_ids=input_ids, past_key_values=cache, use_cache=True).logits

    with torch.device("meta"):
        shape = _kv_shape(config, batch, tokens)
        kv = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(config.num_hidden_layers)]
        ids = torch.zeros(batch, 1, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = capture(Step(module), (ids,), {"kv_cache": kv}, model=f"hf:{config.model_type}",
                    phase="decode", dtype=dtype, batch=batch, seq=1, context=tokens,
                    kv_update=kv_update)
    return _drop_cache_fill(w)


def _drop_cache_fill(w):
    """``w`` without the wrapper's first fill of each cache layer (a ``cat`` of an empty
    tensor and the cached keys, and the ``detach_`` of that empty tensor): not part of a
    decode step."""
    from dataclasses import replace
    fill = [n for n, d in w.graph.nodes(data=True)
            if (d["op"].attrs.get("kv_append") and not d["op"].attrs.get("elements"))
            or d["op"].target == "detach_"]
    if not fill:
        return w
    g = w.graph.copy()
    g.remove_nodes_from(fill)
    unknown = {k: v for k, v in w.unknown_targets.items() if k != "detach_"}
    return replace(w, graph=g, unknown_targets=unknown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the rows on this machine's GPU")
    m.add_argument("--out", required=True)
    m.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    m.add_argument("--tiny", action="store_true", help="2-layer models, short contexts")
    m.add_argument("--budget-s", type=float, default=240.0)
    m.add_argument("--reps", type=int, default=10)
    m.add_argument("--only", default="", help="comma-separated model names")
    args = parser.parse_args(argv)
    measure(args.out, args.device, args.tiny, args.budget_s, args.reps, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
