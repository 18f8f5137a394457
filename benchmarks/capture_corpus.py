"""Capture corpus: real models nobody here wrote, built from their public constructors or
configs (no weights, meta tensors), captured, FLOP-checked and simulated.

For every model: capture time (s), our FLOPs of the kinds torch's ``FlopCounterMode`` counts
(matmul, conv, attention, recurrent) against FlopCounterMode run on the same module and inputs
(match: within 1 %), MoE and scan FLOPs against their analytic counts (FlopCounterMode does not
count the grouped experts nor the scan: they are custom ops), unknown ops, and whether the
workload simulates on ``gpu:h100``. Sources: Hugging Face configs (transformers' defaults with
layers cut to 2: the per-layer ops are the same), the zoo, and torchvision / timm when they
import (they are not dependencies: ``PYTHONPATH=/path/with/timm_and_torchvision``).

Usage:
    python benchmarks/capture_corpus.py                 # the corpus below
    python benchmarks/capture_corpus.py --all-hf        # + every model type transformers builds
    python benchmarks/capture_corpus.py --only llama mixtral --json out.json
    python benchmarks/capture_corpus.py --published     # published configs at full depth
    python benchmarks/capture_corpus.py --all-types [--types llama jamba] [--json out.json]
        # every model type as a user brings it (published configs, every phase; see
        # benchmarks/hf_type_sweep.py): captured / FLOPs-checked / simulated / refused /
        # transformers' own failures / failed, per type and per group
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

#: Kinds whose FLOPs FlopCounterMode counts on the same module.
COUNTED_KINDS = ("matmul", "conv", "attention", "recurrent")
#: Layer-count keys cut to 2 in the small Hugging Face configs.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
              "decoder_layers", "num_decoder_layers")

#: (model_type, phases) of the Hugging Face part of the corpus, by family.
HF_CORPUS: list[tuple[str, tuple[str, ...]]] = [
    # decoder-only, prefill and decode
    ("gpt2", ("prefill", "decode")), ("llama", ("prefill", "decode")),
    ("mistral", ("prefill", "decode")), ("qwen2", ("prefill", "decode")),
    ("qwen3", ("prefill", "decode")), ("gemma", ("prefill", "decode")),
    ("gemma2", ("prefill", "decode")), ("phi3", ("prefill", "decode")),
    ("falcon", ("prefill", "decode")), ("gpt_neox", ("prefill", "decode")),
    ("opt", ("prefill", "decode")), ("bloom", ("prefill", "decode")),
    # mixture of experts
    ("mixtral", ("prefill", "decode")), ("qwen3_moe", ("prefill", "decode")),
    ("qwen2_moe", ("prefill", "decode")), ("olmoe", ("prefill", "decode")),
    # state space
    ("mamba", ("prefill", "decode")), ("falcon_mamba", ("prefill", "decode")),
    # encoders
    ("bert", ("forward",)), ("roberta", ("forward",)), ("deberta", ("forward",)),
    ("deberta-v2", ("forward",)), ("electra", ("forward",)), ("distilbert", ("forward",)),
    ("albert", ("forward",)),
    # encoder-decoder
    ("t5", ("forward", "decode")), ("bart", ("forward", "decode")),
    ("whisper", ("forward", "decode")), ("marian", ("forward", "decode")),
    # vision
    ("vit", ("forward",)), ("deit", ("forward",)), ("beit", ("forward",)),
    ("dinov2", ("forward",)), ("swin", ("forward",)), ("swinv2", ("forward",)),
    ("convnext", ("forward",)), ("convnextv2", ("forward",)), ("resnet", ("forward",)),
    ("regnet", ("forward",)), ("mobilenet_v1", ("forward",)), ("mobilenet_v2", ("forward",)),
    ("efficientnet", ("forward",)), ("levit", ("forward",)), ("poolformer", ("forward",)),
    ("mobilevit", ("forward",)), ("cvt", ("forward",)), ("focalnet", ("forward",)),
    ("pvt_v2", ("forward",)), ("bit", ("forward",)), ("data2vec-vision", ("forward",)),
    # multimodal
    ("clip", ("forward",)), ("siglip", ("forward",)),
]

#: torchvision classification models (224 px unless noted) and timm models, when installed.
TORCHVISION = ["alexnet", "vgg11", "vgg16_bn", "resnet18", "resnet50", "resnext50_32x4d",
               "wide_resnet50_2", "squeezenet1_0", "densenet121", "googlenet", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0", "mnasnet1_0",
               "efficientnet_b0", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_400mf",
               "convnext_tiny", "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t", "inception_v3"]
TIMM = ["resnet50", "convnext_tiny", "vit_small_patch16_224", "deit_small_patch16_224",
        "swin_tiny_patch4_window7_224", "efficientnet_b0", "mobilenetv3_large_100",
        "regnety_016", "levit_128", "coatnet_0_rw_224", "maxvit_tiny_tf_224", "sequencer2d_s",
        "mixer_b16_224", "resmlp_12_224", "poolformer_s12", "cait_xxs24_224", "xcit_tiny_12_p16_224",
        "ghostnet_100", "dla34", "cspresnet50", "repvgg_a2", "res2net50_26w_4s", "nfnet_f0",
        "edgenext_small", "efficientformer_l1", "fastvit_t8", "hrnet_w18_small", "tinynet_a",
        "rexnet_100", "lambda_resnet26t"]


@dataclass
class Row:
    name: str
    source: str
    captured: bool = False
    capture_s: float = 0.0
    ops: int = 0
    flops: int = 0
    reference_flops: int = 0
    flops_match: bool = False
    analytic_match: bool = True
    simulated: bool = False
    unknown_ops: dict[str, int] = field(default_factory=dict)
    error: str = ""


def small_hf_config(model_type: str, **extra: Any) -> dict[str, Any]:
    """transformers' default config of ``model_type`` with at most 2 layers (``layer_types``
    cut to match, in sub-configs too) and ``extra`` overrides."""
    from transformers import AutoConfig
    full = AutoConfig.for_model(model_type).to_dict()

    def shrink(d: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in base.items():
            if k in LAYER_KEYS and isinstance(v, int) and v > 2:
                out[k] = 2
            elif k == "layer_types" and isinstance(v, list) and len(v) > 2:
                out[k] = v[:2]
            elif k.endswith("_config") and isinstance(v, dict):
                sub = shrink({}, v)
                if sub:
                    out[k] = {**v, **sub}
        return out
    return {"model_type": model_type, **shrink({}, full), **extra}


def _reference_flops(module, kwargs) -> int:
    from workloads.hf import as_if_traced, selective_scan_as_one_op
    with FlopCounterMode(display=False) as fc, selective_scan_as_one_op(), as_if_traced(), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module(**kwargs)
    return int(fc.get_total_flops())


def _analytic_ok(w) -> bool:
    """MoE and scan FLOPs equal their analytic counts (dropless MoE: every routed token)."""
    from workloads.scan_op import scan_flops
    for op in w.ops:
        a = op.attrs
        if op.kind == "moe":
            want = 2 * a["tokens"] * (a["top_k"] or 1) * sum(n * k for n, k in a["gemms"])
            if a["capacity_factor"] == 0 and abs(op.flops - want) > 0.01 * want:
                return False
        if op.kind == "scan":
            if op.flops < scan_flops(a["batch"], a["channels"], a["seq"], a["state"], False, False):
                return False
    return True


def check(name: str, source: str, make: Callable[[], tuple[torch.nn.Module, dict]],
          capture_kwargs: dict[str, Any] | None = None, simulate: bool = True) -> Row:
    """Capture ``make()``'s module on its inputs, compare FLOPs, simulate."""
    from dse import api
    from workloads.hf import selective_scan_as_one_op
    from workloads.user_module import capture_module
    row = Row(name, source)
    try:
        module, kwargs = make()
        t = time.perf_counter()
        with selective_scan_as_one_op():
            w = capture_module(module, kwargs, **(capture_kwargs or {}))
        row.capture_s = time.perf_counter() - t
        row.captured, row.ops, row.unknown_ops = True, len(w), w.unknown_ops
        row.flops = sum(op.flops for op in w.ops if op.kind in COUNTED_KINDS)
        row.reference_flops = _reference_flops(module, kwargs)
        row.flops_match = abs(row.flops - row.reference_flops) <= 0.01 * max(row.reference_flops, 1)
        row.analytic_match = _analytic_ok(w)
        if simulate:
            r = api.simulate(w, "gpu:h100")
            row.simulated = r.latency_s > 0
    except Exception as exc:  # a corpus row records the failure and the run goes on
        row.error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
    return row


def hf_maker(model_type: str, phase: str, batch: int = 2, seq: int = 16, context: int = 32,
             **extra: Any):
    """The (module, kwargs) maker of a small Hugging Face config in ``phase``."""
    def make():
        from workloads.hf import module_and_inputs, resolve
        config, _, moe, sizes = resolve(small_hf_config(model_type, **extra), phase, batch, seq,
                                        context, None)
        return module_and_inputs(config, sizes["kind"], phase, sizes["batch"], sizes["seq"],
                                 sizes["context"], moe)
    return make


def hf_rows(entries, simulate: bool = True) -> list[Row]:
    from workloads.hf import make_config, task
    rows = []
    for mt, phases in entries:
        for phase in phases:
            try:
                causal = task(make_config(small_hf_config(mt))) == "causal"
            except Exception:
                causal = False
            rows.append(check(f"{mt}:{phase}", "hf", hf_maker(mt, phase),
                              {"phase": phase, "causal": causal}, simulate))
    return rows


def zoo_rows(simulate: bool = True) -> list[Row]:
    from workloads.zoo import get_model, model_names
    rows = []
    for name in model_names():
        spec = get_model(name)
        small = {k: 2 for k in ("n_layer",) if k in spec.arch}

        def make(spec=spec, small=small):
            arch = spec.resolve_arch(small)
            phase = spec.phases[0]
            sizes = ((2, 16, 0) if spec.family in ("llm", "encoder")
                     else (256 if spec.family == "neural_field" else 1, 1, 0))
            with torch.device("meta"):
                module = spec.build(arch).eval()
                args, kwargs = spec.inputs(arch, phase, *sizes)
            return module, {**dict(zip(_arg_names(module), args)), **kwargs}
        rows.append(check(name, "zoo", make, None, simulate))
    return rows


def _arg_names(module) -> list[str]:
    import inspect
    return [p for p in inspect.signature(module.forward).parameters]


def vision_library_rows(simulate: bool = True) -> list[Row]:
    """torchvision and timm classification models, when they import."""
    rows: list[Row] = []
    try:
        import torchvision.models as tvm
    except Exception:
        tvm = None
    try:
        import timm
    except Exception:
        timm = None

    def maker(build, size=224):
        def make():
            try:
                with torch.device("meta"):
                    return build().eval(), {"x": torch.zeros(1, 3, size, size)}
            except NotImplementedError:   # a constructor that reads its own weights: on CPU
                return build().eval(), {"x": torch.zeros(1, 3, size, size)}
        return make
    if tvm is not None:
        for name in TORCHVISION:
            kw = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
            rows.append(check(name, "torchvision", maker(lambda n=name, kw=kw: tvm.get_model(n, **kw),
                                                        299 if name == "inception_v3" else 224),
                              None, simulate))
    if timm is not None:
        for name in TIMM:
            rows.append(check(name, "timm", maker(lambda n=name: timm.create_model(n)), None, simulate))
    return rows


def torchvision_shim() -> None:
    """torchvision's C++ ops do not load beside this CPU torch; its Python models need only
    the schemas of two ops it registers fake kernels for. Define them before anything imports
    torchvision (transformers may)."""
    try:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        torchvision_shim.lib = lib   # keep the definitions alive
    except RuntimeError:   # already defined (torchvision's own library loaded)
        pass


def main() -> None:
    torchvision_shim()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all-hf", action="store_true", help="every model type transformers builds")
    ap.add_argument("--only", nargs="*", help="names (model types, zoo names) to run")
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--all-types", action="store_true",
                    help="every model type transformers builds, as benchmarks/hf_type_sweep.py")
    ap.add_argument("--types", nargs="*", help="with --all-types: only these model types")
    ap.add_argument("--group", choices=("causal", "multimodal", "other"),
                    help="with --all-types: only this group")
    ap.add_argument("--published", action="store_true", help="the shipped published configs "
                    "at full depth: parameters, active parameters, decode FLOPs per token")
    args = ap.parse_args()
    if args.published:
        import hf_type_sweep as sweep
        sweep.print_published(sweep.published_table())
        return
    if args.all_types:
        all_types(args)
        return
    sim = not args.no_simulate
    entries = HF_CORPUS
    if args.all_hf:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
        known = {mt for mt, _ in HF_CORPUS}
        entries = HF_CORPUS + [(mt, ("forward",)) for mt in MODEL_MAPPING_NAMES if mt not in known]
    if args.only:
        entries = [(mt, ph) for mt, ph in entries if mt in args.only]
    rows = hf_rows(entries, sim)
    if not args.only:
        rows += zoo_rows(sim) + vision_library_rows(sim)
    print(f"{'model':<34} {'source':<11} {'cap':>3} {'s':>6} {'ops':>5} {'GFLOP':>9} "
          f"{'ref GFLOP':>9} {'match':>5} {'sim':>3}  notes")
    for r in rows:
        note = r.error or (", ".join(f"{k} x{v}" for k, v in r.unknown_ops.items()) and
                           "unknown: " + ", ".join(f"{k} x{v}" for k, v in r.unknown_ops.items()))
        if r.captured and not r.analytic_match:
            note = "analytic MoE/scan FLOPs differ " + note
        print(f"{r.name:<34} {r.source:<11} {'yes' if r.captured else 'NO':>3} {r.capture_s:>6.2f} "
              f"{r.ops:>5} {r.flops / 1e9:>9.3f} {r.reference_flops / 1e9:>9.3f} "
              f"{'yes' if r.flops_match and r.analytic_match else 'NO':>5} "
              f"{'yes' if r.simulated else 'NO':>3}  {note}")
    n = len(rows)
    print(f"\n{n} models: captured {sum(r.captured for r in rows)}, FLOP-matched "
          f"{sum(r.flops_match and r.analytic_match for r in rows)}, simulated "
          f"{sum(r.simulated for r in rows)}, with unknown ops {sum(bool(r.unknown_ops) for r in rows)}; "
          f"capture time total {sum(r.capture_s for r in rows):.1f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


def all_types(args) -> None:
    import hf_type_sweep as sweep
    types = args.types
    if args.group:
        types = [mt for mt, g in sorted(sweep.groups().items()) if g == args.group
                 and (not types or mt in types)]
    rows: list = []

    def progress(r):
        rows.append(r)
        print(sweep._line(r), flush=True)
        if args.json and len(rows) % 10 == 0:
            sweep.save(rows, args.json)
    print(f"{'model_type':<28} {'group':<10} {'phase':<8} {'status':<12} {'flops':>5} "
          f"{'sim':>3} {'s':>6}  source / error")
    sweep.sweep(types, simulate=not args.no_simulate, progress=progress)
    if args.json:
        sweep.save(rows, args.json)
    for group, s in sweep.summary(rows).items():
        print(f"\n{group}: {s['types']} types, every phase captured {s['all_phases_captured']} "
              f"({s['share']:.0%}; {s['share_of_ours']:.0%} of the {s['types_ours']} types with "
              f"no transformers / environment failure); cases {s['cases_by_status']}; FLOPs checked "
              f"{s['flops_checked']} (within 1 %: {s['flops_ok']}); simulated {s['simulated']}")


if __name__ == "__main__":
    main()
