"""Pareto fronts of objective vectors (all minimised after multiplying by each sign)."""

from __future__ import annotations

from typing import Sequence


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is no worse than ``b`` everywhere and better somewhere (both minimised)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


class ParetoFront:
    """Incremental non-dominated set of (key, minimised vector); equal vectors all stay."""

    def __init__(self, signs: Sequence[float]):
        self.signs = list(signs)
        self.members: dict[int, list[float]] = {}

    def add(self, key: int, values: Sequence[float]) -> bool:
        v = [s * x for s, x in zip(self.signs, values)]
        if any(dominates(m, v) for m in self.members.values()):
            return False
        for k in [k for k, m in self.members.items() if dominates(v, m)]:
            del self.members[k]
        self.members[key] = v
        return True

    def __len__(self) -> int:
        return len(self.members)

    def keys(self) -> list[int]:
        return sorted(self.members)
