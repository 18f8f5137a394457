"""A :class:`~workloads.ir.Workload` as plain JSON data and back: the capture cache's file
format. Reading it builds only ``Op`` dataclasses, tuples, lists, dicts, numbers and strings,
so a planted or corrupt file can at worst be refused, never run code (unlike a pickle).

Tuples are written as ``{"(": [...]}`` so shapes come back as tuples; a value JSON cannot
hold exactly (a dict with non-string keys, an object) makes :func:`to_data` raise
``TypeError`` and the workload is simply not cached.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import networkx as nx

from workloads.ir import Op, Workload

#: Version of the layout below; a file of another version is not read.
FORMAT = 1
_TUPLE = "("
_OP_FIELDS = tuple(f.name for f in dataclasses.fields(Op))
_WORKLOAD_FIELDS = ("model", "phase", "dtype", "batch", "seq", "context", "arch", "params",
                    "unknown_targets")


def _encode(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tuple):
        return {_TUPLE: [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict) and all(isinstance(k, str) for k in v) and _TUPLE not in v:
        return {k: _encode(x) for k, x in v.items()}
    raise TypeError(f"cannot store {type(v).__name__} in the workload cache")


def _tuples(d: dict[str, Any]) -> Any:
    """``json.loads`` hook: a ``{"(": [...]}`` object is a tuple."""
    return tuple(d[_TUPLE]) if len(d) == 1 and _TUPLE in d else d


def dumps(w: Workload, key: str) -> bytes:
    """``w`` as compact JSON (UTF-8), tagged with its cache ``key``."""
    return json.dumps(to_data(w, key), separators=(",", ":")).encode()


def loads(blob: bytes, key: str) -> Workload | None:
    """The workload in ``blob`` (see :func:`from_data`); ``ValueError`` if it is not JSON."""
    return from_data(json.loads(blob, object_hook=_tuples), key)


def to_data(w: Workload, key: str) -> dict[str, Any]:
    """``w`` as JSON-ready data, tagged with its cache ``key``."""
    nodes = []
    for name, attrs in w.graph.nodes(data=True):
        op = attrs["op"]
        nodes.append({"name": name,
                      "op": {f: _encode(getattr(op, f)) for f in _OP_FIELDS},
                      "attrs": _encode({k: v for k, v in attrs.items() if k != "op"})})
    edges = [[u, v, _encode(d)] for u, v, d in w.graph.edges(data=True)]
    return {"format": FORMAT, "key": key, "graph": _encode(dict(w.graph.graph)),
            "workload": {f: _encode(getattr(w, f)) for f in _WORKLOAD_FIELDS},
            "nodes": nodes, "edges": edges}


def from_data(data: Any, key: str) -> Workload | None:
    """The workload in ``data`` (parsed with tuples restored), or None when it is not a file
    of this format for ``key``."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    try:
        graph = nx.DiGraph(**data["graph"])
        graph.add_nodes_from((node["name"], {**node["attrs"], "op": Op(**node["op"])})
                             for node in data["nodes"])
        graph.add_edges_from((u, v, attrs) for u, v, attrs in data["edges"])
        return Workload(graph=graph, **{f: data["workload"][f] for f in _WORKLOAD_FIELDS})
    except (KeyError, TypeError, ValueError):
        return None
