"""Held-out GPU kernels: shapes the calibration grid (``dse.calibrate.gpu_bench``) never times.

Measured on a CUDA GPU with the calibration's own method (``gpu_bench.Bench``: CUDA graphs of
back-to-back launches, operands rotated over 4x the L2, CUDA events, median of 9 replays), in
its record format, so ``dse.calibrate.fit.predict`` predicts every record. Cases (every record
carries ``heldout: true`` and a ``group``):

* ``gemm_small_m`` — bf16 GEMMs with M = 3 ... 640 tokens (batched decode and short prompts)
  on the linear-layer shapes of GPT-2, a 1B Llama (TinyLlama dims) and Llama-7B/8B;
* ``gemm_fp16`` / ``gemm_fp32`` — the same layers in fp16 and fp32 (the op's dtype decides the
  datapath);
* ``attention_decode`` — one query per sequence at batch 2-64, contexts not powers of two,
  multi-head (GPT-2 12x64, Llama 32x128) and grouped-query (32/8, 32/4);
* ``attention_prefill`` — causal prefill at 768 ... 6144 tokens;
* ``memory`` — layer/RMS norms, softmax, GELU/SiLU/add at widths and sizes off the grid, and the
  KV-cache ``cat`` of Hugging Face's dynamic cache at decode sizes.

Run by ``benchmarks/gpu_baselines.py measure`` (section ``heldout``), or alone::

    python3 benchmarks/gpu_heldout_kernels.py --out heldout.json [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dse.calibrate import gpu_bench  # noqa: E402  (torch + standard library only)

#: Linear-layer (N, K) of the models the whole-model rows run: GPT-2 (c_attn, mlp), a 1B
#: Llama (q/k/v fused widths, MLP), Llama-7B and Llama-3-8B (q, MLP, vocabulary heads).
LINEAR_NK = [(2304, 768), (3072, 768), (768, 3072), (2560, 2048), (5632, 2048), (2048, 5632),
             (12288, 4096), (4096, 11008), (14336, 4096), (32000, 2048)]
SMALL_M = [3, 6, 12, 24, 48, 80, 96, 160, 192, 320, 640]


def gemm_cases() -> list[dict[str, Any]]:
    rows = [("gemm_small_m", "bf16", m, n, k) for n, k in LINEAR_NK for m in SMALL_M]
    rows += [("gemm_fp16", "fp16", m, n, k) for n, k in LINEAR_NK[3:7] for m in (5, 40, 320)]
    rows += [("gemm_fp32", "fp32", m, n, k) for n, k in ((2048, 2048), (5632, 2048), (3072, 768))
             for m in (40, 320, 2000)]
    out = []
    for group, dtype, m, n, k in rows:
        es = gpu_bench.DTYPE_BYTES[dtype]
        out.append({"kind": "gemm", "group": group, "dtype": dtype, "batch": 1, "m": m, "n": n,
                    "k": k, "layout": "linear", "flops": 2 * m * n * k,
                    "bytes": (m * k + k * n + m * n) * es, "_size": m * n * k})
    return out


def attention_cases() -> list[dict[str, Any]]:
    rows = []  # group, b, hq, hkv, sq, skv, d, causal
    for b in (2, 4, 16, 48, 64):
        for kv in (700, 1500, 3000, 6000):
            rows.append(("attention_decode", b, 32, 8, 1, kv, 128, False))
            rows.append(("attention_decode", b, 32, 4, 1, kv, 64, False))
            if b * kv <= 96000:
                rows.append(("attention_decode", b, 12, 12, 1, kv, 64, False))
                rows.append(("attention_decode", b, 32, 32, 1, kv, 128, False))
    for s in (768, 1536, 3072, 6144):
        rows.append(("attention_prefill", 1, 12, 12, s, s, 64, True))
        rows.append(("attention_prefill", 1, 32, 4, s, s, 64, True))
        rows.append(("attention_prefill", 2, 32, 32, s, s, 128, True))
    out = []
    for group, b, hq, hkv, sq, skv, d, causal in rows:
        out.append({"kind": "attention", "group": group, "dtype": "bf16", "batch": b,
                    "heads": hq, "kv_heads": hkv, "q_len": sq, "kv_len": skv, "head_dim": d,
                    "causal": causal, "flops": 4 * b * hq * sq * skv * d,
                    "bytes": 2 * b * d * (2 * hq * sq + 2 * hkv * skv),
                    "_size": b * hq * sq * skv * d})
    return out


def memory_cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(op, elements, nbytes, **kw):
        out.append({"kind": "memory", "group": "memory", "op": op, "dtype": "bf16",
                    "elements": int(elements), "bytes": int(nbytes), "_size": int(nbytes), **kw})

    for width in (2048, 5120):
        for rows in (5, 48, 700, 6000, 30000):
            add("layer_norm", rows * width, 4 * rows * width + 4 * width, rows=rows, width=width)
            add("rms_norm", rows * width, 4 * rows * width + 2 * width, rows=rows, width=width)
    for width in (700, 3000, 50257):
        for rows in (12, 400, 5000):
            if rows * width <= 2**27:
                add("softmax", rows * width, 4 * rows * width, rows=rows, width=width)
    for n in (3000, 90000, 2_500_000, 40_000_000):
        add("gelu", n, 4 * n)
        add("silu", n, 4 * n)
        add("add", n, 6 * n)
    for b in (1, 16, 64):
        for h, kv, d in ((12, 511, 64), (4, 1023, 64), (32, 1023, 128)):
            n = b * h * (kv + 1) * d
            add("cat", n, 4 * n, shape=[b, h, kv, d])
    return out


def cases(grid: str = "full") -> list[dict[str, Any]]:
    """Every held-out case; ``grid="smoke"`` keeps the smallest of each group and op (CPU
    self-test)."""
    every = gemm_cases() + attention_cases() + memory_cases()
    for c in every:
        c["heldout"] = True
    if grid == "smoke":
        smallest: dict[tuple, dict] = {}
        for c in every:
            key = (c["group"], c.get("op"), c["dtype"])
            if key not in smallest or c["_size"] < smallest[key]["_size"]:
                smallest[key] = c
        every = list(smallest.values())
    return every


def run(out: str | Path, device: str = "cuda", grid: str = "full",
        max_seconds: float = 120.0) -> dict[str, Any]:
    """Time every case and write the raw-format JSON to ``out`` after each group."""
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    torch = gpu_bench.require_cuda() if device == "cuda" else __import__("torch")
    settings = gpu_bench.Settings.for_grid("smoke" if grid == "smoke" else "full", max_seconds)
    bench = gpu_bench.Bench(torch, device, settings, log)
    raw: dict[str, Any] = {"schema": gpu_bench.SCHEMA_VERSION,
                           "tool": "benchmarks/gpu_heldout_kernels.py",
                           "device": gpu_bench.device_info(torch, device),
                           "settings": dict(settings.__dict__), "measurements": bench.records,
                           "errors": bench.errors, "skipped_for_time": bench.skipped}
    builders = {"gemm": gpu_bench.build_gemm, "attention": gpu_bench.build_attention,
                "memory": gpu_bench.build_memory}
    torch.manual_seed(0)
    t0 = time.monotonic()
    every = cases(grid)
    for group in dict.fromkeys(c["group"] for c in every):
        todo = [c for c in every if c["group"] == group]
        bench.run_cases(group, todo, lambda c: builders[c["kind"]](bench, c))
        raw["total_s"] = round(time.monotonic() - t0, 1)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(gpu_bench._clean(raw)) + "\n")
    return gpu_bench._clean(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    try:
        run(args.out, args.device, "full" if args.device == "cuda" else "smoke",
            args.max_seconds)
    except gpu_bench.NoCudaGPU as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
