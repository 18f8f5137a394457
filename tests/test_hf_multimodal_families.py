"""Issue 32, round 4: multimodal families whose forward needed more than pixels and token ids
(their processors' extra inputs, published placeholder ids, configs cut without breaking)."""

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from workloads import hf  # noqa: E402
import hf_type_sweep as sweep  # noqa: E402


def _small(model_type: str) -> dict:
    return sweep.small_config(sweep.config_of(model_type, sweep.published())[0])


def _prepared(data: dict, seq: int = 8):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf.prepare(dict(data), "forward", batch=1, seq=seq)


def test_cut_backbone_reads_its_last_kept_stage_and_token_offsets_stay():
    """TIPSv2's tower reads ``stage12`` (its 12th layer): cut to 2 layers it reads stage 2;
    Apertus-1.5's token offsets (131,272: where image codes start in the vocabulary) are not
    layer indices and stay; Jamba's ``attn_layer_offset`` still is one."""
    tips = _small("tipsv2")["vision_config"]
    assert tips["out_indices"] == [tips["num_hidden_layers"]] and "out_features" not in tips
    hf.make_config(_small("tipsv2"))   # transformers accepts the cut backbone
    apertus = _small("apertus1p5")
    assert apertus["image_token_offset"] == 131272 and apertus["audio_token_offset"] == 262344
    assert _small("jamba")["attn_layer_offset"] < _small("jamba")["num_hidden_layers"]


def test_kosmos2_image_rows_go_where_its_position_mask_says():
    """Kosmos-2 has no image token id: its processor marks the 64 positions of the image's
    latent queries (``latent_query_num``) in ``image_embeds_position_mask``, after
    ``<s><image>``."""
    data = _small("kosmos-2")
    p = _prepared(data)
    mask = p.module._constants["image_embeds_position_mask"]
    rows = data.get("latent_query_num", 64)
    assert p.kwargs["input_ids"].shape == (1, 8 + rows) and mask.shape == (1, 8 + rows)
    assert mask.sum().item() == rows and mask[0, 2:2 + rows].all()


def test_idefics_images_are_cross_attended_not_placeholders():
    p = _prepared(_small("idefics"))
    assert p.kwargs["pixel_values"].shape == (1, 1, 3, 224, 224)
    assert p.kwargs["image_attention_mask"].shape == (1, 8, 1)
    assert p.kwargs["input_ids"].shape == (1, 8)   # no placeholder rows in the text


def test_pi0_step_gets_robot_state_noise_and_the_vlm_image_rows():
    data = _small("pi0")
    p = _prepared(data)
    vision = data["vlm_config"]["vision_config"]
    rows = (vision["image_size"] // vision["patch_size"]) ** 2   # PaliGemma: 256 at 224 px
    assert p.kwargs["input_ids"].shape == (1, 8 + rows)
    assert p.kwargs["state"].shape == (1, data.get("max_state_dim", 32))
    noise = (data.get("chunk_size", 50), data.get("max_action_dim", 32))   # PI0Config defaults
    assert p.kwargs["noise"].shape[1:] == noise
    assert p.kwargs["pixel_values"].shape[:2] == (1, 1)


def test_videoprism_gets_a_clip_of_its_own_frames():
    data = _small("videoprism")
    p = _prepared(data)
    vision = data["vision_config"]
    size = vision["image_size"]
    assert p.kwargs["pixel_values_videos"].shape == (1, vision["num_frames"], 3, size, size)


def test_voxtral_published_config_gets_its_audio_placeholders():
    """Voxtral-Mini's published ``audio_token_id`` (24, its [AUDIO] token); 30 s of mel frames
    give 3,000 / 2 (conv stride) / 4 (the projector folds 4 frames) = 375 rows."""
    p = _prepared(_small("voxtral"))
    assert p.kwargs["input_features"].shape == (1, 128, 3000)
    assert p.kwargs["input_ids"].shape == (1, 8 + 375)


#: One cheap type per mechanism (the rest are in the all-types sweep).
CAPTURED = ["idefics", "pi0", "tipsv2", "voxtral"]


def test_these_types_capture_with_flops_within_one_percent_of_flopcountermode():
    rows = sweep.sweep(CAPTURED, phase="forward", simulate=False)
    assert [(r.model_type, r.status, bool(r.flops_ok)) for r in rows] == [
        (t, "captured", True) for t in CAPTURED], [(r.model_type, r.error) for r in rows]


def test_instructblip_gets_its_qformer_prompt_and_names_a_missing_placeholder_id():
    """InstructBLIP(-Video) takes the prompt's ids in the Q-Former's vocabulary beside the
    image (a 4-frame clip); its default config has no placeholder id, so that is one line
    naming the field. With an id set (any: the capture does not read its value, and no
    published config is claimed here) the text holds 32 query rows per image or frame."""
    from dse.errors import BadInput
    for model_type, key, frames in (("instructblip", "image_token_index", 0),
                                    ("instructblipvideo", "video_token_index", 4)):
        data = _small(model_type)
        with pytest.raises(BadInput, match=f"hf_config.{key}"):
            _prepared(data)
        p = _prepared({**data, key: 7})
        assert p.kwargs["qformer_input_ids"].shape == (1, 8)
        assert p.kwargs["input_ids"].shape == (1, 8 + 32 * max(frames, 1))
        assert p.kwargs["pixel_values"].dim() == (5 if frames else 4)


def test_apertus_media_are_tokenized_at_their_true_sizes():
    """Apertus-1.5 tokenizes an image (16 px patches: 224 / 16 = 14, 196 codes) and a clip at
    24 kHz (WavTokenizer: 40 codes a second) into the shared vocabulary; the image's true size
    and the clip's mask of valid samples are constants, and the audio tokenizer's conv sizes
    are read as constants (on meta its integer buffers have no values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = hf.prepare(_small("apertus1p5"), "forward", batch=1, seq=8,
                       media={"audio_seconds": 1.0})
    assert p.kwargs["input_values"].shape == (1, 1, 24000)
    assert p.module._constants["image_sizes"].tolist() == [[224, 224]]
    assert p.module._constants["padding_mask"].shape == (1, 24000)
    assert p.kwargs["input_ids"].shape == (1, 8 + 196 + 40)
    convs = [m for m in p.module.modules() if hasattr(m, "_conv_sizes")]
    assert convs and all(m.stride.device.type == "cpu" and "stride" not in m._buffers
                         for m in convs)
