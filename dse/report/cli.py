"""``dse report``: write a study's interactive report (one self-contained HTML file).

The lead registers it on the main app: ``app.command("report")(report_command)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dse.errors import BadInput, redact_url


def report_command(
        directory: Optional[str] = typer.Argument(
            None, metavar="DIR", help="A study output directory (holds study.db)."),
        storage: Optional[str] = typer.Option(
            None, "--storage", help="An Optuna storage URL instead of DIR, e.g. sqlite:///study.db."),
        study: Optional[str] = typer.Option(
            None, "--study", help="Study name (needed when the storage holds several)."),
        out: Optional[Path] = typer.Option(
            None, "--out", "-o", help="Output HTML file (default: DIR/report.html, or "
                                      "./report.html with --storage)."),
        max_details: int = typer.Option(
            30, "--max-details", min=0, help="Pareto designs re-simulated for the detail view."),
) -> None:
    """Write a study's interactive report: Pareto front, design details, parallel coordinates,
    parameter importances, history and the Pareto table, in one HTML file that opens offline."""
    from dse.files import output_errors
    from dse.report import write_study_report
    from dse.study.loader import check_storage_url
    if (directory is None) == (storage is None):
        raise BadInput("DIR", directory, "give a study output directory or --storage URL (one of them)")
    if directory is not None and "://" in directory:     # a URL typed where DIR goes
        raise BadInput("DIR", redact_url(directory), "expected a study output directory or a "
                       ".db file; give a storage URL with --storage")
    source = check_storage_url(storage, "--storage") if storage is not None else Path(directory)
    target = out or (Path(directory) / "report.html" if directory is not None
                     else Path("report.html"))
    with output_errors("--out", target):
        path = write_study_report(source, target, study_name=study, max_details=max_details)
    typer.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB)")
