"""The Python entry points, for notebooks and scripts.

>>> from dse import api
>>> w = api.workload("gpt2", phase="decode", batch=8, context=1024)
>>> r = api.simulate("gpt2", accelerator="npu", hw={"rows": 64}, phase="decode", context=512)
>>> r.latency_s, r.energy_j
>>> w = api.workload(module=my_module, inputs=(x,), dtype="fp16")   # your own nn.Module
>>> w.unknown_ops                                                    # ops costed by bytes only
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from accelerators.base import Template
from accelerators.registry import get_template, make_accelerator, template_names
from dse.errors import BadInput, CaptureError
from simulators.engine import simulate as _simulate
from simulators.result import Result
from workloads.build import build_workload
from workloads.ir import Workload
from workloads.zoo import get_model, model_names


def workload(model: str | torch.nn.Module | None = None, phase: str | None = None,
             batch: int | None = None, seq: int | None = None, context: int | None = None,
             dtype: str = "bf16", arch: dict[str, Any] | None = None,
             hf_config: str | dict | None = None, module: torch.nn.Module | None = None,
             inputs: Any = None, kv_input: str = "kv_cache", strict: bool = False,
             kv_update: str | None = None) -> Workload:
    """Capture (or fetch from the cache) the workload of zoo ``model``, of a Hugging Face
    config (a config.json path or its dict; ``arch`` overrides its fields), or of your own
    ``module`` on ``inputs`` (a tuple of arguments, a dict of keyword arguments or a tensor;
    ``kv_input`` names the argument holding an LLM's KV cache; ``phase`` defaults to
    ``forward``). ``kv_update`` (``in_place`` | ``concat``) is how a decode step updates the KV
    cache; by default what the model does (zoo and own modules: ``in_place``, as a serving
    engine; Hugging Face: ``concat``, its default dynamic cache). ``w.summary()`` is what
    ``dse workload --json`` prints.

    Ops the capture cannot classify are listed in ``w.unknown_ops`` and warned about (their
    FLOPs are missing; they are costed by their bytes); ``strict=True`` raises instead.
    """
    if isinstance(model, torch.nn.Module):
        model, module = None, model
    if module is not None:
        from workloads.user_module import capture_module
        w = capture_module(module, inputs, phase=phase or "forward", dtype=dtype,
                           kv_input=kv_input, batch=batch or 1, seq=seq or 0,
                           context=context or 0, kv_update=kv_update or "in_place")
    elif hf_config:
        from workloads.hf import workload_from_hf_config
        w = workload_from_hf_config(hf_config, phase=phase, batch=batch, seq=seq,
                                    context=context, dtype=dtype, arch=arch,
                                    kv_update=kv_update or "concat")
    elif model is None:
        raise BadInput("model", None, "a zoo model name, hf_config or module")
    else:
        w = build_workload(model, phase=phase, batch=batch, seq=seq, context=context,
                           dtype=dtype, arch=arch, kv_update=kv_update or "in_place")
    return check_unknown_ops(w, strict)


def check_unknown_ops(w: Workload, strict: bool = False) -> Workload:
    """``w``, after warning about its unknown ops (or, ``strict``, refusing them)."""
    if w.unknown_ops:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(w.unknown_ops.items()))
        if strict:
            raise CaptureError(f"unknown ops (their FLOPs would be missing): {listed}")
        warnings.warn(f"{w.model}: unknown ops, costed by their bytes only: {listed}",
                      stacklevel=3)
    return w


def accelerator(spec: str = "npu", hw: dict[str, Any] | None = None) -> Template:
    """A design from ``"template[:preset]"`` and parameter overrides."""
    return make_accelerator(spec, hw)


def simulate(model: str | Workload | torch.nn.Module | None = None,
             accelerator: str | Template = "npu", hw: dict[str, Any] | None = None,
             arch: dict[str, Any] | None = None, phase: str | None = None,
             batch: int | None = None, seq: int | None = None, context: int | None = None,
             dtype: str = "bf16", hf_config: str | dict | None = None, inputs: Any = None,
             kv_input: str = "kv_cache", kv_update: str | None = None) -> Result:
    """Simulate a model (zoo name, captured :class:`Workload`, Hugging Face config or your own
    ``nn.Module`` with its ``inputs``) on a design.

    Zoo and config captures are cached, so many designs in one process pay them once.
    """
    w = model if isinstance(model, Workload) else workload(
        model, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype, arch=arch,
        hf_config=hf_config, inputs=inputs, kv_input=kv_input,
        kv_update=kv_update)
    design = accelerator if isinstance(accelerator, Template) else make_accelerator(accelerator, hw)
    return _simulate(w, design)


def models() -> list[dict[str, Any]]:
    """The zoo: each model's family, phases and architecture parameters with defaults."""
    out = []
    for name in model_names():
        spec = get_model(name)
        out.append({"name": name, "family": spec.family, "description": spec.description,
                    "phases": list(spec.phases), "arch": dict(spec.arch),
                    "published_params": spec.published_params,
                    "published_active_params": spec.published_active_params})
    return out


def accelerators() -> list[dict[str, Any]]:
    """Templates with their presets and parameters (units, defaults, ranges); ``defaults``
    holds the values a design gets with no preset or value given (the default preset's)."""
    out = []
    for name in template_names():
        try:
            cls = get_template(name)
        except BadInput as exc:  # another package's template that does not load
            out.append({"name": name, "error": str(exc)})
            continue
        defaults = {p.name: p.default for p in cls.PARAMS}
        defaults.update(cls.PRESETS.get(cls.DEFAULT_PRESET) or {})
        out.append({"name": name, "description": cls.description,
                    "default_preset": cls.DEFAULT_PRESET,
                    "presets": {k: dict(v) for k, v in cls.PRESETS.items()},
                    "defaults": defaults,  # what runs when no preset or value is given
                    "params": [p.to_dict() for p in cls.PARAMS]})
    return out
