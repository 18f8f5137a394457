"""Our system model and GenZ (pip install genz-llm) side by side on the same multi-GPU rows:
Llama-2-70B decode and prefill with tensor / pipeline parallelism on H100 and H200 systems,
and all-reduce times; with ``--measured`` (a ``benchmarks/multi_gpu_measure.py`` JSON) also
the measured Llama stack rows, each tool's error against them.

GenZ runs in its own virtual environment (never in the project's):

    python3 -m venv /tmp/genz-venv && /tmp/genz-venv/bin/pip install genz-llm
    python benchmarks/genz_system_compare.py --genz-python /tmp/genz-venv/bin/python \\
        [--measured OUT/multi_gpu_measure.json] [--json]

GenZ's H200 is not a preset: it is given as the datasheet's 989 TFLOP/s, 141 GB, 4.8 TB/s and
450 GB/s NVLink, as its H100 preset is (3.4 TB/s, 80 GB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GENZ_SYSTEMS = {
    "dgx-h100": "H100_GPU",
    "hgx-h200": {"Flops": 989, "Memory_size": 141, "Memory_BW": 4800, "ICN": 450,
                 "real_values": True},
}

#: (label, system, phase, batch, tokens, tp, pp, layers) — layers None: the whole model.
ROWS = [
    ("decode b=32 ctx=1024", "hgx-h200", "decode", 32, 1024, 2, 1, None),
    ("decode b=32 ctx=1024", "hgx-h200", "decode", 32, 1024, 4, 1, None),
    ("decode b=32 ctx=1024", "hgx-h200", "decode", 32, 1024, 8, 1, None),
    ("decode b=1 ctx=1024", "hgx-h200", "decode", 1, 1024, 8, 1, None),
    ("decode b=32 ctx=1024", "hgx-h200", "decode", 32, 1024, 4, 2, None),
    ("decode b=32 ctx=1024", "dgx-h100", "decode", 32, 1024, 2, 1, None),
    ("decode b=32 ctx=1024", "dgx-h100", "decode", 32, 1024, 8, 1, None),
    ("prefill b=1 s=2048", "hgx-h200", "prefill", 1, 2048, 2, 1, None),
    ("prefill b=1 s=2048", "hgx-h200", "prefill", 1, 2048, 8, 1, None),
    ("prefill b=1 s=2048", "dgx-h100", "prefill", 1, 2048, 8, 1, None),
]
ALL_REDUCE = [(2**19, 2), (2**19, 8), (2**28, 2), (2**28, 8)]

_GENZ_CHILD = r"""
import copy, json, sys
from GenZ import decode_moddeling, prefill_moddeling, get_configs
from GenZ.LLM_inference.utils import get_inference_system
from GenZ.collective_times import get_AR_time
job = json.load(sys.stdin)
out = {"rows": [], "all_reduce": []}
for r in job["rows"]:
    model = get_configs("llama2_70b")
    if r["layers"] or r.get("shape"):
        model = copy.deepcopy(model)
    if r["layers"]:
        model.num_decoder_layers = r["layers"]
    if r.get("shape"):
        sh = r["shape"]
        model.hidden_size, model.num_attention_heads = sh["d"], sh["heads"]
        model.num_key_value_heads, model.intermediate_size = sh["kv_heads"], sh["ff"]
        model.vocab_size, model.head_dim = sh["vocab"], sh["d"] // sh["heads"]
    kw = dict(model=model, batch_size=r["batch"], input_tokens=r["tokens"],
              system_name=r["genz_system"], bits="bf16", tensor_parallel=r["tp"],
              pipeline_parallel=r["pp"])
    if r["phase"] == "decode":
        res = decode_moddeling(output_tokens=0, Bb=4, **kw)
    else:
        res = prefill_moddeling(**kw)
    out["rows"].append(res["Latency"] / 1e3)
for nbytes, p, system in job["all_reduce"]:
    sysobj = get_inference_system(system_name=system, bits="bf16")
    out["all_reduce"].append(get_AR_time(nbytes, p, sysobj) / 1e3)
json.dump(out, sys.stdout)
"""


def run_genz(python: str, rows: list[dict], all_reduce: list) -> dict:
    job = {"rows": rows, "all_reduce": all_reduce}
    proc = subprocess.run([python, "-c", _GENZ_CHILD], input=json.dumps(job), text=True,
                          capture_output=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit("GenZ failed: " + proc.stderr.strip().splitlines()[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ours(row: dict) -> float:
    from dse import api
    kw = {"seq": row["tokens"]} if row["phase"] == "prefill" else {"context": row["tokens"]}
    arch = {"n_layer": row["layers"]} if row["layers"] else None
    shape = row.get("shape")
    if shape:
        arch = {**(arch or {}), "d_model": shape["d"], "n_head": shape["heads"],
                "n_kv_head": shape["kv_heads"], "d_ff": shape["ff"],
                "vocab_size": shape["vocab"]}
    if row["phase"] == "decode" and row["tokens"] + 1 > 4096:   # the cache holds ctx + 1
        arch = {**(arch or {}), "max_seq": row["tokens"] + 1}
    r = api.simulate("llama2-70b", system=row["system"], devices=row["tp"] * row["pp"],
                     parallel={"tp": row["tp"], "pp": row["pp"]}, phase=row["phase"],
                     batch=row["batch"], arch=arch, **kw)
    return r.latency_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--genz-python", default="/tmp/genz-venv/bin/python")
    ap.add_argument("--measured", help="a multi_gpu_measure.py JSON to compare both tools with")
    ap.add_argument("--measured-system", default="hgx-h200")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dse import api

    rows = [dict(label=l, system=s, phase=ph, batch=b, tokens=n, tp=tp, pp=pp, layers=L,
                 genz_system=GENZ_SYSTEMS[s], measured=None)
            for l, s, ph, b, n, tp, pp, L in ROWS]
    if args.measured:
        data = json.loads(Path(args.measured).read_text())
        for m in data["stack"]:
            n = m.get("seq", m.get("context"))
            # device time, as both tools predict it: prefill eager, decode's CUDA-graph replay
            for mode in (("graph_time_s",) if m.get("graph_time_s") else ("time_s",)):
                if m.get(mode):
                    rows.append(dict(label=f"measured {m['phase']} b={m['batch']} n={n} "
                                           f"({'graph' if mode == 'graph_time_s' else 'eager'})",
                                     system=args.measured_system, phase=m["phase"],
                                     batch=m["batch"], tokens=n, tp=m["tp"], pp=1,
                                     layers=m["layers"], shape=data["shape"],
                                     genz_system=GENZ_SYSTEMS[args.measured_system],
                                     measured=m[mode]))
    ar = [(nbytes, p, GENZ_SYSTEMS["hgx-h200"]) for nbytes, p in ALL_REDUCE]
    genz = run_genz(args.genz_python, rows, ar)
    for r, g in zip(rows, genz["rows"]):
        r["ours_s"], r["genz_s"] = ours(r), g
    ar_rows = []
    for (nbytes, p, _), g in zip(ar, genz["all_reduce"]):
        c = api.collective("all_reduce", nbytes, "hgx-h200", p)
        ar_rows.append({"bytes": nbytes, "devices": p, "ours_s": c.time_s, "genz_s": g,
                        "algorithm": c.algorithm})
    if args.json:
        print(json.dumps({"rows": rows, "all_reduce": ar_rows}, indent=2, default=str))
        return 0
    print(f"{'row':<46}{'system':<10}{'tp':>3}{'pp':>3}{'ours ms':>10}{'GenZ ms':>10}"
          f"{'measured':>10}{'ours err':>10}{'GenZ err':>10}")
    for r in rows:
        m = r["measured"]
        err = (lambda x: f"{100 * (x / m - 1):+.1f}%") if m else (lambda x: "")
        print(f"{r['label']:<46}{r['system']:<10}{r['tp']:>3}{r['pp']:>3}"
              f"{1e3 * r['ours_s']:>10.2f}{1e3 * r['genz_s']:>10.2f}"
              f"{(f'{1e3 * m:.2f}' if m else '-'):>10}{err(r['ours_s']):>10}"
              f"{err(r['genz_s']):>10}")
    print(f"\n{'all-reduce on hgx-h200':<30}{'ours us':>10}{'GenZ us':>10}  our algorithm")
    for a in ar_rows:
        print(f"{a['bytes']:>12} B on {a['devices']} GPUs      {1e6 * a['ours_s']:>10.1f}"
              f"{1e6 * a['genz_s']:>10.1f}  {a['algorithm']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
