"""Quality of a model architecture, without training data (none can be downloaded).

``quality`` is higher-is-better and relative to the zoo's reference architecture of the same
model (its defaults), so ``quality >= 0.95`` reads "at least 95 % of the reference":

* ``llm``: Chinchilla loss (:mod:`dse.quality.chinchilla`), quality = ``L_ref / L``, with
  the architecture's parameter count ``N`` and ``D`` training tokens (``tokens``, or
  ``tokens_per_param x N``). Raw value: the loss, nats/token.
* ``vision`` (CNNs, ViT): NASWOT zero-cost proxy (:mod:`dse.quality.naswot`), quality =
  ``score / score_ref``. Parameters and FLOPs are the ``params`` and ``flops`` metrics.
* ``neural_field``: PSNR of an image fit (:mod:`dse.quality.fieldfit`), quality =
  ``PSNR / PSNR_ref``. Raw value: PSNR, dB.
* ``quality: {python: "package.module:function"}``: ``function(arch_dict)`` returns the quality
  itself (any family), used as is.
* ``quality: published``: measured ImageNet top-1 of trained networks from a table
  (:mod:`dse.quality.published`), quality = ``top1 / top1_ref``. Raw value: top-1, %. For an
  LLM, published perplexity per number format and quantisation method
  (:mod:`dse.quality.format_quality`), quality = ``ppl_16bit / ppl``. Raw value: perplexity.

Encoders (BERT) and micro-benchmarks have no built-in proxy: give a ``python`` function.
"""

from __future__ import annotations

import importlib
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from dse.errors import BadInput

#: Families with a built-in proxy -> the proxy's name.
BUILTIN = {"llm": "chinchilla", "vision": "naswot", "neural_field": "psnr"}


@dataclass(frozen=True)
class QualityConfig:
    """``quality:`` of a study file."""

    python: str | None = None
    tokens: float | None = None
    tokens_per_param: float = 20.0
    steps: int = 200
    source: str = "proxy"          # "proxy" (the family's built-in) or "published"
    table: str | None = None       # with "published": a table file (default: the shipped one)
    method: str | None = None      # LLM formats: the quantisation method (default: the best)


@dataclass(frozen=True)
class QualityValue:
    """``value``: the quality (higher is better); ``raw``: the proxy's own number;
    ``method``: which proxy; ``detail``: for ``published``, the table entry and its source."""

    value: float
    raw: float
    method: str
    detail: str = ""


def source_text(stored: dict[str, Any]) -> str:
    """What rated a trial, from its stored ``{method, raw, value, detail}``: ``naswot``, or
    ``published: resnet34 (torchvision, [R])``."""
    method, detail = stored.get("method", ""), stored.get("detail", "")
    return f"{method}: {detail}" if detail else str(method)


def method_for(family: str, config: QualityConfig) -> str | None:
    """The proxy that rates a model of ``family`` under ``config``, or None."""
    if config.python:
        return "python"
    if config.source == "published":
        return "published"
    return BUILTIN.get(family)


def load_function(spec: str, field: str = "quality.python") -> Callable[[dict], Any]:
    """Import ``package.module:function``; :class:`BadInput` if it cannot be found."""
    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise BadInput(field, spec, "expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of the user's module
        raise BadInput(field, spec, f"cannot import {module_name} ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise BadInput(field, spec, f"{module_name} has no function {func_name}")
    return fn


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"{what} returned {v!r}, expected a finite number")
    return float(v)


class QualityModel:
    """Rates architectures of zoo models; results are cached per (model, architecture)."""

    def __init__(self, config: QualityConfig):
        self.config = config
        self._fn = load_function(config.python) if config.python else None
        self._cache: dict[str, QualityValue] = {}
        self._raw_cache: dict[str, float] = {}

    def __call__(self, model: str, arch: dict[str, Any],
                 formats: dict[str, str] | None = None, base: str = "bf16") -> QualityValue:
        """The quality of ``model`` at ``arch`` (with its tensors in ``formats`` over the
        ``base`` dtype: only ``published`` rates formats, from the format-quality table)."""
        key = json.dumps([model, arch, formats, base], sort_keys=True, default=str)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._rate_formats(model, arch, formats, base)
        return hit

    def _rate_formats(self, model: str, arch: dict[str, Any], formats: dict[str, str] | None,
                      base: str) -> QualityValue:
        from workloads.zoo import get_model
        if self.config.source == "published" and get_model(model).family == "llm":
            from dse.quality.format_quality import format_quality
            v, raw, detail = format_quality(model, arch, formats, base, self.config.method,
                                            self.config.table)
            return QualityValue(v, raw, "published", detail)
        if formats:
            from dse.quality.format_quality import quantised_roles
            if quantised_roles(formats, base):
                raise BadInput("quality", self.config.source, "expected quality: published for "
                               "an LLM in number formats (the proxies do not see formats)")
        return self._rate(model, arch)

    def _rate(self, model: str, arch: dict[str, Any]) -> QualityValue:
        from workloads.zoo import get_model

        spec = get_model(model)
        if self._fn is not None:
            v = _number(self._fn(dict(arch)), f"quality function {self.config.python}")
            return QualityValue(v, v, "python")
        if self.config.source == "published":
            return self._published(model, arch)
        method = BUILTIN.get(spec.family)
        if method is None:
            raise BadInput("quality", model, f"no built-in quality proxy for {spec.family} "
                           "models; give quality: {python: 'package.module:function'}")
        raw = self.raw(spec, arch, method)
        ref = self.raw(spec, spec.resolve_arch(None), method)
        if method == "chinchilla":  # a loss: lower is better
            value = ref / raw
        elif not math.isfinite(raw) or raw <= 0 or ref <= 0:
            value = 0.0
        else:
            value = raw / ref
        return QualityValue(value, raw, method)

    def _published(self, model: str, arch: dict[str, Any]) -> QualityValue:
        from dse.quality.published import arch_overrides, load_table

        table = load_table(self.config.table)
        entry = table.lookup(model, arch)
        ref = table.lookup(model, None)
        for what, found, shown in (("an architecture", entry, arch), ("the reference", ref, {})):
            if found is None:
                raise BadInput("quality", {model: arch_overrides(model, shown)},
                               f"expected {what} the published table {table.path} covers")
        return QualityValue(entry.top1_pct / ref.top1_pct, entry.top1_pct, "published",
                            table.source_text(entry))

    def raw(self, spec, arch: dict[str, Any], method: str) -> float:
        """The proxy's own number for ``arch`` (cached)."""
        key = json.dumps([spec.name, method, arch], sort_keys=True, default=str)
        if key not in self._raw_cache:
            self._raw_cache[key] = self._compute(spec, arch, method)
        return self._raw_cache[key]

    def _compute(self, spec, arch: dict[str, Any], method: str) -> float:
        with single_thread():
            return self._compute_proxy(spec, arch, method)

    def _compute_proxy(self, spec, arch: dict[str, Any], method: str) -> float:
        if method == "chinchilla":
            from dse.quality.chinchilla import loss_nats
            n = count_params(spec, arch)
            tokens = self.config.tokens or self.config.tokens_per_param * n
            return loss_nats(n, tokens)
        if method == "naswot":
            from dse.quality.naswot import score_vision
            check_proxy_size(spec, arch, method)
            return score_vision(spec.build, arch)
        from dse.quality.fieldfit import fit_psnr
        return fit_psnr(arch, self.config.steps)


#: Most parameters a proxy that builds real weights (NASWOT: fp32 on the CPU, with its
#: activations for a batch) may build [E: 250 M parameters = 1 GB of fp32 weights, a few GB
#: with the proxy's activations; a study's worker runs beside others on a small machine].
MAX_PROXY_PARAMS = 250_000_000


def check_proxy_size(spec, arch: dict[str, Any], method: str) -> None:
    """Refuse (one :class:`BadInput`) an architecture that ``method`` would build with real
    weights beyond :data:`MAX_PROXY_PARAMS`, counted on the meta device first."""
    if method != "naswot":
        return
    from dse.quality.naswot import vision_arch_for_proxy
    n = count_params(spec, vision_arch_for_proxy(arch))
    if n > MAX_PROXY_PARAMS:
        raise BadInput("quality", spec.name, f"a model the built-in NASWOT proxy can build: it "
                       f"builds real weights, and {n / 1e9:.3g} B parameters is more than "
                       f"{MAX_PROXY_PARAMS / 1e6:.0f} M; give quality: {{python: "
                       "'package.module:function'} or quality: {source: published}")


@contextmanager
def single_thread():
    """Run torch on one thread: the proxies' tensors are small, and a study runs one worker per
    core, so intra-op threads only contend (measured: a 40-step image fit took 9.5 s with 2
    threads on a busy 2-core machine and 0.04 s with 1)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def count_params(spec, arch: dict[str, Any]) -> int:
    """Unique parameters of ``spec.build(arch)`` (tied weights once), built on the meta device
    so that nothing is allocated."""
    import torch

    with torch.device("meta"):
        module = spec.build(arch)
    seen: set[int] = set()
    total = 0
    for p in module.parameters():  # parameters() already yields a tied tensor once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total
