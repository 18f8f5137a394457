"""Plain-text views of the CLI that must read well at 80 columns: values with their units in
engineering notation (``989 TFLOP/s``), and the template listing of ``dse accelerators``.

Sizes in bytes follow one rule: binary prefixes (KiB, MiB, GiB = 2**10, 2**20, 2**30 B) for a
size that is a whole number of KiB but not of kB (60 MiB), SI prefixes (kB, MB, GB = 10**3,
10**6, 10**9 B) otherwise (141 GB).
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Iterable

from dse.report.units import fmt

#: Units given in binary multiples of a byte, -> bytes.
_BINARY_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_BINARY_PREFIXES = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
#: Units shown differently from how templates spell them.
_SHOWN = {"mm^2": "mm²"}


def quantity(value: Any, unit: str = "") -> str:
    """``value`` with ``unit``: SI prefixes where the unit takes them (``1.98 GHz``), byte
    sizes by the module docstring's rule, other numbers as they are (``128 PEs``)."""
    unit = _SHOWN.get(unit, unit)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value} {unit}".strip() if unit else str(value)
    if unit in _BINARY_UNITS:
        value, unit = value * _BINARY_UNITS[unit], "B"
    if (unit == "B" and math.isfinite(value) and value >= 1024 and value % 1024 == 0
            and value % 1000 != 0):
        for factor, name in _BINARY_PREFIXES:
            if value >= factor:
                return f"{value / factor:.4g} {name}"
    if not unit and (isinstance(value, int) or value.is_integer() and abs(value) < 1e4):
        return str(int(value))  # a count: as written, no separators
    return fmt(value, unit)


def _one_unit(values: list[str], unit: str) -> list[str]:
    """Values that all end in `` unit`` keep it on the last one only (``4 to 1024 PEs``)."""
    tail = " " + _SHOWN.get(unit, unit)
    if unit and len(values) > 1 and all(v.endswith(tail) for v in values):
        return [v[: -len(tail)] for v in values[:-1]] + values[-1:]
    return values


def _allowed(p: dict[str, Any]) -> str:
    if p["choices"]:
        return ", ".join(_one_unit([quantity(c, p["unit"] if isinstance(c, (int, float)) else "")
                                    for c in p["choices"]], p["unit"]))
    if p["low"] is not None and p["high"] is not None:
        low, high = _one_unit([quantity(p["low"], p["unit"]), quantity(p["high"], p["unit"])],
                              p["unit"])
        return f"{low} to {high}" + (", log" if p["log"] else "")
    return p["type"]


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent.rstrip()]


def accelerators_text(rows: Iterable[dict[str, Any]], width: int = 80) -> str:
    """``dse accelerators`` as text no wider than ``width`` (when names fit): per template its
    description, presets, and per parameter the value that runs by default (the default
    preset's), what is allowed, and the description on its own line. Names are never cut."""
    width = max(width, 40)
    out: list[str] = []
    for a in rows:
        if "error" in a:
            out += _wrap(f"{a['name']} — not loaded: {a['error']}", width, "") + [""]
            continue
        out += _wrap(f"{a['name']} — {a['description']}", width, "")
        presets = [f"{n} (default)" if n == a["default_preset"] else n for n in a["presets"]]
        out += _wrap("presets: " + (", ".join(presets) or "none"), width, "  ")
        values = a.get("defaults") or {p["name"]: p["default"] for p in a["params"]}
        shown = {p["name"]: quantity(values.get(p["name"], p["default"]), p["unit"])
                 for p in a["params"]}
        name_w = max([len("parameter")] + [len(n) for n in shown])
        head = f"default ({a['default_preset']})" if a["default_preset"] else "default"
        value_w = max([len(head)] + [len(v) for v in shown.values()])
        lead = 2 + name_w + 2 + value_w + 2
        out.append(f"  {'parameter':<{name_w}}  {head:<{value_w}}  allowed")
        for p in a["params"]:
            allowed = _wrap(_allowed(p), max(width - lead, 20), "")
            out.append(f"  {p['name']:<{name_w}}  {shown[p['name']]:<{value_w}}  {allowed[0]}")
            out += [" " * lead + line for line in allowed[1:]]
            out += _wrap(p["description"], width, "      ")
        out.append("")
    return "\n".join(out)


def items_text(items: dict[str, Any], units: dict[str, str] | None = None) -> str:
    """``key=value`` pairs with units, comma-separated (``rows=128 PEs, clock_hz=1.05 GHz``)."""
    units = units or {}
    return ", ".join(f"{k}={quantity(v, units.get(k, ''))}" for k, v in items.items())


def wrapped(text: str, width: int = 80, indent: str = "  ") -> str:
    """``text`` wrapped to ``width`` with a hanging ``indent``."""
    lines = textwrap.wrap(text, width=max(width, 40), subsequent_indent=indent,
                          break_on_hyphens=False)
    return "\n".join(lines)
