"""``dse study ...`` commands: run, validate, schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from dse.errors import redact_url

study_app = typer.Typer(no_args_is_help=True, help="Run and inspect co-search studies.")
_out = Console()


@study_app.command()
def run(file: Path = typer.Argument(..., help="Study file (YAML)."),
        trials: Optional[int] = typer.Option(None, "--trials", "-n",
                                             help="Designs to evaluate in total (earlier runs' "
                                                  "count; failed trials are re-asked)."),
        workers: int = typer.Option(1, "--workers", "-w", help="Worker processes."),
        storage: Optional[str] = typer.Option(None, "--storage",
                                              help="Optuna storage URL (sqlite:/// or "
                                                   "postgresql://)."),
        out: Optional[str] = typer.Option(None, "--out", "-o", help="Output directory."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON.")) -> None:
    """Run (or resume) a study: trials.csv, pareto.csv and the storage in the output dir."""
    from dse.study.driver import run_study, summary_dict
    from dse.study.loader import load_study

    study = load_study(file)
    summary = run_study(study, trials=trials, workers=workers, storage=storage, out=out,
                        show_progress=not no_progress and not as_json)
    if as_json:
        sys.stdout.write(json.dumps(summary_dict(summary), indent=2) + "\n")
        return
    _print_summary(study, summary)


def _print_summary(study, summary) -> None:
    o = summary.outcomes
    _out.print(f"[bold]{summary.study_name}[/]: {o['evaluated']}/{summary.target} designs "
               f"evaluated: {o['feasible']} feasible, {o['infeasible']} infeasible "
               f"({o['cannot_run']} cannot run, {o['violates_constraints']} violate a "
               f"constraint); {o['failed']} failed (re-asked)"
               + (f", {o['running']} running elsewhere" if o["running"] else "")
               + f"; this run {summary.session_trials} trials in {summary.session_s:.1f} s "
               f"({summary.trials_per_s:.1f} trials/s)"
               + (f", resumed from {summary.resumed_from}" if summary.resumed_from else "")
               + (f", {summary.failed_orphans} orphaned trial(s) marked failed"
                  if summary.failed_orphans else ""))
    if summary.stopped:
        _out.print(f"[yellow]{summary.stopped}[/]")
    if summary.screening is not None:
        from dse.study.screening import screening_text
        _out.print(screening_text(summary.screening))
    if summary.pareto_rows:
        t = Table(title=f"Pareto front ({len(summary.pareto_rows)} feasible trials)")
        t.add_column("trial", justify="right")
        for o in study.objectives:
            t.add_column(f"{o.metric} ({o.direction[:3]})", justify="right")
        for row in summary.pareto_rows[:15]:
            t.add_row(str(row["number"]), *(f"{row[o.metric]:.4g}" for o in study.objectives))
        _out.print(t)
        if len(summary.pareto_rows) > 15:
            _out.print(f"... {len(summary.pareto_rows) - 15} more in {summary.pareto_csv}")
    else:
        _out.print("no feasible trial yet: see the reasons in trials.csv")
    _out.print(f"trials: {summary.trials_csv}")
    _out.print(f"pareto: {summary.pareto_csv}")
    if summary.report:
        _out.print(f"report: {summary.report}")
    elif summary.report_error:
        _out.print(f"report: not written ({summary.report_error})")
    url = redact_url(summary.storage_url)
    _out.print(f"storage: {url}  (optuna-dashboard {url})")


@study_app.command()
def validate(file: Path = typer.Argument(..., help="Study file (YAML)."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Check a study file and print its search space (writes nothing)."""
    from dse.study.loader import load_study

    study = load_study(file)
    dims = [{"name": d.name, "kind": d.kind, "low": d.low, "high": d.high, "log": d.log,
             "step": d.step, "choices": list(d.choices) or None} for d in study.space.dimensions]
    info = {"name": study.name, "fingerprint": study.fingerprint(), "dimensions": dims,
            "objectives": [{"metric": o.metric, "direction": o.direction}
                           for o in study.objectives],
            "constraints": [c.label for c in study.constraints],
            "sampler": study.spec.sampler.name, "trials": study.spec.trials}
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return
    _out.print(f"[bold]{study.name}[/]: valid; {len(dims)} searched parameters, "
               f"sampler {info['sampler']}, {info['trials']} trials")
    t = Table(box=None)
    for col in ("parameter", "kind", "range / choices"):
        t.add_column(col)
    for d in study.space.dimensions:
        rng = (", ".join(map(str, d.choices)) if d.kind == "categorical"
               else f"[{d.low:g}, {d.high:g}]" + (" log" if d.log else "")
               + (f" step {d.step:g}" if d.step else ""))
        t.add_row(d.name, d.kind, rng)
    _out.print(t)
    _out.print("objectives: " + ", ".join(f"{o.direction} {o.metric}" for o in study.objectives))
    if study.constraints:
        _out.print("constraints: " + ", ".join(c.label for c in study.constraints))
    if study.quality.python:
        _out.print(f"quality: {study.quality.python} is Python code; it is imported when the "
                   "study runs, not by validate: run only study files you trust")


@study_app.command()
def schema() -> None:
    """Print the JSON Schema of a study file (for editors' completion)."""
    from dse.study.spec import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
