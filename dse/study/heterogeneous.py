"""Moved to :mod:`accelerators.heterogeneous` (a template that is several templates is
hardware and lives with the templates); this old name re-exports it for code in flight."""

from accelerators.heterogeneous import (SEPARATOR, Heterogeneous,  # noqa: F401
                                        offchip_bandwidth_Bps, pe_count, segment_ops,
                                        sub_workload)
