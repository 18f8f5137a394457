"""GEMM time per number format and kernel family on a CUDA GPU (issue 30).

Times ``y = x W^T`` (x: M x K activations, W: N x K weights, as ``nn.Linear`` stores them) in
the kernel families the ``gpu`` template's format model (``accelerators/gpu_formats.py``)
distinguishes:

* ``native`` — the tensor-core datapath consumes both operands as stored:
  ``bf16_mm`` (``torch.mm``), ``fp8_scaled_mm`` (``torch._scaled_mm``, E4M3 x E4M3, per-tensor
  fp32 scales, bf16 out), ``fp8_scaled_mm_rowwise`` (per-token x per-channel fp32 scales),
  ``int8_int_mm`` (``torch._int_mm``, int32 out; it needs M > 16, so M <= 16 runs padded to
  32 rows and the record says ``m_run``);
* ``fused_dequant`` — weight-only: the kernel loads low-bit weights and dequantises them in
  registers before a bf16 MMA: ``int4_w_tinygemm`` (``torch._weight_int4pack_mm``, INT4 weights,
  group 128, bf16 scale and zero per group, bf16 activations);
* ``unfused_dequant`` — weight-only, dequantise-then-MMA as two steps through memory:
  ``int4_w_dequant_mm`` (unpack + scale with eager torch ops into a bf16 W, then ``torch.mm``)
  and ``fp8_w_dequant_mm`` (``W.to(bf16)``, then ``torch.mm``).

Method: ``dse.calibrate.gpu_bench.Bench`` (CUDA graphs of back-to-back calls, operands rotated
over >= 4x the L2, CUDA events, median of the replays), after a 1 s bf16 GEMM loop that warms
the clocks. Every case that fails (an op missing in this torch, a shape it refuses) is recorded
under ``errors`` with its message; the run still writes its JSON.

Standalone (torch + ``dse.calibrate.gpu_bench``, which imports only torch, the standard library
and ``dse.errors``)::

    python3 benchmarks/format_gemm_measure.py --out format_gemm.json
    python3 benchmarks/format_gemm_measure.py --dry-run --out /tmp/x.json   # CPU, tiny shapes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

for _p in (Path(__file__).resolve().parent.parent, Path.cwd()):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from dse.calibrate import gpu_bench  # noqa: E402

#: Kernel -> (family, weight bits per element incl. scales, activation bytes per element).
KERNELS: dict[str, tuple[str, float, float]] = {
    "bf16_mm": ("native", 16.0, 2.0),
    "fp8_scaled_mm": ("native", 8.0, 1.0),
    "fp8_scaled_mm_rowwise": ("native", 8.0, 1.0),
    "int8_int_mm": ("native", 8.0, 1.0),
    "int4_w_tinygemm": ("fused_dequant", 4.0 + 32.0 / 128, 2.0),
    "int4_w_dequant_mm": ("unfused_dequant", 4.0 + 32.0 / 128, 2.0),
    "fp8_w_dequant_mm": ("unfused_dequant", 8.0, 2.0),
}

#: Linear-layer (N, K): Llama-7B q/o (4096^2), MLP up (11008x4096) and down (4096x11008),
#: Llama-3-8B MLP up (14336x4096), a 70B-class square (8192^2).
NK = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (8192, 8192)]
#: Token counts: powers of two 1..8192 plus off-grid values (decode batches, prompt chunks).
MS = [1, 2, 3, 4, 8, 16, 24, 32, 64, 96, 128, 256, 384, 512, 1024, 1536, 2048, 4096, 8192]
GROUP = 128


def cases(dry_run: bool) -> list[dict[str, Any]]:
    nk = [(256, 256), (128, 384)] if dry_run else NK
    ms = [1, 16, 64] if dry_run else MS
    out = []
    for n, k in nk:
        for m in ms:
            for kernel, (family, w_bits, a_bytes) in KERNELS.items():
                m_run = 32 if kernel == "int8_int_mm" and m <= 16 else m
                out_bytes = 4 if kernel == "int8_int_mm" else 2
                out.append({"kind": "gemm", "kernel": kernel, "family": family, "m": m, "n": n,
                            "k": k, "m_run": m_run, "flops": 2 * m * n * k,
                            "bytes": int(n * k * w_bits / 8 + m * k * a_bytes
                                         + m * n * out_bytes),
                            "_size": m * n * k})
    return out


def build(bench: gpu_bench.Bench, case: dict[str, Any]):
    """Allocate ``slots`` operand sets for one case; returns ``(fn(slot), set_bytes)``."""
    torch = bench.torch
    dev = bench.device
    kernel, m, n, k = case["kernel"], case["m_run"], case["n"], case["k"]
    bf16 = torch.bfloat16
    set_bytes = case["bytes"]
    slots = bench.slots_for(set_bytes)
    if kernel == "bf16_mm":
        a = torch.randn(slots, m, k, device=dev, dtype=bf16)
        w = torch.randn(slots, n, k, device=dev, dtype=bf16)
        c = torch.empty(slots, m, n, device=dev, dtype=bf16)

        def fn(i):
            return torch.mm(a[i], w[i].t(), out=c[i])
    elif kernel.startswith("fp8_scaled_mm"):
        f8 = torch.float8_e4m3fn
        a = torch.randn(slots, m, k, device=dev).to(f8)
        w = torch.randn(slots, n, k, device=dev).to(f8)
        if kernel.endswith("rowwise"):
            sa = torch.rand(m, 1, device=dev, dtype=torch.float32) + 0.5
            sb = torch.rand(1, n, device=dev, dtype=torch.float32) + 0.5
        else:
            sa = sb = torch.ones((), device=dev, dtype=torch.float32)

        def fn(i):
            return torch._scaled_mm(a[i], w[i].t(), scale_a=sa, scale_b=sb, out_dtype=bf16)
    elif kernel == "int8_int_mm":
        a = torch.randint(-64, 64, (slots, m, k), device=dev, dtype=torch.int8)
        w = torch.randint(-64, 64, (slots, n, k), device=dev, dtype=torch.int8)

        def fn(i):
            return torch._int_mm(a[i], w[i].t())
    elif kernel == "int4_w_tinygemm":
        a = torch.randn(slots, m, k, device=dev, dtype=bf16)
        packed = [_pack_int4(torch, torch.randint(0, 256, (n, k // 2), device=dev,
                                                  dtype=torch.uint8)) for _ in range(slots)]
        sz = torch.rand(k // GROUP, n, 2, device=dev, dtype=bf16)

        def fn(i):
            return torch._weight_int4pack_mm(a[i], packed[i], GROUP, sz)
    elif kernel == "int4_w_dequant_mm":
        a = torch.randn(slots, m, k, device=dev, dtype=bf16)
        wq = torch.randint(0, 256, (slots, n, k // 2), device=dev, dtype=torch.uint8)
        scale = torch.rand(slots, n, k // GROUP, 1, device=dev, dtype=bf16)

        def fn(i):
            q = wq[i]
            w = torch.stack(((q & 0xF), (q >> 4)), dim=-1).view(n, k // GROUP, GROUP)
            w = ((w.to(bf16) - 8.0) * scale[i]).view(n, k)
            return torch.mm(a[i], w.t())
    elif kernel == "fp8_w_dequant_mm":
        a = torch.randn(slots, m, k, device=dev, dtype=bf16)
        w = torch.randn(slots, n, k, device=dev).to(torch.float8_e4m3fn)

        def fn(i):
            return torch.mm(a[i], w[i].to(bf16).t())
    else:
        raise ValueError(f"unknown kernel {kernel!r}")
    fn.slots = slots
    return fn, set_bytes


def _pack_int4(torch, w_uint8):
    """``torch._convert_weight_to_int4pack`` over torch versions: uint8 [N, K/2] (torch >= 2.5)
    or int32 [N, K] (older), inner-K tiles 8."""
    try:
        return torch._convert_weight_to_int4pack(w_uint8, 8)
    except (RuntimeError, TypeError):
        n, k2 = w_uint8.shape
        unpacked = torch.stack(((w_uint8 >> 4), (w_uint8 & 0xF)), dim=-1).view(n, 2 * k2)
        return torch._convert_weight_to_int4pack(unpacked.to(torch.int32), 8)


def warm_clocks(torch, seconds: float = 1.0) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def op_signatures(torch) -> dict[str, str]:
    out = {}
    for name in ("_scaled_mm", "_int_mm", "_weight_int4pack_mm", "_convert_weight_to_int4pack"):
        try:
            out["aten::" + name] = str(getattr(torch.ops.aten, name).default._schema)
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            out["aten::" + name] = f"missing: {type(exc).__name__}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: exercise the code")
    ap.add_argument("--max-seconds", type=float, default=125.0)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    if args.dry_run:
        import torch
        device = "cpu"
        settings = gpu_bench.Settings.for_grid("smoke", args.max_seconds)
    else:
        torch = gpu_bench.require_cuda()
        device = "cuda"
        settings = gpu_bench.Settings(target_s=1e-3, repeats=7, max_seconds=args.max_seconds)

    def log(msg):
        print(msg, flush=True)

    bench = gpu_bench.Bench(torch, device, settings, log)
    info = gpu_bench.device_info(torch, device)
    log(f"device {info.get('name')} torch {torch.__version__}")
    raw: dict[str, Any] = {
        "schema": 1, "tool": "benchmarks/format_gemm_measure.py",
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": info, "torch": torch.__version__, "op_signatures": op_signatures(torch),
        "settings": dict(settings.__dict__), "group_size": GROUP,
        "kernels": {k: {"family": f, "weight_bits": b, "activation_bytes": a}
                    for k, (f, b, a) in KERNELS.items()},
        "measurements": bench.records, "errors": bench.errors,
        "skipped_for_time": bench.skipped,
    }
    torch.manual_seed(0)
    if device == "cuda":
        warm_clocks(torch)
    todo = cases(args.dry_run)
    # A kernel that fails on its first three shapes and never ran (an op this torch lacks) is
    # skipped from then on, so that it cannot eat the time budget.
    fails: dict[str, int] = {}
    ran: set[str] = set()
    for case in todo:
        kern = case["kernel"]
        if fails.get(kern, 0) >= 3 and kern not in ran:
            bench.errors.append({**case, "error": "skipped: failed on its first three shapes"})
            continue
        n_err = len(bench.errors)
        bench.run_cases("gemm", [case], lambda c: build(bench, c))
        if len(bench.errors) > n_err:
            fails[kern] = fails.get(kern, 0) + 1
        else:
            ran.add(kern)
    raw["wall_s"] = round(time.monotonic() - t0, 1)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gpu_bench._clean(raw), separators=(",", ":")) + "\n")
    log(f"{len(bench.records)} records, {len(bench.errors)} errors, {raw['wall_s']} s -> {path}")
    for e in bench.errors[:10]:
        log(f"error {e.get('kernel')} m={e.get('m')}: {e['error'][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
