"""Compare the ``npu`` template with ZigZag (KU Leuven, ``zigzag-dse`` 3.9.1) on ResNet-18's
convolutions and a set of GEMMs, one 32x32 array in each dataflow; write
``tests/data/zigzag_reference.json``.

ZigZag runs in its own virtual environment (``.refenv-zigzag`` at the repository root,
git-ignored), created here if missing: ``python -m venv .refenv-zigzag &&
.refenv-zigzag/bin/pip install zigzag-dse==3.9.1 six==1.17.0`` (3.9.1 imports ``six`` without
declaring it). Each dataflow is one ZigZag process that evaluates the layers one by one; a
layer's ZigZag time is its stage pipeline (parse workload + mapping + accelerator, then spatial
mapping, LOMA temporal-mapping search and cost model), timed from inside the process (imports
and CACTI excluded). Ours is one uncached ``NPU.cost(op)`` (median of 7 repeats of 200 calls).

Hardware on both sides (``comparison_design``): the ``edge-32x32`` preset (32x32 int8 array,
500 MHz, 64 KiB ifmap / filter / ofmap scratchpads, LPDDR4) with DRAM at 256 bit/cycle
(16 GB/s) and node 22 nm, the node of ZigZag's bundled CACTI. ZigZag's accelerator
(``zz_accelerator``): one 8-bit input, one 8-bit weight and one 32-bit accumulator register
per PE, the three 64 KiB SRAMs (ifmap / filter ports 256 bit/cycle, ofmap 1024 bit/cycle: what
the array consumes per cycle) and a DRAM with one 256 bit/cycle port; ``systolic_dimensions``
as in ZigZag's ``tpu_like``.

Two ZigZag energy variants (record keys ``zigzag`` and ``zigzag.ours_tables``):

* ZigZag's own numbers: CACTI 7 (bundled with ZigZag, 22 nm) for the three SRAMs, ZigZag's
  example TPU-like / Edge-TPU-like costs for the MAC, the registers and the DRAM.
* the mapping ZigZag found with its own numbers, re-evaluated by ZigZag's cost model with *our*
  energy table (``accelerators/technology.py``) for the MAC, registers, SRAMs and DRAM: what is
  left of the energy deviation is the access counting / mapping, not the technology table.

Spatial unrolling per dataflow (``zz_spatial_mapping``), array rows D1 x columns D2, as ours
(``accelerators/systolic.py``): WS rows = reduction (C, FY, FX), cols = filters K; OS rows =
output pixels (OY, OX), cols = K; IS rows = reduction, cols = output pixels. A dimension ours
flattens (im2col C*R*S, P*Q) is split over ZigZag's loops by the factorisation with the fewest
folds. ZigZag searches the temporal mapping (LOMA, ``lpf_limit`` 6, ZigZag's default; LOMA
raises it to the number of temporal loops, so convolutions get all orderings of whole loops)
and keeps the one of least energy-delay product (its API's ``opt="EDP"``): ours picks the
loop order that moves the fewest DRAM bytes and then derives the latency, so neither a pure
latency nor a pure energy search is its counterpart.

Usage (from the repository root, in the project venv)::

    python benchmarks/zigzag_compare.py                    # everything (~10 min on 2 cores)
    python benchmarks/zigzag_compare.py --only fc layer1.0.conv1 --dataflows ws
    python benchmarks/zigzag_compare.py --ours-only        # keep ZigZag's columns, refresh ours
    python benchmarks/zigzag_compare.py --table            # markdown tables of --out
    python benchmarks/zigzag_compare.py --keep-inputs /tmp/zz   # also keep ZigZag's input files
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accelerators import technology as tech  # noqa: E402
from accelerators.npu import NPU  # noqa: E402
from benchmarks.scalesim_reference import all_layers, layer_op  # noqa: E402
from workloads.ir import Op  # noqa: E402

REFENV = ROOT / ".refenv-zigzag"
#: What ``pip install`` gave on 2026-05 [R pypi zigzag-dse]; six: imported by
#: ``zigzag/parser/upgraded_validator.py`` of 3.9.1 but missing from its requirements.
ZIGZAG_VERSION = "3.9.1"
PIP_PINS = (f"zigzag-dse=={ZIGZAG_VERSION}", "six==1.17.0")
DEFAULT_OUT = ROOT / "tests" / "data" / "zigzag_reference.json"
DATAFLOWS = ("ws", "os", "is")

# ------------------------------------------------------------------------------ the hardware
#: Array rows x columns, PEs (the ``edge-32x32`` preset [R SCALE-Sim configs/scale.cfg]).
ARRAY = (32, 32)
#: Each scratchpad, KiB (``edge-32x32`` preset [R SCALE-Sim configs/scale.cfg: 64 KB each]).
SRAM_KB = 64
#: Clock, Hz (``edge-32x32`` preset [E]).
CLOCK_HZ = 5.0e8
#: Process node, nm: ZigZag's CACTI runs at 22 nm [R zigzag/cacti/cacti_parser.py,
#: ``technology=0.022`` default, not settable from the accelerator YAML]; ours is set to match.
NODE_NM = 22
#: DRAM bits per cycle on both sides [E: one x32 LPDDR4-4000 channel, 16 GB/s = 32 B x 500 MHz];
#: ZigZag's port widths must be integers of bits per cycle, so the preset's 12.8 GB/s
#: (204.8 bit/cycle) is rounded to this.
DRAM_BITS_PER_CYCLE = 256
DRAM_BANDWIDTH_BPS = DRAM_BITS_PER_CYCLE / 8 * CLOCK_HZ
#: SRAM port widths, bits per cycle [E]: what the array consumes each cycle in our model (one
#: 8-bit operand per array row or column for ifmap / filter; one 32-bit partial sum per column
#: for ofmap), so ZigZag's port model adds no stall that ours cannot have.
IFMAP_PORT_BITS, FILTER_PORT_BITS, OFMAP_PORT_BITS = 8 * ARRAY[0], 8 * ARRAY[1], 32 * ARRAY[1]
#: Bits per element: int8 operands, 32-bit partial sums, int8 final outputs (ours ACC_BYTES = 4).
PRECISION = {"I": 8, "W": 8, "O": 32, "O_final": 8}

# ZigZag's own energy numbers (variant ``zz``), pJ per access of the port width:
#: MAC, pJ [R zigzag/inputs/hardware/tpu_like.yaml and edge_tpu_like.yaml, unit_energy 0.04].
ZZ_MAC_PJ = 0.04
#: 8-bit register read / write, pJ [R zigzag/inputs/hardware/edge_tpu_like.yaml, rf_1B 0.01].
ZZ_REG8_PJ = 0.01
#: 32-bit accumulator register, pJ [E: 2 x rf_2B's 0.02 pJ per 16 bit of edge_tpu_like.yaml].
ZZ_REG32_PJ = 0.04
#: DRAM read / write per 64-bit access, pJ [R zigzag/inputs/hardware/tpu_like.yaml, dram
#: r_cost 700, w_cost 750]; scaled linearly to the 256-bit port.
ZZ_DRAM_PJ_PER_64BIT = (700.0, 750.0)

#: ZigZag LOMA setting (its API default) [R zigzag/api.py lpf_limit=6].
LPF_LIMIT = 6


def comparison_design(dataflow: str) -> NPU:
    """Our template configured like the ZigZag accelerator."""
    return NPU("edge-32x32", rows=ARRAY[0], cols=ARRAY[1], dataflow=dataflow, arrays=1,
               ifmap_sram_kb=SRAM_KB, filter_sram_kb=SRAM_KB, ofmap_sram_kb=SRAM_KB,
               clock_hz=CLOCK_HZ, dram_bandwidth_Bps=DRAM_BANDWIDTH_BPS, node_nm=NODE_NM)


def _port(name: str, kind: str, bits: int, *allocation: str) -> dict:
    # bandwidth_min 8: ZigZag counts accesses as ceil(bits / min) * min / max, so with one
    # element as the minimum the count is exactly bits / max (no rounding up to whole words)
    return {"name": name, "type": kind, "bandwidth_min": 8, "bandwidth_max": bits,
            "allocation": list(allocation)}


def _memory(size_bits: int, operands: list[str], ports: list[dict], served: list[str],
            r_pj: float | None, w_pj: float | None, *, cacti: bool = False) -> dict:
    m = {"size": size_bits, "area": 0.0, "latency": 1, "operands": operands, "ports": ports,
         "served_dimensions": served}
    if cacti:
        m.update({"mem_type": "sram", "auto_cost_extraction": True})
    else:
        m.update({"r_cost": float(r_pj), "w_cost": float(w_pj)})
    return m


def our_costs_pj() -> dict[str, tuple[float, float]]:
    """(read, write) pJ per access of each ZigZag memory, and the MAC, from *our* tables."""
    sram = tech.sram_energy_j_per_byte(SRAM_KB * 1024, NODE_NM) * 1e12
    reg = tech.register_energy_j_per_byte(NODE_NM) * 1e12
    dram = tech.dram_energy_j_per_byte(comparison_design("ws").hw.dram) * 1e12
    return {"mac": (tech.mac_energy_j("int8", NODE_NM) * 1e12,) * 2,
            "reg_I": (reg,) * 2, "reg_W": (reg,) * 2, "reg_O": (4 * reg,) * 2,
            "ifmap_sram": (sram * IFMAP_PORT_BITS / 8,) * 2,
            "filter_sram": (sram * FILTER_PORT_BITS / 8,) * 2,
            "ofmap_sram": (sram * OFMAP_PORT_BITS / 8,) * 2,
            "dram": (dram * DRAM_BITS_PER_CYCLE / 8,) * 2}


def zz_costs_pj(cacti: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """(read, write) pJ per access in ZigZag's own numbers; ``cacti`` gives the three SRAMs."""
    scale = DRAM_BITS_PER_CYCLE / 64
    return {"mac": (ZZ_MAC_PJ,) * 2, "reg_I": (ZZ_REG8_PJ,) * 2, "reg_W": (ZZ_REG8_PJ,) * 2,
            "reg_O": (ZZ_REG32_PJ,) * 2, **cacti,
            "dram": (ZZ_DRAM_PJ_PER_64BIT[0] * scale, ZZ_DRAM_PJ_PER_64BIT[1] * scale)}


def zz_accelerator(costs: dict[str, tuple[float, float]], cacti_srams: bool = False) -> dict:
    """ZigZag's accelerator description with ``costs`` ((read, write) pJ per access by memory
    name, and ``mac``); ``cacti_srams``: the three SRAMs' costs are left to ZigZag's CACTI."""
    sram_bits = SRAM_KB * 1024 * 8
    pe: list[str] = []   # served by nothing: one register per PE
    both = ["D1", "D2"]

    def sram(name: str, operand: str, bits: int, *extra: str) -> dict:
        ports = [_port("r_port_1", "read", bits, f"{operand}, tl", *extra[:1]),
                 _port("w_port_1", "write", bits, f"{operand}, fh", *extra[1:])]
        if cacti_srams:
            return _memory(sram_bits, [operand], ports, both, None, None, cacti=True)
        return _memory(sram_bits, [operand], ports, both, *costs[name])

    mems = {
        "reg_W": _memory(8, ["I2"], [_port("r_port_1", "read", 8, "I2, tl"),
                                      _port("w_port_1", "write", 8, "I2, fh")], pe,
                         *costs["reg_W"]),
        "reg_I": _memory(8, ["I1"], [_port("r_port_1", "read", 8, "I1, tl"),
                                      _port("w_port_1", "write", 8, "I1, fh")], pe,
                         *costs["reg_I"]),
        "reg_O": _memory(32, ["O"], [_port("r_port_1", "read", 32, "O, tl"),
                                      _port("r_port_2", "read", 32, "O, th"),
                                      _port("w_port_1", "write", 32, "O, fh"),
                                      _port("w_port_2", "write", 32, "O, fl")], pe,
                         *costs["reg_O"]),
        "ifmap_sram": sram("ifmap_sram", "I1", IFMAP_PORT_BITS),
        "filter_sram": sram("filter_sram", "I2", FILTER_PORT_BITS),
        "ofmap_sram": sram("ofmap_sram", "O", OFMAP_PORT_BITS, "O, th", "O, fl"),
        "dram": _memory(10_000_000_000, ["I1", "I2", "O"], [
            _port("rw_port_1", "read_write", DRAM_BITS_PER_CYCLE, "I1, fh", "I1, tl", "I2, fh",
                  "I2, tl", "O, fh", "O, tl", "O, fl", "O, th")], both, *costs["dram"]),
    }
    return {"name": f"npu_{ARRAY[0]}x{ARRAY[1]}", "memories": mems,
            "operational_array": {"unit_energy": float(costs["mac"][0]), "unit_area": 1.0,
                                  "dimensions": ["D1", "D2"], "sizes": list(ARRAY),
                                  "systolic_dimensions": ["D1", "D2"]}}


# ------------------------------------------------------------------------------ the workload
def zz_layer(layer: dict) -> list[dict]:
    """One layer as ZigZag's YAML workload (a list of one layer)."""
    prec = dict(PRECISION)
    if layer["kind"] == "gemm":
        return [{"id": 0, "name": layer["name"], "operator_type": "Gemm",
                 "equation": "O[d][k]+=I[d][c]*W[c][k]", "loop_dims": ["D", "C", "K"],
                 "loop_sizes": [layer["m"], layer["k"], layer["n"]], "operand_precision": prec,
                 "operand_source": {"I": 0, "W": 0}}]
    st, pad = layer["stride"], layer["padding"]
    return [{"id": 0, "name": layer["name"], "operator_type": "Conv",
             "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
             "dimension_relations": [f"ix={st}*ox+1*fx", f"iy={st}*oy+1*fy"],
             "loop_dims": ["B", "K", "C", "OY", "OX", "FY", "FX"],
             "loop_sizes": [layer["n"], layer["k"], layer["c"], layer["p"], layer["q"],
                            layer["r"], layer["s"]],
             "operand_precision": prec, "operand_source": {"I": 0, "W": 0},
             "pr_loop_dims": ["IX", "IY"], "pr_loop_sizes": [layer["w"], layer["h"]],
             "padding": [[pad, pad], [pad, pad]]}]


def best_unroll(sizes: tuple[int, ...], lanes: int) -> tuple[int, ...]:
    """Unroll factors (one per loop, product <= ``lanes``) with the fewest folds
    ``prod(ceil(size / u))``; ties: more lanes used, then larger factors on earlier loops."""
    ranges = [range(1, min(s, lanes) + 1) for s in sizes]
    best, best_key = None, None
    for u in itertools.product(*ranges):
        if math.prod(u) > lanes:
            continue
        key = (math.prod(-(-s // x) for s, x in zip(sizes, u)), -math.prod(u),
               tuple(-x for x in u))
        if best_key is None or key < best_key:
            best, best_key = u, key
    return best


def zz_spatial_mapping(layer: dict, dataflow: str) -> dict[str, list[str]]:
    """ZigZag ``spatial_mapping`` (D1 = array rows, D2 = columns) matching our dataflow."""
    rows, cols = ARRAY
    if layer["kind"] == "gemm":
        red, out_px, filt = [("C", layer["k"])], [("D", layer["m"])], [("K", layer["n"])]
    else:
        red = [("C", layer["c"]), ("FY", layer["r"]), ("FX", layer["s"])]
        out_px = [("OY", layer["p"]), ("OX", layer["q"])]
        filt = [("K", layer["k"])]
    sr, sc = {"ws": (red, filt), "os": (out_px, filt), "is": (red, out_px)}[dataflow]

    def unroll(dims, lanes):
        factors = best_unroll(tuple(s for _, s in dims), lanes)
        return [f"{d}, {u}" for (d, _), u in zip(dims, factors) if u > 1] or [f"{dims[0][0]}, 1"]

    return {"D1": unroll(sr, rows), "D2": unroll(sc, cols)}


def zz_mapping(layer: dict, dataflow: str) -> list[dict]:
    return [{"name": "default", "spatial_mapping": zz_spatial_mapping(layer, dataflow),
             "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}]


def _write_yaml(path: Path, data) -> str:
    # JSON is valid YAML (flow style); ZigZag reads these with yaml.safe_load
    path.write_text(json.dumps(data, indent=1) + "\n")
    return str(path)


# ------------------------------------------------------------------------------ ZigZag side
# Runs inside .refenv-zigzag. Argument: a job JSON. Prints one "ZZ_RESULT <json>" line per layer.
DRIVER = r"""
import json, logging, sys, time, traceback
from zigzag.stages.main import MainStage
from zigzag.stages.parser.workload_parser import WorkloadParserStage
from zigzag.stages.parser.accelerator_parser import AcceleratorParserStage
from zigzag.stages.workload_iterator import WorkloadStage
from zigzag.stages.results.reduce_stages import MinimalEDPStage, SumStage
from zigzag.stages.mapping.spatial_mapping_generation import SpatialMappingGeneratorStage
from zigzag.stages.mapping.temporal_mapping_generator_stage import TemporalMappingGeneratorStage
from zigzag.stages.evaluation.cost_model_evaluation import CostModelStage
from zigzag.cost_model.cost_model import CostModelEvaluation
from zigzag.mapping.temporal_mapping import TemporalMappingType
from zigzag.mapping.data_movement import DataDirection

logging.basicConfig(level=logging.ERROR)
job = json.load(open(sys.argv[1]))
# ZigZag's get_hardware_performance_zigzag pipeline without its file-output stages
STAGES = [WorkloadParserStage, AcceleratorParserStage, SumStage, WorkloadStage,
          MinimalEDPStage, SpatialMappingGeneratorStage, MinimalEDPStage,
          TemporalMappingGeneratorStage, CostModelStage]
acc_t = AcceleratorParserStage.parse_accelerator(job["accelerator_ours_tables"])


def summary(cme):
    by_mem, dram_bits = {}, 0.0
    hier = cme.accelerator.memory_hierarchy
    for layer_op, per_level in cme.mem_energy_breakdown.items():
        mem_op = cme.memory_operand_links.layer_to_mem_op(layer_op)
        levels = hier.get_memory_levels(mem_op)
        for lvl, e in zip(levels, per_level):
            name = lvl.memory_instance.name
            by_mem[name] = by_mem.get(name, 0.0) + e
        for lvl, acc in zip(levels, cme.memory_word_access[layer_op]):
            if lvl.memory_instance.name == "dram":
                words = sum(acc.get(d) for d in DataDirection)
                dram_bits += words * lvl.memory_instance.ports[0].bw_max
    return {"latency_cycles": float(cme.latency_total2), "energy_pj": float(cme.energy_total),
            "mac_energy_pj": float(cme.mac_energy), "energy_by_memory_pj": by_mem,
            "dram_bytes": dram_bits / 8}


for item in job["layers"]:
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        main = MainStage(STAGES, accelerator=job["accelerator"], workload=item["workload"],
                         mapping=item["mapping"], loma_lpf_limit=job["lpf_limit"],
                         loma_show_progress_bar=False, nb_mappings_generated=3,
                         enable_mix_spatial_mapping_generation=False,
                         access_same_data_considered_as_no_access=True,
                         temporal_mapping_type=TemporalMappingType("uneven"))
        cmes = main.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        cme = cmes[0][1][0][0]
        # the same mapping, priced by ZigZag's cost model with our energy table
        cme_t = CostModelEvaluation(accelerator=acc_t, layer=cme.layer,
                                    spatial_mapping=cme.spatial_mapping,
                                    spatial_mapping_int=cme.spatial_mapping_int,
                                    temporal_mapping=cme.temporal_mapping,
                                    access_same_data_considered_as_no_access=True)
        out = {"layer": item["layer"], "wall_s": wall, "cpu_s": cpu, **summary(cme),
               "ideal_cycles": float(cme.ideal_cycle),
               "ideal_temporal_cycles": float(cme.ideal_temporal_cycle),
               "stall_slack_cycles": float(cme.stall_slack_comb),
               "onloading_cycles": float(cme.data_onloading_cycle),
               "offloading_cycles": float(cme.data_offloading_cycle),
               "systolic_drain_cycles": float(cme.systolic_drain_cycle),
               "spatial_mapping": str(cme.layer.spatial_mapping),
               "temporal_mapping": str(cme.temporal_mapping).replace("\n", " "),
               "ours_tables": summary(cme_t),
               "ours_tables_latency_matches": cme_t.latency_total2 == cme.latency_total2}
    except Exception:
        out = {"layer": item["layer"], "error": traceback.format_exc()[-3000:]}
    print("ZZ_RESULT " + json.dumps(out), flush=True)
"""

# Runs inside .refenv-zigzag: the SRAM costs ZigZag's CACTI gives the accelerator.
CACTI_DRIVER = r"""
import json, logging, sys
logging.basicConfig(level=logging.ERROR)
from zigzag.stages.parser.accelerator_parser import AcceleratorParserStage
acc = AcceleratorParserStage.parse_accelerator(sys.argv[1])
out = {}
for lvl in acc.memory_hierarchy.mem_level_list:
    m = lvl.memory_instance
    out[m.name] = [m.r_cost, m.w_cost, m.area]
print("ZZ_RESULT " + json.dumps(out))
"""


def _refenv_env() -> dict:
    env = dict(os.environ)
    # ZigZag calls CACTI's wrapper as "python" from PATH: make that the refenv's interpreter
    env["PATH"] = f"{REFENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    return env


def ensure_refenv() -> Path:
    """The ZigZag interpreter, installing the pinned packages into ``.refenv-zigzag`` if missing."""
    py = REFENV / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m, six, zigzag; "
                            "print(m.version('zigzag-dse'))"]
    if py.exists():
        found = subprocess.run(probe, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == ZIGZAG_VERSION:
            return py
    print(f"creating {REFENV} with {' '.join(PIP_PINS)} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(REFENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PIP_PINS], check=True)
    return py


def _run_driver(py: Path, code: str, *args: str, log: Path | None = None) -> list[dict]:
    proc = subprocess.run([str(py), "-c", code, *args], capture_output=True, text=True,
                          env=_refenv_env())
    if log is not None:
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    results = [json.loads(line[len("ZZ_RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("ZZ_RESULT ")]
    if proc.returncode != 0 and not results:
        raise RuntimeError(f"ZigZag driver failed:\n{proc.stderr[-3000:]}")
    return results


def cacti_costs(py: Path, workdir: Path) -> dict[str, tuple[float, float]]:
    """Read / write pJ per access of the three SRAMs from ZigZag's CACTI (run once, cached by
    ZigZag in its package directory)."""
    path = _write_yaml(workdir / "accelerator_cacti.yaml",
                       zz_accelerator(zz_costs_pj({}), cacti_srams=True))
    res = _run_driver(py, CACTI_DRIVER, path)[0]
    return {k: (v[0], v[1]) for k, v in res.items() if k.endswith("_sram")}


def run_zigzag(py: Path, layers: list[dict], dataflows: list[str], workdir: Path,
               jobs: int) -> tuple[dict, dict]:
    """ZigZag results keyed by (layer, dataflow), and the two energy tables used."""
    costs_zz = zz_costs_pj(cacti_costs(py, workdir))
    costs_ours = our_costs_pj()
    acc = _write_yaml(workdir / "accelerator.yaml", zz_accelerator(costs_zz))
    acc_t = _write_yaml(workdir / "accelerator_ours_tables.yaml", zz_accelerator(costs_ours))
    job_files = []
    for df in dataflows:
        d = workdir / df
        d.mkdir(parents=True, exist_ok=True)
        items = [{"layer": lay["name"],
                  "workload": _write_yaml(d / f"{lay['name']}_workload.yaml", zz_layer(lay)),
                  "mapping": _write_yaml(d / f"{lay['name']}_mapping.yaml", zz_mapping(lay, df))}
                 for lay in layers]
        job = {"accelerator": acc, "accelerator_ours_tables": acc_t, "lpf_limit": LPF_LIMIT,
               "layers": items}
        job_files.append((df, _write_yaml(d / "job.json.yaml", job)))

    def one(df_job):
        df, job = df_job
        res = _run_driver(py, DRIVER, job, log=workdir / f"zigzag_{df}.log")
        for r in res:
            status = "error" if "error" in r else (f"{r['latency_cycles']:>10.0f} cyc "
                                                   f"{r['energy_pj'] / 1e6:9.2f} uJ "
                                                   f"{r['wall_s']:.2f} s")
            print(f"  zigzag {df} {r['layer']:26s} {status}", flush=True)
        return df, res

    out = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for df, res in pool.map(one, job_files):
            for r in res:
                out[(r["layer"], df)] = r
    tables = {"zigzag_own": {k: list(v) for k, v in costs_zz.items()},
              "ours": {k: list(v) for k, v in costs_ours.items()}}
    return out, tables


# ------------------------------------------------------------------------------ our side
def time_ours(design: NPU, op: Op, repeat: int = 7, number: int = 200) -> float:
    """Median over ``repeat`` of the mean seconds of one uncached ``design.cost(op)``."""
    means = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            design._cache.clear()
            design.cost(op)
        means.append((time.perf_counter() - t0) / number)
    return statistics.median(means)


def ours(layer: dict, dataflow: str) -> dict:
    design, op = comparison_design(dataflow), layer_op(layer)
    c = design.cost(op)
    reg_pj = c.bytes_by_level["register"] * tech.register_energy_j_per_byte(NODE_NM) * 1e12
    return {"latency_cycles": c.latency_s * c.clock_hz, "compute_cycles": c.compute_cycles,
            "energy_pj": sum(c.energy_j.values()) * 1e12,
            "energy_by_component_pj": {k: v * 1e12 for k, v in c.energy_j.items()},
            "energy_by_level_pj": {"mac": c.energy_j["compute"] * 1e12, "registers": reg_pj,
                                   "sram": c.energy_j["onchip_memory"] * 1e12 - reg_pj,
                                   "dram": c.energy_j["offchip_memory"] * 1e12},
            "bytes_by_level": dict(c.bytes_by_level),
            "dram_bytes": c.traffic["dram"], "bound": c.bound,
            "wall_s": time_ours(design, op)}


def deviations(rec: dict) -> dict:
    """Ours relative to ZigZag, percent."""
    z, o = rec["zigzag"], rec["ours"]
    pct = lambda a, b: (a / b - 1) * 100 if b else float("nan")  # noqa: E731
    return {"latency_pct": pct(o["latency_cycles"], z["latency_cycles"]),
            "compute_pct": pct(o["compute_cycles"], z["ideal_temporal_cycles"]),
            "energy_pct": pct(o["energy_pj"], z["energy_pj"]),
            "energy_vs_ours_tables_pct": pct(o["energy_pj"], z["ours_tables"]["energy_pj"]),
            "dram_bytes_pct": pct(o["dram_bytes"], z["dram_bytes"]),
            "speed_ratio": z["wall_s"] / o["wall_s"]}


# ------------------------------------------------------------------------------ tables
def _zz_levels(z: dict) -> dict[str, float]:
    """ZigZag's energy grouped like ours: MAC, registers, SRAM, DRAM (pJ)."""
    out = {"mac": z["mac_energy_pj"], "registers": 0.0, "sram": 0.0, "dram": 0.0}
    for name, e in z["energy_by_memory_pj"].items():
        out["registers" if name.startswith("reg_") else "sram" if name.endswith("_sram")
            else "dram"] += e
    return out


def energy_by_level(records: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Per dataflow, the energy by level summed over the layers: ZigZag (its tables), ZigZag
    (our tables), ours; pJ."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in records:
        if "deviation" not in r:
            continue
        parts = out.setdefault(r["dataflow"], {})
        for variant, levels in (("zigzag", _zz_levels(r["zigzag"])),
                                ("zigzag_ours_tables", _zz_levels(r["zigzag"]["ours_tables"])),
                                ("ours", r["ours"]["energy_by_level_pj"])):
            acc = parts.setdefault(variant, {})
            for lvl, e in levels.items():
                acc[lvl] = acc.get(lvl, 0.0) + e
            acc["total"] = acc.get("total", 0.0) + sum(levels.values())
    return out


def summary_rows(records: list[dict]) -> list[dict]:
    rows = []
    for df in DATAFLOWS:
        rs = [r for r in records if r["dataflow"] == df and "deviation" in r]
        if not rs:
            continue
        col = lambda k: [abs(r["deviation"][k]) for r in rs]  # noqa: E731
        ratios = [r["deviation"]["speed_ratio"] for r in rs]
        cpu_ratios = [r["zigzag"]["cpu_s"] / r["ours"]["wall_s"] for r in rs]
        rows.append({
            "dataflow": df, "layers": len(rs),
            "latency_abs_pct_median": statistics.median(col("latency_pct")),
            "latency_abs_pct_max": max(col("latency_pct")),
            "compute_abs_pct_median": statistics.median(col("compute_pct")),
            "latency_pct_median": statistics.median(r["deviation"]["latency_pct"] for r in rs),
            "energy_pct_median": statistics.median(r["deviation"]["energy_pct"] for r in rs),
            "energy_ours_tables_pct_median": statistics.median(
                r["deviation"]["energy_vs_ours_tables_pct"] for r in rs),
            "energy_abs_pct_median": statistics.median(col("energy_pct")),
            "energy_abs_pct_max": max(col("energy_pct")),
            "energy_ours_tables_abs_pct_median":
                statistics.median(col("energy_vs_ours_tables_pct")),
            "energy_ours_tables_abs_pct_max": max(col("energy_vs_ours_tables_pct")),
            "dram_bytes_abs_pct_median": statistics.median(col("dram_bytes_pct")),
            "zigzag_wall_s_median": statistics.median(r["zigzag"]["wall_s"] for r in rs),
            "zigzag_cpu_s_median": statistics.median(r["zigzag"]["cpu_s"] for r in rs),
            "ours_wall_s_median": statistics.median(r["ours"]["wall_s"] for r in rs),
            "speed_ratio_median": statistics.median(ratios), "speed_ratio_min": min(ratios),
            "cpu_speed_ratio_min": min(cpu_ratios)})
    return rows


def markdown_tables(doc: dict) -> str:
    out = ["| layer | df | ZigZag cycles | ours cycles | dev | ZigZag uJ | ours uJ | dev | "
           "ZigZag@our-tables uJ | dev | ZigZag DRAM KB | ours DRAM KB | ZigZag ms | ours us | "
           "speed ratio |", "|---|---|" + "---:|" * 13]
    for r in doc["records"]:
        if "deviation" not in r:
            out.append(f"| {r['layer']} | {r['dataflow']} | ZigZag failed |" + " |" * 12)
            continue
        z, o, d = r["zigzag"], r["ours"], r["deviation"]
        out.append(
            f"| {r['layer']} | {r['dataflow']} | {z['latency_cycles']:,.0f} | "
            f"{o['latency_cycles']:,.0f} | {d['latency_pct']:+.1f}% | {z['energy_pj'] / 1e6:.2f} | "
            f"{o['energy_pj'] / 1e6:.2f} | {d['energy_pct']:+.1f}% | "
            f"{z['ours_tables']['energy_pj'] / 1e6:.2f} | {d['energy_vs_ours_tables_pct']:+.1f}% | "
            f"{z['dram_bytes'] / 1e3:,.1f} | {o['dram_bytes'] / 1e3:,.1f} | "
            f"{z['wall_s'] * 1e3:,.0f} | {o['wall_s'] * 1e6:.1f} | {d['speed_ratio']:,.0f}x |")
    out += ["", "| dataflow | layers | latency dev: median, median abs, max abs | compute "
                "cycles only (median abs) | energy dev, ZigZag's tables: median, median abs, "
                "max abs | energy dev, ZigZag with our tables: median, median abs, max abs | "
                "DRAM bytes dev (median abs) | ZigZag per layer (median wall / CPU) | ours per "
                "layer (median) | speed ratio (median / min; min on CPU time) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in doc["summary"]:
        out.append(
            f"| {s['dataflow']} | {s['layers']} | {s['latency_pct_median']:+.1f}%, "
            f"{s['latency_abs_pct_median']:.1f}%, {s['latency_abs_pct_max']:.1f}% | "
            f"{s['compute_abs_pct_median']:.1f}% | {s['energy_pct_median']:+.1f}%, "
            f"{s['energy_abs_pct_median']:.1f}%, {s['energy_abs_pct_max']:.1f}% | "
            f"{s['energy_ours_tables_pct_median']:+.1f}%, "
            f"{s['energy_ours_tables_abs_pct_median']:.1f}%, "
            f"{s['energy_ours_tables_abs_pct_max']:.1f}% | {s['dram_bytes_abs_pct_median']:.1f}% | "
            f"{s['zigzag_wall_s_median']:.2f} s / {s['zigzag_cpu_s_median']:.2f} s | "
            f"{s['ours_wall_s_median'] * 1e6:.1f} us | {s['speed_ratio_median']:,.0f}x / "
            f"{s['speed_ratio_min']:,.0f}x; {s['cpu_speed_ratio_min']:,.0f}x |")
    out += ["", "Energy by level, summed over the layers, uJ (ZigZag's tables / ZigZag with our "
                "tables / ours):", "",
            "| dataflow | MAC | registers | SRAM | DRAM | total |",
            "|---|---:|---:|---:|---:|---:|"]
    for df, parts in energy_by_level(doc["records"]).items():
        cells = [" / ".join(f"{parts[v][lvl] / 1e6:,.0f}" for v in ("zigzag", "zigzag_ours_tables",
                                                                   "ours"))
                 for lvl in ("mac", "registers", "sram", "dram", "total")]
        out.append(f"| {df} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dataflows", nargs="+", default=list(DATAFLOWS), choices=DATAFLOWS)
    ap.add_argument("--only", nargs="+", help="layer names to run (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="ZigZag processes at once (default 2)")
    ap.add_argument("--ours-only", action="store_true",
                    help="keep the ZigZag columns of --out, refresh ours")
    ap.add_argument("--keep-inputs", type=Path, help="write ZigZag's inputs and logs here")
    ap.add_argument("--table", action="store_true", help="print the tables of --out and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_tables(json.loads(args.out.read_text())))
        return 0

    known = {lay["name"] for lay in all_layers()}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        ap.error(f"unknown layer(s) {unknown}; known: {sorted(known)}")
    layers = [lay for lay in all_layers() if not args.only or lay["name"] in args.only]
    old, old_doc = {}, {}
    if args.out.exists():
        old_doc = json.loads(args.out.read_text())
        old = {(r["layer"], r["dataflow"]): r for r in old_doc.get("records", [])}

    t_start = time.perf_counter()
    if args.ours_only:
        zz = {k: r["zigzag"] for k, r in old.items() if "zigzag" in r}
        tables = old_doc.get("energy_tables_pj_per_access", {})
    else:
        py = ensure_refenv()
        if args.keep_inputs:
            args.keep_inputs.mkdir(parents=True, exist_ok=True)
            zz, tables = run_zigzag(py, layers, args.dataflows, args.keep_inputs, args.jobs)
        else:
            with tempfile.TemporaryDirectory(prefix="zigzag_cmp_") as tmp:
                zz, tables = run_zigzag(py, layers, args.dataflows, Path(tmp), args.jobs)
    zz_elapsed = time.perf_counter() - t_start

    for lay in layers:
        for df in args.dataflows:
            key = (lay["name"], df)
            if key not in zz:
                continue
            rec = {"layer": lay["name"], "kind": lay["kind"], "dataflow": df,
                   "dims": {k: v for k, v in lay.items() if k not in ("name", "kind")},
                   "zz_spatial_mapping": zz_spatial_mapping(lay, df), "zigzag": zz[key],
                   "ours": ours(lay, df)}
            if "error" not in zz[key]:
                rec["deviation"] = deviations(rec)
                d = rec["deviation"]
                print(f"{lay['name']:26s} {df}  cycles zz {zz[key]['latency_cycles']:>10.0f} "
                      f"ours {rec['ours']['latency_cycles']:>10.0f} ({d['latency_pct']:+6.1f}%)  "
                      f"energy zz {zz[key]['energy_pj'] / 1e6:8.2f} uJ ours "
                      f"{rec['ours']['energy_pj'] / 1e6:8.2f} uJ ({d['energy_pct']:+6.1f}%, "
                      f"vs zz@our tables {d['energy_vs_ours_tables_pct']:+6.1f}%)  speed "
                      f"{d['speed_ratio']:,.0f}x", flush=True)
            else:
                print(f"{lay['name']:26s} {df}  ZigZag FAILED: "
                      f"{zz[key]['error'].strip().splitlines()[-1]}", flush=True)
            if not zz[key].get("ours_tables_latency_matches", True):
                print(f"  warning: ZigZag's latency changed when re-priced ({key})")
            old[key] = rec

    order = {lay["name"]: i for i, lay in enumerate(all_layers())}
    records = sorted(old.values(), key=lambda r: (order.get(r["layer"], 1e9), r["layer"],
                                                  DATAFLOWS.index(r["dataflow"])))
    doc = {
        "tool": f"ZigZag (pip {' '.join(PIP_PINS)}), LOMA lpf_limit={LPF_LIMIT}, "
                "temporal mapping 'uneven', criterion EDP",
        "hardware": {"array": list(ARRAY), "sram_kb_each": SRAM_KB, "clock_hz": CLOCK_HZ,
                     "node_nm": NODE_NM, "dram_bits_per_cycle": DRAM_BITS_PER_CYCLE,
                     "sram_port_bits": {"ifmap": IFMAP_PORT_BITS, "filter": FILTER_PORT_BITS,
                                        "ofmap": OFMAP_PORT_BITS}, "dtype": "int8",
                     "dram": comparison_design("ws").hw.dram},
        "energy_tables_pj_per_access": tables,
        "command": "python benchmarks/zigzag_compare.py",
        "host": f"{platform.machine()} python {platform.python_version()}, "
                f"{os.cpu_count()} logical CPUs",
        "zigzag_elapsed_s": old_doc.get("zigzag_elapsed_s") if args.ours_only else zz_elapsed,
        "notes": "deviations are ours / ZigZag - 1; cycles: ZigZag latency_total2 vs our "
                 "latency_s * clock_hz; energy: ZigZag energy_total vs the sum of our dynamic "
                 "energy_j (no leakage on either side); zigzag.ours_tables: ZigZag's chosen "
                 "mapping re-priced by ZigZag with our energy table; wall: ZigZag's stage "
                 "pipeline per layer (imports, CACTI excluded), ours one uncached cost(op) "
                 "(median of 7 x 200 calls)",
        "records": records,
        "summary": summary_rows(records),
        "energy_by_level_pj": energy_by_level(records),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(markdown_tables(doc))
    print(f"\nwrote {args.out} ({len(records)} records)"
          + ("" if args.ours_only else f"; ZigZag part took {zz_elapsed:.0f} s"))
    failed = [r for r in records if "deviation" not in r]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
