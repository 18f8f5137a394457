"""The progress bar of a run: designs evaluated (of the target), feasible, failed (re-asked),
Pareto size, trials/s."""

from __future__ import annotations

import time

from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dse.study.pareto import ParetoFront


def is_feasible(t: FrozenTrial) -> bool:
    """COMPLETE with every constraint satisfied."""
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


class StudyProgress:
    """Counts finished trials as they arrive (from a callback or by polling the storage)."""

    def __init__(self, signs: list[float], target: int, console: Console | None = None,
                 enabled: bool = True):
        self.target = target
        self.front = ParetoFront(signs)
        self.seen: set[int] = set()
        self.done = 0
        self.failed = 0
        self.feasible = 0
        self.session = 0
        self.started = time.perf_counter()
        console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]trials"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("feasible {task.fields[feasible]}"),
            TextColumn("failed {task.fields[failed]}"),
            TextColumn("pareto {task.fields[pareto]}"),
            TextColumn("{task.fields[rate]:.1f} trials/s"), TimeElapsedColumn(),
            console=console, disable=not (enabled and console.is_terminal),
            refresh_per_second=4)
        self._task = self._progress.add_task("trials", total=target, feasible=0, failed=0,
                                             pareto=0, rate=0.0)

    def add(self, t: FrozenTrial, this_session: bool = True) -> None:
        if t.number in self.seen or not t.state.is_finished():
            return
        self.seen.add(t.number)
        if t.state == TrialState.FAIL:
            self.failed += 1
        else:
            self.done += 1
        if this_session:
            self.session += 1
        if is_feasible(t):
            self.feasible += 1
            self.front.add(t.number, t.values)
        self._progress.update(self._task, completed=self.done, feasible=self.feasible,
                              failed=self.failed, pareto=len(self.front), rate=self.rate)

    @property
    def rate(self) -> float:
        """Trials finished this session per second of wall time."""
        elapsed = time.perf_counter() - self.started
        return self.session / elapsed if elapsed > 0 else 0.0

    def __enter__(self) -> "StudyProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()
