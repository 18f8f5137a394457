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
