"""Names, units and number formatting for report axes, hover text and tables.

Axis titles always carry the unit ("latency (ms)"); values on an axis are scaled by one SI
prefix chosen from the data so tick labels stay short. Hover text and tables print every value
with its own prefix ("1.23 ms").
"""

from __future__ import annotations

import math
from typing import Iterable

#: Known metric keys -> (human name, SI unit). Units follow the key's suffix convention
#: (``_s`` seconds, ``_j`` joules, ``_mm2`` square millimetres, ``_w`` watts) [R simulators/result.py].
METRICS: dict[str, tuple[str, str]] = {
    "latency_s": ("latency", "s"),
    "energy_j": ("energy", "J"),
    "area_mm2": ("area", "mm²"),
    "avg_power_w": ("average power", "W"),
    "edp": ("energy-delay product", "J·s"),
    "throughput": ("throughput", "items/s"),
    "quality": ("quality", ""),
    "params": ("parameters", ""),
    "flops": ("FLOPs", "FLOP"),
    "total_pes": ("total PEs", "PEs"),
    "cost_usd": ("cost per chip", "US$"),
    "tdp_w": ("TDP", "W"),
    # a serving study's metrics [R dse/study/objectives.py SERVING_METRICS]
    "ttft_p99_s": ("p99 TTFT", "s"), "ttft_p50_s": ("p50 TTFT", "s"),
    "tpot_p99_s": ("p99 TPOT", "s"), "tpot_p50_s": ("p50 TPOT", "s"),
    "e2e_p99_s": ("p99 end-to-end latency", "s"),
    "throughput_tok_s": ("throughput", "tokens/s"),
    "goodput_req_s": ("goodput", "requests/s"),
    "cost_per_mtok_usd": ("cost per million tokens", "US$"),
    "energy_per_token_j": ("energy per token", "J"),
    "preemptions": ("preemptions", ""), "rejected": ("rejected requests", ""),
}

#: Key suffix -> unit, for metrics and parameters not listed above.
SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_mm2", "mm²"), ("_usd", "US$"), ("_bps", "B/s"), ("_hz", "Hz"), ("_kb", "KiB"), ("_mb", "MiB"),
    ("_nm", "nm"), ("_s", "s"), ("_j", "J"), ("_w", "W"),
)

#: Units that take SI prefixes on axes (others, like mm², are printed as they are).
PREFIXABLE = {"s", "J", "W", "J·s", "B", "B/s", "Hz", "FLOP", "FLOP/s", "OP/s", "FLOP/B",
              "items/s", "tokens/s", "samples/s", "steps/s", "requests/s"}

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
             (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"), (1e-15, "f"))


def metric_name(key: str) -> str:
    """Human name of a metric key (the key itself when unknown)."""
    return METRICS.get(key, (key, ""))[0]


def unit_of(key: str, default: str = "") -> str:
    """Unit of a metric or parameter key, from the known table or the key's suffix."""
    if key in METRICS:
        return METRICS[key][1]
    low = key.lower()
    for suffix, unit in SUFFIX_UNITS:
        if low.endswith(suffix):
            return unit
    return default


def prefix_for(values: Iterable[float], unit: str) -> tuple[float, str]:
    """(factor, prefixed unit) so that ``value / factor`` reads well for the largest |value|."""
    if unit not in PREFIXABLE:
        return 1.0, unit
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 1.0, unit
    top = max(finite)
    for factor, prefix in _PREFIXES:
        if top >= factor:
            return factor, prefix + unit
    return _PREFIXES[-1][0], _PREFIXES[-1][1] + unit


def axis_title(name: str, unit: str) -> str:
    """``"latency (ms)"``, or just the name when there is no unit."""
    return f"{name} ({unit})" if unit else name


def fmt(value: object, unit: str = "") -> str:
    """One value for hover text or a table cell: 4 significant digits, SI prefix when the unit
    takes one (``fmt(0.00123, "s") == "1.23 ms"``)."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value} {unit}".strip() if unit else str(value)
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if isinstance(value, int) and not unit:
        return f"{value:,}"
    if unit in PREFIXABLE and v != 0:
        factor, u = prefix_for([v], unit)
        return f"{v / factor:.4g} {u}"
    text = f"{v:,.0f}" if 1e4 <= abs(v) < 1e12 else f"{v:.4g}"
    return f"{text} {unit}" if unit else text
