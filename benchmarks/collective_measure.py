"""Measure NCCL collectives through PyTorch four ways, for calibrating the collective model.

Run under torchrun on a machine of 2 or more GPUs (torch + NCCL only; no dse package):

    OUT=/path torchrun --nproc_per_node 2 benchmarks/collective_measure.py

For every collective (all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, send/recv)
and buffer size (powers of two from 4 KiB to 1 GiB, bf16; sizes as nccl-tests counts them):

* ``eager_b2b_s``: mean time per call of calls issued back to back from Python (nccl-tests'
  way: the ranks' launch skew is paid once; small calls are bound by the host's issue rate);
* ``eager_call_s``: median of single calls, each synchronised on its own (what one call in an
  otherwise idle stream costs: host launch + the collective);
* ``graph_b2b_s``: the same back-to-back calls captured in one CUDA graph, replay time over
  the calls (device time per call, no host cost: what a CUDA-graph decode step pays);
* ``graph_call_s``: a graph of one call, each replay synchronised (one graph launch + the
  collective).

Each is the slowest rank's. ``--modes eager`` or ``graph`` runs half of them (a capture NCCL
refuses then cannot cost the eager rows). Results go to
``$OUT/collective_measure_<world>_<modes>.json`` (``--out`` overrides the folder).
``--dry-run`` runs the eager modes on CPU with gloo at tiny sizes (``torchrun
--nproc_per_node 2 benchmarks/collective_measure.py --dry-run --out /tmp/x``). A case that
fails (a collective gloo lacks, a capture NCCL refuses) is recorded with its error and the run
goes on; ``--merge DIR`` joins a folder's result files into one JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from pathlib import Path

SIZES = [2**k for k in range(12, 31)]          # 4 KiB .. 1 GiB
TINY_SIZES = [4096, 65536]
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
#: nccl-tests' bus-bandwidth factor per collective on p ranks
BUS = {"all_reduce": lambda p: 2 * (p - 1) / p, "all_gather": lambda p: (p - 1) / p,
       "reduce_scatter": lambda p: (p - 1) / p, "all_to_all": lambda p: (p - 1) / p}


def _log(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, flush=True)


class Bench:
    def __init__(self, torch, dist, device):
        self.torch, self.dist, self.device = torch, dist, device
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def elapsed(self, fn) -> float:
        if not self.cuda:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
        a = self.torch.cuda.Event(enable_timing=True)
        b = self.torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    def slowest(self, v: float) -> float:
        t = self.torch.tensor([v], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())

    def call(self, fn, iters: int) -> float:
        """Median of single synchronised calls."""
        for _ in range(3):
            fn()
        self.sync()
        times = []
        for _ in range(iters):
            self.dist.barrier()
            self.sync()
            times.append(self.elapsed(fn))
        return statistics.median(times)

    def b2b(self, fn, iters: int) -> float:
        """Mean time per call of ``iters`` calls back to back."""
        for _ in range(3):
            fn()
        self.sync()
        self.dist.barrier()
        self.sync()
        return self.elapsed(lambda: [fn() for _ in range(iters)]) / iters

    def graph(self, fn, calls: int, iters: int) -> float:
        """Median replay time of a CUDA graph of ``calls`` calls, over the calls."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        self.sync()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        self.sync()
        for _ in range(2):
            g.replay()
        self.sync()
        times = []
        for _ in range(iters):
            self.dist.barrier()
            self.sync()
            times.append(self.elapsed(g.replay))
        del g
        return statistics.median(times) / calls


def measure(torch, dist, device, sizes, modes: str) -> list[dict]:
    world, rank = dist.get_world_size(), dist.get_rank()
    bench = Bench(torch, dist, device)
    dtype = torch.bfloat16 if bench.cuda else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in sizes:
        n = max(world, size // elem // world * world)
        nbytes = n * elem
        buf = torch.ones(n, device=device, dtype=dtype)
        out = torch.empty_like(buf)
        shard = torch.empty(n // world, device=device, dtype=dtype)
        fns = {
            "all_reduce": lambda: dist.all_reduce(buf),
            "all_gather": lambda: dist.all_gather_into_tensor(out, buf[: n // world]),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, buf),
            "all_to_all": lambda: dist.all_to_all_single(out, buf),
            "broadcast": lambda: dist.broadcast(buf, src=0),
            "send_recv": (lambda: dist.send(buf, dst=1)) if rank == 0 else (
                (lambda: dist.recv(buf, src=0)) if rank == 1 else (lambda: None)),
        }
        big = nbytes >= 2**27
        iters = 5 if big else 20
        calls = 4 if big else 20
        for kind in KINDS:
            p = 2 if kind == "send_recv" else world
            row = {"collective": kind, "bytes": nbytes, "devices": p, "world": world}
            todo = []
            if modes in ("eager", "all"):
                todo += [("eager_b2b_s", lambda: bench.b2b(fns[kind], iters)),
                         ("eager_call_s", lambda: bench.call(fns[kind], iters))]
            if modes in ("graph", "all") and bench.cuda:
                todo += [("graph_b2b_s", lambda: bench.graph(fns[kind], calls, iters)),
                         ("graph_call_s", lambda: bench.graph(fns[kind], 1, iters))]
            for key, run in todo:
                try:
                    dist.barrier()
                    row[key] = bench.slowest(run())
                except Exception as exc:   # noqa: BLE001 - record and go on
                    row[key] = None
                    row.setdefault("errors", {})[key] = str(exc).splitlines()[0][:200] \
                        if str(exc) else type(exc).__name__
                    bench.sync()
            t = row.get("eager_b2b_s")
            if t:
                row["busbw_Bps"] = nbytes / t * BUS.get(kind, lambda _: 1.0)(p)
            rows.append(row)
            _log(f"  {kind:<15}{nbytes:>12} B " + "  ".join(
                f"{k[:-2]} {row[k] * 1e6:9.1f} us" if row.get(k) else f"{k[:-2]} -"
                for k, _ in todo))
        del buf, out, shard
        if bench.cuda:
            torch.cuda.empty_cache()
    return rows


def merge(folder: Path) -> dict:
    """One JSON of every ``collective_measure_*.json`` in ``folder``: per world size, the
    rows of its runs joined (eager and graph modes of a collective and size in one row)."""
    runs: dict[str, dict] = {}
    for path in sorted(folder.glob("collective_measure_*.json")):
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            runs[path.name] = {"error": f"unreadable: {exc}"}
            continue
        run = runs.setdefault(str(d.get("world_size")), {
            k: d.get(k) for k in ("device", "world_size", "torch", "nccl", "env")})
        run.setdefault("errors", {})[d.get("modes")] = d.get("error")
        run.setdefault("wall_s", {})[d.get("modes")] = d.get("wall_s")
        rows = run.setdefault("rows", {})
        for r in d.get("rows", []):
            key = f"{r['collective']}:{r['bytes']}"
            rows.setdefault(key, {}).update(r)
    for run in runs.values():
        if isinstance(run.get("rows"), dict):
            run["rows"] = list(run["rows"].values())
    return {"runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output folder (default $OUT, else .)")
    ap.add_argument("--dry-run", action="store_true", help="CPU + gloo at tiny sizes")
    ap.add_argument("--modes", choices=("eager", "graph", "all"), default="all")
    ap.add_argument("--merge", metavar="DIR", help="join DIR's result files (stdout)")
    args = ap.parse_args(argv)
    if args.merge:
        print(json.dumps(merge(Path(args.merge)), indent=1))
        return 0
    from datetime import timedelta
    import warnings

    import torch
    import torch.distributed as dist
    warnings.filterwarnings("ignore")
    cuda = torch.cuda.is_available() and not args.dry_run
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=90))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    t0 = time.time()
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    _log(f"{world} ranks on {name}, torch {torch.__version__}")
    error = None
    rows: list[dict] = []
    try:
        rows = measure(torch, dist, device, TINY_SIZES if args.dry_run else SIZES,
                       modes=args.modes)
    except Exception:   # noqa: BLE001 - still write what there is
        error = traceback.format_exc()[-2000:]
        _log(error)
    if rank == 0:
        env = {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO",
                                              "TORCH_SYMM_MEM_DISABLE_MULTICAST")}
        result = {"device": name, "world_size": world, "torch": torch.__version__,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                  "backend": "nccl" if cuda else "gloo", "dtype": "bf16" if cuda else "fp32",
                  "dry_run": args.dry_run, "modes": args.modes, "env": env, "rows": rows,
                  "error": error,
                  "wall_s": time.time() - t0}
        folder = Path(args.out or os.environ.get("OUT") or ".")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"collective_measure_{world}_{args.modes}.json"
        path.write_text(json.dumps(result, indent=1))
        _log(f"wrote {path} ({time.time() - t0:.0f} s)")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
