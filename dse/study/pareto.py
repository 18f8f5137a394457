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


def design_key(user_attrs: dict) -> str:
    """What identifies a trial's design: its ``design`` user attribute (every parameter of
    every design, each workload's architecture, the system and layout) as sorted JSON; the
    quality rating (read from the architecture) is left out. Trials with equal keys are the
    same design evaluated twice (a confirmation of a screened point, a sampler's repeat)."""
    import json
    d = {k: v for k, v in (user_attrs.get("design") or {}).items() if k != "quality"}
    return json.dumps(d, sort_keys=True, default=str)


def first_of_each_design(trials: Sequence) -> list:
    """``trials`` keeping the first (lowest number) of each design (:func:`design_key`); a
    trial without a stored design is kept."""
    seen: set[str] = set()
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        if not t.user_attrs.get("design"):
            out.append(t)
            continue
        key = design_key(t.user_attrs)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
