"""One row of a reproduction table: a metric, the paper's value, ours, and their ratio.

A row passes when ours is within +-35 % of the paper's number, or inside the paper's range
(a range row passes only inside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A reproduction row passes when ``ratio`` is within this factor of 1 (the issues' +-35%).
TOLERANCE = 0.35


@dataclass(frozen=True)
class Row:
    """``paper`` is a number or a ``(low, high)`` range. ``ratio`` is ours / paper; for a range,
    ours relative to the nearest end, 1.0 inside it. ``note`` says where ours comes from;
    ``source`` where the paper states its value (section, figure, table); ``fitted`` marks a
    row whose value rests on a constant fitted to that very figure: shown, never counted as
    a prediction (:func:`summary`)."""

    metric: str
    paper: float | tuple[float, float]
    ours: float
    note: str = ""
    source: str = ""
    fitted: bool = False
    #: The criterion this row is held to (a reproduction may ask for a tighter one).
    tolerance: float = TOLERANCE

    @property
    def ratio(self) -> float:
        if isinstance(self.paper, (tuple, list)):
            low, high = self.paper
            if low <= self.ours <= high:
                return 1.0
            return self.ours / (low if self.ours < low else high)
        return self.ours / self.paper if self.paper else float("inf")

    def within(self, tolerance: float | None = None) -> bool:
        """Within ``tolerance`` (default: the row's own criterion) of a number; inside a range
        (the ends included)."""
        if isinstance(self.paper, (tuple, list)):
            return self.paper[0] <= self.ours <= self.paper[1]
        return abs(self.ratio - 1.0) <= (self.tolerance if tolerance is None else tolerance)

    def paper_text(self) -> str:
        if isinstance(self.paper, (tuple, list)):
            return f"{self.paper[0]:g}–{self.paper[1]:g}"
        return f"{self.paper:g}"

    def to_dict(self) -> dict[str, Any]:
        paper = list(self.paper) if isinstance(self.paper, (tuple, list)) else self.paper
        d = {"metric": self.metric, "paper": paper, "ours": self.ours, "ratio": self.ratio,
             "within_35pct": self.within(TOLERANCE), "note": self.note, "source": self.source,
             "fitted": self.fitted}
        if self.tolerance != TOLERANCE:       # a row held to its own criterion says so
            d.update(within=self.within(), tolerance=self.tolerance)
        return d


def summary(rows: list[Row]) -> dict[str, int]:
    """How many rows are predictions (not ``fitted``) and how many of those are within
    their criterion; ``fitted``: the rows left out of both counts."""
    predictions = [r for r in rows if not r.fitted]
    return {"predictions": len(predictions),
            "within": sum(r.within() for r in predictions),
            "fitted": len(rows) - len(predictions)}
