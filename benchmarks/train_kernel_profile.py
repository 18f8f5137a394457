"""Which kernels a single-GPU training step runs, and how long each takes (issue 31): the
per-kernel view behind ``benchmarks/train_measure.py``'s kernel sum, for finding which kinds
of kernel ``dse train`` under-predicts (a diagnosis, nothing is fitted on it).

    python benchmarks/train_kernel_profile.py --out $OUT/k.json [--dry-run]

For each case (a subset of train_measure's single-GPU cases, the same models built by its
``build``): 3 warm-up steps, then three profiled runs (torch.profiler, CUDA kernels only):
the forward alone, forward + backward, and the optimizer step alone. Per run, every kernel
name's count and summed duration, and the sum per kind (``gemm``, ``attention``, ``copy``,
``elementwise/other``); the backward is the second run minus the first.

``gemm_layouts``: a Linear layer's three bf16 GEMMs in the layouts autograd runs them, on the
validated models' shapes (tokens x in -> out): forward ``x @ W.T``, data gradient
``dy @ W``, weight gradient ``dy.T @ x`` (CUDA events, median of 3 runs of 20 calls).

``host``: the host's time to issue a training step's forward and backward, on stacks of units
of Linear + ReLU pairs small enough (d 256, 64 tokens) that the GPU waits on the host, with and
without ``torch.utils.checkpoint`` (non-reentrant) around each unit: Python's forward
dispatch, the autograd engine's backward and what checkpointing adds per unit.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_measure as tm  # noqa: E402  (the same models, built the same way)
from sdpa_measure import timed, write_result  # noqa: E402

CASES = [("gpt2", 8, 1024, "bf16", "foreach"), ("gpt2", 8, 1024, "amp", "foreach"),
         ("tinyllama-1.1b", 4, 2048, "bf16", "foreach"), ("bert-base", 32, 512, "bf16", "foreach"),
         ("timm:vit_base_patch16_224", 64, 224, "bf16", "foreach"),
         ("gpt2-medium", 8, 1024, "bf16", "foreach")]
TINY_CASES = [("gpt2", 2, 32, "bf16", "foreach"), ("gpt2", 2, 32, "amp", "foreach")]


def kind_of(name: str) -> str:
    low = name.lower()
    if any(s in low for s in ("flash", "fmha", "attention", "efficient_attention")):
        return "attention"
    if any(s in low for s in ("gemm", "cutlass", "nvjet", "sm90_", "sm80_", "cublas", "xmma",
                              "splitk")):
        return "gemm"
    if any(s in low for s in ("copy", "memcpy", "memset", "cat", "fill")):
        return "copy"
    if "multi_tensor" in low or "foreach" in low or "adam" in low:
        return "optimizer"
    return "other"


def kernels(torch, fn) -> dict:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names: dict[str, list] = {}
    for e in prof.profiler.kineto_results.events():
        if "cuda" not in str(e.device_type()).lower():
            continue
        agg = names.setdefault(e.name()[:160], [0, 0.0])
        agg[0] += 1
        agg[1] += e.duration_ns() / 1e9
    by_kind: dict[str, float] = {}
    for n, (_, s) in names.items():
        by_kind[kind_of(n)] = by_kind.get(kind_of(n), 0.0) + s
    return {"total_s": sum(s for _, s in names.values()),
            "count": sum(c for c, _ in names.values()), "by_kind_s": by_kind,
            "names": {n: {"count": c, "s": s} for n, (c, s) in
                      sorted(names.items(), key=lambda kv: -kv[1][1])[:80]}}


def profile_case(torch, case, configs, device, cuda: bool) -> dict:
    name, batch, seq, precision, optim = case
    row = {"model": name, "batch": batch, "seq": seq, "precision": precision,
           "optimizer": f"adamw-{optim}"}
    torch.manual_seed(0)
    model, loss_of, info = tm.build(torch, name, configs, batch, seq, device, precision)
    row.update(params=info["params"])
    model.train()
    opt = tm.optimizer_for(torch, model, optim, cuda)
    for _ in range(3):
        tm.run_step(torch, model, loss_of, opt, precision, cuda)

    def forward():
        opt.zero_grad(set_to_none=True)
        if precision == "amp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return loss_of(model)
        return loss_of(model)

    if not cuda:
        forward().backward()
        opt.step()
        return row
    torch.cuda.synchronize()
    row["forward"] = kernels(torch, forward)
    row["forward_backward"] = kernels(torch, lambda: forward().backward())
    row["optimizer"] = kernels(torch, opt.step)
    print(f"  {name:<26} {precision:<5} fwd {row['forward']['total_s'] * 1e3:7.2f} ms  "
          f"fwd+bwd {row['forward_backward']['total_s'] * 1e3:7.2f} ms  opt "
          f"{row['optimizer']['total_s'] * 1e3:6.2f} ms", flush=True)
    del model, opt
    torch.cuda.empty_cache()
    return row


#: (tokens, in, out) of the validated models' Linear layers.
GEMM_SHAPES = [(8192, 768, 2304), (8192, 768, 3072), (8192, 3072, 768), (8192, 768, 50257),
               (8192, 2048, 5632), (8192, 5632, 2048), (8192, 2048, 256), (8192, 2048, 32000),
               (16384, 768, 3072), (12608, 768, 3072), (12608, 3072, 768), (8192, 1024, 4096)]


def gemm_layouts(torch, device, cuda: bool, shapes) -> list[dict]:
    out = []
    for t, k, n in shapes:
        row = {"tokens": t, "in": k, "out": n, "flops": 2.0 * t * k * n}
        try:
            dt = torch.bfloat16
            x = torch.randn(t, k, dtype=dt, device=device)
            w = torch.randn(n, k, dtype=dt, device=device)
            dy = torch.randn(t, n, dtype=dt, device=device)
            for name, fn in (("forward", lambda: torch.mm(x, w.t())),
                             ("dgrad", lambda: torch.mm(dy, w)),
                             ("wgrad", lambda: torch.mm(dy.t(), x))):
                row[f"{name}_s"] = timed(torch, fn, cuda, calls=20)
            print(f"  gemm {t}x{k}->{n}: fwd {row['forward_s'] * 1e6:8.1f} us dgrad "
                  f"{row['dgrad_s'] * 1e6:8.1f} us wgrad {row['wgrad_s'] * 1e6:8.1f} us",
                  flush=True)
            del x, w, dy
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        out.append(row)
    return out


#: (linears per unit, units, checkpointed) of the host stacks.
HOST_STACKS = [(2, 8, False), (2, 8, True), (8, 8, False), (8, 8, True), (2, 16, False),
               (2, 16, True)]


def host_costs(torch, device, cuda: bool, stacks, d: int = 256, tokens: int = 64) -> list[dict]:
    from torch.utils.checkpoint import checkpoint
    nn = torch.nn
    out = []
    for linears, units, ckpt in stacks:
        row = {"linears": linears, "units": units, "checkpoint": ckpt, "d": d, "tokens": tokens}
        try:
            torch.manual_seed(0)
            blocks = nn.ModuleList(nn.Sequential(*[m for _ in range(linears) for m in (
                nn.Linear(d, d), nn.ReLU())]) for _ in range(units)).to(device, torch.bfloat16)
            x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16, requires_grad=True)

            def step():
                for p in blocks.parameters():
                    p.grad = None
                t0 = time.perf_counter()
                h = x
                for b in blocks:
                    h = checkpoint(b, h, use_reentrant=False) if ckpt else b(h)
                loss = h.float().square().mean()
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                if cuda:
                    torch.cuda.synchronize()
                return t1 - t0, t2 - t1, time.perf_counter() - t0
            for _ in range(3):
                step()
            runs = [step() for _ in range(10)]
            row.update(forward_host_s=sorted(r[0] for r in runs)[5],
                       backward_host_s=sorted(r[1] for r in runs)[5],
                       step_s=sorted(r[2] for r in runs)[5])
            print(f"  host lin{linears} units{units} ckpt {ckpt!s:<5} fwd "
                  f"{row['forward_host_s'] * 1e3:6.2f} ms bwd {row['backward_host_s'] * 1e3:6.2f}"
                  f" ms step {row['step_s'] * 1e3:6.2f} ms", flush=True)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "kprof.json"))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--budget-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    t0 = time.time()
    result: dict = {"script": "benchmarks/train_kernel_profile.py", "cases": []}
    try:
        import torch
        cuda = torch.cuda.is_available() and not args.dry_run
        device = torch.device("cuda") if cuda else torch.device("cpu")
        result.update(torch=torch.__version__,
                      device=torch.cuda.get_device_name(device) if cuda else "cpu")
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        result["gemm_layouts"] = gemm_layouts(
            torch, device, cuda, [(64, 32, 48)] if args.dry_run else GEMM_SHAPES)
        result["host"] = host_costs(torch, device, cuda, HOST_STACKS[:2] if args.dry_run
                                    else HOST_STACKS)
        for case in (TINY_CASES if args.dry_run else CASES):
            if time.time() - t0 > args.budget_s:
                result["cases"].append({"model": case[0], "skipped": "time budget spent"})
                continue
            try:
                result["cases"].append(profile_case(
                    torch, case, tm.TINY_CONFIGS if args.dry_run else tm.CONFIGS, device, cuda))
            except Exception as exc:
                result["cases"].append({"model": case[0], "precision": case[3],
                                        "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                print(f"  {case}: {result['cases'][-1]['error']}", flush=True)
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    write_result(result, args.out, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
