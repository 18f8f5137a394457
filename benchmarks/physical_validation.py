"""The physical model against published chips: die area, TDP and cost (docs/validation.md).

Prints, as Markdown tables: every published chip's die area against the model's with the
shipped constants and leave-one-out (the chip's die left out of the fit), its TDP against the
model's, the published blocks that set the placement utilisation and SRAM efficiency, the
constants (shipped and refitted), and the cost sanity check. Writes nothing.

    python benchmarks/physical_validation.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from dse.calibrate import physical_fit as pf


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def main() -> None:
    rows = pf.validation_rows()
    print("| chip | model | published die mm^2 | modelled | error | leave-one-out | error "
          "| published TDP W (basis) | modelled TDP W | error | leave-one-out | error "
          "| memory W |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = r.chip
        print(f"| {c.name} | `{c.accelerator}` | "
              f"{'< ' if c.upper_bound else ''}"
              f"{c.die_mm2:,.0f} | {r.area_mm2:,.0f} | {_pct(r.area_error)} | "
              f"{r.loo_area_mm2:,.0f} | {_pct(r.loo_error)} | {c.tdp_w:,.0f} ({c.tdp_basis}) | "
              f"{r.tdp_w:,.0f} | {_pct(r.tdp_error)} | {r.loo_tdp_w:,.0f} | "
              f"{_pct(r.loo_tdp_error)} | {r.memory_w:,.0f} |")
    fit_med, fit_max = pf.median_max([r.area_error for r in rows])
    loo_med, loo_max = pf.median_max([r.loo_error for r in rows])
    tdp_med, tdp_max = pf.median_max([r.tdp_error for r in rows])
    ltdp_med, ltdp_max = pf.median_max([r.loo_tdp_error for r in rows])
    print(f"\n|area error| with the shipped constants: median {100 * fit_med:.1f} %, "
          f"max {100 * fit_max:.1f} %")
    print(f"|area error| leave-one-out: median {100 * loo_med:.1f} %, max {100 * loo_max:.1f} %")
    print(f"|TDP error| with the shipped constant (fitted on these rows): median "
          f"{100 * tdp_med:.1f} %, max {100 * tdp_max:.1f} %")
    print(f"|TDP error| leave-one-out: median {100 * ltdp_med:.1f} %, max {100 * ltdp_max:.1f} %")
    for kind, names in (("GPUs", [r for r in rows if r.chip.accelerator.startswith("gpu:")]),
                        ("NPU-class", [r for r in rows if not r.chip.accelerator.startswith("gpu:")])):
        med, _ = pf.median_max([r.loo_tdp_error for r in names])
        print(f"|TDP error| leave-one-out, {kind} ({len(names)} chips): median {100 * med:.1f} %")
    print(f"(one energy method: every template bottom-up; the constant "
          f"physical.UNCOUNTED_LOGIC_W_PER_MM2_GHZ = {pf.fit_power():.4g} is the only fitted "
          f"power term; board TDPs compared over {pf.BOARD_POWER_EFFICIENCY:g})")

    print("\n| published block | share of die | published mm^2 | modelled mm^2 | error |")
    print("|---|---|---|---|---|")
    for b, pub, mod in pf.block_rows():
        print(f"| {b.die}: {b.block} | {100 * b.share:.1f} % | {pub:,.1f} | {mod:,.1f} | "
              f"{_pct(mod / pub - 1)} |")

    shipped, refit = pf.Constants.shipped(), pf.fit()
    print("\n| constant | shipped | refitted on every chip | how |")
    print("|---|---|---|---|")
    for name, where, how in (
            ("placement_utilisation", "technology.LOGIC_PLACEMENT_UTILISATION",
             "published matrix-unit blocks (fp16/bf16)"),
            ("sram_array_efficiency", "technology.SRAM_ARRAY_EFFICIENCY",
             "published SRAM blocks"),
            ("control_overhead", "physical.CONTROL_OVERHEAD", "least squares on the fitted dies"),
            ("sm_base_mm2", "gpu.SM_BASE_MM2_45NM", "published SM block (Turing TPC)"),
            ("sram_overhead", "physical.SRAM_OVERHEAD", "least squares on the fitted dies"),
            ("gpu_control_overhead", "gpu.GPU_CONTROL_OVERHEAD", "least squares on the fitted dies")):
        print(f"| `{where}` | {getattr(shipped, name):.4g} | {getattr(refit, name):.4g} | "
              f"{how} |")

    print("\n| cost sanity check | published estimate US$ | modelled cost_usd | modelled parts "
          "| published parts |")
    print("|---|---|---|---|---|")
    for acc, est, cost, parts, pub_parts in pf.cost_rows():
        mine = ", ".join(f"{k} {v:,.0f}" for k, v in parts.items())
        theirs = ", ".join(f"{k} {v:,.0f}" for k, v in pub_parts)
        print(f"| `{acc}` | {est:,.0f} | {cost:,.0f} ({_pct(cost / est - 1)}) | {mine} | "
              f"{theirs} |")


if __name__ == "__main__":
    main()
