"""The image inputs each multimodal family's processor produces (``workloads.hf_inputs``), built
from transformers' default configs cut to 2 layers (the all-types sweep's cut), on meta
tensors: the layout, the CPU constants the tower reads, and the placeholder tokens the text
gets (one per feature row the tower returns)."""

import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from dse.errors import BadInput  # noqa: E402
from workloads import hf, hf_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import hf_type_sweep as sweep  # noqa: E402

SEQ = 8


def _default(model_type: str) -> dict:
    data, _ = sweep.config_of(model_type, {})
    return sweep.small_config(data)


def _prepared(model_type: str, data: dict | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf.prepare(data or _default(model_type), "forward", batch=1, seq=SEQ)


def _constants(p) -> dict:
    return {k: v.tolist() if isinstance(v, torch.Tensor) else v
            for k, v in p.module._constants.items()}


def test_videollama3_gets_each_images_merge_size():
    """VideoLLaMA3's getter requires ``image_merge_sizes``: 1 per image (its image processor's
    ``merge_size``), so 224 / 16 = 14 x 14 patches stay 196 tokens."""
    p = _prepared("video_llama_3")
    assert _constants(p) == {"image_grid_thw": [[1, 14, 14]], "image_merge_sizes": [1]}
    assert p.kwargs["input_ids"].shape == (1, SEQ + 196)


@pytest.mark.parametrize("model_type, patch, side, merge", [
    ("paddleocr_vl", 14, 26, 2),   # 384 px: 27 patches -> 26 (whole 2 x 2 merges)
    ("kimi_k25", 14, 16, 2),       # 224 px: 16 patches
])
def test_conv2d_patch_embeds_get_each_patch_as_an_image(model_type, patch, side, merge):
    """PaddleOCR-VL and Kimi-K2.5 embed each patch with a ``Conv2d``: the Qwen-VL-style patches
    as ``[n, C, patch, patch]`` (Kimi's tower also pools frames with ``index_add`` on offsets
    made from the CPU grid)."""
    p = _prepared(model_type)
    assert p.kwargs["pixel_values"].shape == (side * side, 3, patch, patch)
    assert _constants(p)["image_grid_thw"] == [[1, side, side]]
    assert p.kwargs["input_ids"].shape == (1, SEQ + side * side // merge ** 2)


def test_granite_docling_gets_one_real_tile_per_image():
    p = _prepared("granite_docling")
    assert p.kwargs["pixel_values"].shape[:2] == (1, 1)
    assert _constants(p)["pixel_attention_mask"] == [[True]]


def test_deepseek_vl_hybrid_gets_high_res_images_and_keeps_the_global_layer_read():
    """The SAM tower's 1024 px image, and the cut keeps its layers up to the first global one
    (index 2), whose hidden state the model reads."""
    data = _default("deepseek_vl_hybrid")
    assert data["high_res_vision_config"]["num_hidden_layers"] == 3
    assert data["high_res_vision_config"]["global_attn_indexes"] == [2]
    p = _prepared("deepseek_vl_hybrid", data)
    assert p.kwargs["high_res_pixel_values"].shape == (1, 3, 1024, 1024)


def test_lfm2_vl_gets_naflex_patches_of_one_full_tile():
    """512 px (its processor's tile): 32 x 32 patches of 16 px, no padding patch, 2 x 2 merged
    to 256 tokens."""
    p = _prepared("lfm2_vl")
    assert p.kwargs["pixel_values"].shape == (1, 1024, 3 * 16 * 16)
    c = _constants(p)
    assert c["spatial_shapes"] == [[32, 32]]
    assert len(c["pixel_attention_mask"][0]) == 1024 and all(c["pixel_attention_mask"][0])
    assert p.kwargs["input_ids"].shape == (1, SEQ + 256)
    with pytest.raises(BadInput, match="image_size"):   # padded by its processor
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf.prepare(_default("lfm2_vl"), "forward", batch=1, seq=SEQ,
                       media={"image_size": 384})


@pytest.mark.parametrize("model_type, pixels, grid", [
    ("inkling2", (36, 40, 40, 3), [[1, 6, 6]]),          # 224 px padded to 6 x 6 blocks of 40
    ("inkling_mm_model", (36, 2, 40, 40, 3), None),      # 40 px patches repeated over time
])
def test_inkling_images_in_whole_blocks(model_type, pixels, grid):
    p = _prepared(model_type)
    assert p.kwargs["pixel_values"].shape == pixels
    assert _constants(p).get("image_grid_thw") == grid
    assert p.kwargs["input_ids"].shape == (1, SEQ + 36)


def test_molmo2_crops_and_pooling_windows():
    """A 378 px image: its global view and one crop of 27 x 27 patches, each pooled in 2 x 2
    windows to 14 x 14 tokens (the last row and column overhang: -1)."""
    p = _prepared("molmo2")
    assert p.kwargs["pixel_values"].shape == (2, 729, 3 * 14 * 14)
    c = _constants(p)
    assert c["image_grids"] == [[14, 14, 14, 14]]
    pooling = c["image_token_pooling"]
    assert len(pooling) == 392 and pooling[0] == [0, 1, 27, 28] and pooling[13] == [26, -1, 53, -1]
    assert pooling[196] == [729, 730, 756, 757]
    assert p.kwargs["input_ids"].shape == (1, SEQ + 392)
    # an 800 px image: no tiling of at most 8 crops covers it, the widest is 2 x 2
    assert hf_inputs._molmo2_tiling(800 - 8 * 14, 19 * 14, 8) == (2, 2)


@pytest.mark.parametrize("model_type, field", [
    ("ovis2", "hf_config.hidden_size"),
    ("shieldgemma2", "hf_config.mm_tokens_per_image"),
])
def test_inconsistent_default_configs_are_refused_naming_the_field(model_type, field):
    with pytest.raises(BadInput, match=field.replace(".", r"\.")):
        _prepared(model_type)


def test_ernie45_vl_temporal_slicing_is_captured_with_known_offsets():
    """ERNIE-4.5-VL's resampler gathers rows by offsets it computes from the patch grid: found
    on the real grid, they are constants of the capture (traced, they are unbacked ints and the
    graph has data-dependent shapes). FLOPs equal FlopCounterMode's on the exported graph."""
    row = sweep.Case("ernie4_5_vl_moe", "multimodal", "forward", "")
    sweep._capture_check(row, _default("ernie4_5_vl_moe"), "forward", simulate=False)
    assert row.status == "captured" and row.flops_ok, row.error
