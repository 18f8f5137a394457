"""Issue 20: nothing read from a cache runs code, user code only when a study runs, atomic
outputs, masked passwords, the counts and reasons a new user reads, and what the CLI prints."""

import csv
import io
import json
import os
import pickle
import pathlib
import re

import optuna
import pytest
import yaml

from cli_runner import run_cli
from dse.errors import BadInput, redact_url
from workloads import build


class _Planted:
    """Unpickling this runs a shell command that leaves a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("DSE_CACHE_DIR", str(d))
    build.clear_memory_cache()
    yield d / "workloads"
    build.clear_memory_cache()


ARGS = dict(model="linear", arch={"m": 24, "k": 40, "n": 56})


def _key():
    return build._key(build.resolve(**ARGS))


# ----------------------------------------------------------------------------- capture cache
def test_a_planted_pickle_is_never_loaded(cache, tmp_path):
    marker = tmp_path / "pwned"
    cache.mkdir(parents=True, mode=0o700)
    blob = pickle.dumps(_Planted(marker))
    for name in (f"{_key()}.pkl", f"{_key()}.json.gz", f"{_key()}.json"):
        (cache / name).write_bytes(blob)  # where the old and the new cache look
    w = build.build_workload(**ARGS)
    assert not marker.exists()
    assert w.ops[0].attrs["m"] == 24 and w.model == "linear"


def test_a_cached_workload_reads_back_exactly(cache):
    w = build.build_workload("gpt2", phase="decode", context=16, arch={"n_layer": 1})
    build.clear_memory_cache()
    again = build.build_workload("gpt2", phase="decode", context=16, arch={"n_layer": 1})
    assert again is not w
    assert [(o, o.attrs) for o in again.ops] == [(o, o.attrs) for o in w.ops]
    assert list(again.graph.edges(data=True)) == list(w.graph.edges(data=True))
    assert (again.params, again.arch, again.flops) == (w.params, w.arch, w.flops)
    files = [f for f in cache.iterdir() if f.name != ".signing-key"]
    assert sorted(f.name.startswith("template-") for f in files) == [False, True]  # + gpt2's
    assert all(f.name.endswith(".json.gz") for f in files)           # re-shape template
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert oct((cache / ".signing-key").stat().st_mode & 0o777) == "0o600"


def test_a_corrupt_or_foreign_cache_file_is_rebuilt(cache):
    w = build.build_workload(**ARGS)
    path = cache / f"{_key()}.json.gz"
    for junk in (b"\x1f\x8b garbage", b"{}", path.read_bytes()[:20]):
        path.write_bytes(junk)
        build.clear_memory_cache()
        with pytest.warns(RuntimeWarning, match="refused"):
            assert build.build_workload(**ARGS).flops == w.flops


def _unsealed_json(path):
    import gzip
    from dse.safe_io import unseal
    return json.loads(gzip.decompress(unseal(path.read_bytes(), path.parent, path.name)))


def test_an_edited_or_planted_cache_entry_does_not_verify(cache):
    """Issue 34: a well-formed entry with doubled FLOPs, or a well-formed entry planted without
    the cache's key, is refused with one warning and captured again (never silently used)."""
    import gzip
    from dse.safe_io import seal
    w = build.build_workload(**ARGS)
    path = cache / f"{_key()}.json.gz"
    data = _unsealed_json(path)
    for node in data["nodes"]:
        node["op"]["flops"] *= 2
    doubled = gzip.compress(json.dumps(data).encode())
    head = path.read_bytes().partition(b"\n")[0]
    for planted in (head + b"\n" + doubled, doubled, json.dumps(data).encode()):
        path.write_bytes(planted)
        build.clear_memory_cache()
        with pytest.warns(RuntimeWarning, match="capture cache entry .* refused"):
            assert build.build_workload(**ARGS).flops == w.flops
    # signed with this cache's key but a well-formed entry of another shape: refused, not a crash
    path.write_bytes(seal(gzip.compress(b'{"format": 2, "key": "x", "nodes": [1]}'), cache,
                          path.name))
    build.clear_memory_cache()
    assert build.build_workload(**ARGS).flops == w.flops


def test_a_fifo_in_place_of_a_cache_entry_does_not_hang(cache):
    w = build.build_workload(**ARGS)
    path = cache / f"{_key()}.json.gz"
    path.unlink()
    os.mkfifo(path)
    build.clear_memory_cache()
    with pytest.warns(RuntimeWarning, match="not a device, pipe or socket"):
        assert build.build_workload(**ARGS).flops == w.flops


@pytest.mark.parametrize("how", ["others_write", "other_owner"])
def test_a_cache_directory_others_can_write_is_refused(cache, capsys, how):
    cache.mkdir(parents=True)
    if how == "others_write":
        os.chmod(cache, 0o777)
    elif os.geteuid() == 0:
        os.chown(cache, 12345, 12345)
    else:
        pytest.skip("changing a directory's owner needs root")
    build._CHECKED_DIRS.clear()
    code, _, err = run_cli(capsys, "workload", "linear", "--arch", "m=8")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: DSE_CACHE_DIR: expected a cache directory only you can write")


# ----------------------------------------------------------------------------- user code
MODULE = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def quality(arch):
    return 1.0
'''


def test_validate_imports_no_user_code_and_run_does(tmp_path, capsys, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "userq_i20.py").write_text(MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    study = {"name": "t_trust", "workloads": [{"model": "linear", "batch": 1}],
             "accelerator": {"template": "npu", "preset": "edge-32x32"},
             "search": {"hardware": {"rows": {"choices": [8, 16]}}},
             "objectives": ["latency_s", "quality"], "quality": {"python": "userq_i20:quality"},
             "trials": 1}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    code, out, _ = run_cli(capsys, "study", "validate", str(path))
    assert code == 0 and not marker.exists()
    assert "userq_i20:quality is Python code" in " ".join(out.split())
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                           "--no-progress")
    assert code == 0, err
    assert marker.exists()


# ----------------------------------------------------------------------------- atomic outputs
def test_a_kill_mid_write_leaves_the_old_report(tmp_path, monkeypatch):
    from dse import files
    from dse.report.html import write_page
    path = tmp_path / "report.html"
    path.write_text("old report")

    def killed(*_):
        raise KeyboardInterrupt  # the process dies after writing, before the rename

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_page(path, "<html>" + "x" * 100000)
    monkeypatch.undo()
    assert path.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    write_page(path, "new")
    assert path.read_text() == "new"


# ----------------------------------------------------------------------------- passwords
@pytest.mark.parametrize("url, shown", [
    ("postgresql://me:s3cret@db:5432/x", "postgresql://me:***@db:5432/x"),
    ("postgresql+psycopg2://me:p%40ss@db/x?sslmode=require",
     "postgresql+psycopg2://me:***@db/x?sslmode=require"),
    ("postgresql://me@db/x?password=s3cret&sslmode=x",
     "postgresql://me@db/x?password=***&sslmode=x"),
    ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
    ("postgresql://me:pa/ss@db/x", "postgresql://me:***@db/x"),
    ("postgresql://me:a/b/c@db:5433/x", "postgresql://me:***@db:5433/x"),
    ("postgresql://me:p@ss@db/x", "postgresql://me:***@db/x"),
    ("postgresql://me:a:b@db/x", "postgresql://me:***@db/x"),
    ("postgresql://me:q?u#e@db/x", "postgresql://me:***@db/x"),
    ("postgresql://me:%2F%40@db/x", "postgresql://me:***@db/x"),
    ("postgresql://me:@db/x", "postgresql://me:***@db/x"),
    ("postgresql:///x?host=db&password=se/cr@t;&user=me",
     "postgresql:///x?host=db&password=***;&user=me"),
    ("postgresql:///x?PASSWORD=s3cret", "postgresql:///x?PASSWORD=***"),
])
def test_passwords_are_masked(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize("password", ["s3cret", "pa/ss", "a/b/c", "p@ss", "a:b", "q?u#e",
                                      "x y", "sl\\ash", "ü-ñ", "%2F", "a&b=c", "'\"", "@@//::"])
def test_no_password_shape_survives_masking(password):
    """Whatever characters a password holds, it does not survive redaction."""
    for url in (f"postgresql://me:{password}@db:5432/x", f"postgresql://me:{password}@db/x?a=b"):
        shown = redact_url(url)
        assert password not in shown and shown.startswith("postgresql://me:***@")


def test_a_storage_url_error_masks_the_password():
    from dse.study.loader import check_storage_url
    with pytest.raises(BadInput) as exc:
        check_storage_url("redis://me:s3cret@db/x")
    assert "s3cret" not in str(exc.value)


# ----------------------------------------------------------------------------- counts and reasons
STUDY = {
    "name": "t_counts", "seed": 7,
    "workloads": [{"model": "linear", "batch": 2}],
    "accelerator": {"template": "npu", "preset": "edge-32x32"},
    "search": {"hardware": {"rows": {"choices": [8, 1024]}, "cols": {"choices": [8, 1024]},
                            "ifmap_sram_kb": {"choices": [1, 64]}}},
    "objectives": ["latency_s", "energy_j"],
    "constraints": ["area_mm2 <= 0.5"],
    "sampler": "grid",  # each of the 8 designs once: feasible, too large, cannot run
    "trials": 8,
}


def test_summary_counts_constraint_violations_as_infeasible_and_says_why(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(STUDY))
    code, out, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                             "--json")
    assert code == 0, err
    info = json.loads(out)
    with open(tmp_path / "o" / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    violating = [r for r in rows if r["state"] == "COMPLETE" and r["feasible"] == "False"]
    pruned = [r for r in rows if r["state"] == "PRUNED"]
    assert violating and pruned, "the space was chosen to hold both kinds"
    assert info["violates_constraints"] == len(violating)
    assert info["cannot_run"] == len(pruned)
    assert info["infeasible"] == len(violating) + len(pruned)
    assert info["feasible"] == sum(r["feasible"] == "True" for r in rows)
    assert info["evaluated"] == 8
    for r in violating:
        m = re.fullmatch(r"violates area_mm2<=0\.5: area_mm2 = ([\d.]+), (\d+)% over",
                         r["reason"])
        assert m, r["reason"]
        assert abs(float(m.group(1)) - float(r["area_mm2"])) <= 1e-3 * float(r["area_mm2"])
    code, out, _ = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                           "--no-progress")
    text = " ".join(out.split())
    assert (f"8/8 designs evaluated: {info['feasible']} feasible, {info['infeasible']} "
            f"infeasible ({len(pruned)} cannot run, {len(violating)} violate a constraint)"
            in text)


def failing_quality(arch):
    raise RuntimeError("the quality model is broken")


def test_failed_trials_are_re_asked_and_a_broken_study_stops(tmp_path):
    from dse.study.driver import run_study
    from dse.study.loader import load_study_text
    s = load_study_text(yaml.safe_dump({**STUDY, "objectives": ["latency_s", "quality"],
                                        "constraints": [], "trials": 4,
                                        "quality": {"python": "test_trust:failing_quality"}}))
    r = run_study(s, out=tmp_path / "o", show_progress=False, write_report=False)
    # every design that runs fails its quality: the run stops after 4 failures, not 4 designs
    assert r.outcomes["failed"] == 4 and r.outcomes["feasible"] == 0
    assert r.outcomes["evaluated"] == r.outcomes["cannot_run"] < 4
    assert r.session_trials == r.outcomes["failed"] + r.outcomes["evaluated"]
    assert r.stopped and "4 failed trials" in r.stopped


def sometimes_failing_quality(arch):
    if arch["m"] == 128:
        raise RuntimeError("no score for m=128")
    return 1.0


def test_a_resumed_study_re_asks_what_failed_until_the_target_is_evaluated(tmp_path):
    from dse.study.driver import run_study
    from dse.study.loader import load_study_text
    spec = {**STUDY, "objectives": ["latency_s", "quality"], "constraints": [],
            "search": {**STUDY["search"], "architecture": {"m": {"choices": [64, 128]}}},
            "quality": {"python": "test_trust:sometimes_failing_quality"}}
    s = load_study_text(yaml.safe_dump(spec))
    r = run_study(s, trials=8, out=tmp_path / "o", show_progress=False, write_report=False)
    assert r.outcomes["evaluated"] == 8 and r.outcomes["failed"] > 0
    assert r.stopped is None
    again = run_study(s, trials=10, out=tmp_path / "o", show_progress=False,
                      write_report=False)
    assert again.outcomes["evaluated"] == 10
    trials = optuna.load_study(study_name="t_counts",
                               storage=f"sqlite:///{tmp_path}/o/study.db").trials
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert all("no score for m=128" in t.user_attrs["fail_reason"] for t in failed)


# ----------------------------------------------------------------------------- what the CLI prints
def test_accelerators_reads_at_80_columns():
    from dse import api
    from dse.cli_format import accelerators_text
    rows = api.accelerators()
    text = accelerators_text(rows, 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text and "..." not in text
    for a in rows:  # every parameter name whole, at the start of its row
        for p in a["params"]:
            assert any(re.match(rf"  {re.escape(p['name'])}\s", line) for line in lines), p
    assert "989 TFLOP/s" in text and "4.8 TB/s" in text and "60 MiB" in text  # gpu:h200
    assert not re.search(r"\d KB\b", text)  # binary sizes are KiB, SI sizes kB


def test_accelerators_default_column_is_what_runs(capsys):
    from dse.api import accelerator
    code, out, _ = run_cli(capsys, "accelerators")
    npu = out[out.index("npu — "):out.index("gpu — ")]
    assert "default (datacenter-bf16)" in npu
    runs = accelerator("npu").hw  # no preset given: the default preset's values
    arrays = re.search(r"\n  arrays\s+(\S+)", npu).group(1)
    clock = re.search(r"\n  clock_hz\s+(\S+ \S+)", npu).group(1)
    assert int(arrays) == runs.arrays != 1  # the class default is 1
    assert clock == f"{runs.clock_hz / 1e9:g} GHz"


def test_accelerators_json_has_the_defaults_that_run(capsys):
    from dse.api import accelerator
    code, out, _ = run_cli(capsys, "accelerators", "--json")
    npu = next(a for a in json.loads(out) if a["name"] == "npu")
    assert npu["defaults"] == dict(accelerator("npu").hw)


def test_simulate_echoes_the_workload_and_the_design(capsys):
    code, out, _ = run_cli(capsys, "simulate", "linear", "--arch", "m=8", "-a", "npu:edge-32x32",
                           "--hw", "rows=16")
    text = " ".join(out.split())
    assert code == 0
    assert "workload: bf16, batch=1, 1 ops; arch m=8, k=1024, n=1024, bias=False" in text
    assert "design: rows=16 PEs, cols=32 PEs" in text


def test_capture_and_simulation_show_progress_on_a_terminal(monkeypatch, capsys):
    from rich.console import Console

    import dse.cli
    screen = io.StringIO()
    monkeypatch.setattr(dse.cli, "Console", lambda **kw: Console(file=screen,
                                                                 force_terminal=True))
    build.clear_memory_cache()
    code, _, err = run_cli(capsys, "simulate", "linear", "--arch", "m=12")
    assert code == 0 and err == ""
    assert "capturing linear with torch.export" in screen.getvalue()
    assert "simulating 1 ops on npu" in screen.getvalue()


def test_tests_find_the_postgres_server_by_themselves(tmp_path, monkeypatch):
    import conftest
    env = tmp_path / "services.env"
    env.write_text("export DSE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5433/x\n")
    monkeypatch.setattr(conftest, "SERVICES_ENV", env)
    monkeypatch.delenv("DSE_TEST_POSTGRES_URL", raising=False)
    conftest._find_postgres()
    assert os.environ["DSE_TEST_POSTGRES_URL"] == "postgresql://postgres@127.0.0.1:5433/x"


def test_no_wall_clock_assertions_in_tests():
    """Timing belongs in benchmarks/ (shared machines are noisy): no test asserts on a value
    computed from the wall clock (``time.perf_counter``, ``time.time``, ``time.monotonic``).
    A ``deadline`` that stops a test from hanging is a guard, not a speed target."""
    import ast

    clocks = {"perf_counter", "time", "monotonic", "perf_counter_ns", "monotonic_ns"}

    def reads_clock(node) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                   and n.func.attr in clocks and isinstance(n.func.value, ast.Name)
                   and n.func.value.id == "time" for n in ast.walk(node))

    offenders = []
    for path in sorted(pathlib.Path(__file__).parent.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        timed = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and reads_clock(n.value)
                 for t in n.targets if isinstance(t, ast.Name) and "deadline" not in t.id}
        for n in ast.walk(tree):
            guard = any(isinstance(x, ast.Name) and "deadline" in x.id for x in ast.walk(n))
            if isinstance(n, ast.Assert) and not guard and (reads_clock(n.test) or any(
                    isinstance(x, ast.Name) and x.id in timed for x in ast.walk(n.test))):
                offenders.append(f"{path.name}:{n.lineno}")
    assert not offenders, offenders


# ----------------------------------------------------------------------------- code that exits
def test_a_factory_that_exits_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "exiter_t34.py").write_text("import sys\ndef make():\n    sys.exit(0)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run_cli(capsys, "workload", "--module", "exiter_t34:make")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "exiter_t34:make: the factory called sys.exit(0)" in err


def test_a_quality_function_that_exits_stops_the_study_with_one_line(tmp_path, capsys,
                                                                       monkeypatch):
    (tmp_path / "qexit_t34.py").write_text("import sys\ndef quality(arch):\n    sys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    study = {"name": "t_exit", "workloads": [{"model": "linear", "batch": 1}],
             "accelerator": {"template": "npu", "preset": "edge-32x32"},
             "search": {"hardware": {"rows": {"choices": [8, 16]}}},
             "objectives": ["latency_s", "quality"], "quality": {"python": "qexit_t34:quality"},
             "trials": 2}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                           "--no-progress")
    assert code == 2 and "module qexit_t34 called sys.exit(3)" in err
    assert err.strip().count("\n") == 0


def test_the_working_directory_never_shadows_an_installed_package(tmp_path, capsys,
                                                                    monkeypatch):
    """``--module`` searches the current directory after the installed packages: a
    ``json.py`` there is not what ``import json`` finds."""
    import sys
    (tmp_path / "json.py").write_text("raise RuntimeError('the planted json.py ran')\n")
    (tmp_path / "okmod_t34.py").write_text(
        "import torch\ndef make():\n    return torch.nn.Linear(4, 4), (torch.zeros(2, 4),)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    saved = sys.modules.pop("json")
    try:
        code, out, err = run_cli(capsys, "workload", "--module", "okmod_t34:make", "--json")
        assert code == 0, err
        import json as again
        assert again.__file__ != str(tmp_path / "json.py")
        assert sys.path.index(str(tmp_path)) > 0
    finally:
        sys.modules["json"] = saved
        sys.modules.pop("okmod_t34", None)


def test_a_study_never_runs_into_a_folder_holding_another_storages_db(tmp_path, capsys):
    """Issue 34: outputs from another storage beside a study.db would disagree with it (and
    `dse report DIR` reads the study.db): refused, nothing overwritten."""
    study = {"name": "t_mix", "workloads": [{"model": "linear", "batch": 1}],
             "accelerator": {"template": "npu", "preset": "edge-32x32"},
             "search": {"hardware": {"rows": {"choices": [8, 16]}}},
             "objectives": ["latency_s"], "trials": 2}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    out = tmp_path / "o"
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    before = (out / "trials.csv").read_bytes()
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(out), "--no-progress",
                           "--storage", f"sqlite:///{tmp_path / 'other.db'}")
    assert code == 2 and err.count("\n") == 1 and "without a study.db of another storage" in err
    assert (out / "trials.csv").read_bytes() == before and not (tmp_path / "other.db").exists()
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(out), "--no-progress",
                           "--storage", f"sqlite:///{out / 'study.db'}", "--trials", "3")
    assert code == 0, err


def test_a_full_disk_while_the_study_database_is_written_is_one_line(tmp_path, capsys,
                                                                      monkeypatch):
    """Issue 34: SQLite's "database or disk is full" mid-run (92-151 lines of traceback) is
    one line that says the stored trials are kept; a second run resumes to the count."""
    import sqlalchemy.exc
    from dse.study import driver
    study = {"name": "t_full", "workloads": [{"model": "linear", "batch": 1}],
             "accelerator": {"template": "npu", "preset": "edge-32x32"},
             "search": {"hardware": {"rows": {"choices": [8, 16, 32]}}},
             "objectives": ["latency_s"], "trials": 3}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    real = driver.run_worker
    calls = {"n": 0}

    def full_disk(job, on_trial=None, resolved=None):
        def counted(t):
            calls["n"] += 1
            if on_trial:
                on_trial(t)
            if calls["n"] == 1:
                raise sqlalchemy.exc.OperationalError("INSERT ...", {},
                                                      Exception("database or disk is full"))
        return real(job, on_trial=counted, resolved=resolved)

    monkeypatch.setattr(driver, "run_worker", full_disk)
    code, _, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                           "--no-progress")
    assert code == 2 and err.count("\n") == 1, err
    assert "database or disk is full" in err and "run again to resume" in err
    monkeypatch.setattr(driver, "run_worker", real)
    code, out, err = run_cli(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                             "--no-progress", "--json")
    assert code == 0, err
    assert json.loads(out)["states"]["COMPLETE"] == 3
