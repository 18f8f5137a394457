"""Measure training steps on a GPU (or 2-4 GPUs), for checking ``dse train`` against them.

Single GPU (one command; torch + transformers + timm, no network, no weights downloaded:
every model is built from a config written below):

    OUT=/path/to/out python benchmarks/train_measure.py --out $OUT/train1.json

For each case (a Hugging Face causal LM, BERT's masked LM or a timm image classifier; a batch
and sequence length; pure bf16 or mixed precision; full activation checkpointing or none;
AdamW foreach or fused): 3 warm-up steps, then ``--steps`` timed steps, each step
``zero_grad(set_to_none) -> forward (loss) -> backward -> optimizer.step()``, and records

* ``step_s``: the median step time (CUDA events around the step), and the median of the
  forward, backward and optimizer parts (events between them);
* ``kernel_s``: the sum of the CUDA kernels' durations in one step (torch.profiler, the median
  over 2 profiled steps): the device time a kernel-level model predicts, without host gaps;
* ``peak_bytes``: ``torch.cuda.max_memory_allocated`` over one step in steady state
  (optimizer states already allocated), and ``resident_bytes`` before it (parameters and
  optimizer states);
* the model's parameter count and its config (to rebuild the same model in ``dse train``).

Multi GPU (``--dist``, under ``torchrun --nproc_per_node N``): the same step under DDP
(bucketed all-reduce overlapped with backward, ``bucket_cap_mb`` 25) and FSDP (every decoder
layer and the root sharded, ``fully_shard``; FSDP1 where FSDP2 is missing), the slowest rank's
median step time and rank 0's peak memory.

``--dry-run`` runs every code path on the CPU at tiny sizes (gloo under torchrun), e.g.
``python benchmarks/train_measure.py --dry-run --out /tmp/t.json`` and
``torchrun --nproc_per_node 2 benchmarks/train_measure.py --dist --dry-run --out /tmp/d.json``.
Per-case errors (out of memory, a missing package) are recorded in the case and the run goes
on; the JSON is always written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

#: Model configs [R Hugging Face config.json of openai-community/gpt2, gpt2-medium,
#: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T, google-bert/bert-base-uncased,
#: meta-llama/Llama-2-7b-hf].
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
             "n_positions": 1024, "vocab_size": 50257},
    "gpt2-medium": {"model_type": "gpt2", "n_embd": 1024, "n_layer": 24, "n_head": 16,
                    "n_positions": 1024, "vocab_size": 50257},
    "tinyllama-1.1b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
                       "num_hidden_layers": 22, "num_attention_heads": 32,
                       "num_key_value_heads": 4, "vocab_size": 32000,
                       "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
                       "tie_word_embeddings": False},
    "bert-base": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
                  "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
                  "max_position_embeddings": 512},
    "llama2-7b": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 32, "vocab_size": 32000,
                  "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                  "tie_word_embeddings": False},
}
TINY_CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
             "vocab_size": 128},
    "gpt2-medium": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4,
                    "n_positions": 64, "vocab_size": 128},
    "tinyllama-1.1b": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                       "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "vocab_size": 128,
                       "max_position_embeddings": 64, "tie_word_embeddings": False},
    "bert-base": {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128,
                  "max_position_embeddings": 64},
    "llama2-7b": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "vocab_size": 128,
                  "max_position_embeddings": 64, "tie_word_embeddings": False},
}

#: Single-GPU cases: (model, batch, seq or image size, precision, checkpointing, optimizer).
#: ``bf16``: parameters, gradients and AdamW states in bf16; ``amp``: fp32 parameters,
#: gradients and states, compute under ``torch.autocast(bfloat16)``.
CASES = [
    ("gpt2", 8, 1024, "bf16", False, "foreach"),
    ("gpt2", 8, 1024, "bf16", True, "foreach"),
    ("gpt2", 8, 1024, "amp", False, "foreach"),
    ("gpt2-medium", 8, 1024, "bf16", False, "foreach"),
    ("gpt2-medium", 8, 1024, "bf16", True, "fused"),
    ("tinyllama-1.1b", 4, 2048, "bf16", False, "foreach"),
    ("tinyllama-1.1b", 4, 2048, "bf16", True, "foreach"),
    ("tinyllama-1.1b", 4, 2048, "bf16", False, "fused"),
    ("bert-base", 32, 512, "bf16", False, "foreach"),
    ("timm:resnet50", 128, 224, "bf16", False, "foreach"),
    ("timm:vit_base_patch16_224", 64, 224, "bf16", False, "foreach"),
    ("timm:vit_base_patch16_224", 64, 224, "bf16", True, "foreach"),
]
TINY_CASES = [("gpt2", 2, 32, "bf16", False, "foreach"), ("gpt2", 2, 32, "amp", True, "fused"),
              ("tinyllama-1.1b", 2, 32, "bf16", True, "foreach"),
              ("bert-base", 2, 32, "bf16", False, "foreach"),
              ("timm:resnet18", 2, 64, "bf16", False, "foreach")]
#: Multi-GPU cases: (model, batch per GPU, seq, wrapper).
#: A 7B-class FSDP step (issue 35; bf16 parameters, gradients and AdamW states sharded: 14 GB
#: a GPU on 4, 7 GB on 8, beside the activations of one 2,048-token sequence).
DIST_CASES = [("tinyllama-1.1b", 4, 2048, "ddp"), ("tinyllama-1.1b", 4, 2048, "fsdp"),
              ("gpt2-medium", 8, 1024, "ddp"), ("gpt2-medium", 8, 1024, "fsdp"),
              ("llama2-7b", 1, 2048, "fsdp")]
TINY_DIST_CASES = [("tinyllama-1.1b", 2, 32, "ddp"), ("tinyllama-1.1b", 2, 32, "fsdp"),
                   ("llama2-7b", 1, 32, "fsdp")]


def log(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, flush=True)


# ------------------------------------------------------------------------------ models
def build(torch, name: str, configs: dict, batch: int, seq: int, device, precision: str):
    """(model, make_batch, loss_of, info): the model on ``device`` and how to run a step."""
    if name.startswith("timm:"):
        import timm
        extra = {"img_size": seq} if "vit" in name else {}
        with device:   # initialised on the device: no host-side init of big models
            model = timm.create_model(name[5:], pretrained=False, num_classes=1000, **extra)
        x = torch.randn(batch, 3, seq, seq, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)

        def loss_of(m):
            return torch.nn.functional.cross_entropy(m(x), y)
        info = {"family": "timm", "timm_name": name[5:], "image_size": seq}
    else:
        import transformers
        cfg = dict(configs[name])
        config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        auto = (transformers.AutoModelForMaskedLM if config.model_type == "bert"
                else transformers.AutoModelForCausalLM)
        with device:
            model = auto.from_config(config, attn_implementation="sdpa")
        vocab = config.vocab_size
        ids = torch.randint(0, vocab, (batch, seq), device=device)

        def loss_of(m):
            return m(input_ids=ids, labels=ids).loss
        info = {"family": "hf", "hf_config": configs[name],
                "transformers": transformers.__version__}
    if precision == "bf16":
        model = model.to(torch.bfloat16)
        if name.startswith("timm:"):
            x = x.to(torch.bfloat16)
    model = model.to(device)
    info["params"] = sum(p.numel() for p in model.parameters())
    return model, loss_of, info


def set_checkpointing(model, on: bool) -> None:
    if not on:
        return
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
    else:
        raise RuntimeError("the model has no activation checkpointing switch")


def optimizer_for(torch, model, kind: str, cuda: bool):
    kw = {"lr": 1e-4, "weight_decay": 0.01}
    if kind == "fused":
        if not cuda:   # fused AdamW needs a device the fused kernel supports
            kw["foreach"] = True
        else:
            kw["fused"] = True
    else:
        kw["foreach"] = True
    return torch.optim.AdamW(model.parameters(), **kw)


class Events:
    """CUDA events at the phase boundaries of one step (wall clock on the CPU)."""

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda, self.marks = torch, cuda, []

    def mark(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def spans_s(self) -> list[float]:
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def run_step(torch, model, loss_of, opt, precision: str, cuda: bool, ev: Events | None = None):
    ev = ev or Events(torch, cuda)
    ev.mark()
    opt.zero_grad(set_to_none=True)
    if precision == "amp":
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16):
            loss = loss_of(model)
    else:
        loss = loss_of(model)
    ev.mark()
    loss.backward()
    ev.mark()
    opt.step()
    ev.mark()
    return ev


def kernel_sum_s(torch, step, cuda: bool) -> tuple[float | None, int | None]:
    """Sum of CUDA kernel durations in one step (median of 2), and their count."""
    if not cuda:
        return None, None
    from torch.profiler import ProfilerActivity, profile
    sums, counts = [], []
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        total, n = 0.0, 0
        for e in prof.events():
            if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type):
                total += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                n += 1
        sums.append(total / 1e6)
        counts.append(n)
    return statistics.median(sums), int(statistics.median(counts))


def measure_case(torch, case, configs, device, steps: int) -> dict:
    name, batch, seq, precision, ckpt, optim = case
    cuda = device.type == "cuda"
    row = {"model": name, "batch": batch, "seq": seq, "precision": precision,
           "checkpointing": "full" if ckpt else "none", "optimizer": f"adamw-{optim}"}
    try:
        torch.manual_seed(0)
        model, loss_of, info = build(torch, name, configs, batch, seq, device, precision)
        row.update(info)
        model.train()
        set_checkpointing(model, ckpt)
        opt = optimizer_for(torch, model, optim, cuda)
        for _ in range(3):
            run_step(torch, model, loss_of, opt, precision, cuda)
        if cuda:
            torch.cuda.synchronize()
            opt.zero_grad(set_to_none=True)
            row["resident_bytes"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        spans = [run_step(torch, model, loss_of, opt, precision, cuda).spans_s()
                 for _ in range(steps)]
        if cuda:
            torch.cuda.synchronize()
            row["peak_bytes"] = torch.cuda.max_memory_allocated()
        row["step_s"] = statistics.median(sum(s) for s in spans)
        row["forward_s"] = statistics.median(s[0] for s in spans)
        row["backward_s"] = statistics.median(s[1] for s in spans)
        row["optimizer_s"] = statistics.median(s[2] for s in spans)
        row["steps_timed"] = steps
        row["kernel_s"], row["kernels"] = kernel_sum_s(
            torch, lambda: run_step(torch, model, loss_of, opt, precision, cuda), cuda)
        log(f"  {name:<28} b{batch:<4} s{seq:<5} {precision:<5} ckpt={int(ckpt)} {optim:<8}"
            f" step {row['step_s'] * 1e3:9.2f} ms  kernels "
            f"{(row['kernel_s'] or 0) * 1e3:9.2f} ms  peak {row.get('peak_bytes', 0) / 2**30:6.2f} GiB")
    except Exception as exc:   # out of memory, a missing package: recorded, the run goes on
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        log(f"  {name}: {row['error']}")
        if os.environ.get("TRAIN_MEASURE_TRACEBACK"):
            traceback.print_exc()
    finally:
        for var in ("model", "opt"):
            locals().pop(var, None)
        if cuda:
            torch.cuda.empty_cache()
    return row


# ------------------------------------------------------------------------------ distributed
def wrap(torch, model, how: str, device):
    if how == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                   bucket_cap_mb=25), "ddp(bucket_cap_mb=25)"
    layers = [m for m in model.modules() if type(m).__name__.endswith(
        ("DecoderLayer", "Block")) and m is not model]
    try:
        from torch.distributed.fsdp import fully_shard
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        return model, "fsdp2(fully_shard per layer, reshard_after_forward)"
    except ImportError:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        policy = ModuleWrapPolicy({type(layers[0])}) if layers else None
        return FSDP(model, auto_wrap_policy=policy,
                    device_id=device if device.type == "cuda" else None), "fsdp1(FULL_SHARD)"


def measure_dist(torch, dist, case, configs, device, steps: int) -> dict:
    name, batch, seq, how = case
    cuda = device.type == "cuda"
    world = dist.get_world_size()
    row = {"model": name, "batch_per_gpu": batch, "seq": seq, "wrapper": how, "gpus": world,
           "precision": "bf16", "optimizer": "adamw-foreach", "checkpointing": "none"}
    try:
        torch.manual_seed(0)
        model, loss_of, info = build(torch, name, configs, batch, seq, device, "bf16")
        row.update(info)
        model.train()
        model, row["wrapper_detail"] = wrap(torch, model, how, device)
        opt = optimizer_for(torch, model, "foreach", cuda)
        for _ in range(3):
            run_step(torch, model, loss_of, opt, "bf16", cuda)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        dist.barrier()
        times = [sum(run_step(torch, model, loss_of, opt, "bf16", cuda).spans_s())
                 for _ in range(steps)]
        mine = statistics.median(times)
        t = torch.tensor([mine], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        row["step_s"] = float(t.item())
        row["step_s_rank0"] = mine
        if cuda:
            row["peak_bytes"] = torch.cuda.max_memory_allocated()
        log(f"  {name:<16} {how:<5} x{world} b{batch} s{seq} step {row['step_s'] * 1e3:9.2f} ms"
            f"  peak {row.get('peak_bytes', 0) / 2**30:6.2f} GiB")
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        log(f"  {name} {how}: {row['error']}")
    finally:
        if cuda:
            torch.cuda.empty_cache()
    return row


# ------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "train_measure.json"))
    ap.add_argument("--dist", action="store_true", help="DDP / FSDP under torchrun")
    ap.add_argument("--dry-run", action="store_true", help="tiny models on the CPU")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop starting cases after this")
    ap.add_argument("--models", help="only the cases of these models (comma-separated)")
    args = ap.parse_args(argv)
    result: dict = {"script": "benchmarks/train_measure.py", "argv": sys.argv[1:], "cases": []}
    t0 = time.time()
    try:
        import torch
        result["torch"] = torch.__version__
        cuda = torch.cuda.is_available() and not args.dry_run
        configs = TINY_CONFIGS if args.dry_run else CONFIGS
        steps = 2 if args.dry_run else args.steps
        dist = None
        if args.dist:
            import torch.distributed as dist
            dist.init_process_group("nccl" if cuda else "gloo")
            local = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device("cuda", local) if cuda else torch.device("cpu")
            if cuda:
                torch.cuda.set_device(device)
        else:
            device = torch.device("cuda") if cuda else torch.device("cpu")
        result["device"] = torch.cuda.get_device_name(device) if cuda else "cpu"
        result["gpus"] = dist.get_world_size() if dist else (1 if cuda else 0)
        log(f"device {result['device']} torch {torch.__version__}")
        try:
            import transformers
            result["transformers"] = transformers.__version__
        except ImportError:
            pass
        try:
            import timm
            result["timm"] = timm.__version__
        except ImportError:
            pass
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        cases = (TINY_DIST_CASES if args.dry_run else DIST_CASES) if dist else (
            TINY_CASES if args.dry_run else CASES)
        if args.models:
            cases = [c for c in cases if c[0] in args.models.split(",")]
        for case in cases:
            if args.budget_s and time.time() - t0 > args.budget_s:
                result["cases"].append({"model": case[0], "skipped": "time budget spent"})
                continue
            row = (measure_dist(torch, dist, case, configs, device, steps) if dist
                   else measure_case(torch, case, configs, device, steps))
            result["cases"].append(row)
        if dist:
            dist.barrier()
            dist.destroy_process_group()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    result["wall_s"] = time.time() - t0
    if int(os.environ.get("RANK", "0")) == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.out} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
