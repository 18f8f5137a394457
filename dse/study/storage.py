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
  is older than ``GRACE_PERIOD_S`` is failed by the next worker that starts or asks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import optuna
from optuna.trial import TrialState

#: How long SQLite waits for a lock held by another process, s [E: generous for K workers].
SQLITE_BUSY_TIMEOUT_S = 60.0
#: PostgreSQL workers record a heartbeat this often while a trial runs, s [E].
HEARTBEAT_INTERVAL_S = 10
#: A RUNNING trial whose last heartbeat is older than this is failed, s [E: 6 heartbeats].
GRACE_PERIOD_S = 60

#: User attribute that says why a trial failed.
FAIL_REASON = "fail_reason"


def is_sqlite(url: str) -> bool:
    return url.lower().startswith("sqlite:")


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///path`` URL."""
    return Path(url.split(":///", 1)[1])


def sqlite_url(path: Path) -> str:
    return "sqlite:///" + str(path.resolve())


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
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool
    engine = create_engine(url, poolclass=NullPool)
    key = _lock_key("accel-dse:optuna-schema")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    engine.dispose()


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage for ``url`` with the settings of the module docstring."""
    with _schema_lock(url):
        return _open_storage(url)


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
            url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=HEARTBEAT_INTERVAL_S,
            grace_period=GRACE_PERIOD_S)


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
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool
        if self._conn is None:
            engine = create_engine(self.url, poolclass=NullPool)
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


def fail_orphans(study: optuna.Study, storage: optuna.storages.BaseStorage, url: str,
                 alone: bool) -> int:
    """Fail the trials whose worker is gone: every RUNNING/WAITING trial when this run is alone
    on a SQLite file, heartbeat-stale ones on PostgreSQL. Returns how many."""
    n = 0
    if is_sqlite(url):
        if not alone:
            return 0
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,
                                                          TrialState.WAITING)):
            n += fail_trial(storage, t._trial_id, "its worker stopped before the trial finished "
                                                "(killed or interrupted)")
        return n
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)
    after = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    return sum(1 for t in after if t.number not in before)


def worker_alive(parent_pid: int) -> bool:
    """True while the process that started this worker is still its parent."""
    return os.getppid() == parent_pid
