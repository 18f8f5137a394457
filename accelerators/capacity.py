"""One capacity check for every template: does the workload's footprint fit the memory?"""

from __future__ import annotations

from workloads.footprint import memory_footprint
from workloads.formats import has_formats
from workloads.ir import Workload


def capacity_problem(workload: Workload, capacity_bytes: float, element_bytes: int,
                     holder: str) -> str | None:
    """Why ``workload`` (its weights, KV cache and largest live activation set, at
    ``element_bytes`` per element) does not fit ``capacity_bytes``, or None. Exact at the
    boundary: a footprint equal to the capacity fits."""
    fp = memory_footprint(workload)
    if not has_formats(workload):   # a workload with formats is stored as its formats say
        fp = fp.scaled(element_bytes / workload.bytes_per_element)
    if fp.total_bytes <= capacity_bytes:
        return None
    return (f"{workload.model} needs {_gb(fp.total_bytes)} (weights {_gb(fp.weights_bytes)} + "
            f"KV cache {_gb(fp.kv_cache_bytes)} + activations {_gb(fp.activation_bytes)}) but "
            f"{holder} holds {_gb(capacity_bytes)}")


def _gb(nbytes: float) -> str:
    """Bytes in decimal GB, or MB / kB when small, for messages."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}" if nbytes < 100 * size else f"{nbytes / size:,.0f} {unit}"
    return f"{nbytes:.0f} B"
