"""Measure collectives and a Megatron-style tensor-parallel Llama stack on a multi-GPU machine,
and compare the measurements with the system model.

Measure (one command on a machine of 2 or more NVLink GPUs; torch + NCCL only):

    OUT=/path/to/out torchrun --nproc_per_node 2 benchmarks/multi_gpu_measure.py

* collectives from 4 KiB to 1 GiB (all-reduce, all-gather, reduce-scatter, all-to-all,
  broadcast, send/recv) in bf16: the mean time per call of calls issued back to back, as
  nccl-tests times them (``time_s``), and the median of single calls each synchronised on its
  own (``call_time_s``: pays the ranks' launch skew every call); the ranks' slowest; algbw and
  busbw as nccl-tests defines them;
* a Llama-2-70B-shaped decoder stack (hidden 8192, 64 heads, 8 KV heads, FFN 28672, vocab
  32000; ``--layers`` layers, random bf16 weights) with Megatron tensor parallelism (column-
  parallel QKV / gate-up / LM head, row-parallel output projections, one all-reduce after
  attention and one after the MLP, the logits all-gathered), a preallocated KV cache, in
  each layout of ``--layouts`` (default: TP = 1 on rank 0 alone, TP = world size, and on 4 or
  more GPUs TP = world/2 x PP = 2): prefill and decode at several batch / length points,
  decode also replayed as a CUDA graph. A pipeline layout ``tpApp B`` puts stage s (layers
  s*L/B .. (s+1)*L/B - 1, the embedding on the first stage and the LM head on the last) on
  ranks s*A .. (s+1)*A - 1, each stage tensor-parallel over its A ranks, the hidden state
  sent stage to stage (rank r to rank r + A); one request is timed end to end, every
  iteration starting from a barrier, so a stage cannot run ahead of the one before it (the
  latency of one step, as the system model predicts it, not a pipelined throughput).

Results go to ``$OUT/multi_gpu_measure.json`` (``--out`` overrides); progress is printed.
``--dry-run`` runs the same code on CPU with the gloo backend at tiny sizes (collectives gloo
lacks are skipped), e.g. ``torchrun --nproc_per_node 2 benchmarks/multi_gpu_measure.py
--dry-run --out /tmp/x``.

Compare (no GPU; needs the dse package):

    python benchmarks/multi_gpu_measure.py --compare $OUT/multi_gpu_measure.json [--system hgx-h200]

prints the model's prediction of every measured row (``dse collective`` and ``dse simulate
llama2-70b --arch n_layer=L --system S --devices TP*PP --tp TP --pp PP``) with the error, and
each layout's speed-up over TP = 1 (TP1 time / layout time) measured and predicted.

Eight GPUs (issue 35): ``torchrun --nproc_per_node 8 benchmarks/multi_gpu_measure.py``
measures collectives on 8 ranks and the stack at TP = 1, TP = 8 and TP = 4 x PP = 2;
compare with ``--system dgx-h100`` (H100s) or ``hgx-h200``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

#: The Llama-2-70B shape [R HF meta-llama/Llama-2-70b-hf config.json].
FULL = dict(d=8192, heads=64, kv_heads=8, ff=28672, vocab=32000)
TINY = dict(d=64, heads=8, kv_heads=4, ff=128, vocab=256)
SIZES = [4 * 4**i * 1024 for i in range(10)]                 # 4 KiB .. 1 GiB
TINY_SIZES = [4096, 16384, 65536]
PREFILL = [(1, 512), (1, 2048), (4, 2048)]                   # (batch, prompt tokens)
DECODE = [(1, 1024), (8, 1024), (32, 1024), (32, 4096)]      # (batch, context tokens)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
               "send_recv")


def _log(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, flush=True)


# ------------------------------------------------------------------------------ measuring
def elapsed_s(torch, fn, cuda: bool) -> float:
    """Time of one call of ``fn``: CUDA events around it on a GPU, the wall clock on the CPU, s."""
    if not cuda:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


class Timer:
    """Median wall time of a callable on this device, the slowest rank's."""

    def __init__(self, torch, dist, device):
        self.torch, self.dist, self.device = torch, dist, device
        self.cuda = device.type == "cuda"

    def __call__(self, fn, warmup: int, iters: int) -> float:
        for _ in range(warmup):
            fn()
        self._sync()
        return statistics.median(elapsed_s(self.torch, fn, self.cuda) for _ in range(iters))

    def back_to_back(self, fn, warmup: int, iters: int) -> float:
        """Mean time per call of ``iters`` calls issued back to back (nccl-tests' way: the
        ranks' launch skew is paid once, not per call), s."""
        for _ in range(warmup):
            fn()
        self._sync()
        self.dist.barrier()
        return elapsed_s(self.torch, lambda: [fn() for _ in range(iters)], self.cuda) / iters

    def synchronised(self, fn, warmup: int, iters: int, group_ranks: int) -> float:
        """Median time of ``fn`` with every iteration started from a world barrier (so a
        pipeline stage cannot run ahead of the stage before it), s. Ranks at or past
        ``group_ranks`` pass ``fn=None`` and only join the barriers."""
        times = []
        for i in range(warmup + iters):
            self._sync()
            self.dist.barrier()
            if fn is None:
                continue
            t = elapsed_s(self.torch, fn, self.cuda)
            if i >= warmup:
                times.append(t)
        return statistics.median(times) if times else 0.0

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def slowest(self, value: float) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())


def measure_collectives(torch, dist, device, timer, sizes, dtype) -> list[dict]:
    world, rank = dist.get_world_size(), dist.get_rank()
    out = []
    elem = torch.tensor([], dtype=dtype).element_size()
    for size in sizes:
        n = max(world, size // elem // world * world)
        nbytes = n * elem
        buf = torch.randn(n, device=device).to(dtype)
        outbuf = torch.empty_like(buf)
        shard = torch.empty(n // world, device=device, dtype=dtype)
        fns = {
            "all_reduce": lambda: dist.all_reduce(buf),
            "all_gather": lambda: dist.all_gather_into_tensor(outbuf, buf[: n // world]),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, buf),
            "all_to_all": lambda: dist.all_to_all_single(outbuf, buf),
            "broadcast": lambda: dist.broadcast(buf, src=0),
            "send_recv": (lambda: dist.send(buf, dst=1)) if rank == 0 else (
                (lambda: dist.recv(buf, src=0)) if rank == 1 else (lambda: None)),
        }
        iters = 20 if nbytes < 2**28 else 5
        for kind in COLLECTIVES:
            try:
                dist.barrier()
                t_call = timer.slowest(timer(fns[kind], 3, iters))
                t = timer.slowest(timer.back_to_back(fns[kind], 3, iters))
            except (RuntimeError, NotImplementedError) as exc:   # gloo lacks some
                _log(f"  {kind} {nbytes} B: skipped ({str(exc).splitlines()[0][:80]})")
                continue
            p = 2 if kind == "send_recv" else world
            factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p,
                      "reduce_scatter": (p - 1) / p, "all_to_all": (p - 1) / p}.get(kind, 1.0)
            out.append({"collective": kind, "bytes": nbytes, "devices": p, "time_s": t,
                        "call_time_s": t_call,
                        "algbw_Bps": nbytes / t, "busbw_Bps": nbytes / t * factor})
            _log(f"  {kind:<15}{nbytes:>12} B {t * 1e6:>10.1f} us  busbw "
                 f"{nbytes / t * factor / 1e9:8.2f} GB/s")
    return out


def build_stack(torch, F, dist, shape, layers, tp, rank, batch, max_len, device, dtype,
                first: bool = True, last: bool = True):
    """Random weights of a Megatron-split Llama stack (``layers`` layers: one pipeline stage's)
    for rank ``rank`` of ``tp``, and its forward ``fn(x, pos)``: ``x`` the token ids on the
    first stage, else the hidden state; returns the gathered last-token logits on the last
    stage, else the hidden state to send on."""
    d, heads, kvh, ff, vocab = (shape[k] for k in ("d", "heads", "kv_heads", "ff", "vocab"))
    hd = d // heads
    hl, kl = heads // tp, kvh // tp
    # drawn on the device itself: a 70B-shaped stage's weights drawn on the CPU took ~1 min
    g = torch.Generator(device=device).manual_seed(1234 + rank)

    def w(*s):
        return (torch.randn(*s, generator=g, device=device, dtype=torch.float32) * 0.02).to(dtype)

    emb = w(vocab, d) if first else None
    params = []
    for _ in range(layers):
        params.append(dict(
            n1=torch.ones(d, device=device, dtype=dtype), n2=torch.ones(d, device=device,
                                                                        dtype=dtype),
            wqkv=w(d, (hl + 2 * kl) * hd), wo=w(hl * hd, d), w13=w(d, 2 * ff // tp),
            w2=w(ff // tp, d),
            k=torch.zeros(batch, kl, max_len, hd, device=device, dtype=dtype),
            v=torch.zeros(batch, kl, max_len, hd, device=device, dtype=dtype)))
    norm = torch.ones(d, device=device, dtype=dtype)
    head = w(d, vocab // tp) if last else None
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=device).float() / hd))
    positions = torch.arange(max_len, device=device).float()
    freqs = torch.outer(positions, inv)
    cos = torch.cat([freqs.cos(), freqs.cos()], -1).to(dtype)
    sin = torch.cat([freqs.sin(), freqs.sin()], -1).to(dtype)

    def rms(x, weight):
        return F.rms_norm(x, (x.shape[-1],), weight, 1e-5)

    def rope(x, c, s):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * c + rot * s

    def forward(ids, pos):
        b, s = ids.shape[:2]
        x = emb[ids] if first else ids
        c, sn = cos[pos:pos + s], sin[pos:pos + s]
        for p in params:
            h = rms(x, p["n1"])
            qkv = h @ p["wqkv"]
            q, k, v = qkv.split([hl * hd, kl * hd, kl * hd], -1)
            q = rope(q.view(b, s, hl, hd).transpose(1, 2), c, sn)
            k = rope(k.view(b, s, kl, hd).transpose(1, 2), c, sn)
            p["k"][:b, :, pos:pos + s] = k
            p["v"][:b, :, pos:pos + s] = v.view(b, s, kl, hd).transpose(1, 2)
            # grouped-query attention without copying the cache (what the zoo's models do)
            a = F.scaled_dot_product_attention(q, p["k"][:b, :, :pos + s],
                                               p["v"][:b, :, :pos + s], is_causal=s > 1,
                                               enable_gqa=hl != kl)
            o = a.transpose(1, 2).reshape(b, s, hl * hd) @ p["wo"]
            if tp > 1:
                dist.all_reduce(o)
            x = x + o
            h = rms(x, p["n2"])
            gate, up = (h @ p["w13"]).chunk(2, -1)
            o = (F.silu(gate) * up) @ p["w2"]
            if tp > 1:
                dist.all_reduce(o)
            x = x + o
        if not last:
            return x
        logits = rms(x[:, -1], norm) @ head
        if tp > 1:
            dist.all_gather([torch.empty_like(logits) for _ in range(tp)], logits.contiguous())
        return logits

    return forward


def parse_layouts(text: str | None, world: int) -> list[tuple[int, int]]:
    """``"tp1,tp8,tp4pp2"`` -> [(1, 1), (8, 1), (4, 2)]; default: TP=1, TP=world and, on 4 or
    more ranks, TP=world/2 x PP=2. Each layout must fit the world."""
    if not text:
        out = [(1, 1), (world, 1)] + ([(world // 2, 2)] if world >= 4 and world % 2 == 0 else [])
        return sorted(set(out), key=out.index)
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        tp_s, _, pp_s = part.removeprefix("tp").partition("pp")
        if not part.startswith("tp") or not tp_s.isdigit() or (pp_s and not pp_s.isdigit()):
            raise SystemExit(f"--layouts: {part!r} is not tpN or tpNppM")
        tp, pp = int(tp_s), int(pp_s or 1)
        if tp < 1 or pp < 1 or tp * pp > world:
            raise SystemExit(f"--layouts: {part!r} needs {tp * pp} ranks, world is {world}")
        out.append((tp, pp))
    return out


class _Pipeline:
    """One rank's part of a ``tp x pp`` layout: its stage's forward, the hidden state received
    from the stage before (rank - tp) and sent to the stage after (rank + tp)."""

    def __init__(self, torch, dist, fwd, tp, pp, rank, hidden_shape, dtype, device):
        self.torch, self.dist, self.fwd = torch, dist, fwd
        self.stage = rank // tp
        self.tp, self.pp, self.rank = tp, pp, rank
        self.buf = torch.empty(hidden_shape, dtype=dtype, device=device)

    def recv(self):
        if self.stage > 0:
            self.dist.recv(self.buf, src=self.rank - self.tp)
            return self.buf
        return None

    def send(self, x):
        if self.stage < self.pp - 1:
            self.dist.send(x.contiguous(), dst=self.rank + self.tp)


def measure_stack(torch, F, dist, device, timer, shape, layers, prefill, decode, dtype,
                  graphs: bool, layouts: list[tuple[int, int]]) -> list[dict]:
    rank = dist.get_rank()
    out = []
    for tp, pp in layouts:
        devices = tp * pp
        active = rank < devices
        stage = rank // tp
        # one TP group per stage; every rank takes part in creating every group
        groups = [dist.new_group(list(range(s * tp, (s + 1) * tp))) if tp > 1 else None
                  for s in range(pp)]
        sub = groups[stage] if active and tp > 1 else None
        mdist = _GroupDist(dist, sub) if sub is not None else dist
        max_len = max([s for _, s in prefill] + [c + 1 for _, c in decode])
        batch = max([b for b, _ in prefill] + [b for b, _ in decode])
        stage_layers = layers // pp
        fwd = build_stack(torch, F, mdist, shape, stage_layers, tp, rank % tp, batch, max_len,
                          device, dtype, first=stage == 0,
                          last=stage == pp - 1) if active else None
        for phase, points in (("prefill", prefill), ("decode", decode)):
            for b, n in points:
                row = {"tp": tp, "pp": pp, "phase": phase, "batch": b, "layers": layers,
                       **({"seq": n} if phase == "prefill" else {"context": n})}
                steps = n if phase == "prefill" else 1
                ids = torch.randint(0, shape["vocab"], (b, steps), device=device)
                pos = 0 if phase == "prefill" else n
                t_eager = t_graph = 0.0
                dist.barrier()
                if active:
                    pipe = _Pipeline(torch, dist, fwd, tp, pp, rank, (b, steps, shape["d"]),
                                     dtype, device) if pp > 1 else None
                    with torch.no_grad():
                        if pipe is None:
                            t_eager = timer(lambda: fwd(ids, pos), 2,
                                            5 if phase == "prefill" else 10)
                        else:
                            def step(run=lambda x: fwd(x, pos)):
                                got = pipe.recv()
                                pipe.send(run(ids if got is None else got))
                            t_eager = timer.synchronised(step, 2,
                                                         5 if phase == "prefill" else 10,
                                                         group_ranks=devices)
                        if graphs and phase == "decode" and timer.cuda:
                            t_graph = _graph_time(torch, timer, lambda: fwd(ids, pos)) \
                                if pipe is None else _pipeline_graph_time(
                                    torch, timer, fwd, pipe, ids, pos, devices)
                else:
                    if pp > 1:     # ranks outside the layout still join its barriers
                        timer.synchronised(None, 2, 5 if phase == "prefill" else 10,
                                           group_ranks=devices)
                        if graphs and phase == "decode" and timer.cuda:
                            timer.synchronised(None, 3, 20, group_ranks=devices)
                row["time_s"] = timer.slowest(t_eager)
                if graphs and phase == "decode" and timer.cuda:
                    row["graph_time_s"] = timer.slowest(t_graph)
                out.append(row)
                _log(f"  tp={tp} pp={pp} {phase:<8} b={b:<3} "
                     f"{'s' if phase == 'prefill' else 'ctx'}="
                     f"{n:<5} eager {row['time_s'] * 1e3:9.3f} ms"
                     + (f"   graph {row['graph_time_s'] * 1e3:9.3f} ms"
                        if "graph_time_s" in row else ""))
        del fwd
        if timer.cuda:
            torch.cuda.empty_cache()
    return out


def _pipeline_graph_time(torch, timer, fwd, pipe, ids, pos, devices) -> float:
    """A pipeline decode step with each stage's compute replayed as a CUDA graph and the
    stage-to-stage transfer eager, every iteration from a barrier, s."""
    stream = torch.cuda.Stream()
    static_in = pipe.buf if pipe.stage > 0 else ids
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            fwd(static_in, pos)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = fwd(static_in, pos)

    def step():
        pipe.recv()                 # into pipe.buf, the graph's input on stages > 0
        graph.replay()
        pipe.send(static_out)
    return timer.synchronised(step, 3, 20, group_ranks=devices)


def _graph_time(torch, timer, fn) -> float:
    """Median replay time of ``fn`` captured as a CUDA graph (warmed on a side stream)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        fn()
    return timer(graph.replay, 3, 20)


class _GroupDist:
    """``torch.distributed`` calls bound to one process group."""

    def __init__(self, dist, group):
        self.dist, self.group = dist, group

    def all_reduce(self, t):
        return self.dist.all_reduce(t, group=self.group)

    def all_gather(self, out, t):
        return self.dist.all_gather(out, t, group=self.group)


def run_measure(args) -> int:
    import warnings

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    warnings.filterwarnings("ignore", category=FutureWarning)   # *_into_tensor renames
    cuda = torch.cuda.is_available() and not args.dry_run
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit("run under torchrun with --nproc_per_node 2 (or more)")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    timer = Timer(torch, dist, device)
    t0 = time.time()
    _log(f"{world} ranks, backend {backend}, device "
         f"{torch.cuda.get_device_name(device) if cuda else 'cpu'}")
    colls = []
    if not args.no_collectives:
        _log("collectives:")
        colls = measure_collectives(torch, dist, device, timer,
                                    TINY_SIZES if args.dry_run else SIZES, dtype)
    shape = TINY if args.dry_run else FULL
    stack = []
    if not args.no_stack:
        _log("tensor-parallel Llama stack:")
        layers = min(args.layers, 4) if args.dry_run else args.layers
        prefill = [(1, 8), (2, 16)] if args.dry_run else PREFILL
        decode = [(1, 16), (2, 16)] if args.dry_run else DECODE
        layouts = parse_layouts(args.layouts, world)
        if any(layers % pp for _, pp in layouts):
            raise SystemExit(f"--layers {layers} must divide by every layout's pp")
        stack = measure_stack(torch, F, dist, device, timer, shape, layers, prefill, decode,
                              dtype, graphs=not args.no_graphs, layouts=layouts)
    if rank == 0:
        result = {
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "world_size": world, "backend": backend, "dtype": str(dtype).replace("torch.", ""),
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "shape": shape, "dry_run": args.dry_run, "collectives": colls, "stack": stack,
            "wall_s": time.time() - t0}
        out_dir = Path(args.out or os.environ.get("OUT") or ".")
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "multi_gpu_measure.json"
        path.write_text(json.dumps(result, indent=2))
        _log(f"wrote {path} ({time.time() - t0:.0f} s)")
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------------------ comparing
def compare(path: str, system: str) -> dict:
    """The model's prediction of every measured row and the errors (see the module doc)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dse import api

    data = json.loads(Path(path).read_text())
    rows = []
    for m in data["collectives"]:
        c = api.collective(m["collective"], m["bytes"], system, m["devices"],
                           group=[0, 1] if m["collective"] == "send_recv" else None)
        rows.append({"what": f"{m['collective']} {m['bytes']} B", "measured_s": m["time_s"],
                     "model_s": c.time_s, "error": c.time_s / m["time_s"] - 1,
                     "bytes": m["bytes"], "kind": "collective", "algorithm": c.algorithm})
    model_of = {}
    shape = data["shape"]
    arch_shape = {"d_model": shape["d"], "n_head": shape["heads"],
                  "n_kv_head": shape["kv_heads"], "d_ff": shape["ff"],
                  "vocab_size": shape["vocab"]}
    for m in data["stack"]:
        length = m.get("seq", m.get("context"))
        tp, pp = m["tp"], m.get("pp", 1)
        name = layout_name(tp, pp)
        kw = dict(phase=m["phase"], batch=m["batch"],       # the stack's cache holds ctx + 1
                  arch={"n_layer": m["layers"], "max_seq": max(4096, length + 1), **arch_shape})
        kw.update({"seq": m["seq"]} if m["phase"] == "prefill" else {"context": m["context"]})
        # the script runs the whole batch through each stage: one microbatch
        r = api.simulate("llama2-70b", system=system, devices=tp * pp,
                         parallel={"tp": tp, "pp": pp, **({"microbatches": 1} if pp > 1 else {})},
                         **kw)
        key = (m["phase"], m["batch"], length)
        # The system engine predicts device time (runtime ``kernels``): a decode step's is its
        # CUDA-graph replay; an eager decode step of a few ms is bound by the host's dispatch
        # (listed, kind "eager decode", outside the medians). Prefill is device-bound.
        device_s = m.get("graph_time_s") or m["time_s"]
        model_of[(key, name)] = (r.latency_s, device_s)
        for mode in ("time_s", "graph_time_s"):
            if m.get(mode):
                host_bound = mode == "time_s" and m["phase"] == "decode"
                rows.append({"what": f"{name} {m['phase']} b={m['batch']} "
                                     f"{'s' if m['phase'] == 'prefill' else 'ctx'}="
                                     f"{key[2]} {'graph' if mode == 'graph_time_s' else 'eager'}",
                             "measured_s": m[mode], "model_s": r.latency_s,
                             "error": r.latency_s / m[mode] - 1,
                             "kind": "eager decode" if host_bound else name})
    speedups = []
    names = sorted({n for _, n in model_of}, key=lambda n: (len(n), n))
    for (key, name), (model, meas) in sorted(model_of.items()):
        if name == "tp1" or (key, "tp1") not in model_of:
            continue
        m1, e1 = model_of[(key, "tp1")]
        speedups.append({"what": f"{key[0]} b={key[1]} n={key[2]}", "layout": name,
                         "measured": e1 / meas, "model": m1 / model,
                         "error": (m1 / model) / (e1 / meas) - 1})
    big = [abs(r["error"]) for r in rows if r["kind"] == "collective" and r["bytes"] >= 2**20]
    return {"device": data["device"], "system": system, "rows": rows, "speedups": speedups,
            "layouts": names,
            "median_abs_error": {
                "collectives >= 1 MiB": statistics.median(big) if big else math.nan,
                **{name: statistics.median([abs(r["error"]) for r in rows
                                            if r["kind"] == name] or [math.nan])
                   for name in names},
                "speed-up": statistics.median([abs(s["error"]) for s in speedups] or [math.nan]),
                **{f"speed-up {name}": statistics.median(
                    [abs(s["error"]) for s in speedups if s["layout"] == name] or [math.nan])
                   for name in names if name != "tp1"}}}


def layout_name(tp: int, pp: int) -> str:
    """``tp8`` or ``tp4pp2``: a stack row's layout as the comparison groups it."""
    return f"tp{tp}" + (f"pp{pp}" if pp > 1 else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output folder (default $OUT, else .)")
    ap.add_argument("--dry-run", action="store_true", help="CPU + gloo at tiny sizes")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers of the stack")
    ap.add_argument("--no-graphs", action="store_true", help="skip CUDA-graph decode")
    ap.add_argument("--layouts", help="stack layouts, e.g. tp1,tp8,tp4pp2 (default: tp1, "
                                      "tp=world and, on >= 4 GPUs, tp=world/2 x pp=2)")
    ap.add_argument("--no-collectives", action="store_true", help="measure the stack only")
    ap.add_argument("--no-stack", action="store_true", help="measure the collectives only")
    ap.add_argument("--compare", metavar="JSON", help="compare a measurement with the model")
    ap.add_argument("--system", default="hgx-h200", help="system preset for --compare")
    args = ap.parse_args(argv)
    if args.compare:
        res = compare(args.compare, args.system)
        for r in res["rows"]:
            print(f"{r['what']:<42}{r['measured_s'] * 1e6:>12.1f} us{r['model_s'] * 1e6:>12.1f}"
                  f" us{100 * r['error']:>+9.1f}%")
        for s in res["speedups"]:
            print(f"speed-up {s['layout']} {s['what']:<28} measured {s['measured']:.2f}  model "
                  f"{s['model']:.2f}  {100 * s['error']:+.1f}%")
        print("median |error|: " + ", ".join(f"{k} {100 * v:.1f}%"
                                             for k, v in res["median_abs_error"].items()))
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=2))
        return 0
    return run_measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
