"""Fused attention (``torch.nn.functional.scaled_dot_product_attention``) forward and backward
on one GPU over the shapes training steps run, with and without attention dropout and the
causal mask (issue 31: the per-kernel profile of the validated steps showed SDPA 40-50 %
slower than modelled, worst where the model has attention dropout).

    python benchmarks/sdpa_measure.py --out $OUT/sdpa.json [--dry-run]

Per case (batch, heads, seq, head dim, causal, dropout; bf16): the forward alone and forward +
backward (CUDA events, median of 3 runs of 10 calls after 3 warm-up calls), the backend the
kernels' names show (one profiled forward + backward), and the FLOPs (``4 b h s^2 d`` forward,
2.5 x that for the backward; halved where causal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

#: (batch, heads, seq, head dim) of the validated steps: GPT-2 / -medium, BERT, ViT-B/16,
#: TinyLlama.
SHAPES = [(8, 12, 1024, 64), (8, 16, 1024, 64), (32, 12, 512, 64), (64, 12, 197, 64),
          (4, 32, 2048, 64)]
TINY = [(1, 2, 32, 16)]


def timed(torch, fn, cuda: bool, calls: int = 10) -> float:
    """Median over 3 runs of ``calls`` calls of one call's time (CUDA events), after 3
    warm-up calls."""
    for _ in range(3):
        fn()
    runs = []
    for _ in range(3):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            runs.append(a.elapsed_time(b) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
    return sorted(runs)[1]


def kernel_names(torch, fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name()[:120] for e in prof.profiler.kineto_results.events()
                   if "cuda" in str(e.device_type()).lower()})


def case(torch, device, cuda: bool, shape, causal: bool, dropout: float) -> dict:
    b, h, s, d = shape
    row = {"batch": b, "heads": h, "seq": s, "head_dim": d, "causal": causal, "dropout": dropout,
           "forward_flops": 4.0 * b * h * s * s * d / (2 if causal else 1)}
    F = torch.nn.functional
    dt = torch.bfloat16 if cuda else torch.float32
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dt, requires_grad=True)
               for _ in range(3))
    g = torch.randn(b, h, s, d, device=device, dtype=dt)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        fwd().backward(g)
    row["forward_s"] = timed(torch, lambda: fwd().detach(), cuda)
    row["forward_backward_s"] = timed(torch, fwd_bwd, cuda)
    if cuda:
        row["kernels"] = kernel_names(torch, fwd_bwd)
    print(f"  b{b} h{h} s{s} d{d} causal {causal!s:<5} dropout {dropout}: fwd "
          f"{row['forward_s'] * 1e6:8.1f} us  fwd+bwd {row['forward_backward_s'] * 1e6:8.1f} us",
          flush=True)
    return row


def write_result(result: dict, out: str, t0: float) -> None:
    """Write ``result`` (with its wall time since ``t0``) to ``out`` as JSON."""
    result["wall_s"] = time.time() - t0
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out} ({result['wall_s']:.0f} s)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sdpa.json"))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    result: dict = {"script": "benchmarks/sdpa_measure.py", "cases": []}
    try:
        import torch
        cuda = torch.cuda.is_available() and not args.dry_run
        device = torch.device("cuda") if cuda else torch.device("cpu")
        result.update(torch=torch.__version__,
                      device=torch.cuda.get_device_name(device) if cuda else "cpu")
        for shape in (TINY if args.dry_run else SHAPES):
            for causal in (False, True):
                for dropout in (0.0, 0.1):
                    try:
                        result["cases"].append(case(torch, device, cuda, shape, causal, dropout))
                    except Exception as exc:
                        result["cases"].append({"shape": shape, "causal": causal,
                                                "dropout": dropout,
                                                "error": f"{type(exc).__name__}: {exc}"[:300]})
                    if cuda:
                        torch.cuda.empty_cache()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    write_result(result, args.out, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
