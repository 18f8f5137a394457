"""`dse systems`, `dse collective`, `dse simulate --system`: output and one-line errors."""

import json

import pytest

from tests.cli_runner import run_cli

ARCH = ["--arch", "n_layer=2", "--arch", "d_model=64", "--arch", "n_head=8",
        "--arch", "n_kv_head=4", "--arch", "d_ff=128", "--arch", "vocab_size=256",
        "--arch", "max_seq=64"]


def test_systems_lists_the_presets(capsys):
    code, out, _ = run_cli(capsys, "systems", "--json")
    rows = json.loads(out)
    assert code == 0
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "tpu-v4-slice", "pcie-4x", "npu-ring"} <= {
        r["name"] for r in rows}
    assert all(r["cost_usd"] > 0 and r["tdp_w"] > 0 for r in rows)
    code, out, _ = run_cli(capsys, "systems")
    assert code == 0 and "hgx-h200" in out and "topology" in out


def test_collective_prints_time_algorithm_and_bus_bandwidth(capsys):
    code, out, _ = run_cli(capsys, "collective", "all_reduce", "--bytes", "256MiB",
                           "--system", "hgx-h200", "--devices", "2", "--json")
    d = json.loads(out)
    assert code == 0 and d["devices"] == 2 and d["bytes"] == 256 * 2**20
    assert d["algorithm"] == "ring" and d["time_s"] > 0
    assert d["bus_bandwidth_Bps"] == pytest.approx(d["bytes"] / d["time_s"])   # p = 2
    code, out, _ = run_cli(capsys, "collective", "all_to_all", "--bytes", "1 MiB")
    assert code == 0 and "all_to_all" in out and "bandwidth" in out


def test_simulate_on_a_system(capsys):
    code, out, _ = run_cli(capsys, "simulate", "llama2-7b", "--system", "hgx-h200",
                           "--devices", "2", "--tp", "2", "--phase", "decode", "--batch", "8",
                           "--context", "16", *ARCH, "--json")
    d = json.loads(out)
    assert code == 0 and d["devices"] == 2 and len(d["per_device"]) == 2
    assert d["communication_s"] > 0 and d["layout"]["tp"] == 2
    assert d["link_utilisation"]
    code, out, _ = run_cli(capsys, "simulate", "llama2-7b", "--system", "npu-ring", "--tp", "4",
                           "--sp", "--phase", "decode", "--batch", "8", "--context", "16", *ARCH)
    assert code == 0 and "communication" in out and "tp 4" in out


@pytest.mark.parametrize("args, words", [
    (["--system", "hgx-h200", "--tp", "3"], "does not divide the 8 attention heads"),
    (["--system", "hgx-h300", "--tp", "2"], "system: expected one of"),
    (["--system", "hgx-h200", "--tp", "2", "--devices", "4"], "needs 2 devices"),
    (["--system", "hgx-h200", "--tp", "0"], "parallel.tp"),
    (["--system", "hgx-h200", "--sys", "topology=cube"], "sys.topology"),
    (["--system", "hgx-h200", "--ep", "2"], "mixture-of-experts"),
])
def test_bad_system_input_is_one_line_and_exit_2(capsys, args, words):
    code, out, err = run_cli(capsys, "simulate", "llama2-7b", "--phase", "decode", "--batch",
                             "8", "--context", "16", *ARCH, *args)
    assert code == 2 and words in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("args, words", [
    (["all_reduce", "--bytes", "lots"], "--bytes"),
    (["allreduce", "--bytes", "1MiB"], "collective"),
    (["all_reduce", "--bytes", "1MiB", "--algorithm", "magic"], "algorithm"),
])
def test_bad_collective_input(capsys, args, words):
    code, _, err = run_cli(capsys, "collective", *args)
    assert code == 2 and words in err and err.count("\n") == 1
