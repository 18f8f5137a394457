"""``dse report`` command."""
