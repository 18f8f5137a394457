"""Capture a model built from a Hugging Face ``config.json`` (no weights; needs transformers).

Every family transformers builds from a config, by what the config describes:

* **causal** (``*ForCausalLM``: GPT-2, Llama, Mistral, Gemma, Bloom, Mixtral, Qwen3-MoE, Mamba,
  ...): ``prefill`` over ``seq`` tokens and ``decode`` of one token per sequence with a KV cache
  of ``context`` tokens (the cache enters as the ``kv_cache`` argument of a small wrapper that
  rebuilds transformers' cache object, so the capture sees it as KV cache; for Mamba the cache
  is each layer's fixed-size conv and recurrent state).
* **seq2seq** (T5, BART, Whisper, Marian, ...): ``forward`` runs the encoder over ``seq`` tokens
  (Whisper: its fixed mel frames); ``decode`` runs one decoder step with a self-attention cache
  of ``context`` tokens and cross-attention reading the encoder's cached keys and values for
  ``seq`` positions (both KV cache).
* **vision** (ViT, Swin, ConvNeXt, ResNet, ...: image classifiers): ``forward`` on pixel inputs
  of the config's image size; **multimodal** (CLIP, SigLIP): both towers, ``seq`` text tokens
  and one image each; **encoder** (BERT, DeBERTa, ...) and everything else: ``forward`` on
  ``seq`` tokens of its main input.

Attention uses SDPA where the model supports it and the model's own (eager) implementation
otherwise; the capture fuses eager attention into one op. Mixture-of-experts layers run through
``dse::moe_experts`` (registered as transformers' experts implementation ``"dse"``) and Mamba's
selective scan through ``dse::selective_scan``, so neither is dropped nor unrolled.

Bad configs (an unknown ``model_type``, a field of the wrong type, NaN, a stale ``layer_types``,
an integer above ``workloads.limits``) raise one :class:`BadInput` naming the field.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dse.errors import BadInput, CaptureError, DSEError
from workloads import hf_checks, hf_experts, ir
from workloads.hf_checks import read_config
from workloads.build import check_size
from workloads.capture import capture
from workloads.limits import int_limit

#: Keys of ``--arch`` on a Hugging Face config that are not config fields: the load imbalance
#: of routed experts (``workloads/moe.py``) and their capacity factor (0: dropless).
MOE_KEYS = {"expert_imbalance": 1.0, "capacity_factor": 0.0}
#: Keys of ``--arch`` that choose how a serving engine runs the model (not config fields):
#: ``mla`` — multi-head latent attention in decode, ``absorbed`` (engines) or ``expanded``
#: (transformers' code as written); see :mod:`workloads.hf_mla`.
ENGINE_KEYS = {"mla": "absorbed"}
#: Default sizes when the caller gives none (tokens).
DEFAULT_SEQ = {"causal": 512}
DEFAULT_TEXT_SEQ = 128
DEFAULT_CONTEXT = 1024
DEFAULT_IMAGE_SIZE = 224
PHASES = {"causal": ("prefill", "decode"), "seq2seq": ("forward", "decode")}


# ----------------------------------------------------------------------------- the config
def _transformers():
    try:
        import transformers
    except ImportError:
        raise BadInput("hf_config", "transformers",
                       "needs transformers: pip install 'accel-dse[hf]'") from None
    return transformers


def check_values(data: Any, where: str = "hf_config") -> None:
    """Refuse integers above their architecture limit (:mod:`workloads.limits`), naming the
    key (non-finite numbers and deep nesting: :func:`workloads.hf_checks.read_config`)."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{where}.{key}"
            if isinstance(value, int) and not isinstance(value, bool) and value > int_limit(str(key)):
                raise BadInput(path, value, f"expected an int in [1, {int_limit(str(key)):,}]")
            if isinstance(value, (dict, list)):
                check_values(value, path)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, (dict, list)):
                check_values(value, f"{where}[{i}]")


def make_config(data: dict[str, Any]):
    """transformers' config object of ``data``; its validation errors become one line naming
    the field (never transformers' list of every model type)."""
    transformers = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    check_values(data)
    model_type = data.get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING_NAMES), n=3)
        raise BadInput("hf_config.model_type", model_type,
                       f"expected a model type transformers {transformers.__version__} knows ("
                       + (f"closest: {', '.join(close)}; " if close else "")
                       + f"{len(CONFIG_MAPPING_NAMES)} in all, e.g. llama, gpt2, bert, t5, vit)")
    fields = {k: v for k, v in data.items() if k != "model_type"}
    for _ in range(8):   # each retry turns one more int where a float is typed into a float
        try:
            with hf_checks.quiet_transformers():
                config = transformers.AutoConfig.for_model(model_type, **fields)
            break
        except Exception as exc:  # transformers raises many types; the user gets one line
            key = re.search(r"Field '(\w+)' expected float, got int", str(exc))
            if not (key and _floated(fields, key.group(1))):
                raise _config_error(exc, data) from None
    else:
        raise _config_error(exc, data) from None
    hf_checks.check_sizes(config)
    return config


def _floated(data: dict[str, Any], key: str) -> bool:
    """``data[key]`` (at any depth) made a float where it is an int: JSON writes ``1`` and
    ``1.0`` alike (DBRX's published ``moe_normalize_expert_weights: 1``, which transformers 5's
    typed configs refuse). Whether one was changed."""
    changed = False
    for k, v in data.items():
        if k == key and isinstance(v, int) and not isinstance(v, bool):
            data[k], changed = float(v), True
        elif isinstance(v, dict):
            data[k] = dict(v)
            changed = _floated(data[k], key) or changed
    return changed


def _find(data: dict[str, Any], key: str, path: str = "hf_config") -> tuple[str, Any]:
    """(dotted path, value) of ``key`` at any depth of ``data``; the top-level path and
    ``(unset)`` when absent."""
    if key in data:
        return f"{path}.{key}", data[key]
    for k, v in data.items():
        if isinstance(v, dict):
            found = _find(v, key, f"{path}.{k}")
            if found[1] != "(unset)":
                return found
    return f"{path}.{key}", "(unset)"


def _config_error(exc: Exception, data: dict[str, Any]) -> BadInput:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines)
    named = re.search(r"field '([^']+)'", text, re.I) or re.search(r"`([A-Za-z_][\w]*)`", text)
    reason = lines[-1] if lines else type(exc).__name__
    reason = re.sub(r"^\w+(Error|Exception): ", "", reason)
    if named:
        return BadInput(*_find(data, named.group(1)), reason[:200])
    return BadInput("hf_config", data.get("model_type"),
                    f"expected a config transformers understands ({reason[:200]})")


def apply_arch(data: dict[str, Any], arch: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, float]]:
    """``data`` with ``--arch`` overrides (existing config keys, coerced to their type and
    bounded), and the MoE routing settings (``MOE_KEYS``)."""
    from workloads.hf_mla import FORMS
    out, moe = dict(data), {**MOE_KEYS, **ENGINE_KEYS}
    defaults = None
    for key, value in (arch or {}).items():
        if key == "mla":
            if value not in FORMS:
                raise BadInput("arch.mla", value, "expected " + " or ".join(FORMS))
            moe[key] = value
            continue
        if key in MOE_KEYS:
            try:
                moe[key] = float(value)
            except (TypeError, ValueError):
                raise BadInput(f"arch.{key}", value, "expected a number") from None
            if not math.isfinite(moe[key]) or moe[key] < (1.0 if key == "expert_imbalance" else 0.0):
                raise BadInput(f"arch.{key}", value, "expected a number >= "
                               + ("1 (1: uniform load)" if key == "expert_imbalance" else "0 (0: dropless)"))
            continue
        if defaults is None:
            defaults = make_config({"model_type": data["model_type"]}).to_dict()
        current = out.get(key, defaults.get(key))
        if key not in out and key not in defaults or isinstance(current, (dict, list)):
            keys = sorted(k for k, v in defaults.items() if isinstance(v, (int, float, str, bool))
                          and not k.startswith("_"))
            raise BadInput(f"arch.{key}", value, f"a scalar field of this {data['model_type']} "
                           "config, e.g. " + ", ".join(keys[:12]) + ", expert_imbalance, capacity_factor")
        out[key] = _coerce(key, value, current)
    return out, moe


def _coerce(key: str, value: Any, current: Any) -> Any:
    field = f"arch.{key}"
    try:
        if isinstance(current, bool):
            text = str(value).strip().lower()
            if text not in ("true", "false", "1", "0"):
                raise ValueError
            return text in ("true", "1")
        if isinstance(current, int):
            f = float(value)
            if not f.is_integer() or f <= 0:
                raise BadInput(field, value, "expected a positive int")
            if f > int_limit(key):
                raise BadInput(field, value, f"expected at most {int_limit(key)}")
            return int(f)
        if isinstance(current, float):
            f = float(value)
            if not math.isfinite(f):
                raise ValueError
            return f
        return value if current is None else str(value)
    except BadInput:
        raise
    except (TypeError, ValueError, OverflowError):
        raise BadInput(field, value, f"expected a {type(current).__name__}") from None


# ----------------------------------------------------------------------------- the task
def task(config) -> str:
    """``causal`` | ``seq2seq`` | ``vision`` | ``multimodal`` | ``encoder``."""
    from transformers.models.auto import modeling_auto as ma
    mt = config.model_type
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal"   # what the config says it is (BertLMHeadModel, BartForCausalLM...)
    if (mt in getattr(ma, "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", {})
            and mt not in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
            and not getattr(config, "is_encoder_decoder", False)):
        return "multimodal"   # a language model with image / audio towers (Voxtral, Qwen2-Audio)
    if getattr(config, "is_encoder_decoder", False) or mt in ma.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
        return "seq2seq"
    if mt in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and mt not in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "causal"
    if getattr(config, "text_config", None) is not None and any(
            getattr(config, sub, None) is not None for sub in ("vision_config", "audio_config")):
        return "multimodal"
    if mt in ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "vision"
    return "encoder"


def phases_of(kind: str) -> tuple[str, ...]:
    return PHASES.get(kind, ("forward",))


def _model_class(config, kind: str):
    transformers = _transformers()
    from transformers.models.auto import modeling_auto as ma
    mt = config.model_type
    if kind == "causal":
        if getattr(config, "is_decoder", None) is False and mt in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            config.is_decoder = True   # a BERT-like model as a causal LM runs as a decoder
        return transformers.AutoModelForCausalLM
    if kind == "seq2seq":
        if mt in ma.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
            return transformers.AutoModelForSpeechSeq2Seq
        if mt in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
            return transformers.AutoModelForSeq2SeqLM
    if kind == "vision":
        return transformers.AutoModelForImageClassification
    if kind == "multimodal" and mt in getattr(ma, "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", {}):
        return transformers.AutoModelForMultimodalLM
    return transformers.AutoModel


def build_module(config, kind: str, moe: dict[str, float] | None = None) -> nn.Module:
    """The model on the meta device, its experts routed through ``dse::moe_experts``."""
    hf_experts.register()
    auto = _model_class(config, kind)
    if getattr(config, "architectures", None) is None:   # transformers iterates over it (DeiT)
        config.architectures = []
    try:
        with torch.device("meta"), hf_checks.quiet_transformers():
            try:
                module = auto.from_config(config, experts_implementation="dse")
            except (ValueError, KeyError, TypeError) as exc:
                if "experts_implementation" not in str(exc):
                    raise
                module = auto.from_config(config)
    except BadInput:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureError(f"transformers could not build {config.model_type}: {first[:300]}") from None
    hf_experts.set_routing(module, moe or MOE_KEYS)
    return module.eval()


@contextlib.contextmanager
def selective_scan_as_one_op():
    """Route Hugging Face's Mamba scans through ``dse::selective_scan`` while capturing."""
    import importlib
    from workloads.scan_op import selective_scan

    def scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
             return_last_state=False, **_):
        y, last = selective_scan(hidden_states, dt, A, B, C, D, z, delta_bias, None,
                                 bool(delta_softplus), bool(return_last_state))
        return (y, last) if return_last_state else y

    def step(state, hidden_states, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False, z=None,
             **_):   # one decode token: the scan over one step from the cached state
        y, last = selective_scan(hidden_states[..., None], dt[..., None], A, B[..., None],
                                 C[..., None], D, None if z is None else z[..., None], dt_bias,
                                 state, bool(dt_softplus), True)
        state.copy_(last)
        return y[..., 0]
    patched = []
    for name in ("mamba", "falcon_mamba"):
        mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        for attr, fn in (("mamba_selective_scan", scan), ("mamba_selective_state_update", step)):
            if hasattr(mod, attr):
                patched.append((mod, attr, getattr(mod, attr)))
                setattr(mod, attr, fn)
    try:
        yield
    finally:
        for mod, attr, original in patched:
            setattr(mod, attr, original)


# ----------------------------------------------------------------------------- inputs
def text_config(config):
    """The (decoder's) text sub-config of a composite config (Gemma 3, Llama 4, Qwen-VL,
    CLIP...), the config itself otherwise."""
    try:
        sub = config.get_text_config(decoder=True)
    except Exception:   # configs without a text part raise or return odd things
        return config
    return sub if sub is not None else config


def vocab_size(config) -> int | None:
    """The vocabulary the token ids are drawn from: the text sub-config's, else the config's."""
    for c in (text_config(config), config):
        v = getattr(c, "vocab_size", None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _size_limit(config) -> int | None:
    """Positions the text model holds (read from the text sub-config first: CLIP's text tower
    holds 77 whatever its vision tower does)."""
    for c in (text_config(config), config):
        for key in ("max_position_embeddings", "n_positions", "max_target_positions"):
            v = getattr(c, key, None)
            if isinstance(v, int) and v > 0:
                return v
    return None


def _image_size(config) -> tuple[int, int, int]:
    size = getattr(config, "image_size", None) or DEFAULT_IMAGE_SIZE
    if isinstance(size, (list, tuple)):
        h, w = int(size[0]), int(size[-1])
    elif isinstance(size, dict):
        h, w = int(size.get("height", DEFAULT_IMAGE_SIZE)), int(size.get("width", DEFAULT_IMAGE_SIZE))
    else:
        h = w = int(size)
    return int(getattr(config, "num_channels", 3) or 3), h, w


def _ids(batch: int, seq: int, vocab: int | None) -> torch.Tensor:
    return (torch.arange(batch * seq) % max(int(vocab or 2), 2)).reshape(batch, seq)


def _main_input(module, config, batch: int, seq: int,
                media: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    from workloads import hf_inputs
    media = media or {}
    name = getattr(module, "main_input_name", "input_ids")
    if name == "input_ids":
        ids = {"input_ids": _ids(batch, seq, vocab_size(config))}
        if _accepts(module, "bbox"):   # a document model (UDOP): each token box and the mask
            ids.update(bbox=torch.zeros(batch, seq, 4),   # (floats: its bias averages them)
                       attention_mask=torch.ones(batch, seq, dtype=torch.long))
        return ids
    if name == "pixel_values":
        c, h, w = _image_size(config)
        if media.get("image_size"):
            h = w = media["image_size"]
        return {"pixel_values": torch.zeros(batch, c, h, w)}
    if name in ("input_features", "input_values"):   # Whisper's mel frames, raw samples
        audio = hf_inputs.audio_part(module, config, batch, media.get("frames"),
                                     media.get("audio_seconds"))
        if name in audio:
            return {name: audio[name]}
        return {name: torch.zeros(batch, seq)}
    raise CaptureError(f"{config.model_type}: main input {name!r} is not supported "
                       "(supported: input_ids, pixel_values, input_features, input_values)")


class _CachedDecode(nn.Module):
    """One decode step of a causal LM whose whole cache is the ``kv_cache`` argument: per
    layer, a dict of the tensors its cache layer holds (keys and values of attention layers,
    the conv and recurrent states of linear-attention and state-space layers, a sparse
    indexer's keys), set into a copy of the cache the prefill probe returned. Growing caches
    (keys, values) are appended to; fixed-size states are read and written in place, so their
    bytes per step do not grow with the context."""

    def __init__(self, model: nn.Module, template, logits_to_keep: bool, cache_arg: str):
        super().__init__()
        self.model, self.logits_to_keep, self.cache_arg = model, logits_to_keep, cache_arg
        self._template = template

    def forward(self, input_ids, kv_cache):
        cache = refilled(self._template, kv_cache)
        extra = {"logits_to_keep": 1} if self.logits_to_keep else {}
        out = self.model(input_ids=input_ids, use_cache=True, **{self.cache_arg: cache}, **extra)
        return out.logits


def cache_tensors(cache) -> list[dict[str, torch.Tensor]]:
    """Per layer of a transformers cache, its floating-point state tensors by attribute
    (``keys``, ``values``, ``conv_states.0``, ``recurrent_states.0``, ``indexer_keys``...)."""
    out = []
    for layer in cache.layers:
        entry: dict[str, torch.Tensor] = {}
        for attr, value in vars(layer).items():
            items = value.items() if isinstance(value, dict) else ((None, value),)
            for key, v in items:
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() >= 2:
                    entry[attr if key is None else f"{attr}.{key}"] = v
        out.append(entry)
    return out


def refilled(template, tensors: list[dict[str, torch.Tensor]]):
    """A shallow copy of the cache ``template`` whose layers hold ``tensors`` (the template
    itself is never changed, so it serves every call)."""
    import copy
    cache = copy.copy(template)
    layers = []
    for layer, entry in zip(template.layers, tensors):
        new = copy.copy(layer)
        for attr, value in vars(layer).items():
            if isinstance(value, dict):
                setattr(new, attr, dict(value))
        for name, t in entry.items():
            attr, _, key = name.partition(".")
            if key:
                getattr(new, attr)[int(key) if key.isdigit() else key] = t
            else:
                setattr(new, attr, t)
        layers.append(new)
    cache.layers = layers
    return cache


def _cache_arg(model: nn.Module) -> str:
    """The forward argument that takes the cache (renamed across transformers versions)."""
    return next((n for n in ("cache", "past_key_values", "cache_params") if _accepts(model, n)),
                "past_key_values")


class _Seq2SeqDecode(nn.Module):
    """One decoder step: self-attention cache and the encoder's cross-attention keys/values
    are the ``kv_cache`` argument (``{"self": [(k, v)], "cross": [(k, v)]}``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden, kv_cache):
        from transformers import DynamicCache, EncoderDecoderCache
        own, cross = _filled(DynamicCache(), kv_cache["self"]), _filled(DynamicCache(),
                                                                         kv_cache["cross"])
        cache = EncoderDecoderCache(own, cross)
        for i in range(len(kv_cache["cross"])):
            cache.is_updated[i] = True
        out = self.model(decoder_input_ids=decoder_input_ids,
                         encoder_outputs=_encoder_output(encoder_hidden),
                         past_key_values=cache, use_cache=True)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _encoder_output(hidden: torch.Tensor):
    """The encoder's states as transformers' output class (indexable like the plain tuple;
    Florence-2 and T5Gemma-2 read ``encoder_outputs.last_hidden_state``)."""
    from transformers.modeling_outputs import BaseModelOutput
    return BaseModelOutput(last_hidden_state=hidden)


def _filled(cache, pairs):
    """``cache`` (a transformers ``DynamicCache``) holding ``pairs`` as its layers' keys and
    values, set directly: its ``update`` would ``torch.cat`` them onto empty tensors, copies a
    real cache never makes (and the capture would count as cache appends)."""
    from transformers.cache_utils import DynamicLayer
    for i, (k, v) in enumerate(pairs):
        while len(cache.layers) <= i:
            cache.layers.append(DynamicLayer())
        layer = cache.layers[i]
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def _cache_pairs(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _accepts(module: nn.Module, name: str) -> bool:
    import inspect
    return name in inspect.signature(module.forward).parameters


@contextlib.contextmanager
def as_if_traced():
    """Run a probe forward on meta tensors the way an export runs it: transformers then skips
    the data-dependent shortcuts (``.item()`` on masks) that meta tensors cannot take, and
    takes the paths it takes under export (Qwen3-Next's triangular solve as matmuls).
    ``torch.distributions`` skip their argument checks (``.item()`` of a constraint on meta
    tensors; Gemma-3n's ``Normal(0, 1)`` for its activation sparsity): they check values, and
    change neither shapes nor work."""
    from torch.distributions import Distribution
    originals = (torch.compiler.is_compiling, torch.compiler.is_exporting)
    validate = Distribution._validate_args
    torch.compiler.is_compiling = torch.compiler.is_exporting = lambda: True
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.compiler.is_compiling, torch.compiler.is_exporting = originals
        Distribution.set_default_validate_args(validate)


def _multimodal(model: nn.Module, config, batch: int, seq: int,
                media: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
    """A multimodal model's forward (no cache) on ``seq`` text tokens plus one image and/or
    audio clip per sequence and their placeholder tokens (:mod:`workloads.hf_inputs`): the
    image layouts processors produce are tried in turn on the model's own image tower, the
    first it takes is kept."""
    from workloads import hf_family_inputs as hfi, hf_inputs as hi
    names = hi.accepts(model)
    for c in {id(c): c for c in (config, text_config(config))}.values():
        if hasattr(c, "use_cache"):
            c.use_cache = False   # a forward needs no cache (a returned one cannot be exported)
    inputs: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    options: dict[str, Any] = {"use_cache": False} if "use_cache" in names else {}
    placeholders = 0
    parts = []
    native = getattr(getattr(config, "vision_config", None), "image_size", None)
    size = media.get("image_size")
    if size and isinstance(native, int) and size != native and "image_grid_thw" not in names:
        if "interpolate_pos_encoding" not in names:   # the processor resizes to the tower's size
            raise BadInput("image_size", size, f"{native} (the {config.model_type} vision tower "
                           f"takes {native}x{native} images; its processor resizes to that)")
        options["interpolate_pos_encoding"] = True
    family = hfi.family_inputs(model, config, batch, seq, media)
    if family:   # more than pixels and placeholder ids (Idefics, Kosmos-2, PI0, InstructBLIP...)
        inputs.update(family[0])
        constants.update(family[1])
        placeholders += family[2]
    elif "pixel_values" in names:
        parts.append(("image", hi.image_layouts(model, config, batch, media.get("image_size")),
                      ("image_token_id", "image_token_index"), "get_image_features"))
    aud = None if family else hi.audio_layouts(model, config, batch, media.get("frames"),
                                               media.get("audio_seconds"))
    if aud and aud[0][0]:   # (a family layout, e.g. Apertus-1.5's, holds its clip already)
        mismatch = hi.projector_width_mismatch(config)
        if mismatch:
            field, value, expected = mismatch
            raise BadInput(field, value, f"{expected}, the width of the {config.model_type} "
                           "audio encoder's states its projector reads")
        parts.append(("audio", aud, ("audio_token_id", "audio_token_index"),
                      "get_audio_features"))
    for what, layouts, token_names, getter in parts:
        unset = [n for n in token_names if hasattr(config, n) and getattr(config, n) is None]
        if "input_ids" in names and unset and hi.token_id(config, *token_names) is None:
            raise BadInput(f"hf_config.{unset[0]}", None, f"the {what} placeholder token id "
                           f"the {config.model_type} processor puts in the text (an int)")
        added = what == "audio" and config.model_type in hi.AUDIO_ADDED_PER_TOKEN
        sized = ("input_ids" in names and (added or hi.token_id(config, *token_names) is not None)
                 and hi.getter_of(model, getter) is not None)
        chosen, errors = None, []
        for tensors, const in layouts:
            if not sized:
                chosen = (tensors, const, 0)
                break
            try:
                with hi.vision_helpers_eager(), hi.masks_all_true(), selective_scan_as_one_op():
                    rows = hi.placeholder_tokens(model, getter, tensors, const)
                chosen = (tensors, const, rows // batch)
                break
            except Exception as exc:
                errors.append(_first_line(exc))
        if chosen is None:
            raise CaptureError(f"{config.model_type}: no {what} input layout its {what} tower "
                               f"takes ({'; '.join(errors)[:300]})")
        inputs.update(chosen[0])
        constants.update(chosen[1])
        if added and sized:   # one text token per audio row, its embedding added to it
            seq = chosen[2]
        else:
            placeholders += chosen[2]
    if "input_ids" in names:
        inputs["input_ids"] = _ids(batch, seq + placeholders, vocab_size(config))
    if "position_ids" in names and any(hasattr(m, "get_rope_index") for m in model.modules()):
        inputs["position_ids"] = torch.zeros(3, batch, seq + placeholders, dtype=torch.long)
    return hi.WithConstants(model, constants, options), inputs


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + " ".join(str(exc).split())[:200]


def module_and_inputs(config, kind: str, phase: str, batch: int, seq: int, context: int,
                      moe: dict[str, float] | None = None, media: dict[str, Any] | None = None
                      ) -> tuple[nn.Module, dict[str, Any]]:
    """The module to export for ``phase`` and its keyword inputs (on the meta device;
    ``media``: ``image_size``, ``frames``, ``audio_seconds`` of multimodal inputs)."""
    model = build_module(config, kind, moe)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "causal":
            _refuse_drafter(model, config)
            keep = _accepts(model, "logits_to_keep")
            if phase == "prefill":
                kw = {"input_ids": _ids(batch, seq, vocab_size(config)), "use_cache": False}
                return model, ({**kw, "logits_to_keep": 1} if keep else kw)
            if _accepts(model, "lengths"):
                # XLM's generate re-runs the whole sequence plus a mask token every step (its
                # forward reads the lengths by .item() and slices cached positions itself)
                raise BadInput("phase", phase, f"prefill ({config.model_type} decodes by "
                               "re-running the whole sequence each step, with no cache to hand "
                               "over: capture prefill at the decoded length)")
            with selective_scan_as_one_op(), hf_experts.routed(model), as_if_traced(), \
                    static_rope(model):   # the cache probe routes experts as the capture does
                out = model(input_ids=_ids(batch, context, vocab_size(config)), use_cache=True)
            cache = next((c for c in (getattr(out, n, None) for n in
                                      ("cache", "past_key_values", "cache_params"))
                          if c is not None), None)
            tensors = cache_tensors(cache) if getattr(cache, "layers", None) else []
            if not any(tensors):
                raise BadInput("phase", phase, f"{config.model_type} keeps no cache transformers "
                               "can hand over: expected prefill")
            return _CachedDecode(model, cache, keep, _cache_arg(model)), {
                "input_ids": _ids(batch, 1, vocab_size(config)), "kv_cache": tensors}
        if kind == "seq2seq":
            encoder = model.get_encoder()
            enc_in = _main_input(encoder if hasattr(encoder, "main_input_name") else model,
                                 config, batch, seq, media)
            if phase == "forward":
                return encoder, enc_in
            start = _ids(batch, context, vocab_size(config))
            with as_if_traced():
                hidden = encoder(**enc_in).last_hidden_state
                out = model(decoder_input_ids=start, encoder_outputs=_encoder_output(hidden),
                            use_cache=True)
            cache = out.past_key_values
            kv = {"self": _cache_pairs(cache.self_attention_cache),
                  "cross": _cache_pairs(cache.cross_attention_cache)}
            return _Seq2SeqDecode(model), {"decoder_input_ids": _ids(batch, 1, vocab_size(config)),
                                           "encoder_hidden": hidden, "kv_cache": kv}
        if kind == "multimodal":
            if type(model).forward is nn.Module.forward and isinstance(
                    getattr(model, "thinker", None), nn.Module):
                # no forward of its own (Qwen2.5-Omni: generate runs the thinker, which reads
                # the text, image and audio, then the talker that speaks): the thinker's
                model, config = model.thinker, model.thinker.config
            return _multimodal(model, config, batch, seq, media or {})
        return model, _main_input(model, config, batch, seq, media)


def _refuse_drafter(model: nn.Module, config) -> None:
    """A drafter that computes no KV of its own (every layer KV-shared, reading the target
    model's ``shared_kv_states`` and taking its hidden states as ``inputs_embeds``: Gemma-4's
    unified assistant) cannot run on token ids alone: one clean line."""
    tc = text_config(config)
    shared, layers = (getattr(tc, n, None) for n in ("num_kv_shared_layers", "num_hidden_layers"))
    if _accepts(model, "shared_kv_states") and isinstance(shared, int) and isinstance(layers, int) \
            and shared >= layers:
        raise BadInput("hf_config.num_kv_shared_layers", shared,
                       f"fewer than num_hidden_layers ({layers}): {config.model_type} is a drafter "
                       "that reads the target model's KV (shared_kv_states) and hidden states "
                       "(inputs_embeds); capture its target model instead")


# ----------------------------------------------------------------------------- the workload
def resolve(data: dict[str, Any], phase: str | None, batch: int | None, seq: int | None,
            context: int | None, arch: dict[str, Any] | None,
            media: dict[str, Any] | None = None):
    """The config and validated, defaulted capture arguments."""
    data, moe = apply_arch(data, arch)
    config = make_config(data)
    kind = task(config)
    allowed = phases_of(kind)
    phase = phase or allowed[0]
    if phase not in allowed:
        raise BadInput("phase", phase, f"a {config.model_type} config ({kind}) runs phases "
                       + ", ".join(allowed))
    batch = _count("batch", 1 if batch is None else batch)
    limit = _size_limit(config)
    if seq is None:   # the default, within what the model holds
        seq = DEFAULT_SEQ.get(kind, DEFAULT_TEXT_SEQ)
        seq = min(seq, limit) if limit else seq
    seq = _count("seq", seq)
    if context is None:
        context = min(DEFAULT_CONTEXT, limit - 1) if limit else DEFAULT_CONTEXT
    context = _count("context", context) if phase == "decode" else 0
    if kind == "causal" and phase == "decode":
        seq = 1
    if kind in ("vision",):
        seq = 0
    if limit and kind in ("causal", "encoder", "multimodal") and seq + context > limit:
        raise BadInput("seq" if phase != "decode" else "context", seq + context,
                       f"{config.model_type} holds at most {limit} positions "
                       "(max_position_embeddings)")
    sizes = {"phase": phase, "batch": batch, "seq": seq, "context": context, "kind": kind}
    media = check_media(media)
    if media:
        sizes["media"] = media
    return config, data, moe, sizes


#: Bounds of the multimodal input options [E: 8K images, a 10-minute clip at 100 frames/s].
MEDIA_LIMITS = {"image_size": 8192, "frames": 60_000, "audio_seconds": 600.0}


def check_media(media: dict[str, Any] | None) -> dict[str, Any]:
    """``media`` (``image_size``, ``frames`` ints, ``audio_seconds`` a number) checked, the
    unset ones dropped."""
    out: dict[str, Any] = {}
    for key, value in (media or {}).items():
        if value is None:
            continue
        if key not in MEDIA_LIMITS:
            raise BadInput(key, value, "one of " + ", ".join(MEDIA_LIMITS))
        high = MEDIA_LIMITS[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if (not number or not math.isfinite(value) or not 0 < value <= high
                or (key != "audio_seconds" and not float(value).is_integer())):
            kind = "a number of seconds" if key == "audio_seconds" else "a positive int"
            raise BadInput(key, value, f"expected {kind} in (0, {high:,}]")
        out[key] = float(value) if key == "audio_seconds" else int(value)
    return out


def _count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(field, value, "expected a positive int")
    if value > int_limit(field):
        raise BadInput(field, value, f"expected at most {int_limit(field)}")
    return value


def workload_from_hf_config(path: str | Path | dict, phase: str | None = None,
                            batch: int | None = None, seq: int | None = None,
                            context: int | None = None, dtype: str = "bf16",
                            arch: dict[str, Any] | None = None, kv_update: str = "concat",
                            use_cache: bool = True,
                            media: dict[str, Any] | None = None) -> ir.Workload:
    """The workload of a Hugging Face config (a config.json path or its dict), cached like zoo
    captures (the key holds the config's content, so an edited file is captured again).
    ``kv_update``: ``concat`` by default, what transformers' default ``DynamicCache`` does
    (``torch.cat`` of the whole cache every step); ``in_place`` for its ``StaticCache``.
    ``media``: ``image_size`` (pixels), ``frames`` (mel frames) or ``audio_seconds`` of the
    image / audio inputs a multimodal model gets (:mod:`workloads.hf_inputs`)."""
    from workloads.build import cached
    from workloads.kv_update import check_kv_update
    check_kv_update(kv_update)
    data = dict(path) if isinstance(path, dict) else read_config(path)
    with refusing(str(data.get("model_type")), phase or "(default phase)"):
        config, data, moe, sizes = resolve(data, phase, batch, seq, context, arch, media)
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    transformers = _transformers()
    key = {"hf_config": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode())
           .hexdigest(), "moe": moe, "dtype": dtype, "transformers": transformers.__version__,
           "kv_update": kv_update, **sizes}
    return cached(key, lambda: _capture(config, data, moe, sizes, dtype, kv_update), use_cache)


@dataclass
class Prepared:
    """A resolved config with the module to export for its phase and the module's inputs."""
    config: Any
    data: dict[str, Any]
    moe: dict[str, float]
    sizes: dict[str, Any]
    module: nn.Module
    kwargs: dict[str, Any]


def prepare(data: dict[str, Any], phase: str | None = None, batch: int | None = None,
            seq: int | None = None, context: int | None = None,
            arch: dict[str, Any] | None = None, media: dict[str, Any] | None = None
            ) -> Prepared:
    """:func:`resolve` then :func:`module_and_inputs` (for checks that run the module too)."""
    config, data, moe, sizes = resolve(data, phase, batch, seq, context, arch, media)
    return _prepared(config, data, moe, sizes)


def _prepared(config, data, moe, sizes) -> Prepared:
    module, kwargs = module_and_inputs(config, sizes["kind"], sizes["phase"], sizes["batch"],
                                       sizes["seq"], sizes["context"], moe, sizes.get("media"))
    return Prepared(config, data, moe, sizes, module, kwargs)


@contextlib.contextmanager
def capture_patches(module: nn.Module, phase: str, settings: dict[str, Any] | None = None):
    """What routes transformers' code through the project's single ops while ``module`` is
    exported or probed: Mamba's scans, experts that bypass transformers' experts interface
    (:mod:`workloads.hf_experts`), and in decode MLA absorbed (unless ``settings["mla"]`` is
    ``expanded``)."""
    from workloads import hf_mla
    absorb = phase == "decode" and (settings or ENGINE_KEYS).get("mla") == "absorbed"
    from workloads.hf_inputs import WithConstants, towers_masks_all_true, vision_helpers_eager
    masks = (towers_masks_all_true(module) if isinstance(module, WithConstants)
             else contextlib.nullcontext())
    with selective_scan_as_one_op(), hf_experts.routed(module), vision_helpers_eager(), masks, (
            hf_mla.absorbed(module) if absorb else contextlib.nullcontext()), _sdpa_gqa(), \
            static_rope(module):
        yield


@contextlib.contextmanager
def static_rope(model: nn.Module):
    """Within the block, rotary embeddings whose frequencies depend on the positions' values
    (dynamic NTK, LongRoPE: transformers' ``dynamic_rope_update`` compares ``max(position_ids)``
    with the cached length, a data-dependent branch an export cannot take) keep their cached
    frequencies: the same shapes and work, only the frequencies' values differ."""
    changed = []
    for m in model.modules():
        kind = m.__dict__.get("rope_type")
        moving = lambda t: isinstance(t, str) and ("dynamic" in t or t == "longrope")
        if isinstance(kind, str) and moving(kind):
            changed.append((m, kind))
            m.rope_type = "default"
        elif isinstance(kind, dict) and any(moving(t) for t in kind.values()):
            changed.append((m, kind))
            m.rope_type = {k: "default" if moving(t) else t for k, t in kind.items()}
    try:
        yield
    finally:
        for m, kind in changed:
            m.rope_type = kind


@contextlib.contextmanager
def _sdpa_gqa():
    """Grouped-query attention through SDPA's ``enable_gqa`` while a module is exported: an
    eager CUDA run without padding passes no mask and so never repeats K/V per query head,
    but an export builds the causal mask it cannot prove unneeded, and with a mask transformers
    would repeat (and so copy) K/V — work the eager run does not do
    (``TRANSFORMERS_SDPA_FORCE_GQA``, transformers' own switch)."""
    import os
    old = os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA")
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRANSFORMERS_SDPA_FORCE_GQA", None)
        else:
            os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = old


def capture_prepared(p: Prepared, dtype: str, kv_update: str,
                     record: dict | None = None) -> ir.Workload:
    """The workload of a prepared module (``record``: as :func:`workloads.capture.capture`)."""
    kind, phase = p.sizes["kind"], p.sizes["phase"]
    arch = {k: v for k, v in p.data.items() if isinstance(v, (int, float, str, bool))}
    with capture_patches(p.module, phase, p.moe), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(p.module, (), p.kwargs, model=f"hf:{p.config.model_type}", phase=phase,
                       dtype=dtype, batch=p.sizes["batch"], seq=p.sizes["seq"],
                       context=p.sizes["context"],
                       arch={**arch, **{k: v for k, v in p.moe.items()
                                         if v != {**MOE_KEYS, **ENGINE_KEYS}[k]}},
                       causal=kind == "causal", kv_update=kv_update, record=record)


def _capture(config, data, moe, sizes, dtype, kv_update) -> ir.Workload:
    with refusing(config.model_type, sizes["phase"]):
        return capture_prepared(_prepared(config, data, moe, sizes), dtype, kv_update)


class UnexpectedCaptureError(CaptureError):
    """An exception the capture of a Hugging Face model did not expect (a family whose code
    path is not handled yet): one line for the user, never a traceback; the all-types sweep
    (``benchmarks/hf_type_sweep.py``) counts it as a failure, not as a clean refusal."""


@contextlib.contextmanager
def refusing(model_type: str, phase: str):
    """Within the block, an exception other than the project's own errors becomes one
    :class:`UnexpectedCaptureError` line naming the model type, the phase, the error and
    where it arose."""
    import traceback
    try:
        yield
    except (DSEError, KeyboardInterrupt):
        raise
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        raise UnexpectedCaptureError(
            f"{model_type} {phase} could not be captured ({where}): {_first_line(exc)}"
        ) from None
