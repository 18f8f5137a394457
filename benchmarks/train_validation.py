"""``dse train`` against the training steps ``benchmarks/train_measure.py`` measured on the lent
GPUs (``tests/data/train_measure_h200.json``: one H200; ``train_measure_2xh200.json``: DDP and
FSDP on two H200s; ``train_dist_h100x4.json``: on four H100s), printed as a table with the
errors and their medians.

    python benchmarks/train_validation.py [--runtime kernels|eager] [--json out.json]

Each measured case is predicted with nothing fitted to it: the same Hugging Face config
(captured with its task head's loss), timm's ResNet-50 / ViT-B/16 by the zoo's models of the
same architecture, the measured precision (``bf16``: weights, gradients and AdamW states in
bf16; ``amp``: fp32 weights, gradients and states, bf16 compute), AdamW foreach or fused,
Hugging Face's gradient checkpointing as full recompute, on ``gpu:h200`` (its shipped H200
calibration), a two-H200 ``hgx-h200`` system or four GPUs of a ``dgx-h100`` (DDP: ZeRO 0 with
25 MB buckets overlapped with the backward; FSDP2: ZeRO 3; both with the overheads of
``simulators/train_overheads.py``, calibrated on ``benchmarks/train_comm_measure.py``'s
microbenchmark, never on these steps). The step is compared with the
measured step time (CUDA events) and, for single-GPU cases, with the sum of the step's
kernels; peak memory with ``torch.cuda.max_memory_allocated`` over a steady-state step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"
#: timm models as the zoo models of the same architecture.
ZOO = {"timm:resnet50": "resnet50", "timm:vit_base_patch16_224": "vit-b16"}


#: Multi-GPU measurements: file, the design and system preset they are predicted on.
DIST = (("train_measure_2xh200.json", "gpu:h200", "hgx-h200"),
        ("train_dist_h100x4.json", "gpu:h100", "dgx-h100"))


def predict(case: dict, runtime: str, devices: int = 1, wrapper: str | None = None,
            accelerator: str = "gpu:h200", system: str = "hgx-h200"):
    from dse import api
    prec = {"bf16": "bf16", "amp": "amp"}[case.get("precision", "bf16")]
    impl = case.get("optimizer", "adamw-foreach").split("-", 1)[1]
    batch = case.get("batch") or case["batch_per_gpu"]
    parallel = {"recompute": "full" if case.get("checkpointing") == "full" else "none"}
    kw = dict(micro_batch=batch, precision=prec, optimizer="adamw", optimizer_impl=impl,
              check=False)
    hw = {"runtime": runtime, **({"host_profile": "lent-h100-xeon"} if runtime == "eager"
                                 else {})}
    kw.update(accelerator=accelerator, hw=hw)
    if devices > 1:
        parallel.update(dp=devices, zero=3 if wrapper == "fsdp" else 0, bucket_mb=25.0)
        kw.update(system=system, devices=devices)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case.get("family") == "hf":
            return api.train(hf_config=case["hf_config"], seq=case["seq"], parallel=parallel,
                             **kw)
        return api.train(ZOO[case["model"]], parallel=parallel, **kw)


def rows(runtime: str = "kernels") -> list[dict]:
    out = []
    single = json.loads((DATA / "train_measure_h200.json").read_text())
    for c in single["cases"]:
        if "step_s" not in c:
            continue
        r = predict(c, runtime)
        out.append({"case": _label(c), "gpus": 1, "device": single["device"],
                    "measured_step_s": c["step_s"], "measured_kernel_s": c["kernel_s"],
                    "predicted_step_s": r.step_time_s, "step_error": r.step_time_s / c["step_s"] - 1,
                    "kernel_error": r.step_time_s / c["kernel_s"] - 1,
                    "measured_peak_bytes": c["peak_bytes"],
                    "predicted_peak_bytes": r.peak_memory_bytes,
                    "peak_error": r.peak_memory_bytes / c["peak_bytes"] - 1,
                    "memory": r.memory[0]})
    for name, accelerator, system in DIST:
        if (DATA / name).is_file():
            out.extend(_dist_rows(json.loads((DATA / name).read_text()), runtime, accelerator,
                                  system))
    return out


def _dist_rows(dist: dict, runtime: str, accelerator: str, system: str) -> list[dict]:
    out = []
    for c in dist["cases"]:
        if "step_s" not in c:
            continue
        r = predict(c, runtime, devices=c["gpus"], wrapper=c["wrapper"],
                    accelerator=accelerator, system=system)
        out.append({"case": f"{_label(c)} {c['wrapper']} x{c['gpus']}", "gpus": c["gpus"],
                    "device": dist["device"], "measured_step_s": c["step_s"],
                    "predicted_step_s": r.step_time_s,
                    "step_error": r.step_time_s / c["step_s"] - 1,
                    "measured_peak_bytes": c["peak_bytes"],
                    "predicted_peak_bytes": r.peak_memory_bytes,
                    "peak_error": r.peak_memory_bytes / c["peak_bytes"] - 1,
                    "memory": r.memory[0]})
    return out


def _label(c: dict) -> str:
    b = c.get("batch") or c.get("batch_per_gpu")
    extra = f" {c['precision']}" if c.get("precision", "bf16") != "bf16" else ""
    ck = " ckpt" if c.get("checkpointing") == "full" else ""
    opt = " fused" if c.get("optimizer", "").endswith("fused") else ""
    return f"{c['model']} b{b} s{c['seq']}{extra}{ck}{opt}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="kernels", choices=("kernels", "eager"))
    ap.add_argument("--json", help="Write the rows here.")
    args = ap.parse_args(argv)
    rs = rows(args.runtime)
    print(f"{'case':<46}{'measured':>10}{'kernels':>10}{'ours':>10}{'err':>8}"
          f"{'peak GiB':>10}{'ours':>8}{'err':>8}")
    for r in rs:
        k = r.get("measured_kernel_s")
        print(f"{r['case']:<46}{r['measured_step_s'] * 1e3:>9.1f}m"
              f"{(k * 1e3 if k else float('nan')):>9.1f}m{r['predicted_step_s'] * 1e3:>9.1f}m"
              f"{100 * r['step_error']:>7.1f}%{r['measured_peak_bytes'] / 2**30:>10.2f}"
              f"{r['predicted_peak_bytes'] / 2**30:>8.2f}{100 * r['peak_error']:>7.1f}%")
    one = [r for r in rs if r["gpus"] == 1]
    many = [r for r in rs if r["gpus"] > 1]
    print(f"single GPU: median |step error| {100 * statistics.median(abs(r['step_error']) for r in one):.1f}% "
          f"(vs kernel sum {100 * statistics.median(abs(r['kernel_error']) for r in one):.1f}%), "
          f"median |peak error| {100 * statistics.median(abs(r['peak_error']) for r in one):.1f}%")
    groups = [("DDP/FSDP", many)] + [
        (f"  {n} x {d}", [r for r in many if (r["gpus"], r["device"]) == (n, d)])
        for n, d in sorted({(r["gpus"], r["device"]) for r in many})]
    for what, rows_ in groups if many else ():
        print(f"{what}: median |step error| "
              f"{100 * statistics.median(abs(r['step_error']) for r in rows_):.1f}%, median "
              f"|peak error| {100 * statistics.median(abs(r['peak_error']) for r in rows_):.1f}%"
              f" ({len(rows_)} cases)")
    if args.json:
        Path(args.json).write_text(json.dumps(rs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
