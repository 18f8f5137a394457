"""Self-contained interactive Plotly reports.

* :func:`write_design_report` — one design on one workload (a :class:`simulators.result.Result`):
  totals, latency/energy breakdowns, timeline by unit, roofline.
* :func:`write_serving_report` — one serving run (a :class:`simulators.serving.ServingResult`)
  and optionally a rate sweep: latency percentiles and distributions, KV cache, batch and
  queue over time, throughput and tail latency against the arrival rate.
* :func:`write_study_report` — a co-search study (Optuna storage or output directory): Pareto
  front, parallel coordinates, parameter importances, history, the Pareto designs' table and
  each Pareto design's details.

Each writes one HTML file with plotly.js inlined once; it opens offline with no server.
Importing this package is cheap: Plotly and Optuna are imported when a report is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_design_report(result: Any, path: str | Path, title: str | None = None) -> Path:
    """Write the one-design report of ``result`` (a ``Result``) to ``path``; return the path."""
    from dse.report.design import write_design_report as _write
    return _write(result, path, title)


def write_serving_report(result: Any, path: str | Path, sweep: Any = None,
                         title: str | None = None) -> Path:
    """Write the serving report of ``result`` (a ``ServingResult``; ``sweep`` a ``RateSweep``
    from ``api.serve_sweep``) to ``path``; return the path."""
    from dse.report.serving import write_serving_report as _write
    return _write(result, path, sweep, title)


def write_study_report(source: Any, out_path: str | Path, study_name: str | None = None,
                       **options: Any) -> Path:
    """Write the study report of ``source`` (an output directory holding ``study.db``, an
    Optuna storage URL, or an ``optuna.Study``) to ``out_path``; return the path.

    ``options``: ``max_details`` (Pareto designs re-simulated for the detail view, default 30).
    """
    from dse.report.study import write_study_report as _write
    return _write(source, out_path, study_name, **options)


__all__ = ["write_design_report", "write_serving_report", "write_study_report"]
