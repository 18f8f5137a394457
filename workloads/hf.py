"""Capture a model built from a Hugging Face ``config.json`` (no weights; needs transformers).

Decoder LLMs (``*ForCausalLM`` architectures or a known causal ``model_type``) are built with
``AutoModelForCausalLM``, everything else with ``AutoModel``; always with ``attn_implementation=
"sdpa"`` so attention is one op. Phases: ``prefill`` for causal LMs, ``forward`` otherwise.
The workload records the KV-cache update the model's cache does: ``concat`` by default, what
transformers' default ``DynamicCache`` does (``torch.cat`` of the whole cache every step);
``in_place`` for its ``StaticCache``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from dse.errors import BadInput, CaptureError
from workloads import ir
from workloads.capture import capture

_CAUSAL_TYPES = {"gpt2", "llama", "mistral", "qwen2", "gpt_neox", "opt", "gptj", "phi", "gemma",
                 "falcon", "mixtral", "qwen3", "bloom"}


def load_hf_config(path: str | Path):
    """The ``transformers`` config object of a config.json file."""
    try:
        import transformers
    except ImportError:
        raise BadInput("--hf-config", str(path),
                       "needs transformers: pip install 'accel-dse[hf]'") from None
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput("--hf-config", str(path), "expected an existing config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput("--hf-config", str(path), f"expected a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise BadInput("--hf-config", str(path), "expected a config with a model_type")
    try:
        return transformers.AutoConfig.for_model(**data)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput("--hf-config", str(path), f"a config transformers understands ({exc})") from None


def is_causal(config) -> bool:
    archs = getattr(config, "architectures", None) or []
    return any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs) or (
        config.model_type in _CAUSAL_TYPES)


def workload_from_hf_config(path: str | Path, phase: str | None = None, batch: int | None = None,
                            seq: int | None = None, context: int | None = None,
                            dtype: str = "bf16", kv_update: str = "concat") -> ir.Workload:
    import transformers
    config = load_hf_config(path)
    causal = is_causal(config)
    allowed = ("prefill",) if causal else ("forward",)
    phase = phase or allowed[0]
    if phase not in allowed:
        raise BadInput("phase", phase, f"a Hugging Face config captures phase {allowed[0]} "
                       "(use a zoo model for decode with a KV cache)")
    batch = batch or 1
    seq = seq or 128
    if batch <= 0 or seq <= 0:
        raise BadInput("batch/seq", (batch, seq), "expected positive ints")
    config._attn_implementation = "sdpa"
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
    try:
        with torch.device("meta"):
            module = auto.from_config(config)
    except Exception as exc:
        raise CaptureError(f"transformers could not build {config.model_type}: {exc}") from None
    with torch.device("meta"):
        ids = torch.zeros(batch, seq, dtype=torch.long)
    kwargs: dict[str, Any] = {"use_cache": False} if causal else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(module, (ids,), kwargs, model=f"hf:{config.model_type}", phase=phase,
                       dtype=dtype, batch=batch, seq=seq, kv_update=kv_update,
                       arch={k: v for k, v in config.to_diff_dict().items()
                             if isinstance(v, (int, float, str, bool))})
