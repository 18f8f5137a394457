"""One worker: ask a trial, evaluate it, tell the result; repeat until the study holds the
requested number of evaluated designs (trials in every state but FAIL, RUNNING ones included,
counted under :class:`~dse.study.storage.CountLock` so K workers never overshoot), the deadline
passes, the parent is gone, or this run made ``max_failures`` failed trials. A failed trial
(killed worker, a raising quality function) does not count: another trial takes its place.

What a trial stores (user attributes): ``design`` (every design parameter, preset included,
each workload's full architecture, the assignment), ``simulator_version``, and either
``metrics`` (every metric, per workload too) or ``infeasible_reason``. A feasible trial is
COMPLETE with one objective value per objective and the relative violation of each constraint
(<= 0 when satisfied) as the system attr ``constraints``, a list in the study's order (what
Optuna's ``best_trials`` and samplers and optuna-dashboard read). An infeasible design is
PRUNED with its reason and every constraint violated, so that samplers which read constraints
(TPE, NSGA-II) steer away from it. A trial that raised (a bug, a failing user quality function)
is FAIL with ``fail_reason``. In every case the search goes on.
"""

from __future__ import annotations

import datetime
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from dse.study import population
from dse.study.batched_storage import BatchedStorage
from dse.study.evaluate import Evaluation, Evaluator
from dse.study.loader import ResolvedStudy, resolve
from dse.study.samplers import make_sampler
from dse.study.storage import (FAIL_REASON, HEARTBEAT_INTERVAL_S, CountLock, RunLock,
                               fail_orphans, is_sqlite, open_storage)

#: Optuna's system attr for a trial's constraint values (``_CONSTRAINTS_KEY``: a list, <= 0
#: when satisfied), read by ``Study.best_trials``, its samplers and optuna-dashboard.
CONSTRAINTS_KEY = "constraints"
#: Trials a worker runs between checks for stale trials of dead workers (PostgreSQL), count
#: [E: a check costs one query; at ~20 trials/s this is every few seconds].
STALE_CHECK_EVERY = 50


def derive_seed(seed: int, n_existing: int, index: int) -> int:
    """The sampler seed of a worker that finds ``n_existing`` trials in the study when it asks
    for its first one (counted under the count lock, so concurrent workers, on one machine or
    several, see different counts): the study's seed itself for the first worker of a fresh
    study (so one worker reproduces a run), otherwise a distinct value derived from all three (a
    resumed or concurrent worker must not replay another's samples)."""
    if n_existing == 0 and index == 0:
        return seed
    return int(np.random.SeedSequence([seed, n_existing, index]).generate_state(1)[0])


@dataclass
class WorkerJob:
    """What a worker process needs (picklable)."""

    spec: dict[str, Any]
    source: str | None
    storage_url: str
    study_name: str
    target: int
    seed: int
    index: int = 0
    deadline: float | None = None
    parent_pid: int | None = None
    failed_before: int = 0
    max_failures: int | None = None


@dataclass
class WorkerStats:
    trials: int = 0
    by_state: dict[str, int] = field(default_factory=dict)

    def add(self, t: FrozenTrial, on_trial: Callable[[FrozenTrial], None] | None) -> None:
        """Count the finished trial ``t`` and pass it to ``on_trial`` (when given)."""
        self.trials += 1
        self.by_state[t.state.name] = self.by_state.get(t.state.name, 0) + 1
        if on_trial is not None:
            on_trial(t)


class Heartbeat(threading.Thread):
    """Records a heartbeat for the trial in flight every ``HEARTBEAT_INTERVAL_S``."""

    def __init__(self, storage):
        super().__init__(daemon=True)
        self.storage = storage
        self.trial_id: int | None = None
        self.trial_ids: list[int] = []   # a population worker's claimed trials
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(HEARTBEAT_INTERVAL_S):
            tid = self.trial_id
            for t in ([tid] if tid is not None else []) + list(self.trial_ids):
                try:
                    self.storage.record_heartbeat(t)
                except Exception:  # a lost connection must not kill the worker; retried later
                    pass

    def stop(self) -> None:
        self._stop_event.set()


def set_constraints(trial: optuna.Trial, values: list[float]) -> None:
    """Store the constraint violations as Optuna's ``constraints`` system attr (a list)."""
    if values:
        trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, values)


def outcome(resolved: ResolvedStudy, ev: Evaluation, simulator_version: str
            ) -> tuple[TrialState, list[float] | None, dict[str, Any], list[float]]:
    """What a trial of ``ev`` stores: its state, objective values, user attributes and
    constraint violations (see the module docstring)."""
    attrs: dict[str, Any] = {"design": ev.design, "simulator_version": simulator_version,
                             "fidelity": ev.fidelity}
    if ev.infeasible is not None:
        attrs["infeasible_reason"] = ev.infeasible
        return TrialState.PRUNED, None, attrs, [1.0] * len(resolved.constraints)
    metrics = ev.metrics or {}
    values = [metrics.get(o.metric, math.nan) for o in resolved.objectives]
    bad = [o.metric for o, v in zip(resolved.objectives, values) if math.isnan(v)]
    attrs["metrics"] = metrics
    if bad:
        attrs[FAIL_REASON] = "objective not computed: " + ", ".join(bad)
        return TrialState.FAIL, None, attrs, []
    return TrialState.COMPLETE, values, attrs, [c.violation(metrics.get(c.metric, math.inf))
                                                for c in resolved.constraints]


def record(study: optuna.Study, trial: optuna.Trial, resolved: ResolvedStudy,
           ev: Evaluation, simulator_version: str) -> FrozenTrial:
    """Store ``ev`` in ``trial`` and finish it (see the module docstring)."""
    state, values, attrs, constraints = outcome(resolved, ev, simulator_version)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    set_constraints(trial, constraints)
    return study.tell(trial, values, state=state)


def finished_trial(resolved: ResolvedStudy, params: dict[str, Any], ev: Evaluation,
                   simulator_version: str) -> FrozenTrial:
    """The finished trial :func:`record` would store, for ``study.add_trials``."""
    state, values, attrs, constraints = outcome(resolved, ev, simulator_version)
    # as optuna.trial.create_trial makes it, without converting the space's (current)
    # distributions again for every trial: a population stores thousands a second
    dists = resolved.space.distributions()
    now = datetime.datetime.now()
    trial = FrozenTrial(number=-1, trial_id=-1, state=state, value=None, values=values,
                        datetime_start=now, datetime_complete=now if state.is_finished() else None,
                        params=params, distributions={k: dists[k] for k in params},
                        user_attrs=attrs,
                        system_attrs={CONSTRAINTS_KEY: constraints} if constraints else {},
                        intermediate_values={})
    trial._validate()
    return trial


def screening_fidelity(resolved: ResolvedStudy) -> str:
    """The fidelity of a study's search trials: ``fast`` for fast and multi, else ``event``."""
    return "event" if resolved.spec.fidelity == "event" else "fast"


def run_worker(job: WorkerJob, on_trial: Callable[[FrozenTrial], None] | None = None,
               resolved: ResolvedStudy | None = None) -> WorkerStats:
    """Run trials until the study holds ``job.target`` of them (see the module docstring)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        # CMA-ES ignores constraints (feasibility still decides the Pareto front and pareto.csv)
        warnings.filterwarnings("ignore", message="Constraints have been set, but CmaEsSampler")
        return _run(job, on_trial, resolved or resolve(job.spec, job.source))


def _run(job: WorkerJob, on_trial: Callable[[FrozenTrial], None] | None,
         resolved: ResolvedStudy) -> WorkerStats:
    from simulators.result import SIMULATOR_VERSION

    rdb = open_storage(job.storage_url)
    storage = BatchedStorage(rdb)
    run_lock = RunLock(job.storage_url)
    run_lock.acquire_shared()
    # The sampler is made at the first trial, once the worker has counted the study's trials.
    study = optuna.load_study(study_name=job.study_name, storage=storage,
                              sampler=optuna.samplers.RandomSampler(seed=job.seed))
    seeded = False
    study_id = storage.get_study_id_from_name(job.study_name)
    evaluator = Evaluator(resolved, fidelity=screening_fidelity(resolved))
    lock = CountLock(job.storage_url, job.study_name)
    heartbeat = None
    if not is_sqlite(job.storage_url):
        heartbeat = Heartbeat(storage)
        heartbeat.start()
        fail_orphans(study, storage, job.storage_url, alone=False, count_lock=lock)
    stats = WorkerStats()
    trial = None
    try:
        if resolved.spec.sampler.name == population.NAME:
            if shared_population(job, storage):
                population.run_shared(
                    resolved, storage, study_id, evaluator, lock, job.seed, job.target,
                    lambda params, ev: finished_trial(resolved, params, ev, SIMULATOR_VERSION),
                    lambda t: stats.add(t, on_trial), heartbeat, lambda: _should_stop(job))
            elif job.index == 0:
                _run_population(job, on_trial, resolved, study, storage, study_id, evaluator,
                                lock, stats)
            return stats
        while True:
            if job.deadline is not None and time.time() >= job.deadline:
                break
            if job.parent_pid is not None and os.getppid() != job.parent_pid:
                break
            with lock.held():
                counts = storage.count_by_state(study_id)
                n = sum(counts.values())
                failed = counts.get(TrialState.FAIL, 0)
                if n - failed >= job.target:
                    break
                if job.max_failures is not None and failed - job.failed_before >= job.max_failures:
                    break
                if not seeded:
                    study.sampler = make_sampler(resolved, derive_seed(job.seed, n, job.index))
                    seeded = True
                trial = study.ask()
                if heartbeat is not None:  # before the lock is released: see storage.py
                    storage.record_heartbeat(trial._trial_id)
                    heartbeat.trial_id = trial._trial_id
            try:
                point = resolved.space.suggest(trial)
                ev = evaluator.evaluate(point)
                frozen = record(study, trial, resolved, ev, SIMULATOR_VERSION)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # the search goes on; the reason is stored
                frozen = _fail(study, trial, f"{type(exc).__name__}: {exc}")
            trial = None
            if heartbeat is not None:
                heartbeat.trial_id = None
            stats.add(frozen, on_trial)
            if heartbeat is not None and stats.trials % STALE_CHECK_EVERY == 0:
                fail_orphans(study, storage, job.storage_url, alone=False, count_lock=lock)
    except KeyboardInterrupt:
        if trial is not None:
            _fail(study, trial, "interrupted")
        raise
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        lock.close()
        run_lock.release()
        rdb.engine.dispose()
    return stats


def shared_population(job: WorkerJob, storage: BatchedStorage) -> bool:
    """True when a population study's generations are shared through the storage
    (:func:`dse.study.population.run_shared`): on PostgreSQL (other processes and machines may
    join) or with several workers; one worker on its own SQLite file evolves in memory."""
    return storage.batch and (not is_sqlite(job.storage_url) or job.parent_pid is not None)


def _should_stop(job: WorkerJob) -> bool:
    """The deadline passed or the process that started this worker is gone."""
    return ((job.deadline is not None and time.time() >= job.deadline)
            or (job.parent_pid is not None and os.getppid() != job.parent_pid))


def _run_population(job: WorkerJob, on_trial, resolved: ResolvedStudy, study: optuna.Study,
                    storage, study_id: int, evaluator: Evaluator, lock: CountLock,
                    stats: WorkerStats) -> None:
    from simulators.result import SIMULATOR_VERSION

    def count() -> int:
        counts = storage.count_by_state(study_id)
        return sum(counts.values()) - counts.get(TrialState.FAIL, 0)

    with lock.held():
        n = sum(storage.count_by_state(study_id).values())
    population.run(resolved, study, evaluator, derive_seed(job.seed, n, job.index), job.target,
                   count, lambda params, ev: finished_trial(resolved, params, ev,
                                                            SIMULATOR_VERSION),
                   lambda trials: storage.add_finished_trials(study_id, trials),
                   lambda t: stats.add(t, on_trial))


def _fail(study: optuna.Study, trial: optuna.Trial, reason: str) -> FrozenTrial:
    try:
        trial.set_user_attr(FAIL_REASON, reason[:2000])
    except Exception:  # the trial may have been finished by someone else
        pass
    return study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


def worker_main(job: WorkerJob) -> None:
    """Entry point of a spawned worker process."""
    try:
        run_worker(job)
    except KeyboardInterrupt:
        pass
