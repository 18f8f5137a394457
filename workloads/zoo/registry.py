"""The model zoo's registry: each model is a :class:`ModelSpec` (data) whose ``build`` makes a
plain-torch module from architecture parameters, and whose ``inputs`` makes example inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dse.errors import BadInput
from workloads.limits import int_limit

#: Model families. ``llm`` models support phases prefill and decode; the rest run ``forward``.
FAMILIES = ("llm", "encoder", "vision", "neural_field", "micro")

#: Bounds of architecture ints by key, for every model that declares none of its own
#: (``ModelSpec.arch_ranges``); any other int is bounded by :func:`workloads.limits.int_limit`.
#: A small MLP or a ResNet stage has at most 64 layers [E]; a hash-grid table has at most
#: 2**32 rows (workloads/hashgrid_op.py) [R].
DEFAULT_ARCH_RANGES: dict[str, tuple[int, int]] = {
    "n_hidden_layers": (1, 64), "color_hidden_layers": (1, 64),
    "blocks1": (1, 64), "blocks2": (1, 64), "blocks3": (1, 64), "blocks4": (1, 64),
    "levels": (1, 64), "log2_table_size": (1, 32)}


@dataclass(frozen=True)
class SizeRule:
    """How a model's tensor sizes follow from its architecture, for :mod:`workloads.reshape`
    (other architectures without re-capture).

    ``depth``: the arch key that repeats one block (``n_layer``), None for a model without
    one. ``variables(arch, phase, batch, seq, context)``: the size variables, ints whose
    products (times a constant, plus a small offset) every tensor dimension is, or None where
    the rule does not apply or the model would refuse the sizes (the builder then captures,
    which says why). ``point(variables, phase, arch)``: the inverse, as arch overrides, batch,
    seq and context (``arch``: the architecture whose fixed keys stay)."""

    depth: str | None
    variables: Callable[[dict[str, Any], str, int, int, int], dict[str, int] | None]
    point: Callable[[dict[str, int], str, dict[str, Any]], tuple[dict[str, Any], int, int, int]]


@dataclass(frozen=True)
class ModelSpec:
    """A zoo model.

    ``arch``: architecture parameters and their defaults (the keys a search may change; ints,
    floats, bools or strings). ``build(arch) -> nn.Module`` gets every key of ``arch``.
    ``inputs(arch, phase, batch, seq, context) -> (args, kwargs)`` makes example inputs on the
    current default device (the capture calls it under ``torch.device("meta")``). LLMs take
    ``forward(input_ids, kv_cache=None)``: in decode, ``kv_cache`` is a list of (k, v) per layer,
    each [batch, kv_heads, context, head_dim]; the capture treats every tensor under the
    ``kv_cache`` argument as KV cache. ``arch_choices`` optionally lists allowed values.
    """

    name: str
    family: str
    description: str
    arch: dict[str, Any]
    build: Callable[[dict[str, Any]], torch.nn.Module]
    inputs: Callable[..., tuple[tuple, dict]]
    phases: tuple[str, ...] = ("forward",)
    arch_choices: dict[str, tuple] = field(default_factory=dict)
    published_params: int | None = None
    arch_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)

    def arch_range(self, key: str) -> tuple[int, int] | None:
        """The declared (low, high) of int key ``key`` (``arch_ranges``, else
        :data:`DEFAULT_ARCH_RANGES`), or None: a search must then give the range."""
        return self.arch_ranges.get(key) or DEFAULT_ARCH_RANGES.get(key)

    def arch_bounds(self, key: str) -> tuple[int, int]:
        """What int key ``key`` may be: its declared range, else from ``arch_min`` (1) to
        :func:`workloads.limits.int_limit`."""
        return self.arch_range(key) or (int(self.arch_min.get(key, 1)), int_limit(key))
    #: Parameters one token uses (mixture-of-experts models), as published.
    published_active_params: int | None = None
    #: Smallest allowed value of a number whose default allows zero (e.g. capacity_factor 0).
    arch_min: dict[str, float] = field(default_factory=dict)
    #: How its sizes vary, where other architectures can be built without re-capture.
    sizes: SizeRule | None = None
    #: Per-key checks of a value's own form (``check(value, field)`` raises
    #: :class:`BadInput`), run whenever a value is set, so a study refuses it at load as the
    #: capture would (e.g. GNA's ``window: "80x80"``); combinations are left to the capture.
    arch_checks: dict[str, Callable[[Any, str], Any]] = field(default_factory=dict)

    def resolve_arch(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        """Defaults updated by ``overrides``, each coerced to its default's type; unknown keys and
        non-positive numbers raise :class:`BadInput` (a zero listed in ``arch_choices`` is
        allowed, for keys such as a convolution's padding; ``arch_min`` lowers the bound), and
        so do integers above ``workloads.limits.int_limit``."""
        arch = dict(self.arch)
        for key, value in (overrides or {}).items():
            if key not in arch:
                raise BadInput(f"arch.{key}", value,
                               f"{self.name} architecture keys are " + ", ".join(arch))
            arch[key] = _coerce_once(self, key, value)
        return arch


_KIND = {bool: "true or false", int: "an int", float: "a number", str: "a string"}
#: :func:`_coerce` results by (spec id, key, type, value), each kept with its spec (a
#: population resolves thousands of architectures drawn from a few values per key).
_COERCED: dict[tuple, tuple[Any, Any]] = {}


def _coerce_once(spec: ModelSpec, key: str, value: Any) -> Any:
    """:func:`_coerce`, remembered for plain values (0.0 and -0.0 apart; errors not kept)."""
    t = type(value)
    if t not in (int, float, str, bool):
        return _coerce(spec, key, value)
    k = (id(spec), key, t, value if t is not float or value else repr(value))
    hit = _COERCED.get(k)
    if hit is not None and hit[0] is spec:
        return hit[1]
    out = _coerce(spec, key, value)
    if len(_COERCED) > 1 << 16:
        _COERCED.clear()
    _COERCED[k] = (spec, out)
    return out


def _coerce(spec: ModelSpec, key: str, value: Any) -> Any:
    default = spec.arch[key]
    field_name = f"arch.{key}"
    choices = spec.arch_choices.get(key)
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                value = value.lower() in ("true", "1")
            elif not isinstance(value, bool):
                raise ValueError
        elif isinstance(default, int):
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, str):   # typed text: an integer literal only ("1e2" is not)
                if not value.strip().lstrip("+-").isdigit():
                    raise ValueError
                value = int(value)  # exact, however long
            if not isinstance(value, int):
                f = float(value)
                if f != int(f) or abs(f) > 2**53:  # beyond 2**53 a float is not one int
                    raise ValueError
                value = int(f)
            # A value listed in ``arch_choices`` is allowed even when zero (e.g. padding 0).
            low = spec.arch_min.get(key, 1)
            if value < low and not (choices is not None and value in choices):
                raise BadInput(field_name, value, "expected a positive int" if low == 1
                               else f"expected an int >= {low:g}")
            high = spec.arch_bounds(key)[1]
            if value > high and not (choices is not None and value in choices):
                raise BadInput(field_name, value, f"expected an int in [{low:g}, {high}]")
        elif isinstance(default, float):
            value = float(value)
            low = spec.arch_min.get(key)
            if not math.isfinite(value) or (low is None and not value > 0
                                             and not (choices is not None and value in choices)):
                raise BadInput(field_name, value, "expected a positive number")
            if low is not None and value < low:
                raise BadInput(field_name, value, f"expected a number >= {low:g}")
        else:
            value = str(value)
    except BadInput:
        raise
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        raise BadInput(field_name, value, "expected " + _KIND.get(type(default), "a string")
                       ) from None
    if choices is not None and value not in choices:
        raise BadInput(field_name, value, "expected one of " + ", ".join(map(str, choices)))
    check = spec.arch_checks.get(key)
    if check is not None:
        check(value, field_name)
    return value


_MODELS: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    if spec.family not in FAMILIES:
        raise ValueError(f"family {spec.family!r} not in {FAMILIES}")
    _MODELS[spec.name] = spec
    return spec


def model_names() -> list[str]:
    _load_all()
    return list(_MODELS)


def get_model(name: str) -> ModelSpec:
    _load_all()
    if name not in _MODELS:
        raise BadInput("model", name, "expected one of " + ", ".join(_MODELS))
    return _MODELS[name]


_LOADED: list[bool] = []


def _load_all() -> None:
    """Import the zoo's definition modules (each registers its models), once."""
    if _LOADED:
        return
    from workloads.zoo import definitions  # noqa: F401
    _LOADED.append(True)
