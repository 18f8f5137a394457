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
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch

from accelerators.base import Template
from accelerators.registry import get_template, make_accelerator, template_names
from dse.errors import BadInput, CaptureError
from simulators.engine import simulate as _simulate
from simulators.result import Result
from workloads.build import build_workload
from workloads.ir import Workload
from workloads.zoo import get_model, model_names

if TYPE_CHECKING:
    from accelerators.collectives import CollectiveCost
    from accelerators.system import System
    from workloads.parallel import Layout


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
             accelerator: str | Template | None = None, hw: dict[str, Any] | None = None,
             arch: dict[str, Any] | None = None, phase: str | None = None,
             batch: int | None = None, seq: int | None = None, context: int | None = None,
             dtype: str = "bf16", hf_config: str | dict | None = None, inputs: Any = None,
             kv_input: str = "kv_cache", kv_update: str | None = None,
             system: "str | System | None" = None,
             devices: int | None = None, parallel: "dict[str, Any] | Layout | None" = None,
             sys: dict[str, Any] | None = None) -> Result:
    """Simulate a model (zoo name, captured :class:`Workload`, Hugging Face config or your own
    ``nn.Module`` with its ``inputs``) on a design (default ``npu``), or on a system of
    devices: ``system`` a preset name (``hgx-h200``, see :func:`systems`) or a
    :class:`~accelerators.system.System`, ``devices`` how many (default: as many as the layout
    uses), ``parallel`` the layout (``{"tp": 2, "pp": 1, "ep": 1, "dp": 1, "sp": False,
    "microbatches": 0, "ep_imbalance": 1.0}``), ``sys`` system parameter overrides;
    ``accelerator`` / ``hw`` then replace the preset's device. A system result is a
    :class:`~simulators.system_engine.SystemResult`.

    Zoo and config captures are cached, so many designs in one process pay them once.
    """
    w = model if isinstance(model, Workload) else workload(
        model, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype, arch=arch,
        hf_config=hf_config, inputs=inputs, kv_input=kv_input, kv_update=kv_update)
    if system is None and parallel is None and devices is None and not sys:
        design = accelerator if isinstance(accelerator, Template) else make_accelerator(
            accelerator or "npu", hw)
        return _simulate(w, design)
    from accelerators.system import System as _System
    from simulators.system_engine import simulate_system
    from workloads.parallel import layout_from
    lay = layout_from(parallel)
    sysm = system if isinstance(system, _System) else make_system_for(
        system, devices or lay.devices, accelerator, hw, sys)
    return simulate_system(w, sysm, lay)


def make_system_for(system: str | None, devices: int, accelerator: str | Template | None = None,
                    hw: dict[str, Any] | None = None, sys: dict[str, Any] | None = None
                    ) -> "System":
    """A system of ``devices`` from a preset (default: switch-connected devices of
    ``accelerator``) with ``accelerator`` / ``hw`` replacing its device and ``sys`` its
    parameters."""
    from accelerators.system import SYSTEM_PRESETS, System as _System
    from dse.errors import BadInput
    if system is not None and system not in SYSTEM_PRESETS:
        raise BadInput("system", system, "expected one of " + ", ".join(sorted(SYSTEM_PRESETS)))
    device = None
    if accelerator is not None or hw:
        if isinstance(accelerator, Template):
            device = accelerator
        else:
            spec = accelerator or (SYSTEM_PRESETS[system]["device"] if system else "npu")
            base = dict(SYSTEM_PRESETS[system].get("device_hw") or {}) if (
                system and accelerator is None) else {}
            device = make_accelerator(spec, {**base, **(hw or {})})
    elif system is None:
        device = make_accelerator("npu")
    return _System(device, system, **{"devices": devices, **(sys or {})})


def system(name: str | None = None, devices: int | None = None,
           accelerator: str | Template | None = None, hw: dict[str, Any] | None = None,
           sys: dict[str, Any] | None = None) -> "System":
    """A system from a preset ``name`` (see :func:`systems`) with ``devices`` devices (default:
    the preset's), its device replaced by ``accelerator`` / ``hw``, ``sys`` parameter
    overrides."""
    from accelerators.system import SYSTEM_PRESETS
    n = devices or (SYSTEM_PRESETS[name]["devices"] if name in SYSTEM_PRESETS else 1)
    return make_system_for(name, n, accelerator, hw, sys)


_preset_system = system


def collective(kind: str, nbytes: float, system: str | "System" = "hgx-h200",
               devices: int | None = None, algorithm: str | None = None,
               group: list[int] | None = None) -> "CollectiveCost":
    """The time, algorithm, protocol and bus bandwidth (nccl-tests' definition) of one
    collective of ``nbytes`` on ``devices`` devices of ``system``."""
    from accelerators.system import System as _System
    sysm = system if isinstance(system, _System) else _preset_system(system, devices)
    return sysm.collective(kind, nbytes, group, algorithm)


def systems() -> list[dict[str, Any]]:
    """System presets: description, device, parameters, and the system's cost and power."""
    from accelerators.system import DESCRIPTIONS, SYSTEM_PRESETS, make_system
    out = []
    for name in sorted(SYSTEM_PRESETS):
        spec = SYSTEM_PRESETS[name]
        sysm = make_system(name)
        phys = sysm.physical()
        out.append({"name": name, "description": DESCRIPTIONS.get(name, ""),
                    "device": spec["device"], "device_hw": spec.get("device_hw") or {},
                    "sys": dict(sysm.hw), "topology": sysm.topology.describe(),
                    **phys.to_dict()})
    return out


@dataclass(frozen=True)
class StepCost:
    """One iteration (a prefill of the batch, or one decode step) of a model on a system:
    ``latency_s`` (per token of each sequence in steady state for a decode pipeline),
    ``energy_j``, ``communication_s``, ``fill_latency_s`` (from an empty pipeline),
    ``throughput`` (tokens/s), ``tokens`` the step makes or reads."""

    latency_s: float
    energy_j: float
    communication_s: float
    fill_latency_s: float
    throughput: float
    tokens: int


@lru_cache(maxsize=4096)
def _step(model: str, system_name: str | None, devices: int | None, accelerator: str | None,
          hw: tuple, sys: tuple, parallel: tuple, phase: str, batch: int, seq: int | None,
          context: int | None, dtype: str, arch: tuple) -> StepCost:
    r = simulate(model, accelerator=accelerator, hw=dict(hw) or None, arch=dict(arch) or None,
                 phase=phase, batch=batch, seq=seq, context=context, dtype=dtype,
                 system=system_name, devices=devices, parallel=dict(parallel), sys=dict(sys))
    tokens = batch if phase == "decode" else batch * (seq or 1)
    return StepCost(r.latency_s, r.energy_j, getattr(r, "communication_s", 0.0),
                    getattr(r, "fill_latency_s", r.latency_s), r.throughput, tokens)


def step(model: str, system: str | None = "hgx-h200", parallel: dict[str, Any] | None = None,
         phase: str = "decode", batch: int = 1, seq: int | None = None,
         context: int | None = None, dtype: str = "bf16", devices: int | None = None,
         accelerator: str | None = None, hw: dict[str, Any] | None = None,
         sys: dict[str, Any] | None = None, arch: dict[str, Any] | None = None) -> StepCost:
    """The cost of one prefill or decode iteration of zoo ``model`` on a system (cached per
    distinct argument set): what a request-level serving loop asks for each step."""
    def key(d):
        return tuple(sorted((d or {}).items()))
    return _step(model, system, devices, accelerator, key(hw), key(sys), key(parallel), phase,
                 batch, seq, context, dtype, key(arch))


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
