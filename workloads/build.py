"""Build a zoo model's workload for a phase and sizes, with a two-level cache.

The cache key is (model, architecture, phase, batch, seq, context, dtype, package and torch
versions). Level 1 is an in-process LRU; level 2 a pickle per key under ``$DSE_CACHE_DIR``
(default ``~/.cache/accel-dse/workloads``), shared by worker processes and CLI runs; files are
written atomically (temp file + rename) and a corrupt file is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import torch

import dse
from dse.errors import BadInput
from workloads import ir
from workloads.capture import capture
from workloads.zoo import get_model

#: Default sizes when the caller gives none.
DEFAULT_SEQ = {"llm": 512, "encoder": 128}
DEFAULT_CONTEXT = 1024
DEFAULT_BATCH = {"neural_field": 65536}

_MEMORY: "OrderedDict[str, ir.Workload]" = OrderedDict()
_MEMORY_SIZE = 64


def cache_dir() -> Path:
    return Path(os.environ.get("DSE_CACHE_DIR") or Path.home() / ".cache" / "accel-dse") / "workloads"


def _positive(field: str, value: Any) -> int:
    """``value`` as a positive int (ints, integral floats and digit strings are accepted)."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        f = float(value)
        if not f.is_integer() or f <= 0:
            raise ValueError
    except ValueError:
        raise BadInput(field, value, "expected a positive int") from None
    return int(f)


def resolve(model: str, phase: str | None = None, batch: int | None = None,
            seq: int | None = None, context: int | None = None, dtype: str = "bf16",
            arch: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validated, defaulted capture arguments (raises :class:`BadInput`)."""
    spec = get_model(model)
    if phase is None:
        phase = spec.phases[0]
    if phase not in spec.phases:
        raise BadInput("phase", phase, f"{model} runs phases " + ", ".join(spec.phases))
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    batch = _positive("batch", batch if batch is not None else DEFAULT_BATCH.get(spec.family, 1))
    seq = _positive("seq", seq if seq is not None else DEFAULT_SEQ.get(spec.family, 1))
    arch_values = spec.resolve_arch(arch)
    if context is None:  # the default fits models with learned positions (max_seq)
        context = min(DEFAULT_CONTEXT, int(arch_values.get("max_seq", DEFAULT_CONTEXT + 1)) - 1)
    context = _positive("context", context)
    if phase != "prefill" and spec.family == "llm":
        seq = 1
    if phase != "decode":
        context = 0
    return {"model": model, "phase": phase, "batch": batch, "seq": seq, "context": context,
            "dtype": dtype, "arch": arch_values}


def _key(args: dict[str, Any]) -> str:
    blob = json.dumps({**args, "v": dse.__version__, "torch": torch.__version__}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def build_workload(model: str, phase: str | None = None, batch: int | None = None,
                   seq: int | None = None, context: int | None = None, dtype: str = "bf16",
                   arch: dict[str, Any] | None = None, use_cache: bool = True) -> ir.Workload:
    """The workload of zoo ``model`` (captured once per distinct arguments)."""
    args = resolve(model, phase, batch, seq, context, dtype, arch)
    return cached(args, lambda: _capture_zoo(args), use_cache)


def cached(args: dict[str, Any], make: Callable[[], ir.Workload],
           use_cache: bool = True) -> ir.Workload:
    """The workload ``make()`` builds, from the two-level cache under the key of ``args`` (any
    JSON-able dict that determines the capture: zoo arguments, a Hugging Face config's hash)."""
    key = _key(args)
    if use_cache:
        hit = _MEMORY.get(key) or _load(key)
        if hit is not None:
            _remember(key, hit)
            return hit
    w = make()
    if use_cache:
        _remember(key, w)
        _store(key, w)
    return w


def _capture_zoo(args: dict[str, Any]) -> ir.Workload:
    spec = get_model(args["model"])
    arch = args["arch"]
    with torch.device("meta"):
        module = spec.build(arch)
        ex_args, ex_kwargs = spec.inputs(arch, args["phase"], args["batch"], args["seq"],
                                         args["context"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(module, ex_args, ex_kwargs, model=args["model"], phase=args["phase"],
                       dtype=args["dtype"], batch=args["batch"],
                       seq=args["seq"] if spec.family in ("llm", "encoder") else 0,
                       context=args["context"], arch=arch)


def _remember(key: str, w: ir.Workload) -> None:
    _MEMORY[key] = w
    _MEMORY.move_to_end(key)
    while len(_MEMORY) > _MEMORY_SIZE:
        _MEMORY.popitem(last=False)


def _load(key: str) -> ir.Workload | None:
    path = cache_dir() / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            w = pickle.load(f)
        return w if isinstance(w, ir.Workload) else None
    except FileNotFoundError:
        return None
    except Exception:  # a corrupt or stale cache file is rebuilt
        return None


def _store(key: str, w: ir.Workload) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        w.__dict__.pop("ops", None)  # cached_property: rebuilt on load
        w.__dict__.pop("flops", None)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(w, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{key}.pkl")
    except OSError:
        pass  # a read-only home still works, just without the disk cache


def clear_memory_cache() -> None:
    _MEMORY.clear()
