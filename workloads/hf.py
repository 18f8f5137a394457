"""Capture a model built from a Hugging Face ``config.json`` (no weights; needs transformers).

Decoder LLMs (``*ForCausalLM`` architectures or a known causal ``model_type``) are built with
``AutoModelForCausalLM``, everything else with ``AutoModel``; always with ``attn_implementation=
"sdpa"`` so attention is one op. Phases: ``prefill`` for causal LMs, ``forward`` otherwise.
The workload records the KV-cache update the model's cache does: ``concat`` by default, what
transformers' default ``DynamicCache`` does (``torch.cat`` of the whole cache every step);
``in_place`` for its ``StaticCache``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from dse.errors import BadInput, CaptureError
from workloads import hf_checks, ir
from workloads.build import check_size
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
    data = hf_checks.read_config(path)
    try:
        with hf_checks.quiet_transformers():
            config = transformers.AutoConfig.for_model(**data)
    except Exception as exc:  # transformers raises many types on a bad config
        raise BadInput("--hf-config", str(path), "expected a config transformers understands ("
                       + hf_checks.error_text(exc) + ")") from None
    hf_checks.check_sizes(config)
    return config


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
    batch = check_size("batch", batch if batch is not None else 1)
    seq = check_size("seq", seq if seq is not None else 128)
    if context is not None:
        raise BadInput("context", context, f"expected no context: phase {phase} has no KV cache")
    config._attn_implementation = "sdpa"
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
    try:
        with torch.device("meta"), hf_checks.quiet_transformers():
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
