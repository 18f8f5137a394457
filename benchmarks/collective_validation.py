"""The collective model against published all-reduce measurements (nccl-tests' bus bandwidth),
until benchmarks/multi_gpu_measure.py has run on our own multi-GPU machine.

Each reference names its source. What they are, and what they are not:

* H100 ring, 370 GB/s: the NCCL maintainer's figure for NCCL_ALGO=RING on 8 H100s. Our NVLink 4
  efficiency is NCCL's own per-link constant (20.6 of 25 GB/s, src/graph/topo.h), which NCCL
  set to what such runs give, so this row checks the ring algorithm and the latency terms, not
  an independent bandwidth.
* H100 NVLS, 476-480 GB/s: NCCL's default (NVLink SHARP) on 8 H100s. Our in-switch reduction
  is a traffic model (each port carries S (1 + 1/p) each way at the NCCL link rate); nothing
  in it was set from these numbers.
* A100 ring, 230-250 GB/s: a vendor's acceptance table for 8 A100 SXM4 (large messages).

Usage: python benchmarks/collective_validation.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (label, system, devices, algorithm, bytes, measured busbw B/s, source)
REFERENCES = [
    ("8x H100, NCCL ring, large", "dgx-h100", 8, "ring", 8 * 2**30, 370e9,
     "NVIDIA/nccl-tests issue 212, maintainer (sjeaugey, 2024-05-06): 'NCCL can get an "
     "effective NVLink bandwidth of 370GB/s ... with NCCL_ALGO=RING'"),
    ("8x H100, NCCL default (NVLS), large", "dgx-h100", 8, "nccl", 8 * 2**30, 480e9,
     "NVIDIA/nccl-tests issue 212, maintainer: 'On 8 GPUs, you should reach a peak busBw of "
     "~480GB/s (algbw ~275GB/s)'"),
    ("8x H100, NCCL default (NVLS), large", "dgx-h100", 8, "nccl", 8 * 2**30, 476e9,
     "NVIDIA/nccl-tests issue 290: a single-node run at 476 GB/s, 'in the expected range for "
     "H100' (maintainer AddyLaddy, 2025-03-03)"),
    ("8x A100 SXM4, NCCL, large", "dgx-a100", 8, "nccl", 8 * 2**30, 240e9,
     "docs.alayanew.com NCCL-tests acceptance table: 8xA100 SXM4 NVLink busbw 230-250 GB/s "
     "(midpoint)"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dse import api
    rows = []
    for label, system, p, alg, nbytes, measured, source in REFERENCES:
        c = api.collective("all_reduce", nbytes, system, p, algorithm=alg)
        rows.append({"reference": label, "system": system, "devices": p, "bytes": nbytes,
                     "algorithm": c.algorithm, "measured_busbw_Bps": measured,
                     "model_busbw_Bps": c.bus_bandwidth_Bps,
                     "error": c.bus_bandwidth_Bps / measured - 1, "source": source})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'reference':<38}{'model alg':<15}{'measured':>10}{'model':>10}{'error':>9}")
    for r in rows:
        print(f"{r['reference']:<38}{r['algorithm']:<15}{r['measured_busbw_Bps'] / 1e9:>9.0f}G"
              f"{r['model_busbw_Bps'] / 1e9:>9.0f}G{100 * r['error']:>+8.1f}%")
    print("busbw in GB/s (nccl-tests' definition); sources in the script")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
