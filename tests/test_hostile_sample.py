"""A fixed-seed sample of benchmarks/hostile_inputs.py's cases, and the cases issue 34 lists
(the whole set, ~1,000 cases, runs as the benchmark: docs/performance.md)."""

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_inputs import BAD, load_cases, run_cases  # noqa: E402

#: Cases issue 34 names, by the argv they run (each must be in the data, and end cleanly).
ISSUE_CASES = [
    ["simulate", "gpt2", "--phase", "decode", "--context", "16", "--arch", "n_layer=2", "--tp", "0"],
    ["serve", "gpt2", "--requests", "3", "--rate", "1", "--arch", "n_layer=2", "--devices", "0"],
    ["generate", "gpt2", "--input-len", "16", "--output-len", "4", "--arch", "n_layer=2", "--pp", "0"],
    ["simulate", "gpt2", "--arch", "n_layer=2", "--pp", "13"],
    ["generate", "gpt2", "--arch", "n_layer=2", "--input-len", "1000", "--output-len", "100"],
    ["serve", "gpt2", "--arch", "n_layer=2", "--trace", "long.csv"],
    ["collective", "all_reduce", "--bytes", "0", "--devices", "1"],
    ["workload", "gpt2", "--module", "ok_i34:make", "--json"],
    ["workload", "--hf-config", "experts0.json"],
    ["workload", "--hf-config", "arch1.json"],
    ["simulate", "linear", "-a", "gpu:h100", "--hw", "sms=200", "--hw", "sms_on_die=100"],
    ["simulate", "linear", "-a", "gpu:h100", "--hw", "memory_devices_on_die=1"],
    ["serve", "gpt2", "--arch", "n_layer=2", "--requests", "3", "--trace", "dup.csv"],
    ["simulate", "gpt2", "-a", "", "--arch", "n_layer=2"],
    ["simulate", "gpt2", "-a", "npu:", "--arch", "n_layer=2"],
    ["workload", "gpt2", "--arch", "n_layer=1e2"],
    ["workload", "--hf-config", "pipe"],
    ["workload", "--module", "exiter_i34:make"],
    ["serve", "gpt2", "--arch", "n_layer=2", "--rate", "1", "--requests", "3", "--seed", "-1"],
    ["study", "run", "s.yaml", "--out", "o"],
]


def test_every_case_the_issue_lists_is_in_the_data():
    argvs = [c.argv for c in load_cases()]
    missing = [a for a in ISSUE_CASES if a not in argvs]
    assert not missing, missing
    assert len(argvs) >= 1000


def test_a_fixed_sample_of_hostile_inputs_ends_cleanly():
    cases = load_cases()
    sample = random.Random(0).sample([c for c in cases if not c.fresh], 36)
    sample += [c for c in cases if c.argv in ISSUE_CASES[:6]]
    results = run_cases(sample, timeout_s=120, jobs=2)
    bad = [(r.case.id, r.outcome, r.case.argv, r.stderr[-400:]) for r in results
           if r.outcome in BAD]
    assert not bad, bad
