"""What a GPU's host adds to the kernels: the ``gpu`` template's ``runtime`` as a planned graph.

A GPU runs one stream: kernel ``i`` starts after kernel ``i - 1`` (program order, the
workload's op order) and after the host has issued it. :func:`stream_plan` turns a workload
into that graph, so the event-driven engine and the fast path (critical path) both give the
same wall time:

* ``kernels`` — the kernels back to back, nothing else: device time only (what the torch
  profiler sums, or a CUDA graph's replay minus its launch).
* ``eager`` — PyTorch eager: the host (one ``host`` unit) first pays ``step_s`` and the launch
  round trip, then dispatches the ops one after another, each taking its operator's dispatch
  time (plus its share of the view ops capture dropped). A kernel starts when both its dispatch
  and the previous kernel are done, so the CPU runs ahead of the GPU while kernels are long
  and the GPU starves while they are short. With dispatch times ``d_i``, kernel times ``k_i``
  and ``H_i = L + d_1 + ... + d_i`` the wall time is ``E_n`` of
  ``E_i = max(H_i, E_{i-1}) + k_i``.
* ``cuda_graphs`` — one graph launch (``graph_launch_s`` plus the launch round trip), then
  the kernels back to back.

The host ops are :data:`workloads.ir.HOST` ops on unit ``host``; the ``gpu`` template costs
them from its host profile (:mod:`accelerators.host_profile`). Plans are cached per workload
and runtime (workloads are not changed once built).
"""

from __future__ import annotations

import weakref
from dataclasses import replace

from workloads import ir
from workloads.ir import Op, Workload

RUNTIMES = ("kernels", "eager", "cuda_graphs")

#: Target of the first host op of a planned forward, per runtime.
START_TARGET = {"eager": "step", "cuda_graphs": "graph_launch"}

_PLANS: dict[tuple[int, str], tuple[weakref.ref, Workload]] = {}


def _host_op(name: str, target: str, dtype: str, **attrs) -> Op:
    return Op(name=name, kind=ir.HOST, target=target, input_shapes=(), output_shapes=(),
              dtype=dtype, bytes_per_element=ir.DTYPE_BYTES[dtype], attrs=attrs)


def stream_plan(workload: Workload, runtime: str) -> Workload:
    """``workload`` as one stream under ``runtime`` (:data:`RUNTIMES`; see the module
    docstring): program-order edges between consecutive kernels, and the host's ops."""
    key = (id(workload), runtime)
    hit = _PLANS.get(key)
    if hit is not None and hit[0]() is workload:
        return hit[1]
    ops = workload.ops
    g = workload.graph.copy()
    for a, b in zip(ops, ops[1:]):
        if not g.has_edge(a.name, b.name):
            g.add_edge(a.name, b.name, bytes=0)
    if runtime != "kernels" and ops:
        n = g.number_of_nodes()
        start = _host_op("host.start", START_TARGET[runtime], workload.dtype)
        g.add_node(start.name, op=start, index=n)
        if runtime == "cuda_graphs":
            g.add_edge(start.name, ops[0].name, bytes=0)
        else:
            views = sum(c for _, c in workload.free_ops) / len(ops)
            prev = start.name
            for i, op in enumerate(ops):
                d = _host_op(f"host.{op.name}", op.target, workload.dtype, for_kind=op.kind,
                             views=views)
                g.add_node(d.name, op=d, index=n + 1 + i)
                g.add_edge(prev, d.name, bytes=0)
                g.add_edge(d.name, op.name, bytes=0)
                prev = d.name
    planned = replace(workload, graph=g)
    _PLANS[key] = (weakref.ref(workload, lambda _, k=key: _PLANS.pop(k, None)), planned)
    return planned
