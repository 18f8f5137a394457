"""The command line: JSON outputs and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from cli_runner import run_cli


def test_models_json_lists_the_zoo(capsys):
    code, out, _ = run_cli(capsys, "models", "--json")
    assert code == 0
    names = {m["name"] for m in json.loads(out)}
    assert {"gpt2", "llama2-7b", "resnet50", "nerf", "linear"} <= names


def test_workload_json_has_the_documented_keys(capsys):
    code, out, _ = run_cli(capsys, "workload", "gpt2", "--phase", "decode", "--context", "64",
                           "--arch", "n_layer=2", "--json")
    assert code == 0
    s = json.loads(out)
    for key in ("model", "phase", "dtype", "ops", "params", "flops", "flops_by_kind", "bytes",
                "unknown_ops"):
        assert key in s
    assert s["dtype"] == "bf16" and s["phase"] == "decode"
    assert set(s["bytes"]) >= {"weights", "activations", "kv_cache"}
    assert s["bytes"]["weights"] == s["params"] * 2
    assert s["bytes"]["kv_cache"] > 0
    assert s["flops_by_kind"]["matmul"] > 0 and s["flops_by_kind"]["attention"] > 0


def test_workload_summary_table(capsys):
    code, out, _ = run_cli(capsys, "workload", "linear", "--arch", "m=8")
    assert code == 0 and "matmul" in out


@pytest.mark.parametrize("argv, fragment", [
    (["workload", "no-such-model"], "model: expected one of"),
    (["workload", "gpt2", "--arch", "n_leyer=2"], "arch.n_leyer"),
    (["workload", "gpt2", "--arch", "n_layer=0"], "arch.n_layer"),
    (["workload", "gpt2", "--batch", "0"], "batch"),
    (["workload", "gpt2", "--phase", "training"], "phase"),
    (["workload", "resnet50", "--phase", "decode"], "phase"),
    (["workload", "gpt2", "--dtype", "fp64"], "dtype"),
    (["workload", "gpt2", "--arch", "novalue"], "--arch"),
    (["workload", "--hf-config", "/nonexistent/config.json"], "--hf-config"),
    (["workload", "gpt2", "--hf-config", "/nonexistent/config.json"], "not both MODEL and --hf-config"),
    (["workload", "gpt2", "--no-such-flag"], "no-such-flag"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_unreadable_hf_config(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "workload", "--hf-config", str(bad))
    assert code == 2 and "--hf-config" in err and len(err.strip().splitlines()) == 1


def test_console_script_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "dse", "models", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)
