"""Quality proxies: Chinchilla loss, NASWOT, neural-field image fit, user functions."""

import math

import pytest
import torch
from torch import nn

from dse.errors import BadInput
from dse.quality import QualityConfig, QualityModel, count_params, load_function
from dse.quality.chinchilla import loss_nats
from dse.quality.fieldfit import corner_tables, encode, fit_arch, fit_psnr
from dse.quality.naswot import naswot_score
from workloads.zoo import get_model


def test_chinchilla_loss_of_chinchilla_and_gopher():
    # L = 1.69 + 406.4 / N^0.34 + 410.7 / D^0.28 (Hoffmann et al. 2022, eq. 10), by hand:
    # Chinchilla 70e9 params, 1.4e12 tokens: 1.69 + 0.08355 + 0.16310 = 1.9366
    assert loss_nats(70e9, 1.4e12) == pytest.approx(1.9366, abs=2e-4)
    # Gopher 280e9 params, 300e9 tokens: worse than Chinchilla at ~the same compute
    assert loss_nats(280e9, 300e9) == pytest.approx(1.9933, abs=2e-4)
    assert loss_nats(280e9, 300e9) > loss_nats(70e9, 1.4e12)
    # the irreducible loss is the limit
    assert loss_nats(1e40, 1e40) == pytest.approx(1.69, abs=1e-6)
    with pytest.raises(BadInput):
        loss_nats(0, 1e9)


def test_llm_quality_is_relative_to_the_zoo_reference():
    spec = get_model("gpt2")
    assert count_params(spec, spec.arch) == spec.published_params  # 124,439,808, tied head
    q = QualityModel(QualityConfig())
    ref = q("gpt2", dict(spec.arch))
    assert ref.method == "chinchilla" and ref.value == pytest.approx(1.0)
    n = spec.published_params
    assert ref.raw == pytest.approx(loss_nats(n, 20 * n))
    small = q("gpt2", {**spec.arch, "n_layer": 6})
    big = q("gpt2", {**spec.arch, "n_layer": 24})
    assert small.value < 1.0 < big.value
    fixed = QualityModel(QualityConfig(tokens=1e9))("gpt2", dict(spec.arch))
    assert fixed.raw == pytest.approx(loss_nats(n, 1e9))


def test_naswot_separates_inputs_only_when_the_codes_differ():
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
    score = naswot_score(net, x)
    assert math.isfinite(score) and score > 0
    dead = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
    nn.init.zeros_(dead[0].weight)
    nn.init.zeros_(dead[0].bias)
    assert naswot_score(dead, x) == -math.inf  # every input has the same code: K singular
    # K is counted as documented: with one unit per input sign, K[i, j] = agreements
    codes_net = nn.Sequential(nn.Identity(), nn.ReLU())
    xs = torch.tensor([[1.0, -1.0], [1.0, 1.0]])
    # K = [[2, 1], [1, 2]] -> det 3
    assert naswot_score(codes_net, xs) == pytest.approx(math.log(3.0))


def test_naswot_rates_a_zoo_cnn_and_prefers_the_wider_one():
    q = QualityModel(QualityConfig())
    spec = get_model("resnet18")
    narrow = q("resnet18", {**spec.arch, "base_width": 16})
    ref = q("resnet18", dict(spec.arch))
    assert narrow.method == "naswot" and math.isfinite(narrow.raw)
    assert ref.value == pytest.approx(1.0)
    assert narrow.value < 1.0  # fewer rectified units separate the batch less


def test_fit_encoding_equals_the_reference_op():
    from workloads.hashgrid_op import encode_reference
    from workloads.zoo.definitions.neural_fields import GridEncoding
    arch = fit_arch({**get_model("gia").arch, "log2_table_size": 10, "levels": 6}, px=32)
    enc = GridEncoding(arch, dims=2)
    nn.init.uniform_(enc.table, -1, 1)
    pos = torch.rand(300, 2)
    idx, w = corner_tables(pos, enc.resolutions, enc.table.shape[1], enc.dense)
    ref = encode_reference(pos, enc.table, enc.levels, enc.features, enc.log2_table_size,
                           enc.base, enc.scale, enc.dense)
    assert torch.allclose(encode(enc.table, idx, w), ref, atol=1e-6)


def test_psnr_improves_with_steps():
    torch.set_num_threads(1)  # as QualityModel runs it
    arch = {**get_model("gia").arch, "levels": 4, "log2_table_size": 10, "hidden": 16,
            "base_resolution": 4, "finest_resolution": 32}
    few, many = fit_psnr(arch, 5, px=32), fit_psnr(arch, 80, px=32)
    assert many > few + 3.0
    assert fit_psnr(arch, 5, px=32) == few  # deterministic


def user_quality(arch):
    return arch["n_layer"] / 10 + 0.5


def test_user_python_quality_is_used_as_is():
    q = QualityModel(QualityConfig(python="tests.test_quality:user_quality"))
    v = q("gpt2", {**get_model("gpt2").arch, "n_layer": 3})
    assert (v.value, v.method) == (pytest.approx(0.8), "python")
    with pytest.raises(BadInput, match="cannot import"):
        load_function("no_such_module_xyz:f")
    with pytest.raises(BadInput, match="has no function"):
        load_function("tests.test_quality:nothing_here")


def test_encoders_have_no_builtin_proxy():
    with pytest.raises(BadInput, match="no built-in quality proxy"):
        QualityModel(QualityConfig())("bert-base", dict(get_model("bert-base").arch))
