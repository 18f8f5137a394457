"""The validation tables of docs/validation.md, written from the code.

    python benchmarks/validation_tables.py --write            # every block (several minutes)
    python benchmarks/validation_tables.py --write --fast     # the fast blocks only
    python benchmarks/validation_tables.py --check            # exit 1 if a fast block drifted
    python benchmarks/validation_tables.py --only physical-chips,b200 --print

Each generated block sits between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``
in docs/validation.md, with the command that writes it. A block is made by calling the code
that measures it (the benchmark or reproduction the section names), never by copying its
numbers: ``physical-*`` are ``benchmarks/physical_validation.py``'s table functions, ``reproduce-*``
the rows of ``dse reproduce NAME``, ``wafer-study`` a run of ``studies/wafer_llama3.yaml``,
``b200`` the physical model's verdict on the ``gpu:b200`` preset, ``economics-*`` the cost
per token of :mod:`simulators.economics` against published prices. ``tests/test_docs_drift.py``
fails when a fast block of the committed file differs from what the code writes now.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import warnings
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "validation.md"


# ----------------------------------------------------------------------------- blocks
def _physical():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import physical_validation
    return physical_validation


def physical_chips() -> str:
    """``benchmarks/physical_validation.py``'s chip table and its error summary (the summary's
    lines end in a Markdown line break)."""
    from dse.calibrate import physical_fit as pf
    pv = _physical()
    rows = pf.validation_rows()
    summary = "\n".join(line + "  " if line.startswith("|") and "error|" in line else line
                        for line in pv.summary(rows).split("\n"))
    return pv.chip_table(rows) + "\n\n" + summary


def physical_table(name: str) -> Callable[[], str]:
    """One table function of ``benchmarks/physical_validation.py``."""
    return lambda: getattr(_physical(), name)()


def reproduction(name: str) -> Callable[[], str]:
    """The rows of ``dse reproduce NAME`` as a table."""
    def make() -> str:
        from dse.reproduce import run_reproduction
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = run_reproduction(name)
        from dse.reproduce.table import summary
        lines = ["| metric | source | paper | ours | ratio | ok |", "|---|---|---|---|---|---|"]
        for r in rows:
            ok = "fitted" if r.fitted else ("yes" if r.within() else "no")
            lines.append(f"| {r.metric} | {r.source} | {r.paper_text()} | {r.ours:.4g} | "
                         f"{r.ratio:.2f} | {ok} |")
        s = summary(rows)
        fitted = f"; {s['fitted']} fitted rows not counted" if s["fitted"] else ""
        lines.append(f"\n{s['within']} of {s['predictions']} predictions within ±35 % (or inside "
                     f"the paper's range){fitted} (`dse reproduce {name}`).")
        return "\n".join(lines)
    return make


def b200() -> str:
    """What the physical model says of the ``gpu:b200`` preset."""
    from accelerators.registry import make_accelerator
    d = make_accelerator("gpu:b200")
    p = d.physical()
    verdict = (f"refuses it: {p.problem}" if p.problem else
               f"builds it: {p.dies} dies of {p.die_mm2:,.0f} mm² ({p.area_mm2:,.0f} mm² in all),"
               f" US$ {p.cost_usd:,.0f}, TDP {p.tdp_w:,.0f} W")
    return f"The physical model's package check of the `b200` preset {verdict}."


def wafer_study() -> str:
    """The Pareto front of ``studies/wafer_llama3.yaml`` at 48 trials."""
    import csv
    import tempfile

    from dse.study.driver import run_study
    from dse.study.loader import load_study
    s = load_study(ROOT / "studies" / "wafer_llama3.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        r = run_study(s, trials=48, out=Path(tmp) / "o", show_progress=False,
                      write_report=False)
        rows = list(csv.DictReader(open(r.pareto_csv, newline="")))
    o = r.outcomes
    lines = [f"`dse study run studies/wafer_llama3.yaml -n 48`: {o['evaluated']} trials, "
             f"{o['feasible']} feasible, {o['infeasible']} infeasible (each with its reason in "
             "trials.csv). Pareto front:", "",
             "| trial | latency s | area mm² | SRAM KB/core | prefill region | decode region | "
             "link B/cycle |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in rows:
        lines.append(
            f"| {x['number']} | {float(x['latency_s']):.4g} | {float(x['area_mm2']):,.0f} | "
            f"{float(x['hw.sram_per_core_kb']):.0f} | {x['hw.prefill_region_width']}x"
            f"{x['hw.prefill_region_height']} | {x['hw.decode_region_width']}x"
            f"{x['hw.decode_region_height']} | {float(x['hw.link_bytes_per_cycle']):.2g} |")
    return "\n".join(lines)


#: Published reference points [sources in docs/validation.md, "Cost per token"]: on-demand
#: rental per GPU-hour (low, high), US$; purchase price per GPU, US$.
RENTAL_USD_PER_HOUR = {"a100": (1.49, 2.49), "h100": (2.49, 3.99), "h200": (3.50, 4.50)}
PURCHASE_USD = {"h100": (25_000, 30_000)}


def economics_hour() -> str:
    """What an hour of a GPU costs under :mod:`simulators.economics`' defaults (busy at
    its TDP; manufacturing cost, or a purchase price) against on-demand rental prices."""
    from accelerators.registry import make_accelerator
    from simulators.economics import HOURS_PER_YEAR, Economics
    e = Economics()
    lines = ["| GPU | hardware US$ | US$ per hour: hardware + host + energy at TDP | "
             "published on-demand rental US$/h | ours / rental (low-high) |",
             "| --- | --- | --- | --- | --- |"]
    for name, (lo, hi) in RENTAL_USD_PER_HOUR.items():
        d = make_accelerator(f"gpu:{name}")
        p = d.physical()
        prices = [("manufacturing cost", p.cost_usd)]
        if name in PURCHASE_USD:
            a, b = PURCHASE_USD[name]
            prices.append((f"purchase {a:,.0f}-{b:,.0f}", (a + b) / 2))
        for label, usd in prices:
            hours = e.amortisation_years * HOURS_PER_YEAR
            energy = e.pue * (p.tdp_w + e.host_w) / 1000 * e.usd_per_kwh
            total = usd / hours + e.host_usd / hours + energy
            lines.append(f"| `gpu:{name}` | {usd:,.0f} ({label}) | {total:.3g} = "
                         f"{usd / hours:.3g} + {e.host_usd / hours:.3g} + {energy:.3g} | "
                         f"{lo:g}-{hi:g} | {total / hi:.2f}-{total / lo:.2f} |")
    return "\n".join(lines)


#: Published API prices for Llama-3.1-8B, US$ per million output tokens [sources in
#: docs/validation.md, "Cost per token"].
API_USD_PER_MTOK = {"DeepInfra": 0.055, "Amazon Bedrock": 0.22}


def economics_serving() -> str:
    """The cost per million output tokens of serving Llama-3-8B on an H100 (ShareGPT-like
    trace at 20 requests/s) under the defaults, at a purchase price, and at 100 %."""
    from dse import api
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [("defaults (manufacturing cost, measured utilisation)", None),
                ("purchase price US$ 27,500", {"hardware_usd": 27_500}),
                ("purchase price, utilisation 0.5", {"hardware_usd": 27_500,
                                                     "utilisation": 0.5})]
        lines = ["| Llama-3-8B on `gpu:h100`, ShareGPT at 20 req/s, 1,000 requests | "
                 "utilisation | US$/h | US$ per million output tokens |",
                 "| --- | --- | --- | --- |"]
        for label, econ in runs:
            r = api.serve("llama3-8b", accelerator="gpu:h100", trace="sharegpt", rate=20,
                          requests=1000, economics=econ)
            ec = r.economics
            lines.append(f"| {label} | {100 * ec['utilisation']:.0f} % | "
                         f"{sum(ec['usd_per_hour'].values()):.3g} | {r.cost_per_mtok_usd:.3g} |")
    refs = ", ".join(f"{k} US$ {v:g}" for k, v in API_USD_PER_MTOK.items())
    lines.append(f"\nPublished API prices for Llama-3.1-8B output tokens: {refs} per million.")
    return "\n".join(lines)


#: name -> (fast: checked by tests/test_docs_drift.py, the function that writes it).
BLOCKS: dict[str, tuple[bool, Callable[[], str]]] = {
    "physical-chips": (True, physical_chips),
    "physical-blocks": (True, physical_table("block_table")),
    "physical-constants": (True, physical_table("constants_table")),
    "physical-h200": (True, physical_table("h200_power_table")),
    "physical-wafer": (True, physical_table("wafer_table")),
    "physical-cost": (True, physical_table("cost_table")),
    "b200": (True, b200),
    "economics-hour": (True, economics_hour),
    "reproduce-pim-gpt": (False, reproduction("pim-gpt")),
    "reproduce-neupims": (False, reproduction("neupims")),
    "reproduce-ngpc": (False, reproduction("ngpc")),
    "reproduce-waferllm": (False, reproduction("waferllm")),
    "reproduce-gna": (False, reproduction("gna")),
    "reproduce-nasaic": (False, reproduction("nasaic")),
    "wafer-study": (False, wafer_study),
    "economics-serving": (False, economics_serving),
}

_BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)\n?"
                    r"(<!-- /generated:(?P=name) -->)", re.S)


def blocks_in(text: str) -> dict[str, str]:
    """The generated blocks of ``text`` by name (their current bodies)."""
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def replace_blocks(text: str, bodies: dict[str, str]) -> str:
    """``text`` with the bodies of the named blocks replaced."""
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in bodies:
            return m.group(0)
        return m.group(1) + bodies[name] + "\n" + m.group(4)
    return _BLOCK.sub(sub, text)


def generate(names: list[str]) -> dict[str, str]:
    return {n: BLOCKS[n][1]() for n in names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the blocks into the doc")
    ap.add_argument("--check", action="store_true", help="exit 1 when a block drifted")
    ap.add_argument("--print", action="store_true", help="print the blocks")
    ap.add_argument("--fast", action="store_true", help="only the fast blocks")
    ap.add_argument("--only", help="comma-separated block names")
    ap.add_argument("--doc", type=Path, default=DOC)
    args = ap.parse_args(argv)
    names = (args.only.split(",") if args.only else
             [n for n, (fast, _) in BLOCKS.items() if fast or not (args.fast or args.check)])
    unknown = [n for n in names if n not in BLOCKS]
    if unknown:
        ap.error(f"unknown blocks {unknown}; expected some of {', '.join(BLOCKS)}")
    text = args.doc.read_text()
    present = blocks_in(text)
    missing = [n for n in names if n not in present]
    if missing:
        print(f"{args.doc} has no markers for {missing}", file=sys.stderr)
        return 1
    bodies = generate(names)
    if args.print:
        for n, b in bodies.items():
            print(f"--- {n}\n{b}\n")
    drifted = [n for n in names if present[n] != bodies[n]]
    if args.write:
        args.doc.write_text(replace_blocks(text, bodies))
        print(f"wrote {len(names)} blocks into {args.doc} ({len(drifted)} changed: "
              f"{', '.join(drifted) or 'none'})")
    elif args.check:
        for n in drifted:
            print(f"{n}: docs/validation.md differs from what the code writes "
                  "(python benchmarks/validation_tables.py --write)")
        return 1 if drifted else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
