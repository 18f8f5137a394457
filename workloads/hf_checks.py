"""Checks of a Hugging Face ``config.json`` before and after ``transformers`` reads it, so a
bad file is one :class:`BadInput` line naming the key, never a traceback, a hang or
transformers' own warnings.

Refused: a file that is not a JSON object, NaN or Infinity anywhere, nesting deeper than
``MAX_DEPTH``, a ``torch_dtype``/``dtype`` torch does not have, anything ``transformers``
rejects, and model sizes that are not positive ints or exceed the zoo's bounds (a million
layers would capture for hours).
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dse.errors import BadInput, one_line
from dse.safe_io import read_regular
from workloads.limits import int_limit

#: Deepest nesting of lists and objects a config may have [E: real configs nest 3 deep].
MAX_DEPTH = 32
#: Largest config file read, bytes [E: real configs are a few kB].
MAX_BYTES = 2**20
#: Standard config attributes that size the model (transformers maps each model's own names,
#: e.g. GPT-2's ``n_layer``, onto these through ``attribute_map``), bounded by
#: :func:`workloads.limits.int_limit`.
SIZE_ATTRIBUTES = ("num_hidden_layers", "hidden_size", "intermediate_size",
                   "num_attention_heads", "num_key_value_heads", "vocab_size",
                   "max_position_embeddings")


def read_config(path: str | Path) -> dict[str, Any]:
    """The config file's object, checked as the module docstring says (before transformers)."""
    field = "--hf-config"
    blob = read_regular(path, field, MAX_BYTES, "a config.json file")
    try:
        data = json.loads(blob.decode("utf-8"))
    except RecursionError:
        raise BadInput(field, str(path), f"expected JSON nested at most {MAX_DEPTH} deep"
                       ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(field, str(path), "expected a readable JSON file ("
                       + one_line(str(exc))[:120] + ")") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise BadInput(field, str(path), "expected a config object with a model_type string")
    _check_values(data)
    _check_meanings(data)
    for key in ("torch_dtype", "dtype"):
        if data.get(key) is not None:
            _check_dtype(f"hf_config.{key}", data[key])
    return data


def _check_values(data: dict[str, Any]) -> None:
    """No NaN or Infinity, nothing nested deeper than ``MAX_DEPTH`` (walked without recursion)."""
    stack: list[tuple[str, Any, int]] = [("hf_config", data, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadInput("--hf-config", where.removeprefix("hf_config"),
                           f"expected JSON nested at most {MAX_DEPTH} deep")
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(where, value, "expected a finite number")
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v, depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(value))


#: Config keys that count something and cannot be 0 or negative where given [the meaning of
#: each in transformers' config classes: SSM state width, token-type vocabulary, attention
#: head width].
POSITIVE_KEYS = ("state_size", "ssm_state_size", "type_vocab_size", "head_dim")
#: Expert counts (0: a dense model of a family that has MoE variants); the first one given
#: bounds ``num_experts_per_tok``.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _check_meanings(data: dict[str, Any]) -> None:
    """Values transformers would take and then fail on deep inside (or, worse, run): a
    non-string architecture name, a count of 0 or less, experts per token outside
    [1, experts], a negative sliding window, a rope scaling factor that is not positive."""
    archs = data.get("architectures")
    if archs is not None and not (isinstance(archs, list)
                                  and all(isinstance(a, str) for a in archs)):
        raise BadInput("hf_config.architectures", archs, "expected a list of class names")
    for key in POSITIVE_KEYS + EXPERT_KEYS:
        v, low = data.get(key), 0 if key in EXPERT_KEYS else 1
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            raise BadInput(f"hf_config.{key}", v, f"expected an int >= {low}")
    experts = next((data[k] for k in EXPERT_KEYS if isinstance(data.get(k), int)), 0)
    k = data.get("num_experts_per_tok")
    if experts and k is not None and (isinstance(k, bool) or not isinstance(k, int)
                                      or not 1 <= k <= experts):
        raise BadInput("hf_config.num_experts_per_tok", k, f"expected an int in [1, {experts}] "
                       "(the experts)")
    window = data.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or window < 0):
        raise BadInput("hf_config.sliding_window", window, "expected null or an int >= 0, "
                       "tokens")
    for key in ("rope_scaling", "rope_parameters"):
        rope = data.get(key)
        if isinstance(rope, dict) and "factor" in rope:
            f = rope["factor"]
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
                raise BadInput(f"hf_config.{key}.factor", f, "expected a number > 0")


def _check_dtype(where: str, value: Any) -> None:
    import torch
    if value == "auto" or (isinstance(value, str) and value.isidentifier()
                           and isinstance(getattr(torch, value, None), torch.dtype)):
        return
    raise BadInput(where, value, "expected a torch dtype name such as float32, bfloat16 or "
                   "float16")


def check_sizes(config: Any) -> None:
    """Each size attribute the config has is a positive int within its bound."""
    names = {std: own for std, own in (getattr(config, "attribute_map", None) or {}).items()}
    for attr in SIZE_ATTRIBUTES:
        high = int_limit(attr)
        value = getattr(config, attr, None)
        if value is None:
            continue
        where = f"hf_config.{names.get(attr, attr)}"
        for v in value if isinstance(value, (list, tuple)) else (value,):   # per stage (Swin)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high:
                raise BadInput(where, value, f"expected an int in [1, {high:,}]")


def error_text(exc: BaseException) -> str:
    """transformers' error on one line (its messages span several), cut to 160 characters."""
    return one_line(" ".join(str(exc).split()) or type(exc).__name__)[:160]


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' logger and Python warnings while a config is read and built, so
    that the user sees our one line (or the result), not its warnings."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
