"""Measure a host profile: PyTorch eager's per-op dispatch cost on this machine's CPU.

Runs standalone on a machine with torch and a CUDA GPU (imports torch, the standard library and
:mod:`dse.errors` only)::

    python3 -m dse.calibrate.host_profile --out host.json --where "lent H200 machine"

Method: each ATen operator is called ``calls`` times back to back on tiny CUDA tensors under
``torch.no_grad()`` (as Hugging Face ``generate`` runs), then the stream is synchronised; the
dispatch time is the wall time over the calls (median of ``repeats`` such loops). The kernels
of tiny tensors take about a microsecond, so the host is the bottleneck; the device time of the
same calls replayed from a CUDA graph is recorded too and an operator whose device time exceeds
70 % of its host interval is flagged ``gpu_bound`` (and left out of the kind medians). Per op
kind the median over its operators is the ``*kind`` fallback; ``*default`` the median of all.
``view_s`` is the median over view operators (no kernel). ``launch_latency_s`` is an idle
GPU's round trip (one tiny kernel launched and synchronised) less that kernel's dispatch and
device time; ``graph_launch_s`` the host time of one replay of a one-kernel CUDA graph.
``step_s`` (the model's and the framework's own Python per forward) is not measurable without a
model and is written as 0: fit it on whole-model wall times that you do not then claim.

The file is what ``accelerators.host_profile`` reads; ``--device cpu`` (tests, ``--dry-run`` of
benchmarks/gpu_baselines.py) runs the same code on CPU tensors and writes ``measured: false``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from dse.calibrate.gpu_bench import NoCudaGPU, capture_graph, require_cuda

#: Op kinds of the measured operators (the names are ``Op.target`` names of the IR).
KINDS = {
    "matmul": ("linear", "addmm", "mm", "bmm", "matmul", "baddbmm"),
    "attention": ("scaled_dot_product_attention",),
    "elementwise": ("add", "mul", "sub", "div", "neg", "pow", "rsqrt", "tanh", "exp", "gelu",
                    "silu", "relu", "sigmoid", "where", "masked_fill", "add_", "mul_"),
    "norm": ("layer_norm", "rms_norm"),
    "softmax": ("softmax",),
    "reduction": ("mean", "sum", "amax", "argmax"),
    "embedding": ("embedding", "index_select", "gather"),
    "data_movement": ("cat", "copy_", "contiguous", "clone", "stack", "index_copy_"),
}
#: View operators (dispatched, no kernel): ``view_s``.
VIEWS = ("view", "reshape", "transpose", "permute", "unsqueeze", "expand", "slice", "select",
         "split", "t")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ops(torch, dev: str) -> dict[str, Callable[[], Any]]:
    """One tiny call of every measured operator (LLM decode shapes at batch 1)."""
    import torch.nn.functional as F
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    x = torch.randn(1, 1, 64, device=dev, dtype=dt)
    y = torch.randn(1, 1, 64, device=dev, dtype=dt)
    w = torch.randn(64, 64, device=dev, dtype=dt)
    bias = torch.randn(64, device=dev, dtype=dt)
    m2 = torch.randn(1, 64, device=dev, dtype=dt)
    b3 = torch.randn(2, 8, 8, device=dev, dtype=dt)
    q = torch.randn(1, 2, 1, 32, device=dev, dtype=dt)
    kv = torch.randn(1, 2, 16, 32, device=dev, dtype=dt)
    mask = torch.zeros(1, 1, 64, device=dev, dtype=torch.bool)
    table = torch.randn(128, 64, device=dev, dtype=dt)
    idx = torch.zeros(1, 1, device=dev, dtype=torch.long)
    idx1 = torch.zeros(1, device=dev, dtype=torch.long)
    buf = torch.empty_like(x)
    cache = torch.randn(1, 2, 17, 32, device=dev, dtype=dt)
    pos = torch.tensor([16], device=dev)
    new = torch.randn(1, 2, 1, 32, device=dev, dtype=dt)
    xt = x.transpose(1, 2)
    lin = torch.nn.Linear(64, 64, device=dev, dtype=dt)
    return {
        "linear": lambda: F.linear(x, w, bias), "addmm": lambda: torch.addmm(bias, m2, w),
        "mm": lambda: torch.mm(m2, w), "bmm": lambda: torch.bmm(b3, b3),
        "matmul": lambda: torch.matmul(x, w), "baddbmm": lambda: torch.baddbmm(b3, b3, b3),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, kv, kv),
        "add": lambda: x + y, "mul": lambda: x * y, "sub": lambda: x - y, "div": lambda: x / y,
        "neg": lambda: -x, "pow": lambda: x.pow(2), "rsqrt": lambda: torch.rsqrt(x),
        "tanh": lambda: torch.tanh(x), "exp": lambda: torch.exp(x), "gelu": lambda: F.gelu(x),
        "silu": lambda: F.silu(x), "relu": lambda: F.relu(x), "sigmoid": lambda: x.sigmoid(),
        "where": lambda: torch.where(mask, x, y), "masked_fill": lambda: x.masked_fill(mask, 0),
        "add_": lambda: buf.add_(y), "mul_": lambda: buf.mul_(y),
        "layer_norm": lambda: F.layer_norm(x, (64,), bias, bias),
        "rms_norm": lambda: F.rms_norm(x, (64,), bias),
        "softmax": lambda: torch.softmax(x, -1), "mean": lambda: x.mean(-1, keepdim=True),
        "sum": lambda: x.sum(-1), "amax": lambda: x.amax(-1), "argmax": lambda: x.argmax(-1),
        "embedding": lambda: F.embedding(idx, table),
        "index_select": lambda: table.index_select(0, idx1),
        "gather": lambda: torch.gather(x, 2, idx.unsqueeze(-1)),
        "cat": lambda: torch.cat([kv, new], dim=2), "copy_": lambda: buf.copy_(x),
        "contiguous": lambda: xt.contiguous(), "clone": lambda: x.clone(),
        "stack": lambda: torch.stack([x, y]),
        "index_copy_": lambda: cache.index_copy_(2, pos, new),
        "view": lambda: x.view(1, 64), "reshape": lambda: x.reshape(64),
        "transpose": lambda: x.transpose(1, 2), "permute": lambda: x.permute(2, 0, 1),
        "unsqueeze": lambda: x.unsqueeze(0), "expand": lambda: x.expand(2, 1, 64),
        "slice": lambda: x[:, -1:], "select": lambda: x[0], "split": lambda: x.split(32, -1),
        "t": lambda: w.t(),
        "arange": lambda: torch.arange(16, device=dev), "zeros": lambda: torch.zeros(
            1, 64, device=dev, dtype=dt), "full": lambda: torch.full((1, 64), 1.0, device=dev),
        "_to_copy": lambda: x.to(torch.float32),
        "module_call_linear": lambda: lin(x),
    }


def _host_interval(torch, fn, calls: int, repeats: int, cuda: bool) -> list[float]:
    """Wall time per call of ``calls`` back-to-back calls then a sync, ``repeats`` times, s."""
    out = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls)
    return out


def _device_time(torch, fn, calls: int = 50) -> float | None:
    """Device time per call of ``fn`` replayed ``calls`` times from a CUDA graph, s (None when
    the op cannot be captured)."""
    try:
        g = capture_graph(torch, fn, calls)
        g.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / calls
    except Exception:
        torch.cuda.synchronize()
        return None


def _graph_launch(torch, dev: str, calls: int, repeats: int) -> float:
    """Host time of one replay of a one-kernel CUDA graph, s (back to back, then a sync)."""
    x = torch.zeros(1, device=dev)
    g = capture_graph(torch, lambda: x.add_(1.0))
    return statistics.median(_host_interval(torch, g.replay, calls, repeats, True))


def _round_trip(torch, dev: str, repeats: int) -> float:
    """Wall time of one tiny kernel launched on an idle GPU and synchronised, s (median)."""
    x = torch.zeros(1, device=dev)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        x.add_(1.0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(device: str = "cuda", calls: int = 400, repeats: int = 7, where: str = "",
            log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The host profile dict of this machine (see the module docstring)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if device == "cuda":
        torch = require_cuda()
    else:
        import torch
    cuda = device == "cuda"
    t0 = time.monotonic()
    raw: dict[str, Any] = {}
    with torch.no_grad():
        ops = _ops(torch, device)
        for name, fn in ops.items():
            try:
                for _ in range(20):  # warm-up: allocator, kernels, dispatch caches
                    fn()
                reps = _host_interval(torch, fn, calls, repeats, cuda)
                rec: dict[str, Any] = {"interval_s": statistics.median(reps),
                                       "min_s": min(reps), "max_s": max(reps), "calls": calls}
                if cuda:
                    dev_s = _device_time(torch, fn)
                    rec["device_s"] = dev_s
                    rec["gpu_bound"] = bool(dev_s and dev_s > 0.7 * rec["interval_s"])
                raw[name] = rec
            except Exception as exc:  # one op must not lose the profile
                raw[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        launch = graph = 0.0
        if cuda:
            rt = _round_trip(torch, device, 50)
            add = raw.get("add_", {})
            launch = max(0.0, rt - add.get("interval_s", 0.0) - (add.get("device_s") or 0.0))
            graph = _graph_launch(torch, device, calls, repeats)
            raw["_round_trip"] = {"interval_s": rt}
            raw["_graph_replay"] = {"interval_s": graph}

    def ok(name):
        r = raw.get(name, {})
        return "interval_s" in r and not r.get("gpu_bound")

    dispatch: dict[str, float] = {n: raw[n]["interval_s"] for ns in KINDS.values() for n in ns
                                  if ok(n)}
    for kind, names in KINDS.items():
        vals = [dispatch[n] for n in names if n in dispatch]
        if vals:
            dispatch["*" + kind] = statistics.median(vals)
    kernel_ops = [dispatch[n] for ns in KINDS.values() for n in ns if n in dispatch]
    dispatch["*default"] = statistics.median(kernel_ops) if kernel_ops else 0.0
    views = [raw[n]["interval_s"] for n in VIEWS if ok(n)]
    props = torch.cuda.get_device_properties(0) if cuda else None
    profile = {
        "schema": 1, "kind": "host_profile", "measured": cuda,
        "name": f"{(props.name if props else 'cpu').replace(' ', '-').lower()}-host",
        "dispatch_s": {k: float(f"{v:.4g}") for k, v in dispatch.items()},
        "view_s": float(f"{statistics.median(views):.4g}") if views else 0.0,
        "launch_latency_s": float(f"{launch:.4g}"), "graph_launch_s": float(f"{graph:.4g}"),
        "step_s": 0.0,
        "source": {
            "where": where or platform.node(), "cpu": _cpu_name(), "cpu_count": os.cpu_count(),
            "gpu": props.name if props else None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
            "method": f"{calls} back-to-back calls on tiny tensors under torch.no_grad(), "
                      f"then a sync; median of {repeats}",
        },
        "raw": raw,
        "seconds": round(time.monotonic() - t0, 1),
    }
    log(f"host profile: default dispatch {dispatch['*default'] * 1e6:.2f} us, view "
        f"{profile['view_s'] * 1e6:.2f} us, launch round trip {launch * 1e6:.2f} us, graph "
        f"launch {graph * 1e6:.2f} us ({profile['seconds']} s)")
    return profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m dse.calibrate.host_profile",
                                     description="Measure PyTorch eager's per-op dispatch cost "
                                     "on this machine (a host profile for the gpu template).")
    parser.add_argument("--out", required=True, help="host profile JSON to write")
    parser.add_argument("--where", default="", help="where it was measured (written into it)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: exercise the code on CPU tensors (not a profile)")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    try:
        profile = measure(args.device, calls=args.calls, where=args.where)
    except NoCudaGPU as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(profile, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
