"""How a decode step updates its KV cache, as a pass over a captured workload.

Capture marks every op that appends to the KV cache (``attrs["kv_append"]``: a ``cat`` onto a
tensor of the ``kv_cache`` input) and costs it as written in place. :func:`with_kv_update`
re-costs those ops for the other semantics of :data:`workloads.ir.KV_UPDATES`:

* ``in_place`` — the new token's keys and values are written into a preallocated cache: read
  the new entries, write them (serving engines; Hugging Face's ``StaticCache``).
* ``concat`` — a new cache tensor is built every step: read the whole old cache and the new
  entries, write the whole new cache (``torch.cat``, Hugging Face's default ``DynamicCache``).

Only bytes change; the graph, FLOPs and every other op stay as captured.
"""

from __future__ import annotations

import math
from dataclasses import replace

from dse.errors import BadInput
from workloads import ir


def check_kv_update(value: object) -> str:
    """``value`` if it is one of :data:`~workloads.ir.KV_UPDATES`, else :class:`BadInput`."""
    if value not in ir.KV_UPDATES:
        raise BadInput("kv_update", value, "expected one of " + ", ".join(ir.KV_UPDATES))
    return str(value)


def append_op(op: ir.Op, mode: str) -> ir.Op:
    """The KV-append ``op`` with the bytes of ``mode``: the new entries are ``attrs["elements"]``
    of the output, the rest of the output is the old cache."""
    e = op.bytes_per_element
    out_elems = math.prod(op.output_shapes[0]) if op.output_shapes else 0
    new_b = int(op.attrs.get("elements", 0)) * e
    cache_b = max(0, out_elems * e - new_b)
    if mode == "concat":
        return replace(op, activation_bytes_read=new_b, kv_bytes_read=cache_b,
                       kv_bytes_written=cache_b + new_b, activation_bytes_written=0)
    return replace(op, activation_bytes_read=new_b, kv_bytes_read=0, kv_bytes_written=new_b,
                   activation_bytes_written=0)


def with_kv_update(workload: ir.Workload, mode: str) -> ir.Workload:
    """``workload`` with its KV-cache appends costed as ``mode`` (itself when already so)."""
    mode = check_kv_update(mode)
    if mode == workload.kv_update:
        return workload
    graph = workload.graph.copy()
    for name, data in graph.nodes(data=True):
        op = data["op"]
        if op.attrs.get("kv_append"):
            data["op"] = append_op(op, mode)
    return replace(workload, graph=graph, kv_update=mode)
