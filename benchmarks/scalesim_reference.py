"""Run SCALE-Sim 3.0.0 on ResNet-18's convolutions and a set of GEMMs; record its cycles and wall
time next to the ``npu`` template's, in ``tests/data/scalesim_reference.json``.

SCALE-Sim runs in its own virtual environment (``.refenv`` at the repository root, git-ignored),
created here if missing: ``python -m venv .refenv && .refenv/bin/pip install scalesim==3.0.0
'numpy<2.4'``. Each (layer, dataflow) is one SCALE-Sim process (one-layer topology file), timed
around ``run_scale`` only (imports and start-up excluded).

Setup: one 32x32 array, ifmap/filter/ofmap SRAM 4096 KiB each, ``InterfaceBandwidth: CALC``
(SCALE-Sim estimates the DRAM bandwidth it needs, so no stall is ever charged: its "Total
Cycles" are then pure compute cycles). SCALE-Sim ignores padding: a conv with padding p is
given the input size ``(P - 1) * stride + R`` (the padded rows its windows actually touch), so
that SCALE-Sim's ``ceil((H - R + stride) / stride)`` gives torch's output size P.

Usage (from the repository root)::

    python benchmarks/scalesim_reference.py                 # everything (~20 min, 1 core)
    python benchmarks/scalesim_reference.py --only gemm_m64_k64_n64 --dataflows ws
    python benchmarks/scalesim_reference.py --ours-only     # refresh our columns only
    python benchmarks/scalesim_reference.py --table         # print the error tables (markdown)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accelerators.npu import NPU  # noqa: E402
from workloads.ir import Op  # noqa: E402

REFENV = ROOT / ".refenv"
SCALESIM_VERSION = "3.0.0"
DEFAULT_OUT = ROOT / "tests" / "data" / "scalesim_reference.json"
ARRAY = (32, 32)
SRAM_KB = 4096
DATAFLOWS = ("ws", "os", "is")


def _conv(name, c, h, k, r, stride, pad):
    p = (h + 2 * pad - r) // stride + 1
    return {"name": name, "kind": "conv", "n": 1, "c": c, "h": h, "w": h, "k": k, "r": r,
            "s": r, "p": p, "q": p, "stride": stride, "padding": pad, "groups": 1,
            "gemm_m": p * p, "gemm_n": k, "gemm_k": c * r * r}


def _gemm(name, m, k, n):
    return {"name": name, "kind": "gemm", "m": m, "n": n, "k": k}


def resnet18_layers() -> list[dict]:
    """Every convolution of torchvision's ResNet-18 at 224x224, batch 1, plus its FC as a GEMM."""
    layers = [_conv("conv1", 3, 224, 64, 7, 2, 3)]
    for b in range(2):
        for j in (1, 2):
            layers.append(_conv(f"layer1.{b}.conv{j}", 64, 56, 64, 3, 1, 1))
    c_in, h = 64, 56
    for stage, c in ((2, 128), (3, 256), (4, 512)):
        layers.append(_conv(f"layer{stage}.0.conv1", c_in, h, c, 3, 2, 1))
        layers.append(_conv(f"layer{stage}.0.conv2", c, h // 2, c, 3, 1, 1))
        layers.append(_conv(f"layer{stage}.0.downsample", c_in, h, c, 1, 2, 0))
        layers.append(_conv(f"layer{stage}.1.conv1", c, h // 2, c, 3, 1, 1))
        layers.append(_conv(f"layer{stage}.1.conv2", c, h // 2, c, 3, 1, 1))
        c_in, h = c, h // 2
    layers.append(_gemm("fc", 1, 512, 1000))
    return layers


def gemm_layers() -> list[dict]:
    """GEMMs ``m x k @ k x n``: square, transformer projections, a GEMV, odd sizes."""
    return [_gemm(f"gemm_m{m}_k{k}_n{n}", m, k, n) for m, k, n in (
        (64, 64, 64), (128, 768, 768), (512, 512, 2048), (1, 4096, 4096), (197, 768, 3072),
        (100, 300, 50), (7, 33, 65))]


def all_layers() -> list[dict]:
    return resnet18_layers() + gemm_layers()


def layer_op(layer: dict, bytes_per_element: int = 1) -> Op:
    """The IR op of a reference layer (what the capture would produce)."""
    b = bytes_per_element
    if layer["kind"] == "gemm":
        m, n, k = layer["m"], layer["n"], layer["k"]
        return Op(layer["name"], "matmul", "aten.mm", ((m, k), (k, n)), ((m, n),), "int8", b,
                  flops=2 * m * n * k, weight_bytes=k * n * b, activation_bytes_read=m * k * b,
                  activation_bytes_written=m * n * b,
                  attrs={"m": m, "n": n, "k": k, "batch": 1, "weight_operand": True})
    attrs = {key: layer[key] for key in ("n", "c", "h", "w", "k", "r", "s", "p", "q", "groups",
                                         "gemm_m", "gemm_n", "gemm_k")}
    attrs["stride"], attrs["padding"] = [layer["stride"]], [layer["padding"]]
    x = (layer["n"], layer["c"], layer["h"], layer["w"])
    wt = (layer["k"], layer["c"], layer["r"], layer["s"])
    out = (layer["n"], layer["k"], layer["p"], layer["q"])
    prod = lambda s: s[0] * s[1] * s[2] * s[3]  # noqa: E731
    return Op(layer["name"], "conv", "aten.convolution", (x, wt), (out,), "int8", b,
              flops=2 * layer["gemm_m"] * layer["gemm_n"] * layer["gemm_k"],
              weight_bytes=prod(wt) * b, activation_bytes_read=prod(x) * b,
              activation_bytes_written=prod(out) * b, attrs=attrs)


def reference_design(dataflow: str) -> NPU:
    """Our template configured like the SCALE-Sim runs."""
    return NPU("edge-32x32", rows=ARRAY[0], cols=ARRAY[1], dataflow=dataflow, arrays=1,
               ifmap_sram_kb=SRAM_KB, filter_sram_kb=SRAM_KB, ofmap_sram_kb=SRAM_KB)


def scalesim_topology_row(layer: dict) -> tuple[str, str]:
    """(header, row) of SCALE-Sim's topology CSV for ``layer``; conv rows carry the effective
    padded input size (see the module docstring)."""
    if layer["kind"] == "gemm":
        return "Layer,M,N,K,", f"{layer['name']},{layer['m']},{layer['n']},{layer['k']},"
    h_eff = (layer["p"] - 1) * layer["stride"] + layer["r"]
    w_eff = (layer["q"] - 1) * layer["stride"] + layer["s"]
    return ("Layer name,IFMAP Height,IFMAP Width,Filter Height,Filter Width,Channels,Num Filter,"
            "Strides,", f"{layer['name']},{h_eff},{w_eff},{layer['r']},{layer['s']},{layer['c']},"
                        f"{layer['k']},{layer['stride']},")


CONFIG = """[general]
run_name = ref

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: {sram}
FilterSramSzkB: {sram}
OfmapSramSzkB: {sram}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: 10
Dataflow: {dataflow}
MemoryBanks: 1
ReadRequestBuffer: 512
WriteRequestBuffer: 512

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""

# Runs inside .refenv: one SCALE-Sim layer, timed around run_scale, report parsed.
DRIVER = r"""
import json, sys, time
from scalesim.scale_sim import scalesim
cfg, topo, layout, gemm, out = sys.argv[1:6]
sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
               input_type_gemm=gemm == "gemm")
t0 = time.perf_counter()
sim.run_scale(top_path=out)
wall = time.perf_counter() - t0
lines = open(out + "/ref/COMPUTE_REPORT.csv").read().strip().splitlines()
cells = [c.strip() for c in lines[1].split(",") if c.strip()]
print(json.dumps({"wall_s": wall, "total_cycles_incl_prefetch": int(float(cells[1])),
                  "total_cycles": int(float(cells[2])), "stall_cycles": int(float(cells[3])),
                  "overall_util_pct": float(cells[4]), "mapping_efficiency_pct": float(cells[5]),
                  "compute_util_pct": float(cells[6])}))
"""


def ensure_refenv() -> Path:
    """The SCALE-Sim interpreter, installing ``scalesim==3.0.0`` into ``.refenv`` if missing."""
    py = REFENV / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m; print(m.version('scalesim'))"]
    if py.exists():
        found = subprocess.run(probe, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == SCALESIM_VERSION:
            return py
    print(f"creating {REFENV} with scalesim=={SCALESIM_VERSION} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(REFENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"scalesim=={SCALESIM_VERSION}",
                    "numpy<2.4"], check=True)
    return py


def run_scalesim(py: Path, layer: dict, dataflow: str, workdir: Path) -> dict:
    """One SCALE-Sim run of ``layer`` under ``dataflow``; its report plus wall time."""
    d = workdir / f"{layer['name']}_{dataflow}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "cfg.cfg").write_text(CONFIG.format(rows=ARRAY[0], cols=ARRAY[1], sram=SRAM_KB,
                                             dataflow=dataflow))
    header, row = scalesim_topology_row(layer)
    (d / "topo.csv").write_text(header + "\n" + row + "\n")
    (d / "layout.csv").write_text("Layer name,\n")   # no custom layout: header only
    kind = "gemm" if layer["kind"] == "gemm" else "conv"
    proc = subprocess.run([str(py), "-c", DRIVER, str(d / "cfg.cfg"), str(d / "topo.csv"),
                           str(d / "layout.csv"), kind, str(d / "out")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"SCALE-Sim failed on {layer['name']} {dataflow}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def time_ours(design: NPU, op: Op, repeat: int = 5, number: int = 200) -> float:
    """Best-of-``repeat`` mean seconds of one uncached ``design.cost(op)``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            design._cache.clear()
            design.cost(op)
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def ours(layer: dict, dataflow: str) -> dict:
    design, op = reference_design(dataflow), layer_op(layer)
    return {"ours_compute_cycles": int(round(design.cost(op).compute_cycles)),
            "ours_wall_s": time_ours(design, op)}


def layer_dims(layer: dict) -> dict:
    return {k: v for k, v in layer.items() if k not in ("name", "kind")}


def markdown_tables(doc: dict) -> str:
    """Per-layer cycles and errors, then max / mean |error| and wall times per dataflow, with
    our cycles recomputed from the current model (not the stored column)."""
    layers = {layer["name"]: layer for layer in all_layers()}
    by_layer: dict[str, dict[str, dict]] = {}
    for rec in doc["records"]:
        ours_cycles = reference_design(rec["dataflow"]).cost(
            layer_op(layers[rec["layer"]])).compute_cycles
        by_layer.setdefault(rec["layer"], {})[rec["dataflow"]] = {**rec, "now": ours_cycles}
    out = ["| layer | M x K x N (im2col) | " + " | ".join(
        f"{df.upper()} SCALE-Sim | {df.upper()} ours | {df.upper()} err" for df in DATAFLOWS)
        + " |", "|---|---|" + "---:|" * (3 * len(DATAFLOWS))]
    for name, recs in by_layer.items():
        lay = layers[name]
        m, k, n = ((lay["m"], lay["k"], lay["n"]) if lay["kind"] == "gemm"
                   else (lay["gemm_m"], lay["gemm_k"], lay["gemm_n"]))
        cells = []
        for df in DATAFLOWS:
            r = recs.get(df)
            if r is None:
                cells += ["", "", ""]
                continue
            err = round(r["now"]) / r["scalesim_compute_cycles"] - 1
            cells += [f"{r['scalesim_compute_cycles']:,}", f"{round(r['now']):,}", f"{err:+.3%}"]
        out.append(f"| {name} | {m} x {k} x {n} | " + " | ".join(cells) + " |")
    out += ["", "| dataflow | layers | max abs error | mean abs error | SCALE-Sim wall / layer "
                "(mean, max) | ours / layer (mean, max) | speed-up (geo-mean, min) |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for df in DATAFLOWS:
        rs = [recs[df] for recs in by_layer.values() if df in recs]
        if not rs:
            continue
        errs = [abs(round(r["now"]) / r["scalesim_compute_cycles"] - 1) for r in rs]
        ss = [r["scalesim_wall_s"] for r in rs]
        us = [r["ours_wall_s"] for r in rs]
        ratios = [a / b for a, b in zip(ss, us)]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(rs))
        out.append(f"| {df} | {len(rs)} | {max(errs):.3%} | {sum(errs) / len(errs):.3%} | "
                   f"{sum(ss) / len(ss):.2f} s, {max(ss):.2f} s | "
                   f"{sum(us) / len(us) * 1e6:.1f} us, {max(us) * 1e6:.1f} us | {geo:,.0f}x, "
                   f"{min(ratios):,.0f}x |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dataflows", nargs="+", default=list(DATAFLOWS), choices=DATAFLOWS)
    ap.add_argument("--only", nargs="+", help="layer names to run (default: all)")
    ap.add_argument("--ours-only", action="store_true",
                    help="keep the SCALE-Sim columns of --out, refresh ours")
    ap.add_argument("--table", action="store_true", help="print the tables of --out and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_tables(json.loads(args.out.read_text())))
        return 0

    layers = [lay for lay in all_layers() if not args.only or lay["name"] in args.only]
    old = {}
    if args.out.exists():
        for rec in json.loads(args.out.read_text())["records"]:
            old[(rec["layer"], rec["dataflow"])] = rec
    py = None if args.ours_only else ensure_refenv()
    with tempfile.TemporaryDirectory(prefix="scalesim_ref_") as tmp:
        for layer in layers:
            for df in args.dataflows:
                key = (layer["name"], df)
                rec = {"layer": layer["name"], "kind": layer["kind"], "dataflow": df,
                       "dims": layer_dims(layer), "scalesim_input": scalesim_topology_row(layer)[1]}
                if args.ours_only:
                    if key not in old:
                        continue
                    rec.update({k: v for k, v in old[key].items() if k.startswith("scalesim_")
                                and k != "scalesim_input"})
                else:
                    res = run_scalesim(py, layer, df, Path(tmp))
                    rec.update({"scalesim_compute_cycles": res["total_cycles"] - res["stall_cycles"],
                                **{f"scalesim_{k}": v for k, v in res.items()}})
                rec.update(ours(layer, df))
                err = (rec["ours_compute_cycles"] / rec["scalesim_compute_cycles"] - 1) * 100
                rec["error_pct"] = err
                old[key] = rec
                print(f"{layer['name']:28s} {df}  scalesim {rec['scalesim_compute_cycles']:>9d}  "
                      f"ours {rec['ours_compute_cycles']:>9d}  err {err:+.3f}%  "
                      f"scalesim {rec['scalesim_wall_s']:.3f} s  ours "
                      f"{rec['ours_wall_s'] * 1e6:.1f} us", flush=True)
    order = {lay["name"]: i for i, lay in enumerate(all_layers())}
    records = sorted(old.values(), key=lambda r: (order.get(r["layer"], 1e9), r["layer"],
                                                  DATAFLOWS.index(r["dataflow"])))
    doc = {
        "tool": f"SCALE-Sim {SCALESIM_VERSION} (pip scalesim=={SCALESIM_VERSION})",
        "array": list(ARRAY), "sram_kb_each": SRAM_KB, "interface_bandwidth": "CALC",
        "command": "python benchmarks/scalesim_reference.py",
        "host": f"{platform.machine()} {platform.processor() or ''} python "
                f"{platform.python_version()}, {os.cpu_count()} logical CPUs".replace("  ", " "),
        "notes": "scalesim_compute_cycles = SCALE-Sim 'Total Cycles' - 'Stall Cycles' (stalls "
                 "are 0 in CALC mode); wall times: SCALE-Sim's run_scale, ours one uncached "
                 "NPU.cost(op) (best-of-5 mean of 200 calls)",
        "records": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({len(records)} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
