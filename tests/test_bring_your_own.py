"""Bring your own model: Hugging Face families from configs (a fast corpus subset; the whole
corpus is slow), ops that used to be dropped, eager attention, the scan, one's own module from
the API and the CLI, bad configs and bounds."""

import json
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dse import api
from dse.errors import BadInput, CaptureError
from tests.cli_runner import run_cli
from workloads.capture import capture

pytest.importorskip("transformers")
from benchmarks.capture_corpus import HF_CORPUS, check, hf_maker, hf_rows  # noqa: E402

#: One model per family, each phase: the default run's representative subset of the corpus.
FAST = [("llama", ("prefill", "decode")), ("gemma2", ("prefill",)), ("bloom", ("prefill",)),
        ("qwen3_moe", ("decode",)), ("mamba", ("prefill", "decode")), ("deberta", ("forward",)),
        ("t5", ("forward", "decode")), ("whisper", ("decode",)), ("vit", ("forward",)),
        ("swin", ("forward",)), ("convnext", ("forward",)), ("resnet", ("forward",)),
        ("clip", ("forward",))]


def _assert_rows(rows, simulated=True):
    for r in rows:
        assert r.captured and r.flops_match and r.analytic_match, r
        assert r.simulated or not simulated, r
        assert not r.unknown_ops, r


@pytest.mark.parametrize("entry", FAST, ids=[e[0] for e in FAST])
def test_hugging_face_family_captures_matches_flop_counter_and_simulates(entry):
    _assert_rows(hf_rows([entry]))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DSE_CORPUS"), reason="the whole corpus takes minutes: "
                    "DSE_CORPUS=1 runs it (benchmarks/capture_corpus.py prints it as a table)")
def test_whole_hugging_face_corpus():
    rows = hf_rows(HF_CORPUS, simulate=False)
    assert len(rows) >= 60
    _assert_rows(rows, simulated=False)


def test_decode_from_a_config_reads_the_kv_cache_once():
    from workloads.hf import workload_from_hf_config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = workload_from_hf_config("tests/data/hf/llama_tiny.json", phase="decode", batch=2,
                                    context=32, dtype="fp16", use_cache=False,
                                    kv_update="in_place")
        concat = workload_from_hf_config("tests/data/hf/llama_tiny.json", phase="decode",
                                         batch=2, context=32, dtype="fp16", use_cache=False)
    # 2 layers x (K, V) x batch 2 x 2 KV heads x 16 dims x 2 B: read ctx+1 tokens, write 1
    per_token = 2 * 2 * 2 * 2 * 16 * 2
    assert w.traffic_bytes()["kv_cache"] == per_token * 33 + per_token
    # HF's default dynamic cache (concat, the default for a config) also reads the old cache
    # and writes the whole new one each step
    assert concat.kv_update == "concat"
    assert concat.traffic_bytes()["kv_cache"] == per_token * (33 + 32 + 33)
    attn = [op for op in w.ops if op.kind == "attention"]
    assert len(attn) == 2 and all(op.attrs["q_len"] == 1 and op.attrs["kv_len"] == 33 for op in attn)


def test_eager_attention_is_one_attention_op_with_the_matmul_flops():
    class Eager(nn.Module):
        def forward(self, q, k, v, mask):
            s = (q @ k.transpose(-1, -2)) / 8.0 + mask
            return F.softmax(s, dim=-1) @ v
    args = tuple(torch.zeros(*s, device="meta") for s in
                 [(2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 16, 8), (1, 1, 16, 16)])
    w = capture(Eager(), args, causal=True)
    assert [op.kind for op in w.ops] == ["attention"]
    a = w.ops[0].attrs
    assert (a["batch"], a["heads"], a["q_len"], a["kv_len"], a["head_dim"]) == (2, 4, 16, 16, 8)
    with FlopCounterMode(display=False) as fc:
        Eager()(*args)
    assert w.flops == fc.get_total_flops() and a["causal"] and a["masked"]


def test_dropped_ops_are_counted_and_match_flop_counter():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(16, 32, num_layers=2, bidirectional=True, batch_first=True)
            self.gru = nn.GRU(16, 8)
            self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, groups=2)
            self.conv1 = nn.ConvTranspose1d(4, 6, 5)

        def forward(self, x, img, a, b, seq):
            y = self.rnn(x)[0].sum() + self.gru(x)[0].sum()
            z = F.interpolate(self.up(img), scale_factor=2, mode="bilinear")
            z = F.grid_sample(z, torch.zeros(1, 4, 4, 2, device=z.device), align_corners=False)
            e = torch.einsum("bhqd,bhkd->bhqk", a, b) + torch.einsum("...d,...d->...", a, a)[..., None]
            s = torch.sort(e, dim=-1)[0] + torch.topk(e, 2, dim=-1)[0].sum()
            return y, F.hardswish(z).relu_(), s.tensor_split(2)[0], self.conv1(seq)
    with torch.device("meta"):
        m = M()
    args = tuple(torch.zeros(*s, device="meta") for s in
                 [(2, 5, 16), (1, 8, 6, 6), (2, 3, 4, 8), (2, 3, 7, 8), (1, 4, 9)])
    w = capture(m, args)
    assert not w.unknown_ops, w.unknown_ops
    with FlopCounterMode(display=False) as fc:
        m(*args)
    counted = sum(op.flops for op in w.ops if op.kind in ("matmul", "conv", "recurrent"))
    assert counted == fc.get_total_flops()
    assert {"recurrent", "conv", "matmul"} <= set(w.ops_by_kind())
    assert api.simulate(w, "npu").latency_s > 0


def test_mamba_scan_is_one_op_with_the_reference_flops():
    from workloads.hf import workload_from_hf_config
    from workloads.scan_op import scan_flops
    data = {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 32, "state_size": 8,
            "expand": 2, "vocab_size": 64}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = workload_from_hf_config(data, batch=2, seq=64, use_cache=False)
    scans = [op for op in w.ops if op.kind == "scan"]
    assert len(scans) == 2 and len(w) < 60   # one op per layer, not one per token
    a = scans[0].attrs
    assert (a["batch"], a["channels"], a["seq"], a["state"]) == (2, 64, 64, 8)
    assert scans[0].flops == scan_flops(2, 64, 64, 8, True, True) == 9 * 2 * 64 * 64 * 8 + 2 * 2 * 64 * 64


def test_mamba_decode_reads_and_writes_its_fixed_size_state():
    from workloads.hf import workload_from_hf_config
    data = {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 32, "state_size": 8,
            "expand": 2, "conv_kernel": 4, "vocab_size": 64}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        short, long = (workload_from_hf_config(data, phase="decode", batch=2, context=c,
                                               dtype="fp32", use_cache=False) for c in (16, 4096))
    assert short.traffic_bytes()["kv_cache"] == long.traffic_bytes()["kv_cache"]  # no growth
    scans = [op for op in short.ops if op.kind == "scan"]
    state = 2 * 64 * 8 * 4   # batch x channels x state x fp32
    assert len(scans) == 2 and all(op.attrs["seq"] == 1 and op.kv_bytes_read == state
                                   for op in scans)


def test_scan_op_matches_transformers_sequential_scan():
    from transformers.models.mamba import modeling_mamba as mm
    from workloads.scan_op import selective_scan
    torch.manual_seed(0)
    b, d, n, length = 2, 6, 4, 5
    u, dt, z = torch.randn(b, d, length), torch.randn(b, d, length), torch.randn(b, d, length)
    A, Bm, Cm, D, bias = -torch.rand(d, n), torch.randn(b, n, length), torch.randn(b, n, length), torch.randn(d), torch.randn(d)
    want = mm.mamba_selective_scan(u, dt, A, Bm, Cm, D=D, z=z, delta_bias=bias, delta_softplus=True)
    got, _ = selective_scan(u, dt, A, Bm, Cm, D, z, bias, None, True, False)
    assert torch.allclose(got, want, atol=1e-4)


def test_own_module_from_the_api_warns_and_strict_refuses():
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.fft.fft(self.fc(x)).abs()
    x = torch.zeros(4, 8)
    with pytest.warns(UserWarning, match="fft_fft"):
        w = api.workload(module=Mine(), inputs=(x,), dtype="fp16")
    assert w.unknown_ops == {"fft_fft": 1} and w.dtype == "fp16" and w.phase == "forward"
    with pytest.raises(CaptureError, match="unknown ops"):
        api.workload(module=Mine(), inputs=x, strict=True)
    r = api.simulate(nn.Linear(8, 8), inputs=(x,), accelerator="npu")
    assert r.latency_s > 0


def test_own_llm_marks_its_kv_cache_by_argument_name():
    class Step(nn.Module):
        def forward(self, q, past_kv):
            k = torch.cat([past_kv[0], q], dim=2)
            return F.scaled_dot_product_attention(q, k, k)
    q = torch.zeros(1, 2, 1, 8, device="meta")
    cache = (torch.zeros(1, 2, 10, 8, device="meta"),)
    w = api.workload(module=Step(), inputs={"q": q, "past_kv": cache}, kv_input="past_kv",
                     phase="decode", dtype="fp32")
    # attention reads the cache twice (as K and as V) over 10 + 1 tokens; the append writes 1
    assert w.traffic_bytes()["kv_cache"] == 2 * (10 + 1) * 2 * 8 * 4 + 2 * 8 * 4


def test_cli_module_factory_and_strict(tmp_path, monkeypatch, capsys):
    (tmp_path / "mine_models.py").write_text(
        "import torch\n"
        "def mlp():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU()), (torch.zeros(2, 16),)\n"
        "def odd():\n"
        "    class F(torch.nn.Module):\n"
        "        def forward(self, x): return torch.fft.fft(x).abs()\n"
        "    return F(), torch.zeros(8)\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *["workload", "--module", "mine_models:mlp", "--json"])
    assert code == 0, err
    assert json.loads(out)["flops"] == 2 * 2 * 16 * 32 + 2 * 32 * 1
    code, out, err = run_cli(capsys, *["workload", "--module", "mine_models:odd", "--strict"])
    assert code == 2 and "fft_fft" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, *["workload", "--module", "mine_models:nope"])
    assert code == 2 and "--module" in err
    code, out, err = run_cli(capsys, *["workload", "--module", "no_such_pkg.x:f"])
    assert code == 2 and "importable" in err


@pytest.mark.parametrize("config,field", [
    ({"model_type": "gpt2", "n_layer": "abc"}, "hf_config.n_layer"),
    ({"model_type": "llama", "num_hidden_layers": 3, "layer_types": ["full_attention"] * 2},
     "hf_config.num_hidden_layers"),
    ({"model_type": "llama", "rms_norm_eps": float("nan")}, "hf_config.rms_norm_eps"),
    ({"model_type": "llama", "num_hidden_layers": 1000000}, "hf_config.num_hidden_layers"),
    ({"model_type": "no-such-model"}, "hf_config.model_type"),
])
def test_bad_hf_config_is_one_line_naming_the_field(tmp_path, config, field, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run_cli(capsys, *["workload", "--hf-config", str(path)])
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and len(err) < 400, err
    assert field in err


def test_arch_bounds_and_hf_overrides(capsys):
    code, _, err = run_cli(capsys, *["workload", "gpt2", "--arch", "n_layer=1000000"])
    assert code == 2 and "arch.n_layer" in err and "[1, 256]" in err
    code, out, err = run_cli(capsys, *["workload", "--hf-config", "tests/data/hf/llama_tiny.json",
                              "--arch", "num_hidden_layers=1", "--batch", "3", "--seq", "16",
                              "--json"])
    assert code == 0, err
    s = json.loads(out)
    assert s["arch"]["num_hidden_layers"] == 1 and s["batch"] == 3
    assert s["ops_by_kind"]["attention"] == 1
    code, _, err = run_cli(capsys, *["workload", "--hf-config", "tests/data/hf/llama_tiny.json",
                            "--arch", "no_such_key=3"])
    assert code == 2 and "arch.no_such_key" in err
    code, _, err = run_cli(capsys, *["workload", "--hf-config", "tests/data/hf/llama_tiny.json",
                            "--batch", "0"])
    assert code == 2 and "batch" in err


def test_hf_captures_are_cached():
    from workloads.build import clear_memory_cache
    from workloads.hf import workload_from_hf_config
    clear_memory_cache()
    w1 = workload_from_hf_config("tests/data/hf/bert_tiny.json", batch=1, seq=8)
    w2 = workload_from_hf_config("tests/data/hf/bert_tiny.json", batch=1, seq=8)
    assert w1 is w2
    w3 = workload_from_hf_config("tests/data/hf/bert_tiny.json", batch=1, seq=8,
                                 arch={"num_hidden_layers": 1})
    assert w3 is not w1 and len(w3) < len(w1)


def test_corpus_check_reports_a_failure_instead_of_raising():
    row = check("broken", "test", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert not row.captured and "boom" in row.error
    assert hf_maker("llama", "prefill")()[0] is not None


def test_own_module_batch_is_read_from_its_inputs():
    """Issue 27: a module run on 8 images reported throughput 1 / latency (batch 1); the
    batch is the leading dimension of the first tensor input, and may be given."""
    with torch.device("meta"):
        net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(),
                            nn.Linear(16 * 30 * 30, 10))
        x = torch.zeros(8, 3, 32, 32)
    r = api.simulate(net, inputs=(x,), accelerator="gpu:h100")
    assert r.throughput == pytest.approx(8 / r.latency_s)
    assert api.workload(module=net, inputs={"input": x}).batch == 8
    r4 = api.simulate(net, inputs=(x,), accelerator="gpu:h100", batch=4)
    assert r4.throughput == pytest.approx(4 / r4.latency_s)
    with pytest.raises(BadInput, match="batch"):
        api.workload(module=net, inputs=(x,), batch=0)
