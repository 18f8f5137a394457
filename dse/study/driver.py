"""Run a study: open (or resume) it in its storage, run K workers to the trial count, write
``trials.csv`` and ``pareto.csv`` (and the report, when :mod:`dse.report` can write one).

Resuming: the same output directory (or storage URL) holds the same study; its evaluated
designs (COMPLETE and PRUNED trials) count toward ``trials``, RUNNING trials left by a killed
run are failed first (:func:`~dse.study.storage.fail_orphans`), failed trials are re-asked (a
run stops after ``trials`` failures of its own), and a study made from a different spec (other
objectives, space, workloads...) is refused rather than mixed. Before anything is written the
run imports the study's ``quality.python`` function and checks the capture cache directory.
With one worker the run is in-process; with K, K spawned processes share the storage, each
with its own seed (:func:`~dse.study.workers.derive_seed`); the same command on several
machines with one PostgreSQL ``--storage`` grows one study the same way. This module imports
no plotting library.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc

from dse.errors import BadInput, first_line, redact_url
from dse.files import atomic_write_text
from dse.study.loader import (ResolvedStudy, check_storage_url, grid_points,
                              load_quality_function)
from dse.study.outputs import outcome_counts, state_counts, unmet_constraints, write_outputs
from dse.study.progress import StudyProgress
from dse.study.screening import Screening, screened_front, screening_summary
from dse.study.space import Shown
from dse.study.batched_storage import read_trials
from dse.study.storage import (CountLock, RunLock, fail_orphans, is_sqlite, open_storage,
                               sqlite_path, sqlite_url)
from dse.study.workers import WorkerJob, run_worker, worker_main

#: Study user attributes the driver writes.
FINGERPRINT_ATTR = "dse_fingerprint"
SPEC_ATTR = "dse_spec"
#: How often the parent polls the storage for progress with several workers, s [E].
POLL_S = 0.5
#: File in the output directory naming a storage other than its own study.db (password masked).
STORAGE_NOTE = "storage.txt"


@dataclass
class RunSummary:
    """What a run did and where its results are."""

    study_name: str
    out_dir: Path
    storage_url: str
    target: int
    states: dict[str, int]
    session_trials: int
    session_s: float
    pareto: list[int]
    trials_csv: Path
    pareto_csv: Path
    report: Path | None = None
    report_error: str | None = None
    resumed_from: int = 0
    failed_orphans: int = 0
    pareto_rows: list[dict[str, Any]] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None
    #: ``fidelity: multi``: the screened front against its confirmation; None at other
    #: fidelities.
    screening: Screening | None = None
    #: With no feasible design: which constraint cannot be met and by how much
    #: (:func:`dse.study.outputs.unmet_constraints`).
    unmet: list[str] = field(default_factory=list)

    @property
    def trials_per_s(self) -> float:
        return self.session_trials / self.session_s if self.session_s > 0 else 0.0


def resolve_run_args(study: ResolvedStudy, trials: int | None, workers: int,
                     storage: str | None, out: str | Path | None) -> tuple[Path, str, int, str]:
    """Output directory, storage URL, target count of evaluated designs and the field the URL
    came from, validated before anything is written."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
        raise BadInput("--workers", Shown(workers), "expected an int in [1, 256]")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int)
                               or trials < 1):
        raise BadInput("--trials", Shown(trials), "expected a positive int")
    if out is not None and not str(out).strip():
        raise BadInput("--out", Shown(str(out)), "expected a directory path")
    out_dir = Path(out if out is not None else (study.spec.output or f"runs/{study.name}"))
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput("--out", str(out_dir), "expected a directory, not a file")
    if storage is not None:
        url, where = check_storage_url(storage, "--storage"), "--storage"
    elif study.spec.storage is not None:
        url, where = study.spec.storage, "storage"
    else:
        url, where = sqlite_url(out_dir / "study.db"), "--out"
    if is_sqlite(url):
        db = sqlite_path(url)
        if not db.parent.exists() and db.parent.resolve() != out_dir.resolve():
            raise BadInput(where, url, "expected a SQLite file in an existing directory")
        if db.exists() and not db.is_file():
            raise BadInput(where, url, "expected a SQLite file, not a directory or device")
    own_db = out_dir / "study.db"
    if own_db.exists() and not (is_sqlite(url) and sqlite_path(url).resolve()
                                == own_db.resolve()):
        raise BadInput("--out", str(out_dir), f"expected a folder without a study.db of another "
                       f"storage (its trials.csv, pareto.csv and report would then disagree "
                       f"with the study.db beside them): use another --out, or "
                       f"--storage sqlite:///{own_db} to resume that study")
    target = trials if trials is not None else study.spec.trials
    if study.spec.sampler.name == "grid":  # the grid sampler visits each point once
        target = min(target, grid_points(study))
    return out_dir, url, target, where


def _check_existing(study: ResolvedStudy, url: str, where: str) -> None:
    """Refuse to resume a study of the same name made from a different spec."""
    if is_sqlite(url) and not sqlite_path(url).exists():
        return
    storage = open_storage(url, where)
    try:
        for s in storage.get_all_studies():
            if s.study_name == study.name:
                fp = s.user_attrs.get(FINGERPRINT_ATTR)
                if fp is not None and fp != study.fingerprint():
                    raise BadInput("study", study.name, "expected the spec the stored study was "
                                   "made from "
                                   "(objectives, search space, workloads, accelerators, seed and "
                                   "sampler must match to resume); use another --out or "
                                   "--storage, or another name")
    finally:
        storage.engine.dispose()


def open_study(study: ResolvedStudy, storage) -> optuna.Study:
    directions = [o.direction for o in study.objectives]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = optuna.create_study(study_name=study.name, storage=storage, directions=directions,
                                load_if_exists=True)
    if [d.name.lower() for d in s.directions] != directions:
        raise BadInput("objectives", [o.metric for o in study.objectives],
                       "expected the stored study's objective directions")
    if FINGERPRINT_ATTR not in s.user_attrs:
        s.set_user_attr(FINGERPRINT_ATTR, study.fingerprint())
        s.set_user_attr(SPEC_ATTR, study.spec.model_dump(mode="json"))
        s.set_user_attr("objectives", {o.metric: o.direction for o in study.objectives})
        s.set_user_attr("constraints", [c.label for c in study.constraints])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental in Optuna 5
            s.set_metric_names([o.metric for o in study.objectives])
    return s


def run_study(study: ResolvedStudy, trials: int | None = None, workers: int = 1,
              storage: str | None = None, out: str | Path | None = None,
              show_progress: bool = True, write_report: bool = True) -> RunSummary:
    """Run ``study`` to ``trials`` trials in total (see the module docstring)."""
    out_dir, url, target, where = resolve_run_args(study, trials, workers, storage, out)
    load_quality_function(study)
    from workloads.build import check_cache_dir
    check_cache_dir()
    _check_existing(study, url, where)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out_dir.mkdir(parents=True, exist_ok=True)
    rdb = open_storage(url, where)
    _note_storage(out_dir, url)
    run_lock = RunLock(url)
    alone = run_lock.acquire_alone()
    try:
        s = open_study(study, rdb)
        count_lock = None if is_sqlite(url) else CountLock(url, study.name)
        try:
            orphans = fail_orphans(s, rdb, url, alone, count_lock)
        finally:
            if count_lock is not None:
                count_lock.close()
        existing = s.get_trials(deepcopy=False)
        n_existing = len(existing)
        failed_before = outcome_counts(existing)["failed"]
        deadline = time.time() + study.spec.timeout_s if study.spec.timeout_s else None
        spec_data = study.spec.model_dump(mode="json")
        jobs = [WorkerJob(spec=spec_data, source=study.source, storage_url=url,
                          study_name=study.name, target=target, seed=study.spec.seed,
                          index=i, deadline=deadline,
                          parent_pid=os.getpid() if workers > 1 else None,
                          failed_before=failed_before, max_failures=target)
                for i in range(workers)]
        progress = StudyProgress([o.sign for o in study.objectives], target,
                                 enabled=show_progress)
        for t in existing:
            progress.add(t, this_session=False)
        started = time.perf_counter()
        try:
            with progress:
                if workers == 1:
                    run_worker(jobs[0], on_trial=progress.add, resolved=study)
                else:
                    _run_processes(jobs, s, progress)
                if study.spec.fidelity == "multi":
                    confirm_pareto(s, study, on_trial=progress.add, url=url)
        except KeyboardInterrupt:  # keep what finished: write the files, then stop
            write_outputs(s.get_trials(deepcopy=False), study, out_dir)
            raise
        except sqlalchemy.exc.SQLAlchemyError as exc:   # a full disk, a lost server
            raise BadInput(where, redact_url(url), "expected a storage that can be written "
                           f"({first_line(exc)}); the trials stored so far are kept: free the "
                           "space (or reconnect) and run again to resume") from None
        session_s = time.perf_counter() - started
        all_trials = read_trials(rdb, s._study_id)
        trials_csv, pareto_csv, front = write_outputs(all_trials, study, out_dir)
    finally:
        run_lock.release()
        rdb.engine.dispose()
    report, report_error = _write_report(out_dir, url, study.name) if write_report else (None, None)
    by_number = {t.number: t for t in all_trials}
    pareto_rows = [{"number": n, **{o.metric: by_number[n].values[i]
                                    for i, o in enumerate(study.objectives)}} for n in front]
    outcomes = outcome_counts(all_trials)
    screening = (screening_summary(all_trials, study) if study.spec.fidelity == "multi"
                 else None)
    return RunSummary(study_name=study.name, out_dir=out_dir, storage_url=url, target=target,
                      states=state_counts(all_trials),
                      session_trials=len(all_trials) - n_existing, session_s=session_s,
                      pareto=front, trials_csv=trials_csv, pareto_csv=pareto_csv, report=report,
                      report_error=report_error, resumed_from=n_existing,
                      failed_orphans=orphans, pareto_rows=pareto_rows, outcomes=outcomes,
                      stopped=_why_stopped(outcomes, target, failed_before, deadline),
                      screening=screening, unmet=unmet_constraints(all_trials, study))


def _why_stopped(outcomes: dict[str, int], target: int, failed_before: int,
                 deadline: float | None) -> str | None:
    """Why a run ended short of ``target`` evaluated designs, or None."""
    if outcomes["evaluated"] >= target:
        return None
    if outcomes["failed"] - failed_before >= target:
        return (f"stopped after {outcomes['failed'] - failed_before} failed trials in this run "
                "(their reasons are in trials.csv); run again to retry")
    if deadline is not None and time.time() >= deadline:
        return "stopped at timeout_s"
    return None


def _note_storage(out_dir: Path, url: str) -> None:
    """Name the storage in the output directory when it is not the directory's own study.db,
    so that `dse report DIR` can say where the trials are."""
    note = out_dir / STORAGE_NOTE
    if is_sqlite(url) and sqlite_path(url).resolve() == (out_dir / "study.db").resolve():
        note.unlink(missing_ok=True)
    else:
        atomic_write_text(note, redact_url(url) + "\n")


def confirm_pareto(s: optuna.Study, study: ResolvedStudy, on_trial=None,
                   url: str | None = None) -> list[int]:
    """``fidelity: multi``: re-evaluate each feasible Pareto-optimal fast-path trial with the
    event-driven simulator, as a new trial (user attrs ``fidelity: event``, ``confirms: N``).
    Trials already confirmed (an earlier run) are skipped. Returns the new trials' numbers.
    On PostgreSQL (``url``) each trial is created under the count lock with its first
    heartbeat, and beats while it runs, as a worker's (see storage.py)."""
    from dse.study.evaluate import Evaluator
    from dse.study.workers import Heartbeat, record
    from simulators.result import SIMULATOR_VERSION
    trials = s.get_trials(deepcopy=False)
    confirmed = {t.user_attrs.get("confirms") for t in trials}
    by_number = {t.number: t for t in trials}
    evaluator = Evaluator(study, fidelity="event")
    postgres = url is not None and not is_sqlite(url)
    lock = CountLock(url, study.name) if postgres else None
    heartbeat = Heartbeat(s._storage) if postgres else None
    if heartbeat is not None:
        heartbeat.start()
    new = []
    try:
        for number in screened_front(trials, study):
            if number in confirmed:
                continue
            with (lock.held() if lock is not None else contextlib.nullcontext(),
                  warnings.catch_warnings()):
                warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                s.enqueue_trial(by_number[number].params, user_attrs={"confirms": number})
                trial = s.ask()
                if heartbeat is not None:
                    s._storage.record_heartbeat(trial._trial_id)
                    heartbeat.trial_id = trial._trial_id
            frozen = record(s, trial, study, evaluator.evaluate(study.space.suggest(trial)),
                            SIMULATOR_VERSION)
            new.append(frozen.number)
            if on_trial is not None:
                on_trial(frozen)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        if lock is not None:
            lock.close()
    return new


def _run_processes(jobs: list[WorkerJob], s: optuna.Study, progress: StudyProgress) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker_main, args=(job,), daemon=False) for job in jobs]
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(POLL_S)
            _poll(s, progress)
        _poll(s, progress)
    except KeyboardInterrupt:
        for p in procs:
            p.join(timeout=10)
        raise
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    codes = [p.exitcode for p in procs]
    if any(c not in (0, None) for c in codes):
        warnings.warn(f"worker exit codes {codes}", RuntimeWarning, stacklevel=2)


def _poll(s: optuna.Study, progress: StudyProgress) -> None:
    for t in s.get_trials(deepcopy=False):
        progress.add(t)


def _write_report(out_dir: Path, url: str, study_name: str) -> tuple[Path | None, str | None]:
    """``report.html`` through :func:`dse.report.write_study_report`; a failing report does not
    fail the run (its results are written already): its error is returned."""
    from dse.report import write_study_report
    path = out_dir / "report.html"
    default_db = is_sqlite(url) and sqlite_path(url).resolve() == (out_dir / "study.db").resolve()
    try:
        write_study_report(out_dir if default_db else url, path, study_name=study_name)
    except Exception as exc:  # the report is a view of results already on disk
        return None, f"{type(exc).__name__}: {exc}"
    return path, None


def summary_dict(summary: RunSummary) -> dict[str, Any]:
    """A JSON-friendly summary (``dse study run --json``)."""
    return {"study": summary.study_name, "out_dir": str(summary.out_dir),
            "storage": redact_url(summary.storage_url), "target": summary.target,
            "states": summary.states, **summary.outcomes, "stopped": summary.stopped,
            "session_trials": summary.session_trials,
            "trials_per_s": round(summary.trials_per_s, 3), "resumed_from": summary.resumed_from,
            "failed_orphans": summary.failed_orphans, "pareto": summary.pareto_rows,
            "trials_csv": str(summary.trials_csv), "pareto_csv": str(summary.pareto_csv),
            "report": str(summary.report) if summary.report else None,
            "report_error": summary.report_error,
            "screening": summary.screening.as_dict() if summary.screening else None,
            "unmet": summary.unmet}

