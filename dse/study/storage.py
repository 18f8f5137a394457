"""Where a study's trials live (an Optuna RDB storage), the lock that keeps the trial count
exact across workers, and recovery of trials whose worker died.

* SQLite (the default, ``study.db`` in the output directory): WAL journal, ``synchronous=
  NORMAL`` (a committed trial survives SIGKILL of the process; only a power loss can drop the
  last commits) and a 60 s busy timeout, so several worker processes share one file. The
  trial-count lock is an ``flock`` on ``study.db.count.lock`` (``study.db.init.lock`` guards
  the creation of the tables); every process of a run holds a
  shared ``flock`` on ``study.db.run.lock``, so a new run that gets it exclusively knows that
  no process is alive on this file and fails every trial still marked RUNNING (their worker
  was killed).
* PostgreSQL (``postgresql://``, several machines): the count lock is a session advisory lock
  (``pg_advisory_lock``; another one guards the creation of Optuna's tables in a fresh
  database, which concurrent first runs would race for), and workers record Optuna heartbeats: a RUNNING trial whose heartbeat
  is older than ``GRACE_PERIOD_S`` is failed by the next worker that starts or asks. A worker
  creates a trial and records its first heartbeat under the count lock, so a RUNNING trial
  with no heartbeat, seen under that lock, lost its worker in between: it is failed too.

Every trial failed here gets a ``fail_reason``. A storage that cannot be opened (an unreachable
server, a missing database, a file that is not SQLite) is one :class:`BadInput` line with the
password masked; connecting gives up after ``CONNECT_TIMEOUT_S``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

import optuna
from optuna.trial import TrialState

from dse.errors import BadInput, DSEError, first_line, redact_url

#: How long SQLite waits for a lock held by another process, s [E: generous for K workers].
SQLITE_BUSY_TIMEOUT_S = 60.0
#: PostgreSQL workers record a heartbeat this often while a trial runs, s [E].
HEARTBEAT_INTERVAL_S = 10
#: A RUNNING trial whose last heartbeat is older than this is failed, s [E: 6 heartbeats].
GRACE_PERIOD_S = 60

#: How long opening a PostgreSQL connection may take before it is an error, s [E].
CONNECT_TIMEOUT_S = 10

#: User attribute that says why a trial failed.
FAIL_REASON = "fail_reason"


def is_sqlite(url: str) -> bool:
    return url.lower().startswith("sqlite:")


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///path`` URL."""
    return Path(url.split(":///", 1)[1])


def sqlite_url(path: Path) -> str:
    return "sqlite:///" + str(path.resolve())


def _connect_args(url: str) -> dict[str, Any]:
    """PostgreSQL: give up connecting after ``CONNECT_TIMEOUT_S`` unless the URL says."""
    return {} if "connect_timeout=" in url else {"connect_timeout": CONNECT_TIMEOUT_S}


def _pg_engine(url: str):
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool
    return create_engine(url, poolclass=NullPool, connect_args=_connect_args(url))


@contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """Held while Optuna creates its tables: processes opening a fresh database at once (the
    same command started on several machines) would otherwise race to create them."""
    if is_sqlite(url):
        with open(str(sqlite_path(url)) + ".init.lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return
    from sqlalchemy import text
    engine = _pg_engine(url)
    key = _lock_key("accel-dse:optuna-schema")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    engine.dispose()


def open_storage(url: str, field: str = "storage") -> optuna.storages.RDBStorage:
    """An RDB storage for ``url`` with the settings of the module docstring; :class:`BadInput`
    naming ``field`` when it cannot be opened."""
    try:
        with _schema_lock(url):
            return _open_storage(url)
    except DSEError:
        raise
    except Exception as exc:  # drivers raise many types; the user gets one line
        raise BadInput(field, redact_url(url), "expected a storage that opens ("
                       + first_line(exc) + ")") from None


def _open_storage(url: str) -> optuna.storages.RDBStorage:
    import sqlalchemy

    if is_sqlite(url):
        path = sqlite_path(url)
        with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as con:
            con.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the file
        con.close()
        storage = optuna.storages.RDBStorage(
            url, engine_kwargs={"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}})

        @sqlalchemy.event.listens_for(storage.engine, "connect")
        def _pragmas(dbapi_connection, _record):  # per connection
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")

        storage.engine.dispose()  # reconnect with the pragma
        return storage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats are "experimental" in Optuna 5
        return optuna.storages.RDBStorage(
            url, engine_kwargs={"pool_pre_ping": True, "connect_args": _connect_args(url)},
            heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S)


def _lock_key(study_name: str) -> int:
    """A signed 64-bit advisory-lock key for ``study_name``."""
    return int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:8], "big", signed=True)


class CountLock:
    """Held while a worker counts the trials and creates the next one, so that K workers
    (on one machine or several) create exactly the requested number."""

    def __init__(self, url: str, study_name: str):
        self.url = url
        self._file = None
        self._conn = None
        self._key = _lock_key(study_name)
        if is_sqlite(url):
            self._path = Path(str(sqlite_path(url)) + ".count.lock")

    @contextmanager
    def held(self) -> Iterator[None]:
        if is_sqlite(self.url):
            if self._file is None:
                self._file = open(self._path, "a+")
            fcntl.flock(self._file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._file, fcntl.LOCK_UN)
            return
        from sqlalchemy import text
        if self._conn is None:
            engine = _pg_engine(self.url)
            self._conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self._key})
        try:
            yield
        finally:
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RunLock:
    """SQLite only: a shared ``flock`` held by every live process of every run on the file."""

    def __init__(self, url: str):
        self._file = None
        if is_sqlite(url):
            self._file = open(str(sqlite_path(url)) + ".run.lock", "a+")

    def acquire_alone(self) -> bool:
        """Take the lock exclusively if no other process holds it (then downgrade to shared);
        True when this process is alone on the file."""
        if self._file is None:
            return False
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except OSError:
            alone = False
        fcntl.flock(self._file, fcntl.LOCK_SH)
        return alone

    def acquire_shared(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_SH)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def fail_trial(storage: optuna.storages.BaseStorage, trial_id: int, reason: str) -> bool:
    """Mark a RUNNING or WAITING trial FAIL with ``reason``; False if it finished meanwhile."""
    try:
        storage.set_trial_user_attr(trial_id, FAIL_REASON, reason)
        return storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
        return False


#: ``fail_reason`` of each kind of orphan.
STOPPED = "its worker stopped before the trial finished (killed or interrupted)"
SILENT = (f"its worker sent no heartbeat for over {GRACE_PERIOD_S} s (killed, or cut off "
          "from the database)")
NEVER_STARTED = "its worker stopped between creating it and its first heartbeat (killed)"


def fail_orphans(study: optuna.Study, storage: optuna.storages.BaseStorage, url: str,
                 alone: bool, count_lock: "CountLock | None" = None) -> int:
    """Fail the trials whose worker is gone, each with its ``fail_reason``: every RUNNING/
    WAITING trial when this run is alone on a SQLite file; on PostgreSQL, RUNNING trials whose
    heartbeat is stale, and (holding ``count_lock``) those with none. Returns how many."""
    n = 0
    if is_sqlite(url):
        if not alone:
            return 0
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,
                                                          TrialState.WAITING)):
            n += fail_trial(storage, t._trial_id, STOPPED)
        return n
    with count_lock.held() if count_lock is not None else nullcontext():
        for trial_id, reason in _silent_trials(study, storage, count_lock is not None):
            n += fail_trial(storage, trial_id, reason)
    return n


def _silent_trials(study: optuna.Study, storage, include_unstarted: bool
                   ) -> list[tuple[int, str]]:
    """(trial id, reason) of the study's RUNNING trials whose heartbeat is older than
    ``GRACE_PERIOD_S`` by the database's clock, or missing (when ``include_unstarted``)."""
    from optuna.storages._rdb import models
    from sqlalchemy import func, select

    rdb = getattr(storage, "rdb", storage)
    trials, beats = models.TrialModel.__table__, models.TrialHeartbeatModel.__table__
    study_id = rdb.get_study_id_from_name(study.study_name)
    with rdb.engine.connect() as conn:
        now = conn.execute(select(func.now())).scalar()
        rows = conn.execute(
            select(trials.c.trial_id, beats.c.heartbeat)
            .select_from(trials.outerjoin(beats, beats.c.trial_id == trials.c.trial_id))
            .where(trials.c.study_id == study_id, trials.c.state == TrialState.RUNNING)).all()
    now = now.replace(tzinfo=None)
    out = []
    for trial_id, beat in rows:
        if beat is None:
            if include_unstarted:
                out.append((trial_id, NEVER_STARTED))
        elif (now - beat.replace(tzinfo=None)).total_seconds() > GRACE_PERIOD_S:
            out.append((trial_id, SILENT))
    return out


def worker_alive(parent_pid: int) -> bool:
    """True while the process that started this worker is still its parent."""
    return os.getppid() == parent_pid
