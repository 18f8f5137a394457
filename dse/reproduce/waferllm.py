"""Reproduction of WaferLLM (He et al., OSDI 2025) with the ``wafer`` template (``wse2`` preset)
against the ``gpu`` template's ``a100`` preset.

Rows (paper values from the WaferLLM paper as summarised in REFERENCES.md and the issue):

* GEMV [1, 16K] x [16K, 16K] and [1, 32K] x [32K, 32K] in fp16: WSE-2 (MeshGEMV, K-tree
  all-reduce, 750 x 750 region) over one A100: paper 280x and 606x.
* LLaMA3-8B decode, batch 1, 4K context, tokens/s per request: WSE-2 2,700, A100 78.9, and
  their ratio.
* MeshGEMM over Cannon and SUMMA on the same 750 x 750 region: paper 2-3x. Ours is the whole
  LLaMA3-8B prefill of a 4K prompt (every GEMM shape of the model, attention included) with
  ``gemm_algorithm`` switched; the paper's exact GEMM sizes were not available to us.
* MeshGEMV (K-tree) over the same GEMV with a pipeline or ring all-reduce, [1, 32K] x [32K, 32K]
  on 750 x 750: the paper gives the ordering (MeshGEMV faster); the range (1, 100) encodes
  "faster" only.
"""

from __future__ import annotations

from accelerators.registry import make_accelerator
from dse.reproduce.table import Row
from simulators.engine import simulate
from workloads.build import build_workload

#: Paper values [P WaferLLM, OSDI 2025; REFERENCES.md]: GEMV speedups over one A100.
PAPER_GEMV_SPEEDUP = {16384: 280.0, 32768: 606.0}
#: LLaMA3-8B decode at 4K context, tokens/s per request [P]: WaferLLM on WSE-2 and one A100.
PAPER_DECODE_TOKENS_S = {"wse2": 2700.0, "a100": 78.9}
#: MeshGEMM's speedup over SUMMA and over Cannon on the same grid [P]: 2-3x.
PAPER_MESHGEMM_SPEEDUP = (2.0, 3.0)
#: MeshGEMV over ring / pipeline all-reduce GEMV [P: ordering only]: "faster".
PAPER_MESHGEMV_FASTER = (1.0, 100.0)

WAFER = "wafer:wse2"
GPU = "gpu:a100"
CONTEXT = 4096
DTYPE = "fp16"


def _linear(n: int, m: int = 1):
    return build_workload("linear", phase="forward", batch=1, dtype=DTYPE,
                          arch={"m": m, "k": n, "n": n, "bias": False})


def _latency(workload, spec: str, hw: dict | None = None) -> float:
    return simulate(workload, make_accelerator(spec, hw)).latency_s


def gemv_rows(hw: dict | None = None) -> list[Row]:
    """``hw``: overrides of the ``wse2`` preset (all row functions take them)."""
    rows = []
    for n, paper in PAPER_GEMV_SPEEDUP.items():
        w = _linear(n)
        wafer, gpu = _latency(w, WAFER, hw), _latency(w, GPU)
        rows.append(Row(f"GEMV [1,{n // 1024}K]x[{n // 1024}K,{n // 1024}K] fp16: WSE-2 speedup "
                        "over A100", paper, gpu / wafer,
                        f"wafer {wafer * 1e6:.2f} us (750x750, MeshGEMV K=2), "
                        f"A100 {gpu * 1e6:.1f} us"))
    return rows


def decode_rows(hw: dict | None = None) -> list[Row]:
    w = build_workload("llama3-8b", phase="decode", batch=1, context=CONTEXT, dtype=DTYPE)
    wafer = simulate(w, make_accelerator(WAFER, hw)).throughput
    gpu = simulate(w, make_accelerator(GPU)).throughput
    paper = PAPER_DECODE_TOKENS_S
    return [
        Row("LLaMA3-8B decode 4K ctx: WSE-2 tokens/s per request", paper["wse2"], wafer,
            "750x750 decode region, MeshGEMV + K-tree (K=2), shift-based KV cache"),
        Row("LLaMA3-8B decode 4K ctx: A100 tokens/s per request", paper["a100"], gpu,
            "gpu template, a100 preset, batch 1"),
        Row("LLaMA3-8B decode 4K ctx: WSE-2 speedup over A100", paper["wse2"] / paper["a100"],
            wafer / gpu, "ratio of the two rows above"),
    ]


def gemm_rows(hw: dict | None = None) -> list[Row]:
    w = build_workload("llama3-8b", phase="prefill", batch=1, seq=CONTEXT, dtype=DTYPE)
    t = {a: _latency(w, WAFER, {**(hw or {}), "gemm_algorithm": a})
         for a in ("meshgemm", "cannon", "summa")}
    return [Row(f"MeshGEMM speedup over {name} (LLaMA3-8B 4K-prompt prefill, 750x750)",
                PAPER_MESHGEMM_SPEEDUP, t[algo] / t["meshgemm"],
                f"prefill {t['meshgemm'] * 1e3:.1f} ms with MeshGEMM, "
                f"{t[algo] * 1e3:.1f} ms with {name}")
            for algo, name in (("cannon", "Cannon"), ("summa", "SUMMA"))]


def meshgemv_rows(hw: dict | None = None) -> list[Row]:
    w = _linear(32768)
    t = {a: _latency(w, WAFER, {**(hw or {}), "allreduce": a})
         for a in ("ktree", "pipeline", "ring")}
    return [Row(f"MeshGEMV (K-tree) speedup over {a} all-reduce GEMV [1,32K]x[32K,32K]",
                PAPER_MESHGEMV_FASTER, t[a] / t["ktree"],
                f"K-tree {t['ktree'] * 1e6:.2f} us, {a} {t[a] * 1e6:.2f} us; paper: ordering only")
            for a in ("pipeline", "ring")]


def rows(hw: dict | None = None) -> list[Row]:
    return gemv_rows(hw) + decode_rows(hw) + gemm_rows(hw) + meshgemv_rows(hw)


def sensitivity(param: str = "beta_cycles", values: tuple = (10.0, 20.0, 40.0)) -> None:
    """Print the ratio (ours / paper) of every row for each value of one ``wse2`` parameter
    (default: PLMR beta, the estimate the rows depend on most)."""
    table = {v: rows({param: v}) for v in values}
    print("metric | " + " | ".join(f"{param}={v:g}" for v in values))
    for i, row in enumerate(table[values[0]]):
        print(row.metric + " | " + " | ".join(
            f"{table[v][i].ours:.4g} ({table[v][i].ratio:.2f})" for v in values))
