"""Re-shape templates (:class:`workloads.reshape.Template`) on disk, so that a family captured
once on this machine is not captured again by the next process.

A template is stored as JSON only (nothing read back can run code): its size variables, each
op's ATen name, kind, what the op builder reads from the exported node
(:func:`workloads.capture.node_facts`), its inputs (producer references, role, shape and stored
size as monomials, item size) and outputs, name pattern, the parameter monomials and the view /
unknown op counts. Templates holding an op whose builder needs the node itself (backward
kernels) are kept in memory only.

The file name is a hash of the family key (:func:`workloads.reshape._family`), this package's
version, the torch and transformers versions and a hash of the ``workloads`` package's source
(so an edit to the capture, the zoo or this code makes a new key); the entry is gzipped and
sealed like the capture cache (:func:`dse.safe_io.seal`: an edited, truncated or planted file
does not verify) and read back under a strict schema: any entry that does not verify or does
not read back is ignored (the family is captured again and the entry rewritten).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from dse.errors import BadInput, first_line

#: Format of a stored template; another number is ignored.
FORMAT = "reshape-template-1"
#: Largest template file read, bytes once decompressed [E: a 3-block template of a 32-layer LLM
#: is ~100 kB of JSON].
MAX_BYTES = 16 * 2**20
_PARTS = ("p", "b", "last", "s")


@lru_cache(maxsize=1)
def source_hash() -> str:
    """SHA-256 of every ``.py`` file of the ``workloads`` package (path and bytes, sorted)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def key(family: tuple) -> str:
    """The file key of a family key (JSON-able after ``repr`` of its parts)."""
    import dse
    blob = json.dumps({"family": repr(family), "v": dse.__version__, "format": FORMAT,
                       "torch": _version("torch"), "transformers": _version("transformers"),
                       "source": source_hash()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


# ----------------------------------------------------------------------------- to and from JSON
def to_json(t) -> dict[str, Any] | None:
    """``t`` as JSON values, or None where one of its ops needs its exported node."""
    ops = []
    for part in (t.prefix, t.block, t.suffix):
        rows = []
        for o in part:
            if o.facts is None:
                return None
            rows.append({"aten": o.aten, "kind": o.kind, "facts": o.facts, "name": list(o.name),
                         "inputs": [{"refs": list(i.refs), "role": i.role,
                                     "shape": list(i.shape), "stored": i.stored,
                                     "itemsize": i.itemsize} for i in o.inputs],
                         "outputs": [[list(s), n] for s, n in o.outputs]})
        ops.append(rows)
    return {"format": FORMAT, "names": list(t.names), "ops": ops,
            "params": [list(x) for x in t.params], "free": t.free, "unknown": t.unknown}


def _int(x) -> int:
    if type(x) is not int:
        raise ValueError(f"expected an integer, not {str(x)[:40]!r}")
    return x


def _str(x, allowed=None) -> str:
    if type(x) is not str or (allowed is not None and x not in allowed):
        raise ValueError(f"unexpected {str(x)[:40]!r}")
    return x


def _expr(x) -> tuple:
    c, terms, e = x
    return (_int(c), tuple((_int(i), _int(p)) for i, p in terms), _int(e))


def _ref(x) -> tuple | None:
    if x is None:
        return None
    part, delta, j = x
    return (_str(part, _PARTS), _int(delta), _int(j))


def _facts(x) -> dict[str, Any]:
    if type(x) is not dict:
        raise ValueError("facts: expected an object")
    out: dict[str, Any] = {}
    for k, v in x.items():
        if k in ("strided_inputs", "transposed", "causal"):
            if type(v) is not bool:
                raise ValueError(f"facts {k}: expected true or false")
        elif k == "groups":
            _int(v)
        elif k in ("stride", "padding"):
            if type(v) is not list or not all(type(e) in (int, str) for e in v):
                raise ValueError(f"facts {k}: expected a list of integers")
        else:
            raise ValueError(f"facts: unexpected field {str(k)[:40]!r}")
        out[k] = v
    return out


def from_json(d: Any):
    """The template of :func:`to_json`'s ``d``; ValueError (or TypeError, KeyError) where it does
    not have that schema."""
    from workloads.reshape import SHAPE_KINDS, Template, _Input, _TemplateOp
    from workloads.capture import ACT, KV, WEIGHT
    if type(d) is not dict or d.get("format") != FORMAT:
        raise ValueError("another format")
    names = [_str(n) for n in d["names"]]
    parts = []
    for rows in d["ops"]:
        part = []
        for r in rows:
            kind = _str(r["kind"], SHAPE_KINDS)
            base, first, step = r["name"]
            ins = [_Input((_ref(i["refs"][0]), _ref(i["refs"][1])),
                          _str(i["role"], (ACT, KV, WEIGHT)),
                          tuple(_expr(x) for x in i["shape"]),
                          None if i["stored"] is None else _expr(i["stored"]),
                          _int(i["itemsize"])) for i in r["inputs"]]
            outs = [(tuple(_expr(x) for x in s), _int(n)) for s, n in r["outputs"]]
            part.append(_TemplateOp(None, _facts(r["facts"]), _str(r["aten"]), kind, ins, outs,
                                    (_str(base), _int(first), _int(step))))
        parts.append(part)
    prefix, block, suffix = parts
    const, layered = ([_expr(x) for x in xs] for xs in d["params"])
    counts = [{_str(k): (_int(a), _int(b)) for k, (a, b) in d[f].items()}
              for f in ("free", "unknown")]
    return Template(names, prefix, block, suffix, (const, layered), counts[0], counts[1])


# ----------------------------------------------------------------------------- the files
def _dir() -> Path:
    """The capture cache's directory (:func:`workloads.build.check_cache_dir`), checked."""
    from workloads import build
    return build.check_cache_dir()


def load(family: tuple):
    """The stored template of ``family``, or None (none stored, or one that does not verify or
    read back: then with one warning line)."""
    d = _dir()
    name = f"template-{key(family)}.json.gz"
    if not (d / name).exists():
        return None
    try:
        from workloads import build
        blob = build.read_sealed(d, name, "template cache", MAX_BYTES)
        return from_json(json.loads(blob))
    except (BadInput, OSError, EOFError, ValueError, RecursionError, KeyError, TypeError,
            AttributeError, IndexError) as exc:
        warnings.warn(f"template cache entry {name} refused ({first_line(exc)}): captured again",
                      RuntimeWarning, stacklevel=2)
        return None


def store(family: tuple, t) -> bool:
    """Write ``t`` for ``family`` (atomically); False where it cannot be stored (an op needs its
    node, a read-only cache directory)."""
    data = to_json(t)
    if data is None:
        return False
    d = _dir()
    try:
        from workloads import build
        build.write_sealed(d, f"template-{key(family)}.json.gz",
                           json.dumps(data, separators=(",", ":")).encode())
        return True
    except (OSError, TypeError, ValueError):
        return False
