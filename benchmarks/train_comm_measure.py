"""Microbenchmarks of what data-parallel training adds to compute, on 2-4 GPUs under NCCL
(issue 31): the mechanisms ``simulators/training.py`` models for DDP and FSDP2, measured in
isolation, so that their constants are calibrated on these rows and not on the training
steps they are then checked against.

    torchrun --standalone --nproc_per_node 4 benchmarks/train_comm_measure.py --out $OUT/c.json

Three parts (standalone: torch + NCCL only, no project code):

``collectives``
    Each collective alone (``all_gather_into_tensor``, ``reduce_scatter_tensor``,
    ``all_reduce``; bf16) over sizes 1 MiB-256 MiB: the median time per call of a run of calls
    on a side stream (``bytes`` is the gathered output, the scattered input, the reduced
    buffer).

``overlap``
    A compute kernel (bf16 GEMMs of training shapes, an HBM-bound copy) alone, then while a
    collective runs on another stream, both streams released together from one event after a
    ``torch.cuda._sleep`` (so host launches leave no gaps): ``compute_slowdown`` is the
    compute run's time during a longer collective run over its time alone;
    ``comm_slowdown`` the collective run's time under a longer compute run over its time
    alone. NCCL's kernels take SMs and HBM bandwidth from the compute they overlap.

``fsdp``
    Synthetic stacks of ``units`` blocks of ``linears`` bias-free ``Linear(d, d)`` (bf16, ReLU
    between) on ``tokens`` rows, forward + backward (no optimizer), three ways: ``local``
    (unwrapped, every rank alone: the compute), ``ddp`` (25 MiB buckets) and ``fsdp2``
    (``fully_shard`` per block and the root, resharded after forward). Per way: the median
    step, forward and backward time (CUDA events), the host's time to issue them, and one
    profiled step's kernel time summed per stream and per kind (``gemm``, ``nccl``,
    ``copy`` = FSDP2's copy-in / copy-out / chunk-cat kernels, ``other``) with the largest
    kernels by name. Small ``tokens`` makes the step host-bound: its time over the units is
    the per-unit hook and launch overhead.

Rank 0 writes one JSON; per-case errors are recorded and the run goes on. ``--dry-run`` runs
every path at tiny sizes on the CPU (gloo): ``torchrun --standalone --nproc_per_node 2
benchmarks/train_comm_measure.py --dry-run --out /tmp/c.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

MiB = 1 << 20
#: Collective sizes, bytes (the gathered output / scattered input / reduced buffer).
COLL_BYTES = [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
#: Compute kernels run against the collectives: GEMMs (M, N, K) of the validated training
#: steps' shapes (tinyllama's MLP at 8,192 tokens, gpt2-medium's QKV at 8,192 tokens, a 4k
#: square) and one HBM-bound copy (bytes read = written).
KERNELS = [("gemm", (8192, 5632, 2048)), ("gemm", (8192, 3072, 1024)),
           ("gemm", (4096, 4096, 4096)), ("copy", 256 * MiB)]
OVERLAP_COLLS = [("all_gather", 64 * MiB), ("reduce_scatter", 64 * MiB),
                 ("all_reduce", 32 * MiB), ("all_gather", 8 * MiB)]
#: FSDP sweep: (d, linears per unit, units, tokens).
FSDP_CASES = [(1024, 2, 8, 256), (1024, 2, 16, 256), (1024, 8, 8, 256), (4096, 2, 8, 256),
              (1024, 2, 8, 8192), (2048, 4, 8, 4096), (4096, 2, 8, 8192)]
TINY = dict(coll=[4096, 65536], kernels=[("gemm", (64, 64, 64)), ("copy", 65536)],
            overlap=[("all_gather", 65536), ("all_reduce", 65536)],
            fsdp=[(32, 2, 3, 16), (64, 3, 2, 32)])


def log(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, flush=True)


class Clock:
    """Times a stretch of work on a stream (CUDA events) or on the CPU (dry run)."""

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda = torch, cuda

    def start(self, stream=None):
        if not self.cuda:
            return time.perf_counter()
        e = self.torch.cuda.Event(enable_timing=True)
        e.record(stream)
        return e

    def elapsed_s(self, a, b) -> float:
        if not self.cuda:
            return b - a
        b.synchronize()
        return a.elapsed_time(b) / 1e3


# ------------------------------------------------------------------------------ collectives
def make_coll(torch, dist, kind: str, nbytes: int, device, world: int):
    """A callable issuing one collective of ``nbytes`` (bf16)."""
    n = max(nbytes // 2 // world * world, world)
    full = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    shard = torch.empty(n // world, dtype=torch.bfloat16, device=device).normal_()
    if kind == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard)
    if kind == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full)
    return lambda: dist.all_reduce(full)


def make_kernel(torch, kind: str, shape, device):
    dt = torch.bfloat16
    if kind == "gemm":
        m, n, k = shape
        a = torch.randn(m, k, dtype=dt, device=device)
        b = torch.randn(k, n, dtype=dt, device=device)
        c = torch.empty(m, n, dtype=dt, device=device)
        return lambda: torch.mm(a, b, out=c), 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    x = torch.empty(shape // 2, dtype=dt, device=device).normal_()
    y = torch.empty_like(x)
    return lambda: y.copy_(x), 0.0, 2.0 * shape


def run_calls(fn, reps: int, clock: Clock, stream=None) -> float:
    a = clock.start(stream)
    for _ in range(reps):
        fn()
    return clock.elapsed_s(a, clock.start(stream))


def alone_s(torch, dist, fn, clock: Clock, device, stream=None, target_s: float = 0.02,
            cuda: bool = True) -> tuple[float, int]:
    """Median time of one call run in a run of calls lasting about ``target_s``, and that
    run's length."""
    ctx = torch.cuda.stream(stream) if (cuda and stream is not None) else _Null()
    with ctx:
        for _ in range(3):
            fn()
        one = agree(torch, dist, run_calls(fn, 3, clock, stream) / 3, device)
        reps = max(3, min(2000, int(target_s / max(one, 1e-7))))
        times = []
        for _ in range(3):
            dist.barrier()
            times.append(run_calls(fn, reps, clock, stream) / reps)
    return statistics.median(times), reps


def agree(torch, dist, value: float, device) -> float:
    """Rank 0's ``value`` on every rank (run lengths must match, or collectives hang)."""
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.broadcast(t, 0)
    return float(t.item())


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def bench_collectives(torch, dist, device, cuda, sizes, world, clock) -> list[dict]:
    rows = []
    stream = torch.cuda.Stream() if cuda else None
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        for nbytes in sizes:
            row = {"kind": kind, "bytes": nbytes, "world": world}
            try:
                fn = make_coll(torch, dist, kind, nbytes, device, world)
                t, reps = alone_s(torch, dist, fn, clock, device, stream, cuda=cuda)
                t = agree(torch, dist, t, device)
                row.update(time_s=t, reps=reps, algbw_GBps=nbytes / t / 1e9)
                log(f"  {kind:<15} {nbytes / MiB:8.1f} MiB {t * 1e6:9.1f} us "
                    f"{row['algbw_GBps']:7.1f} GB/s")
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                log(f"  {kind} {nbytes}: {row['error']}")
            rows.append(row)
    return rows


def _concurrent(torch, dist, kfn, kreps, cfn, creps, cuda, clock, comm):
    """Both runs released together; (compute run s, collective run s)."""
    if not cuda:
        a = clock.start()
        for _ in range(creps):
            cfn()
        for _ in range(kreps):
            kfn()
        t = clock.elapsed_s(a, clock.start())
        return t, t
    main = torch.cuda.current_stream()
    dist.barrier()
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)         # ~50 ms: the host enqueues everything meanwhile
    go = torch.cuda.Event()
    go.record(main)
    comm.wait_event(go)
    with torch.cuda.stream(comm):
        c0 = clock.start(comm)
        for _ in range(creps):
            cfn()
        c1 = clock.start(comm)
    k0 = clock.start(main)
    for _ in range(kreps):
        kfn()
    k1 = clock.start(main)
    torch.cuda.synchronize()
    return clock.elapsed_s(k0, k1), clock.elapsed_s(c0, c1)


def bench_overlap(torch, dist, device, cuda, kernels, colls, world, clock) -> list[dict]:
    rows = []
    comm = torch.cuda.Stream() if cuda else None
    for kkind, shape in kernels:
        try:
            kfn, flops, kbytes = make_kernel(torch, kkind, shape, device)
            k_one, _ = alone_s(torch, dist, kfn, clock, device, cuda=cuda, target_s=0.01)
            k_one = agree(torch, dist, k_one, device)
        except Exception as exc:
            rows.append({"kernel": kkind, "shape": shape, "error": f"{type(exc).__name__}: {exc}"})
            continue
        for ckind, nbytes in colls:
            row = {"kernel": kkind, "shape": shape, "kernel_flops": flops,
                   "kernel_bytes": kbytes, "kernel_alone_s": k_one, "coll": ckind,
                   "coll_bytes": nbytes, "world": world}
            try:
                cfn = make_coll(torch, dist, ckind, nbytes, device, world)
                c_one, _ = alone_s(torch, dist, cfn, clock, device, comm, cuda=cuda, target_s=0.01)
                c_one = agree(torch, dist, c_one, device)
                row["coll_alone_s"] = c_one
                # compute covered by a collective run 1.6 x as long, then the reverse
                kreps = max(3, int(0.015 / max(k_one, 1e-7)))
                creps = max(3, int(1.6 * kreps * k_one / max(c_one, 1e-7)))
                k_t, c_t = _concurrent(torch, dist, kfn, kreps, cfn, creps, cuda, clock, comm)
                row["compute_slowdown"] = k_t / (kreps * k_one)
                row["covered"] = {"kernel_reps": kreps, "coll_reps": creps,
                                  "kernel_run_s": k_t, "coll_run_s": c_t}
                creps2 = max(3, int(0.015 / max(c_one, 1e-7)))
                kreps2 = max(3, int(1.6 * creps2 * c_one / max(k_one, 1e-7)))
                k_t2, c_t2 = _concurrent(torch, dist, kfn, kreps2, cfn, creps2, cuda, clock,
                                         comm)
                row["comm_slowdown"] = c_t2 / (creps2 * c_one)
                row["covering"] = {"kernel_reps": kreps2, "coll_reps": creps2,
                                   "kernel_run_s": k_t2, "coll_run_s": c_t2}
                log(f"  {kkind} {str(shape):<20} x {ckind:<14} {nbytes / MiB:6.1f} MiB: compute "
                    f"x{row['compute_slowdown']:.3f}  comm x{row['comm_slowdown']:.3f}")
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                log(f"  {kkind} {shape} x {ckind}: {row['error']}")
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------ FSDP2 sweep
def build_stack(torch, d: int, linears: int, units: int, device):
    nn = torch.nn

    class Unit(nn.Module):
        def __init__(self):
            super().__init__()
            self.lins = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(linears))

        def forward(self, x):
            for i, lin in enumerate(self.lins):
                x = lin(x)
                if i + 1 < len(self.lins):
                    x = torch.relu(x)
            return x

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.units = nn.ModuleList(Unit() for _ in range(units))

        def forward(self, x):
            for u in self.units:
                x = u(x)
            return x

    torch.manual_seed(0)
    return Stack().to(device=device, dtype=torch.bfloat16)


def kind_of(name: str) -> str:
    low = name.lower()
    if "nccl" in low:
        return "nccl"
    if any(s in low for s in ("gemm", "cutlass", "nvjet", "sm90_", "sm80_", "cublas", "xmma")):
        return "gemm"
    if any(s in low for s in ("copy", "chunk_cat", "split_with_sizes", "catarray", "memcpy",
                              "memset")):
        return "copy"
    return "other"


def profile_step(torch, step, cuda: bool) -> dict:
    """One step's kernels: time per kind, per stream, and the largest names."""
    if not cuda:
        step()
        return {}
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    by_kind: dict[str, float] = {}
    by_stream: dict[str, dict[str, float]] = {}
    by_name: dict[str, list] = {}
    count = 0
    for e in prof.profiler.kineto_results.events():
        if "cuda" not in str(e.device_type()).lower():
            continue
        dur = e.duration_ns() / 1e9
        name = e.name()
        k = kind_of(name)
        by_kind[k] = by_kind.get(k, 0.0) + dur
        s = by_stream.setdefault(str(e.device_resource_id()), {})
        s[k] = s.get(k, 0.0) + dur
        agg = by_name.setdefault(name[:120], [0, 0.0])
        agg[0] += 1
        agg[1] += dur
        count += 1
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:14]
    return {"kernel_s_by_kind": by_kind, "kernel_s_by_stream": by_stream, "kernels": count,
            "top": [{"name": n, "count": c, "s": s} for n, (c, s) in top]}


def bench_fsdp_case(torch, dist, device, cuda, case, how: str, steps: int, clock) -> dict:
    d, linears, units, tokens = case
    world = dist.get_world_size()
    row = {"d": d, "linears": linears, "units": units, "tokens": tokens, "way": how,
           "world": world, "params": d * d * linears * units}
    model = build_stack(torch, d, linears, units, device)
    if how == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device.index] if cuda else None, bucket_cap_mb=25)
    elif how == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for u in model.units:
            fully_shard(u)
        fully_shard(model)
    x = torch.randn(tokens, d, dtype=torch.bfloat16, device=device)
    params = list(model.parameters())

    def step(marks=None, host=None):
        for p in params:
            p.grad = None
        h0 = time.perf_counter()
        a = clock.start()
        y = model(x)
        loss = y.float().square().mean()
        b = clock.start()
        loss.backward()
        c = clock.start()
        if host is not None:
            host.append(time.perf_counter() - h0)
        if marks is not None:
            marks.append((a, b, c))

    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    marks, host = [], []
    for _ in range(steps):
        step(marks, host)
    fwd = [clock.elapsed_s(a, b) for a, b, _ in marks]
    bwd = [clock.elapsed_s(b, c) for _, b, c in marks]
    tot = [clock.elapsed_s(a, c) for a, _, c in marks]
    mine = statistics.median(tot)
    t = torch.tensor([mine], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    row.update(step_s=float(t.item()), step_s_rank0=mine, fwd_s=statistics.median(fwd),
               bwd_s=statistics.median(bwd), host_issue_s=statistics.median(host),
               param_tensors=len(params))
    dist.barrier()
    try:
        row["profile"] = profile_step(torch, step, cuda)
    except Exception as exc:      # the step ran on every rank; only the reading failed
        row["profile"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    dist.barrier()
    return row


def bench_fsdp(torch, dist, device, cuda, cases, steps, clock, budget_end) -> list[dict]:
    rows = []
    for case in cases:
        for how in ("local", "ddp", "fsdp2"):
            if time.time() > budget_end:
                rows.append({"case": case, "way": how, "skipped": "time budget spent"})
                continue
            try:
                row = bench_fsdp_case(torch, dist, device, cuda, case, how, steps, clock)
                log(f"  d{case[0]:<5} lin{case[1]} units{case[2]} tok{case[3]:<5} {how:<5} "
                    f"step {row['step_s'] * 1e3:8.2f} ms (fwd {row['fwd_s'] * 1e3:7.2f} bwd "
                    f"{row['bwd_s'] * 1e3:7.2f} host {row['host_issue_s'] * 1e3:7.2f})")
            except Exception as exc:
                row = {"case": case, "way": how, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                log(f"  {case} {how}: {row['error']}")
            rows.append(row)
            if cuda:
                torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "train_comm.json"))
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (gloo)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="stop starting FSDP cases after this")
    ap.add_argument("--parts", default="collectives,overlap,fsdp")
    args = ap.parse_args(argv)
    result: dict = {"script": "benchmarks/train_comm_measure.py", "argv": sys.argv[1:]}
    t0 = time.time()
    try:
        import torch
        import torch.distributed as dist
        result["torch"] = torch.__version__
        cuda = torch.cuda.is_available() and not args.dry_run
        dist.init_process_group("nccl" if cuda else "gloo")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
            result["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            result["sm_count"] = torch.cuda.get_device_properties(device).multi_processor_count
        world = dist.get_world_size()
        result.update(device=torch.cuda.get_device_name(device) if cuda else "cpu", world=world,
                      env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")})
        log(f"device {result['device']} x{world} torch {torch.__version__}")
        clock = Clock(torch, cuda)
        parts = args.parts.split(",")
        if "collectives" in parts:
            log("collectives alone")
            result["collectives"] = bench_collectives(
                torch, dist, device, cuda, TINY["coll"] if args.dry_run else COLL_BYTES,
                world, clock)
        if "overlap" in parts:
            log("compute against a concurrent collective")
            result["overlap"] = bench_overlap(
                torch, dist, device, cuda, TINY["kernels"] if args.dry_run else KERNELS,
                TINY["overlap"] if args.dry_run else OVERLAP_COLLS, world, clock)
        if "fsdp" in parts:
            log("synthetic Linear stacks: local / DDP / FSDP2")
            result["fsdp"] = bench_fsdp(
                torch, dist, device, cuda, TINY["fsdp"] if args.dry_run else FSDP_CASES,
                2 if args.dry_run else args.steps, clock, t0 + args.budget_s)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    result["wall_s"] = time.time() - t0
    if int(os.environ.get("RANK", "0")) == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.out} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
