"""Seed-paper reproductions: each module has ``rows() -> list[Row]``.

Adding one is one module plus one line in ``_REPRODUCTIONS``.
"""

from __future__ import annotations

import importlib
import importlib.util

from dse.errors import BadInput
from dse.reproduce.table import Row

_REPRODUCTIONS = {
    "pim-gpt": "dse.reproduce.pim_gpt",
    "neupims": "dse.reproduce.neupims",
    "ngpc": "dse.reproduce.ngpc",
    "waferllm": "dse.reproduce.waferllm",
    "nasaic": "dse.reproduce.nasaic",
}


def reproduction_names() -> list[str]:
    return [n for n, m in _REPRODUCTIONS.items() if importlib.util.find_spec(m) is not None]


def run_reproduction(name: str) -> list[Row]:
    names = reproduction_names()
    if name not in names:
        raise BadInput("reproduction", name, "expected one of " + ", ".join(names))
    return importlib.import_module(_REPRODUCTIONS[name]).rows()


__all__ = ["Row", "reproduction_names", "run_reproduction"]
