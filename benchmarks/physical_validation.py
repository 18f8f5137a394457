"""The physical model against published chips: die area, TDP and cost (docs/validation.md).

Prints, as Markdown tables: every published chip's die area against the model's with the
shipped constants and leave-one-out (the chip's die left out of the fit), its TDP on its
published basis (board, chip or wafer) against the model's with the shipped power constant and
leave-one-out, the H200's measured power against the model's, the WSE-2 against Cerebras'
figures, the published blocks that set the placement utilisation and SRAM efficiency, the
constants (shipped and refitted), and the cost checks. Writes nothing. Each table is a
function returning its Markdown (``docs/validation.md``'s generator calls them).

    python benchmarks/physical_validation.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from accelerators import physical  # noqa: E402
from accelerators.wafer import WSE2_SPARE_FRACTION  # noqa: E402
from accelerators.registry import make_accelerator  # noqa: E402
from dse.calibrate import physical_fit as pf  # noqa: E402
from workloads.ir import Op  # noqa: E402

#: The H200's power measured by `dse calibrate gpu` (NVML energy counter; board power).
H200_RAW = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200_calibration_raw.json"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def chip_table(rows: list[pf.Row] | None = None) -> str:
    """Die area and TDP of every published chip, shipped constants and leave-one-out."""
    rows = rows if rows is not None else pf.validation_rows()
    out = ["| chip | model | published die mm^2 | modelled | error | leave-one-out | error "
           "| published TDP W (basis) | modelled TDP W | error | leave-one-out | error "
           "| memory W |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.chip
        out.append(
            f"| {c.name} | `{c.accelerator}` | {'< ' if c.upper_bound else ''}"
            f"{c.die_mm2:,.0f} | {r.area_mm2:,.0f} | {_pct(r.area_error)} | "
            f"{r.loo_area_mm2:,.0f} | {_pct(r.loo_error)} | {c.tdp_w:,.0f} ({c.tdp_basis}) | "
            f"{r.tdp_w:,.0f} | {_pct(r.tdp_error)} | {r.loo_tdp_w:,.0f} | "
            f"{_pct(r.loo_tdp_error)} | {r.memory_w:,.0f} |")
    return "\n".join(out)


def summary(rows: list[pf.Row] | None = None) -> str:
    """Median and largest errors of :func:`chip_table`, per kind of chip for TDP."""
    rows = rows if rows is not None else pf.validation_rows()
    lines = []
    for what, errs in (("area error| with the shipped constants", [r.area_error for r in rows]),
                       ("area error| leave-one-out", [r.loo_error for r in rows]),
                       ("TDP error| with the shipped power constant (fitted on these rows)",
                        [r.tdp_error for r in rows]),
                       ("TDP error| leave-one-out", [r.loo_tdp_error for r in rows])):
        med, worst = pf.median_max(errs)
        lines.append(f"|{what}: median {100 * med:.1f} %, max {100 * worst:.1f} %")
    gpus = [r for r in rows if r.chip.accelerator.startswith("gpu:")]
    npus = [r for r in rows if not r.chip.accelerator.startswith("gpu:")]
    for kind, group in (("GPUs", gpus), ("NPU-class chips", npus)):
        med, worst = pf.median_max([r.loo_tdp_error for r in group])
        lines.append(f"|TDP error| leave-one-out, {kind} ({len(group)}): median "
                     f"{100 * med:.1f} %, max {100 * worst:.1f} %")
    lines.append(f"(one energy method for every template; the one fitted power constant "
                 f"`physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ` = "
                 f"{physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ:.4g} (refitted: {pf.fit_power():.4g});"
                 f" board TDPs compared with the package's over "
                 f"{pf.BOARD_POWER_EFFICIENCY:g})")
    return "\n".join(lines)


def _ops(n: int = 8192) -> dict[str, Op]:
    gib = 1 << 30
    return {
        "gemm_bf16_8192": Op(name="g", kind="matmul", target="aten.mm",
                             input_shapes=((n, n), (n, n)), output_shapes=((n, n),),
                             dtype="bf16", bytes_per_element=2, flops=2 * n ** 3,
                             activation_bytes_read=4 * n * n, activation_bytes_written=2 * n * n,
                             attrs={"m": n, "n": n, "k": n}),
        "copy_1GiB": Op(name="c", kind="data_movement", target="aten.copy_",
                        input_shapes=((gib // 2,),), output_shapes=((gib // 2,),), dtype="bf16",
                        bytes_per_element=2, activation_bytes_read=gib,
                        activation_bytes_written=gib)}


def h200_power_table() -> str:
    """The H200's measured board power idle, under a bf16 GEMM loop and a 1 GiB copy loop
    against the model's (op energy over its latency plus static power, over the board
    efficiency): the energy method on a real chip, nothing fitted to it."""
    power = json.loads(H200_RAW.read_text())["power"]
    g = make_accelerator("gpu:h200")
    out = ["| H200, NVML board power | measured W | modelled W | error | modelled rate |",
           "|---|---|---|---|---|"]
    idle = g.static_power_w() / pf.BOARD_POWER_EFFICIENCY
    out.append(f"| idle (CUDA context) | {power['idle']['energy_power_w']:,.0f} | {idle:,.0f} | "
               f"{_pct(idle / power['idle']['energy_power_w'] - 1)} | - |")
    for key, op in _ops().items():
        c = g.cost(op)
        w = (c.total_energy_j / c.latency_s + g.static_power_w()) / pf.BOARD_POWER_EFFICIENCY
        meas = power[key]["energy_power_w"]
        rate = (f"{op.flops / c.latency_s / 1e12:,.0f} TFLOP/s (measured "
                f"{power[key]['achieved_flops_per_s'] / 1e12:,.0f})" if op.flops else
                f"{op.total_bytes / c.latency_s / 1e12:,.2f} TB/s (measured "
                f"{power[key]['achieved_bytes_per_s'] / 1e12:,.2f})")
        out.append(f"| {key} | {meas:,.0f} | {w:,.0f} | {_pct(w / meas - 1)} | {rate} |")
    return "\n".join(out)


def wafer_table() -> str:
    """The ``wse2`` preset against Cerebras' WSE-2 figures and the usable rectangle."""
    t = make_accelerator("wafer:wse2")
    p = t.physical()
    rows = [("area, mm^2", 46225.0, p.area_mm2, "[D] Cerebras: 215 x 215 mm"),
            ("usable rectangle, mm^2", physical.WAFER_USABLE_MM2, p.area_mm2,
             "the model's bound (the WSE-2 clips its corners)"),
            ("peak fp16, PFLOP/s", 7.5, t.peak_flops / 1e15,
             "[D] Cerebras (850,000 cores; the 757 x 996 fabric in use is 89 % of them)"),
            ("SRAM bandwidth, PB/s", 20.0, t.sram_bandwidth_Bps / 1e15, "[D] Cerebras"),
            ("power, kW", 14.8, p.tdp_w / 1e3, "[P] WaferLLM: 37x an A100's 400 W"),
            ("cost, US$", float("nan"), p.cost_usd,
             f"one wafer's share at the 7-nm price over a yield of "
             f"{physical.wafer_yield(p.area_mm2, 7, round(t.cores * WSE2_SPARE_FRACTION)):.3f}")]
    out = ["| WSE-2 | published | modelled | error | source |", "|---|---|---|---|---|"]
    num = lambda x: "-" if x != x else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}")
    for what, pub, mod, src in rows:
        err = _pct(mod / pub - 1) if pub == pub else "-"
        out.append(f"| {what} | {num(pub)} | {num(mod)} | {err} | {src} |")
    return "\n".join(out)


def block_table() -> str:
    out = ["| published block | share of die | published mm^2 | modelled mm^2 | error |",
           "|---|---|---|---|---|"]
    for b, pub, mod in pf.block_rows():
        out.append(f"| {b.die}: {b.block} | {100 * b.share:.1f} % | {pub:,.1f} | {mod:,.1f} | "
                   f"{_pct(mod / pub - 1)} |")
    return "\n".join(out)


def constants_table() -> str:
    shipped, refit = pf.Constants.shipped(), pf.fit()
    out = ["| constant | shipped | refitted on every chip | how |", "|---|---|---|---|"]
    for name, where, how in (
            ("placement_utilisation", "technology.LOGIC_PLACEMENT_UTILISATION",
             "published matrix-unit blocks (fp16/bf16)"),
            ("sram_array_efficiency", "technology.SRAM_ARRAY_EFFICIENCY",
             "published SRAM blocks"),
            ("control_overhead", "physical.CONTROL_OVERHEAD", "least squares on the fitted dies"),
            ("sm_base_mm2", "gpu.SM_BASE_MM2_45NM", "published SM block (Turing TPC)"),
            ("sram_overhead", "physical.SRAM_OVERHEAD", "least squares on the fitted dies"),
            ("gpu_control_overhead", "gpu.GPU_CONTROL_OVERHEAD", "least squares on the fitted dies")):
        out.append(f"| `{where}` | {getattr(shipped, name):.4g} | {getattr(refit, name):.4g} | "
                   f"{how} |")
    out.append(f"| `physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ` | "
               f"{physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ:.4g} | {pf.fit_power():.4g} | least "
               f"squares of log(modelled / published TDP) |")
    return "\n".join(out)


def cost_table() -> str:
    out = ["| cost check | published estimate US$ | modelled cost_usd | dies | modelled parts "
           "| published parts |", "|---|---|---|---|---|---|"]
    for acc, est, cost, parts, pub_parts in pf.cost_rows():
        dies = make_accelerator(acc).physical().dies
        mine = ", ".join(f"{k} {v:,.0f}" for k, v in parts.items())
        theirs = ", ".join(f"{k} {v:,.0f}" for k, v in pub_parts) or "-"
        out.append(f"| `{acc}` | {est:,.0f} | {cost:,.0f} ({_pct(cost / est - 1)}) | {dies} | "
                   f"{mine} | {theirs} |")
    return "\n".join(out)


def markdown() -> str:
    rows = pf.validation_rows()
    return "\n\n".join((chip_table(rows), summary(rows), h200_power_table(), wafer_table(),
                        block_table(), constants_table(), cost_table()))


def main() -> None:
    print(markdown())


if __name__ == "__main__":
    main()
