"""``python -m dse`` runs the command line."""

from dse.cli import main

main()
