"""The Python entry points, for notebooks and scripts.

>>> from dse import api
>>> w = api.workload("gpt2", phase="decode", batch=8, context=1024)
>>> r = api.simulate("gpt2", accelerator="npu", hw={"rows": 64}, phase="decode", context=512)
>>> r.latency_s, r.energy_j
>>> w = api.workload(module=my_module, inputs=(x,), dtype="fp16")   # your own nn.Module
>>> w.unknown_ops                                                    # ops costed by bytes only
>>> g = api.generate("llama2-7b", input_len=512, output_len=128, batch=8, accelerator="gpu:h200")
>>> s = api.serve("llama2-7b", accelerator="gpu:h200", trace="sharegpt", rate=10, requests=1000)
>>> sw = api.serve_sweep("llama2-7b", [5, 10, 20], accelerator="gpu:h200", requests=1000)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

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
    from simulators.generation import Generation
    from simulators.iteration_cost import Target
    from simulators.serving import RateSweep, ServingResult
    from simulators.training import TrainResult
    from accelerators.system import System
    from workloads.parallel import Layout


def workload(model: str | torch.nn.Module | None = None, phase: str | None = None,
             batch: int | None = None, seq: int | None = None, context: int | None = None,
             dtype: str = "bf16", arch: dict[str, Any] | None = None,
             hf_config: str | dict | None = None, module: torch.nn.Module | None = None,
             inputs: Any = None, kv_input: str = "kv_cache", strict: bool = False,
             kv_update: str | None = None, formats: "str | dict[str, str] | None" = None,
             media: dict[str, Any] | None = None, loss: Any = None) -> Workload:
    """Capture (or fetch from the cache) the workload of zoo ``model``, of a Hugging Face
    config (a config.json path or its dict; ``arch`` overrides its fields), or of your own
    ``module`` on ``inputs`` (a tuple of arguments, a dict of keyword arguments or a tensor;
    ``kv_input`` names the argument holding an LLM's KV cache; ``phase`` defaults to
    ``forward``; ``batch`` to the leading dimension of its first tensor input, the items a
    result's throughput counts). ``kv_update`` (``in_place`` | ``concat``) is how a decode step updates the KV
    cache; by default what the model does (zoo and own modules: ``in_place``, as a serving
    engine; Hugging Face: ``concat``, its default dynamic cache). ``w.summary()`` is what
    ``dse workload --json`` prints.

    Ops the capture cannot classify are listed in ``w.unknown_ops`` and warned about (their
    FLOPs are missing; they are costed by their bytes); ``strict=True`` raises instead.
    ``media`` (Hugging Face configs): ``{"image_size": px, "frames": n, "audio_seconds": s}``,
    the image and audio inputs of a multimodal model (``workloads/hf_inputs.py``).

    ``formats`` puts the workload's tensors in a number format per role
    (``"weights=int4_g128,activations=fp8_e4m3,kv=fp8_e4m3"`` or a dict; roles not given
    stay in ``dtype``; :mod:`workloads.formats`).

    ``phase="train"`` captures a training step's joint forward-backward graph
    (:mod:`workloads.training`; ``loss`` for your own module: ``cross_entropy``, ``mse``, a
    callable, or none when forward returns the loss).
    """
    _no_train_formats(phase, formats)
    if formats is not None:
        from workloads.formats import formatted
        return formatted(workload(model, phase, batch, seq, context, dtype, arch, hf_config,
                                  module, inputs, kv_input, strict, kv_update, media=media,
                                  loss=loss),
                         formats)
    if isinstance(model, torch.nn.Module):
        model, module = None, model
    if phase == "train":
        return check_unknown_ops(_train_workload(model, hf_config, module, inputs, loss, batch,
                                                 seq, dtype, arch), strict)
    if loss is not None:
        raise BadInput("loss", loss, "a loss only with phase=train")
    if module is not None:
        from workloads.user_module import capture_module
        w = capture_module(module, inputs, phase=phase or "forward", dtype=dtype,
                           kv_input=kv_input, batch=batch, seq=seq or 0,
                           context=context or 0,
                           kv_update="in_place" if kv_update is None else kv_update)
    elif hf_config:
        from workloads.hf import workload_from_hf_config
        w = workload_from_hf_config(hf_config, phase=phase, batch=batch, seq=seq,
                                    context=context, dtype=dtype, arch=arch,
                                    kv_update="concat" if kv_update is None
                                    else kv_update, media=media)
    elif model is None:
        raise BadInput("model", None, "a zoo model name, hf_config or module")
    else:
        w = build_workload(model, phase=phase, batch=batch, seq=seq, context=context,
                           dtype=dtype, arch=arch,
                           kv_update="in_place" if kv_update is None else kv_update)
    return check_unknown_ops(w, strict)


def _no_train_formats(phase: str | None, formats: Any, field: str = "formats") -> None:
    """:class:`BadInput` for number formats on a training step: the formats pass does not know
    a joint graph (its LM head feeds the loss, its weight-gradient GEMMs have no weight
    operand, its stored roles are the precision's), so they go through ``precision``."""
    if formats is not None and phase == "train":
        raise BadInput(field, formats, "no formats on a training step: its number formats "
                       "are its precision (api.train(precision='fp8' or 'mixed,gemm=nvfp4'), "
                       "dse train --precision)")


def _train_workload(model, hf_config, module, inputs, loss, batch, seq, dtype, arch) -> Workload:
    """The joint forward-backward graph of one micro-batch (:mod:`workloads.train_build`)."""
    from workloads import train_build
    if module is not None:
        return train_build.module_train_workload(module, inputs, loss=loss, dtype=dtype,
                                                 batch=batch or 1, seq=seq or 0)
    if loss is not None:
        raise BadInput("loss", loss, "a loss for your own module only (zoo models and Hugging "
                       "Face configs train with their task's loss)")
    if hf_config:
        return train_build.hf_train_workload(hf_config, batch=batch, seq=seq, dtype=dtype,
                                             arch=arch)
    if model is None:
        raise BadInput("model", None, "a zoo model name, hf_config or module")
    return train_build.zoo_train_workload(model, batch=batch, seq=seq, dtype=dtype, arch=arch)


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
             sys: dict[str, Any] | None = None,
             formats: "str | dict[str, str] | None" = None) -> Result:
    """Simulate a model (zoo name, captured :class:`Workload`, Hugging Face config or your own
    ``nn.Module`` with its ``inputs``) on a design (default ``npu``), or on a system of
    devices: ``system`` a preset name (``hgx-h200``, see :func:`systems`) or a
    :class:`~accelerators.system.System`, ``devices`` how many (default: as many as the layout
    uses), ``parallel`` the layout (``{"tp": 2, "pp": 1, "ep": 1, "dp": 1, "sp": False,
    "microbatches": 0, "ep_imbalance": 1.0}``), ``sys`` system parameter overrides;
    ``accelerator`` / ``hw`` then replace the preset's device. A system result is a
    :class:`~simulators.system_engine.SystemResult`. ``formats``: a number format per tensor
    role (see :func:`workload`).

    Zoo and config captures are cached, so many designs in one process pay them once.
    """
    w = model if isinstance(model, Workload) else workload(
        model, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype, arch=arch,
        hf_config=hf_config, inputs=inputs, kv_input=kv_input, kv_update=kv_update)
    if formats is not None:
        from workloads.formats import formatted
        _no_train_formats(w.phase, formats)
        w = formatted(w, formats)
    design, sysm, lay = _design_or_system(accelerator, hw, system, devices, parallel, sys)
    if design is not None:
        return _simulate(w, design)
    from simulators.system_engine import simulate_system
    return simulate_system(w, sysm, lay)


def _design_or_system(accelerator: str | Template | None, hw: dict[str, Any] | None,
                      system: "str | System | None", devices: int | None,
                      parallel: "dict[str, Any] | Layout | None", sys: dict[str, Any] | None
                      ) -> tuple:
    """``(design, None, None)`` when no system is asked for (as :func:`simulate` takes
    them), else ``(None, system, layout)``."""
    _check_devices(devices)
    if system is None and parallel is None and devices is None and not sys:
        return (accelerator if isinstance(accelerator, Template) else make_accelerator(
            "npu" if accelerator is None else accelerator, hw)), None, None
    from accelerators.system import System as _System
    from workloads.parallel import layout_from
    lay = layout_from(parallel)
    sysm = system if isinstance(system, _System) else make_system_for(
        system, devices or lay.devices, accelerator, hw, sys)
    return None, sysm, lay


def _check_devices(devices: Any) -> None:
    """``devices``, where given, a count of devices (never silently the default)."""
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or not 1 <= devices <= 65536):
        from dse.errors import BadInput
        raise BadInput("devices", devices, "expected an int in [1, 65536]")


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
    _check_devices(devices)
    n = devices or (SYSTEM_PRESETS[name]["devices"] if name in SYSTEM_PRESETS else 1)
    return make_system_for(name, n, accelerator, hw, sys)


_preset_system = system


def collective(kind: str, nbytes: float, system: str | "System" = "hgx-h200",
               devices: int | None = None, algorithm: str | None = None,
               group: list[int] | None = None, call: str = "device") -> "CollectiveCost":
    """The time, algorithm, protocol and bus bandwidth (nccl-tests' definition) of one
    collective of ``nbytes`` on ``devices`` devices of ``system``; ``call``: device time
    alone, or issued from PyTorch (``eager_b2b``, ``eager_call``, ``graph_b2b``,
    ``graph_call``) with the link's measured per-call latency."""
    from accelerators.system import System as _System
    from dse.errors import BadInput
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not nbytes > 0:
        raise BadInput("bytes", nbytes, "expected a message of more than 0 bytes")
    sysm = system if isinstance(system, _System) else _preset_system(system, devices)
    members = len(group) if group is not None else sysm.devices
    if members < 2:
        raise BadInput("group" if group is not None else "devices",
                       group if group is not None else members,
                       "expected at least 2 devices (a collective among one device moves "
                       "nothing)")
    return sysm.collective(kind, nbytes, group, algorithm, call=call)


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
          context: int | None, dtype: str, arch: tuple, formats: str | None = None
          ) -> StepCost:
    r = simulate(model, accelerator=accelerator, hw=dict(hw) or None, arch=dict(arch) or None,
                 phase=phase, batch=batch, seq=seq, context=context, dtype=dtype,
                 system=system_name, devices=devices, parallel=dict(parallel), sys=dict(sys),
                 formats=formats)
    tokens = batch if phase == "decode" else batch * (seq or 1)
    return StepCost(r.latency_s, r.energy_j, getattr(r, "communication_s", 0.0),
                    getattr(r, "fill_latency_s", r.latency_s), r.throughput, tokens)


def step(model: str, system: str | None = "hgx-h200", parallel: dict[str, Any] | None = None,
         phase: str = "decode", batch: int = 1, seq: int | None = None,
         context: int | None = None, dtype: str = "bf16", devices: int | None = None,
         accelerator: str | None = None, hw: dict[str, Any] | None = None,
         sys: dict[str, Any] | None = None, arch: dict[str, Any] | None = None,
         formats: "str | dict[str, str] | None" = None) -> StepCost:
    """The cost of one prefill or decode iteration of zoo ``model`` on a system (cached per
    distinct argument set): what a request-level serving loop asks for each step."""
    def key(d):
        return tuple(sorted((d or {}).items()))
    fkey = None
    if formats is not None:
        from workloads.formats import parse_formats
        fkey = parse_formats(formats, dtype).key()
    return _step(model, system, devices, accelerator, key(hw), key(sys), key(parallel), phase,
                 batch, seq, context, dtype, key(arch), fkey)


def _target(accelerator: str | Template | None, hw: dict[str, Any] | None,
            system: "str | System | None", devices: int | None,
            parallel: "dict[str, Any] | Layout | None", sys: dict[str, Any] | None,
            fidelity: str) -> "Target":
    """Where generation or serving iterations run: a design, or a system with a layout."""
    from simulators.iteration_cost import Target
    design, sysm, lay = _design_or_system(accelerator, hw, system, devices, parallel, sys)
    if design is not None:
        return Target(design=design, fidelity=fidelity)
    return Target(system=sysm, layout=lay, fidelity="event")


def _iteration_base(model: str | Workload, dtype: str, arch: dict[str, Any] | None,
                    formats: "str | dict[str, str] | None" = None) -> Workload:
    """The decode step of batch 1 every serving iteration is built from (its tensors in
    ``formats`` when given)."""
    if isinstance(model, Workload):
        if formats is None:
            return model
        from workloads.formats import formatted
        return formatted(model, formats)
    return workload(model, phase="decode", batch=1, context=1, dtype=dtype, arch=arch,
                    formats=formats)


#: Architecture keys that bound the tokens a sequence may hold (zoo, Hugging Face names).
POSITION_KEYS = ("max_seq", "max_position_embeddings", "n_positions")


def positions_of(base: Workload) -> int | None:
    """The tokens a sequence of ``base``'s model may hold, where its architecture says."""
    return next((v for k in POSITION_KEYS if isinstance(v := (base.arch or {}).get(k), int)
                 and not isinstance(v, bool) and v > 0), None)


def check_positions(base: Workload, tokens: int, field: str, what: str) -> None:
    """``tokens`` (a prompt and its output) within the positions ``base``'s model holds, where
    it declares them; one :class:`BadInput` naming ``field`` otherwise (checked before any
    cost model is fitted, so a too-long request costs nothing)."""
    from dse.errors import BadInput
    most = positions_of(base)
    if most is not None and tokens > most:
        raise BadInput(field, tokens, f"expected {what} of at most {most} tokens: "
                       f"{base.model} holds {most} positions")


def generate(model: str | Workload, input_len: int = 128, output_len: int = 128,
             batch: int = 1, accelerator: str | Template | None = None,
             hw: dict[str, Any] | None = None, arch: dict[str, Any] | None = None,
             dtype: str = "bf16", system: "str | System | None" = None,
             devices: int | None = None, parallel: "dict[str, Any] | Layout | None" = None,
             sys: dict[str, Any] | None = None, fidelity: str = "fast",
             exact: bool = False, formats: "str | dict[str, str] | None" = None
             ) -> "Generation":
    """Generate ``output_len`` tokens for ``batch`` prompts of ``input_len`` tokens of zoo
    ``model`` on a design (``accelerator``, ``hw``) or a system (as :func:`simulate`): TTFT,
    TPOT (mean and per step), end-to-end latency, tokens/s and energy per token
    (:class:`~simulators.generation.Generation`). A few decode steps are simulated and the
    rest interpolated (within 1 % of simulating each, tested); ``exact`` simulates every step.

    >>> g = api.generate("llama2-7b", input_len=2048, output_len=128, batch=8,
    ...                  accelerator="gpu:h200")
    >>> g.ttft_s, g.tpot_s, g.tokens_per_s
    """
    from simulators.generation import check_lengths, generate as _generate
    check_lengths(input_len, output_len, batch)
    base = _iteration_base(model, dtype, arch, formats)
    check_positions(base, input_len + output_len, "input_len + output_len",
                    "a prompt and its output")
    target = _target(accelerator, hw, system, devices, parallel, sys, fidelity)
    return _generate(base, target, input_len, output_len, batch, exact=exact)


def serve(model: str | Workload, trace: str = "sharegpt", rate: float | None = None,
          requests: int | None = None, duration_s: float | None = None,
          accelerator: str | Template | None = None, hw: dict[str, Any] | None = None,
          arch: dict[str, Any] | None = None, dtype: str = "bf16",
          system: "str | System | None" = None, devices: int | None = None,
          parallel: "dict[str, Any] | Layout | None" = None, sys: dict[str, Any] | None = None,
          scheduler: str = "continuous", max_batch: int = 256,
          token_budget: int | None = None, block_size: int = 16,
          memory_utilization: float | None = None, arrival: str = "poisson",
          burstiness: float = 1.0, seed: int = 0, slo_ttft_s: float | None = None,
          slo_tpot_s: float | None = None, fidelity: str = "fast",
          log_iterations: bool = False, formats: "str | dict[str, str] | None" = None,
          preemption: str = "recompute", router: str = "round_robin",
          swap_space_bytes: float | None = None,
          progress: "Callable[[int, int], None] | None" = None,
          economics: "dict[str, Any] | None" = None,
          decode_kv_step: int = 1) -> "ServingResult":
    """Serve a request trace with zoo ``model`` on a design or a system (as :func:`generate`):
    ``trace`` ``sharegpt`` / ``alpaca`` (lengths like those datasets, arrivals ``poisson`` or
    ``gamma`` with coefficient of variation ``burstiness`` at ``rate`` requests/s) or a CSV file
    (``arrival_s,input_len,output_len``); ``requests`` or ``duration_s`` bound it.
    ``scheduler``: ``continuous`` (vLLM, prefill first), ``chunked`` (Sarathi) or ``static``,
    with ``max_batch`` requests and ``token_budget`` tokens per iteration; a paged KV cache of
    ``block_size``-token blocks in what the design's memory holds beside the weights and
    activations at ``memory_utilization`` (vLLM's ``gpu_memory_utilization``, default 0.9);
    ``preemption`` ``recompute`` or ``swap`` (into ``swap_space_bytes`` of host memory per
    device, default vLLM's 4 GiB). On a system, ``parallel`` may set ``pp`` (pipelined
    batches) and ``dp`` (replicas behind a ``router``: ``round_robin`` or ``least_loaded``).
    Returns a :class:`~simulators.serving.ServingResult` (TTFT / TPOT / E2E percentiles,
    throughput, goodput under the SLOs, energy and cost per million tokens, KV occupancy,
    preemptions). ``economics`` sets the cost per token's parameters (``utilisation``,
    ``amortisation_years``, ``hardware_usd``, ``host_usd``, ``host_w``, ``pue``,
    ``usd_per_kwh``; :mod:`simulators.economics` gives their defaults and sources).
    ``decode_kv_step`` > 1 rounds decodes' mean KV length up to a multiple of it (a
    screening estimate, never below the exact: :func:`simulators.serving.simulate_serving`).

    >>> s = api.serve("llama2-7b", accelerator="gpu:h200", trace="sharegpt", rate=20,
    ...               requests=2000)
    >>> s.ttft_s["p99"], s.tpot_s["p99"], s.throughput_tok_s
    """
    from simulators.iteration_cost import MEMORY_UTILIZATION
    from simulators.schedulers import make_scheduler
    from simulators.serving import SWAP_SPACE_BYTES, check_serving_options, simulate_serving
    from workloads.traces import trace_from
    swap = SWAP_SPACE_BYTES if swap_space_bytes is None else swap_space_bytes
    check_serving_options(preemption, router, swap)
    if requests is None and duration_s is None and not (
            isinstance(trace, str) and trace.endswith(".csv")):
        requests = 1000
    base = _iteration_base(model, dtype, arch, formats)
    tr = trace_from(trace, rate, requests, duration_s, arrival, burstiness, seed,
                    max_tokens=positions_of(base))
    sched = make_scheduler(scheduler, max_batch, token_budget)
    longest = int((tr.input_len + tr.output_len).max())
    check_positions(base, longest, "trace", "requests (prompt and output)")
    target = _target(accelerator, hw, system, devices, parallel, sys, fidelity)
    cost = _cost_model(base, target, max(sched.token_budget, sched.max_batch, longest))
    r = simulate_serving(cost, tr, sched, block_size,
                         MEMORY_UTILIZATION if memory_utilization is None else memory_utilization,
                         slo_ttft_s, slo_tpot_s, economics=economics,
                         log_iterations=log_iterations, preemption=preemption, router=router,
                         swap_space_bytes=swap, progress=progress,
                         decode_kv_step=decode_kv_step)
    _keep_cost_model(cost)      # with the activations it sized
    return r


#: Arrival rates a sweep may hold, at most [E: a readable plot; each rate is one serving run].
MAX_RATES = 32


def check_rates(rates: Any, field: str = "rates") -> list[float]:
    """The arrival rates of a sweep, requests/s, ascending without repeats, from a list of
    numbers or a comma-separated string (``"5,10,20,40"``); one :class:`BadInput` line
    naming ``field`` unless each is a number in (0, 1e9] and there are 1 to
    :data:`MAX_RATES`."""
    allowed = (f"expected 1 to {MAX_RATES} comma-separated arrival rates > 0, requests/s, "
               "e.g. 5,10,20,40")
    items = rates.split(",") if isinstance(rates, str) else rates
    try:
        values = [float(x) for x in items if not isinstance(x, bool)]
        ok = len(values) == len(items)
    except (TypeError, ValueError):
        ok = False
    if not ok or not 1 <= len(values) <= MAX_RATES or not all(0 < v <= 1e9 for v in values):
        raise BadInput(field, rates, allowed)
    return sorted(set(values))


def serve_sweep(model: str | Workload, rates: Any, **kwargs: Any) -> "RateSweep":
    """Serve the same trace at each of ``rates`` (requests/s; see :func:`check_rates`) with
    everything else as :func:`serve` takes it (``rate`` excepted): the synthetic trace of one
    seed is the same requests with the gaps scaled by the rate, a CSV trace has its timestamps
    rescaled. The design's iteration cost model is fitted once. Returns a
    :class:`~simulators.serving.RateSweep` (throughput and tails against the rate).

    >>> sw = api.serve_sweep("llama2-7b", [5, 10, 20, 40], accelerator="gpu:h200",
    ...                      requests=1000)
    >>> [(row["rate_req_s"], row["throughput_tok_s"]) for row in sw.rows()]
    """
    from simulators.serving import RateSweep
    if "rate" in kwargs:
        raise BadInput("rate", kwargs["rate"], "expected rates only (a sweep sets the rate)")
    values = check_rates(rates)
    return RateSweep(values, [serve(model, rate=r, **kwargs) for r in values])


def _cost_model(base: Workload, target: "Target", max_tokens: int):
    """The iteration cost model of ``base`` on ``target``, its grid rounded up to whole
    tiles so nearby token limits share one, kept for the process (a study or a rate sweep
    fits each design once) and on disk (:mod:`simulators.cost_cache`: a fresh process reads
    the fit instead of redoing it)."""
    from simulators import cost_cache
    from simulators.iteration_cost import GRID_STEP, IterationCostModel, token_grid
    import json
    limit = max(-(-max_tokens // 1024) * 1024, GRID_STEP)
    key = (id(base), json.dumps(target.describe(), sort_keys=True, default=str),
           target.fidelity, limit)
    hit = _COST_MODELS.get(key)
    if hit is not None and hit[0] is base:
        return hit[1]
    disk_key = cost_cache.key(base, target, limit)
    fitted = cost_cache.load(disk_key, [float(x) for x in token_grid(limit)], target.stages)
    model = IterationCostModel(base, target, limit, fitted=fitted)
    model.cache_key = disk_key
    if fitted is None:
        _keep_cost_model(model)
    if len(_COST_MODELS) > 64:
        _COST_MODELS.clear()
    _COST_MODELS[key] = (base, model)
    return model


def _keep_cost_model(model) -> None:
    """Write ``model``'s fit to the disk cache when it holds something the file lacks."""
    from simulators import cost_cache
    held = model.held()
    if model.cache_key and model.stored != held:
        cost_cache.store(model.cache_key, model.fitted())
        model.stored = held


_COST_MODELS: dict[tuple, tuple] = {}


def train(model: str | Workload | torch.nn.Module | None = None, *,
          accelerator: str | Template | None = None, hw: dict[str, Any] | None = None,
          system: "str | System | None" = None, devices: int | None = None,
          sys: dict[str, Any] | None = None, parallel: dict[str, Any] | None = None,
          micro_batch: int | None = None, global_batch: int | None = None,
          seq: int | None = None, arch: dict[str, Any] | None = None,
          hf_config: str | dict | None = None, inputs: Any = None, loss: Any = None,
          precision: Any = "mixed", optimizer: str = "adamw", optimizer_impl: str = "fused",
          host: Any = None, accumulate: str = "add", train_tokens: float = 0.0,
          check: bool = True) -> "TrainResult":
    """One training step of a model (zoo name, captured train :class:`Workload`, Hugging Face
    config, or your own ``nn.Module`` with ``inputs`` and ``loss``) on a design
    (``accelerator``) or a system (``system`` preset / :class:`System`, ``devices``), split by
    ``parallel`` (``{"dp", "tp", "pp", "cp", "sp", "zero", "schedule", "chunks",
    "recompute", "bucket_mb", "offload_optimizer", "offload_params"}``; see
    :class:`workloads.train_parallel.TrainLayout`). ``micro_batch`` samples per micro-batch
    per replica (the captured batch), ``global_batch`` per step, ``precision`` a preset
    (``mixed``, ``mixed-fp32-grads``, ``amp``, ``bf16``, ``fp32``) or a mapping of roles,
    ``train_tokens`` the tokens :meth:`TrainResult.to_train` prices.

    >>> r = api.train("llama2-7b", system="dgx-h100", parallel={"dp": 4, "tp": 2},
    ...               micro_batch=1, global_batch=64, seq=2048, train_tokens=1e12)
    >>> r.step_time_s, r.mfu, r.memory[0], r.to_train()["time_days"]
    """
    from simulators.training import simulate_training
    from workloads.train_parallel import train_layout_from
    from workloads.train_step import precision_from
    if loss is not None and not isinstance(model, torch.nn.Module):
        raise BadInput("loss", loss, "a loss for your own module only (zoo models and Hugging "
                       "Face configs train with their task's loss)")
    if (isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float))
            or not 0 <= train_tokens < 1e30):
        raise BadInput("train_tokens", train_tokens, "expected a number of tokens in [0, 1e30) "
                       "(0: none)")
    prec = precision_from(precision)
    weights = prec.weights if prec.weights != prec.activations else None   # AMP
    lay_in = dict(parallel or {})
    if micro_batch is not None:
        lay_in["micro_batch"] = micro_batch
    if global_batch is not None:
        lay_in["global_batch"] = global_batch
    if isinstance(model, Workload):
        w = model
        lay_in.setdefault("micro_batch", w.batch)
    elif isinstance(model, str) and not hf_config:   # a zoo model: its first blocks captured
        from workloads.train_build import TEMPLATE_BLOCKS, zoo_train_workload
        lay_in.setdefault("micro_batch", 1)
        w = zoo_train_workload(model, batch=lay_in["micro_batch"], seq=seq,
                               dtype=prec.activations, arch=arch, blocks=TEMPLATE_BLOCKS,
                               weights=weights)
    elif hf_config:
        from workloads.train_build import hf_train_workload
        lay_in.setdefault("micro_batch", 1)
        w = check_unknown_ops(hf_train_workload(hf_config, batch=lay_in["micro_batch"], seq=seq,
                                                dtype=prec.activations, arch=arch,
                                                weights=weights))
    else:
        lay_in.setdefault("micro_batch", 1)
        w = workload(model, phase="train", batch=lay_in["micro_batch"], seq=seq,
                     dtype=prec.activations, arch=arch, inputs=inputs, loss=loss)
    lay = train_layout_from(lay_in)
    design, sysm, _ = _design_or_system(accelerator, hw, system, devices or (
        lay.devices if lay.devices > 1 else None), None, sys)
    return simulate_training(w, design if design is not None else sysm, lay, precision=prec,
                             optimizer=optimizer, optimizer_impl=optimizer_impl, host=host,
                             accumulate=accumulate, train_tokens=train_tokens, check=check)


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


# disaggregated pools, heterogeneous fleets, speculative decoding (docs/architecture.md,
# "Disaggregated pools, fleets and speculative decoding")
from dse.serving_api import fleet, serve_disaggregated, speculate  # noqa: E402,F401
