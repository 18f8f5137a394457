"""How much memory a workload occupies while it runs: weights, KV cache, live activations.

Pure graph arithmetic (no hardware): every template checks its capacity against the same
:func:`memory_footprint` (see :func:`accelerators.capacity.capacity_problem`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from workloads import ir
from workloads.ir import Workload


@dataclass(frozen=True)
class Footprint:
    """Bytes a workload holds at its own element size: ``weights_bytes`` (every parameter
    once), ``kv_cache_bytes`` (every attention layer's cache plus what the step appends) and
    ``activation_bytes`` (the largest set of activations alive at once)."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes

    def scaled(self, factor: float) -> "Footprint":
        """The footprint with every element ``factor`` times as large (another dtype)."""
        return Footprint(self.weights_bytes * factor, self.kv_cache_bytes * factor,
                         self.activation_bytes * factor)


def peak_live_activation_bytes(workload: Workload) -> float:
    """The largest activation working set over the ops in execution order, B.

    An op's output stays alive from the op until its last consumer has run (edge ``bytes``
    are the tensors passed on); while an op runs, the outputs alive plus its own graph-input
    reads (activations it reads that no producer in the graph passes it) and its outputs are
    held. Weights and the KV cache are counted apart.
    """
    ops = workload.ops
    graph = workload.graph
    position = {op.name: i for i, op in enumerate(ops)}
    last_use = [i for i in range(len(ops))]
    out_bytes = [0.0] * len(ops)
    succ_of, pred_of = graph._succ, graph._pred   # networkx's own dicts: its views cost 3x
    for i, op in enumerate(ops):
        for succ, data in succ_of[op.name].items():
            last_use[i] = max(last_use[i], position[succ])
            out_bytes[i] = max(out_bytes[i], float(data.get("bytes", 0)))
    # a difference array of alive outputs: alive on (i, last_use[i]]
    delta = [0.0] * (len(ops) + 1)
    for i in range(len(ops)):
        if last_use[i] > i:
            delta[i + 1] += out_bytes[i]
            delta[last_use[i] + 1] -= out_bytes[i]
    alive, peak = 0.0, 0.0
    for i, op in enumerate(ops):
        alive += delta[i]
        fed = sum(float(data.get("bytes", 0)) for data in pred_of[op.name].values())
        external = max(0.0, op.activation_bytes_read - fed)
        peak = max(peak, alive + external + op.activation_bytes_written)
    return peak


def memory_footprint(workload: Workload) -> Footprint:
    """The :class:`Footprint` of ``workload`` (computed once per workload)."""
    key = id(workload)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is workload:
        return hit[1]
    # attention's cache, the entries the step appends, and (a ``concat`` update,
    # workloads.kv_update) one layer's old cache, alive while its copy is made
    appends = [op for op in workload.ops if op.attrs.get("kv_append")]
    kv = (sum(op.kv_bytes_read for op in workload.ops if op.kind == ir.ATTENTION)
          + sum(op.kv_bytes_written - op.kv_bytes_read for op in appends)
          + max((op.kv_bytes_read for op in appends), default=0))
    fp = Footprint(float(workload.weight_footprint_bytes), float(kv),
                   peak_live_activation_bytes(workload))
    _CACHE[key] = (weakref.ref(workload, lambda _, k=key: _CACHE.pop(k, None)), fp)
    return fp


#: Footprints of the workloads seen, by id, dropped when the workload is collected
#: (workloads are not changed once built).
_CACHE: dict[int, tuple[weakref.ref, Footprint]] = {}
