"""Never a traceback, never a hang: each input below gets one line on stderr naming the field,
the value (at most 80 characters) and what is allowed, and exit code 2 (issue 20)."""

import json
import math
import os

import optuna
import pytest
import yaml

from cli_runner import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY_STUDY = {
    "name": "t_bad",
    "seed": 1,
    "workloads": [{"model": "linear", "batch": 1}],
    "accelerator": {"template": "npu", "preset": "edge-32x32"},
    "search": {"hardware": {"rows": {"choices": [8, 16]}},
               "architecture": {"m": {"choices": [8, 16]}}},
    "objectives": ["latency_s", "energy_j"],
    "trials": 2,
}


def one_line_error(capsys, *argv, expect=()):
    """Run ``dse *argv``; assert exit 2 and one ``error:`` line holding each of ``expect``."""
    code, out, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, (code, out[-500:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert "Traceback" not in err
    for fragment in expect:
        assert fragment in lines[0], lines[0]
    value = lines[0].rsplit(", got ", 1)[-1] if ", got " in lines[0] else ""
    assert len(value) <= 80, value
    return lines[0]


def study_file(tmp_path, name="s.yaml", **changes):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**TINY_STUDY, **changes}, sort_keys=False))
    return path


# ----------------------------------------------------------------------------- storage URLs
def test_unreachable_postgres_port_masks_the_password(tmp_path, capsys):
    line = one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--out",
                          str(tmp_path / "o"), "--storage",
                          "postgresql://me:s3cret@127.0.0.1:1/db",
                          expect=("--storage", "expected a storage that opens", ":***@"))
    assert "s3cret" not in line
    assert not (tmp_path / "o" / "study.db").exists()


def test_bad_sslmode(tmp_path, capsys):
    one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--out",
                   str(tmp_path / "o"), "--storage",
                   "postgresql://me@127.0.0.1:1/db?sslmode=bogus",
                   expect=("--storage", "sslmode"))


def test_missing_postgres_database(tmp_path, capsys):
    url = os.environ.get("DSE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("no PostgreSQL server (scripts/test-services.sh starts one)")
    missing = url.rsplit("/", 1)[0] + "/no_such_database_i20"
    one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--out",
                   str(tmp_path / "o"), "--storage", missing,
                   expect=("--storage", "does not exist"))


def test_a_text_file_as_sqlite(tmp_path, capsys):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n")
    one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--storage",
                   f"sqlite:///{text}", expect=("--storage", "file is not a database"))
    assert text.read_text() == "not a database\n"


def test_a_directory_as_sqlite(tmp_path, capsys):
    one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--storage",
                   f"sqlite:///{tmp_path}", expect=("--storage", "not a directory"))


def test_a_text_file_as_the_output_directory_database(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "study.db").write_text("garbage")
    one_line_error(capsys, "study", "run", str(study_file(tmp_path)), "--out", str(out),
                   expect=("--out", "file is not a database"))


def test_report_of_a_postgres_url_is_not_an_import_error(capsys):
    line = one_line_error(capsys, "report", "--storage", "postgresql://me:pw@127.0.0.1:1/db",
                          expect=("--storage", "Connection refused"))
    assert "ImportError" not in line and ":pw@" not in line


def test_report_of_a_folder_of_a_study_stored_elsewhere_says_pass_storage(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "trials.csv").write_text("number\n")
    (out / "storage.txt").write_text("postgresql+psycopg2://me:***@db/x\n")
    one_line_error(capsys, "report", str(out), expect=("pass --storage", "postgresql"))


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("argv, fragment", [
    (["--batch", "9223372036854775808"], "batch: expected a positive int up to"),
    (["--batch", "99999999999999999999999"], "batch: expected a positive int up to"),
    (["--phase", "prefill", "--seq", "99999999999999999999999"], "seq: expected"),
    (["--phase", "decode", "--context", "9223372036854775808"], "context: expected"),
    (["--arch", "n_layer=1000000"], "arch.n_layer: expected an int in [1, 256]"),
    (["--arch", "d_model=99999999999999999999"], "arch.d_model: expected an int in"),
])
def test_sizes_are_bounded(capsys, argv, fragment):
    one_line_error(capsys, "workload", "gpt2", *argv, expect=(fragment,))


def test_hash_table_size_is_bounded(capsys):
    one_line_error(capsys, "workload", "nerf", "--arch", "log2_table_size=64",
                   expect=("arch.log2_table_size: expected an int in [1, 32]",))


def test_sizes_torch_cannot_build_are_one_line(capsys):
    # each size is allowed, their product overflows torch's element counts
    one_line_error(capsys, "workload", "gpt2", "--phase", "prefill", "--batch", "2147483648",
                   "--arch", "d_model=1048576", "--arch", "max_seq=1048576", "--seq", "1048576",
                   "--arch", "n_head=1", expect=("overflow",))


# ----------------------------------------------------------------------------- full disk
@pytest.mark.parametrize("flag", ["--report", "--trace"])
def test_simulate_outputs_on_a_full_disk(capsys, flag):
    one_line_error(capsys, "simulate", "linear", "--arch", "m=8", flag, "/dev/full",
                   expect=(flag, "No space left on device"))


def test_report_on_a_full_disk(tmp_path, capsys):
    from dse.study.driver import run_study
    from dse.study.loader import load_study

    run_study(load_study(study_file(tmp_path)), out=tmp_path / "o", show_progress=False,
              write_report=False)
    one_line_error(capsys, "report", str(tmp_path / "o"), "-o", "/dev/full",
                   expect=("--out", "No space left on device"))
    assert os.stat("/dev/full").st_rdev  # still the device


# ----------------------------------------------------------------------------- foreign storages
def _foreign_study(tmp_path, attrs, study_attrs=None):
    out = tmp_path / "foreign"
    out.mkdir()
    url = f"sqlite:///{out}/study.db"
    study = optuna.create_study(study_name="foreign", storage=url,
                                directions=["minimize", "minimize"])
    for k, v in (study_attrs or {}).items():
        study.set_user_attr(k, v)
    for i in range(4):
        t = study.ask()
        x = t.suggest_float("x", 0.0, 1.0)
        for k, v in attrs.items():
            t.set_user_attr(k, v)
        study.tell(t, [x, 1.0 - x + i])
    return out


@pytest.mark.parametrize("attrs, study_attrs", [
    ({"design": [1, 2, 3]}, None),
    ({"design": "not json {"}, None),
    ({"design": {"designs": [1], "arch": "x"}, "metrics": "fast"}, {"dse_spec": [1, 2]}),
    ({"metrics": {"latency_s": "slow", "energy_j": None}}, {"objectives": [1, {"a": 2}]}),
    ({"design": {"accelerator": 5, "workloads": "gpt2"}},
     {"constraints": [{"metric": "x", "max": "high"}, 7, "y <= z"],
      "dse_spec": {"workloads": [{"model": 3}], "fidelity": []}}),
])
def test_foreign_optuna_storages_with_odd_attributes(tmp_path, capsys, attrs, study_attrs):
    out = _foreign_study(tmp_path, attrs, study_attrs)
    code, stdout, err = run_cli(capsys, "report", str(out), "-o", str(tmp_path / "r.html"))
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        assert (tmp_path / "r.html").stat().st_size > 0
    else:
        assert len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- Hugging Face
GPT2_TINY = json.load(open(os.path.join(ROOT, "tests", "data", "hf", "gpt2_tiny.json")))


@pytest.mark.parametrize("config, fragment", [
    ({**GPT2_TINY, "n_layer": "two"}, "n_layer"),
    ({**GPT2_TINY, "n_embd": [64]}, "n_embd"),
    ('{"model_type": "gpt2", "n_layer": 2, "layer_norm_epsilon": NaN}',
     "hf_config.layer_norm_epsilon: expected a finite number"),
    ('{"model_type": "gpt2", "n_embd": Infinity}', "hf_config.n_embd: expected a finite"),
    ({**GPT2_TINY, "torch_dtype": "float99"}, "hf_config.torch_dtype: expected a torch dtype"),
    ('{"model_type": "gpt2", "x": ' + "[" * 100000 + "]" * 100000 + "}", "nested at most"),
    ('{"model_type": "gpt2", "x": ' + "[" * 200 + "]" * 200 + "}", "nested at most"),
    ({**GPT2_TINY, "n_layer": 1000000}, "hf_config.n_layer: expected an int in [1, 256]"),
    ({**GPT2_TINY, "n_layer": -3}, "hf_config.n_layer: expected an int"),
    ({**GPT2_TINY, "model_type": 5}, "expected a config object with a model_type"),
    ({**GPT2_TINY, "model_type": "no_such_model"}, "expected a model type transformers"),
])
def test_bad_hugging_face_configs(tmp_path, capsys, config, fragment):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    one_line_error(capsys, "workload", "--hf-config", str(path), expect=(fragment,))


def test_transformers_warnings_are_not_printed(capsys):
    pytest.importorskip("transformers")
    # gpt2_tiny's bos/eos token ids lie outside its vocabulary: transformers warns about it
    code, out, err = run_cli(capsys, "workload", "--hf-config",
                             os.path.join(ROOT, "tests", "data", "hf", "gpt2_tiny.json"),
                             "--json")
    assert code == 0 and json.loads(out)["model"] == "hf:gpt2"
    assert err == ""


# ----------------------------------------------------------------------------- YAML
def test_billion_laughs_is_refused_without_expanding(tmp_path, capsys):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join(["*" + prev] * 9) + "]")
        prev = name
    lines.append("name: *i")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    one_line_error(capsys, "study", "validate", str(path),
                   expect=("expected at most 100,000 values once YAML aliases",))


def test_aliases_of_a_normal_size_still_work(tmp_path, capsys):
    path = tmp_path / "alias.yaml"
    path.write_text("name: t_alias\nworkloads: [{model: linear, batch: &one 1}]\n"
                    "accelerator: {template: npu, preset: edge-32x32}\n"
                    "search: {architecture: {m: {choices: [*one, 16]}}}\n"
                    "objectives: [latency_s]\n")
    code, out, err = run_cli(capsys, "study", "validate", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["dimensions"][0]["choices"] == [1, 16]


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_a_pipe_as_the_study_file(tmp_path, capsys, special):
    if special == "fifo":
        special = str(tmp_path / "pipe.yaml")
        os.mkfifo(special)
    one_line_error(capsys, "study", "validate", special,
                   expect=("study file", "expected a regular YAML file"))


def test_a_huge_study_file(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * 2**21 + "\n")
    one_line_error(capsys, "study", "validate", str(path), expect=("at most 1,048,576 bytes",))


def test_a_grid_larger_than_memory_is_refused(tmp_path, capsys):
    path = study_file(tmp_path, sampler={"name": "grid", "grid_points": 1000},
                      search={"hardware": {"clock_hz": None, "dram_bandwidth_Bps": None,
                                           "ifmap_sram_kb": None, "rows": None}})
    one_line_error(capsys, "study", "validate", str(path),
                   expect=("sampler.grid_points: expected a grid of at most 100,000 points",))


def test_a_wide_int_range_makes_no_long_grid(tmp_path, capsys):
    path = study_file(tmp_path, sampler={"name": "grid", "grid_points": 3},
                      search={"architecture": {"m": {"low": 1, "high": 10**6}}})
    code, out, err = run_cli(capsys, "study", "validate", str(path), "--json")
    assert code == 0, err


# ----------------------------------------------------------------------------- accepted nonsense
@pytest.mark.parametrize("changes, fragment", [
    ({"trials": True}, "trials: expected an int, not true/false"),
    ({"trials": "5"}, 'trials: expected an int, got "5"'),
    ({"workloads": [{"model": "linear", "batch": "1:30"}]}, 'workloads[0].batch: expected an int'),
    ({"search": {"architecture": {"m": {"choices": [10**30, 8]}}}},
     "search.architecture.m.choices[0]: expected an int in [1, 268435456]"),
    ({"workloads": [{"model": "gpt2", "phase": "decode", "seq": 64}]},
     "workloads[0].seq: expected no seq in decode"),
    ({"workloads": [{"model": "gpt2", "phase": "prefill", "context": 64}]},
     "workloads[0].context: expected no context in prefill"),
    ({"quality": {"python": "os; rm -rf"}, "objectives": ["latency_s", "quality"]},
     "quality.python: expected 'package.module:function'"),
])
def test_study_file_nonsense(tmp_path, capsys, changes, fragment):
    one_line_error(capsys, "study", "validate", str(study_file(tmp_path, **changes)),
                   expect=(fragment,))


def test_sexagesimal_and_octal_are_not_numbers(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    text = yaml.safe_dump(TINY_STUDY, sort_keys=False).replace("batch: 1", "batch: 1:30")
    path.write_text(text)
    one_line_error(capsys, "study", "validate", str(path),
                   expect=('workloads[0].batch: expected an int, got "1:30"',))
    path.write_text(text.replace("batch: 1:30", "batch: 010"))
    one_line_error(capsys, "study", "validate", str(path), expect=('got "010"',))


@pytest.mark.parametrize("argv, fragment", [
    (["gpt2", "--phase", "decode", "--seq", "64"], "seq: expected no seq in decode"),
    (["gpt2", "--phase", "prefill", "--context", "64"], "context: expected no context in prefill"),
    (["resnet18", "--seq", "64"], "seq: expected no seq: resnet18"),
    (["resnet18", "--context", "64"], "context: expected no context in forward"),
])
def test_sizes_a_phase_ignores_are_refused(capsys, argv, fragment):
    one_line_error(capsys, "workload", *argv, expect=(fragment,))


@pytest.mark.parametrize("value", [math.nan, -0.5, 0.0, "fast"])
def test_gpu_calibration_with_bad_efficiencies(tmp_path, capsys, value):
    cal = json.load(open(os.path.join(ROOT, "accelerators", "calibration", "h200.json")))
    cal["efficiency"]["tensor_efficiency"] = value
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    one_line_error(capsys, "simulate", "linear", "--arch", "m=8", "-a", "gpu", "--hw",
                   f"calibration={path}",
                   expect=("hw.calibration", "efficiency.tensor_efficiency"))


# ----------------------------------------------------------------------------- messages
def test_no_a_int(capsys):
    line = one_line_error(capsys, "workload", "gpt2", "--arch", "n_layer=abc")
    assert "expected an int" in line and "a int" not in line


def test_context_error_names_the_value_typed(capsys):
    one_line_error(capsys, "workload", "llama2-7b", "--phase", "decode", "--context", "4096",
                   expect=("context: expected at most 4095", "got 4096"))


def test_quality_python_error_is_not_the_name_rule(tmp_path, capsys):
    line = one_line_error(capsys, "study", "validate", str(study_file(
        tmp_path, quality={"python": "not a function"}, objectives=["latency_s", "quality"])))
    assert "letters, digits" not in line and "package.module:function" in line


def test_an_unimportable_quality_function_fails_the_run_before_anything_is_written(
        tmp_path, capsys):
    path = study_file(tmp_path, quality={"python": "no_such_module_i20:f"},
                      objectives=["latency_s", "quality"])
    code, _, _ = run_cli(capsys, "study", "validate", str(path))
    assert code == 0  # validate imports nothing
    one_line_error(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                   expect=("quality.python", "cannot import no_such_module_i20"))
    assert not (tmp_path / "o").exists()



# ----------------------------------------------------------------------------- issue 34: files
@pytest.mark.parametrize("argv, field", [
    (("workload", "--hf-config", "{fifo}"), "--hf-config"),
    (("serve", "gpt2", "--trace", "{fifo}", "--requests", "5"), "trace"),
    (("study", "validate", "{fifo}"), "study file"),
])
def test_a_named_pipe_is_refused_not_read_forever(tmp_path, capsys, argv, field):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    one_line_error(capsys, *[a.format(fifo=fifo) for a in argv],
                   expect=(field, "not a device, pipe or socket"))


def test_a_trace_with_a_column_twice_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len,input_len\n0,10,5,99\n")
    one_line_error(capsys, "serve", "gpt2", "--trace", str(trace), "--requests", "1",
                   expect=("t.csv header", "each column once", "input_len appears"))


# ----------------------------------------------------------------------------- issue 34: nonsense
@pytest.mark.parametrize("argv, expect", [
    (("collective", "all_reduce", "--bytes", "0", "--devices", "2"), ("bytes", "more than 0")),
    (("collective", "all_reduce", "--bytes", "1MiB", "--devices", "1"), ("devices", "at least 2")),
    (("simulate", "linear", "-a", ""), ("accelerator", "TEMPLATE:PRESET")),
    (("simulate", "linear", "-a", "npu:"), ("accelerator", "TEMPLATE:PRESET")),
    (("workload", "gpt2", "--arch", "n_layer=1e2"), ("arch.n_layer", "an int", "'1e2'")),
    (("serve", "gpt2", "--seed", "-1", "--requests", "3", "--rate", "1"), ("seed",)),
    (("simulate", "linear", "-a", "gpu:h100", "--hw", "sms=200", "--hw", "sms_on_die=100"),
     ("hw.sms_on_die", "at least sms=200")),
    (("simulate", "linear", "-a", "gpu:h100", "--hw", "memory_devices_on_die=1"),
     ("hw.memory_devices_on_die", "at least the 5")),
])
def test_accepted_nonsense_is_refused(capsys, argv, expect):
    one_line_error(capsys, *argv, expect=expect)


@pytest.mark.parametrize("architecture, field", [
    ({"tile": {"choices": [-2.5e-300]}}, "search.architecture.tile.choices[0]"),
    ({"window": {"choices": [1.5, 2048]}}, "search.architecture.window.choices[0]"),
    ({"stride": {"choices": [1e30]}}, "search.architecture.stride.choices[0]"),
])
def test_study_architecture_values_are_checked_at_load(tmp_path, capsys, architecture, field):
    path = study_file(tmp_path, workloads=[{"model": "gna"}],
                      search={"hardware": {"rows": {"choices": [32, 64]}},
                              "architecture": architecture})
    one_line_error(capsys, "study", "validate", str(path), expect=(field, "positive sizes"))


def test_yaml_is_read_as_yaml_1_2(tmp_path, capsys):
    """``5_12`` is 512 in YAML 1.1 but a string in YAML 1.2 (what the docs promise); so are
    ``yes`` / ``on`` (booleans in 1.1 only)."""
    from dse.study.loader import parse_yaml
    assert parse_yaml("a: 5_12\nb: yes\nc: on\nd: 1e3\ne: true\nf: 1_000.5") == {
        "a": "5_12", "b": "yes", "c": "on", "d": 1000.0, "e": True, "f": "1_000.5"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(TINY_STUDY).replace("trials: 2", "trials: 5_12"))
    one_line_error(capsys, "study", "validate", str(path), expect=("trials", "5_12"))


def test_a_strict_constraint_stays_strict():
    from dse.study.objectives import parse_constraint
    lt = parse_constraint("latency_s < 0.02", "constraints[0]", ["latency_s"])
    le = parse_constraint("latency_s <= 0.02", "constraints[0]", ["latency_s"])
    assert (lt.op, lt.label) == ("<", "latency_s<0.02")
    assert lt.violation(0.02) > 0 >= le.violation(0.02)
    assert lt.violation(0.01) < 0 and lt.violation(0.03) > 0
    gt = parse_constraint({"metric": "latency_s", "op": ">", "value": 1}, "c", ["latency_s"])
    assert gt.violation(1.0) > 0 > gt.violation(2.0)


@pytest.mark.parametrize("trace, content, expect", [
    ("missing.csv", None, ("serving.trace", "no such file")),
    ("bin.csv", b"\x00\x01binary\xff\n", ("serving.trace", "UTF-8")),
    ("neg.csv", b"arrival_s,input_len,output_len\n0,-5,3\n", ("neg.csv:2.input_len",)),
    ("passwd", b"root:x:0:0:root:/root:/bin/bash\nbin:x:1:1::/:\n",
     ("passwd header", "not column names")),
])
def test_a_serving_study_checks_its_trace_at_load(tmp_path, capsys, trace, content, expect):
    if content is not None:
        (tmp_path / trace).write_bytes(content)
    path = study_file(tmp_path, workloads=None,
                      serving={"model": "gpt2", "trace": str(tmp_path / trace), "requests": 5},
                      search={"hardware": {"rows": {"choices": [8, 16]}}},
                      objectives=["ttft_p99_s"])
    data = yaml.safe_load(path.read_text())
    data.pop("workloads")
    path.write_text(yaml.safe_dump(data))
    line = one_line_error(capsys, "study", "run", str(path), "--out", str(tmp_path / "o"),
                          expect=expect)
    assert "root:" not in line
    assert not (tmp_path / "o").exists()


def test_the_default_proxy_never_builds_a_huge_model(tmp_path, capsys):
    """NASWOT builds real weights: a 12 B vision model is refused at load (counted on the meta
    device), never built (issue 34: it was killed at 6.1 GiB and the run exited 0)."""
    path = study_file(tmp_path, workloads=[{"model": "flux-dit", "batch": 1}],
                      search={"hardware": {"rows": {"choices": [8, 16]}}},
                      objectives=["latency_s", "quality"])
    one_line_error(capsys, "study", "validate", str(path),
                   expect=("quality", "NASWOT", "11.9 B parameters"))


@pytest.mark.parametrize("config, fragment", [
    ({**GPT2_TINY, "architectures": [1]}, "hf_config.architectures: expected a list of class"),
    ({**GPT2_TINY, "type_vocab_size": 0}, "hf_config.type_vocab_size: expected an int >= 1"),
    ({"model_type": "mamba", "num_hidden_layers": 1, "hidden_size": 64, "state_size": 0,
      "vocab_size": 100}, "hf_config.state_size"),
    ({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 4,
      "num_experts_per_tok": 0}, "hf_config.num_experts_per_tok: expected an int in [1, 4]"),
    ({"model_type": "mistral", "num_hidden_layers": 1, "sliding_window": -5},
     "hf_config.sliding_window"),
    ({"model_type": "llama", "num_hidden_layers": 1, "rope_scaling": {"type": "linear",
                                                                       "factor": -2}},
     "hf_config.rope_scaling.factor: expected a number > 0"),
])
def test_hugging_face_nonsense_is_refused(tmp_path, capsys, config, fragment):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    one_line_error(capsys, "workload", "--hf-config", str(path), expect=(fragment,))


@pytest.mark.parametrize("argv, fragment", [
    (("workload", "gpt2", "--module", "x.y:make"), "not both MODEL and --module"),
    (("workload", "--hf-config", "c.json", "--module", "x.y:make"),
     "not both --hf-config and --module"),
    (("workload", "--module", "x.y:make", "--arch", "n=1"), "no --arch with --module"),
])
def test_one_source_of_the_model(capsys, argv, fragment):
    one_line_error(capsys, *argv, expect=(fragment,))


# ----------------------------------------------------------------------------- fidelity
@pytest.mark.parametrize("command", [["generate", "gpt2", "--input-len", "8", "--output-len",
                                      "2"], ["serve", "gpt2", "--rate", "1", "--requests", "2"]])
def test_bad_fidelity(capsys, command):
    one_line_error(capsys, *command, "--fidelity", "exact", expect=("fidelity", "fast or event"))


# ----------------------------------------------------------------------------- round 3 surfaces
@pytest.mark.parametrize("spec", ["", "weights=int4_g128,weights=fp8_e4m3", "weights=fp8_e4m3,",
                                  ",,"])
def test_formats_pairs_are_whole(capsys, spec):
    one_line_error(capsys, "simulate", "gpt2", "--arch", "n_layer=2", "--formats", spec,
                   expect=("--formats",))


@pytest.mark.parametrize("extra, field", [(["--tokens", "nan"], "train_tokens"),
                                          (["--tokens", "-1"], "train_tokens"),
                                          (["--loss", "mse"], "loss"),
                                          (["--optimizer", ""], "optimizer")])
def test_train_numbers_and_options(capsys, extra, field):
    one_line_error(capsys, "train", "gpt2", "--arch", "n_layer=2", "--seq", "64", *extra,
                   expect=(field,))


@pytest.mark.parametrize("flag", ["--menu", "--routing"])
def test_fleet_files_are_regular_files(tmp_path, capsys, flag):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    one_line_error(capsys, "fleet", "llama2-7b", "--rate", "2", "--requests", "20",
                   "--no-confirm", flag, str(pipe), expect=(flag, "regular"))


def test_disaggregated_study_link_checked_at_load(tmp_path, capsys):
    s = tmp_path / "s.yaml"
    s.write_text("name: t_link\ndisaggregated: {model: llama2-7b, rate: 2, link: bogus}\n"
                 "accelerators: [{name: a100, template: gpu, preset: a100},\n"
                 "               {name: h100, template: gpu, preset: h100}]\n"
                 "search: {pools: {prefill_count: [1, 2]}}\nobjectives: [slo_attainment]\n"
                 "trials: 2\n")
    one_line_error(capsys, "study", "validate", str(s), expect=("disaggregated.link", "bogus"))
