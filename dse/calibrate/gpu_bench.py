"""Microbenchmarks of a CUDA GPU, for calibrating the ``gpu`` template.

Runs standalone on any machine with torch and a CUDA GPU (it imports torch, the standard library
and :mod:`dse.errors`, nothing else of the project)::

    python3 -m dse.calibrate.gpu_bench --out raw.json [--quick]

Method (see docs/validation.md (gpu section)):

* Every case is timed with CUDA events around replays of a CUDA graph that holds ``calls``
  back-to-back launches of the op, so host launch overhead stays out of the numbers; each replay
  gives one time per call, and the case reports the median (and min/max) over ``repeats``
  replays, after a warm-up replay. Ops that a graph cannot capture are timed eagerly between two
  events (``mode: eager``).
* Inputs (and outputs) are rotated over ``slots`` buffer sets that together span at least four
  times the L2 cache, so that consecutive calls never find their operands in L2.
* Inputs are random normal values (never zeros: zeros run faster on tensor cores).
* The GPU is warmed up (clocks up) by the power measurement's GEMM loop before any timing.

The output JSON holds the device properties, the settings and one record per case
(``measurements``); ``dse.calibrate.fit`` fits the ``gpu`` template's efficiency model from it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from dse.errors import DSEError

#: Version of the raw-measurement format written here.
SCHEMA_VERSION = 1

#: Project dtype names -> torch dtype attribute names.
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
                "fp8": "float8_e4m3fn", "int8": "int8"}

#: Bytes per element of each dtype.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}


class NoCudaGPU(DSEError):
    """There is no CUDA GPU (or no torch) on this machine: nothing to calibrate."""


@dataclass(frozen=True)
class Settings:
    """How hard to measure. ``target_s``: GPU time of one graph replay (s); ``repeats``: timed
    replays per case; ``max_calls``: most launches captured in one graph; ``rotate_bytes``: the
    total size the rotated buffer sets should span (B); ``max_slot_bytes``: cap on all the
    buffer sets of one case (B); ``max_seconds``: wall-clock budget of the whole run (s)."""

    grid: str = "full"
    target_s: float = 2e-3
    repeats: int = 9
    max_calls: int = 200
    rotate_bytes: float = 256e6
    max_slot_bytes: float = 12e9
    max_seconds: float = 420.0
    power_window_s: float = 2.5

    @classmethod
    def for_grid(cls, grid: str, max_seconds: float | None = None) -> "Settings":
        base = {"full": cls(), "quick": cls(grid="quick", target_s=1e-3, repeats=3,
                                            max_seconds=150.0, power_window_s=1.5),
                "smoke": cls(grid="smoke", target_s=1e-4, repeats=2, max_calls=4,
                             rotate_bytes=1e5, max_seconds=120.0, power_window_s=0.0)}[grid]
        if max_seconds is not None:
            base = cls(**{**base.__dict__, "max_seconds": float(max_seconds)})
        return base


def require_cuda():
    """Import torch and check that it sees a CUDA GPU; :class:`NoCudaGPU` otherwise."""
    try:
        import torch
    except ImportError:
        raise NoCudaGPU("gpu calibration needs PyTorch with CUDA: torch is not installed") from None
    if not torch.cuda.is_available():
        raise NoCudaGPU(f"gpu calibration needs a CUDA GPU: torch {torch.__version__} sees none "
                        "(torch.cuda.is_available() is False)")
    return torch


# --------------------------------------------------------------------------------------------
# Timing


class Bench:
    """Times ops on one device and collects records. ``device`` is ``cuda`` for a real run;
    ``cpu`` only for the self-test of the case builders (wall-clock timing, no graphs)."""

    def __init__(self, torch, device: str, settings: Settings, log: Callable[[str], None]):
        self.torch = torch
        self.device = device
        self.cuda = device == "cuda"
        self.settings = settings
        self.log = log
        self.t0 = time.monotonic()
        self.records: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.skipped: dict[str, int] = {}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20))
        else:
            self.l2_bytes = 2**20

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def out_of_time(self) -> bool:
        return self.elapsed_s() > self.settings.max_seconds

    def slots_for(self, set_bytes: float) -> int:
        """Buffer sets to rotate over so that they span ``rotate_bytes`` (>= 4 x L2)."""
        span = max(self.settings.rotate_bytes, 4 * self.l2_bytes) if self.cuda \
            else self.settings.rotate_bytes
        slots = max(2, min(64, math.ceil(span / max(set_bytes, 1.0))))
        while slots > 1 and slots * set_bytes > self.settings.max_slot_bytes:
            slots -= 1
        return slots

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_op(self, fn: Callable[[int], Any], slots: int) -> dict[str, Any]:
        """Median time of one call of ``fn(slot)``, s, with the calls rotated over ``slots``."""
        if not self.cuda:
            return self._time_wall(fn, slots)
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: handles, workspaces, autotuning
            for i in range(min(slots, 3)):
                fn(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(0)
        end.record()
        end.synchronize()
        estimate_s = max(start.elapsed_time(end) * 1e-3, 1e-7)
        calls = max(2, min(self.settings.max_calls, math.ceil(self.settings.target_s / estimate_s)))
        mode = "graph"
        graph = None
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for j in range(calls):
                    fn(j % slots)
            graph.replay()
            torch.cuda.synchronize()
        except Exception as exc:  # some ops cannot be captured: time them eagerly
            mode = f"eager ({type(exc).__name__})"
            graph = None
            torch.cuda.synchronize()
        times = []
        for _ in range(self.settings.repeats):
            start.record()
            if graph is not None:
                graph.replay()
            else:
                for j in range(calls):
                    fn(j % slots)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3 / calls)
        del graph
        return {"time_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                "calls": calls, "slots": slots, "mode": mode}

    def _time_wall(self, fn, slots):
        fn(0)
        times = []
        for _ in range(self.settings.repeats):
            t = time.perf_counter()
            for j in range(2):
                fn(j % slots)
            times.append((time.perf_counter() - t) / 2)
        return {"time_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                "calls": 2, "slots": slots, "mode": "wall"}

    def run_cases(self, section: str, cases: list[dict[str, Any]],
                  build: Callable[[dict[str, Any]], tuple[Callable[[int], Any], float]]) -> None:
        """Time every case of a section; ``build(case)`` allocates and returns ``(fn, set_bytes)``
        where ``set_bytes`` is one buffer set's size (B) and ``fn(slot)`` runs the op."""
        torch = self.torch
        t_section = time.monotonic()
        done = 0
        for case in cases:
            if self.out_of_time():
                self.skipped[section] = self.skipped.get(section, 0) + 1
                continue
            record = {"section": section, **case}
            try:
                fn, set_bytes = build(case)
                record.update(self.time_op(fn, getattr(fn, "slots", 1)))
                del fn
                self.records.append(record)
                done += 1
            except Exception as exc:  # one bad case must not lose the run
                self.errors.append({**record, "error": f"{type(exc).__name__}: "
                                    + (str(exc).strip().splitlines() or [""])[0][:300]})
            if self.cuda and torch.cuda.memory_reserved() > 40e9:
                torch.cuda.empty_cache()
        if self.cuda:
            torch.cuda.empty_cache()
        self.log(f"{section}: {done}/{len(cases)} cases in {time.monotonic() - t_section:.1f} s "
                 f"(total {self.elapsed_s():.0f} s)")


def capture_graph(torch, fn: Callable[[], Any], calls: int = 1):
    """A CUDA graph of ``calls`` back-to-back calls of ``fn``, after one warm-up call on a side
    stream (handles, workspaces, lazy initialisation)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def _with_slots(fn, slots: int):
    fn.slots = slots
    return fn


# --------------------------------------------------------------------------------------------
# Case grids. Each case is a flat dict of what defines it; "flops"/"bytes" are filled by the
# builders' callers for reference (compulsory traffic, B).


def _thin(cases: list[dict], grid: str, keep_every: int = 3) -> list[dict]:
    if grid == "quick":
        return cases[::keep_every]
    if grid == "smoke":  # the smallest case of each op/layout: exercises every builder
        smallest: dict[tuple, dict] = {}
        for c in cases:
            key = (c["kind"], c.get("op"), c.get("layout"), c["dtype"])
            if key not in smallest or c["_size"] < smallest[key]["_size"]:
                smallest[key] = c
        return list(smallest.values())
    return cases


def gemm_cases(dtype: str, grid: str) -> list[dict[str, Any]]:
    """GEMM shapes: model-like (M tokens x N x K of linear layers), square sweeps, a wave-
    quantisation sweep over M, odd sizes, vocabulary projections and batched (attention-like)."""
    cases: list[tuple[int, int, int, int, str]] = []  # (batch, m, n, k, layout)
    model_nk = [(768, 768), (2304, 768), (3072, 768), (768, 3072), (1024, 1024), (4096, 4096),
                (12288, 4096), (11008, 4096), (4096, 11008), (8192, 8192)]
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    squares = [64, 96, 128, 192, 256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560, 3072,
               4096, 5120, 6144, 8192, 12288, 16384]
    if dtype in ("bf16", "fp16"):
        sub = model_nk
        cases += [(1, m, n, k, "linear") for n, k in sub for m in ms]
        cases += [(1, s, s, s, "linear") for s in squares]
        if dtype == "bf16":
            cases += [(1, m, 4096, 4096, "linear") for m in range(384, 4224 + 1, 128)
                      if m not in ms]
            cases += [(1, m, n, k, "linear") for m, n, k in [
                (1000, 1000, 1000), (3000, 1000, 1000), (5000, 5000, 1000), (1000, 5000, 5000),
                (4095, 4095, 4095), (4097, 4097, 4097), (197, 768, 768), (197, 3072, 768),
                (6272, 768, 768), (25088, 768, 768), (50176, 256, 64), (12544, 512, 128)]]
            cases += [(1, m, n, k, "linear") for n, k in [(32000, 4096), (50257, 768)]
                      for m in (1, 16, 128, 1024, 4096)]
            for b in (12, 64):
                for s in (128, 512, 1024, 2048):
                    for d in (64, 128):
                        cases.append((b, s, s, d, "bmm"))   # Q K^T
                        cases.append((b, s, d, s, "bmm"))   # P V
            rng = random.Random(0)  # log-uniform random shapes, deterministic
            for _ in range(64):
                m = int(round(2 ** rng.uniform(0, 14)))
                n = int(round(2 ** rng.uniform(8, 14.5)))
                k = int(round(2 ** rng.uniform(8, 14)))
                if 2 * m * n * k <= 4e12:
                    cases.append((1, m, n, k, "linear"))
            for _ in range(16):
                b = int(round(2 ** rng.uniform(2, 8)))
                m = int(round(2 ** rng.uniform(0, 11)))
                n = int(round(2 ** rng.uniform(6, 11)))
                k = int(round(2 ** rng.uniform(6, 11)))
                cases.append((b, m, n, k, "bmm"))
            cases += [(1024, 1, kv, 128, "bmm") for kv in (512, 4096)]
            cases += [(1024, 1, 128, kv, "bmm") for kv in (512, 4096)]
    elif dtype == "fp32":
        cases += [(1, m, n, k, "linear") for n, k in [(768, 768), (3072, 768), (4096, 4096),
                                                       (11008, 4096)]
                  for m in (1, 8, 64, 256, 1024, 4096)]
        cases += [(1, s, s, s, "linear") for s in (256, 512, 1024, 2048, 3072, 4096, 8192)]
    elif dtype in ("fp8", "int8"):
        m_list = (32, 64, 256, 1024, 4096, 8192)
        cases += [(1, m, n, k, "linear") for n, k in [(4096, 4096), (8192, 8192), (11008, 4096)]
                  for m in m_list]
        cases += [(1, s, s, s, "linear") for s in (1024, 2048, 4096, 8192, 16384)]
    out = []
    for b, m, n, k, layout in cases:
        out.append({"kind": "gemm", "dtype": dtype, "batch": b, "m": m, "n": n, "k": k,
                    "layout": layout, "flops": 2 * b * m * n * k,
                    "bytes": b * (m * k + k * n + m * n) * DTYPE_BYTES[dtype]
                    + (b * m * n * 1 if dtype == "fp8" else 0),
                    "_size": b * m * n * k})
    return _thin(out, grid)


def build_gemm(bench: Bench, case: dict[str, Any]):
    torch = bench.torch
    dev = bench.device
    dtype, b, m, n, k = case["dtype"], case["batch"], case["m"], case["n"], case["k"]
    es = DTYPE_BYTES[dtype]
    out_es = {"fp8": 2, "int8": 4}.get(dtype, es)
    set_bytes = b * (m * k + n * k) * es + b * m * n * out_es
    slots = bench.slots_for(set_bytes)
    if dtype in ("fp8", "int8"):
        if not bench.cuda:
            raise RuntimeError(f"{dtype} GEMM needs CUDA")
        if dtype == "fp8":
            a = torch.randn(slots, m, k, device=dev).to(torch.float8_e4m3fn)
            w = torch.randn(slots, n, k, device=dev).to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev, dtype=torch.float32)

            def fn(i):
                return torch._scaled_mm(a[i], w[i].t(), scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)
        else:
            a = torch.randint(-64, 64, (slots, m, k), device=dev, dtype=torch.int8)
            w = torch.randint(-64, 64, (slots, n, k), device=dev, dtype=torch.int8)

            def fn(i):
                return torch._int_mm(a[i], w[i].t())
        return _with_slots(fn, slots), set_bytes
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    if case["layout"] == "linear":  # y = x W^T, W stored [n, k] as nn.Linear does
        a = torch.randn(slots, m, k, device=dev, dtype=tdt)
        w = torch.randn(slots, n, k, device=dev, dtype=tdt)
        c = torch.empty(slots, m, n, device=dev, dtype=tdt)

        def fn(i):
            return torch.mm(a[i], w[i].t(), out=c[i])
    else:
        a = torch.randn(slots, b, m, k, device=dev, dtype=tdt)
        w = torch.randn(slots, b, k, n, device=dev, dtype=tdt)
        c = torch.empty(slots, b, m, n, device=dev, dtype=tdt)

        def fn(i):
            return torch.bmm(a[i], w[i], out=c[i])
    return _with_slots(fn, slots), set_bytes


def attention_cases(dtype: str, grid: str) -> list[dict[str, Any]]:
    """Scaled-dot-product attention: prefill (q_len = kv_len, causal and not), decode (q_len 1)
    with multi-head and grouped-query heads, GPT-2/BERT (12 x 64), Llama (32 x 128), ViT."""
    rows: list[tuple[int, int, int, int, int, int, bool]] = []  # b, hq, hkv, sq, skv, d, causal
    if dtype == "bf16":
        for b in (1, 8):
            for s in (128, 512, 1024, 2048):
                for causal in (False, True):
                    rows.append((b, 12, 12, s, s, 64, causal))
        for b in (1, 4):
            for s in (128, 512, 2048, 4096, 8192):
                for causal in (False, True):
                    rows.append((b, 32, 32, s, s, 128, causal))
        rows += [(1, 32, 8, s, s, 128, True) for s in (512, 2048, 8192)]
        rows += [(b, 12, 12, 197, 197, 64, False) for b in (1, 32)]
        for b in (1, 8, 32, 64):
            for kv in (128, 512, 2048, 8192, 32768):
                if b * kv <= 262144:
                    rows.append((b, 32, 32, 1, kv, 128, False))
        rows += [(b, 12, 12, 1, kv, 64, False) for b in (1, 16) for kv in (128, 1024, 4096)]
        rows += [(b, 32, 8, 1, kv, 128, False) for b in (1, 16) for kv in (512, 4096, 32768)]
    else:
        rows += [(1, 32, 32, 2048, 2048, 128, True), (4, 32, 32, 512, 512, 128, False),
                 (8, 32, 32, 1, 4096, 128, False), (1, 12, 12, 1024, 1024, 64, True)]
        if grid == "smoke":  # a tiny case for the CPU self-test
            rows.append((1, 2, 2, 1, 16, 8, False))
    out = []
    for b, hq, hkv, sq, skv, d, causal in rows:
        es = DTYPE_BYTES[dtype]
        out.append({"kind": "attention", "dtype": dtype, "batch": b, "heads": hq,
                    "kv_heads": hkv, "q_len": sq, "kv_len": skv, "head_dim": d,
                    "causal": causal, "flops": 4 * b * hq * sq * skv * d,
                    "bytes": es * b * d * (2 * hq * sq + 2 * hkv * skv),
                    "_size": b * hq * sq * skv * d})
    return _thin(out, grid)


def build_attention(bench: Bench, case: dict[str, Any]):
    torch = bench.torch
    import torch.nn.functional as F
    dev = bench.device
    tdt = getattr(torch, TORCH_DTYPES[case["dtype"]])
    b, hq, hkv = case["batch"], case["heads"], case["kv_heads"]
    sq, skv, d = case["q_len"], case["kv_len"], case["head_dim"]
    es = DTYPE_BYTES[case["dtype"]]
    set_bytes = es * b * d * (2 * hq * sq + 2 * hkv * skv)
    slots = bench.slots_for(set_bytes)
    q = torch.randn(slots, b, hq, sq, d, device=dev, dtype=tdt)
    k = torch.randn(slots, b, hkv, skv, d, device=dev, dtype=tdt)
    v = torch.randn(slots, b, hkv, skv, d, device=dev, dtype=tdt)
    causal, gqa = bool(case["causal"]), hq != hkv

    def fn(i):
        return F.scaled_dot_product_attention(q[i], k[i], v[i], is_causal=causal,
                                              enable_gqa=gqa)
    return _with_slots(fn, slots), set_bytes


def _pow_sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, x = [], lo
    while x <= hi:
        out.append(x)
        x *= factor
    return out


def memory_cases(grid: str) -> list[dict[str, Any]]:
    """Bandwidth-bound kernels: copy (bytes swept finely), elementwise, normalisation, softmax,
    reductions, embedding gathers, transposes, KV-cache concatenation, pooling."""
    cases: list[dict[str, Any]] = []

    def add(op, dtype, elements, bytes_, **kw):
        cases.append({"kind": "memory", "op": op, "dtype": dtype, "elements": int(elements),
                      "bytes": int(bytes_), "_size": int(bytes_), **kw})

    for nbytes in _pow_sizes(2**12, 2**31, 2):
        add("copy", "bf16", nbytes // 2, 2 * nbytes)
    for dtype in ("bf16",):
        es = DTYPE_BYTES[dtype]
        for n in _pow_sizes(4**5, 4**14, 4):
            add("add", dtype, n, 3 * n * es)
            add("mul_scalar", dtype, n, 2 * n * es)
            add("gelu", dtype, n, 2 * n * es)
            add("silu", dtype, n, 2 * n * es)
            add("relu", dtype, n, 2 * n * es)
    for n in _pow_sizes(4**5, 4**13, 4):
        add("add", "fp32", n, 12 * n)
        add("copy", "fp32", n, 8 * n)
    for width in (768, 4096):
        for rows in _pow_sizes(1, 65536, 4):
            add("layer_norm", "bf16", rows * width, 4 * rows * width + 4 * width, rows=rows,
                width=width)
    for rows in _pow_sizes(1, 65536, 4):
        add("rms_norm", "bf16", rows * 4096, 4 * rows * 4096 + 2 * 4096, rows=rows, width=4096)
        add("sum", "bf16", rows, 2 * rows * 4096 + 2 * rows, rows=rows, width=4096)
    for width in (128, 1024, 4096, 32000):
        for rows in _pow_sizes(1, 2**18, 16):
            if rows * width <= 2**28:
                add("softmax", "bf16", rows * width, 4 * rows * width, rows=rows, width=width)
    for vocab, dim in ((32000, 4096), (50257, 768)):
        for tokens in (1, 16, 256, 4096, 16384):
            add("embedding", "bf16", tokens * dim, 4 * tokens * dim + 8 * tokens, vocab=vocab,
                width=dim, rows=tokens)
    for s in (128, 1024, 4096, 16384):
        n = s * 32 * 128
        add("transpose", "bf16", n, 4 * n, shape=[1, s, 32, 128])
    for b in (1, 8):
        for kv in (512, 4096):
            n = b * 32 * (kv + 1) * 128
            add("cat", "bf16", n, 4 * n, shape=[b, 32, kv, 128])
    for b in (1, 32):
        for c, hw in ((64, 112), (256, 56), (512, 28), (1024, 14), (2048, 7)):
            n = b * c * hw * hw
            add("batch_norm", "bf16", n, 4 * n + 16 * c, shape=[b, c, hw, hw])
        n_in = b * 64 * 112 * 112
        add("max_pool", "bf16", n_in // 4, 2 * n_in + n_in // 2, shape=[b, 64, 112, 112])
        n_in = b * 2048 * 49
        add("avg_pool", "bf16", b * 2048, 2 * n_in + 4 * b * 2048, shape=[b, 2048, 7, 7])
    return _thin(cases, grid, keep_every=2)


def build_memory(bench: Bench, case: dict[str, Any]):
    torch = bench.torch
    import torch.nn.functional as F
    dev = bench.device
    tdt = getattr(torch, TORCH_DTYPES[case["dtype"]])
    op, n = case["op"], case["elements"]
    slots = bench.slots_for(case["bytes"])

    def rnd(*shape):
        return torch.randn(slots, *shape, device=dev, dtype=tdt)

    if op in ("copy", "add", "mul_scalar", "gelu", "silu", "relu"):
        x, out = rnd(n), torch.empty(slots, n, device=dev, dtype=tdt)
        y = rnd(n) if op == "add" else None
        fns = {
            "copy": lambda i: out[i].copy_(x[i]),
            "add": lambda i: torch.add(x[i], y[i], out=out[i]),
            "mul_scalar": lambda i: torch.mul(x[i], 1.5, out=out[i]),
            "gelu": lambda i: F.gelu(x[i]),
            "silu": lambda i: F.silu(x[i]),
            "relu": lambda i: F.relu(x[i]),
        }
        fn = fns[op]
    elif op in ("layer_norm", "rms_norm", "softmax", "sum"):
        rows, width = case["rows"], case["width"]
        x = rnd(rows, width)
        wt = torch.randn(width, device=dev, dtype=tdt)
        bias = torch.randn(width, device=dev, dtype=tdt)
        fns = {
            "layer_norm": lambda i: F.layer_norm(x[i], (width,), wt, bias),
            "rms_norm": lambda i: F.rms_norm(x[i], (width,), wt),
            "softmax": lambda i: torch.softmax(x[i], dim=-1),
            "sum": lambda i: x[i].sum(dim=-1),
        }
        fn = fns[op]
    elif op == "embedding":
        table = torch.randn(case["vocab"], case["width"], device=dev, dtype=tdt)
        idx = torch.randint(0, case["vocab"], (slots, case["rows"]), device=dev)

        def fn(i):
            return F.embedding(idx[i], table)
    elif op == "transpose":
        x = rnd(*case["shape"])

        def fn(i):
            return x[i].transpose(1, 2).contiguous()
    elif op == "cat":
        b, h, kv, d = case["shape"]
        cache, new = rnd(b, h, kv, d), rnd(b, h, 1, d)

        def fn(i):
            return torch.cat([cache[i], new[i]], dim=2)
    elif op == "batch_norm":
        b, c, hh, ww = case["shape"]
        x = rnd(b, c, hh, ww)
        mean, var = torch.randn(c, device=dev, dtype=tdt), torch.rand(c, device=dev, dtype=tdt) + 1
        wt, bias = torch.randn(c, device=dev, dtype=tdt), torch.randn(c, device=dev, dtype=tdt)

        def fn(i):
            return F.batch_norm(x[i], mean, var, wt, bias, training=False)
    elif op == "max_pool":
        x = rnd(*case["shape"])

        def fn(i):
            return F.max_pool2d(x[i], 3, 2, 1)
    elif op == "avg_pool":
        x = rnd(*case["shape"])

        def fn(i):
            return F.adaptive_avg_pool2d(x[i], 1)
    else:
        raise ValueError(op)
    return _with_slots(fn, slots), case["bytes"]


#: ResNet-50 (torchvision v1.5: stride on the 3x3) convolutions and ViT-B/16's patch embedding:
#: (in channels, input size, out channels, kernel, stride, padding).
CONV_LAYERS = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0),
    (256, 56, 512, 1, 2, 0), (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0), (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0),
    (512, 28, 1024, 1, 2, 0), (1024, 14, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0),
    (1024, 14, 2048, 1, 2, 0), (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1),
    (3, 224, 768, 16, 16, 0),
]


def conv_cases(grid: str) -> list[dict[str, Any]]:
    """2-D convolutions (NCHW, as the zoo's ResNet-50 and ViT-B/16 run them)."""
    out = []
    for dtype, batches in (("bf16", (1, 8, 32)), ("fp32", (1,))):
        for b in batches:
            for c, h, k, r, stride, pad in CONV_LAYERS:
                p = (h + 2 * pad - r) // stride + 1
                es = DTYPE_BYTES[dtype]
                out.append({"kind": "conv", "dtype": dtype, "n": b, "c": c, "h": h, "w": h,
                            "k": k, "r": r, "s": r, "stride": stride, "padding": pad, "p": p,
                            "q": p, "flops": 2 * b * k * p * p * c * r * r,
                            "bytes": es * (b * c * h * h + k * c * r * r + b * k * p * p),
                            "_size": b * k * p * p * c * r * r})
    return _thin(out, grid)


def build_conv(bench: Bench, case: dict[str, Any]):
    torch = bench.torch
    import torch.nn.functional as F
    dev = bench.device
    tdt = getattr(torch, TORCH_DTYPES[case["dtype"]])
    slots = bench.slots_for(case["bytes"])
    x = torch.randn(slots, case["n"], case["c"], case["h"], case["w"], device=dev, dtype=tdt)
    w = torch.randn(slots, case["k"], case["c"], case["r"], case["s"], device=dev, dtype=tdt)
    stride, pad = case["stride"], case["padding"]

    def fn(i):
        return F.conv2d(x[i], w[i], None, stride, pad)
    return _with_slots(fn, slots), case["bytes"]


# --------------------------------------------------------------------------------------------
# Launch floor, profiler kernel durations, power


def measure_floor(bench: Bench) -> dict[str, Any]:
    """The kernel launch floor: per-call time of a one-element add replayed back to back in a
    graph; the eager launch interval (host-bound); kernel durations seen by the profiler."""
    torch = bench.torch
    x = torch.zeros(1, device=bench.device)
    fn = _with_slots(lambda i: x.add_(1.0), 1)
    out: dict[str, Any] = {"graph_per_kernel": bench.time_op(fn, 1)}
    mm_a = torch.randn(8, 8, device=bench.device)
    out["graph_per_kernel_mm8"] = bench.time_op(_with_slots(lambda i: mm_a @ mm_a, 1), 1)
    if bench.cuda:
        calls = 500
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        intervals = []
        for _ in range(5):
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls):
                x.add_(1.0)
            end.record()
            end.synchronize()
            intervals.append(start.elapsed_time(end) * 1e-3 / calls)
        out["eager_launch_interval_s"] = statistics.median(intervals)
        out["profiler"] = profile_kernels(bench, {
            "add_1": lambda: x.add_(1.0), "mm_8": lambda: mm_a @ mm_a})
    return out


def profile_kernels(bench: Bench, fns: dict[str, Callable[[], Any]], reps: int = 20
                    ) -> dict[str, Any]:
    """Kernel names and mean durations (s) the torch profiler sees for each op, run ``reps``
    times eagerly: the per-kernel time that whole-model validation sums."""
    torch = bench.torch
    from torch.profiler import ProfilerActivity, profile
    result: dict[str, Any] = {}
    for label, f in fns.items():
        try:
            for _ in range(3):
                f()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    f()
                torch.cuda.synchronize()
            kernels: dict[str, list[float]] = {}
            for ev in prof.events():
                if str(getattr(ev, "device_type", "")).endswith("CUDA"):
                    kernels.setdefault(ev.name, []).append(ev.time_range.elapsed_us() * 1e-6)
            result[label] = {
                "kernels": {name[:160]: {"count": len(v), "mean_s": statistics.fmean(v)}
                            for name, v in kernels.items()},
                "per_call_s": sum(sum(v) for v in kernels.values()) / reps,
            }
        except Exception as exc:
            result[label] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return result


def representative_kernels(bench: Bench) -> dict[str, Any]:
    """Profiler view of a few representative ops (which kernels run, and their durations)."""
    torch = bench.torch
    import torch.nn.functional as F
    dev, bf = bench.device, torch.bfloat16
    a, w = torch.randn(4096, 4096, device=dev, dtype=bf), torch.randn(4096, 4096, device=dev,
                                                                        dtype=bf)
    v = torch.randn(1, 4096, device=dev, dtype=bf)
    q = torch.randn(1, 32, 2048, 128, device=dev, dtype=bf)
    qd = torch.randn(8, 32, 1, 128, device=dev, dtype=bf)
    kd = torch.randn(8, 32, 4096, 128, device=dev, dtype=bf)
    img = torch.randn(8, 256, 56, 56, device=dev, dtype=bf)
    cw = torch.randn(64, 256, 1, 1, device=dev, dtype=bf)
    cw3 = torch.randn(64, 64, 3, 3, device=dev, dtype=bf)
    img3 = torch.randn(8, 64, 56, 56, device=dev, dtype=bf)
    x = torch.randn(4096, 4096, device=dev, dtype=bf)
    ln_w = torch.ones(4096, device=dev, dtype=bf)
    return profile_kernels(bench, {
        "gemm_4096_bf16": lambda: a @ w.t(),
        "gemv_1x4096x4096_bf16": lambda: v @ w.t(),
        "sdpa_prefill_causal_2048_bf16": lambda: F.scaled_dot_product_attention(
            q, q, q, is_causal=True),
        "sdpa_decode_b8_kv4096_bf16": lambda: F.scaled_dot_product_attention(qd, kd, kd),
        "conv1x1_b8_256to64_56_bf16": lambda: F.conv2d(img, cw),
        "conv3x3_b8_64to64_56_bf16": lambda: F.conv2d(img3, cw3, padding=1),
        "layer_norm_4096x4096_bf16": lambda: F.layer_norm(x, (4096,), ln_w, ln_w),
        "gelu_4096x4096_bf16": lambda: F.gelu(x),
        "softmax_4096x4096_bf16": lambda: torch.softmax(x, -1),
    }, reps=10)


def _nvml_handle():
    try:
        import pynvml
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() != 1:
            return None, None
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None, None


def _nvidia_smi() -> dict[str, str]:
    fields = ("name,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,power.limit,"
              "temperature.gpu,driver_version,pstate")
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}"}
    first = text.splitlines()[0] if text else ""
    return dict(zip(fields.split(","), (v.strip() for v in first.split(","))))


def measure_power(bench: Bench) -> dict[str, Any]:
    """Average board power (W) idle, under a large bf16 GEMM loop and under a large copy loop,
    from the NVML energy counter over ``power_window_s``; the GEMM loop also warms the clocks."""
    torch = bench.torch
    nvml, handle = _nvml_handle()
    out: dict[str, Any] = {"smi_before": _nvidia_smi(), "source": "nvml energy counter"
                           if nvml else "none (pynvml unavailable)"}
    window = bench.settings.power_window_s

    def energy_j():
        return nvml.nvmlDeviceGetTotalEnergyConsumption(handle) * 1e-3 if nvml else float("nan")

    def run_for(label, fn, work_per_call, unit):
        calls, t, e = 0, time.monotonic(), energy_j()
        samples = []
        while time.monotonic() - t < window:
            for _ in range(20):
                fn(calls % 2)
                calls += 1
            torch.cuda.synchronize()
            if nvml:
                samples.append(nvml.nvmlDeviceGetPowerUsage(handle) * 1e-3)
        dt, de = time.monotonic() - t, energy_j() - e
        out[label] = {"seconds": dt, "calls": calls, f"achieved_{unit}": work_per_call * calls / dt,
                      "energy_power_w": de / dt if nvml else None,
                      "sampled_power_w_mean": statistics.fmean(samples) if samples else None,
                      "sampled_power_w_max": max(samples) if samples else None}
        if nvml:
            out[label]["sm_clock_mhz_end"] = nvml.nvmlDeviceGetClockInfo(handle,
                                                                         nvml.NVML_CLOCK_SM)

    if nvml:
        try:
            out["power_limit_w"] = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) * 1e-3
            out["max_sm_clock_mhz"] = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
            out["max_mem_clock_mhz"] = nvml.nvmlDeviceGetMaxClockInfo(handle,
                                                                      nvml.NVML_CLOCK_MEM)
        except Exception as exc:
            out["nvml_error"] = str(exc)[:200]
        torch.cuda.synchronize()
        e, t = energy_j(), time.monotonic()
        time.sleep(max(window, 1.0))
        out["idle"] = {"energy_power_w": (energy_j() - e) / (time.monotonic() - t),
                       "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)}
    size = 8192
    a = torch.randn(2, size, size, device=bench.device, dtype=torch.bfloat16)
    c = torch.empty(2, size, size, device=bench.device, dtype=torch.bfloat16)
    run_for("gemm_bf16_8192", lambda i: torch.mm(a[i], a[1 - i].t(), out=c[i]),
            2 * size**3, "flops_per_s")
    del a, c
    n = 2**29  # 1 GiB of bf16 per buffer
    src = torch.randn(2, n, device=bench.device, dtype=torch.bfloat16)
    dst = torch.empty(2, n, device=bench.device, dtype=torch.bfloat16)
    run_for("copy_1GiB", lambda i: dst[i].copy_(src[i]), 4 * n, "bytes_per_s")
    del src, dst
    torch.cuda.empty_cache()
    out["smi_after"] = _nvidia_smi()
    return out


# --------------------------------------------------------------------------------------------
# The whole run


def device_info(torch, device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "host": platform.node()}
    if device != "cuda":
        return {**info, "name": "cpu (self-test)"}
    props = torch.cuda.get_device_properties(0)
    info.update({
        "name": props.name, "sms": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    })
    return info


def run_benchmarks(quick: bool = False, out: str | Path | None = None,
                   max_seconds: float | None = None, grid: str | None = None,
                   device: str = "cuda", log: Callable[[str], None] | None = None
                   ) -> dict[str, Any]:
    """Run every microbenchmark and return the raw-measurement dict (also written to ``out``
    after each section, so a run cut short keeps what it measured).

    ``device="cpu"`` with ``grid="smoke"`` only exercises the case builders (tests); a real run
    needs CUDA and raises :class:`NoCudaGPU` without it.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if device == "cuda":
        torch = require_cuda()
    else:
        import torch
    grid = grid or ("quick" if quick else "full")
    settings = Settings.for_grid(grid, max_seconds)
    bench = Bench(torch, device, settings, log)
    raw: dict[str, Any] = {
        "schema": SCHEMA_VERSION, "tool": "dse.calibrate.gpu_bench",
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "device": device_info(torch, device), "settings": dict(settings.__dict__),
        "sections_s": {}, "measurements": bench.records, "errors": bench.errors,
        "skipped_for_time": bench.skipped,
    }

    def save():
        if out is not None:
            path = Path(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(_clean(raw), indent=None, separators=(",", ":")) + "\n")
            os.replace(tmp, path)

    def section(name, fn):
        t = time.monotonic()
        if bench.out_of_time():
            bench.skipped[name] = bench.skipped.get(name, 0) + 1
            return
        try:
            fn()
        except Exception as exc:
            bench.errors.append({"section": name, "error": f"{type(exc).__name__}: "
                                 + (str(exc).strip().splitlines() or [""])[0][:300]})
        raw["sections_s"][name] = round(time.monotonic() - t, 2)
        save()

    torch.manual_seed(0)
    g = settings.grid
    if bench.cuda and settings.power_window_s > 0:
        section("power", lambda: raw.__setitem__("power", measure_power(bench)))
    section("floor", lambda: raw.__setitem__("floor", measure_floor(bench)))
    mem = memory_cases(g)
    copies = [c for c in mem if c["op"] == "copy" and c["dtype"] == "bf16"]
    section("copy", lambda: bench.run_cases("copy", copies, lambda c: build_memory(bench, c)))
    section("gemm_bf16", lambda: bench.run_cases("gemm_bf16", gemm_cases("bf16", g),
                                                 lambda c: build_gemm(bench, c)))
    section("attention_bf16", lambda: bench.run_cases(
        "attention_bf16", attention_cases("bf16", g), lambda c: build_attention(bench, c)))
    others = [c for c in mem if c not in copies]
    section("memory", lambda: bench.run_cases("memory", others, lambda c: build_memory(bench, c)))
    section("conv", lambda: bench.run_cases("conv", conv_cases(g), lambda c: build_conv(bench, c)))
    for dtype in ("fp16", "fp32"):
        section(f"gemm_{dtype}", lambda d=dtype: bench.run_cases(
            f"gemm_{d}", gemm_cases(d, g), lambda c: build_gemm(bench, c)))
    section("attention_fp16", lambda: bench.run_cases(
        "attention_fp16", attention_cases("fp16", g), lambda c: build_attention(bench, c)))
    if bench.cuda:
        for dtype in ("fp8", "int8"):
            section(f"gemm_{dtype}", lambda d=dtype: bench.run_cases(
                f"gemm_{d}", gemm_cases(d, g), lambda c: build_gemm(bench, c)))
        section("kernels", lambda: raw.__setitem__("kernels", representative_kernels(bench)))
    raw["total_s"] = round(bench.elapsed_s(), 1)
    save()
    log(f"done: {len(bench.records)} cases, {len(bench.errors)} errors, "
        f"skipped for time: {bench.skipped or 'none'}, {raw['total_s']} s")
    return _clean(raw)


def _clean(obj):
    """Drop private keys (``_size``) and round floats to 6 significant digits."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not k.startswith("_")}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and math.isfinite(obj):
        return float(f"{obj:.6g}")
    return obj


def summary(raw: dict[str, Any]) -> str:
    """A short table of the headline numbers of a raw run."""
    lines = [f"device: {raw['device'].get('name')}  cases: {len(raw['measurements'])}  "
             f"errors: {len(raw['errors'])}  total: {raw.get('total_s')} s"]
    best: dict[str, float] = {}
    for r in raw["measurements"]:
        if r.get("kind") in ("gemm", "attention", "conv") and r.get("time_s"):
            key = f"{r['kind']} {r['dtype']}"
            best[key] = max(best.get(key, 0.0), r["flops"] / r["time_s"])
        elif r.get("op") == "copy" and r.get("time_s"):
            key = f"copy {r['dtype']}"
            best[key] = max(best.get(key, 0.0), r["bytes"] / r["time_s"])
    for key, v in sorted(best.items()):
        unit = "TB/s" if key.startswith("copy") else "TFLOP/s"
        lines.append(f"  best {key:<16} {v / 1e12:8.1f} {unit}")
    floor = raw.get("floor", {}).get("graph_per_kernel", {})
    if floor:
        lines.append(f"  launch floor (graph, per kernel) {floor['time_s'] * 1e6:.2f} us")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m dse.calibrate.gpu_bench",
                                     description="Microbenchmark this machine's CUDA GPU "
                                     "for the gpu template's calibration.")
    parser.add_argument("--out", required=True, help="raw measurements JSON to write")
    parser.add_argument("--quick", action="store_true", help="a third of the grid, 3 repeats")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="wall-clock budget; cases past it are skipped (default 420, "
                        "quick 150)")
    args = parser.parse_args(argv)
    try:
        raw = run_benchmarks(quick=args.quick, out=args.out, max_seconds=args.max_seconds)
    except NoCudaGPU as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
