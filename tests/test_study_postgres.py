"""A study on PostgreSQL (issue 20): trials orphaned by killed workers end FAIL with a reason and
are re-asked, the password is never printed, and `dse report` finds such a study."""

import json
import os
import uuid

import optuna
import pytest
import yaml
from sqlalchemy import create_engine, text

from cli_runner import run_cli
from dse.study.loader import check_storage_url
from dse.study.storage import NEVER_STARTED, SILENT

POSTGRES_URL = os.environ.get("DSE_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="no PostgreSQL server: run "
                                "scripts/test-services.sh (as root) or set DSE_TEST_POSTGRES_URL")


def with_password(url: str, password: str) -> str:
    """``url`` with a password (the test server trusts every local connection)."""
    scheme, rest = url.split("://", 1)
    user, at, host = rest.partition("@")
    return f"{scheme}://{user}:{password}@{host}" if at else url


@pytest.fixture
def study_file(tmp_path):
    name = "t_pg20_" + uuid.uuid4().hex[:8]
    spec = {"name": name, "seed": 2, "workloads": [{"model": "linear", "batch": 1}],
            "accelerator": {"template": "npu", "preset": "edge-32x32"},
            "search": {"hardware": {"rows": {"choices": [8, 16, 32]},
                                    "dram_bandwidth_Bps": [2.0e9, 5.0e10]}},
            "objectives": ["latency_s", "energy_j"], "constraints": ["area_mm2 <= 0.5"]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    yield path, name
    try:
        optuna.delete_study(study_name=name, storage=check_storage_url(POSTGRES_URL))
    except KeyError:
        pass


def test_orphaned_trials_fail_with_a_reason_and_are_re_asked(tmp_path, capsys, study_file):
    path, name = study_file
    url = check_storage_url(POSTGRES_URL)
    args = ("study", "run", str(path), "--storage", POSTGRES_URL, "--out", str(tmp_path / "o"),
            "--no-progress")
    code, _, err = run_cli(capsys, *args, "--trials", "4")
    assert code == 0, err
    # two workers die: one between creating its trial and its first heartbeat, one later
    storage = optuna.storages.RDBStorage(url)
    sid = storage.get_study_id_from_name(name)
    unstarted = storage.create_new_trial(sid)
    silent = storage.create_new_trial(sid)
    storage.record_heartbeat(silent)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE trial_heartbeats SET heartbeat = heartbeat - "
                          "interval '5 minutes' WHERE trial_id = :t"), {"t": silent})
    engine.dispose()
    storage.engine.dispose()

    code, out, err = run_cli(capsys, *args, "--trials", "7")
    assert code == 0, err
    assert "2 orphaned trial(s) marked failed" in " ".join(out.split())
    trials = optuna.load_study(study_name=name, storage=url).trials
    by_id = {t._trial_id: t for t in trials}
    assert by_id[unstarted].state.name == "FAIL"
    assert by_id[unstarted].user_attrs["fail_reason"] == NEVER_STARTED
    assert by_id[silent].state.name == "FAIL"
    assert by_id[silent].user_attrs["fail_reason"] == SILENT
    assert all(t.state.is_finished() for t in trials)
    assert sum(t.state.name != "FAIL" for t in trials) == 7  # evaluated designs, exactly
    assert len(trials) == 9


def test_the_password_is_never_printed_and_report_finds_the_study(tmp_path, capsys,
                                                                    study_file):
    path, name = study_file
    secret = "pw" + uuid.uuid4().hex[:10]
    url = with_password(POSTGRES_URL, secret)
    out_dir = tmp_path / "o"
    code, out, err = run_cli(capsys, "study", "run", str(path), "--storage", url, "--out",
                             str(out_dir), "--trials", "3", "--no-progress")
    assert code == 0, err
    assert secret not in out + err and out.count(":***@") >= 1
    code, out, err = run_cli(capsys, "study", "run", str(path), "--storage", url, "--out",
                             str(out_dir), "--trials", "3", "--json")
    assert code == 0 and secret not in out + err
    assert ":***@" in json.loads(out)["storage"]
    for f in out_dir.iterdir():
        assert secret not in f.read_text(errors="replace"), f
    code, _, err = run_cli(capsys, "report", str(out_dir))
    assert code == 2 and "pass --storage" in err and secret not in err
    code, out, err = run_cli(capsys, "report", "--storage", url, "--study", name, "-o",
                             str(tmp_path / "r.html"))
    assert code == 0, err
    assert (tmp_path / "r.html").stat().st_size > 0


POPULATION = {"seed": 5, "workloads": [{"model": "linear", "batch": 1}],
              "accelerator": {"template": "npu", "preset": "edge-32x32"},
              "search": {"hardware": {"rows": {"choices": [8, 16, 32]},
                                      "cols": {"choices": [8, 16, 32]},
                                      "clock_hz": [2.0e8, 1.0e9],
                                      "dram_bandwidth_Bps": [2.0e9, 5.0e10]}},
              "objectives": ["latency_s", "energy_j"], "constraints": ["area_mm2 <= 0.5"],
              "fidelity": "fast", "sampler": {"name": "nsga2-vectorized", "population_size": 12},
              "trials": 48}


def test_two_population_workers_share_one_database(tmp_path):
    """Issue 33: two `dse study run` processes, each in its own working directory, sharing
    only the PostgreSQL database, grow one nsga2-vectorized study to exactly its trial count:
    every trial finished once (one value per objective, one set of attributes), none lost,
    each generation whole."""
    import subprocess
    import sys
    name = "t_pg33_" + uuid.uuid4().hex[:8]
    url = check_storage_url(POSTGRES_URL)
    spec = dict(POPULATION, name=name)
    procs = []
    for side in ("a", "b"):
        work = tmp_path / side
        work.mkdir()
        (work / "s.yaml").write_text(yaml.safe_dump(spec))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", "import sys; from dse.cli import main; sys.exit(main())",
             "study", "run", "s.yaml", "--storage", POSTGRES_URL, "--out", "out",
             "--no-progress"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
        trials = optuna.load_study(study_name=name, storage=url).trials
        assert len(trials) == spec["trials"]
        assert sorted(t.number for t in trials) == list(range(spec["trials"]))
        assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
        generations = [t.system_attrs["dse_generation"] for t in trials]
        assert sorted(set(generations)) == list(range(1, spec["trials"] // 12 + 1))
        assert all(generations.count(g) == 12 for g in set(generations))
        ids = [t._trial_id for t in trials]
        engine = create_engine(url)
        with engine.connect() as conn:   # a trial finished twice would have two of each
            values = conn.execute(text("SELECT trial_id, count(*) FROM trial_values WHERE "
                                       "trial_id = ANY(:ids) GROUP BY trial_id"),
                                  {"ids": ids}).all()
            designs = conn.execute(text("SELECT trial_id, count(*) FROM trial_user_attributes "
                                        "WHERE key = 'design' AND trial_id = ANY(:ids) "
                                        "GROUP BY trial_id"), {"ids": ids}).all()
        engine.dispose()
        complete = {t._trial_id for t in trials if t.state.name == "COMPLETE"}
        assert dict(values) == {i: 2 for i in complete}
        assert dict(designs) == {i: 1 for i in ids}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        try:
            optuna.delete_study(study_name=name, storage=url)
        except KeyError:
            pass
