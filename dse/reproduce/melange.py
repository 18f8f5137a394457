"""Reproduction of Mélange (Griggs et al., "Mélange: Cost Efficient Large Language Model Serving
by Exploiting GPU Heterogeneity", arXiv 2404.14527, 2024): the cost saving of the cheapest mix
of GPU types over single-type fleets, per dataset and TPOT SLO.

Paper [R tyler-griggs/melange-release@d46ab43, docs/index.md (the authors' summary of Sec. 6),
Plots 7-12]: Llama2-7b on L4, A10G, A100-80G and H100 at 1, 2, 4, 8, 16 and 32 req/s; datasets
Chatbot Arena (short), PubMed (long) and an 80/20 blend (Mixed); TPOT SLOs 40 and 120 ms.
"Mélange achieves 15-77 % cost reduction (120 ms SLO) and 9-68 % (40 ms) [Arena] ... 15-33 %
(120 ms) and 2-22 % (40 ms) [PubMed] ... 13-51 % (120 ms) and 4-51 % (40 ms) [Mixed]"; the
abstract's headline: "up to 77 % in conversational settings, 33 % in document-based settings,
and 51 % in a mixed setting". Prices: A10G $1.01/h and A100-80GB $3.67/h [R
melange/config/example.json]; L4 $0.70/h and H100 $7.516/h [P Table 1, as recalled; both
agree with Plot 7's bars at 1 req/s, where A100-only costs 2.15x and H100-only 4.4x a Mélange
fleet of one A10G and one L4: 3.67 / 1.71 = 2.15, 7.516 / 1.71 = 4.40].

Rows (ours from :func:`dse.api.fleet` with the same menu, datasets as
:mod:`workloads.requests` describes them, each SLO and rate):

* per dataset and SLO, the saving against the best single GPU type averaged over the six
  rates, the paper's read off Plots 7-12 (each bar's height relative to Mélange, +-0.03) with
  the single types those plots show (all four for Arena; A100 and H100 for PubMed and Mixed);
* per dataset, the headline: the largest saving against any single type over rates and SLOs.

Ours differ from the paper's in what the simulator's GPUs sustain (its A100 serves several times
the req/s per GPU that the paper's vLLM did: docs/validation.md, "Fleets"), so the same
nominal rate is a lighter load for us; the rows are the share saved, which depends on the
load only through how finely instances divide it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.reproduce.table import Row

MODEL = "llama2-7b"
#: The menu, US$/h (see the module docstring for the sources).
MENU = ({"name": "l4", "accelerator": "gpu:l4", "price_usd_per_h": 0.70},
        {"name": "a10g", "accelerator": "gpu:a10g", "price_usd_per_h": 1.01},
        {"name": "a100", "accelerator": "gpu:a100", "price_usd_per_h": 3.67},
        {"name": "h100", "accelerator": "gpu:h100", "price_usd_per_h": 7.516})
RATES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
SLOS_S = (0.12, 0.04)
#: Single types each plot shows (PubMed and Mixed: A100 and H100 only).
PLOTTED = {"arena": ("l4", "a10g", "a100", "h100"), "pubmed": ("a100", "h100"),
           "mixed": ("a100", "h100")}
#: Bar heights (cost relative to Mélange) read off Plots 7-12, per SLO (s), rate and type
#: [R docs/images/{Arena,Pubmed,Mixed_80_20}_{120,40}-1.png; +-0.03].
BARS = {
    ("arena", 0.12): {"h100": (4.40, 3.12, 1.72, 2.03, 2.08, 2.33),
                      "a100": (2.15, 1.52, 1.68, 1.48, 1.52, 1.28),
                      "a10g": (1.18, 1.26, 1.38, 1.50, 1.38, 1.52),
                      "l4": (1.22, 1.45, 1.44, 1.60, 1.59, 1.76)},
    ("arena", 0.04): {"h100": (3.10, 2.05, 1.39, 1.65, 1.75, 1.74),
                      "a100": (1.52, 1.00, 1.36, 1.21, 1.28, 1.09),
                      "a10g": (1.25, 1.37, 1.87, 1.78, 2.34, 2.68),
                      "l4": (1.45, 1.71, 2.20, 2.62, 2.78, 3.13)},
    ("pubmed", 0.12): {"h100": (1.34, 1.38, 1.49, 1.34, 1.34, 1.31),
                       "a100": (1.31, 1.18, 1.27, 1.26, 1.24, 1.23)},
    ("pubmed", 0.04): {"h100": (1.02, 1.15, 1.08, 1.04, 1.06, 1.08),
                       "a100": (1.00, 1.26, 1.28, 1.23, 1.24, 1.26)},
    ("mixed", 0.12): {"h100": (2.04, 1.71, 1.57, 1.62, 1.56, 1.55),
                      "a100": (1.00, 1.67, 1.15, 1.31, 1.27, 1.26)},
    ("mixed", 0.04): {"h100": (2.04, 1.39, 1.42, 1.61, 1.37, 1.30),
                      "a100": (1.00, 1.36, 1.04, 1.18, 1.14, 1.18)},
}
#: The abstract's headline saving per dataset ("up to"), a share [P abstract].
HEADLINE = {"arena": 0.77, "pubmed": 0.33, "mixed": 0.51}


def paper_mean_saving(dataset: str, slo_s: float) -> float:
    """Mean over the rates of 1 - 1 / (the cheapest plotted single type's bar)."""
    bars = BARS[(dataset, slo_s)]
    best = np.min(np.array(list(bars.values())), axis=0)
    return float(np.mean(1.0 - 1.0 / best))


def savings(dataset: str, slo_s: float, rates=RATES, confirm_rate: float | None = None,
            confirm_requests: int = 600) -> dict[str, Any]:
    """Our fleet per rate: its cost, each plotted single type's, the saving against the best
    and the worst of them; with ``confirm_rate``, that rate's fleet simulated."""
    from dse import api
    out: dict[str, Any] = {"rates": list(rates), "best": [], "worst": [], "fleets": []}
    for rate in rates:
        f = api.fleet(MODEL, list(MENU), trace=dataset, rate=rate, slo_tpot_s=slo_s,
                      requests=confirm_requests, confirm=rate == confirm_rate)
        singles = [f.single[t]["cost_usd_per_h"] for t in PLOTTED[dataset]
                   if f.single.get(t) is not None]
        out["best"].append(1.0 - f.cost_usd_per_h / min(singles))
        out["worst"].append(1.0 - f.cost_usd_per_h / max(singles))
        out["fleets"].append({"rate": rate, "counts": f.counts, "cost": f.cost_usd_per_h,
                              "single": {t: f.single.get(t) for t in PLOTTED[dataset]},
                              "confirm": f.confirm})
    return out


def rows() -> list[Row]:
    """Mean saving vs the best single type per dataset and SLO; headline per dataset."""
    result: list[Row] = []
    worst: dict[str, float] = {}
    for dataset in ("arena", "pubmed", "mixed"):
        for slo in SLOS_S:
            s = savings(dataset, slo, confirm_rate=8.0)
            conf = next(f["confirm"] for f in s["fleets"] if f["confirm"] is not None)
            worst[dataset] = max(worst.get(dataset, 0.0), max(s["worst"]))
            per_rate = ", ".join(f"{r:g}: {100 * v:.0f} %" for r, v in
                                 zip(s["rates"], s["best"]))
            result.append(Row(
                f"{dataset}, TPOT SLO {slo * 1e3:.0f} ms: mean saving vs the best single type "
                "(1-32 req/s)", paper_mean_saving(dataset, slo), float(np.mean(s["best"])),
                f"paper: Plots 7-12 of melange-release docs/index.md (Sec. 6.2), bars read "
                f"+-0.03; ours per rate {per_rate}; at 8 req/s the simulated fleet "
                f"{s['fleets'][3]['counts']} met the SLO for "
                f"{100 * conf['slo_attainment']:.1f} % of requests"))
    for dataset, v in HEADLINE.items():
        result.append(Row(f"{dataset}: largest saving vs any single type (rates, both SLOs)", v,
                          worst[dataset], "paper: abstract (up to 77 / 33 / 51 %)"))
    return result
