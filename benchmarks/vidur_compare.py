"""Serving Llama-2-70B with TP2 on two A100-80GB, side by side with Vidur on the same requests.

The comparison trace is Vidur's own synthetic generator as its README runs it: request lengths
from its ``data/processed_traces/splitwise_conv.csv`` (Azure conversation trace), shuffled with
seed 42 (pandas ``sample(frac=1, random_state=42)``) and clipped to 4,096 tokens as its trace
length generator does, Poisson arrivals from Python's ``random`` seeded 42, each gap capped at
3 / qps; ``--requests`` of them (512, the README's) at each rate. Both tools serve it with
vLLM-style scheduling (Vidur ``vllm``: batch cap 128, 4,096 tokens per batch; ours
``continuous``, the same caps) and Sarathi-style chunked prefill (Vidur ``sarathi``: chunk
512, cap 128; ours ``chunked``, budget 512), memory utilisation 0.9, 16-token blocks.

Vidur runs from a checkout (``--vidur DIR``, or ``$VIDUR_DIR``) in its own interpreter
(``--vidur-python``; ``--install`` makes ``DIR/.venv`` and installs the checkout there), offline,
on the one profile set it needs: A100 ``meta-llama/Llama-2-70b-hf`` compute (``mlp.csv``,
``attention.csv``) and ``a100_pairwise_nvlink`` network profiles. When a file is missing or a
Git LFS pointer (the attention profiles are LFS objects in the public repository), Vidur is
skipped with the reason and its column shows the figures issue 28 recorded from a run that
had them (labelled so). Nothing of Vidur's is copied into this repository.

Usage: python benchmarks/vidur_compare.py --vidur DIR [--vidur-python PY | --install]
       [--requests 512] [--rates 0.7,1.0] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODEL = "meta-llama/Llama-2-70b-hf"
PROFILES = (f"data/profiling/compute/a100/{MODEL}/mlp.csv",
            f"data/profiling/compute/a100/{MODEL}/attention.csv",
            "data/profiling/network/a100_pairwise_nvlink/all_reduce.csv",
            "data/profiling/network/a100_pairwise_nvlink/send_recv.csv")
TRACE = "data/processed_traces/splitwise_conv.csv"
MAX_TOKENS = 4096
SEED = 42
#: (our scheduler, Vidur's, our options)
SCHEDULERS = {"vllm": ("continuous", {"max_batch": 128, "token_budget": 4096}),
              "sarathi": ("chunked", {"max_batch": 128, "token_budget": 512})}
#: What issue 28 recorded from Vidur on this trace (its run had the attention profiles):
#: Sarathi at 1.0 req/s, TTFT p50 0.63 s and no restarts; vLLM at 0.7 req/s, TTFT p50 about
#: 0.5 s. Shown only where Vidur cannot run here.
ISSUE_28 = {("sarathi", 1.0): {"ttft_p50_s": 0.63, "restarts": 0},
            ("vllm", 0.7): {"ttft_p50_s": 0.5}}


def comparison_trace(vidur: Path, qps: float, n: int, out: Path) -> Path:
    """The CSV (arrival_s, input_len, output_len) of Vidur's synthetic generator on
    splitwise_conv (see the module docstring)."""
    with open(vidur / TRACE, newline="") as f:
        rows = list(csv.DictReader(f))
    p = np.array([int(float(r["num_prefill_tokens"])) for r in rows])
    d = np.array([int(float(r["num_decode_tokens"])) for r in rows])
    total = p + d
    over = np.clip(total - MAX_TOKENS, 0, None)
    p = np.clip(p - np.ceil(over * p / total).astype(int), 1, None)
    d = np.clip(d - np.ceil(over * d / total).astype(int), 1, None)
    order = np.random.RandomState(SEED).choice(len(p), len(p), replace=False)
    rng = random.Random(SEED)
    t = 0.0
    lines = ["arrival_s,input_len,output_len"]
    for i in range(n):
        t += min(-math.log(1.0 - rng.random()) / qps, 3.0 / qps)
        lines.append(f"{t:.9f},{p[order[i]]},{d[order[i]]}")
    out.write_text("\n".join(lines) + "\n")
    return out


def vidur_problem(vidur: Path | None, python: str | None) -> str | None:
    """Why Vidur cannot run here, or None."""
    if vidur is None or not (vidur / "vidur" / "main.py").is_file():
        return "no Vidur checkout (--vidur DIR or $VIDUR_DIR)"
    for rel in PROFILES:
        f = vidur / rel
        if not f.is_file():
            return f"{rel} is missing"
        with open(f, "rb") as fh:
            if fh.read(40).startswith(b"version https://git-lfs"):
                return f"{rel} is a Git LFS pointer (its profile was not fetched)"
    if not python:
        return "no interpreter with Vidur installed (--vidur-python PY, or --install)"
    return None


def install(vidur: Path) -> str:
    """A venv in the checkout with Vidur installed from it; its python."""
    venv = vidur / ".venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", str(vidur)], check=True)
    return str(py)


def run_vidur(python: str, vidur: Path, scheduler: str, qps: float, n: int) -> dict:
    """Vidur's p50 TTFT, TPOT and E2E, throughput and restarts on the comparison trace."""
    out = Path(tempfile.mkdtemp(prefix="vidur-"))
    cap = SCHEDULERS[scheduler][1]["max_batch"]
    args = [python, "-m", "vidur.main", "--replica_config_device", "a100",
            "--replica_config_model_name", MODEL, "--replica_config_tensor_parallel_size", "2",
            "--replica_config_num_pipeline_stages", "1", "--cluster_config_num_replicas", "1",
            "--replica_config_memory_margin_fraction", "0.1",
            "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_num_requests", str(n),
            "--length_generator_config_type", "trace",
            "--trace_request_length_generator_config_trace_file", str(vidur / TRACE),
            "--trace_request_length_generator_config_max_tokens", str(MAX_TOKENS),
            "--interval_generator_config_type", "poisson",
            "--poisson_request_interval_generator_config_qps", str(qps),
            "--replica_scheduler_config_type", scheduler,
            f"--{scheduler}_scheduler_config_batch_size_cap", str(cap),
            "--metrics_config_output_dir", str(out)]
    if scheduler == "sarathi":
        args += ["--sarathi_scheduler_config_chunk_size", "512"]
    else:
        args += ["--vllm_scheduler_config_max_tokens_in_batch", "4096"]
    subprocess.run(args, cwd=vidur, check=True, capture_output=True, text=True,
                   env={**os.environ, "WANDB_MODE": "disabled"})
    metrics = next(out.rglob("request_metrics.csv"))
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))

    def p50(col):
        return float(np.median([float(r[col]) for r in rows]))
    span = max(float(r["request_completed_at"]) for r in rows) - min(
        float(r["request_arrived_at"]) for r in rows) if "request_completed_at" in rows[0] \
        else math.nan
    tokens = sum(int(float(r["request_num_decode_tokens"])) for r in rows)
    return {"ttft_p50_s": p50("prefill_e2e_time"),
            "tpot_p50_s": p50("decode_time_execution_plus_preemption_normalized"),
            "e2e_p50_s": p50("request_e2e_time"),
            "throughput_run_tok_s": tokens / span if span else math.nan,
            "restarts": int(sum(int(float(r["request_num_restarts"])) for r in rows))}


def run_ours(trace: Path, scheduler: str) -> dict:
    from dse import api
    name, opts = SCHEDULERS[scheduler]
    r = api.serve("llama2-70b", trace=str(trace), system="dgx-a100", devices=2,
                  parallel={"tp": 2}, scheduler=name, memory_utilization=0.9, block_size=16,
                  **opts)
    return {"ttft_p50_s": r.ttft_s["p50"], "tpot_p50_s": r.tpot_s["p50"],
            "e2e_p50_s": r.e2e_s["p50"], "throughput_run_tok_s": r.throughput_run_tok_s,
            "throughput_tok_s": r.throughput_tok_s, "restarts": r.preemptions,
            "requests": r.requests, "kv_blocks": r.kv_cache["blocks"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, default=os.environ.get("VIDUR_DIR"))
    ap.add_argument("--vidur-python")
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--rates", default="0.7,1.0")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    vidur = Path(args.vidur) if args.vidur else None
    if vidur is None or not (vidur / TRACE).is_file():
        print(f"skipped: the comparison trace needs a Vidur checkout with {TRACE} "
              "(--vidur DIR or $VIDUR_DIR)")
        return 0
    python = args.vidur_python
    problem = vidur_problem(vidur, python or ("install" if args.install else None))
    if problem is None and args.install and not python:
        python = install(vidur)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for qps in (float(x) for x in args.rates.split(",")):
            trace = comparison_trace(vidur, qps, args.requests, Path(tmp) / f"t{qps}.csv")
            for sched in SCHEDULERS:
                ours = run_ours(trace, sched)
                theirs = (run_vidur(python, vidur, sched, qps, args.requests)
                          if problem is None else ISSUE_28.get((sched, qps), {}))
                rows.append({"scheduler": sched, "rate_req_s": qps, "ours": ours,
                             "vidur": theirs, "vidur_source": "run here" if problem is None
                             else "issue 28's run" if theirs else "none"})
    result = {"vidur": "ran" if problem is None else f"skipped: {problem}", "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"Llama-2-70B TP2 on 2x A100-80GB, {args.requests} splitwise_conv requests; Vidur "
          + result["vidur"])
    keys = (("ttft_p50_s", "TTFT p50", "s"), ("tpot_p50_s", "TPOT p50", "s"),
            ("e2e_p50_s", "E2E p50", "s"), ("throughput_run_tok_s", "tok/s", ""),
            ("restarts", "restarts", ""))
    print(f"{'scheduler':<9}{'req/s':>6}  " + "".join(f"{k[1]:>21}" for k in keys))
    for r in rows:
        cells = []
        for key, _, _ in keys:
            o, v = r["ours"].get(key), r["vidur"].get(key)
            cells.append(f"{o:>9.4g} / {v:<9.4g}" if v is not None else f"{o:>9.4g} / {'-':<9}")
        print(f"{r['scheduler']:<9}{r['rate_req_s']:>6g}  " + "".join(f"{c:>21}" for c in cells)
              + (f"   (Vidur: {r['vidur_source']})" if r["vidur"] else ""))
    print("each cell: ours / Vidur; restarts: our preemptions / Vidur's restarts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
