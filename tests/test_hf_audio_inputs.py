"""Issue 32 round 4: the audio inputs speech models' processors produce, and the families whose
capture failed with an unexpected error (each now captured or one clean line). Small sizes:
2 layers, a 2-second clip where the tower takes any length."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from dse.errors import BadInput
from workloads import hf, hf_experts

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import hf_type_sweep as sweep  # noqa: E402

SHORT = {"audio_seconds": 2.0}   # 200 mel frames, 32,000 samples at 16 kHz


def _small(model_type: str) -> dict:
    data, _ = sweep.config_of(model_type, {})
    if sweep.groups().get(model_type) == "causal":
        data = sweep.as_causal_lm(model_type, data)
    return sweep.small_config(data)


def _prepare(model_type: str, phase: str | None = None, media: dict | None = None, seq: int = 8,
             data: dict | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf.prepare(dict(data or _small(model_type)), phase, 1, seq, 16, None, media)


def _captured(p) -> tuple[int, bool]:
    """(our counted FLOPs, within 1 % of FlopCounterMode's) of a prepared module."""
    record: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = hf.capture_prepared(p, "bf16", "concat", record)
        flops = sum(op.flops for op in w.ops if op.kind in sweep.COUNTED_KINDS)
        ref = sweep._reference_flops(p, p.sizes["phase"], record["exported"])
    assert not isinstance(ref, str), ref
    return flops, abs(flops - ref[0]) <= 0.01 * ref[0]


def test_lfr_stacked_frames_major_features_for_fun_asr():
    """FunASR's extractor stacks 7 mel frames every 6 (LFR): 200 frames -> ceil(200 / 6) = 34
    rows of 80 x 7 = 560, with a frame mask of 34 (the getter requires one); one placeholder
    per projected row."""
    p = _prepare("fun_asr_nano", media=SHORT)
    assert p.kwargs["input_features"].shape == (1, 34, 560)
    assert p.module._constants["input_features_mask"].shape == (1, 34)
    assert p.kwargs["input_ids"].shape[1] > 8


def test_granite_speech_pairs_frames_and_refuses_a_projector_of_another_width():
    """transformers' default Granite Speech config gives its q-former projector Blip-2's
    encoder width 1408 against the encoder's 1024: one clean line. With the width the
    published checkpoints use (1024) it takes frame pairs, 200 frames -> 100 rows of 160, and
    captures."""
    data = _small("granite_speech")
    with pytest.raises(BadInput, match="encoder_hidden_size"):
        _prepare("granite_speech", media=SHORT, data=data)
    data["projector_config"] = {**data["projector_config"], "encoder_hidden_size": 1024}
    p = _prepare("granite_speech", media=SHORT, data=data)
    assert p.kwargs["input_features"].shape == (1, 100, 160)
    # 100 rows in windows of 15 -> 7 windows x 15 / 5 = 21 placeholders
    assert p.kwargs["input_ids"].shape == (1, 8 + 21)


def test_raw_samples_with_a_channel_axis_for_a_conv_front_end():
    """OmniASR's wav2vec-style front end takes ``[batch, 1, samples]`` (its extractor adds the
    channel): 2 s at 16 kHz, 320x downsampled -> 99 frames, one placeholder each."""
    p = _prepare("omniasr", media=SHORT)
    assert p.kwargs["input_values"].shape == (1, 1, 32000)
    assert p.kwargs["input_ids"].shape == (1, 8 + 99)


def test_streaming_speech_text_is_as_long_as_its_audio_rows():
    """Voxtral Realtime adds each audio row's embedding to one text token's: 200 frames, conv
    stride 2, 4 frames per row -> 25 tokens (no placeholders)."""
    p = _prepare("voxtral_realtime", media=SHORT)
    assert p.kwargs["input_ids"].shape == (1, 25)


def test_qwen2_audio_inline_tower_gets_its_placeholders_and_captures():
    """Qwen2-Audio runs its tower inside its forward (no getter) and keeps the rows by a mask
    of the clip lengths: 3,000 frames (its Whisper extractor pads every clip to 30 s) -> 1,500
    after the conv -> 750 pooled placeholders; the capture has no data-dependent row count and
    its FLOPs match FlopCounterMode's."""
    p = _prepare("qwen2_audio")
    assert p.kwargs["input_ids"].shape == (1, 8 + 750)
    flops, ok = _captured(p)
    assert flops > 0 and ok


def test_qwen_omni_audio_chunks_split_by_known_lengths():
    """Qwen2.5-Omni's audio tower splits its attention by chunk lengths computed from the clip
    length (``u16 > 1`` in an export when they are unknown): they are computed eagerly, and the
    thinker captures with FLOPs matching FlopCounterMode's."""
    p = _prepare("qwen2_5_omni_thinker", media=SHORT)
    flops, ok = _captured(p)
    assert flops > 0 and ok


def test_seq2seq_decode_hands_the_encoder_states_as_an_output_object():
    """Florence-2 reads ``encoder_outputs.last_hidden_state`` in decode (a plain tuple had no
    such attribute)."""
    p = _prepare("florence2", phase="decode")
    flops, ok = _captured(p)
    assert flops > 0 and ok


def test_probes_build_distributions_on_meta_tensors():
    """Gemma-3n's activation sparsity builds ``Normal(0, 1)`` in its forward: its argument
    check calls ``.item()``, which a meta-tensor probe cannot."""
    with hf.as_if_traced(), torch.device("meta"):
        normal = torch.distributions.normal.Normal(0, 1)
        assert normal.icdf(torch.tensor(0.9)).device.type == "meta"


def test_zamba_cut_keeps_two_hybrid_layers_of_its_tied_shared_block():
    small = _small("zamba")
    assert small["layers_block_type"].count("hybrid") == 2
    assert sweep._builds(small)


def test_drafter_reading_the_target_kv_is_refused_in_one_line():
    small = _small("gemma4_unified_assistant")
    assert sweep._builds(small)   # every layer KV-shared, as in the full config
    with pytest.raises(BadInput, match="shared_kv_states"):
        _prepare("gemma4_unified_assistant", phase="prefill", data=small)


def test_xlm_decode_is_refused_in_one_line():
    with pytest.raises(BadInput, match="re-running the whole sequence"):
        _prepare("xlm", phase="decode")


def test_jetmoe_experts_are_one_routed_moe_op_matching_transformers():
    """JetMoE's MLP experts (``JetMoeMoE``) as one ``moe`` op give transformers' result on a
    tiny CPU model; its mixture-of-attention gating runs with a balanced route, so the capture
    has no data-dependent split and both phases capture."""
    from transformers import JetMoeConfig
    from transformers.models.jetmoe.modeling_jetmoe import JetMoeMoE
    torch.manual_seed(0)
    config = JetMoeConfig(hidden_size=16, intermediate_size=24, num_local_experts=4,
                          num_experts_per_tok=2)
    block = JetMoeMoE(config)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        ref = block(x)
        with hf_experts.routed(block):
            out = block(x)
    assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
    for phase in ("prefill", "decode"):
        p = _prepare("jetmoe", phase=phase)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = hf.capture_prepared(p, "bf16", "concat", {})
        moe = [op for op in w.ops if op.kind == "moe"]
        assert len(moe) == 2 and all(op.attrs["top_k"] == 2 for op in moe)
        assert w.active_params < w.params and sweep._analytic_ok(w)
