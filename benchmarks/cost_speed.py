"""Per-op cost speed of the NPU and GPU templates (the timings that used to be asserted in
tests/test_npu.py and tests/test_gpu.py; tests time nothing, this prints a table).

    python benchmarks/cost_speed.py [--repeats 5]

Rows: 1,000 distinct GEMMs on a fresh ``npu`` (target in the old test: <= 250 ms), and 1,000
mixed ops on a fresh ``gpu:h200``, first pass and repeated passes (old targets: <= 1 s and
<= 50 ms). Medians over ``--repeats`` fresh designs, ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from accelerators.npu import NPU
    from accelerators.registry import make_accelerator
    from test_gpu import sample_ops
    from test_npu import matmul

    gemms = [matmul(64 + i, 256 + 3 * i, 128 + 7 * i, name=f"mm{i}") for i in range(1000)]
    mixed = sample_ops(seed=1, count=1000)
    rows = {"npu: 1,000 distinct GEMMs, fresh design": [], "gpu:h200: 1,000 ops, first pass": [],
            "gpu:h200: 1,000 ops, a later pass": []}
    for _ in range(args.repeats):
        npu = NPU()
        rows["npu: 1,000 distinct GEMMs, fresh design"].append(
            _ms(lambda: [npu.cost(op) for op in gemms]))
        gpu = make_accelerator("gpu:h200")
        rows["gpu:h200: 1,000 ops, first pass"].append(_ms(lambda: [gpu.cost(op) for op in mixed]))
        rows["gpu:h200: 1,000 ops, a later pass"].append(
            _ms(lambda: [gpu.cost(op) for op in mixed]))
    print(f"{'row':<44}{'median ms':>10}{'min ms':>10}{'max ms':>10}")
    for name, ms in rows.items():
        print(f"{name:<44}{statistics.median(ms):>10.1f}{min(ms):>10.1f}{max(ms):>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
