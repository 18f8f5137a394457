"""Values derived from a workload, computed once per workload object and key.

Workloads are not changed once built (``Workload.ops`` is a cached property for the same
reason), so anything computed from one alone — its planned graph for a template's plan
parameters, the fast path's index structure, a template's capacity summary — can be kept
beside it. Entries are dropped when their workload is collected.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, Hashable

#: Per workload id: (a weak reference to it, {key: value}).
_MEMO: dict[int, tuple[weakref.ref, dict[Hashable, Any]]] = {}

#: Stands for "the workload itself" in the memo (a value that is the workload would keep it
#: alive through its own entry).
_SELF = object()


def per_workload(workload: Any, key: Hashable, build: Callable[[], Any]) -> Any:
    """``build()`` for ``workload`` and ``key``, computed on the first call only.

    ``build`` must depend on nothing but ``workload`` and what ``key`` names."""
    wid = id(workload)
    hit = _MEMO.get(wid)
    if hit is None or hit[0]() is not workload:
        hit = (weakref.ref(workload, lambda _, k=wid, memo=_MEMO: memo.pop(k, None)), {})
        _MEMO[wid] = hit
    values = hit[1]
    try:
        value = values[key]
    except KeyError:
        value = build()
        values[key] = _SELF if value is workload else value
        return value
    return workload if value is _SELF else value


def per_workload_bounded(workload: Any, key: Hashable, subkey: Hashable,
                         build: Callable[[], Any], limit: int) -> Any:
    """As :func:`per_workload` for ``(key, subkey)``, keeping at most ``limit`` subkeys per
    ``key`` (the least recently used go first): for values of which a search may make many,
    such as one planned graph per distinct plan of a template."""
    table = per_workload(workload, key, OrderedDict)
    try:
        value = table[subkey]
    except KeyError:
        value = build()
        table[subkey] = _SELF if value is workload else value
        if len(table) > limit:
            table.popitem(last=False)
        return value
    table.move_to_end(subkey)
    return workload if value is _SELF else value
