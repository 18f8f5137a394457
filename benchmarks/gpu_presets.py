"""Every ``gpu`` preset on the same representative kernels, against the H200 measurements.

Prints a markdown table: the kernel times (us) the kernel model predicts on each preset (as
shipped, and the H200/H100 with datasheet and estimated knobs only, ``calibration=``) for
measured records of the H200 calibration run (tests/data/h200_calibration_raw.json), with the
H200's measured time. Use it to see what a preset's datasheet and calibration imply::

    python benchmarks/gpu_presets.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from accelerators.gpu import GPU, PRESETS  # noqa: E402
from dse.calibrate.fit import predict  # noqa: E402

RAW = ROOT / "tests" / "data" / "h200_calibration_raw.json"

#: (label, the fields a raw record must match).
KERNELS = [
    ("GEMM 8192^3", {"kind": "gemm", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}),
    ("GEMM 512x4096x4096", {"kind": "gemm", "dtype": "bf16", "m": 512, "n": 4096, "k": 4096}),
    ("GEMV 1x8192x8192", {"kind": "gemm", "dtype": "bf16", "m": 1, "n": 8192, "k": 8192}),
    ("GEMM 8192^3 fp32", {"kind": "gemm", "dtype": "fp32", "m": 8192, "n": 8192, "k": 8192}),
    ("attention prefill b1 h32 s4096 d128 causal",
     {"kind": "attention", "batch": 1, "heads": 32, "kv_heads": 32, "q_len": 4096,
      "head_dim": 128, "causal": True}),
    ("attention decode b8 h32 ctx8192 d128",
     {"kind": "attention", "batch": 8, "heads": 32, "q_len": 1, "kv_len": 8192}),
    ("layer_norm 4096x4096", {"kind": "memory", "op": "layer_norm", "rows": 4096,
                              "width": 4096}),
    ("add 2^26 elements", {"kind": "memory", "op": "add", "dtype": "bf16",
                           "elements": 2**26}),
    ("conv 3x3 b32 128->128 28x28", {"kind": "conv", "dtype": "bf16", "n": 32, "c": 128,
                                     "h": 28, "r": 3}),
]


def designs() -> dict[str, GPU]:
    out = {"h200, datasheet only": GPU("h200", calibration=""),
           "h100, datasheet only": GPU("h100", calibration="")}
    out.update({name: GPU(name) for name in PRESETS})
    return out


def main() -> int:
    records = json.loads(RAW.read_text())["measurements"]
    cols = designs()
    print("| kernel (bf16 unless named) | H200 measured | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * (len(cols) + 1))
    for label, match in KERNELS:
        rec = next(r for r in records if all(r.get(k) == v for k, v in match.items()))
        cells = [f"{predict(g.model, rec) * 1e6:.1f}" for g in cols.values()]
        print(f"| {label} | {rec['time_s'] * 1e6:.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
