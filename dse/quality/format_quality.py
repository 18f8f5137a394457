"""Published language-model quality per number format, read from a table (no interpolation).

The shipped table (``data/llm_format_quality.json``) holds perplexities transcribed from
papers and public repositories: a zoo model at its reference architecture (the published
checkpoint), the formats of its tensor roles (:mod:`workloads.formats`; roles not listed are
the 16-bit baseline), the quantisation method (RTN, GPTQ, AWQ, ...), the metric and its value,
with the source, licence and a confidence tag. Quality is ``baseline / value`` against the
baseline entry (method ``none``, no formats) of the same model, metric and source: 1.0 is
lossless, higher is better.

A combination the table does not hold is refused (:class:`BadInput` naming what it holds), as
is an architecture other than the reference: nothing is interpolated. A study reads it with
``quality: published`` on an LLM workload (``quality: {source: published, method: AWQ}`` picks
a method; by default the best published one for the formats).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.errors import BadInput

#: The shipped table.
DEFAULT_TABLE = Path(__file__).with_name("data") / "llm_format_quality.json"
CONFIDENCE_TAGS = ("P", "R", "D", "E")
#: Base dtypes the table's baselines stand for (their 16-bit checkpoints).
BASE_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class FormatEntry:
    """One published result: ``value`` of ``metric`` (lower is better) for ``model`` with its
    tensors in ``formats`` after ``method``."""

    name: str
    model: str
    formats: tuple[tuple[str, str], ...]
    method: str
    metric: str
    value: float
    source: str
    confidence: str

    def text(self) -> str:
        fm = ",".join(f"{r}={f}" for r, f in self.formats) or "16-bit"
        return f"{self.name}: {fm} {self.method} {self.metric}={self.value:g} ({self.source}, " \
               f"[{self.confidence}])"


@dataclass
class FormatTable:
    path: str
    sources: dict[str, dict[str, Any]]
    entries: list[FormatEntry]

    def baseline(self, entry: FormatEntry) -> FormatEntry | None:
        """The baseline of ``entry``'s model, metric and source."""
        for e in self.entries:
            if (e.model, e.metric, e.source) == (entry.model, entry.metric, entry.source) \
                    and not e.formats and e.method == "none":
                return e
        return None

    def lookup(self, model: str, formats: dict[str, str], method: str | None = None
               ) -> FormatEntry:
        """The entry of ``model`` with ``formats`` (role -> canonical format name, base roles
        dropped) and ``method`` (None: the lowest value over methods relative to its
        baseline); :class:`BadInput` listing what the table holds for ``model`` otherwise."""
        key = tuple(sorted(formats.items()))
        found = [e for e in self.entries if e.model == model and e.formats == key
                 and (method is None or e.method == method or (not key and e.method == "none"))]
        if not found:
            held = sorted({",".join(f"{r}={f}" for r, f in e.formats) or "16-bit"
                           for e in self.entries if e.model == model})
            allowed = ("published combinations for " + model + ": " + "; ".join(held)
                       if held else "a model the table covers: "
                       + ", ".join(sorted({e.model for e in self.entries})))
            shown = ",".join(f"{r}={f}" for r, f in key) or "16-bit"
            raise BadInput("quality", shown + (f" ({method})" if method else ""),
                           f"expected {allowed} (table {Path(self.path).name}; nothing "
                           "is interpolated)")
        return min(found, key=lambda e: (e.value / self.baseline(e).value, e.name))


_CACHE: dict[tuple[str, int, int], FormatTable] = {}


def load_format_table(path: str | Path | None = None,
                      field_name: str = "quality.table") -> FormatTable:
    """The table at ``path`` (default: the shipped one), validated; cached while unchanged."""
    p = Path(path) if path is not None else DEFAULT_TABLE
    try:
        st = p.stat()
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise BadInput(field_name, str(p), "expected a readable UTF-8 JSON file") from None
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE[key] = parse_format_table(text, str(p), field_name)
    return _CACHE[key]


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number")


def parse_format_table(text: str, path: str = "table",
                       field_name: str = "quality.table") -> FormatTable:
    """Validate the JSON text of a format-quality table (see the module docstring)."""
    from workloads.formats import ROLES, get_format
    from workloads.zoo import get_model

    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadInput(field_name, path, f"expected a JSON table ({str(exc)[:60]})") from None
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, dict) or not sources or not all(
            isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("url", "licence"))
            for v in sources.values()):
        raise BadInput(f"{field_name} sources", sources, "expected a mapping of source name -> "
                       "{citation, url, licence}")
    metrics = data.get("metrics", {})
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise BadInput(f"{field_name} entries", raw_entries, "expected a non-empty list")
    table = FormatTable(path=path, sources=sources, entries=[])
    seen: set = set()
    for i, raw in enumerate(raw_entries):
        where = f"{field_name} entries[{i}]"
        if not isinstance(raw, dict):
            raise BadInput(where, raw, "expected {name, model, formats, method, metric, value, "
                           "source, confidence}")
        unknown = set(raw) - {"name", "model", "formats", "method", "metric", "value",
                              "source", "confidence", "note"}
        if unknown:
            k = sorted(unknown)[0]
            raise BadInput(f"{where}.{k}", raw[k], "unknown key")
        get_model(raw.get("model"))
        fm = raw.get("formats", {})
        if not isinstance(fm, dict):
            raise BadInput(f"{where}.formats", fm, "expected a mapping of role -> format")
        roles = []
        for role, name in fm.items():
            if role not in ROLES:
                raise BadInput(f"{where}.formats.{role}", role, "expected a role: "
                               + ", ".join(ROLES))
            roles.append((role, get_format(name, f"{where}.formats.{role}").name))
        value = raw.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0):
            raise BadInput(f"{where}.value", value, "expected a positive number")
        for k, allowed in (("source", sources), ("metric", metrics),
                           ("confidence", CONFIDENCE_TAGS)):
            if raw.get(k) not in allowed:
                raise BadInput(f"{where}.{k}", raw.get(k), "expected one of "
                               + ", ".join(allowed))
        if not isinstance(raw.get("method"), str) or not isinstance(raw.get("name"), str):
            raise BadInput(where, raw, "expected a name and a method (strings)")
        e = FormatEntry(raw["name"], raw["model"], tuple(sorted(roles)), raw["method"],
                        raw["metric"], float(value), raw["source"], raw["confidence"])
        key = (e.model, e.formats, e.method, e.metric, e.source)
        if key in seen or e.name in {x.name for x in table.entries}:
            raise BadInput(where, e.name, "expected each entry (and name) once")
        seen.add(key)
        table.entries.append(e)
    for e in table.entries:
        if table.baseline(e) is None:
            raise BadInput(f"{field_name} entries", e.name, f"expected a baseline entry "
                           f"(method none, no formats) of {e.model}, {e.metric}, {e.source}")
    return table


def quantised_roles(formats: dict[str, str] | None, base: str) -> dict[str, str]:
    """``formats`` (role -> name) in canonical names without the roles left in ``base``."""
    from workloads.formats import get_format

    b = get_format(base).name
    out = {}
    for role, name in (formats or {}).items():
        f = get_format(name).name
        if f != b:
            out[role] = f
    return out


def format_quality(model: str, arch: dict[str, Any], formats: dict[str, str] | None,
                   base: str = "bf16", method: str | None = None,
                   table: str | Path | None = None) -> tuple[float, float, str]:
    """``(quality, raw value, detail)`` of ``model`` at ``arch`` with ``formats``: the
    published value's baseline over it (1 = lossless). :class:`BadInput` for a combination or
    an architecture the table does not hold."""
    from workloads.zoo import get_model

    spec = get_model(model)
    if spec.resolve_arch(arch) != spec.resolve_arch(None):
        from dse.quality.published import arch_overrides
        raise BadInput("quality", {model: arch_overrides(model, arch)}, "expected the "
                       "reference architecture (the published checkpoint) of a model in the "
                       "format-quality table")
    if base not in BASE_DTYPES:
        raise BadInput("quality", base, "expected a 16-bit base dtype (" + ", ".join(BASE_DTYPES)
                       + "): the table's baselines are 16-bit checkpoints")
    t = load_format_table(table)
    entry = t.lookup(model, quantised_roles(formats, base), method)
    ref = t.baseline(entry)
    return ref.value / entry.value, entry.value, entry.text()
