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
    "gna": "dse.reproduce.gna",
    "nasaic": "dse.reproduce.nasaic",
    "formats": "dse.reproduce.formats",
    "melange": "dse.reproduce.melange",
    "distserve": "dse.reproduce.distserve",
    "speculative": "dse.reproduce.speculative",
    "megatron": "dse.reproduce.megatron",
}


def reproduction_names() -> list[str]:
    return [n for n, m in _REPRODUCTIONS.items() if importlib.util.find_spec(m) is not None]


#: Reproductions whose GPU baseline takes ``gpu`` template overrides (``--gpu-hw``).
_GPU_HW = ("pim-gpt",)


def run_reproduction(name: str, gpu_hw: dict | None = None) -> list[Row]:
    """The rows of reproduction ``name``; ``gpu_hw`` overrides its GPU baseline's ``gpu``
    parameters (e.g. ``runtime: eager`` with a ``host_profile``) where it has one."""
    names = reproduction_names()
    if name not in names:
        raise BadInput("reproduction", name, "expected one of " + ", ".join(names))
    module = importlib.import_module(_REPRODUCTIONS[name])
    if gpu_hw:
        if name not in _GPU_HW:
            raise BadInput("--gpu-hw", gpu_hw, "GPU overrides apply to " + ", ".join(_GPU_HW))
        return module.rows(gpu_hw=gpu_hw)
    return module.rows()


__all__ = ["Row", "reproduction_names", "run_reproduction"]
