"""Turn ``benchmarks/sdpa_measure.py``'s JSON (fused attention alone on a Hopper GPU) into the
training attention factors (``accelerators/calibration/train_attention_sm90.json``, read by
:func:`simulators.train_overheads.attention_factors`), and print the comparison.

    python benchmarks/sdpa_fit.py tests/data/sdpa_h100.json [--write PATH]

For every measured case the attention model of ``gpu:h100`` costs the same forward op and
the backward op a training capture makes of it (``workloads/backward_attrs.py``: head dim
``3 d``, value dim ``2 d``); a factor is the median over the cases of measured over modelled
forward time, without and with dropout, at least 1 (the factors only ever slow the model
down). The backward is printed, not fitted: its time here (forward + backward less forward,
CUDA events around Python calls) holds the autograd engine's host time per call, a floor of
about 250 us the small shapes all sit on, not the kernels' time. Only the microbenchmark is
read, never a training step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def attention_ops(b: int, h: int, s: int, d: int, causal: bool):
    """The forward and backward attention ops a training capture makes of SDPA (bf16)."""
    from workloads import ir
    from workloads.ir import Op
    base = {"batch": b, "heads": h, "kv_heads": h, "q_len": s, "kv_len": s, "causal": causal}
    f = 4 * b * h * s * s * d
    act = 2 * b * h * s * d
    fwd = Op(name="sdpa", kind=ir.ATTENTION, target="sdpa", input_shapes=((b, h, s, d),) * 3,
             output_shapes=((b, h, s, d),), dtype="bf16", bytes_per_element=2, flops=f,
             activation_bytes_read=3 * act, activation_bytes_written=act,
             attrs={**base, "head_dim": d, "value_dim": d, "causal_flops": f // 2})
    bwd = Op(name="sdpa_bwd", kind=ir.ATTENTION, target="sdpa_backward",
             input_shapes=((b, h, s, d),) * 5, output_shapes=((b, h, s, d),) * 3, dtype="bf16",
             bytes_per_element=2, flops=int(2.5 * f), activation_bytes_read=5 * act,
             activation_bytes_written=3 * act,
             attrs={**base, "head_dim": 3 * d, "value_dim": 2 * d, "causal_flops": int(1.25 * f),
                    "backward": True, "fwd_head_dim": d, "fwd_value_dim": d})
    return fwd, bwd


def fit(data: dict, preset: str = "gpu:h100") -> tuple[dict, list[dict]]:
    from accelerators.registry import make_accelerator
    design = make_accelerator(preset)
    ratios: dict[str, list[float]] = {}
    rows = []
    for c in data.get("cases", []):
        if "forward_backward_s" not in c:
            continue
        fwd, bwd = attention_ops(c["batch"], c["heads"], c["seq"], c["head_dim"], c["causal"])
        mf, mb = design.cost(fwd).latency_s, design.cost(bwd).latency_s
        f, b = c["forward_s"], c["forward_backward_s"] - c["forward_s"]
        tag = "_dropout" if c["dropout"] else ""
        ratios.setdefault("forward" + tag, []).append(f / mf)
        rows.append({**{k: c[k] for k in ("batch", "heads", "seq", "head_dim", "causal",
                                          "dropout")}, "forward_s": f, "model_forward_s": mf,
                     "backward_s": b, "model_backward_s": mb})
    factors = {k: round(max(1.0, statistics.median(v)), 4) for k, v in sorted(ratios.items())}
    return {"factors": factors,
            "source": f"benchmarks/sdpa_fit.py on {data.get('device')} (torch "
                      f"{data.get('torch')}): {len(rows)} SDPA cases against {preset}"}, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured")
    ap.add_argument("--write")
    args = ap.parse_args(argv)
    cal, rows = fit(json.loads(Path(args.measured).read_text()))
    for r in rows:
        print(f"  b{r['batch']} h{r['heads']} s{r['seq']} d{r['head_dim']} causal "
              f"{r['causal']!s:<5} dropout {r['dropout']}: forward {r['forward_s'] * 1e6:7.1f} us "
              f"(model {r['model_forward_s'] * 1e6:7.1f})  backward {r['backward_s'] * 1e6:7.1f} "
              f"us (model {r['model_backward_s'] * 1e6:7.1f})")
    print(json.dumps(cal, indent=1))
    if args.write:
        Path(args.write).write_text(json.dumps(cal, indent=1) + "\n")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
