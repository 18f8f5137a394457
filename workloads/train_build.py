"""Training-step workloads of zoo models, Hugging Face configs and one's own modules, cached
like inference captures (:func:`workloads.build.cached`: memory, then gzipped JSON on disk).

* **zoo**: the model's forward phase (an LLM's prefill over ``seq`` tokens with logits at
  every position, a classifier's images, ...), cross-entropy for LLMs and classifiers, ``mse``
  of the outputs for the rest (the zoo's encoders and fields have no task head).
* **Hugging Face config**: the task head transformers trains with, its own loss from
  ``labels``: a causal LM (``*ForCausalLM``, labels = the input ids), a masked LM for encoders
  that have one (BERT, RoBERTa, ...), an image classifier, a seq2seq LM (labels = ``seq``
  decoder tokens); any other model (no head) with ``mse`` of its outputs.
* **your module**: :func:`workloads.training.capture_train` on your inputs with your loss
  (not cached: a module is not a stable key).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from contextlib import nullcontext
from typing import Any

import torch

from dse.errors import BadInput, CaptureError, first_line
from workloads import ir
from workloads.training import CAPTURE_VERSION, TRAIN, capture_train


def _forward_phase(spec) -> str:
    return "prefill" if "prefill" in spec.phases else spec.phases[0]


def resolve_zoo(model: str, batch: int | None, seq: int | None, dtype: str,
                arch: dict[str, Any] | None, attention: str = "fused",
                weights: str | None = None) -> dict[str, Any]:
    """Validated, defaulted arguments of a zoo model's training step."""
    from workloads.build import resolve
    from workloads.zoo import get_model
    spec = get_model(model)
    arch = dict(arch or {})
    if "last_token_logits" in spec.arch:
        if arch.get("last_token_logits"):
            raise BadInput("arch.last_token_logits", True, "expected False in training (the "
                           "loss needs logits at every position)")
        arch["last_token_logits"] = False
    args = resolve(model, _forward_phase(spec), batch, seq, None, dtype, arch)
    args["forward_phase"] = args["phase"]
    args["phase"] = TRAIN
    args["loss"] = "cross_entropy" if spec.family in ("llm", "vision") else "mse"
    args["train_capture"] = CAPTURE_VERSION
    if attention != "fused":
        args["attention"] = attention
    if weights and weights != dtype:
        args["weights"] = weights
    return args


#: Blocks a deep model's training step is captured with when ``blocks`` is asked for: the
#: first two of its identical blocks (the second stands for the rest).
TEMPLATE_BLOCKS = 2


def zoo_train_workload(model: str, batch: int | None = None, seq: int | None = None,
                       dtype: str = "bf16", arch: dict[str, Any] | None = None,
                       use_cache: bool = True, blocks: int = 0,
                       attention: str = "fused", weights: str | None = None) -> ir.Workload:
    """The joint forward-backward workload of zoo ``model`` (cached). ``blocks > 0``: a
    model of identical repeated blocks (a size rule's depth key) deeper than that is captured
    with its first ``blocks`` blocks only, the last of which stands for the rest
    (:func:`workloads.training.source_layer`; the training simulator expands it: identical
    results, tested, at a fraction of the capture time). ``attention``, ``weights``: as
    :func:`workloads.training.capture_train`."""
    from workloads.build import cached
    from workloads.zoo import get_model
    args = resolve_zoo(model, batch, seq, dtype, arch, attention, weights)
    depth = getattr(get_model(model).sizes, "depth", None) if get_model(model).sizes else None
    if blocks > 0 and depth and int(args["arch"].get(depth, 0)) > blocks:
        layers = int(args["arch"][depth])
        small = {**args, "arch": {**args["arch"], depth: blocks}}
        return cached({**small, "stands_for": layers},
                      lambda: _with_depth(_capture_zoo(small), layers, args["arch"]), use_cache)
    return cached(args, lambda: _capture_zoo(args), use_cache)


def _with_depth(w: ir.Workload, layers: int, arch: dict[str, Any]) -> ir.Workload:
    """``w`` (its first blocks captured) as the training step of ``layers`` blocks."""
    from workloads.train_step import params_by_layer
    w.train = {**w.train, "captured_layers": w.train["layers"], "layers": layers}
    w.arch = dict(arch)
    w.params = sum(params_by_layer(w).values())
    return w


def _capture_zoo(args: dict[str, Any]) -> ir.Workload:
    from workloads.build import zoo_module
    spec, module, ex_args, ex_kwargs = zoo_module(args, args["forward_phase"])
    arch = args["arch"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture_train(module, ex_args, ex_kwargs, loss=args["loss"], model=args["model"],
                             dtype=args["dtype"], batch=args["batch"],
                             seq=args["seq"] if spec.family in ("llm", "encoder") else 0,
                             arch=arch, causal=spec.family == "llm",
                             attention=args.get("attention", "fused"),
                             weights=args.get("weights"))


# ------------------------------------------------------------------------------ Hugging Face
def _hf_train_class(config, kind: str):
    import transformers
    from transformers.models.auto import modeling_auto as ma
    mt = config.model_type
    if kind == "causal":
        return transformers.AutoModelForCausalLM, "model"
    if kind == "seq2seq" and mt in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForSeq2SeqLM, "model"
    if kind == "vision":
        return transformers.AutoModelForImageClassification, "model"
    if kind == "encoder" and mt in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return transformers.AutoModelForMaskedLM, "model"
    return transformers.AutoModel, "mse"


def hf_train_workload(path, batch: int | None = None, seq: int | None = None,
                      dtype: str = "bf16", arch: dict[str, Any] | None = None,
                      use_cache: bool = True, weights: str | None = None) -> ir.Workload:
    """The joint forward-backward workload of a Hugging Face config (a path or its dict),
    trained with its task head's loss (see the module docstring); cached by the config's
    content. ``weights``: as :func:`workloads.training.capture_train`."""
    from workloads import hf
    from workloads.build import cached
    from workloads.hf_checks import read_config
    data = dict(path) if isinstance(path, dict) else read_config(path)
    data, moe = hf.apply_arch(data, arch)
    config = hf.make_config(data)
    kind = hf.task(config)
    if kind == "multimodal":
        raise BadInput("hf_config", config.model_type, "a config with one tower (multimodal "
                       "training steps are not modelled)")
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    batch = hf._count("batch", 1 if batch is None else batch)
    limit = hf._size_limit(config)
    if seq is None:
        seq = min(hf.DEFAULT_SEQ.get(kind, hf.DEFAULT_TEXT_SEQ), limit or 1 << 30)
    seq = hf._count("seq", seq)
    if kind == "vision":
        seq = 0
    elif limit and seq > limit:
        raise BadInput("seq", seq, f"{config.model_type} holds at most {limit} positions "
                       "(max_position_embeddings)")
    import transformers
    key = {"hf_config": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode())
           .hexdigest(), "moe": moe, "dtype": dtype, "transformers": transformers.__version__,
           "phase": TRAIN, "batch": batch, "seq": seq, "kind": kind, "weights": weights or dtype,
           "train_capture": CAPTURE_VERSION}
    return cached(key, lambda: _capture_hf(config, data, kind, batch, seq, dtype, weights),
                  use_cache)


def hf_train_module(config, kind: str, meta: bool = True):
    """(the model transformers trains ``config`` with, the loss it is captured with:
    ``None`` for the head's own from ``labels``, or ``mse``), built on the meta device (or
    real, for a reference run)."""
    from workloads import hf_checks
    cls, loss = _hf_train_class(config, kind)
    if getattr(config, "architectures", None) is None:
        config.architectures = []
    if kind == "seq2seq":   # labels are shifted right into the decoder's inputs
        for key in ("decoder_start_token_id", "pad_token_id"):
            if getattr(config, key, None) is None:
                setattr(config, key, 0)
    try:
        with torch.device("meta") if meta else nullcontext(), hf_checks.quiet_transformers():
            module = cls.from_config(config)
    except Exception as exc:
        raise CaptureError(f"transformers could not build {config.model_type}: "
                           f"{first_line(exc)[:300]}") from None
    return module, None if loss == "model" else loss


def _capture_hf(config, data, kind: str, batch: int, seq: int, dtype: str,
                weights: str | None = None) -> ir.Workload:
    from workloads import hf
    module, loss = hf_train_module(config, kind)
    with torch.device("meta"):
        if kind == "vision":
            inputs = hf._main_input(module, config, batch, seq)
        else:
            inputs = {"input_ids": hf._ids(batch, seq, getattr(config, "vocab_size", None))}
        if loss is None:
            labels = (torch.zeros(batch, dtype=torch.long) if kind == "vision"
                      else hf._ids(batch, seq, getattr(config, "vocab_size", None)))
            inputs["labels"] = labels
        if kind == "causal" and hf._accepts(module, "use_cache"):
            inputs["use_cache"] = False
    arch = {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool))}
    with hf.as_if_traced(), hf.selective_scan_as_one_op(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture_train(module, (), inputs, loss=loss,
                             model=f"hf:{config.model_type}", dtype=dtype, batch=batch,
                             seq=seq, arch=arch, causal=kind == "causal", weights=weights)


# ------------------------------------------------------------------------------ own module
def module_train_workload(module: torch.nn.Module, inputs: Any = None, *, loss=None,
                          dtype: str = "bf16", batch: int = 1, seq: int = 0,
                          model: str | None = None) -> ir.Workload:
    """The joint forward-backward workload of your own module on ``inputs`` (a tuple, a dict
    of keyword arguments or a tensor); ``loss``: ``None`` when forward returns a scalar loss
    (or an output with ``.loss``), ``cross_entropy`` | ``mse``, or ``loss(output) -> scalar``."""
    from workloads.user_module import split_inputs
    if not isinstance(module, torch.nn.Module):
        raise BadInput("module", type(module).__name__, "a torch.nn.Module")
    args, kwargs = split_inputs(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture_train(module, args, kwargs, loss=loss, model=model, dtype=dtype,
                             batch=batch, seq=seq)
