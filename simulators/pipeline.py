"""Pipeline-parallel schedules of a training step, and their simulation: the bubbles come from
running the schedule, not from a formula.

A schedule is, for every stage, the order in which it runs its tasks ``(F|B, micro-batch,
chunk)``:

* ``gpipe`` (Huang et al. 2019): every forward, then every backward;
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021): stage ``s`` of ``p`` runs ``p - s - 1``
  warm-up forwards, then alternates one forward and one backward, then drains the backwards;
* ``interleaved`` (Narayanan et al. SC'21, sec. 2.2; Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): each stage holds ``v`` model chunks
  (chunk ``c`` on stage ``c mod p``); micro-batches go through the chunks in groups of ``p``;
  ``(p - s - 1) * 2 + (v - 1) * p`` warm-up forwards, then 1F1B, then the drain. The number
  of micro-batches must be a multiple of ``p``.

:func:`run_schedule` plays a schedule as a list scheduler: a stage starts its next task when
it has finished the previous one and the task's input has arrived (a forward of chunk ``c``
needs the forward of chunk ``c - 1`` of that micro-batch, plus the point-to-point transfer; a
backward of chunk ``c`` needs the backward of chunk ``c + 1``, or its own forward for the last
chunk). It returns every task's start and end, each stage's busy time and idle gaps (the
bubbles) and the activations each stage holds over time (forwards whose backward has not
run yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dse.errors import BadInput

F, B = "F", "B"
Task = tuple[str, int, int]     # (F|B, micro-batch, chunk)


def schedule(kind: str, pp: int, microbatches: int, chunks: int = 1) -> list[list[Task]]:
    """The task order of every stage (see the module docstring)."""
    m, v = microbatches, chunks
    if kind == "gpipe":
        if v != 1:
            raise BadInput("parallel.chunks", v, "expected 1 for gpipe")
        return [[(F, i, s) for i in range(m)] + [(B, i, s) for i in range(m)]
                for s in range(pp)]
    if kind == "1f1b":
        if v != 1:
            raise BadInput("parallel.chunks", v, "expected 1 for 1f1b")
        out = []
        for s in range(pp):
            warm = min(pp - s - 1, m)
            order: list[Task] = [(F, i, s) for i in range(warm)]
            f, b = warm, 0
            while f < m:
                order.append((F, f, s))
                f += 1
                order.append((B, b, s))
                b += 1
            order.extend((B, i, s) for i in range(b, m))
            out.append(order)
        return out
    if kind == "interleaved":
        if v < 2:
            raise BadInput("parallel.chunks", v, "expected >= 2 chunks for interleaved")
        if m % pp:
            raise BadInput("parallel.global_batch", m, f"expected micro-batches a multiple "
                           f"of pp={pp} for the interleaved schedule")
        total = m * v
        out = []
        for s in range(pp):
            def fwd(k: int) -> Task:
                group = k // (pp * v)
                return (F, group * pp + k % pp, s + pp * ((k // pp) % v))

            def bwd(k: int) -> Task:
                group = k // (pp * v)
                return (B, group * pp + k % pp, s + pp * (v - 1 - (k // pp) % v))
            warm = min((pp - s - 1) * 2 + (v - 1) * pp, total)
            order = [fwd(k) for k in range(warm)]
            f, b = warm, 0
            while f < total:
                order.append(fwd(f))
                f += 1
                order.append(bwd(b))
                b += 1
            order.extend(bwd(k) for k in range(b, total))
            out.append(order)
        return out
    raise BadInput("parallel.schedule", kind, "expected gpipe, 1f1b or interleaved")


@dataclass
class ScheduleRun:
    """A played schedule: ``spans[stage]`` = (task, start_s, end_s) in order; ``end_s`` of
    the last task; per stage ``busy_s``, ``bubble_s`` (idle between its first start and the
    step's end, and before its first task) and ``peak_in_flight`` (the most chunk activations
    held at once, weighted by ``chunk_weight``)."""

    spans: list[list[tuple[Task, float, float]]]
    end_s: float
    busy_s: list[float]
    bubble_s: list[float]
    peak_in_flight: list[float]
    last_backward: dict[int, tuple[float, float]] = field(default_factory=dict)


def run_schedule(order: list[list[Task]], duration: Callable[[Task], float],
                 transfer_s: Callable[[Task], float], chunks_total: int,
                 chunk_weight: Callable[[int], float] | None = None) -> ScheduleRun:
    """Play ``order`` (per stage) with task times ``duration(task)`` and point-to-point
    transfer times ``transfer_s(task)`` (paid before a task whose input comes from another
    chunk); ``chunks_total``: model chunks (the last one's backward follows its own forward).
    """
    pp = len(order)
    weight = chunk_weight or (lambda c: 1.0)
    done: dict[Task, float] = {}
    nxt = [0] * pp
    free = [0.0] * pp
    spans: list[list[tuple[Task, float, float]]] = [[] for _ in range(pp)]
    held = [0.0] * pp
    peak = [0.0] * pp
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for s in range(pp):
            while nxt[s] < len(order[s]):
                task = order[s][nxt[s]]
                kind, mb, c = task
                if kind == F:
                    dep = (F, mb, c - 1) if c > 0 else None
                else:
                    dep = (B, mb, c + 1) if c < chunks_total - 1 else (F, mb, c)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (
                    transfer_s(task) if dep[2] != c else 0.0)
                start = max(free[s], ready)
                end = start + duration(task)
                done[task] = end
                free[s] = end
                spans[s].append((task, start, end))
                if kind == F:
                    held[s] += weight(c)
                    peak[s] = max(peak[s], held[s])
                else:
                    held[s] -= weight(c)
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")   # a bug in schedule()
    end = max(free)
    busy = [sum(e - b for _, b, e in sp) for sp in spans]
    bubble = [end - bz for bz in busy]
    last: dict[int, tuple[float, float]] = {}
    for sp in spans:
        for (kind, _, c), b, e in sp:
            if kind == B and e >= last.get(c, (0.0, -1.0))[1]:
                last[c] = (b, e)
    return ScheduleRun(spans, end, busy, bubble, peak, last)
