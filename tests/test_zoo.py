"""The model zoo: parameter counts, small CPU runs, decode, the hash-grid op, arch checks, and a
FlopCounterMode sanity check."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dse.errors import BadInput
from workloads.hashgrid_op import (_corner_index, hash_grid_encode, level_resolutions,
                                   per_level_scale_for)
from workloads.zoo import get_model, model_names
from workloads.zoo.definitions.neural_fields import spherical_harmonics

# Exact published parameter counts (HF transformers / torchvision num_parameters; tied
# embeddings once, BERT with pooler).
EXACT_PARAMS = {
    "gpt2": 124_439_808, "llama2-7b": 6_738_415_616, "llama3-8b": 8_030_261_248,
    "bert-base": 109_482_240, "resnet50": 25_557_032, "resnet18": 11_689_512,
    "mobilenetv2": 3_504_872, "vit-b16": 86_567_656, "tinyllama-1.1b": 1_100_048_384,
    "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
    # the module table of stable-diffusion-3-medium in ai-dynamo/aitune's inspect guide: its
    # 16-channel VAE decoder is FLUX.1's, its CLIP-L text encoder less the 768 x 768 projection
    "flux-vae-decoder": 49_545_475, "clip-text": 123_060_480,
}

REQUIRED = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tinyllama-1.1b", "llama2-7b",
            "llama2-13b", "llama2-70b", "llama3-8b", "gpt3-7b", "gpt3-13b", "gpt3-30b", "gpt3-175b",
            "bert-base", "bert-large", "vit-b16", "resnet18", "resnet50", "mobilenetv2",
            "nerf", "nsdf", "gia", "nvr", "linear", "conv2d", "sdpa"}

_TINY_LM = {"n_layer": 2, "d_model": 32, "n_head": 4, "d_ff": 64, "vocab_size": 64,
            "max_seq": 32}
_TINY_LLAMA = {**_TINY_LM, "n_kv_head": 2}
_TINY_FIELD = {"levels": 4, "log2_table_size": 10, "base_resolution": 4,
               "finest_resolution": 32, "hidden": 16}
_TINY_CNN = {"image_size": 32, "num_classes": 10}

#: Small architecture overrides of every model, for real CPU runs.
SMALL = {
    **{n: _TINY_LM for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-7b",
                             "gpt3-13b", "gpt3-30b", "gpt3-175b")},
    **{n: _TINY_LLAMA for n in ("tinyllama-1.1b", "llama2-7b", "llama2-13b", "llama2-70b",
                                   "llama3-8b")},
    "bert-base": _TINY_LM, "bert-large": _TINY_LM,
    "vit-b16": {"image_size": 32, "patch_size": 8, "n_layer": 2, "d_model": 32, "n_head": 4,
                "d_ff": 64, "num_classes": 10},
    "resnet18": {**_TINY_CNN, "base_width": 8, "blocks1": 1, "blocks2": 1, "blocks3": 1,
                 "blocks4": 1},
    "resnet50": {**_TINY_CNN, "base_width": 8, "blocks1": 1, "blocks2": 1, "blocks3": 1,
                 "blocks4": 1},
    "mobilenetv2": {**_TINY_CNN, "width_mult": 0.25},
    "nerf": _TINY_FIELD, "nsdf": _TINY_FIELD, "nvr": _TINY_FIELD, "gia": _TINY_FIELD,
    "linear": {"m": 8, "k": 16, "n": 4},
    "conv2d": {"c": 4, "h": 8, "w": 8, "k": 8, "groups": 2},
    "sdpa": {"b": 1, "h": 4, "sq": 8, "skv": 8, "d": 16, "kv_heads": 2},
    "gna": {"grid": "12x10", "window": "5x4", "stride": "2x2", "heads": 2, "head_dim": 8,
            "layout": "tiled", "tile": "4x2"},
    **{n: {"d_model": 32, "heads": 4, "double_blocks": 1, "single_blocks": 1, "txt_tokens": 4,
           "txt_dim": 16, "vec_dim": 8, "in_features": 8, "attention": "gna",
           "refiner_blocks": 1, **grid}
       for n, grid in (("flux-dit", {"grid": "8x8", "window": "4x4", "stride": "2x2",
                                      "tile": "4x2"}),
                       ("hunyuan-dit", {"grid": "4x4x6", "window": "2x2x3", "stride": "1",
                                        "tile": "2x2x2"}))},
    **{n: {**_TINY_LLAMA, "moe_d_ff": 16, "n_experts": 4, "top_k": 2}
       for n in ("mixtral-8x7b", "deepseek-moe-16b")},
    "flux-vae-decoder": {"latent": "4x4", "ch": 8, "groups": 4},
    "hunyuan-vae-decoder": {"latent": "3x4x4", "ch": 8, "groups": 4},
    "t5-encoder": _TINY_LM, "clip-text": _TINY_LM,
}


def _meta_params(spec, overrides=None) -> int:
    with torch.device("meta"):
        model = spec.build(spec.resolve_arch(overrides))
    return sum(p.numel() for p in model.parameters())


def _run_cases():
    return [(n, p) for n in model_names() for p in get_model(n).phases]


def _phase_args(phase: str) -> dict:
    return {"batch": 2, "seq": 1 if phase == "decode" else 8, "context": 5}


# ---------------------------------------------------------------- registry and parameters

def test_required_models_registered_with_small_configs():
    names = set(model_names())
    assert REQUIRED <= names
    assert names <= set(SMALL), "every model needs a SMALL config in this test"


@pytest.mark.parametrize("name", sorted(EXACT_PARAMS))
def test_exact_published_parameter_counts(name):
    spec = get_model(name)
    assert spec.published_params == EXACT_PARAMS[name]
    assert _meta_params(spec) == EXACT_PARAMS[name]


def test_rounded_published_counts_within_two_percent():
    """Every spec with a published count (GPT-3 ones are rounded: 6.7B, 13B, 30B, 175B) is
    within 2 % of it; the big ones are built on the meta device."""
    for name in model_names():
        spec = get_model(name)
        if spec.published_params is None:
            continue
        built = _meta_params(spec)
        assert abs(built - spec.published_params) / spec.published_params < 0.02, name


def test_neural_field_parameters_are_table_plus_mlp():
    spec = get_model("nsdf")  # 16 x 2^19 x 2 table + bias-free 32-64-64-1 MLP
    assert _meta_params(spec) == 16 * 2 ** 19 * 2 + (32 * 64 + 64 * 64 + 64 * 1)
    dense = spec.resolve_arch({"encoding": "dense", "levels": 2, "base_resolution": 4,
                               "finest_resolution": 8})
    with torch.device("meta"):
        model = spec.build(dense)
    assert tuple(model.encoding.table.shape) == (2, 9 ** 3, 2)


def test_rope_tables_are_buffers_not_parameters():
    spec = get_model("llama2-7b")
    with torch.device("meta"):
        model = spec.build(spec.resolve_arch({"n_layer": 1}))
    names = {n for n, _ in model.named_parameters()}
    assert not any("rope" in n for n in names)
    assert {"rope_cos", "rope_sin"} <= {n for n, _ in model.named_buffers()}


# ---------------------------------------------------------------- small CPU runs

@pytest.mark.parametrize("name,phase", _run_cases())
def test_every_model_runs_small_on_cpu(name, phase):
    spec = get_model(name)
    arch = spec.resolve_arch(SMALL[name])
    torch.manual_seed(0)
    model = spec.build(arch).eval()
    args, kwargs = spec.inputs(arch, phase, **_phase_args(phase))
    with torch.no_grad():
        out = model(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(torch.isfinite(o).all() for o in outs)
    assert all(o.shape[0] == args[0].shape[0] for o in outs)


def test_llm_output_shapes_and_decode_cache_shapes():
    spec = get_model("tinyllama-1.1b")
    arch = spec.resolve_arch(SMALL["tinyllama-1.1b"])
    model = spec.build(arch).eval()
    (ids,), kw = spec.inputs(arch, "decode", batch=3, seq=1, context=7)
    assert ids.shape == (3, 1) and ids.dtype == torch.long
    assert len(kw["kv_cache"]) == arch["n_layer"]
    assert all(k.shape == v.shape == (3, 2, 7, 8) for k, v in kw["kv_cache"])
    logits, cache = model(ids, **kw, return_cache=True)
    assert logits.shape == (3, 1, arch["vocab_size"])
    assert all(k.shape == (3, 2, 8, 8) for k, _ in cache)
    (ids,), kw = spec.inputs(arch, "prefill", batch=3, seq=9, context=0)
    assert ids.shape == (3, 9) and kw == {}
    assert model(ids).shape == (3, 1, arch["vocab_size"])  # last-token logits by default


@pytest.mark.parametrize("name", ["gpt2", "llama3-8b"])
def test_decode_with_cache_matches_full_prefill(name):
    """Prefill of 6 tokens, then decode of the 7th with the returned cache, gives the logits
    of a 7-token prefill at position 6 (checks positions, RoPE offset, GQA and causality)."""
    spec = get_model(name)
    arch = spec.resolve_arch({**SMALL[name], "last_token_logits": False})
    torch.manual_seed(0)
    model = spec.build(arch).eval()
    ids = torch.randint(0, arch["vocab_size"], (2, 7))
    with torch.no_grad():
        full = model(ids)
        _, cache = model(ids[:, :6], return_cache=True)
        step = model(ids[:, 6:], kv_cache=cache)
    torch.testing.assert_close(step[:, 0], full[:, 6], rtol=1e-4, atol=1e-4)


def test_llm_inputs_reject_bad_phases_and_lengths():
    spec = get_model("gpt2")
    arch = spec.resolve_arch({})
    with pytest.raises(BadInput):
        spec.inputs(arch, "forward", 1, 8, 0)
    with pytest.raises(BadInput):
        spec.inputs(arch, "decode", 1, 4, 16)  # decode is one token per step
    with pytest.raises(BadInput):
        spec.inputs(arch, "decode", 1, 1, 1024)  # 1024 + 1 > max_seq
    with pytest.raises(BadInput):
        spec.inputs(arch, "prefill", 0, 8, 0)
    with pytest.raises(BadInput):
        get_model("bert-base").inputs(get_model("bert-base").arch, "forward", 1, 513, 0)


def test_bad_architectures_raise_bad_input():
    with pytest.raises(BadInput):
        get_model("gpt2").build(get_model("gpt2").resolve_arch({"n_head": 7}))
    with pytest.raises(BadInput):
        spec = get_model("llama3-8b")
        spec.build(spec.resolve_arch({**SMALL["llama3-8b"], "n_kv_head": 3}))
    with pytest.raises(BadInput):
        spec = get_model("vit-b16")
        spec.build(spec.resolve_arch({**SMALL["vit-b16"], "patch_size": 5}))
    with pytest.raises(BadInput):
        spec = get_model("sdpa")
        spec.build(spec.resolve_arch({"h": 4, "kv_heads": 3}))


# ---------------------------------------------------------------- resolve_arch

def test_resolve_arch_errors_and_coercion():
    spec = get_model("gpt2")
    with pytest.raises(BadInput, match="arch.n_layers"):
        spec.resolve_arch({"n_layers": 2})
    for bad in (0, -3, 2.5, "x", True, float("inf")):
        with pytest.raises(BadInput):
            spec.resolve_arch({"n_layer": bad})
    assert spec.resolve_arch({"n_layer": "6", "last_token_logits": "false"})["n_layer"] == 6
    llama = get_model("llama3-8b")
    with pytest.raises(BadInput):
        llama.resolve_arch({"rope_theta": 0.0})
    nerf = get_model("nerf")
    with pytest.raises(BadInput):
        nerf.resolve_arch({"encoding": "octree"})
    assert nerf.resolve_arch({"encoding": "dense"})["encoding"] == "dense"


def test_zero_allowed_only_where_listed_in_choices():
    conv = get_model("conv2d")
    assert conv.resolve_arch({"padding": 0})["padding"] == 0
    with pytest.raises(BadInput):
        conv.resolve_arch({"stride": 0})
    with pytest.raises(BadInput):
        conv.resolve_arch({"padding": -1})


# ---------------------------------------------------------------- the hash-grid op

#: instant-NGP's spatial-hash primes [P Mueller et al. 2022, eq. 4], written out here so the
#: test does not trust the module's constant.
PAPER_PRIMES = (1, 2654435761, 805459861)


def _hash_row(corner: tuple[int, ...], log2_t: int) -> int:
    row = 0
    for c, prime in zip(corner, PAPER_PRIMES):
        row ^= c * prime
    return row & (2 ** log2_t - 1)


def test_level_resolutions_reach_the_finest():
    scale = per_level_scale_for(16, 16, 2048)
    res = level_resolutions(16, 16, scale)
    assert res[0] == 16 and res[-1] == 2048 and res == sorted(res)
    assert level_resolutions(1, 16, per_level_scale_for(1, 16, 512)) == [16]


@pytest.mark.parametrize("dims", [2, 3])
def test_interpolation_reproduces_a_linear_function(dims):
    """Dense levels holding f(vertex) for a linear f return f(x) exactly (to fp32)."""
    levels, base, scale, log2_t = 3, 4, 2.0, 13  # finest 17^3 = 4913 rows <= 2^13: direct
    coef = torch.tensor([0.3, -1.2, 2.0][:dims])
    table = torch.zeros(levels, 2 ** log2_t, 2)
    for level, res in enumerate(level_resolutions(levels, base, scale)):
        axes = torch.meshgrid(*[torch.arange(res + 1)] * dims, indexing="ij")
        corners = torch.stack([a.reshape(-1) for a in axes], dim=1)
        rows = _corner_index(corners, res, 2 ** log2_t, direct=True)
        table[level, rows, 0] = (corners.float() / res) @ coef + 0.5
        table[level, rows, 1] = level
    points = torch.rand(200, dims, generator=torch.Generator().manual_seed(1))
    out = hash_grid_encode(points, table, levels, 2, log2_t, base, scale, False)
    assert out.shape == (200, levels * 2)
    expected = points @ coef + 0.5
    for level in range(levels):
        torch.testing.assert_close(out[:, 2 * level], expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[:, 2 * level + 1], torch.full((200,), float(level)))


def test_hashed_level_reads_the_xor_prime_row():
    """A point on a vertex of a level too fine for the table reads exactly its hashed row."""
    log2_t, res = 6, 16  # 17^3 vertices > 2^6 rows: hashed
    table = torch.arange(2 ** log2_t, dtype=torch.float32).reshape(1, 2 ** log2_t, 1)
    corners = [(0, 0, 0), (3, 7, 11), (15, 1, 9), (16, 16, 16)]
    points = torch.tensor(corners, dtype=torch.float32) / res
    out = hash_grid_encode(points, table, 1, 1, log2_t, res, 1.0, False)
    assert out[:, 0].tolist() == [float(_hash_row(c, log2_t)) for c in corners]


def test_hash_rows_in_range_for_large_coordinates():
    corners = torch.randint(0, 2 ** 20, (1000, 3), generator=torch.Generator().manual_seed(2))
    rows = _corner_index(corners, 2 ** 20, 2 ** 19, direct=False)
    assert int(rows.min()) >= 0 and int(rows.max()) < 2 ** 19
    assert rows[:5].tolist() == [_hash_row(tuple(c.tolist()), 19) for c in corners[:5]]


def test_hash_grid_op_is_one_export_node_on_meta():
    spec = get_model("nsdf")
    arch = spec.resolve_arch({})
    with torch.device("meta"):
        model = spec.build(arch).eval()
        args, kwargs = spec.inputs(arch, "forward", 4096)
        ep = torch.export.export(model, args, kwargs, strict=False)
    nodes = [n for n in ep.graph.nodes if n.op == "call_function"
             and "hash_grid_encode" in str(n.target)]
    assert len(nodes) == 1
    node = nodes[0]
    assert node.target is torch.ops.dse.hash_grid_encode.default
    levels, features, log2_t, base, scale, dense = node.args[2:]
    assert (levels, features, log2_t, base, dense) == (16, 2, 19, 16, False)
    assert base * scale ** 15 == pytest.approx(2048)
    assert tuple(node.meta["val"].shape) == (4096, 32)
    assert tuple(node.args[1].meta["val"].shape) == (16, 2 ** 19, 2)


def test_hash_grid_op_rejects_bad_tables():
    points = torch.rand(4, 3)
    with pytest.raises(BadInput):  # hash table must have 2^T rows
        hash_grid_encode(points, torch.zeros(2, 100, 2), 2, 2, 7, 4, 2.0, False)
    with pytest.raises(BadInput):  # dense finest level (8+1)^3 rows does not fit
        hash_grid_encode(points, torch.zeros(2, 128, 2), 2, 2, 7, 4, 2.0, True)
    with pytest.raises(BadInput):
        hash_grid_encode(torch.rand(4, 4), torch.zeros(2, 128, 2), 2, 2, 7, 4, 2.0, False)


@pytest.mark.parametrize("encoding", ["hash", "dense", "lowres_dense"])
def test_encodings_build_and_run(encoding):
    spec = get_model("nerf")
    arch = spec.resolve_arch({**SMALL["nerf"], "encoding": encoding})
    model = spec.build(arch).eval()
    args, _ = spec.inputs(arch, "forward", 64)
    density, rgb = model(*args)
    assert density.shape == (64, 1) and rgb.shape == (64, 3)
    assert bool((density > 0).all()) and bool(((rgb >= 0) & (rgb <= 1)).all())
    res = model.encoding.resolutions
    if encoding == "lowres_dense":  # finest lowered so (N+1)^3 <= 2^10
        assert (res[-1] + 1) ** 3 <= 2 ** 10 < (res[-1] + 2) ** 3
    else:
        assert res[-1] == 32


def test_spherical_harmonics_addition_theorem():
    """Each band l sums to (2l+1)/(4 pi) over its 2l+1 functions for any unit direction."""
    dirs = torch.nn.functional.normalize(torch.randn(50, 3, dtype=torch.float64), dim=1)
    sh = spherical_harmonics(dirs, 4)
    assert sh.shape == (50, 16)
    for band in range(4):
        block = sh[:, band ** 2:(band + 1) ** 2]
        torch.testing.assert_close((block ** 2).sum(1),
                                   torch.full((50,), (2 * band + 1) / (4 * math.pi),
                                              dtype=torch.float64))


# ---------------------------------------------------------------- GQA and FLOP sanity

def _meta_flops(spec, arch, phase, **kw) -> int:
    with torch.device("meta"):
        model = spec.build(arch).eval()
        args, kwargs = spec.inputs(arch, phase, **kw)
        with FlopCounterMode(display=False) as counter:
            model(*args, **kwargs)
    return counter.get_total_flops()


def test_gqa_exports_one_sdpa_per_layer_with_enable_gqa():
    spec = get_model("llama3-8b")
    arch = spec.resolve_arch(SMALL["llama3-8b"])
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = spec.build(arch).eval()
        args, kwargs = spec.inputs(arch, "decode", batch=2, seq=1, context=5)
        ep = torch.export.export(model, args, kwargs, strict=False)
    target = torch.ops.aten.scaled_dot_product_attention.default
    sdpa = [n for n in ep.graph.nodes if n.target is target]
    assert len(sdpa) == arch["n_layer"]
    assert all(n.kwargs.get("enable_gqa") for n in sdpa)
    assert all(tuple(n.args[1].meta["val"].shape) == (2, 2, 6, 8) for n in sdpa)


@pytest.mark.parametrize("name", ["gpt2", "llama3-8b"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_llm_flops_match_formula(name, phase):
    """FlopCounterMode (meta: SDPA runs its math path and is counted, causal in full) equals
    2 x tokens x matmul weights + 4 b s skv d for attention + the output head."""
    spec = get_model(name)
    arch = spec.resolve_arch(SMALL[name])
    b, s, ctx = 2, (8 if phase == "prefill" else 1), (0 if phase == "prefill" else 5)
    d, ff, layers, vocab = arch["d_model"], arch["d_ff"], arch["n_layer"], arch["vocab_size"]
    kv_dim = d * arch.get("n_kv_head", arch["n_head"]) // arch["n_head"]
    mlp_mats = 2 if name == "gpt2" else 3
    per_token = layers * (2 * d * d + 2 * d * kv_dim + mlp_mats * d * ff)
    expected = (2 * b * s * per_token + layers * 4 * b * s * (ctx + s) * d
                + 2 * b * 1 * d * vocab)
    assert _meta_flops(spec, arch, phase, batch=b, seq=s, context=ctx) == expected


def test_micro_flops_match_formula():
    lin = get_model("linear")
    assert _meta_flops(lin, lin.resolve_arch({"m": 8, "k": 16, "n": 4}), "forward",
                       batch=3, seq=0) == 2 * 24 * 16 * 4
    conv = get_model("conv2d")
    arch = conv.resolve_arch({"c": 4, "h": 8, "w": 8, "k": 8, "groups": 2, "stride": 2})
    p = q = (8 + 2 - 3) // 2 + 1
    assert _meta_flops(conv, arch, "forward", batch=1, seq=0) == 2 * 8 * p * q * 2 * 9
    sdpa = get_model("sdpa")
    arch = sdpa.resolve_arch(SMALL["sdpa"])
    assert _meta_flops(sdpa, arch, "forward", batch=2, seq=0) == 4 * 2 * 4 * 8 * 8 * 16


def test_neural_field_flops_are_the_mlp():
    spec = get_model("nsdf")  # the custom op has no FLOP formula in FlopCounterMode
    arch = spec.resolve_arch({})
    assert _meta_flops(spec, arch, "forward", batch=1000, seq=0) == \
        2 * 1000 * (32 * 64 + 64 * 64 + 64 * 1)


@pytest.mark.parametrize("name,gmacs", [("resnet18", 1.81), ("resnet50", 4.09),
                                        ("mobilenetv2", 0.30), ("vit-b16", 17.56)])
def test_vision_flops_match_torchvision_published(name, gmacs):
    """torchvision's model tables list 'GFLOPS' that are multiply-accumulates per 224 px
    image [R torchvision docs]; FlopCounterMode counts 2 FLOPs per MAC."""
    spec = get_model(name)
    flops = _meta_flops(spec, spec.resolve_arch({}), "forward", batch=1, seq=0)
    assert flops / 2e9 == pytest.approx(gmacs, rel=0.02)
