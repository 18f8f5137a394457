"""FLOPs of captured training steps against torch's ``FlopCounterMode`` on a real CPU step
(forward + backward), and the activations kept for backward against the storages autograd
saves (``torch.autograd.graph.saved_tensors_hooks``), on small zoo models and Hugging Face
configs. timm needs torchvision, which this machine's torch cannot load, so timm's models are
covered by the zoo's of the same architecture (ResNet, MobileNetV2, ViT).

    python benchmarks/train_flops.py

Prints one row per model: torch's FLOPs, ours, equal or not, saved bytes (autograd's and
ours, fp32). Grouped convolutions (MobileNetV2's depthwise, the ``conv2d`` micro model with
``groups=2``) differ by exactly torch's count of a grouped convolution's weight gradient as a
dense one (``conv_backward_flop``: ``groups x`` the work), printed as ``torch's dense wgrad``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ZOO = ["gpt2", "llama3-8b", "bert-base", "vit-b16", "resnet18", "resnet50", "mobilenetv2",
       "linear", "conv2d"]
HF = {
    "hf:gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                "n_positions": 64, "vocab_size": 128},
    "hf:llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 128, "max_position_embeddings": 64},
    "hf:bert": {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128,
                "max_position_embeddings": 64},
    "hf:vit": {"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "intermediate_size": 128, "image_size": 32,
               "patch_size": 8, "num_labels": 10},
    "hf:t5": {"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2,
              "num_decoder_layers": 2, "num_heads": 4, "vocab_size": 128},
    "hf:qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 128, "max_position_embeddings": 64},
}


def dense_wgrad_extra(w) -> int:
    """What torch's conv_backward_flop adds for grouped convolutions' weight gradients."""
    return sum(op.flops // len(op.attrs["grads"]) * (op.attrs["groups"] - 1)
               for op in w.ops if op.target == "convolution_backward"
               and "weight" in op.attrs["grads"])


#: Small architectures of the zoo models (the test suite's).
SMALL_LM = {"n_layer": 2, "d_model": 32, "n_head": 4, "d_ff": 64, "vocab_size": 96,
            "max_seq": 64}
SMALL = {"gpt2": SMALL_LM, "bert-base": SMALL_LM,
         "llama3-8b": {**SMALL_LM, "n_kv_head": 2},
         "vit-b16": {"image_size": 32, "patch_size": 8, "n_layer": 2, "d_model": 32,
                     "n_head": 4, "d_ff": 64, "num_classes": 10},
         "resnet18": {"image_size": 32, "num_classes": 10, "base_width": 8, "blocks1": 1,
                      "blocks2": 1, "blocks3": 1, "blocks4": 1},
         "resnet50": {"image_size": 32, "num_classes": 10, "base_width": 8, "blocks1": 1,
                      "blocks2": 1, "blocks3": 1, "blocks4": 1},
         "mobilenetv2": {"image_size": 32, "num_classes": 10, "width_mult": 0.25},
         "linear": {"m": 8, "k": 16, "n": 4},
         "conv2d": {"c": 4, "h": 8, "w": 8, "k": 8, "groups": 2}}


def zoo_row(name: str) -> dict:
    from workloads.train_build import zoo_train_workload
    from workloads.train_reference import counted_flops, zoo_step_reference
    from workloads.train_step import saved_bytes
    from workloads.zoo import get_model
    seq = 8 if get_model(name).family in ("llm", "encoder") else None
    w = zoo_train_workload(name, batch=2, seq=seq, dtype="fp32", arch=SMALL[name])
    ref, ref_saved = zoo_step_reference(name, 2, seq, SMALL[name])
    ours = saved_bytes(w, "none") + w.train["input_saved_bytes"]
    return {"model": name, "torch": ref, "ours": counted_flops(w),
            "dense_wgrad": dense_wgrad_extra(w), "saved_ref": ref_saved, "saved": ours}


def hf_row(name: str, cfg: dict) -> dict:
    from workloads.train_build import hf_train_workload
    from workloads.train_reference import counted_flops, hf_step_reference
    w = hf_train_workload(cfg, batch=2, seq=16, dtype="fp32")
    return {"model": name, "torch": hf_step_reference(cfg, 2, 16), "ours": counted_flops(w),
            "dense_wgrad": 0, "saved_ref": None, "saved": None}


def main() -> int:
    warnings.simplefilter("ignore")
    rows = []
    t0 = time.time()
    for name in ZOO:
        rows.append(zoo_row(name))
    for name, cfg in HF.items():
        rows.append(hf_row(name, cfg))
    print(f"{'model':<14}{'torch FLOPs':>16}{'ours':>16}  {'result':<34}{'saved (autograd)':>18}"
          f"{'ours':>12}")
    equal = 0
    for r in rows:
        if r["torch"] == r["ours"]:
            res, equal = "equal", equal + 1
        elif r["dense_wgrad"] and r["ours"] + r["dense_wgrad"] == r["torch"]:
            res = "equal + torch's dense wgrad"
        else:
            res = f"DIFFERS ({r['ours'] / r['torch'] - 1:+.2%})"
        saved = (f"{r['saved_ref']:>18,}{r['saved']:>12,.0f}" if r["saved_ref"] else "")
        print(f"{r['model']:<14}{r['torch']:>16,}{r['ours']:>16,}  {res:<34}{saved}")
    print(f"{equal} of {len(rows)} equal; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
