"""A template from another installed package (entry point group ``accel_dse.templates``) is
listed, simulated and searched like a built-in one. The package is docs/templates.md's
example, written into a temporary folder with the ``.dist-info`` pip would make."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelerators import registry
from cli_runner import run_cli

ROOT = Path(__file__).resolve().parent.parent


def example_code() -> str:
    text = (ROOT / "docs" / "templates.md").read_text()
    return re.search(r"`acme_roofline/__init__.py`:\n\n```python\n(.*?)```", text, re.S).group(1)


def install(site: Path, name: str, module: str, code: str, entry: str) -> None:
    """What ``pip install`` leaves: the module and a dist-info with the entry point."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(code)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[accel_dse.templates]\n{entry}\n")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install(site, "acme_roofline", "acme_roofline", example_code(),
            "roofline = acme_roofline:Roofline")
    install(site, "acme_broken", "acme_broken", "raise ImportError('missing dependency')\n",
            "broken = acme_broken:Nothing")
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    yield site
    monkeypatch.undo()
    registry.refresh()
    for mod in ("acme_roofline", "acme_broken"):
        sys.modules.pop(mod, None)


def test_listed_with_its_parameters(plugin, capsys):
    code, out, _ = run_cli(capsys, "accelerators", "--json")
    rows = {a["name"]: a for a in json.loads(out)}
    assert {"npu", "gpu", "roofline"} <= set(rows)
    roofline = rows["roofline"]
    assert roofline["default_preset"] == "server" and set(roofline["presets"]) == {"edge",
                                                                                   "server"}
    assert [p["name"] for p in roofline["params"]][:2] == ["peak_flops", "bandwidth_Bps"]
    assert "not loaded" not in json.dumps(roofline)
    code, out, _ = run_cli(capsys, "accelerators")
    assert "roofline — one compute unit" in out and "100 TFLOP/s" in out


def test_simulated_like_a_built_in(plugin, capsys):
    code, out, err = run_cli(capsys, "simulate", "linear", "--arch", "m=64", "-a",
                             "roofline:edge", "--hw", "bandwidth_Bps=1e11", "--json")
    assert code == 0, err
    r = json.loads(out)
    # one matmul: 2 m k n FLOPs at 4 TFLOP/s against its bytes at 100 GB/s, plus 1 us launch
    m, k, n = 64, 1024, 1024
    flops, nbytes = 2 * m * k * n, 2 * (m * k + k * n + m * n)
    assert r["latency_s"] == pytest.approx(1e-6 + max(flops / 4e12, nbytes / 1e11))
    assert r["area_mm2"] == pytest.approx(20.0)


def test_its_parameters_are_checked(plugin, capsys):
    code, _, err = run_cli(capsys, "simulate", "linear", "-a", "roofline", "--hw",
                           "peak_flops=-1")
    assert code == 2 and err.startswith("error: hw.peak_flops: expected a number in [1e+09,")
    code, _, err = run_cli(capsys, "simulate", "linear", "-a", "roofline", "--hw",
                           "bandwidth_Bps=1e15", "--hw", "peak_flops=1e9")
    assert code == 2 and "expected at most 100 B per FLOP" in err


def test_searched_by_a_study(plugin, tmp_path):
    from dse.study.driver import run_study
    from dse.study.loader import load_study_text
    spec = {"name": "t_plugin", "seed": 0, "workloads": [{"model": "linear", "batch": 1}],
            "accelerator": {"template": "roofline", "preset": "edge"},
            "search": {"hardware": {"peak_flops": [1e12, 1e14], "bandwidth_Bps": None}},
            "objectives": ["latency_s", "energy_j"], "trials": 6}
    r = run_study(load_study_text(yaml.safe_dump(spec)), out=tmp_path / "o", workers=2,
                  show_progress=False, write_report=False)
    assert r.outcomes["evaluated"] == 6 and r.outcomes["failed"] == 0


def test_a_broken_plugin_is_one_line(plugin, capsys):
    code, _, err = run_cli(capsys, "simulate", "linear", "-a", "broken")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "acme_broken:Nothing" in err and "missing dependency" in err
    code, out, _ = run_cli(capsys, "accelerators")
    assert code == 0 and "broken — not loaded" in out and "roofline — " in out


def test_discovered_by_a_fresh_process(plugin):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), str(ROOT)])}
    out = subprocess.run([sys.executable, "-m", "dse", "simulate", "linear", "--arch", "m=8",
                          "-a", "roofline", "--json"], capture_output=True, text=True, env=env,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["accelerator"]["template"] == "roofline"


def test_a_plugin_whose_init_raises_is_one_line(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    code = example_code().replace("class Roofline(Template):", "class Roofline(Template):\n"
                                  "    def __init__(self, *a, **k):\n"
                                  "        raise ZeroDivisionError('plugin bug')\n", 1)
    code = code.replace("name = \"roofline\"", "name = \"initbug\"")
    install(site, "acme_initbug", "acme_initbug", code, "initbug = acme_initbug:Roofline")
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    try:
        rc, _, err = run_cli(capsys, "simulate", "linear", "-a", "initbug")
    finally:
        monkeypatch.undo()
        registry.refresh()
        sys.modules.pop("acme_initbug", None)
    assert rc == 2 and err.count("\n") == 1
    assert "ZeroDivisionError: plugin bug" in err and "acme_initbug" in err
