"""Build a zoo model's workload for a phase and sizes, with a two-level cache.

The cache key is (model, architecture, phase, batch, seq, context, dtype, package and torch
versions). Level 1 is an in-process LRU; level 2 a gzipped JSON file per key under
``$DSE_CACHE_DIR`` (default ``~/.cache/accel-dse/workloads``; :mod:`workloads.ir_json`),
shared by worker processes and CLI runs. A model with a size rule is rebuilt at other
architectures from its family's template (:mod:`workloads.reshape`: three small captures once
per process, then about a millisecond per architecture, kept in memory only);
``DSE_RESHAPE=0`` captures every architecture instead. Reading a file cannot run code (no
pickle); a cache directory that another user could write is refused (:class:`BadInput`),
files are written atomically (temp file + rename) and a corrupt, foreign or oversized file is
rebuilt.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import torch

import dse
from dse.errors import BadInput, CaptureError, DSEError, first_line
from dse.safe_io import read_regular, seal, unseal
from workloads import ir, ir_json, reshape
from workloads.capture import capture
from workloads.kv_update import check_kv_update, with_kv_update
from workloads.zoo import get_model

#: Default sizes when the caller gives none.
DEFAULT_SEQ = {"llm": 512, "encoder": 128}
DEFAULT_CONTEXT = 1024
DEFAULT_BATCH = {"neural_field": 65536}

#: Largest batch, sequence length or context, items [E: 2**31, as the study file allows;
#: larger sizes overflow torch's int64 element counts once multiplied by a model's widths].
MAX_SIZE = 2**31
#: Largest cache file read, bytes once decompressed [E: a 70 B-parameter prefill graph is a
#: few MB of JSON].
MAX_CACHE_FILE_BYTES = 256 * 2**20

_MEMORY: "OrderedDict[str, ir.Workload]" = OrderedDict()
_MEMORY_SIZE = 64
_CHECKED_DIRS: set[Path] = set()


def cache_dir() -> Path:
    return Path(os.environ.get("DSE_CACHE_DIR") or Path.home() / ".cache" / "accel-dse") / "workloads"


def check_cache_dir() -> Path:
    """The cache directory, refused (:class:`BadInput`) when a user other than this one could
    write it or the ``$DSE_CACHE_DIR`` above it: a file planted there would be read as a
    captured model."""
    d = cache_dir()
    if d in _CHECKED_DIRS:
        return d
    for path in (d.parent, d):
        try:
            st = path.stat()
        except OSError:  # not there yet: created private (0700) when the first file is stored
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise BadInput("DSE_CACHE_DIR", str(path), "expected a directory (or a path to "
                           "make one), not a file, pipe or device")
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise BadInput("DSE_CACHE_DIR", str(path), "expected a cache directory only you can "
                           "write (chmod go-w it, or point DSE_CACHE_DIR elsewhere)")
    _CHECKED_DIRS.add(d)
    return d


def check_size(field: str, value: Any) -> int:
    """``value`` as an int in [1, :data:`MAX_SIZE`] (ints, integral floats and digit strings
    are accepted)."""
    allowed = f"expected a positive int up to {MAX_SIZE:,}"
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        n = int(value) if isinstance(value, int) else float(value)
        if isinstance(n, float):
            if not n.is_integer():
                raise ValueError
            n = int(n)
    except (ValueError, OverflowError):
        raise BadInput(field, value, allowed) from None
    if not 1 <= n <= MAX_SIZE:
        raise BadInput(field, value, allowed)
    return n


def resolve(model: str, phase: str | None = None, batch: int | None = None,
            seq: int | None = None, context: int | None = None, dtype: str = "bf16",
            arch: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validated, defaulted capture arguments (raises :class:`BadInput`)."""
    return resolver(model, phase, batch, seq, context, dtype)(arch)


def resolver(model: str, phase: str | None = None, batch: int | None = None,
             seq: int | None = None, context: int | None = None, dtype: str = "bf16"
             ) -> Callable[[dict[str, Any] | None], dict[str, Any]]:
    """:func:`resolve` of these arguments as a function of the architecture: what does not
    depend on it is checked once (here, in :func:`resolve`'s order), the rest per call."""
    spec = get_model(model)
    if phase is None:
        phase = spec.phases[0]
    if phase not in spec.phases:
        raise BadInput("phase", phase, f"{model} runs phases " + ", ".join(spec.phases))
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    batch = check_size("batch", batch if batch is not None else DEFAULT_BATCH.get(spec.family, 1))
    seq = check_size("seq", seq if seq is not None else DEFAULT_SEQ.get(spec.family, 1))
    llm = spec.family == "llm"
    seq_out = 1 if phase != "prefill" and llm else seq
    given = context
    try:   # a given context's check, raised after the architecture's (as resolve orders them)
        given_checked = None if context is None else check_size("context", context)
    except BadInput:
        given_checked = None

    def of(arch: dict[str, Any] | None) -> dict[str, Any]:
        arch_values = spec.resolve_arch(arch)
        context = given
        if context is None:  # the default fits models with learned positions (max_seq)
            context = min(DEFAULT_CONTEXT,
                          int(arch_values.get("max_seq", DEFAULT_CONTEXT + 1)) - 1)
        context = given_checked or check_size("context", context)
        if phase != "decode":
            context = 0
        positions = arch_values.get("max_seq")
        if isinstance(positions, int) and llm:   # as the model's inputs check it
            if phase == "prefill" and seq_out > positions:
                raise BadInput("seq", seq_out, f"expected at most {positions}: {model} holds "
                               f"max_seq={positions} tokens")
            if phase == "decode" and context + 1 > positions:
                raise BadInput("context", context, f"expected at most {positions - 1}: {model} "
                               f"holds max_seq={positions} tokens, the new one included")
        return {"model": model, "phase": phase, "batch": batch, "seq": seq_out,
                "context": context, "dtype": dtype, "arch": arch_values}
    return of


def check_sizes_apply(model: str, phase: str | None, seq: Any, context: Any) -> None:
    """Refuse a size the phase would ignore (:func:`resolve` ignores it): ``seq`` in decode
    (one token per step) or outside LLMs and encoders, ``context`` outside decode. The CLI and
    study files call this, so what a user types is never silently dropped."""
    spec = get_model(model)
    family, phase = spec.family, phase or spec.phases[0]
    if phase not in spec.phases:
        return  # resolve() names the phases
    if seq is not None:
        if family == "llm" and phase == "decode" and seq != 1:
            raise BadInput("seq", seq, "expected no seq in decode, which makes one token per "
                           "step (the KV-cache length is context)")
        if family not in ("llm", "encoder"):
            raise BadInput("seq", seq, f"expected no seq: {model} ({family}) has no sequence "
                           "length")
    if context is not None and phase != "decode":
        raise BadInput("context", context, f"expected no context in {phase}: context is the "
                       "KV-cache length of an LLM decode step (the prompt length is seq)")


def _key(args: dict[str, Any]) -> str:
    blob = json.dumps({**args, "v": dse.__version__, "torch": torch.__version__,
                       "entry": "sealed-1"}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def build_workload(model: str, phase: str | None = None, batch: int | None = None,
                   seq: int | None = None, context: int | None = None, dtype: str = "bf16",
                   arch: dict[str, Any] | None = None, use_cache: bool = True,
                   kv_update: str = "in_place") -> ir.Workload:
    """The workload of zoo ``model`` (captured once per distinct arguments; the KV-cache update
    semantics are applied to the cached capture, :mod:`workloads.kv_update`)."""
    check_kv_update(kv_update)
    args = resolve(model, phase, batch, seq, context, dtype, arch)
    if not use_cache or os.environ.get("DSE_RESHAPE") == "0":
        # a real capture (uncached), or every architecture captured (benchmarks)
        w = cached(args, lambda: _capture_zoo(args), use_cache)
    else:
        # A transformer family captured once is rebuilt at other sizes without torch.export
        # (workloads/reshape.py): quicker than the disk cache once its template exists.
        w = cached(args, lambda: reshape.reshaped(args) or _capture_zoo(args),
                   quick=lambda: reshape.reshaped(args, make=False))
    return with_kv_update(w, kv_update)


def cached(args: dict[str, Any], make: Callable[[], ir.Workload],
           use_cache: bool = True,
           quick: Callable[[], ir.Workload | None] | None = None) -> ir.Workload:
    """The workload ``make()`` builds, from the two-level cache under the key of ``args`` (any
    JSON-able dict that determines the capture: zoo arguments, a Hugging Face config's hash).
    ``quick()``, tried after the memory and before the disk, builds it without storing it
    on disk (None where it cannot)."""
    key = _key(args)
    if use_cache:
        hit = _MEMORY.get(key) or (quick() if quick is not None else None) or _load(key)
        if hit is not None:
            _remember(key, hit)
            return hit
    w = make()
    if use_cache:
        _remember(key, w)
        _store(key, w)
    return w


def zoo_module(args: dict[str, Any], phase: str | None = None):
    """(spec, module, args, kwargs) of zoo model ``args["model"]`` built on the meta device
    with its inputs for ``phase`` (default ``args["phase"]``); one :class:`CaptureError`
    line when torch or the model refuses the sizes."""
    spec = get_model(args["model"])
    arch = args["arch"]
    phase = phase or args["phase"]
    try:
        with torch.device("meta"):
            module = spec.build(arch)
            ex_args, ex_kwargs = spec.inputs(arch, phase, args["batch"], args["seq"],
                                             args.get("context", 0))
    except DSEError:
        raise
    except Exception as exc:  # torch or the model refuses these sizes (overflow, bad shapes)
        raise CaptureError(f"{args['model']} cannot be built at these sizes (batch "
                           f"{args['batch']}, {phase}): {type(exc).__name__}: "
                           f"{first_line(exc)}") from None
    return spec, module, ex_args, ex_kwargs


def _capture_zoo(args: dict[str, Any], record: dict | None = None) -> ir.Workload:
    spec, module, ex_args, ex_kwargs = zoo_module(args)
    arch = args["arch"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(module, ex_args, ex_kwargs, model=args["model"], phase=args["phase"],
                       dtype=args["dtype"], batch=args["batch"],
                       seq=args["seq"] if spec.family in ("llm", "encoder") else 0,
                       context=args["context"], arch=arch, record=record)


def _remember(key: str, w: ir.Workload) -> None:
    _MEMORY[key] = w
    _MEMORY.move_to_end(key)
    while len(_MEMORY) > _MEMORY_SIZE:
        _MEMORY.popitem(last=False)


def _load(key: str) -> ir.Workload | None:
    """The cached workload of ``key``, or None (then it is captured again): a missing entry
    silently; one that is not a regular file, does not verify (:func:`dse.safe_io.unseal`:
    corrupted, edited or planted) or does not read back as a workload with one warning line."""
    d = check_cache_dir()
    name = f"{key}.json.gz"
    if not (d / name).exists():
        return None
    try:
        blob = read_sealed(d, name, "capture cache", MAX_CACHE_FILE_BYTES)
        w = ir_json.loads(blob, key)
        if w is None:   # another format version or another key: rebuilt without a word
            return None
        return w
    except (BadInput, OSError, EOFError, ValueError, RecursionError, KeyError, TypeError,
            AttributeError, IndexError) as exc:
        warnings.warn(f"capture cache entry {name} refused ({first_line(exc)}): "
                      "captured again", RuntimeWarning, stacklevel=2)
        return None


def _store(key: str, w: ir.Workload) -> None:
    d = check_cache_dir()
    try:
        write_sealed(d, f"{key}.json.gz", ir_json.dumps(w, key))
    except (OSError, TypeError, ValueError):
        pass  # a read-only home, or a value JSON cannot hold: works without the disk cache


def read_sealed(d: Path, name: str, field: str, max_bytes: int) -> bytes:
    """The payload of the gzipped, sealed entry ``name`` of cache directory ``d`` (at most
    ``max_bytes`` once decompressed); :class:`BadInput`, OSError or ValueError where it is not
    a regular file, does not verify (:func:`dse.safe_io.unseal`) or is too large."""
    packed = unseal(read_regular(d / name, field, max_bytes + 128), d, name)
    if packed is None:
        raise ValueError("its signature does not verify")
    with gzip.GzipFile(fileobj=io.BytesIO(packed)) as f:
        blob = f.read(max_bytes + 1)
    if len(blob) > max_bytes:
        raise ValueError("it is too large")
    return blob


def write_sealed(d: Path, name: str, blob: bytes) -> None:
    """Write ``blob`` gzipped and sealed as entry ``name`` of ``d``, atomically (temp file +
    rename); OSError where it cannot."""
    tmp = None
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        sealed = seal(gzip.compress(blob, compresslevel=6, mtime=0), d, name)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as raw:
            raw.write(sealed)
        os.replace(tmp, d / name)
        tmp = None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def clear_memory_cache() -> None:
    """Forget the in-process workloads and reshape templates (the disk cache stays)."""
    _MEMORY.clear()
    reshape.clear_templates()
