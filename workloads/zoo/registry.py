"""The model zoo's registry: each model is a :class:`ModelSpec` (data) whose ``build`` makes a
plain-torch module from architecture parameters, and whose ``inputs`` makes example inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dse.errors import BadInput

#: Model families. ``llm`` models support phases prefill and decode; the rest run ``forward``.
FAMILIES = ("llm", "encoder", "vision", "neural_field", "micro")

#: Bounds of architecture ints by key, for every model that declares none of its own
#: (``ModelSpec.arch_ranges``). Depth bounds the capture time: ops grow with it (GPT-2 with 256
#: layers captures in 16 s on the 2-core development machine, `dse workload gpt2 --arch
#: n_layer=256`; the deepest published LLMs have about 128) [E]; a hash-grid table has at most
#: 2**32 rows (workloads/hashgrid_op.py) [R].
DEFAULT_ARCH_RANGES: dict[str, tuple[int, int]] = {
    "n_layer": (1, 256), "n_hidden_layers": (1, 64), "color_hidden_layers": (1, 64),
    "blocks1": (1, 64), "blocks2": (1, 64), "blocks3": (1, 64), "blocks4": (1, 64),
    "levels": (1, 64), "log2_table_size": (1, 32)}
#: Largest value of any other architecture int [E: 2**20 keeps a product of two widths, e.g.
#: vocabulary x model width, far from torch's int64 element counts].
ARCH_INT_MAX = 2**20


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
        :data:`DEFAULT_ARCH_RANGES`), or None."""
        return self.arch_ranges.get(key) or DEFAULT_ARCH_RANGES.get(key)

    def resolve_arch(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        """Defaults updated by ``overrides``, each coerced to its default's type; unknown keys and
        non-positive numbers raise :class:`BadInput` (a zero listed in ``arch_choices`` is
        allowed, for keys such as a convolution's padding)."""
        arch = dict(self.arch)
        for key, value in (overrides or {}).items():
            if key not in arch:
                raise BadInput(f"arch.{key}", value,
                               f"{self.name} architecture keys are " + ", ".join(arch))
            arch[key] = _coerce(self, key, value)
        return arch


_KIND = {bool: "true or false", int: "an int", float: "a number", str: "a string"}


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
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                value = int(value)  # exact, however long
            if not isinstance(value, int):
                f = float(value)
                if f != int(f) or abs(f) > 2**53:  # beyond 2**53 a float is not one int
                    raise ValueError
                value = int(f)
            # A value listed in ``arch_choices`` is allowed even when zero (e.g. padding 0).
            if value <= 0 and not (choices is not None and value in choices):
                raise BadInput(field_name, value, "expected a positive int")
            low, high = spec.arch_range(key) or (1, ARCH_INT_MAX)
            if value > high and not (choices is not None and value in choices):
                raise BadInput(field_name, value, f"expected an int in [{low}, {high}]")
        elif isinstance(default, float):
            value = float(value)
            if not value > 0 and not (choices is not None and value in choices):
                raise BadInput(field_name, value, "expected a positive number")
        else:
            value = str(value)
    except BadInput:
        raise
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        raise BadInput(field_name, value, "expected " + _KIND.get(type(default), "a string")
                       ) from None
    if choices is not None and value not in choices:
        raise BadInput(field_name, value, "expected one of " + ", ".join(map(str, choices)))
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


def _load_all() -> None:
    """Import the zoo's definition modules (each registers its models)."""
    from workloads.zoo import definitions  # noqa: F401
