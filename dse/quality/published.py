"""Published accuracy: ImageNet-1k top-1 of real, trained networks, read from a table.

The shipped table (``data/imagenet_top1.json``) is transcribed by hand from the authors' and
libraries' published results (TF-slim's MobileNetV2 width x resolution table; torchvision's
ResNet-18/34/50/101/152 and ViT-B/L at patch 16/32, IMAGENET1K_V1 weights); each source names
its URL and licence and each entry a confidence tag ([R]: a public repository). A study may
give its own table of the same form (``quality: {source: published, table: PATH}``).

Each entry names a zoo model and the architecture overrides that capture the same network.
An architecture is *covered* when it is the same network as an entry: the same zoo ``build``
function and the same full architecture once both are resolved against their models'
defaults (so ResNet-101, written as ``resnet50`` with ``blocks3: 23``, also covers a
``resnet18`` workload given that architecture). The table is JSON, read with ``json`` (no code
runs); every problem is one :class:`BadInput` line naming the entry and field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import BadInput

#: The shipped table.
DEFAULT_TABLE = Path(__file__).with_name("data") / "imagenet_top1.json"
#: Confidence tags an entry may carry (see the brief: paper, repository, datasheet, estimate).
CONFIDENCE_TAGS = ("P", "R", "D", "E")
#: Largest table read, bytes (a table of thousands of entries is a few hundred kB).
MAX_TABLE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One trained network: ``top1_pct`` (%), where it comes from, and how to capture it
    (``model`` with ``arch`` overrides)."""

    name: str
    model: str
    arch: dict[str, Any]
    top1_pct: float
    source: str
    confidence: str
    published_params: int | None = None
    published_macs: int | None = None


@dataclass
class AccuracyTable:
    """A validated table; :meth:`lookup` finds the entry of an architecture."""

    path: str
    title: str
    sources: dict[str, dict[str, Any]]
    entries: list[Entry]
    _by_key: dict[str, Entry] = field(default_factory=dict, repr=False)

    def lookup(self, model: str, arch: dict[str, Any] | None) -> Entry | None:
        """The entry that is the same network as ``model`` with ``arch``, or None."""
        return self._by_key.get(network_key(model, arch))

    def networks_for(self, model: str) -> list[Entry]:
        """Entries a workload of ``model`` can capture (same ``build``, same arch keys)."""
        from workloads.zoo import get_model

        spec = get_model(model)
        return [e for e in self.entries if _same_family(spec, get_model(e.model))]

    def full_arch(self, entry: Entry) -> dict[str, Any]:
        """The entry's complete architecture (its model's defaults with its overrides)."""
        from workloads.zoo import get_model

        return get_model(entry.model).resolve_arch(entry.arch)

    def source_text(self, entry: Entry) -> str:
        """``name (source, [tag])``: what a trial's quality source column shows."""
        return f"{entry.name} ({entry.source}, [{entry.confidence}])"


def _same_family(a, b) -> bool:
    return a.build is b.build and set(a.arch) == set(b.arch)


def arch_overrides(model: str, arch: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``arch`` that differ from ``model``'s defaults (how an error shows it)."""
    from workloads.zoo import get_model

    defaults = get_model(model).arch
    return {k: v for k, v in arch.items() if defaults.get(k) != v}


def network_key(model: str, arch: dict[str, Any] | None) -> str:
    """A string that is equal for two (model, arch) pairs exactly when they build the same
    network (raises :class:`BadInput` for an unknown model or a bad architecture)."""
    from workloads.zoo import get_model

    spec = get_model(model)
    full = spec.resolve_arch(arch)
    build = f"{spec.build.__module__}.{getattr(spec.build, '__qualname__', spec.build)}"
    return json.dumps([build, full], sort_keys=True, default=str)


_CACHE: dict[tuple[str, int, int], AccuracyTable] = {}


def load_table(path: str | Path | None = None, field_name: str = "quality.table") -> AccuracyTable:
    """The table at ``path`` (default: the shipped one), validated; cached while unchanged."""
    p = Path(path) if path is not None else DEFAULT_TABLE
    try:
        st = p.stat()
    except OSError:
        raise BadInput(field_name, str(p), "no such file") from None
    if not p.is_file():
        raise BadInput(field_name, str(p), "expected a JSON file, not a directory")
    if st.st_size > MAX_TABLE_BYTES:
        raise BadInput(field_name, str(p), f"expected a table under {MAX_TABLE_BYTES >> 20} MiB")
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise BadInput(field_name, str(p), "expected a readable UTF-8 JSON file") from None
        _CACHE[key] = parse_table(text, str(p), field_name)
    return _CACHE[key]


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number")


def parse_table(text: str, path: str = "table", field_name: str = "quality.table") -> AccuracyTable:
    """Validate the JSON text of a table (see the module docstring)."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)  # NaN / Infinity: refused
    except (ValueError, RecursionError) as exc:
        raise BadInput(field_name, path, f"expected a JSON table ({str(exc)[:60]})") from None
    if not isinstance(data, dict):
        raise BadInput(field_name, path, "expected a JSON object with 'sources' and 'entries'")
    sources = data.get("sources")
    if not isinstance(sources, dict) or not sources or not all(
            isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("url", "licence"))
            for v in sources.values()):
        raise BadInput(f"{field_name} sources", sources, "expected a mapping of source name -> "
                       "{citation, url, licence}")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise BadInput(f"{field_name} entries", raw_entries, "expected a non-empty list")
    table = AccuracyTable(path=path, title=str(data.get("title", "")), sources=sources,
                          entries=[])
    names: set[str] = set()
    for i, raw in enumerate(raw_entries):
        entry = _entry(raw, f"{field_name} entries[{i}]", sources)
        if entry.name in names:
            raise BadInput(f"{field_name} entries[{i}].name", entry.name, "expected a name of "
                           "its own")
        names.add(entry.name)
        try:
            key = network_key(entry.model, entry.arch)
        except BadInput as exc:
            raise BadInput(f"{field_name} entries[{i}].{exc.field}", exc.value,
                           exc.allowed) from None
        if key in table._by_key:
            raise BadInput(f"{field_name} entries[{i}]", entry.name, "expected each network "
                           f"once (the same network as {table._by_key[key].name})")
        table._by_key[key] = entry
        table.entries.append(entry)
    return table


def _entry(raw: Any, where: str, sources: dict[str, Any]) -> Entry:
    if not isinstance(raw, dict):
        raise BadInput(where, raw, "expected {name, model, arch, top1_pct, source, confidence}")
    name, model, arch = raw.get("name"), raw.get("model"), raw.get("arch", {})
    if not isinstance(name, str) or not name:
        raise BadInput(f"{where}.name", name, "expected a non-empty string")
    if not isinstance(model, str):
        raise BadInput(f"{where}.model", model, "expected a zoo model name")
    if not isinstance(arch, dict):
        raise BadInput(f"{where}.arch", arch, "expected a mapping of architecture overrides")
    top1 = raw.get("top1_pct")
    if isinstance(top1, bool) or not isinstance(top1, (int, float)) or not math.isfinite(top1) \
            or not 0 < top1 <= 100:
        raise BadInput(f"{where}.top1_pct", top1, "expected a top-1 accuracy in (0, 100] %")
    source = raw.get("source")
    if source not in sources:
        raise BadInput(f"{where}.source", source, "expected one of the table's sources: "
                       + ", ".join(sources))
    confidence = raw.get("confidence")
    if confidence not in CONFIDENCE_TAGS:
        raise BadInput(f"{where}.confidence", confidence, "expected one of "
                       + ", ".join(CONFIDENCE_TAGS))
    counts = {}
    for k in ("published_params", "published_macs"):
        v = raw.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise BadInput(f"{where}.{k}", v, "expected a positive int or nothing")
        counts[k] = v
    unknown = set(raw) - {"name", "model", "arch", "top1_pct", "source", "confidence",
                          "published_params", "published_macs", "note"}
    if unknown:
        k = sorted(unknown)[0]
        raise BadInput(f"{where}.{k}", raw[k], "unknown key; expected name, model, arch, "
                       "top1_pct, source, confidence, published_params, published_macs, note")
    return Entry(name=name, model=model, arch=dict(arch), top1_pct=float(top1), source=source,
                 confidence=confidence, **counts)
