"""The inputs of multimodal families whose processors produce more than pixel values and
placeholder token ids (:mod:`workloads.hf_inputs` builds those), each built from the config:

* **cross-attended images** (Idefics: a perceiver's latents that the text cross-attends; no
  placeholder rows in the text);
* **a position mask** instead of placeholder ids (Kosmos-2's ``image_embeds_position_mask``);
* **a robot action step** (PI0: camera image and mask, robot state, noise, timestep);
* **a video clip** where the forward requires ``pixel_values_videos`` (VideoPrism);
* **a Q-Former prompt** (InstructBLIP, InstructBLIP-Video: the prompt's ids in the Q-Former's
  own vocabulary beside the image or 4-frame clip);
* **tokenized media** (Apertus-1.5: an image and a clip turned into token ids of the shared
  vocabulary by VQ tokenizers, each with its true size).

:func:`family_inputs` returns (meta inputs, CPU constants, placeholder rows per sequence) for
such a model, None for any other; the model's generic image part is then not built.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dse.errors import BadInput
from workloads.hf_inputs import (DEFAULT_AUDIO_S, _feature_rows, _int, _required, _sub, accepts,
                                 getter_of, image_part, masks_all_true, placeholder_tokens,
                                 token_id, vision_helpers_eager)

Part = tuple[dict[str, torch.Tensor], dict[str, Any], int]


def family_inputs(model: nn.Module, config, batch: int, seq: int, media: dict[str, Any]
                  ) -> Part | None:
    """The first family layout ``model`` takes (see the module docstring), else None
    (``media``: ``image_size``, ``audio_seconds``)."""
    for build in (cross_attended_images, position_masked_images, robot_step, video_clip,
                  qformer_prompted):
        part = build(model, config, batch, seq, media.get("image_size"))
        if part is not None:
            return part
    return tokenized_media(model, config, batch, media)


def cross_attended_images(model: nn.Module, config, batch: int, seq: int,
                          image_size: int | None) -> Part | None:
    """A Flamingo-style model's images (Idefics): one image per sequence
    ``[batch, 1, C, H, W]`` and ``image_attention_mask`` ``[batch, seq, 1]``, every text token
    after the image (its processor puts it first) attending to it; no placeholder rows
    [R transformers ``IdeficsProcessor``]."""
    if not {"image_attention_mask", "perceiver_embeddings", "pixel_values"} <= accepts(model):
        return None
    pixels = image_part(model, config, batch, image_size)[0]["pixel_values"]
    return {"pixel_values": pixels[:, None],
            "image_attention_mask": torch.ones(batch, seq, 1, dtype=torch.long)}, {}, 0


#: A forward that takes the image rows' positions as a mask instead of placeholder token ids.
POSITION_MASK = "image_embeds_position_mask"


def position_masked_images(model: nn.Module, config, batch: int, seq: int,
                           image_size: int | None) -> Part | None:
    """Kosmos-2's image and ``image_embeds_position_mask`` (a CPU constant: the rows are written
    where it is set, ``embeds[mask] = image``): its processor puts ``<s><image>``, one position
    per image feature row (the tower's ``latent_query_num``, counted by running it on meta
    tensors), then ``</image>`` and the text [R transformers ``Kosmos2Processor``]."""
    if not {POSITION_MASK, "pixel_values", "input_ids"} <= accepts(model):
        return None
    tensors, const = image_part(model, config, batch, image_size)
    rows = placeholder_tokens(model, "get_image_features", tensors, const) // batch
    return tensors, {**const, POSITION_MASK: position_mask(batch, seq + rows, rows)}, rows


def position_mask(batch: int, tokens: int, rows: int) -> torch.Tensor:
    """``[batch, tokens]``, set on the ``rows`` positions after ``<s><image>``."""
    mask = torch.zeros(batch, tokens, dtype=torch.long, device="cpu")
    start = max(0, min(2, tokens - rows))
    mask[:, start:start + rows] = 1
    return mask


def robot_step(model: nn.Module, config, batch: int, seq: int, image_size: int | None
               ) -> Part | None:
    """A vision-language-action model's forward (PI0: one flow-matching step of its action
    expert over the VLM's prefix) on what its processor produces: one camera image per
    sequence ``[batch, 1, C, H, W]`` with ``pixel_attention_mask`` ``[batch, 1]``, the robot
    ``state`` zero-padded to ``max_state_dim``, and the step's ``noise``
    ``[batch, chunk_size, max_action_dim]`` and ``timestep``; the text holds one placeholder
    per row of the VLM tower's features (the processor's ``image_seq_length``)
    [R transformers ``PI0Processor``, ``PI0ForConditionalGeneration.sample_actions``]."""
    vlm = getattr(getattr(model, "model", None), "vlm", None)
    if vlm is None or not {"state", "noise", "timestep", "pixel_attention_mask"} <= accepts(model):
        return None
    vlm_config = getattr(config, "vlm_config", None)
    image = image_part(vlm, vlm_config, batch, image_size)[0]["pixel_values"]
    from workloads.hf import as_if_traced
    with as_if_traced(), torch.no_grad():
        rows = _feature_rows(vlm.get_image_features(pixel_values=image.to("meta")))
    return {"pixel_values": image[:, None],
            "pixel_attention_mask": torch.ones(batch, 1, dtype=torch.bool),
            "state": torch.zeros(batch, config.max_state_dim),
            "noise": torch.zeros(batch, config.chunk_size, config.max_action_dim),
            "timestep": torch.zeros(batch)}, {}, rows // batch


def video_clip(model: nn.Module, config, batch: int, seq: int, image_size: int | None
               ) -> Part | None:
    """One clip per sequence, ``pixel_values_videos`` ``[batch, frames, C, H, W]``, where the
    forward requires one (VideoPrism's CLIP-style video-text model): the tower's own
    ``num_frames`` at its ``image_size``, as its processor samples and resizes
    [R transformers ``VideoPrismVideoProcessor``]. Models that take images or videos get
    images (the generic image part)."""
    forward = getattr(model, "forward", None)
    if forward is None or "pixel_values_videos" not in _required(forward):
        return None
    vc = _sub(config, "vision_config") or config
    frames = _int(getattr(vc, "num_frames", None), 16)
    pixels = image_part(model, config, batch, image_size)[0]["pixel_values"]
    return {"pixel_values_videos": torch.zeros(batch, frames, *pixels.shape[1:])}, {}, 0


#: Frames an InstructBLIP-Video clip has ("InstrucBLIP works with 4 frames only"
#: [R transformers ``InstructBlipVideoProcessor``]).
QFORMER_VIDEO_FRAMES = 4


def qformer_prompted(model: nn.Module, config, batch: int, seq: int, image_size: int | None
                     ) -> Part | None:
    """InstructBLIP's inputs: the image (InstructBLIP-Video: a clip of 4 frames
    ``[batch, 4, C, H, W]``), the prompt's ``seq`` ids in the Q-Former's vocabulary
    (``qformer_input_ids``: its processor tokenizes the same prompt with the Q-Former's
    tokenizer), and one placeholder per query row the tower returns (``num_query_tokens`` per
    image or frame) [R transformers ``InstructBlipProcessor``, ``InstructBlipVideoProcessor``].
    The placeholder id must be set (the default config has none): else one line naming it."""
    if not {"qformer_input_ids", "pixel_values", "input_ids"} <= accepts(model):
        return None
    video = getter_of(model, "get_video_features") is not None
    what, key = ("video", "video_token_index") if video else ("image", "image_token_index")
    if token_id(config, key, key.replace("_index", "_id")) is None:
        raise BadInput(f"hf_config.{key}", None, f"the {what} placeholder token id the "
                       f"{config.model_type} processor puts in the text (an int)")
    pixels = image_part(model, config, batch, image_size)[0]["pixel_values"]
    if video:
        pixels = torch.zeros(batch, QFORMER_VIDEO_FRAMES, *pixels.shape[1:])
    tensors = {"pixel_values": pixels,
               "qformer_input_ids": torch.zeros(batch, seq, dtype=torch.long)}
    getter = "get_video_features" if video else "get_image_features"
    return tensors, {}, placeholder_tokens(model, getter, tensors, {}) // batch


def tokenized_media(model: nn.Module, config, batch: int, media: dict[str, Any]) -> Part | None:
    """Apertus-1.5's inputs: one image per sequence ``[batch, C, H, W]`` with its true size
    ``image_sizes`` (a CPU constant: each image is tokenized at its own size,
    ``image_sizes.tolist()``) and one clip of raw samples ``[batch, 1, samples]`` at the audio
    tokenizer's ``sampling_rate`` (24 kHz; ``--audio-seconds``, default 30 s) with the feature
    extractor's ``padding_mask`` of valid samples (a CPU constant, all ones: the clip's length
    is read from it); the text holds one placeholder per image and audio token the tokenizers
    emit [R transformers ``Apertus1p5Processor``, ``Apertus1p5Model.get_audio_tokens``]. The
    audio tokenizer's conv sizes become constants (:func:`conv_sizes_as_constants`)."""
    names = accepts(model)
    if not {"pixel_values", "image_sizes", "input_values", "padding_mask"} <= names:
        return None
    conv_sizes_as_constants(model)
    image = image_part(model, config, batch, media.get("image_size"))[0]
    size = image["pixel_values"].shape[-1]
    ac = _sub(config, "audio_config") or config
    samples = int(_int(getattr(ac, "sampling_rate", None), 24000)
                  * (media.get("audio_seconds") or DEFAULT_AUDIO_S))
    audio = {"input_values": torch.zeros(batch, 1, samples)}
    constants = {"image_sizes": torch.tensor([[size, size]] * batch, device="cpu"),
                 "padding_mask": torch.ones(batch, samples, dtype=torch.long, device="cpu")}
    with vision_helpers_eager(), masks_all_true():
        rows = (placeholder_tokens(model, "get_image_features", image,
                                   {"image_sizes": constants["image_sizes"]})
                + placeholder_tokens(model, "get_audio_features", audio,
                                     {"padding_mask": constants["padding_mask"]}))
    return {**image, **audio}, constants, rows // batch


def conv_sizes_as_constants(model: nn.Module) -> None:
    """Padded 1-D convs that keep their stride and (dilated) kernel size as integer buffers
    (WavTokenizer's: its padding is computed from them, ``max(pad_left, pad_right)``): on the
    meta device those have no values, and an export's buffers carry none, so each becomes a
    tensor made from the conv's own values when read (``torch.tensor``, which a capture keeps
    as a constant) [R transformers ``WavTokenizerConv1d.__init__``]."""
    for m in model.modules():
        conv = getattr(m, "conv", None)
        if not isinstance(conv, nn.Conv1d) or not set(_CONV_SIZES) <= set(m._buffers):
            continue
        kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
        for name in _CONV_SIZES:
            del m._buffers[name]
        m._conv_sizes = dict(zip(_CONV_SIZES, (conv.stride[0], kernel, kernel - conv.stride[0])))
        m.__class__ = _with_constant_sizes(type(m))


_CONV_SIZES = ("stride", "kernel_size", "padding_total")
_CONSTANT_SIZE_CLASSES: dict[type, type] = {}


def _with_constant_sizes(cls: type) -> type:
    """``cls`` with :data:`_CONV_SIZES` read as CPU tensors of ``self._conv_sizes``."""
    if cls not in _CONSTANT_SIZE_CLASSES:
        def size(name):
            return property(lambda self: torch.tensor(self._conv_sizes[name], dtype=torch.int64,
                                                      device="cpu"))
        _CONSTANT_SIZE_CLASSES[cls] = type(cls.__name__, (cls,),
                                           {n: size(n) for n in _CONV_SIZES})
    return _CONSTANT_SIZE_CLASSES[cls]
