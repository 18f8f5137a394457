"""Every ``model_type`` transformers builds from a config, as a user would bring it: its
published config where ``tests/data/hf/published/`` holds one (else transformers' default),
cut to a few layers, captured in every phase its family runs, FLOP-checked against torch's
``FlopCounterMode`` on the same module and inputs, and simulated on ``npu`` and ``gpu:h200``.

Each (type, phase) ends in one status:

* ``captured`` — a workload (then ``flops_ok``: our matmul / conv / attention / recurrent
  FLOPs within 1 % of ``FlopCounterMode``, and routed-expert / scan FLOPs equal to their
  analytic counts; ``simulated``: both designs ran it);
* ``refused`` — one clean line (:class:`dse.errors.DSEError`) naming what is missing;
* ``transformers`` — transformers itself cannot build the model or run its own forward on
  plain inputs (listed with its error, never counted as ours);
* ``environment`` — transformers needs a library this environment lacks (gemma3n's vision
  tower needs Pillow and then timm, hence a torchvision built for the pinned CPU torch: not
  installed; Pillow alone does not make it build);
* ``failed`` — anything else (a raw exception: ours to fix).

``python benchmarks/capture_corpus.py --all-types`` prints the table and the totals per
group (causal LMs: prefill and decode; multimodal: forward).
"""

from __future__ import annotations

import json
import signal
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "tests" / "data" / "hf" / "published"
#: Kinds whose FLOPs FlopCounterMode counts on the same module.
COUNTED_KINDS = ("matmul", "conv", "attention", "recurrent")
#: Attention custom ops (checked against their analytic FLOPs instead).
CUSTOM_ATTENTION = ("mla_attention",)
#: Layer-count keys cut in the small configs (in sub-configs too).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
              "decoder_layers", "num_decoder_layers", "num_encoder_layers", "depth",
              "num_text_layers", "num_vision_layers")
#: Deepest cut model: enough layers that every kind of a hybrid's ``layer_types`` appears.
MAX_SMALL_LAYERS = 8
#: Seconds one (type, phase) may take before it is recorded as failed.
CASE_TIMEOUT_S = 240
SIZES = {"batch": 1, "seq": 32, "context": 64}


@dataclass
class Case:
    model_type: str
    group: str
    phase: str
    source: str
    status: str = "failed"
    flops_ok: bool | None = None
    simulated: bool = False
    flops: int = 0
    reference_flops: int = 0
    seconds: float = 0.0
    error: str = ""
    unknown_ops: dict[str, int] = field(default_factory=dict)
    #: routed experts: None when the config names no more than one expert per layer, else
    #: whether the capture has ``moe`` ops and ``active_params < params``
    experts_routed: bool | None = None
    #: what the reference FLOPs ran: ``eager`` (the module) or ``exported graph``
    reference: str = ""


def groups() -> dict[str, str]:
    """model_type -> ``causal`` | ``multimodal`` | ``other`` for every type transformers maps
    to a model class."""
    from transformers.models.auto import modeling_auto as ma
    out = {mt: "other" for mt in ma.MODEL_MAPPING_NAMES}
    for mt in (set(ma.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES)
               | set(ma.MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES)):
        out[mt] = "multimodal"
    for mt in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        out[mt] = "causal"
    return out


def published() -> dict[str, dict[str, Any]]:
    """The shipped published configs: model_type -> {"config", "source", ...}."""
    out = {}
    for path in sorted(PUBLISHED.glob("*.json")):
        entry = json.loads(path.read_text())
        out.setdefault(entry["config"]["model_type"], {**entry, "file": path.name})
    return out


def config_of(model_type: str, corpus: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str]:
    if model_type in corpus:
        return dict(corpus[model_type]["config"]), corpus[model_type]["source"]
    from transformers import AutoConfig
    config = AutoConfig.for_model(model_type)
    return {"model_type": model_type, **config.to_dict()}, default_source(type(config))


def as_causal_lm(model_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as the causal LM transformers maps ``model_type`` to (``BertLMHeadModel``,
    ``BartForCausalLM``...): its ``architectures`` name that class, and it is a decoder."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as M
    name = M.get(model_type)
    if not name or data.get("architectures"):
        return data
    out = {**data, "architectures": [name]}
    if "is_decoder" in data or data.get("is_encoder_decoder"):
        out.update(is_decoder=True, is_encoder_decoder=False)
    return out


def default_source(config_class) -> str:
    """``transformers default`` and the checkpoint its config class's docstring says the
    defaults reproduce (``[org/name](https://huggingface.co/org/name)``), where it names one."""
    import re
    m = re.search(r"\[([\w.\-]+/[\w.\-]+)\]\(https://huggingface\.co/", config_class.__doc__ or "")
    return "transformers default" + (f" (= {m.group(1)} per its docstring)" if m else "")


def _layers_read(data: dict[str, Any]) -> int:
    """Vision layers a multimodal config reads features from (``vision_feature_layer(s)``,
    negative from the end): the cut tower must keep that many."""
    layers = [data.get(k) for k in ("vision_feature_layer", "vision_feature_layers")]
    adapter = data.get("adapter_config")
    if isinstance(adapter, dict):
        layers.append(adapter.get("vision_feature_layer"))
    need = 0
    for v in layers:
        for i in (v if isinstance(v, list) else [v]):
            if isinstance(i, int) and not isinstance(i, bool):
                need = max(need, -i if i < 0 else i + 1)
    return need


def _global_layers_read(data: dict[str, Any]) -> int:
    """Layers a SAM-style tower must keep: up to its first global-attention layer
    (``global_attn_indexes[0]``), whose hidden state DeepSeek-VL-Hybrid reads; 0 without."""
    idx = data.get("global_attn_indexes")
    ok = isinstance(idx, (list, tuple)) and idx and all(isinstance(i, int) for i in idx)
    return min(idx) + 1 if ok else 0


def small_config(data: dict[str, Any], min_layers: int = 0) -> dict[str, Any]:
    """``data`` cut to a few layers: 2, or as many as it takes for every kind of layer a
    hybrid lists (``layer_types`` and the like, pattern strings such as Nemotron-H's) to appear
    once; per-layer lists and pattern strings cut to match, per-layer dicts (``per_layer_config``)
    to the kept layers, layer counts that split the total (``n_input_layers``...) split anew,
    dense-prefix counts to 1; in sub-configs too."""
    out: dict[str, Any] = {}
    total = next((data[k] for k in LAYER_KEYS if isinstance(data.get(k), int)), None)
    n = 2
    read = _global_layers_read(data)
    if read:   # a tower whose output is read at its first global-attention layer (SAM)
        min_layers = max(min_layers, read)
        out["global_attn_indexes"] = [i for i in data["global_attn_indexes"] if i < read]
    if total:
        for k, v in data.items():
            if _per_layer(k, v, total) and (isinstance(v, str) or all(isinstance(x, str) for x in v)):
                kinds, seen = set(v), set()
                for i, x in enumerate(v):
                    seen.add(x)
                    if seen == kinds:
                        n = max(n, i + 1)
                        break
        shared = data.get("num_kv_shared_layers")
        all_shared = isinstance(shared, int) and shared >= total   # a drafter reading all its
        if isinstance(shared, int) and 0 < shared < total:   # KV from the target model's cache
            n += 2   # the last layers reuse earlier layers' KV: keep two of them
            out["num_kv_shared_layers"] = 2
        parts = {k: v for k, v in data.items() if k.endswith("_layers") and k not in LAYER_KEYS
                 and isinstance(v, int) and not isinstance(v, bool) and v > 0}
        split = len(parts) > 1 and sum(parts.values()) == total
        if split:
            n = max(n, 2 * len(parts))
        if data.get("model_type") in TIED_SHARED_BLOCK:
            n = max(n, _second_of_each(data, total))
        n = min(max(n, 2, min_layers), max(MAX_SMALL_LAYERS, min_layers), total)
        if all_shared:
            out["num_kv_shared_layers"] = n
        if split:
            out.update(_split(parts, n))
            n = sum(out[k] for k in parts)
    for k, v in data.items():
        if k in out:
            continue
        if k in LAYER_KEYS and isinstance(v, int) and v > n:
            out[k] = n
        elif total and total > n and _per_layer(k, v, total):
            out[k] = v[:n]
        elif total and isinstance(v, dict) and v and all(str(x).isdigit() for x in v):
            out[k] = {x: y for x, y in v.items() if int(x) < n}
        elif k.startswith("first_k_dense") and isinstance(v, int) and v > 1:
            out[k] = 1
        elif k.endswith("_offset") and isinstance(v, int) and v >= n:
            out[k] = n - 1
        elif k.endswith("_period") and isinstance(v, int) and v > n:
            out[k] = n
        elif isinstance(v, dict) and (k.endswith("_config") or k == "text_config"):
            out[k] = small_config(v, _layers_read(data) if k == "vision_config" else 0)
        else:
            out[k] = v
    return out


#: Hybrids whose one shared attention block is tied across their hybrid layers: transformers
#: ties the second and later hybrid layers' copies to the first (Zamba's ``_tied_weights_keys``,
#: a pattern that must match a layer), so a cut keeps two hybrid layers.
TIED_SHARED_BLOCK = ("zamba",)


def _second_of_each(data: dict[str, Any], total: int) -> int:
    """Layers up to the second occurrence of every kind a per-layer kind list names."""
    n = 0
    for k, v in data.items():
        if _per_layer(k, v, total) and all(isinstance(x, str) for x in v):
            for kind in set(v):
                at = [i for i, x in enumerate(v) if x == kind]
                n = max(n, (at[1] if len(at) > 1 else at[0]) + 1)
    return n


def _per_layer(key: str, value: Any, total: int) -> bool:
    """A per-layer list of ``total`` scalars, or a pattern string with one character per layer
    (Nemotron-H's ``hybrid_override_pattern``; a string that merely has ``total`` letters, such
    as BigBird's ``attention_type``, is not one)."""
    if isinstance(value, str):
        return len(value) == total and ("pattern" in key or "layer" in key)
    return (isinstance(value, list) and len(value) == total
            and all(isinstance(x, (str, int, float, bool)) for x in value))


def _split(parts: dict[str, int], n: int) -> dict[str, int]:
    """``n`` layers split over ``parts`` in proportion, in pairs (a config may count an
    attention and an MLP block as two, Dory's does), at least one pair each."""
    total = sum(parts.values())
    out = {k: 2 * max(1, v * n // total // 2) for k, v in parts.items()}
    biggest = max(parts, key=parts.get)
    out[biggest] = max(2, out[biggest] + 2 * ((n - sum(out.values())) // 2))
    return out


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"over {CASE_TIMEOUT_S} s")


def run_case(model_type: str, group: str, phase: str | None, data: dict[str, Any],
             source: str, simulate: bool = True, full: dict[str, Any] | None = None
             ) -> list[Case]:
    """Capture, check and simulate ``data`` in ``phase`` (None: every phase of its family);
    ``full``: the uncut config, built when transformers fails to build ``data`` (a failure of
    both is transformers', of the cut one only is the cut's)."""
    from workloads import hf
    rows = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config, _, _, sizes = hf.resolve(dict(data), None, 1, None, None, None)
        phases = [phase] if phase else list(hf.phases_of(sizes["kind"]))
    except Exception as exc:
        status, error = _classify(exc)
        return [Case(model_type, group, phase or "-", source, status, error=error)]
    for ph in phases:
        row = Case(model_type, group, ph, source)
        t0 = time.perf_counter()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_TIMEOUT_S)
        try:
            _capture_check(row, data, ph, simulate)
        except Exception as exc:
            row.status, row.error = _classify(exc)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        row.seconds = time.perf_counter() - t0
        if row.status == "transformers" and full is not None and _builds(full):
            row.status = "failed"
            row.error = "the cut config does not build (the full one does): " + row.error
        elif (row.status == "failed" or row.error.startswith("torch.export rejected")) \
                and ph in ("prefill", "decode", "forward"):
            own = _own_forward_fails(data, ph)
            if own:
                what = "text-only forward" if ph == "forward" else "forward"
                row.status, row.error = "transformers", f"its own {what} fails: {own}"
        rows.append(row)
    return rows


def _own_forward_fails(data: dict[str, Any], phase: str = "prefill") -> str:
    """transformers' error when the model's own eager forward on plain ``input_ids`` (meta
    tensors, as an export runs it, no project patch; in ``decode``, a prefill with its cache
    and then one more token onto that cache, as ``generate`` does; a multimodal ``forward``
    on text alone, which its language model must take) raises inside transformers' code; ""
    when it runs, fails elsewhere, fails only because meta tensors hold no values (a
    data-dependent model: the capture's limit, not transformers'), or asks for an input."""
    from workloads import hf
    try:
        config = hf.make_config(dict(data))
        model = hf.build_module(config, hf.task(config))
        with torch.device("meta"), hf.as_if_traced(), torch.no_grad(), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ids = torch.zeros(SIZES["batch"], SIZES["seq"], dtype=torch.long)
            out = model(input_ids=ids, use_cache=phase == "decode")
            if phase == "decode":
                cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
                model(input_ids=ids[:, :1], use_cache=True, **{hf._cache_arg(model): cache})
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "/torch/" not in f.filename]   # the innermost frame outside torch
        data_dependent = any(w in str(exc) for w in ("meta tensor", "data-dependent",
                                                     "unallocated storage"))
        wants_input = any(w in str(exc) for w in ("specify", "pixel_values", "input_features",
                                                  "required positional argument"))
        if frames and "/transformers/" in frames[-1].filename and not (data_dependent
                                                                      or wants_input):
            f = frames[-1]
            return f"{type(exc).__name__}: {_short(exc)} [{Path(f.filename).name}:{f.lineno}]"[:300]
    return ""


def _builds(data: dict[str, Any]) -> bool:
    """transformers builds ``data`` (on meta tensors)."""
    from workloads import hf
    try:
        config = hf.make_config(dict(data))
        hf.build_module(config, hf.task(config))
        return True
    except Exception:
        return False


def _capture_check(row: Case, data: dict[str, Any], phase: str, simulate: bool) -> None:
    from workloads import hf
    with warnings.catch_warnings(), hf.refusing(str(data.get("model_type")), phase):
        warnings.simplefilter("ignore")
        prepared = hf.prepare(dict(data), phase, SIZES["batch"], SIZES["seq"], SIZES["context"],
                              None)
        record: dict = {}
        w = hf.capture_prepared(prepared, "bf16", "concat", record)
        row.status, row.unknown_ops = "captured", w.unknown_ops
        if config_experts(data) > 1:
            row.experts_routed = (any(op.kind == "moe" for op in w.ops)
                                  and w.active_params < w.params)
        row.flops = sum(op.flops for op in w.ops   # custom ops FlopCounterMode cannot see:
                        if op.kind in COUNTED_KINDS and op.target not in CUSTOM_ATTENTION)
        reference = _reference_flops(prepared, phase, record["exported"])
        if isinstance(reference, str):
            row.error = f"no FLOP reference: {reference}"
        else:
            row.reference_flops, row.reference = reference
            row.flops_ok = (abs(row.flops - row.reference_flops)
                            <= 0.01 * max(row.reference_flops, 1)) and _analytic_ok(w)
        if simulate:
            row.simulated = all(_simulates(w, a) for a in ("npu", "gpu:h200"))


def _reference_flops(prepared, phase: str, exported) -> tuple[int, str] | str:
    """torch's ``FlopCounterMode`` count of the module on its inputs, run eagerly on meta
    tensors; where that eager run cannot go (``.item()`` on a meta tensor: a check transformers
    makes outside export; a text placeholder check ``embeds[mask]`` on meta), of the exported
    graph run on the same inputs (the graph's own ATen calls, counted by torch). Returns
    ``(flops, "eager" | "exported graph")`` or the error."""
    from torch.utils.flop_counter import FlopCounterMode
    from workloads import hf
    try:
        with FlopCounterMode(display=False) as fc, hf.capture_patches(prepared.module, phase):
            with hf.as_if_traced(), torch.no_grad():
                prepared.module(**prepared.kwargs)
        return int(fc.get_total_flops()), "eager"
    except Exception as eager_exc:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        from workloads.hf_inputs import vision_helpers_eager
        try:   # fake tensors: the graph's checks (.item()) become symbols, not errors; its
            # CPU constants (audio masks, cu_seqlens) meet meta activations as in the capture
            with vision_helpers_eager(), FakeTensorMode(allow_non_fake_inputs=True,
                                                        shape_env=ShapeEnv()), \
                    FlopCounterMode(display=False) as fc, torch.no_grad():
                exported.module()(**prepared.kwargs)
            return int(fc.get_total_flops()), "exported graph"
        except Exception:
            return _classify(eager_exc)[1]


def _simulates(w, accelerator: str) -> bool:
    """The simulator runs ``w`` on ``accelerator``: a latency, or an infeasible design with
    its reason (a model that does not fit the default design is an answer, not a failure)."""
    from dse import api
    from dse.errors import InfeasibleDesign
    try:
        return api.simulate(w, accelerator).latency_s > 0
    except InfeasibleDesign:
        return True


def config_experts(data: dict[str, Any]) -> int:
    """The most routed experts any (sub-)config names (``num_experts``, ``n_routed_experts``,
    ``num_local_experts``, ``moe_num_experts``...; shared experts not counted)."""
    n = 0
    for k, v in data.items():
        if isinstance(v, dict):
            n = max(n, config_experts(v))
        elif (isinstance(v, int) and not isinstance(v, bool) and str(k).endswith("experts")
              and "shared" not in k and "per_tok" not in k):
            n = max(n, v)
    return n


def _analytic_ok(w) -> bool:
    """Routed-expert and scan FLOPs equal their analytic counts (dropless: every token)."""
    from workloads.scan_op import scan_flops
    for op in w.ops:
        a = op.attrs
        if op.kind == "moe" and a.get("capacity_factor") == 0:
            want = 2 * a["tokens"] * (a["top_k"] or 1) * sum(n * k for n, k in a["gemms"])
            if abs(op.flops - want) > 0.01 * want:
                return False
        if op.target == "mla_attention":
            b, h, s, n = (a[k] for k in ("batch", "heads", "q_len", "kv_len"))
            if op.flops != 2 * b * h * s * n * (a["head_dim"] + a["value_dim"]):
                return False
        if op.kind == "scan" and op.flops < scan_flops(a["batch"], a["channels"], a["seq"],
                                                       a["state"], False, False):
            return False
    return True


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _classify(exc: BaseException) -> tuple[str, str]:
    """(status, error): ``transformers`` when transformers cannot build the model from the
    config (its own defaults included), ``refused`` for the project's clean one-line errors,
    ``failed`` for everything else (an :class:`~workloads.hf.UnexpectedCaptureError` or a raw
    exception)."""
    from dse.errors import DSEError
    from workloads.hf import UnexpectedCaptureError
    if isinstance(exc, UnexpectedCaptureError) or not isinstance(exc, DSEError):
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" [{Path(tb[-1].filename).name}:{tb[-1].lineno}]" if tb and not isinstance(
            exc, DSEError) else ""
        return "failed", f"{type(exc).__name__}: {_short(exc)}{where}"[:400]
    text = _short(exc)
    if "library but it was not found in your environment" in text:
        return "environment", text
    if text.startswith("transformers could not build"):
        return "transformers", text
    return "refused", text


def sweep(types: list[str] | None = None, phase: str | None = None, simulate: bool = True,
          progress=None) -> list[Case]:
    from transformers import AutoConfig  # noqa: F401  (import once, outside the timings)
    grp = groups()
    corpus = published()
    rows: list[Case] = []
    for mt in types or sorted(grp):
        try:
            data, source = config_of(mt, corpus)
            if grp.get(mt) == "causal":
                data = as_causal_lm(mt, data)
            small = small_config(data)
        except Exception as exc:
            rows.append(Case(mt, grp.get(mt, "other"), phase or "-", "transformers default",
                             "transformers", error=f"config: {type(exc).__name__}: {_short(exc)}"))
            continue
        for r in run_case(mt, grp.get(mt, "other"), phase, small, source, simulate, data):
            rows.append(r)
            if progress:
                progress(r)
    return rows


def summary(rows: list[Case]) -> dict[str, Any]:
    """Per group: types, and how many captured every phase; counts by status."""
    out: dict[str, Any] = {}
    by_type: dict[str, list[Case]] = {}
    for r in rows:
        by_type.setdefault(r.model_type, []).append(r)
    for group in ("causal", "multimodal", "other"):
        types = {mt: rs for mt, rs in by_type.items() if rs[0].group == group}
        if not types:
            continue
        status: dict[str, int] = {}
        for rs in types.values():
            for r in rs:
                status[r.status] = status.get(r.status, 0) + 1
        full = [mt for mt, rs in types.items() if all(r.status == "captured" for r in rs)
                and (group != "causal" or {r.phase for r in rs} >= {"prefill", "decode"})]
        # types whose every failure is ours: none listed as transformers' or the environment's
        ours = [mt for mt, rs in types.items()
                if not any(r.status in ("transformers", "environment") for r in rs)]
        out[group] = {"types": len(types), "all_phases_captured": len(full),
                      "share": len(full) / len(types), "cases_by_status": status,
                      "types_ours": len(ours), "share_of_ours": len(full) / max(len(ours), 1),
                      "flops_ok": sum(1 for rs in types.values() for r in rs if r.flops_ok),
                      "flops_checked": sum(1 for rs in types.values() for r in rs
                                           if r.flops_ok is not None),
                      "simulated": sum(1 for rs in types.values() for r in rs if r.simulated),
                      "experts_not_routed": sorted({r.model_type for rs in types.values()
                                                    for r in rs if r.experts_routed is False})}
    return out


def print_rows(rows: list[Case]) -> None:
    print(f"{'model_type':<28} {'group':<10} {'phase':<8} {'status':<12} {'flops':>5} "
          f"{'sim':>3} {'s':>6}  source / error")
    for r in rows:
        print(_line(r))


def _line(r: Case) -> str:
    flops = "-" if r.flops_ok is None else ("ok" if r.flops_ok else "DIFF")
    note = r.error or (r.source if not r.source.startswith("transformers default") else "")
    if r.unknown_ops:
        note = f"unknown {r.unknown_ops} " + note
    if r.experts_routed is False:
        note = "EXPERTS NOT ROUTED " + note
    return (f"{r.model_type:<28} {r.group:<10} {r.phase:<8} {r.status:<12} {flops:>5} "
            f"{'yes' if r.simulated else '-':>3} {r.seconds:>6.1f}  {note[:200]}")


def save(rows: list[Case], path: Path) -> None:
    path.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": summary(rows)},
                               indent=1))


def published_table(decode_context: int = 1024) -> list[dict[str, Any]]:
    """Every shipped published config at full depth: parameters and active parameters of a
    prefill capture (meta tensors) against the counts its model card states, and the decode
    FLOPs per token (``decode_context`` cached tokens, batch 1; MLA absorbed)."""
    from workloads import hf
    rows = []
    for mt, entry in sorted(published().items()):
        row: dict[str, Any] = {"model_type": mt, "name": entry["name"]}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                w = hf.workload_from_hf_config(dict(entry["config"]), phase="prefill", batch=1,
                                               seq=8, use_cache=False)
                d = hf.workload_from_hf_config(dict(entry["config"]), phase="decode", batch=1,
                                               context=decode_context, use_cache=False,
                                               kv_update="in_place")
            row.update(params=w.params, active_params=w.active_params,
                       published_params=entry.get("published_params"),
                       published_active_params=entry.get("published_active_params"),
                       decode_flops=d.flops)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {_short(exc)}"
        rows.append(row)
    return rows


def print_published(rows: list[dict[str, Any]]) -> None:
    def b(x):
        return f"{x / 1e9:8.2f}B" if x else "       -"
    print(f"{'model_type':<12} {'params':>9} {'published':>9} {'active':>9} {'published':>9} "
          f"{'decode GFLOP/token':>18}  name")
    for r in rows:
        if "error" in r:
            print(f"{r['model_type']:<12} {r['error']}")
            continue
        print(f"{r['model_type']:<12} {b(r['params'])} {b(r['published_params'])} "
              f"{b(r['active_params'])} {b(r['published_active_params'])} "
              f"{r['decode_flops'] / 1e9:18.2f}  {r['name']}")
