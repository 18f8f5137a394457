"""Each shipped study runs end to end with a few trials (slow: real models are captured)."""

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
