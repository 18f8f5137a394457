"""Hostile inputs against every command and study section, as a hostile user would type them
(issue 34). The cases are data (``benchmarks/hostile_cases.yaml``); this runs each and prints
how many ended in each outcome.

    python benchmarks/hostile_inputs.py                 # every case (~1,100; minutes on 2 cores)
    python benchmarks/hostile_inputs.py --sample 60 --seed 0    # a fixed-seed sample (CI's)
    python benchmarks/hostile_inputs.py --group "parallel flags" --show all

Each case runs in its own working directory (its ``files`` written there first, named pipes
made), as ``dse ARGV``: forked from one process that imported the CLI and warmed the captures
(fast), or, for cases that plant code in the working directory (``fresh: true``), in a new
process started from the console script, as a user's shell would. The parent watches each
child: past ``--timeout`` seconds it is killed (a hang), past ``--memory-gib`` of resident
memory too (a blow-up).

Outcomes (the first that applies):

* ``hang``, ``memory``: killed as above;
* ``code_executed``: a file planted in the working directory ran (it writes a marker);
* ``secret_leaked``: the case's ``secret`` appears in stdout, stderr or any file the run wrote
  (its own input files aside);
* ``traceback``: a Python traceback in the output, or an exit code other than 0 and 2;
* ``multi_line``: exit 2 with more or less than one ``error:`` line on stderr;
* ``accepted_nonsense``: an ``expect: error`` case that exited 0;
* ``wrongly_refused``: an ``expect: ok`` case that exited 2;
* ``missing_fragment``: the error line lacks the case's ``contains`` text;
* ``clean_error`` / ``ok``: what was expected.

Exit status 1 when any case ends in an outcome other than the last two.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = ROOT / "benchmarks" / "hostile_cases.yaml"
GOOD = ("clean_error", "ok")
BAD = ("hang", "memory", "code_executed", "secret_leaked", "traceback", "multi_line",
       "accepted_nonsense", "wrongly_refused", "missing_fragment")
#: Marker a planted file writes when it runs (``{marker}`` in a case's files).
MARKER = "PLANTED_CODE_RAN"


@dataclass
class Case:
    """One run of ``dse argv`` in a directory holding ``files``."""

    id: str
    group: str
    argv: list[str]
    expect: str = "error"                 # error | ok | any
    contains: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    fresh: bool = False
    secret: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    outcome: str
    code: int | None
    seconds: float
    peak_rss_mib: float
    stderr: str


# ----------------------------------------------------------------------------- cases
def load_cases(path: Path = CASES) -> list[Case]:
    """Every case of the file, groups expanded (``values`` one per value; ``vars`` the cross
    product; ``{name}`` placeholders filled in argv, files and contains)."""
    import yaml
    data = yaml.safe_load(path.read_text())
    cases: list[Case] = []
    for g in data["groups"]:
        name = g["name"]
        if "vars" in g:
            keys = list(g["vars"])
            combos = [dict(zip(keys, vals)) for vals in itertools.product(
                *(g["vars"][k] for k in keys))]
        elif "values" in g:
            combos = [{"v": v} for v in g["values"]]
        else:
            combos = [{}]
        for i, combo in enumerate(combos):
            names = {**{k: str(v) for k, v in combo.items()}, "marker": MARKER}

            def fill(x: Any) -> Any:
                if isinstance(x, str):     # {name} of this case only: JSON / YAML braces stay
                    return re.sub(r"\{(\w+)\}", lambda m: names.get(m.group(1), m.group(0)), x)
                if isinstance(x, list):
                    return [fill(v) for v in x]
                if isinstance(x, dict):
                    return {fill(k): fill(v) for k, v in x.items()}
                return x
            cases.append(Case(id=f"{name}[{i}]", group=name, argv=[str(a) for a in fill(g["argv"])],
                              expect=g.get("expect", "error"), contains=fill(g.get("contains")),
                              files=fill(g.get("files") or {}), fresh=bool(g.get("fresh")),
                              secret=fill(g.get("secret")), env=fill(g.get("env") or {})))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique (group names)"
    return cases


def _write_files(case: Case, where: Path) -> None:
    for name, content in case.files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "!fifo":
            os.mkfifo(path)
        elif content == "!dir":
            path.mkdir()
        elif content == "!dir777":          # a directory anyone may write
            path.mkdir()
            os.chmod(path, 0o777)
        elif isinstance(content, str) and content.startswith("!bytes "):
            path.write_bytes(bytes.fromhex(content[len("!bytes "):]))
        elif isinstance(content, str) and content.startswith("!big "):
            with open(path, "wb") as f:
                f.truncate(int(float(content[len("!big "):])))
        else:
            path.write_text(content)


# ----------------------------------------------------------------------------- running
def warm() -> None:
    """Import the CLI and capture the small models most cases use, so forked children start
    warm (their own imports and captures would dominate otherwise)."""
    import dse.cli  # noqa: F401
    from dse import api
    for model, kw in (("linear", {}), ("gpt2", {"phase": "decode", "context": 16,
                                                "arch": {"n_layer": 2}}),
                      ("gpt2", {"phase": "decode", "context": 1}),
                      ("gpt2", {"phase": "prefill", "seq": 64})):
        try:
            api.workload(model, **kw)
        except Exception:
            pass


def _child(case: Case, where: Path, out: Path, err: Path) -> None:
    """In the forked child: become ``dse argv`` in ``where``."""
    os.chdir(where)
    os.environ.update(case.env)
    fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fd_err = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd_out, 1)
    os.dup2(fd_err, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    code = 1
    try:
        from dse.cli import main
        main(case.argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _start(case: Case, where: Path, out: Path, err: Path, env: dict[str, str]) -> int:
    if case.fresh:
        exe = shutil.which("dse", path=str(Path(sys.executable).parent)) or "dse"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen([exe, *case.argv], cwd=where, stdout=fo, stderr=fe,
                                    env={**os.environ, **env, **case.env},
                                    start_new_session=True)
        return proc.pid
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.environ.update(env)
        _child(case, where, out, err)
    return pid


def run_cases(cases: list[Case], timeout_s: float = 60.0, memory_gib: float = 6.0,
              jobs: int = 2, work: Path | None = None, progress: bool = False) -> list[Outcome]:
    """Run ``cases``, ``jobs`` at a time, and classify each (see the module docstring)."""
    base = Path(tempfile.mkdtemp(prefix="hostile-", dir=work))
    cache = base / "cache"
    cache.mkdir(mode=0o700)
    env = {"DSE_CACHE_DIR": str(cache)}     # the children's (this process's stays as it is)
    warm()
    pending = list(enumerate(cases))
    running: dict[int, tuple[int, Case, Path, float, float]] = {}
    results: dict[int, Outcome] = {}
    limit_mib = memory_gib * 1024
    try:
        while pending or running:
            while pending and len(running) < jobs:
                i, case = pending.pop(0)
                where = base / f"case{i}"
                where.mkdir()
                _write_files(case, where)
                pid = _start(case, where, base / f"case{i}.out", base / f"case{i}.err", env)
                running[pid] = (i, case, where, time.monotonic(), 0.0)
            time.sleep(0.02)
            for pid in list(running):
                i, case, where, t0, peak = running[pid]
                peak = max(peak, _rss_mib(pid))
                running[pid] = (i, case, where, t0, peak)
                killed = None
                if time.monotonic() - t0 > timeout_s:
                    killed = "hang"
                elif peak > limit_mib:
                    killed = "memory"
                if killed:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                done, status = os.waitpid(pid, 0 if killed else os.WNOHANG)
                if done == 0:
                    continue
                del running[pid]
                code = os.waitstatus_to_exitcode(status)
                results[i] = classify(case, where, base / f"case{i}.out", base / f"case{i}.err",
                                      code, killed, time.monotonic() - t0, peak)
                if progress:
                    r = results[i]
                    mark = " " if r.outcome in GOOD else "!"
                    print(f"{mark} {r.outcome:<18}{r.seconds:6.1f} s  {case.id}", flush=True)
                shutil.rmtree(where, ignore_errors=True)
    finally:
        for pid in running:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        shutil.rmtree(base, ignore_errors=True)
    return [results[i] for i in sorted(results)]


def classify(case: Case, where: Path, out: Path, err: Path, code: int, killed: str | None,
             seconds: float, peak: float) -> Outcome:
    stdout = out.read_text(errors="replace") if out.exists() else ""
    stderr = err.read_text(errors="replace") if err.exists() else ""

    def result(what: str) -> Outcome:
        return Outcome(case, what, code, seconds, peak, stderr[-2000:])

    if killed:
        return result(killed)
    if (where / MARKER).exists():
        return result("code_executed")
    if case.secret and (case.secret in stdout or case.secret in stderr or _in_files(
            where, case.secret, set(case.files))):
        return result("secret_leaked")
    if "Traceback (most recent call last)" in stdout + stderr or code not in (0, 2):
        return result("memory" if "MemoryError" in stderr else "traceback")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if code == 2 and not (len(lines) == 1 and lines[0].startswith("error: ")):
        return result("multi_line")
    if code == 0 and case.expect == "error":
        return result("accepted_nonsense")
    if code == 2 and case.expect == "ok":
        return result("wrongly_refused")
    if code == 2 and case.contains and case.contains not in lines[0]:
        return result("missing_fragment")
    return result("clean_error" if code == 2 else "ok")


def _in_files(where: Path, secret: str, inputs: set[str]) -> bool:
    """Whether a file the run wrote under ``where`` (not one of the case's ``inputs``) holds
    ``secret``."""
    needle = secret.encode()
    for path in where.rglob("*"):
        if str(path.relative_to(where)) in inputs:
            continue
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 * 2**20:
                if needle in path.read_bytes():
                    return True
        except OSError:
            continue
    return False


# ----------------------------------------------------------------------------- report
def summary(results: list[Outcome]) -> dict[str, Any]:
    counts = collections.Counter(r.outcome for r in results)
    by_command: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        cmd = " ".join(r.case.argv[:2]) if r.case.argv[:1] == ["study"] else (
            r.case.argv[0] if r.case.argv else "(none)")
        by_command[cmd][r.outcome] += 1
    return {"cases": len(results), "outcomes": dict(counts),
            "bad": sum(counts[o] for o in BAD),
            "by_command": {k: dict(v) for k, v in sorted(by_command.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(CASES))
    ap.add_argument("--sample", type=int, help="run a random sample of this many cases")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample")
    ap.add_argument("--group", action="append", help="only these groups (repeatable)")
    ap.add_argument("--timeout", type=float, default=60.0, help="a hang past this, s")
    ap.add_argument("--memory-gib", type=float, default=6.0, help="a blow-up past this RSS")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", choices=("bad", "all", "none"), default="bad")
    ap.add_argument("--json", help="write the summary and every bad case here")
    args = ap.parse_args(argv)
    cases = load_cases(Path(args.cases))
    if args.group:
        cases = [c for c in cases if c.group in args.group]
    if args.sample:
        cases = random.Random(args.seed).sample(cases, min(args.sample, len(cases)))
    t0 = time.monotonic()
    results = run_cases(cases, args.timeout, args.memory_gib, args.jobs,
                        progress=args.show == "all")
    s = summary(results)
    print(f"{s['cases']} cases in {time.monotonic() - t0:.0f} s")
    print(f"{'outcome':<20}{'cases':>7}")
    for o in GOOD + BAD:
        print(f"{o:<20}{s['outcomes'].get(o, 0):>7}")
    print(f"\n{'command':<18}" + "".join(f"{o[:10]:>11}" for o in ("clean_error", "ok", "bad")))
    for cmd, c in s["by_command"].items():
        bad = sum(c.get(o, 0) for o in BAD)
        print(f"{cmd:<18}{c.get('clean_error', 0):>11}{c.get('ok', 0):>11}{bad:>11}")
    bad = [r for r in results if r.outcome in BAD]
    if args.show != "none":
        for r in bad:
            print(f"\n{r.outcome}: {r.case.id}: dse {' '.join(r.case.argv)[:300]}\n"
                  f"  exit {r.code}; stderr: {r.stderr.strip()[-600:]}")
    if args.json:
        Path(args.json).write_text(json.dumps({**s, "bad_cases": [
            {"id": r.case.id, "outcome": r.outcome, "argv": r.case.argv, "code": r.code,
             "stderr": r.stderr} for r in bad]}, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
