"""Each shipped study runs end to end with a few trials, and every shipped study finds a
feasible design within its default trial count (slow: real models are captured)."""

import csv
from pathlib import Path

import pytest

from dse.study.driver import run_study
from dse.study.loader import load_study

STUDIES = Path(__file__).resolve().parent.parent / "studies"
MINE = ["npu_resnet50", "gpu_vs_npu_llama2", "codesign_gpt2_npu", "nasaic_multitask",
        "nasaic_published"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MINE)
def test_shipped_study_runs_with_few_trials(tmp_path, name):
    s = load_study(STUDIES / f"{name}.yaml")
    r = run_study(s, trials=3, out=tmp_path / name, show_progress=False, write_report=False)
    assert sum(r.states.values()) == 3
    assert r.states["FAIL"] == 0
    with open(r.trials_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    done = [x for x in rows if x["state"] == "COMPLETE"]
    assert done, [x["reason"] for x in rows]
    for o in s.objectives:
        assert all(float(x[o.metric]) > 0 for x in done)


ALL = sorted(p.stem for p in STUDIES.glob("*.yaml"))
#: Studies whose trials take minutes (a quality proxy trained per architecture, a FLUX-size
#: graph per attention pattern, a 1,000-request serving run per design, 48 trials before
#: the first feasible one): checked when DSE_ALL_STUDIES=1, and by
#: benchmarks/shipped_studies.py (its measured table is in docs/study.md).
HEAVY = {"gna_dit", "ngpc_nerf", "serve_llama_slo", "nasaic_multitask", "nasaic_published",
         "codesign_gpt2_npu"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_shipped_study_answers(tmp_path, name):
    """Issue 27: a ready study that finds no feasible design answers nothing. Each study, at
    its own seed, reaches a feasible design within its default trial count (run in chunks of
    4, 16, 48, then the default, stopping at the first feasible: benchmarks/shipped_studies.py,
    whose table docs/study.md gives)."""
    import os
    import sys
    if name in HEAVY and os.environ.get("DSE_ALL_STUDIES") != "1":
        pytest.skip(f"{name}: minutes per trial; DSE_ALL_STUDIES=1 runs it "
                    "(benchmarks/shipped_studies.py measures it)")
    sys.path.insert(0, str(STUDIES.parent / "benchmarks"))
    from shipped_studies import until_feasible
    row = until_feasible(name, tmp_path / name)
    assert row["feasible"] >= 1, row
