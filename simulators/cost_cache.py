"""The fitted iteration cost model kept on disk, so a fresh process serves without refitting.

:class:`~simulators.iteration_cost.IterationCostModel` simulates an iteration's token-wise body
at a few dozen token counts (tens of seconds for a large model on a system); what the fit
measured (:meth:`IterationCostModel.fitted`: the body's latency and dynamic energy at the grid
points simulated so far, each stage's weights and KV bytes per token, the activations sized) is
a small JSON file under ``$DSE_CACHE_DIR/cost_models`` (beside the capture cache,
:mod:`workloads.build`), one per key:

* the model: the decode step it is fitted on (its name, phase, dtype, and a fingerprint of the
  graph: op count and the sums of FLOPs and bytes, so an architecture change is a new key);
* the target: the design or system and layout as results describe them, and the fidelity;
* the grid's top (``max_tokens``);
* the code: a hash of the cost path's sources and shipped calibrations (the templates, the
  simulators, the iteration graph), so an edit there refits.

The same trust rules as the capture cache: JSON only (reading a file cannot run code), a cache
directory another user could write is refused (one :class:`BadInput` line), files written
atomically and sealed with the cache's key (:mod:`dse.safe_io`), read only if regular, and a
file that is corrupt, oversized, unsealed or not of this key's shape is ignored (the model is
refitted and the file replaced).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from dse.errors import BadInput
from dse.safe_io import read_regular, seal, unseal
from workloads import build, ir

#: Version of the file's layout (2: grid points not simulated yet are null).
SCHEMA = 2
#: Largest file read, bytes [E: a fit is ~10 kB; activations add a few entries].
MAX_FILE_BYTES = 4 * 2**20
#: Sources whose change changes a fit (relative to the repository root): the templates and
#: their calibrations, the engines the body is simulated with, the cost model, the graphs.
_SOURCES = ("accelerators", "simulators/iteration_cost.py", "simulators/engine.py",
            "simulators/system_engine.py", "simulators/fast.py", "simulators/channel.py",
            "workloads/iteration.py", "workloads/parallel.py", "workloads/footprint.py",
            "workloads/requests.py")
_CODE: list[str] = []


def cache_dir() -> Path:
    return build.cache_dir().parent / "cost_models"


def _checked_dir() -> Path:
    """The cache directory, refused when another user could write it or ``$DSE_CACHE_DIR``."""
    build.check_cache_dir()
    d = cache_dir()
    try:
        st = d.stat()
    except OSError:
        return d
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise BadInput("DSE_CACHE_DIR", str(d), "expected a cache directory only you can "
                       "write (chmod go-w it, or point DSE_CACHE_DIR elsewhere)")
    return d


def code_version() -> str:
    """A hash of the cost path's sources and calibrations (once per process)."""
    if not _CODE:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for name in _SOURCES:
            p = root / name
            files = sorted(p.rglob("*")) if p.is_dir() else [p]
            for f in files:
                if f.suffix in (".py", ".json") and f.is_file():
                    h.update(f.relative_to(root).as_posix().encode())
                    h.update(f.read_bytes())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


def fingerprint(w: ir.Workload) -> dict[str, Any]:
    """What identifies a decode step's graph without hashing all of it. Number formats are
    named (fp8 formats on an int8 step move the same bytes as plain int8 but cost otherwise:
    without them the two shared one fit)."""
    ops = w.ops
    return {"model": w.model, "phase": w.phase, "dtype": w.dtype, "arch": w.arch,
            "kv_update": w.kv_update, "batch": w.batch, "ops": len(ops),
            "edges": w.graph.number_of_edges(),
            "flops": sum(op.flops for op in ops),
            "weights": sum(op.weight_bytes for op in ops),
            "activations": sum(op.activation_bytes_read + op.activation_bytes_written
                               for op in ops),
            "kv": sum(op.kv_bytes_read + op.kv_bytes_written for op in ops),
            "kinds": sorted({op.kind for op in ops}),
            "formats": sorted({str(op.attrs["formats"]) for op in ops
                               if op.attrs.get("formats")})}


def key(base: ir.Workload, target: Any, max_tokens: int) -> str:
    blob = json.dumps({"schema": SCHEMA, "model": fingerprint(base),
                       "target": target.describe(), "fidelity": target.fidelity,
                       "max_tokens": int(max_tokens), "code": code_version()},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _numbers(v: Any, n: int | None = None, nulls: bool = False) -> bool:
    """``v`` is a list (of ``n``) finite numbers (or nulls, with ``nulls``)."""
    return (isinstance(v, list) and (n is None or len(v) == n) and all(
        (nulls and x is None) or (isinstance(x, (int, float)) and not isinstance(x, bool)
                                  and math.isfinite(x)) for x in v))


def load(k: str, grid: list[float], stages: int) -> dict | None:
    """The fit stored under key ``k`` if it has this grid and these stages, else None."""
    path = _checked_dir() / f"{k}.json"
    if not path.exists():
        return None
    try:     # a regular file, sealed with the cache's key (dse.safe_io), else refitted
        blob = unseal(read_regular(path, "cost-model cache", MAX_FILE_BYTES),
                      path.parent, path.name)
        d = json.loads(blob) if blob is not None else None
    except (BadInput, OSError, ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or d.get("key") != k or d.get("schema") != SCHEMA:
        return None
    acts = d.get("activation_bytes", {})
    lat, energy = d.get("g_latency_s"), d.get("g_energy_j")
    ok = (d.get("grid") == list(grid) and _numbers(lat, len(grid), True)
          and _numbers(energy, len(grid), True)
          and [x is None for x in lat] == [x is None for x in energy]
          and _numbers(d.get("stage_weights_bytes"), stages)
          and _numbers(d.get("stage_kv_bytes_per_token"), stages)
          and isinstance(acts, dict)
          and all(isinstance(a, str) and len(a.split(",")) == 2
                  and all(x.isdigit() for x in a.split(",")) and _numbers(v, stages)
                  for a, v in acts.items()))
    return d if ok else None


def store(k: str, fitted: dict) -> None:
    """Write ``fitted`` under key ``k`` (atomically; a read-only cache is left alone)."""
    d = _checked_dir()
    tmp = None
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        blob = seal(json.dumps({"schema": SCHEMA, "key": k, **fitted}, sort_keys=True).encode(),
                    d, f"{k}.json")
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, d / f"{k}.json")
        tmp = None
    except (OSError, TypeError, ValueError):
        pass
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
