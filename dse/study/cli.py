"""``dse study ...`` commands (run, schema)."""

import typer

study_app = typer.Typer(no_args_is_help=True, help="Run and inspect co-search studies.")
