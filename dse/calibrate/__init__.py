"""Calibration of the templates against real hardware.

``gpu_bench`` runs microbenchmarks on a CUDA GPU (torch and the standard library only, so it runs
on a bare machine with torch); ``fit`` turns its raw measurements into the calibration file the
``gpu`` template loads. :func:`calibrate_gpu` does both, for ``dse calibrate gpu``.
``physical_fit`` sets and checks the physical model's area constants on published chips
(``published_chips``; ``benchmarks/physical_validation.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def calibrate_gpu(out: str | Path, quick: bool = False, raw_out: str | Path | None = None,
                  max_seconds: float | None = None) -> dict[str, Any]:
    """Benchmark the CUDA GPU of this machine, fit the ``gpu`` template's efficiency model and
    write the calibration to ``out`` (the raw measurements to ``raw_out``, by default ``out``
    with ``.raw.json``). Returns the calibration dict.

    Raises :class:`dse.calibrate.gpu_bench.NoCudaGPU` (a ``DSEError``: the CLI prints one line
    and exits 2) when there is no CUDA GPU.
    """
    from dse.calibrate import fit, gpu_bench

    out = Path(out)
    raw_path = Path(raw_out) if raw_out else out.with_name(out.stem + ".raw.json")
    raw = gpu_bench.run_benchmarks(quick=quick, out=raw_path, max_seconds=max_seconds)
    calibration = fit.fit_calibration(raw)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(calibration, indent=1, sort_keys=True) + "\n")
    return calibration
