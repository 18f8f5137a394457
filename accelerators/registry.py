"""The template registry: adding a template is one file plus one line here."""

from __future__ import annotations

import importlib
import importlib.util

from accelerators.base import Template
from dse.errors import BadInput

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
    """Names of the templates whose module is present."""
    return [n for n, path in _TEMPLATES.items()
            if importlib.util.find_spec(path.split(":")[0]) is not None]


def get_template(name: str) -> type[Template]:
    """The template class called ``name``; :class:`BadInput` names the allowed ones."""
    names = template_names()
    if name not in names:
        raise BadInput("accelerator", name, "expected one of " + ", ".join(names))
    module, cls = _TEMPLATES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_accelerator(spec: str, hw: dict | None = None) -> Template:
    """Build a design from ``"template[:preset]"`` and parameter overrides."""
    name, _, preset = spec.partition(":")
    return get_template(name)(preset or None, **(hw or {}))
