"""Speed of the exact GNA tile counts (:func:`workloads.gna.tile_counts`): the paper's large
grids, and the ratio to torch's ``create_block_mask`` on the CPU (same counts, measured in the
same run on grids it handles in seconds).

Usage: python benchmarks/gna_tile_counting.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import _median_s  # noqa: E402
from workloads.gna import GNAConfig, flex_mask_mod, tile_counts  # noqa: E402

#: (grid, window, stride, layout, tile) of the paper-sized rows, 128 x 128 tiles.
LARGE = [("32768", "2048", "1", "row_major", None), ("32768", "2048", "256", "row_major", None),
         ("256x256", "80x80", "1", "tiled", "16x8"), ("256x256", "80x80", "1", "row_major", None),
         ("30x48x80", "18x24x24", "16x8x8", "tiled", "2x8x8"),
         ("30x48x80", "18x24x24", "1", "row_major", None)]
#: Rows also counted by create_block_mask (CPU, eager).
VERSUS = [("8192", "1024", "1", "row_major", None), ("64x64", "24x24", "1", "tiled", "8x16"),
          ("8x16x32", "4x8x8", "1", "row_major", None)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    def ours(cfg):
        tile_counts.cache_clear()   # cold: every repeat counts from scratch
        return tile_counts(cfg, 128, 128)

    print("| grid | window | stride | layout | tokens | full | partial | ms (ours, cold) |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for grid, window, stride, layout, tile in LARGE:
        cfg = GNAConfig.parse(grid, window, stride, layout=layout, tile=tile)
        c = ours(cfg)
        s = _median_s(lambda: ours(cfg), args.repeats)
        print(f"| {grid} | {window} | {stride} | {layout} | {cfg.tokens} | {c.full} | "
              f"{c.partial} | {s * 1e3:.1f} |")
    from torch.nn.attention.flex_attention import create_block_mask
    print("\n| grid | window | layout | tokens | ours ms | create_block_mask ms | ratio | equal |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for grid, window, stride, layout, tile in VERSUS:
        cfg = GNAConfig.parse(grid, window, stride, layout=layout, tile=tile)
        n = cfg.tokens

        def reference():
            return create_block_mask(flex_mask_mod(cfg), None, None, n, n, device="cpu")
        bm = reference()
        c = ours(cfg)
        equal = (c.full, c.partial) == (int(bm.full_kv_num_blocks.sum()),
                                        int(bm.kv_num_blocks.sum()))
        t_ours = _median_s(lambda: ours(cfg), args.repeats)
        t_ref = _median_s(reference, args.repeats)
        print(f"| {grid} | {window} | {layout} | {n} | {t_ours * 1e3:.1f} | {t_ref * 1e3:.0f} | "
              f"{t_ref / t_ours:.0f}x | {equal} |")


if __name__ == "__main__":
    main()
