"""Mixture of experts: routing statistics, the grouped-experts op, published parameter counts,
costs on every template, and FLOPs against torch's counter on an eager per-expert loop."""

import math
import warnings

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dse import api
from dse.errors import BadInput
from workloads import moe
from workloads.build import build_workload
from workloads.moe_op import experts_reference, moe_experts
from workloads.zoo import get_model


def test_uniform_load_touches_the_expected_number_of_experts():
    # one token reads its top-k experts; T tokens read E (1 - (1 - k/E)^T) in expectation
    assert moe.routing(1, 2, 8)["experts_touched"] == pytest.approx(2.0)
    r = moe.routing(4, 2, 8)
    assert r["experts_touched"] == pytest.approx(8 * (1 - (1 - 2 / 8) ** 4))
    assert moe.routing(4096, 8, 128)["experts_touched"] == pytest.approx(128.0)
    assert sum(r["tokens_per_expert"]) == pytest.approx(4 * 2)


def test_expected_experts_touched_matches_sampling():
    """The closed form against routing sampled from the same load (top-k without replacement
    from a Zipf load is approximated by independent picks of probability k * p_i)."""
    rng = np.random.default_rng(0)
    experts, k, tokens = 64, 6, 16
    for imbalance in (1.0, 4.0):
        p = moe.load_distribution(experts, imbalance)
        # Gumbel top-k: k experts without replacement, each token, 4000 trials at once
        keys = np.log(p) + rng.gumbel(size=(4000, tokens, experts))
        picks = np.argsort(-keys, axis=-1)[..., :k]
        hit = np.zeros((4000, experts), dtype=bool)
        np.put_along_axis(hit, picks.reshape(4000, -1), True, axis=1)
        touched = hit.sum(axis=1)
        expected = moe.routing(tokens, k, experts, imbalance)["experts_touched"]
        assert abs(np.mean(touched) - expected) / expected < 0.03, (imbalance, np.mean(touched), expected)


def test_imbalance_is_the_hottest_experts_share_over_the_mean():
    p = moe.load_distribution(16, 3.0)
    assert p.sum() == pytest.approx(1.0) and 16 * p.max() == pytest.approx(3.0, rel=1e-6)
    assert np.all(np.diff(p) <= 0)
    with pytest.raises(BadInput, match="expert_imbalance"):
        moe.load_distribution(16, 16.0)
    with pytest.raises(BadInput, match="expert_load"):
        moe.load_distribution(4, [1, 2])


def test_capacity_factor_drops_tokens_over_capacity():
    free = moe.routing(64, 2, 8, imbalance=3.0)
    capped = moe.routing(64, 2, 8, imbalance=3.0, capacity_factor=1.0)
    assert capped["capacity"] == math.ceil(64 * 2 / 8)
    assert free["dropped_tokens"] == pytest.approx(0.0)
    assert capped["dropped_tokens"] > 0
    assert max(capped["tokens_per_expert"]) <= capped["capacity"]


def test_moe_op_matches_its_reference_and_the_eager_loop():
    torch.manual_seed(0)
    t, d, f, e, k = 10, 8, 12, 4, 2
    x = torch.randn(t, d)
    ids = torch.stack([torch.randperm(e)[:k] for _ in range(t)])
    wts = torch.rand(t, k)
    w_up, w_down = torch.randn(e, 2 * f, d), torch.randn(e, d, f)
    y = moe_experts(x, ids, wts, w_up, w_down, None, None, True, "silu", 0.0, 1.0)
    want = torch.zeros(t, d)
    for i in range(t):
        for j in range(k):
            g = w_up[ids[i, j]] @ x[i]
            h = torch.nn.functional.silu(g[:f]) * g[f:]
            want[i] += wts[i, j] * (w_down[ids[i, j]] @ h)
    assert torch.allclose(y, want, atol=1e-4)
    assert torch.equal(y, experts_reference(x, ids, wts, w_up, w_down, None, None, True, "silu", 0.0))


def test_hf_mixtral_flops_match_flop_counter_on_eager_experts():
    """FlopCounterMode cannot count the grouped op, but counts transformers' eager per-expert
    loop on real tensors: our analytic expert FLOPs must equal it."""
    transformers = pytest.importorskip("transformers")
    from workloads.hf import workload_from_hf_config
    data = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
            "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = workload_from_hf_config(data, batch=2, seq=8, use_cache=False)
        cfg = transformers.AutoConfig.for_model(**data)
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, experts_implementation="eager", attn_implementation="eager").eval()
        with FlopCounterMode(display=False) as fc:
            model(input_ids=torch.zeros(2, 8, dtype=torch.long), use_cache=False, logits_to_keep=1)
    counted = fc.get_total_flops()
    ours = sum(op.flops for op in w.ops if op.kind in ("matmul", "attention", "moe"))
    assert ours == counted
    assert w.ops_by_kind()["moe"] == 2 and not w.unknown_ops


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-moe-16b"])
def test_published_total_and_active_parameters(name):
    spec = get_model(name)
    w = build_workload(name, phase="decode", batch=1, context=16)
    # published counts are rounded to 0.1 B: within half of that
    assert abs(w.params - spec.published_params) <= 0.05e9, w.params
    assert abs(w.active_params - spec.published_active_params) <= 0.05e9, w.active_params


def test_decode_reads_activated_experts_at_small_batch_and_all_at_large():
    one = build_workload("mixtral-8x7b", phase="decode", batch=1, context=16, arch={"n_layer": 2})
    many = build_workload("mixtral-8x7b", phase="decode", batch=256, context=16, arch={"n_layer": 2})
    op1 = next(op for op in one.ops if op.kind == "moe")
    op2 = next(op for op in many.ops if op.kind == "moe")
    per_expert = op1.attrs["weight_bytes_per_expert"]
    assert op1.weight_bytes == pytest.approx(2 * per_expert, rel=1e-6)
    assert op2.weight_bytes == pytest.approx(8 * per_expert, rel=1e-6)
    assert op1.attrs["experts"] == 8 and op1.attrs["tokens_per_expert"] and op1.attrs["gemms"]
    # every template costs the grouped op, and reading 4x the expert weights costs time
    for acc in ("npu", "gpu:h100", "pim", "npu_pim", "wafer", "neural_graphics"):
        r1, r2 = api.simulate(one, acc), api.simulate(many, acc)
        assert r1.latency_s > 0 and r2.latency_s > r1.latency_s, acc


def test_imbalance_and_capacity_are_arch_parameters():
    base = build_workload("deepseek-moe-16b", phase="decode", batch=8, context=16,
                          arch={"n_layer": 2})
    skew = build_workload("deepseek-moe-16b", phase="decode", batch=8, context=16,
                          arch={"n_layer": 2, "expert_imbalance": 8.0, "capacity_factor": 1.0})
    b = next(op for op in base.ops if op.kind == "moe")
    s = next(op for op in skew.ops if op.kind == "moe")
    assert s.attrs["experts_touched"] < b.attrs["experts_touched"]   # hot experts shared
    assert s.attrs["dropped_tokens"] > 0 and s.flops < b.flops
    with pytest.raises(BadInput, match="arch.n_experts"):
        build_workload("deepseek-moe-16b", arch={"n_experts": 100000})
