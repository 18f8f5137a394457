"""The template registry: adding a template is one file plus one line here, or, without
editing this package, an entry point in the group ``accel_dse.templates`` of another installed
package (``NAME = "module:Class"``; docs/templates.md). A built-in name wins over an entry
point of the same name; entry points are read once per process (:func:`refresh` rereads).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from functools import lru_cache

from accelerators.base import Template
from dse.errors import BadInput, DSEError, first_line

#: Entry-point group through which other installed packages add templates.
ENTRY_POINT_GROUP = "accel_dse.templates"

#: template name -> "module:Class". Listed only once the module exists.
_TEMPLATES = {
    "npu": "accelerators.npu:NPU",
    "gpu": "accelerators.gpu:GPU",
    "pim": "accelerators.pim:PIM",
    "npu_pim": "accelerators.npu_pim:NeuPIMs",
    "neural_graphics": "accelerators.neural_graphics:NGPC",
    "wafer": "accelerators.wafer:Wafer",
}


def template_names() -> list[str]:
    """Names of the templates whose module is present, then those of entry points."""
    return [n for n, path in _TEMPLATES.items()
            if importlib.util.find_spec(path.split(":")[0]) is not None] + list(_plugins())


@lru_cache(maxsize=1)
def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points of the group, by name (built-in names excluded)."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name)
            if ep.name not in _TEMPLATES}


@lru_cache(maxsize=None)
def _load_plugin(name: str) -> type[Template]:
    ep = _plugins()[name]
    where = f"entry point {name} = {ep.value}"
    try:
        cls = ep.load()
    except Exception as exc:  # the other package's import failed
        raise BadInput("accelerator", name, f"a template that loads ({where}: "
                       f"{type(exc).__name__}: {first_line(exc)})") from None
    if not (isinstance(cls, type) and issubclass(cls, Template)):
        raise BadInput("accelerator", name, f"a Template subclass ({where} is not one)")
    if getattr(cls, "name", None) != name:
        raise BadInput("accelerator", name, f"a template named as its entry point ({where} "
                       f"is named {getattr(cls, 'name', None)!r})")
    return cls


def refresh() -> None:
    """Forget the entry points read so far (after installing a package in this process)."""
    _plugins.cache_clear()
    _load_plugin.cache_clear()


def get_template(name: str) -> type[Template]:
    """The template class called ``name``; :class:`BadInput` names the allowed ones."""
    if isinstance(name, str) and name in _TEMPLATES and importlib.util.find_spec(
            _TEMPLATES[name].split(":")[0]):
        module, cls = _TEMPLATES[name].split(":")
        return getattr(importlib.import_module(module), cls)
    if isinstance(name, str) and name in _plugins():
        return _load_plugin(name)
    raise BadInput("accelerator", name, "expected one of " + ", ".join(template_names()))


def make_accelerator(spec: str, hw: dict | None = None) -> Template:
    """Build a design from ``"template[:preset]"`` and parameter overrides. A plugin
    template's own failure (anything but this project's errors) is one :class:`BadInput`
    naming the plugin."""
    if not isinstance(spec, str) or not spec.strip() or spec.endswith(":"):
        raise BadInput("accelerator", spec, "expected TEMPLATE or TEMPLATE:PRESET, e.g. npu or "
                       "gpu:h200 (" + ", ".join(template_names()) + ")")
    name, _, preset = spec.partition(":")
    cls = get_template(name)
    if name in _TEMPLATES:
        return cls(preset or None, **(hw or {}))
    try:
        return cls(preset or None, **(hw or {}))
    except DSEError:
        raise
    except Exception as exc:   # the plugin's own code
        raise BadInput("accelerator", spec, f"a plugin template that builds "
                       f"({cls.__module__}.{cls.__qualname__}: {type(exc).__name__}: "
                       f"{first_line(exc)})") from None
