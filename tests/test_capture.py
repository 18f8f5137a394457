"""Capture: FLOPs against torch's own counter, bytes, KV cache, unknown ops, errors."""

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.attention
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dse.errors import CaptureError
from workloads.capture import capture

GEMM_KINDS = ("matmul", "conv", "attention")


def counted_flops(module, args, kwargs=None):
    """torch's FlopCounterMode on meta tensors (where SDPA is counted)."""
    with FlopCounterMode(display=False) as fc:
        module(*args, **(kwargs or {}))
    return fc.get_total_flops()


def gemm_flops(w):
    return sum(op.flops for op in w.ops if op.kind in GEMM_KINDS)


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.qkv, self.o, self.norm, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d), heads
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, kv=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = [y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v)]
        if kv is not None:
            k, v = torch.cat([kv[0], k], 2), torch.cat([kv[1], v], 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(x)))


class TinyLM(nn.Module):
    def __init__(self, layers=2, vocab=100, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))

    def forward(self, ids, kv_cache=None):
        x = self.emb(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if kv_cache is None else kv_cache[i])
        return x @ self.emb.weight.T  # tied head


def meta(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype, device="meta")


@pytest.fixture(scope="module")
def tiny():
    with torch.device("meta"):
        return TinyLM()


def test_prefill_flops_match_flop_counter(tiny):
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    w = capture(tiny, (ids,), phase="prefill")
    assert gemm_flops(w) == counted_flops(tiny, (ids,))
    att = [op for op in w.ops if op.kind == "attention"]
    assert len(att) == 2 and all(op.attrs["causal"] for op in att)
    # causal work: 16*17/2 of 16*16 score entries
    assert att[0].attrs["causal_flops"] == att[0].flops * 136 // 256


def test_decode_counts_kv_cache_traffic(tiny):
    ctx, b = 30, 2
    ids = torch.zeros(b, 1, dtype=torch.long, device="meta")
    kv = [(meta(b, 4, ctx, 16), meta(b, 4, ctx, 16)) for _ in range(2)]
    w = capture(tiny, (ids,), {"kv_cache": kv}, phase="decode", dtype="fp16")
    assert gemm_flops(w) == counted_flops(tiny, (ids,), {"kv_cache": kv})
    per_layer_cache = 2 * b * 4 * ctx * 16 * 2  # k and v, fp16
    # attention reads the old cache plus the appended token; the appends write one token each
    appended = 2 * b * 4 * 1 * 16 * 2
    reads = sum(op.kv_bytes_read for op in w.ops)
    writes = sum(op.kv_bytes_written for op in w.ops)
    assert reads == 2 * (per_layer_cache + appended)
    assert writes == 2 * appended
    cats = [op for op in w.ops if op.attrs.get("kv_append")]
    assert len(cats) == 4


def test_weight_bytes_equal_params_times_dtype(tiny):
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    for dtype, size in (("fp32", 4), ("bf16", 2), ("int8", 1)):
        w = capture(tiny, (ids,), dtype=dtype)
        assert w.params == sum(p.numel() for p in tiny.parameters())
        assert w.summary()["bytes"]["weights"] == w.params * size


def test_views_are_free_and_copies_cost_bytes():
    class M(nn.Module):
        def forward(self, x):
            y = x.view(4, 8).transpose(0, 1)        # free
            z = torch.cat([y, y], dim=0)             # copies
            return z.contiguous().reshape(-1)
    x = meta(32)
    w = capture(M(), (x,), dtype="fp32")
    kinds = [op.kind for op in w.ops]
    assert kinds == ["data_movement"]
    assert w.ops[0].activation_bytes_written == 64 * 4


def test_unknown_ops_are_counted_and_warned():
    class M(nn.Module):
        def forward(self, x):
            return torch.cumprod(x, dim=0) + 1
    with pytest.warns(UserWarning, match="cumprod"):
        w = capture(M(), (meta(10),))
    assert w.unknown_targets == {"cumprod": 1}
    assert [op.kind for op in w.ops] == ["unknown", "elementwise"]
    assert w.summary()["unknown_ops"] == {"cumprod": 1}


def test_conv_and_grouped_conv_flops():
    m = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                      nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16),
                      nn.AdaptiveAvgPool2d(1)).to("meta")
    x = meta(2, 8, 32, 32)
    w = capture(m, (x,))
    assert gemm_flops(w) == counted_flops(m, (x,))
    convs = [op for op in w.ops if op.kind == "conv"]
    assert convs[0].attrs["p"] == 16 and convs[0].attrs["gemm_k"] == 8 * 9
    assert convs[1].attrs["groups"] == 16 and convs[1].attrs["gemm_k"] == 9


def test_batched_matmul_attrs():
    class M(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    w = capture(M(), (meta(3, 5, 7), meta(3, 7, 11)))
    op = w.ops[0]
    assert (op.attrs["batch"], op.attrs["m"], op.attrs["n"], op.attrs["k"]) == (3, 5, 11, 7)
    assert op.flops == 2 * 3 * 5 * 7 * 11


def test_export_rejection_is_a_capture_error():
    class Bad(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow
                return x
            return -x
    with pytest.raises(CaptureError, match="torch.export rejected"):
        capture(Bad(), (torch.ones(3),))


def test_edges_carry_tensor_bytes(tiny):
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    w = capture(tiny, (ids,), dtype="fp32")
    emb = next(op for op in w.ops if op.kind == "embedding")
    for _, _, data in w.graph.out_edges(emb.name, data=True):
        assert data["bytes"] == 8 * 64 * 4


@pytest.mark.parametrize("config", ["gpt2_tiny", "llama_tiny", "bert_tiny"])
def test_hugging_face_configs_match_flop_counter(config):
    transformers = pytest.importorskip("transformers")
    from workloads.hf import is_causal, load_hf_config, workload_from_hf_config
    path = f"tests/data/hf/{config}.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = workload_from_hf_config(path, batch=2, seq=16)
        cfg = load_hf_config(path)
        cfg._attn_implementation = "sdpa"
        auto = transformers.AutoModelForCausalLM if is_causal(cfg) else transformers.AutoModel
        model = auto.from_config(cfg).eval()  # tiny: real CPU tensors
        ids = torch.zeros(2, 16, dtype=torch.long)
        kwargs = {"use_cache": False} if is_causal(cfg) else {}
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            expected = counted_flops(model, (ids,), kwargs)  # the math path is counted
    assert gemm_flops(w) == expected
    assert w.params == sum(p.numel() for p in model.parameters())
    assert not w.unknown_targets


def _small_arch(spec):
    """Fewer layers for the deep models keeps the test fast; the per-layer ops are the same."""
    return {k: 2 for k in ("n_layer", "double_blocks", "single_blocks") if k in spec.arch}


@pytest.mark.parametrize("name", __import__("workloads.zoo", fromlist=["model_names"]).model_names())
def test_every_zoo_model_matches_flop_counter(name):
    from workloads.build import build_workload
    from workloads.zoo import get_model
    spec = get_model(name)
    arch = spec.resolve_arch(_small_arch(spec))
    phases = spec.phases
    for phase in phases:
        sizes = {"batch": 2, "seq": 8, "context": 16} if spec.family in ("llm", "encoder") else {
            "batch": 256 if spec.family == "neural_field" else 1}
        w = build_workload(name, phase=phase, arch=_small_arch(spec), use_cache=False, **sizes)
        seq = sizes.get("seq", 1) if phase != "decode" else 1
        with torch.device("meta"):
            module = spec.build(arch).eval()
            args, kwargs = spec.inputs(arch, phase, sizes["batch"], seq, sizes.get("context", 0))
        assert gemm_flops(w) == counted_flops(module, args, kwargs), (name, phase)
        assert w.summary()["bytes"]["weights"] == w.params * 2
        assert not w.unknown_targets, w.unknown_targets
