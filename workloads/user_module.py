"""A user's own ``nn.Module`` as a workload: capture it on given inputs, or load it from a
``package.module:factory`` spec (``dse workload --module``).

A factory is a function of no arguments returning ``(module, inputs)`` — ``inputs`` a tuple of
positional arguments, a dict of keyword arguments or one tensor — or ``(module, args,
kwargs)``. Build the module under ``torch.device("meta")`` and make meta inputs to capture a
large model without allocating it. For an LLM decode step, pass the KV cache as the forward
argument named ``kv_cache`` (or name yours with ``kv_input``): tensors reached from it are KV
cache (see ``workloads/capture.py``).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Any

import torch

from dse.errors import BadInput, CaptureError
from workloads import ir
from workloads.capture import KV_INPUT_NAME, capture


def split_inputs(inputs: Any, kwargs: dict | None = None) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of ``inputs``: a tuple or list of positional arguments, a dict of
    keyword arguments, or a single tensor."""
    kwargs = dict(kwargs or {})
    if inputs is None:
        return (), kwargs
    if isinstance(inputs, dict):
        return (), {**inputs, **kwargs}
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), kwargs
    if isinstance(inputs, torch.Tensor):
        return (inputs,), kwargs
    raise BadInput("inputs", type(inputs).__name__, "a tuple of arguments, a dict of keyword "
                   "arguments or a tensor")


def capture_module(module: torch.nn.Module, inputs: Any = None, kwargs: dict | None = None,
                   phase: str = "forward", dtype: str = "bf16", model: str | None = None,
                   kv_input: str | tuple[str, ...] = KV_INPUT_NAME, causal: bool = False,
                   batch: int = 1, seq: int = 0, context: int = 0,
                   kv_update: str = "in_place") -> ir.Workload:
    """The workload of ``module`` on ``inputs`` (not cached: a module is not a stable key);
    ``kv_update`` as :func:`workloads.capture.capture`."""
    if not isinstance(module, torch.nn.Module):
        raise BadInput("module", type(module).__name__, "a torch.nn.Module")
    args, kw = split_inputs(inputs, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(module, args, kw, model=model or type(module).__name__, phase=phase,
                       dtype=dtype, batch=batch, seq=seq, context=context, kv_input=kv_input,
                       causal=causal, kv_update=kv_update)


def load_factory(spec: str) -> tuple[torch.nn.Module, tuple, dict]:
    """Import ``package.module:function`` and call it: ``(module, args, kwargs)``. The current
    directory is searched *after* the installed packages (appended to ``sys.path``), so a file
    there named like a library (``plotly.py``, ``torch.py``) never shadows it (docs/study.md,
    the trust model)."""
    path, sep, name = str(spec).partition(":")
    if not sep or not path or not name.isidentifier():
        raise BadInput("--module", spec, "expected package.module:function")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        mod = importlib.import_module(path)
    except SystemExit as exc:
        raise BadInput("--module", spec, f"a module that imports without exiting (it called "
                       f"sys.exit({exc.code!r}))") from None
    except Exception as exc:  # the user's import failed: one line, not their traceback
        raise BadInput("--module", spec, f"an importable module ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise BadInput("--module", spec, f"a function {name} in {path}")
    try:
        made = factory()
    except SystemExit as exc:
        raise CaptureError(f"--module {spec}: the factory called sys.exit({exc.code!r}); it "
                           "must return (nn.Module, inputs) or raise") from None
    except Exception as exc:
        raise CaptureError(f"--module {spec}: the factory raised {type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0]}") from None
    if not (isinstance(made, tuple) and len(made) in (2, 3) and isinstance(made[0], torch.nn.Module)):
        raise BadInput("--module", spec, "a function returning (nn.Module, inputs) or "
                       "(nn.Module, args, kwargs)")
    args, kwargs = split_inputs(made[1], made[2] if len(made) == 3 else None)
    return made[0], args, kwargs
