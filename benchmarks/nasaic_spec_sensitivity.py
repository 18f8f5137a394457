"""How the NASAIC reproduction's ratios depend on how tight the specs are.

``dse reproduce nasaic`` sets the latency, energy and area specs to what the reference design
does (the zoo's default networks on the preset sub-accelerators). This script reruns both flows
with every spec multiplied by a scale (1 = the reproduction) and prints, per scale, the mean
over the seeds of each row, and the networks each flow chose. It explains the reproduction's
ratios (docs/validation.md, NASAIC section); it tunes nothing.

    python benchmarks/nasaic_spec_sensitivity.py [--scales 1 1.5 2 3 4] [--trials 1000]
"""

from __future__ import annotations

import argparse
from collections import Counter

from dse.reproduce import nasaic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0, 4.0])
    ap.add_argument("--trials", type=int, default=nasaic.TRIALS)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(nasaic.SEEDS))
    args = ap.parse_args()
    ev = nasaic.Evaluator()
    print("| spec scale | sequential violates | co meets | latency co/seq | energy seq/co "
          "| area seq/co | accuracy loss (pp) | co networks |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for scale in args.scales:
        out = nasaic.run(args.trials, args.seeds, spec_scale=scale, ev=ev)
        runs = out["per_seed"]
        n = len(runs)

        def mean(key: str) -> float:
            return sum(r[key] for r in runs) / n

        nets = Counter(" + ".join(r["co"].design.nets) for r in runs)
        print(f"| {scale:g} | {sum(not r['sequential'].feasible for r in runs)}/{n} "
              f"| {sum(r['co'].feasible for r in runs)}/{n} | {mean('latency'):.3f} "
              f"| {mean('energy'):.2f} | {mean('area'):.2f} | {mean('accuracy_loss_pp'):.2f} "
              f"| {'; '.join(f'{k} ({v})' for k, v in nets.most_common())} |", flush=True)


if __name__ == "__main__":
    main()
