"""Published networks in a study's search space.

* The ``network`` architecture key (``search.architecture.network``, or ``WORKLOAD.network``)
  searches the trained networks of the accuracy table (:mod:`dse.quality.published`) that the
  workload's model can capture: ``null`` means all of them, a list or ``{choices: [...]}``
  names some, a name fixes one. A sampled name stands for that network's whole architecture,
  so it is the only architecture key of its workload. This is how a study searches depths
  (ResNet-18...152) or other changes that are not a product of independent keys.
* :func:`check_published_coverage`: with ``quality: published``, every architecture the space
  can produce must be in the table, checked before anything runs.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from dse.errors import BadInput
from dse.quality.published import AccuracyTable, arch_overrides
from dse.study.space import Dimension, Fixed, SearchSpace, Shown, Target, bad, parse_range

#: The architecture key that picks a whole published network.
NETWORK_KEY = "network"
#: Largest product of architecture choices whose coverage is checked one by one, count.
MAX_COMBINATIONS = 10_000


def network_dimension(where: str, opt_name: str, raw: Any, model: str,
                      table: AccuracyTable) -> tuple[Dimension | Fixed, dict[str, dict]]:
    """The dimension (or fixed choice) ``raw`` describes for ``network``, and each allowed
    network's full architecture by name."""
    entries = table.networks_for(model)
    names = tuple(e.name for e in entries)
    if not names:
        raise bad(where, raw, f"expected a table with {model} networks; {table.path} has none")

    def check(v: Any) -> str:
        if v not in names:
            raise BadInput(NETWORK_KEY, v, "expected one of " + ", ".join(names))
        return v

    got = parse_range(where, opt_name, raw, Target(key=NETWORK_KEY, type=str, choices=names,
                                                   check=check, owner=table.path))
    return got, {e.name: table.full_arch(e) for e in entries}


def _names(entries: list, shown: int = 6) -> str:
    names = [e.name for e in entries]
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return (", ".join(names[:shown]) or "none") + more


def _arch_key(space: SearchSpace, name: str) -> tuple[str, str] | None:
    """``(workload label, key)`` of an ``arch.*`` dimension name, else None."""
    parts = name.split(".")
    if parts[0] != "arch":
        return None
    if len(space.workloads) > 1:
        return parts[1], parts[2]
    return space.workloads[0], parts[1]


def check_published_coverage(space: SearchSpace, workloads: list, labels: set[str],
                             table: AccuracyTable) -> None:
    """:class:`BadInput` unless the table holds every architecture of the workloads named in
    ``labels`` that ``space`` can produce, and each model's reference architecture."""
    for w in workloads:
        if w.label not in labels:
            continue
        prefix = f"{w.label}." if len(space.workloads) > 1 else ""
        known = _names(table.networks_for(w.model))
        if table.lookup(w.model, None) is None:
            raise bad("quality", "published", f"expected the reference {w.model} (its zoo "
                      f"defaults) in the table {table.path}, which lists: {known}")
        if w.label in space.networks:
            continue  # every value of the network key is a table entry
        dims = [d for d in space.dimensions if (_arch_key(space, d.name) or ("",))[0] == w.label]
        for d in dims:
            if d.kind != "categorical":
                raise bad(d.field, [d.low, d.high], "expected {choices: [...]} or "
                          f"{prefix}{NETWORK_KEY}: quality: published rates only the trained "
                          "networks its table lists")
        count = math.prod(len(d.choices) for d in dims)
        if count > MAX_COMBINATIONS:
            raise bad("search.architecture", count, f"expected at most {MAX_COMBINATIONS} "
                      f"architectures of {w.label} with quality: published (or use "
                      f"{prefix}{NETWORK_KEY})")
        base = {**w.arch_defaults, **space.fixed_arch.get(w.label, {})}
        keys = [_arch_key(space, d.name)[1] for d in dims]
        for combo in itertools.product(*(d.choices for d in dims)):
            arch = {**base, **dict(zip(keys, combo))}
            if table.lookup(w.model, arch) is None:
                raise BadInput("quality", Shown({w.label: arch_overrides(w.model, arch)}),
                               f"expected architectures the published table covers; it has "
                               f"no top-1 for this one (its {w.model} networks: {known}; "
                               f"search them with {prefix}{NETWORK_KEY})")
