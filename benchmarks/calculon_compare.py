"""``dse train`` side by side with Calculon (github.com/calculon-ai/calculon) on Korthikanti et
al.'s Table 5 runs (GPT 22 B, 175 B, 530 B, 1 T on A100s; full recomputation, and sequence
parallelism + selective recomputation), with the paper's measured step times.

    python benchmarks/calculon_compare.py [--calculon-src DIR] [--json out.json]

Calculon is installed into its own venv (``.refenv/calculon``: Calculon, numpy, pandas) from
``--calculon-src`` (a checkout; default ``$CALCULON_SRC``, else pip fetches it from GitHub);
where that fails the Calculon column is skipped with the reason. Calculon runs on its own
inputs from that checkout — ``models/*.json``, ``validation/seqsel/tab5/*.json``,
``systems/a100_80e.json`` — through its ``calculon llm`` command; ours come from
``dse.reproduce.megatron`` (the same layouts). Nothing of Calculon's code is used here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VENV = ROOT / ".refenv" / "calculon"
MODELS = {"22B": "megatron-22B", "175B": "gpt3-175B", "530B": "turing-530B",
          "1T": "megatron-1T"}


def install(src: str | None) -> tuple[Path | None, str]:
    """The ``calculon`` executable of the venv (created when missing), or None and why."""
    exe = VENV / "bin" / "calculon"
    if exe.exists():
        return exe, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True,
                       capture_output=True, timeout=300)
        pip = [str(VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run(pip + ["numpy", "pandas"], check=True, capture_output=True, timeout=600)
        target = src or "git+https://github.com/calculon-ai/calculon"
        subprocess.run(pip + [target], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return None, f"Calculon could not be installed: {str(exc)[:120]} {err[-200:]!r}"
    return (exe, "") if exe.exists() else (None, "no calculon executable after install")


def calculon_times(exe: Path, src: Path) -> dict[tuple[str, str], dict[str, float]]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            for mode in ("full", "seqsel"):
                stats = Path(tmp) / f"{model}_{mode}.json"
                subprocess.run([str(exe), "llm", str(src / "models" / f"{model}.json"),
                                str(src / "validation" / "seqsel" / "tab5" / f"{model}_{mode}.json"),
                                str(src / "systems" / "a100_80e.json"), str(stats)],
                               check=True, capture_output=True, timeout=600)
                d = json.loads(stats.read_text())
                out[(name, mode)] = {"step_s": d["total_time"],
                                     "memory_gib": d["proc_mem_tier1_cap_req"] / 2**30}
    return out


def ours() -> dict[tuple[str, str], dict[str, float]]:
    from dse.reproduce.megatron import TABLE5, _train, _workload
    out = {}
    for (name, heads, hidden, layers, tp, pp, n, gbs, mbs, chunks, t_full, t_seqsel,
         *_) in TABLE5:
        w = _workload(heads, hidden, layers, mbs)
        base = {"tp": tp, "pp": pp, "dp": 1, "micro_batch": mbs, "global_batch": gbs,
                "schedule": "interleaved" if chunks > 1 else "1f1b", "chunks": chunks}
        for mode, extra, paper in (("full", {"recompute": "full"}, t_full),
                                   ("seqsel", {"recompute": "selective", "sp": True}, t_seqsel)):
            r = _train(w, n, {**base, **extra})
            out[(name, mode)] = {"paper_s": paper, "step_s": r.step_time_s,
                                 "memory_gib": r.peak_memory_bytes / 2**30, "mfu": r.mfu}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calculon-src", default=os.environ.get("CALCULON_SRC"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    mine = ours()
    exe, why = install(args.calculon_src)
    theirs: dict = {}
    if exe is not None and args.calculon_src:
        try:
            theirs = calculon_times(exe, Path(args.calculon_src))
        except (subprocess.SubprocessError, OSError, KeyError, ValueError) as exc:
            why = f"Calculon did not run: {str(exc)[:200]}"
    elif exe is not None:
        why = "Calculon's inputs need its checkout: give --calculon-src"
    print("| model | recompute | paper step s | Calculon s (err) | ours s (err) | ours MFU | "
          "Calculon GiB | ours GiB |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for key, m in mine.items():
        c = theirs.get(key)
        cs = f"{c['step_s']:.3g} ({100 * (c['step_s'] / m['paper_s'] - 1):+.1f}%)" if c else "—"
        cm = f"{c['memory_gib']:.1f}" if c else "—"
        print(f"| {key[0]} | {'full' if key[1] == 'full' else 'seq-par + selective'} | "
              f"{m['paper_s']:g} | {cs} | {m['step_s']:.3g} "
              f"({100 * (m['step_s'] / m['paper_s'] - 1):+.1f}%) | {100 * m['mfu']:.1f}% | {cm} "
              f"| {m['memory_gib']:.1f} |")
        rows.append({"model": key[0], "mode": key[1], **m,
                     **({f"calculon_{k}": v for k, v in c.items()} if c else {})})
    if why:
        print(f"\nCalculon column skipped: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
