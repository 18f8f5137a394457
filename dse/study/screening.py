"""``fidelity: multi``: how far the confirmed front is from the screened one.

A multi-fidelity study screens with the fast path (:mod:`simulators.fast`: no contention, a
lower bound on latency where ops contend) and re-runs the feasible Pareto-optimal fast trials
(the *screened front*) with the event simulation (:func:`dse.study.driver.confirm_pareto`);
only those event trials form the final front (:func:`dse.study.outputs.pareto_numbers`).
:func:`screening_summary` says, from the stored trials alone, how many screened designs the
event simulation confirmed, how many dropped out and why, and the largest relative
difference between a screened design's fast and event metrics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from optuna.trial import FrozenTrial, TrialState

from dse.study.loader import ResolvedStudy
from dse.study.pareto import ParetoFront
from dse.study.progress import is_feasible

#: Metrics compared between a screened design's fast and event results, beside the objectives.
COMPARED_METRICS = ("latency_s", "energy_j")


def screened_front(trials: Sequence[FrozenTrial], resolved: ResolvedStudy) -> list[int]:
    """Numbers of the feasible fast-path trials no other feasible fast-path trial dominates
    (the designs ``fidelity: multi`` re-runs with the event simulation)."""
    front = ParetoFront([o.sign for o in resolved.objectives])
    for t in trials:
        if is_feasible(t) and t.user_attrs.get("fidelity") == "fast":
            front.add(t.number, t.values)
    return front.keys()


@dataclass
class Screening:
    """The screened front against its confirmation (counts are designs).

    ``screened`` = ``confirmed`` + ``dropped_infeasible`` + ``dropped_dominated`` +
    ``unconfirmed``. A design is *confirmed* when its event trial is on the final front;
    it *drops out* when its event trial is infeasible (cannot run, violates a constraint under
    the event simulation's latency) or failed, or is feasible but dominated by another
    confirmation; *unconfirmed* ones have no event trial (a run stopped before confirming).
    ``from_earlier`` counts final-front designs that are not on the current screened front
    (confirmed by an earlier run of a resumed study, before later fast trials dominated them).
    ``front_differs``: the final front's designs are not the screened front's.
    ``max_rel_diff``: per metric (the objectives and :data:`COMPARED_METRICS`), the largest
    ``|fast - event| / |event|`` over screened designs that have an event trial with the
    metric, as a fraction; ``None`` where no such design.
    """

    screened: int
    confirmed: int
    dropped_infeasible: int
    dropped_dominated: int
    unconfirmed: int
    from_earlier: int
    front_differs: bool
    max_rel_diff: dict[str, float | None] = field(default_factory=dict)

    @property
    def dropped(self) -> int:
        return self.dropped_infeasible + self.dropped_dominated

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dropped": self.dropped}


def screening_summary(trials: Sequence[FrozenTrial], resolved: ResolvedStudy) -> Screening:
    """:class:`Screening` of a study's stored trials (see the module docstring)."""
    from dse.study.outputs import pareto_numbers
    by_number = {t.number: t for t in trials}
    screened = screened_front(trials, resolved)
    final = set(pareto_numbers(trials, resolved))
    confirmation: dict[int, FrozenTrial] = {}
    for t in trials:   # the last finished event trial of each confirmed design
        src = t.user_attrs.get("confirms")
        if (t.user_attrs.get("fidelity") == "event" and src is not None
                and t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
            confirmation[src] = t
    confirmed = infeasible = dominated = unconfirmed = 0
    metrics = [o.metric for o in resolved.objectives]
    metrics += [m for m in COMPARED_METRICS if m not in metrics]
    worst: dict[str, float | None] = dict.fromkeys(metrics)
    for n in screened:
        c = confirmation.get(n)
        if c is None:
            unconfirmed += 1
            continue
        if c.number in final:
            confirmed += 1
        elif is_feasible(c):
            dominated += 1
        else:
            infeasible += 1
        fast_m = by_number[n].user_attrs.get("metrics") or {}
        event_m = c.user_attrs.get("metrics") or {}
        for m in metrics:
            f, e = fast_m.get(m), event_m.get(m)
            if isinstance(f, (int, float)) and isinstance(e, (int, float)) and e != 0:
                d = abs(f - e) / abs(e)
                worst[m] = d if worst[m] is None else max(worst[m], d)
    final_sources = {by_number[k].user_attrs.get("confirms") for k in final}
    return Screening(screened=len(screened), confirmed=confirmed, dropped_infeasible=infeasible,
                     dropped_dominated=dominated, unconfirmed=unconfirmed,
                     from_earlier=len(final_sources - set(screened)),
                     front_differs=final_sources != set(screened), max_rel_diff=worst)


def screening_text(s: Screening) -> str:
    """One line for ``dse study run``'s summary."""
    diffs = ", ".join(f"{m} up to {v:.2%}" for m, v in s.max_rel_diff.items() if v is not None)
    return (f"screening (fidelity multi): {s.screened} screened Pareto designs, {s.confirmed} "
            f"confirmed, {s.dropped} dropped out ({s.dropped_infeasible} infeasible, "
            f"{s.dropped_dominated} dominated)"
            + (f", {s.unconfirmed} not yet confirmed" if s.unconfirmed else "")
            + (f", {s.from_earlier} on the final front from an earlier run"
               if s.from_earlier else "")
            + ("; the final front differs from the screened one" if s.front_differs
               else "; the final front is the screened one")
            + (f"; fast vs event on the screened front: {diffs}" if diffs else ""))
