"""The Python entry points, for notebooks and scripts.

>>> from dse import api
>>> w = api.workload("gpt2", phase="decode", batch=8, context=1024)
>>> r = api.simulate("gpt2", accelerator="npu", hw={"rows": 64}, phase="decode", context=512)
>>> r.latency_s, r.energy_j
"""

from __future__ import annotations

from typing import Any

from accelerators.base import Template
from accelerators.registry import get_template, make_accelerator, template_names
from dse.errors import BadInput
from simulators.engine import simulate as _simulate
from simulators.result import Result
from workloads.build import build_workload
from workloads.ir import Workload
from workloads.zoo import get_model, model_names


def workload(model: str, phase: str | None = None, batch: int | None = None,
             seq: int | None = None, context: int | None = None, dtype: str = "bf16",
             arch: dict[str, Any] | None = None, hf_config: str | None = None,
             kv_update: str | None = None) -> Workload:
    """Capture (or fetch from the cache) the workload of zoo ``model`` or of a Hugging Face
    config file. ``kv_update`` (``in_place`` | ``concat``) is how a decode step updates the KV
    cache; by default what the model does (zoo: ``in_place``, as a serving engine; Hugging
    Face: ``concat``, its default dynamic cache). ``w.summary()`` is what ``dse workload
    --json`` prints."""
    if hf_config:
        from workloads.hf import workload_from_hf_config
        return workload_from_hf_config(hf_config, phase=phase, batch=batch, seq=seq,
                                       context=context, dtype=dtype,
                                       kv_update=kv_update or "concat")
    return build_workload(model, phase=phase, batch=batch, seq=seq, context=context,
                          dtype=dtype, arch=arch, kv_update=kv_update or "in_place")


def accelerator(spec: str = "npu", hw: dict[str, Any] | None = None) -> Template:
    """A design from ``"template[:preset]"`` and parameter overrides."""
    return make_accelerator(spec, hw)


def simulate(model: str | Workload, accelerator: str | Template = "npu",
             hw: dict[str, Any] | None = None, arch: dict[str, Any] | None = None,
             phase: str | None = None, batch: int | None = None, seq: int | None = None,
             context: int | None = None, dtype: str = "bf16",
             hf_config: str | None = None, kv_update: str | None = None) -> Result:
    """Simulate a model (zoo name or captured :class:`Workload`) on a design.

    The capture is cached, so many designs in one process pay it once.
    """
    w = model if isinstance(model, Workload) else workload(
        model, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype, arch=arch,
        hf_config=hf_config, kv_update=kv_update)
    design = accelerator if isinstance(accelerator, Template) else make_accelerator(accelerator, hw)
    return _simulate(w, design)


def models() -> list[dict[str, Any]]:
    """The zoo: each model's family, phases and architecture parameters with defaults."""
    out = []
    for name in model_names():
        spec = get_model(name)
        out.append({"name": name, "family": spec.family, "description": spec.description,
                    "phases": list(spec.phases), "arch": dict(spec.arch),
                    "published_params": spec.published_params})
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
