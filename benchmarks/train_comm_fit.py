"""Turn ``benchmarks/train_comm_measure.py``'s microbenchmark JSON into the training-overhead
calibration (:mod:`simulators.train_overheads`), and print what was measured.

    python benchmarks/train_comm_fit.py tests/data/train_comm_h100x4.json \\
        [--write accelerators/calibration/train_overheads_nvlink4.json]

Only the microbenchmark is read (never a training step the calibration is then checked on):

* ``compute_slowdown[kind]`` / ``comm_slowdown[kind]``: the median over the GEMM rows of the
  ``overlap`` part (training shapes against a concurrent collective of ``kind``) of the
  compute run's (collective run's) time during the other over its time alone, at least 1.
  The HBM-bound copy's factors are printed beside them, not used (a training step's time is
  mostly GEMMs; using the GEMM factor keeps the term on the low side).
* ``fsdp_step_host_s``, ``fsdp_unit_host_s``, ``fsdp_param_host_s``: least squares (each
  term >= 0) through the host-bound rows of the ``fsdp`` part (the host's time to issue the
  forward + backward at least :data:`HOST_BOUND` of the step: the device waits on it) of
  FSDP2's host time minus the unwrapped stack's, against 1, the units and the units' parameter
  tensors; ``fsdp_forward_share``: the forward's share of the step time FSDP2 adds on those
  rows (CUDA events).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

KINDS = ("all_gather", "reduce_scatter", "all_reduce")


#: A row is host-bound when the host's time to issue its forward + backward is at least this
#: share of the step (the device then waits on the host).
HOST_BOUND = 0.9


def _key(r: dict) -> tuple:
    return r["d"], r["linears"], r["units"], r["tokens"]


def _nonneg_lstsq(a: list[list[float]], y: list[float]) -> list[float]:
    """Least squares ``a x = y`` with ``x >= 0``: a term fitted negative is dropped and the
    rest refitted (the few unknowns here make that exact)."""
    import numpy as np
    keep = list(range(len(a[0])))
    while keep:
        sol = np.linalg.lstsq(np.array(a)[:, keep], np.array(y), rcond=None)[0]
        if (sol >= 0).all():
            out = [0.0] * len(a[0])
            for i, v in zip(keep, sol):
                out[i] = float(v)
            return out
        keep.pop(int(np.argmin(sol)))
    return [0.0] * len(a[0])


def fit(data: dict) -> dict:
    comm = data.get("comm", data)
    over = [r for r in comm.get("overlap", []) if "compute_slowdown" in r]
    out: dict = {"compute_slowdown": {}, "comm_slowdown": {}}
    for kind in KINDS:
        gemm = [r for r in over if r["coll"] == kind and r["kernel"] == "gemm"]
        if gemm:
            out["compute_slowdown"][kind] = round(max(1.0, statistics.median(
                r["compute_slowdown"] for r in gemm)), 4)
            out["comm_slowdown"][kind] = round(max(1.0, statistics.median(
                r["comm_slowdown"] for r in gemm)), 4)
    rows = [r for r in comm.get("fsdp", []) if "host_issue_s" in r]
    local = {_key(r): r for r in rows if r["way"] == "local"}
    pts = []                       # (units, units x tensors, extra host s, extra fwd, bwd)
    for r in rows:
        lo = local.get(_key(r))
        if r["way"] == "fsdp2" and lo and r["host_issue_s"] >= HOST_BOUND * r["step_s"]:
            pts.append((r["units"], r["units"] * r["linears"],
                        r["host_issue_s"] - lo["host_issue_s"], r["fwd_s"] - lo["fwd_s"],
                        r["bwd_s"] - lo["bwd_s"]))
    if pts:
        coef = _nonneg_lstsq([[1.0, u, ut] for u, ut, *_ in pts], [p[2] for p in pts])
        out["fsdp_step_host_s"], out["fsdp_unit_host_s"], out["fsdp_param_host_s"] = (
            round(c, 9) for c in coef)
        fwd, bwd = sum(max(p[3], 0.0) for p in pts), sum(max(p[4], 0.0) for p in pts)
        out["fsdp_forward_share"] = round(fwd / (fwd + bwd), 4) if fwd + bwd > 0 else 0.5
        out["fsdp_rows"] = len(pts)
    out["source"] = (f"benchmarks/train_comm_fit.py on {comm.get('world')} x "
                     f"{comm.get('device')} (torch {comm.get('torch')}, NCCL "
                     f"{comm.get('nccl')}): {len(over)} overlap rows, {len(pts)} host-bound "
                     "FSDP2 rows")
    out.pop("fsdp_rows", None)
    return out


def report(data: dict) -> None:
    comm = data.get("comm", data)
    print(f"{comm.get('world')} x {comm.get('device')}  torch {comm.get('torch')}  "
          f"NCCL {comm.get('nccl')}")
    for r in comm.get("collectives", []):
        if "time_s" in r:
            print(f"  {r['kind']:<15} {r['bytes'] / 2**20:7.1f} MiB {r['time_s'] * 1e6:9.1f} us"
                  f"  {r['algbw_GBps']:7.1f} GB/s")
    for r in comm.get("overlap", []):
        if "compute_slowdown" in r:
            print(f"  {r['kernel']:<5} {str(r['shape']):<20} x {r['coll']:<15} "
                  f"{r['coll_bytes'] / 2**20:6.1f} MiB  compute x{r['compute_slowdown']:.3f}"
                  f"  comm x{r['comm_slowdown']:.3f}")
    for r in comm.get("fsdp", []):
        if "step_s" in r:
            k = r.get("profile", {}).get("kernel_s_by_kind", {})
            print(f"  d{r['d']:<5} lin{r['linears']} units{r['units']:<3} tok{r['tokens']:<5} "
                  f"{r['way']:<6} step {r['step_s'] * 1e3:8.2f} ms host "
                  f"{r['host_issue_s'] * 1e3:7.2f} ms  kernels "
                  + " ".join(f"{n} {v * 1e3:.2f}" for n, v in sorted(k.items())))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", help="train_comm_measure.py's JSON")
    ap.add_argument("--write", help="write the calibration JSON here")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.measured).read_text())
    report(data)
    cal = fit(data)
    print(json.dumps(cal, indent=1))
    if args.write:
        Path(args.write).write_text(json.dumps(cal, indent=1) + "\n")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
