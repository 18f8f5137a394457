"""A workload's op structure in index form, kept in one place: which ops repeat (one
unique op per group of equal signatures, optionally per template context), each op's group,
each op's producers, and how many ops each unique op stands for.

The fast path (:mod:`simulators.fast`), the population path (:mod:`simulators.population`)
and the templates that merge repeated ops (the wafer) read it from here; nothing else derives
it. A re-shaped workload (:mod:`workloads.reshape`) knows its structure when it is built (the
copies of one template op, the producers at its depth) and hands it over with :func:`attach`,
so that no signature is computed for it. Computed once per workload
(:func:`workloads.memo.per_workload`): workloads are not changed once built.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

import numpy as np

from workloads.ir import Workload, op_signature
from workloads.memo import per_workload

#: Where :func:`attach` leaves a re-shaped workload's structure: (per op, the number of the
#: template op it copies; per op, the indices of its producers).
_HINT = "structure_hint"


def attach(workload: Workload, which: Sequence[int], preds: list[list[int]]) -> None:
    """Record that ``workload``'s op ``i`` is a copy of template op ``which[i]`` (copies have
    equal signatures) and has producers ``preds[i]`` (op indices), as its builder knows them."""
    workload.__dict__[_HINT] = (which, preds)


def _hint(workload: Workload) -> tuple | None:
    return workload.__dict__.get(_HINT)


def groups(workload: Workload) -> tuple[list, list[int]]:
    """``workload``'s ops with equal signatures (:func:`workloads.ir.op_signature`) merged: the
    first op of each group in order of first appearance, and each op's group number. For a
    workload with an :func:`attach` ed structure, the copies of one template op are a group
    without computing signatures: equal signatures at least (the merge may be finer, never
    coarser)."""
    def build() -> tuple[list, list[int]]:
        ops = workload.ops
        hint = _hint(workload)
        keys = hint[0] if hint is not None else [op_signature(op) for op in ops]
        first: dict[Any, int] = {}
        unique: list = []
        for op, k in zip(ops, keys):
            if k not in first:
                first[k] = len(unique)
                unique.append(op)
        return unique, [first[k] for k in keys]
    return per_workload(workload, "op-groups", build)


class Structure:
    """The graph in index form: ``unique_ops``, ``unique_of`` (each op's unique op) and
    ``preds`` (each op's producers, op indices in graph order).

    ``contexts`` (a template's :meth:`~accelerators.base.Template.op_contexts`, per op) join
    the signature in telling ops apart; ``unique_contexts`` are those of the unique ops. With
    ``dedupe`` False every op is its own unique op (for templates that cost a whole workload at
    once without contexts, where an op's cost may depend on more than its signature)."""

    def __init__(self, workload: Workload, dedupe: bool = True,
                 contexts: list | None = None):
        ops = workload.ops
        hint = _hint(workload)
        self.unique_contexts: list | None = None
        if dedupe and contexts is None:
            self.unique_ops, of = groups(workload)
            self.unique_of = np.array(of, dtype=np.int64)
            if hint is not None:   # the builder's producers
                self.preds = hint[1]
                return
        else:
            sig_of: dict[Any, int] = {}
            self.unique_ops = []
            self.unique_of = np.empty(len(ops), dtype=np.int64)
            if contexts is not None:
                self.unique_contexts = []
            for i, op in enumerate(ops):
                s: Any = op_signature(op) if dedupe else str(i)
                if contexts is not None:
                    s = (s, contexts[i])
                if s not in sig_of:
                    sig_of[s] = len(self.unique_ops)
                    self.unique_ops.append(op)
                    if contexts is not None:
                        self.unique_contexts.append(contexts[i])
                self.unique_of[i] = sig_of[s]
        self.preds = producers(workload)

    @cached_property
    def counts(self) -> np.ndarray:
        """How many of the graph's ops each unique op stands for (float64)."""
        return np.bincount(self.unique_of, minlength=len(self.unique_ops)).astype(np.float64)


def producers(workload: Workload) -> list[list[int]]:
    """Each op's producers as op indices (graph order), read from the graph."""
    ops = workload.ops
    index = {op.name: i for i, op in enumerate(ops)}
    pred_of = workload.graph._pred   # networkx's own dict: its views cost 3x
    return [[index[p] for p in pred_of[op.name]] for op in ops]


def of(workload: Workload, dedupe: bool = True, cls: type | None = None) -> Structure:
    """The :class:`Structure` of ``workload`` (for ``cls``'s op contexts when it has them),
    made once per workload."""
    contexts = cls.op_contexts(workload) if cls is not None else None
    if contexts is not None:
        return per_workload(workload, ("structure", cls),
                            lambda: Structure(workload, True, contexts))
    return per_workload(workload, ("structure", dedupe), lambda: Structure(workload, dedupe))
