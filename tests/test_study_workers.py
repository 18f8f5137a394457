"""Several workers on one storage: exact trial counts, recovery after SIGKILL, PostgreSQL."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import yaml

from dse.study.driver import run_study
from dse.study.loader import check_storage_url, load_study_text

ROOT = Path(__file__).resolve().parent.parent

STUDY = {
    "name": "t_workers",
    "seed": 3,
    "workloads": [{"model": "linear", "batch": 2}],
    "accelerator": {"template": "npu", "preset": "edge-32x32"},
    "search": {"hardware": {"rows": {"choices": [8, 16, 32, 64]},
                            "cols": {"choices": [8, 16, 32, 64]},
                            "dram_bandwidth_Bps": [2.0e9, 5.0e10]},
               "architecture": {"m": {"choices": [64, 128]}}},
    "objectives": ["latency_s", "energy_j"],
    "trials": 12,
}


def slow_quality(arch):
    """A user quality function slow enough that a kill lands inside a trial."""
    time.sleep(0.15)
    return arch["m"] / 8192


def write(tmp_path, **changes):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**STUDY, **changes}, sort_keys=False))
    return path


def cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-c", "from dse.cli import main; main()", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)


def check_exact(trials, n):
    """Exactly ``n`` evaluated designs (failed trials are re-asked, so there may be more
    trials), no duplicate, every trial finished."""
    numbers = sorted(t.number for t in trials)
    assert numbers == list(range(len(trials))), numbers
    assert len({t._trial_id for t in trials}) == len(trials)
    assert sum(t.state != optuna.trial.TrialState.FAIL for t in trials) == n
    for t in trials:
        assert t.state.is_finished(), (t.number, t.state)
        if "worker stopped" in t.user_attrs.get("fail_reason", ""):
            continue  # killed in flight: its parameters were never written
        assert t.params and "design" in t.user_attrs, t.number


@pytest.mark.slow
def test_two_workers_make_exactly_the_requested_trials_on_sqlite(tmp_path):
    s = load_study_text(yaml.safe_dump(STUDY))
    r = run_study(s, trials=12, workers=2, out=tmp_path / "out", show_progress=False,
                  write_report=False)
    trials = optuna.load_study(study_name="t_workers",
                               storage=f"sqlite:///{tmp_path}/out/study.db").trials
    check_exact(trials, 12)
    assert r.session_trials == 12


def _finished(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=30) as con:
            return con.execute("SELECT count(*) FROM trials WHERE state IN "
                               "('COMPLETE', 'PRUNED', 'FAIL')").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.slow
def test_sigkill_loses_no_finished_trial_and_the_rerun_completes_the_count(tmp_path):
    # a new architecture almost every trial: each trial captures a graph and rates it slowly
    search = {"hardware": STUDY["search"]["hardware"],
              "architecture": {"m": {"low": 64, "high": 8192, "step": 64}}}
    path = write(tmp_path, trials=30, objectives=["latency_s", "quality"], search=search,
                 quality={"python": "tests.test_study_workers:slow_quality"})
    out = tmp_path / "out"
    args = ("study", "run", str(path), "--out", str(out), "--no-progress")
    proc = cli(*args)
    db = out / "study.db"
    deadline = time.time() + 240
    while _finished(db) < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the first run made no progress"
        time.sleep(0.05)
    time.sleep(0.07)  # most likely inside a trial now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    url = f"sqlite:///{db}"
    before = optuna.load_study(study_name="t_workers", storage=url).trials
    finished = {t.number: (t.state, t.params, t.values) for t in before if t.state.is_finished()}
    running = [t.number for t in before if not t.state.is_finished()]
    assert len(finished) >= 5 and len(before) < 30

    rerun = cli(*args)
    stdout, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr
    after = optuna.load_study(study_name="t_workers", storage=url).trials
    check_exact(after, 30)
    by_number = {t.number: t for t in after}
    for n, (state, params, values) in finished.items():  # nothing finished was lost or changed
        assert (by_number[n].state, by_number[n].params, by_number[n].values) == \
            (state, params, values)
    for n in running:  # the killed run's trials in flight are failed, with the reason
        assert by_number[n].state == optuna.trial.TrialState.FAIL
        assert "worker stopped" in by_number[n].user_attrs["fail_reason"]
    if running:
        assert f"{len(running)} orphaned trial(s) marked failed" in " ".join(stdout.split())


POSTGRES_URL = os.environ.get("DSE_TEST_POSTGRES_URL")


@pytest.mark.skipif(not POSTGRES_URL, reason="set DSE_TEST_POSTGRES_URL to a PostgreSQL "
                                             "database to run (see .ci/run)")
def test_three_machines_grow_one_postgres_study(tmp_path):
    name = "t_pg_" + uuid.uuid4().hex[:8]
    path = write(tmp_path, name=name, trials=30)
    procs = [cli("study", "run", str(path), "--storage", POSTGRES_URL, "--out",
                 str(tmp_path / f"m{i}"), "--no-progress") for i in range(3)]
    try:
        for p in procs:
            _, stderr = p.communicate(timeout=600)
            assert p.returncode == 0, stderr
        url = check_storage_url(POSTGRES_URL)  # the driver SQLAlchemy needs
        study = optuna.load_study(study_name=name, storage=url)
        check_exact(study.trials, 30)
        # the three "machines" each ran trials, with different samples
        first = {tuple(sorted(t.params.items())) for t in study.trials[:3]}
        assert len(first) > 1
        assert all((tmp_path / f"m{i}" / "trials.csv").exists() for i in range(3))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        try:
            optuna.delete_study(study_name=name, storage=check_storage_url(POSTGRES_URL))
        except (KeyError, ImportError):
            pass
