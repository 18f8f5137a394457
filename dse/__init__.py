"""accel-dse: design-space exploration of hardware accelerators co-searched with models.

Import :mod:`dse.api` for the Python entry points; this package itself imports nothing heavy.
"""

__version__ = "0.1.0"
