"""The inputs a multimodal model's processor would produce, built from its config (no
processor, tokenizer or image is loaded): pixel values at the vision tower's image size, the
patch grid of Qwen-VL-style towers, mel frames or raw samples for audio towers, and token ids
holding as many image / audio placeholder tokens as the towers emit features.

* **pixel values** — ``[batch, channels, H, W]`` at ``image_size`` (``--image-size``; default
  the vision config's, rounded up to whole pixel-shuffle blocks where a connector folds
  ``scale_factor`` x ``scale_factor`` patches (Idefics3, SmolVLM), or the smallest patch count
  Aria's projector has queries for); Qwen-VL-style models (a forward taking
  ``image_grid_thw``) take the flattened patches ``[batch * t * h * w, channels * temporal_patch * patch**2]`` and the grid
  ``[[1, h, w]]`` (``h = w = image_size / patch``, rounded to the spatial merge);
  LLaVA-NeXT-style ones (``image_sizes``) one tile per image with its size.
* **audio** — ``input_features`` ``[batch, mel bins, frames]`` (``--frames``, or
  ``--audio-seconds`` at 100 frames per second [R: Whisper's 10 ms hop, 160 samples at
  16 kHz]; default the tower's own frames, e.g. Whisper's 3,000), with a mask of every frame
  where the forward takes one (``input_features_mask``: Qwen3-ASR, GLM-ASR), or
  ``input_values`` ``[batch, 16 kHz * seconds]``; where the tower takes neither, the
  frames-major features of Conformer / Paraformer-style extractors (``[batch, rows, width]``,
  frames stacked as the extractor stacks them: FunASR, Granite Speech, Nemotron) or samples
  with a channel axis ``[batch, 1, samples]`` (OmniASR, VibeVoice) (:func:`audio_layouts`).
* **family layouts** — processors no generic layout matches (:data:`FAMILY_LAYOUTS`):
  NaFlex patches with their grid and mask (LFM2-VL), Molmo2's crops and pooling windows,
  Inkling's padded blocks, a high-res second image (DeepSeek-VL-Hybrid), a tile mask
  (GraniteDocling); defaults whose widths do not fit are refused naming the field.
* **placeholder tokens** — the tower is run once on meta tensors (``get_image_features`` /
  ``get_audio_features``) and the text gets one ``image_token_id`` (``audio_token_id``) per
  feature row it returns, after ``seq`` text tokens: what a processor's prompt expansion does.

Integer inputs whose values the model reads as sizes (the grid, image sizes, audio masks) are
kept on the CPU as constants of a wrapper module (:class:`WithConstants`), so the export reads
their values; everything else is on the meta device. Inputs are built without padding, so the
masks a tower derives from them are all true (:func:`towers_masks_all_true`).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from typing import Any, Iterator

import torch
from torch import nn

#: Audio defaults: 16 kHz samples, 100 mel frames per second [R: Whisper feature extractor].
SAMPLE_RATE = 16000
FRAMES_PER_S = 100
DEFAULT_AUDIO_S = 30.0
DEFAULT_IMAGE_SIZE = 224
#: LFM2-VL's image tile (px) [R transformers ``Lfm2VlImageProcessor.tile_size``].
LFM2_VL_TILE_PX = 512
#: The most elements a constant of the capture (``cu_seqlens`` and the like: one entry per
#: image, frame or attention window) keeps its values through an export's fake mode.
CONSTANT_ELEMENTS = 1 << 16


class WithConstants(nn.Module):
    """``model(**inputs, **constants, **options)``: ``constants`` are CPU tensors or Python
    values the export treats as constants (their values are read: a Qwen-VL patch grid, the
    image sizes of a LLaVA-NeXT)."""

    def __init__(self, model: nn.Module, constants: dict[str, Any], options: dict[str, Any]):
        super().__init__()
        self.model, self.options = model, options
        self._constants = dict(constants)

    def forward(self, **inputs):
        constants = {k: _constant(v) if isinstance(v, torch.Tensor) else v   # values kept
                     for k, v in self._constants.items()}
        out = self.model(**inputs, **constants, **self.options)
        for name in ("logits", "logits_per_image", "last_hidden_state"):
            if getattr(out, name, None) is not None:
                return getattr(out, name)
        return out[0] if isinstance(out, (tuple, list)) else out


def accepts(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _int(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)) and value:
        value = value[-1]
    if isinstance(value, dict):
        value = value.get("height") or value.get("shortest_edge") or default
    return int(value) if isinstance(value, (int, float)) and value > 0 else default


def _sub(config, *names):
    for n in names:
        sub = getattr(config, n, None)
        if sub is not None:
            return sub
    return None


def image_part(model: nn.Module, config, batch: int, image_size: int | None
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(meta inputs, CPU constants) of one image per sequence."""
    vc = _sub(config, "vision_config") or config
    size = image_size or _int(getattr(vc, "image_size", None), DEFAULT_IMAGE_SIZE)
    channels = _int(getattr(vc, "num_channels", None) or getattr(vc, "in_channels", None)
                    or getattr(vc, "in_chans", None), 3)
    patch = _int(getattr(vc, "patch_size", None), 14)
    shuffle = getattr(config, "scale_factor", None)
    if image_size is None and isinstance(shuffle, int) and shuffle > 1:
        step = patch * shuffle   # a pixel-shuffle connector folds shuffle x shuffle patches
        size = -(-size // step) * step
    queries = getattr(config, "projector_patch_to_query_dict", None)
    if image_size is None and isinstance(queries, dict) and queries:
        # Aria's projector takes only the patch counts it has queries for (its processor
        # resizes to 490 or 980 px): the smallest at least the tower's own, else the largest
        counts = sorted(int(k) for k in queries)
        n = next((c for c in counts if c >= (size // patch) ** 2), counts[-1])
        size = math.isqrt(n) * patch
    names = accepts(model)
    if "image_grid_thw" in names:
        merge = _int(getattr(vc, "spatial_merge_size", None) or getattr(vc, "merge_size", None), 1)
        side = max(merge, (size // patch) // merge * merge)
        temporal = _int(getattr(vc, "temporal_patch_size", None)
                        or getattr(vc, "patch_temporal", None), 1)
        pixels = torch.zeros(batch * side * side, channels * temporal * patch * patch)
        grid = {"image_grid_thw": torch.tensor([[1, side, side]] * batch, device="cpu")}
        if "image_merge_sizes" in names:   # VideoLLaMA3: each image's merge (its image
            # processor's ``merge_size`` 1 for images; 2 is for videos)
            grid["image_merge_sizes"] = torch.tensor([merge] * batch, device="cpu")
        return {"pixel_values": pixels}, grid
    if "image_sizes" in names and tiled(model):
        tiles = num_tiles(model, config, size)
        tile = _int(getattr(vc, "image_size", None), size)
        return ({"pixel_values": torch.zeros(batch, tiles, channels, tile, tile)},   # sizes
                {"image_sizes": [[size, size]] * batch})   # as Python ints: read per image
    return {"pixel_values": torch.zeros(batch, channels, size, size)}, {}


def image_layouts(model: nn.Module, config, batch: int, image_size: int | None
                  ) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
    """The image inputs processors produce, most likely first: :func:`image_part`, then one
    image per sequence as ``[batch, images, C, H, W]`` (Idefics, SmolVLM), each with the
    image sizes a getter requires (Pixtral-style towers: ``image_sizes``)."""
    first, const = image_part(model, config, batch, image_size)
    out = [(first, const)]
    pixels = first["pixel_values"]
    if pixels.dim() == 4 and not const:
        out.append(({"pixel_values": pixels[:, None]}, {}))
    if "image_grid_thw" in const:   # each patch as an image (PaddleOCR-VL, Kimi-K2.5)
        out.append(({"pixel_values": patches_as_images(config, pixels)}, const))
    # the parameters the getter requires (the inner model's, where the outer one passes *args)
    needs = set().union(*(_required(f) for f in (getattr(m, "get_image_features", None)
                                                  for m in (model, getattr(model, "model", None)))
                          if f is not None))
    family = FAMILY_LAYOUTS.get(getattr(config, "model_type", None))
    if family is not None:   # a processor whose inputs no generic layout above makes
        out.insert(0, family(config, batch, first, const, image_size))
    if "target_sizes" in needs:   # NaViT-packed (MiniCPM-V 4.6+): see navit_part
        out.insert(0, navit_part(config, batch, pixels.shape[1], pixels.shape[-1]))
    if "image_sizes" in needs:   # as Python ints, read per image
        size = pixels.shape[-1]
        out = [(t, {"image_sizes": [[size, size]] * batch, **c}) for t, c in out]
    return out


def patches_as_images(config, pixels: torch.Tensor) -> torch.Tensor:
    """Flattened patches ``[n, C * temporal * patch**2]`` as a Qwen-VL-style processor's
    patches for towers whose patch embedding is a ``Conv2d`` on each patch: ``[n, C, patch,
    patch]`` (temporal 1), ``[n, C, temporal, patch, patch]`` otherwise [R transformers
    ``PaddleOCRVisionEmbeddings``, ``Kimi_K25VisionPatchEmbed``]."""
    vc = _sub(config, "vision_config") or config
    patch = _int(getattr(vc, "patch_size", None), 14)
    temporal = pixels.shape[-1] // (patch * patch * _int(
        getattr(vc, "num_channels", None) or getattr(vc, "in_channels", None), 3))
    shape = (patch, patch) if temporal == 1 else (temporal, patch, patch)
    return pixels.reshape(pixels.shape[0], -1, *shape)


def _tiles_mask(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
                image_size: int | None
                ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One tile per image ``[batch, 1, C, H, W]`` and the mask of real tiles
    ``pixel_attention_mask`` ``[batch, 1]`` (bool, a CPU constant: the tower splits its
    features by the tiles per image) [R transformers ``GraniteDoclingModel.get_image_features``]."""
    pixels = first["pixel_values"]
    return {"pixel_values": pixels[:, None]}, {
        **const, "pixel_attention_mask": torch.ones(batch, 1, dtype=torch.bool, device="cpu")}


def _high_res(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
              image_size: int | None
              ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The low-res image and the same image at the high-res (SAM) tower's size,
    ``high_res_pixel_values`` ``[batch, C, H', W']`` [R transformers
    ``DeepseekVLHybridImageProcessor`` (``high_res_size`` 1024 = its tower's ``image_size``)]."""
    hc = getattr(config, "high_res_vision_config", None)
    pixels = first["pixel_values"]
    size = _int(getattr(hc, "image_size", None), 1024)
    channels = _int(getattr(hc, "num_channels", None), pixels.shape[1])
    return {**first, "high_res_pixel_values": torch.zeros(batch, channels, size, size)}, const


def _naflex(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
            image_size: int | None
            ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """SigLIP2-NaFlex patches (LFM2-VL) of one 512 px image, its processor's ``tile_size``,
    whose 32 x 32 patches fill its ``max_num_patches`` 1024 (no padding patch):
    ``[batch, 1024, C * 16**2]``, the patch grid ``spatial_shapes`` ``[[32, 32]] * batch`` and
    ``pixel_attention_mask`` (ones), both CPU constants [R transformers
    ``Lfm2VlImageProcessor`` (``tile_size`` 512, ``encoder_patch_size`` 16)]. Other sizes are
    refused: the processor pads smaller images' patches to 1024, which the tower's token
    gather reads on the meta device, and tiles larger ones."""
    vc = _sub(config, "vision_config") or config
    patch = _int(getattr(vc, "patch_size", None), 16)
    if image_size not in (None, LFM2_VL_TILE_PX):
        from dse.errors import BadInput
        raise BadInput("image_size", image_size, f"{LFM2_VL_TILE_PX} (one LFM2-VL tile; its "
                       "processor pads or tiles other sizes, not modelled)")
    side = LFM2_VL_TILE_PX // patch
    return {"pixel_values": torch.zeros(batch, side * side, first["pixel_values"].shape[1]
                                        * patch * patch)}, {
        "spatial_shapes": torch.tensor([[side, side]] * batch, device="cpu"),
        "pixel_attention_mask": torch.ones(batch, side * side, dtype=torch.int32, device="cpu")}


def _merged_blocks(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
                   image_size: int | None
                   ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Inkling-2's layout: the image padded (not resized) to whole ``merge * patch`` blocks,
    one block per image token ``[batch * r * r, merge * patch, merge * patch, C]``, and the
    grid in tokens ``[[1, r, r]] * batch`` (``r = ceil(size / (merge * patch))``; the tower
    multiplies it by ``merge``) [R transformers ``Inkling2ImageProcessor`` (``size`` 40 =
    ``patch_size`` 20 x ``spatial_merge_size`` 2), ``Inkling2VisionModel.forward``]. Inkling
    (``temporal_patch_size``): one 40 px patch per token, repeated over time,
    ``[batch * r * r, temporal, patch, patch, C]``, no grid [R ``InklingImageProcessor``]."""
    vc = _sub(config, "vision_config") or config
    block = _int(getattr(vc, "patch_size", None), 20) * _int(
        getattr(vc, "spatial_merge_size", None), 1)
    channels = _int(getattr(vc, "num_channels", None), 3)
    size = image_size or _int(getattr(vc, "image_size", None), DEFAULT_IMAGE_SIZE)
    r = -(-size // block)
    if hasattr(vc, "temporal_patch_size"):   # Inkling: each block repeated over time, no grid
        temporal = _int(vc.temporal_patch_size, 1)
        return {"pixel_values": torch.zeros(batch * r * r, temporal, block, block, channels)}, {}
    return {"pixel_values": torch.zeros(batch * r * r, block, block, channels)}, {
        "image_grid_thw": torch.tensor([[1, r, r]] * batch, device="cpu")}


def _molmo2_tiling(side: int, window: int, max_crops: int) -> tuple[int, int]:
    """The crop tiling Molmo2 picks for a square image [R transformers Molmo2 ``select_tiling``]."""
    import itertools
    tilings = sorted(((h, w) for h, w in itertools.product(range(1, max_crops + 1), repeat=2)
                      if h * w <= max_crops), key=lambda x: (x[0] * x[1], x[0]))
    scales = [min(h * window, w * window) / side for h, w in tilings]
    if all(x < 1 for x in scales):
        return tilings[max(range(len(scales)), key=scales.__getitem__)]
    return tilings[min(range(len(scales)), key=lambda i: scales[i] if scales[i] >= 1 else 1e10)]


def _pooling_windows(grid: torch.Tensor, pool: int) -> tuple[torch.Tensor, int, int]:
    """A patch-index grid in ``pool x pool`` windows, padded with -1 [R transformers Molmo2
    ``arange_for_pooling``]."""
    ph, pw = -grid.shape[0] % pool, -grid.shape[1] % pool
    grid = torch.nn.functional.pad(grid, (pw // 2, (pw + 1) // 2, ph // 2, (ph + 1) // 2), value=-1)
    rows, cols = grid.shape[0] // pool, grid.shape[1] // pool
    windows = grid.reshape(rows, pool, cols, pool).permute(0, 2, 1, 3).reshape(-1, pool * pool)
    return windows, rows, cols


def _molmo2(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
            image_size: int | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Molmo2's crops: one global 378 px view plus the overlapping 378 px crops of the image's
    canvas, ``[batch * crops, patches per crop, C * patch**2]``; ``image_token_pooling``, the
    patches each image token pools (2 x 2 windows, -1 where a window overhangs), and
    ``image_grids`` ``[global h, w, crops' h, w]`` in tokens, both CPU constants. Without
    ``--image-size``, a 378 px image: one crop [R transformers ``Molmo2ImageProcessor``
    (``size`` 378, ``max_crops`` 8, ``overlap_margins`` [4, 4], ``pooling_size`` [2, 2])]."""
    vc = _sub(config, "vision_config") or config
    patch = _int(getattr(vc, "patch_size", None), 14)
    crop = _int(getattr(vc, "image_size", None), 378)
    channels = _int(getattr(vc, "num_channels", None), 3)
    size, margin, max_crops = image_size or crop, 4, 8   # margin: patches, each side
    per_side = crop // patch
    window = (per_side - 2 * margin) * patch
    th, tw = _molmo2_tiling(size - 2 * margin * patch, window, max_crops)
    with torch.device("cpu"):   # constants (the inputs are built on the meta device)
        pooling, grids = _molmo2_pooling(batch, per_side, th, tw, margin)
    n = 1 + th * tw   # crops per image, the global view first
    return {"pixel_values": torch.zeros(batch * n, per_side ** 2, channels * patch * patch)}, {
        "image_token_pooling": pooling, "image_grids": grids}


def _molmo2_pooling(batch: int, per_side: int, th: int, tw: int, margin: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``image_token_pooling`` and ``image_grids`` of :func:`_molmo2` (2 x 2 pooling): the
    crops' patches less the overlap margins each neighbour covers, in one canvas grid."""
    pool = 2
    grid = torch.arange(th * tw * per_side ** 2).reshape(th, tw, per_side, per_side)
    grid[1:, :, :margin, :] = -1
    grid[:, 1:, :, :margin] = -1
    grid[:-1, :, -margin:, :] = -1
    grid[:, :-1, :, -margin:] = -1
    grid = grid.permute(0, 2, 1, 3).reshape(-1)
    inner = per_side - 2 * margin
    canvas = th * inner + 2 * margin, tw * inner + 2 * margin
    crops, rows, cols = _pooling_windows(grid[grid >= 0].reshape(canvas), pool)
    whole, h, w = _pooling_windows(torch.arange(per_side ** 2).reshape(per_side, per_side), pool)
    one = torch.cat([whole, torch.where(crops >= 0, crops + per_side ** 2, -1)])
    n = 1 + th * tw   # crops per image, the global view first
    pooling = torch.cat([torch.where(one >= 0, one + i * n * per_side ** 2, -1)
                         for i in range(batch)])
    return pooling, torch.tensor([[h, w, rows, cols]] * batch)


def _ovis2_widths(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
                  image_size: int | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Ovis2's image as :func:`image_part` makes it, once its visual embedding table (rows of
    ``hidden_size``) fits the text it replaces embeddings of (``text_config.hidden_size``):
    transformers' default config has 1536 and 4096, which its own forward rejects
    [R transformers ``Ovis2Model.get_placeholder_mask``; its conversion script sets
    ``hidden_size`` to the LLM's]."""
    width, text_width = config.hidden_size, config.text_config.hidden_size
    if width != text_width:
        from dse.errors import BadInput
        raise BadInput("hf_config.hidden_size", width, f"{text_width} (text_config.hidden_size: "
                       "the visual embedding table's rows replace text embeddings)")
    return first, const


def _gemma3_pooling(config, batch: int, first: dict[str, torch.Tensor], const: dict[str, Any],
                    image_size: int | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A Gemma-3-style image (ShieldGemma 2) as :func:`image_part` makes it, once the
    projector's pooling kernel, patches per side // tokens per side, is at least 1:
    transformers' default config pairs a 224 px tower (14 x 14 patches) with 256 tokens per
    image (16 x 16), a kernel of 0 its own forward rejects [R transformers
    ``Gemma3MultiModalProjector``]."""
    vc = config.vision_config
    side = vc.image_size // vc.patch_size
    if int(config.mm_tokens_per_image ** 0.5) > side:
        from dse.errors import BadInput
        raise BadInput("hf_config.mm_tokens_per_image", config.mm_tokens_per_image,
                       f"at most {side * side} (the {vc.image_size} px vision tower's "
                       f"{side} x {side} patches, pooled to the tokens per image)")
    return first, const


def navit_part(config, batch: int, channels: int, size: int
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One image per sequence as MiniCPM-V 4.6's processor packs it: every image's patches
    side by side in one row, ``[1, C, patch, images * h * w * patch]``, with the patch grid
    ``target_sizes`` ``[[h, w]] * images`` (int32). ``h = w = size / patch`` rounded down to a
    multiple of 4: the insert merger and the output merger each fold 2 x 2 patches
    [R transformers ``MiniCPMV4_6ImageProcessor.reshape_by_patch``, ``MiniCPMV4_6Model``]."""
    vc = _sub(config, "vision_config") or config
    patch = _int(getattr(vc, "patch_size", None), 14)
    side = max(4, (size // patch) // 4 * 4)
    pixels = torch.zeros(1, channels, patch, batch * side * side * patch)
    return {"pixel_values": pixels}, {
        "target_sizes": torch.tensor([[side, side]] * batch, dtype=torch.int32, device="cpu")}


def _required(fn) -> set[str]:
    """The parameters ``fn`` requires (no default), ``pixel_values`` aside."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"pixel_values", "self"}


def audio_part(model: nn.Module, config, batch: int, frames: int | None,
               audio_seconds: float | None) -> dict[str, torch.Tensor]:
    """Meta inputs of one audio clip per sequence."""
    names = accepts(model)
    ac = _sub(config, "audio_config", "encoder_config") or config
    if "input_features" in names:
        if frames is None:
            own = getattr(ac, "max_source_positions", None)
            frames = (int(FRAMES_PER_S * audio_seconds) if audio_seconds
                      else 2 * own if isinstance(own, int) else int(FRAMES_PER_S * DEFAULT_AUDIO_S))
        mels = _int(getattr(ac, "num_mel_bins", None) or getattr(ac, "n_mels", None)
                    or getattr(ac, "feature_size", None), 128)
        return {"input_features": torch.zeros(batch, mels, frames)}
    if "input_values" in names:
        samples = int(SAMPLE_RATE * (audio_seconds or DEFAULT_AUDIO_S))
        return {"input_values": torch.zeros(batch, samples)}
    return {}


def extractor_defaults(model_type: str) -> dict[str, Any]:
    """The constructor defaults of the feature extractor transformers maps ``model_type`` to
    (``n_mels``, ``sampling_rate``, LFR ``num_frames_lfr`` / ``stride_lfr``...): what its
    processor produces when the checkpoint's preprocessor config keeps them; {} without one.
    Read from the extractor's own module (the lazy top-level class is a placeholder when an
    audio library it needs at call time, e.g. torchaudio, is missing)."""
    import importlib
    try:
        from transformers.models.auto.configuration_auto import model_type_to_module_name
        from transformers.models.auto.feature_extraction_auto import \
            FEATURE_EXTRACTOR_MAPPING_NAMES as names
    except ImportError:
        return {}
    first = lambda n: n[0] if isinstance(n, (list, tuple)) else n
    wanted = first(names.get(model_type))
    if not wanted:
        return {}
    for key, name in names.items():
        if first(name) != wanted:
            continue
        module = model_type_to_module_name(key)
        try:
            cls = getattr(importlib.import_module(
                f"transformers.models.{module}.feature_extraction_{module}"), wanted)
            params = inspect.signature(cls.__init__).parameters.values()
        except (ImportError, AttributeError, TypeError, ValueError):
            continue
        return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    return {}


def audio_layouts(model: nn.Module, config, batch: int, frames: int | None,
                  audio_seconds: float | None) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
    """The audio inputs processors produce, most likely first, each with its masks (CPU
    constants): :func:`audio_part` (Whisper's ``[batch, mel bins, frames]``, raw samples
    ``[batch, samples]``); then the frames-major features of Conformer / Paraformer-style
    towers, :func:`frames_major_part`; then raw samples with a channel axis
    ``[batch, 1, samples]`` (a convolutional front end: OmniASR, VibeVoice's tokenizers) at the
    extractor's sampling rate."""
    first = audio_part(model, config, batch, frames, audio_seconds)
    out = [(first, audio_masks(model, first))]
    if "input_features" in first:
        out.append(frames_major_part(model, config, first["input_features"]))
    if "input_values" in first:
        rate = extractor_defaults(config.model_type).get("sampling_rate")
        rate = rate if isinstance(rate, int) and rate > 0 else SAMPLE_RATE
        samples = int(rate * (audio_seconds or DEFAULT_AUDIO_S))
        out.append(({"input_values": torch.zeros(batch, 1, samples)}, {}))
    return out


def frames_major_part(model: nn.Module, config, features: torch.Tensor
                      ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``features`` (``[batch, mel bins, frames]``) as a frames-major extractor produces them,
    ``[batch, rows, width]``, with the frame mask ``[batch, rows]`` where the audio getter takes
    one. Low-frame-rate stacking (the extractor's ``num_frames_lfr`` frames every ``stride_lfr``,
    FunASR: 7 and 6 [R transformers ``FunAsrNanoFeatureExtractor._apply_lfr``]) gives
    ``ceil(frames / stride)`` rows of ``mels * stack``; a tower whose input width is a multiple
    ``k`` of the extractor's mel bins takes ``k`` frames stacked per row (Granite Speech: pairs,
    ``frames // 2`` rows of 160 [R ``GraniteSpeechFeatureExtractor._extract_mel_spectrograms``]);
    else one row per frame."""
    batch, width, frames = features.shape
    fe = extractor_defaults(config.model_type)
    mels = fe.get("n_mels") or fe.get("feature_size")
    stack, stride = fe.get("num_frames_lfr"), fe.get("stride_lfr")
    if isinstance(stack, int) and isinstance(stride, int) and isinstance(mels, int) \
            and stack > 0 and stride > 0:
        rows, width = -(-frames // stride), mels * stack
    elif isinstance(mels, int) and 0 < mels < width and width % mels == 0:
        rows = frames // (width // mels)
    else:
        rows = frames
    getter = getter_of(model, "get_audio_features")
    takes = set(inspect.signature(getter).parameters) if getter is not None else set()
    masks = {n: torch.ones(batch, rows, dtype=torch.long, device="cpu")
             for n in AUDIO_MASKS if n in takes}
    return {"input_features": torch.zeros(batch, rows, width)}, masks


def projector_width_mismatch(config) -> tuple[str, int, int] | None:
    """(field, value, expected) where a speech model's q-former projector reads encoder
    states of another width than its audio encoder gives: ``projector_config.encoder_hidden_size``
    against ``encoder_config.hidden_dim`` (times the concatenated layers, Granite Speech Plus's
    ``cat_hidden_layers``). transformers' default Granite Speech config has this (Blip-2's
    default 1408 against the encoder's 1024), so it cannot run its own audio path; the
    published checkpoints set 1024. None when the widths agree or the config has neither."""
    proj, enc = getattr(config, "projector_config", None), getattr(config, "encoder_config", None)
    width = getattr(proj, "encoder_hidden_size", None)
    hidden = getattr(enc, "hidden_dim", None)
    if not (isinstance(width, int) and isinstance(hidden, int)):
        return None
    cat = getattr(enc, "cat_hidden_layers", None)
    expected = hidden * (len(cat) + 1 if isinstance(cat, (list, tuple)) else 1)
    return None if width == expected else (
        "hf_config.projector_config.encoder_hidden_size", width, expected)


#: Streaming speech models that add each audio row's embedding to one text token's (no
#: placeholder tokens): the text is as long as the audio rows [R transformers
#: ``VoxtralRealtimeModel.forward``: ``inputs_embeds += audio_embeds``; its processor pads the
#: transcription prompt to the audio's frames].
AUDIO_ADDED_PER_TOKEN = ("voxtral_realtime",)


#: Masks an audio tower reads the clip's length from (its values, hence CPU constants).
AUDIO_MASKS = ("input_features_mask", "feature_attention_mask")


def audio_masks(model: nn.Module, audio: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The mask of every frame of each clip (a processor's ``input_features_mask`` /
    ``feature_attention_mask``: ones, no padding) where the model's forward takes one."""
    features = audio.get("input_features")
    if features is None:
        return {}
    names = accepts(model)
    return {n: torch.ones(features.shape[0], features.shape[-1], dtype=torch.long, device="cpu")
            for n in AUDIO_MASKS if n in names}


def _feature_rows(out: Any) -> int:
    """Feature rows in a tower's output (a tensor ``[..., rows, width]``, a list of them, an
    output object with ``pooler_output`` / ``last_hidden_state``; extra outputs such as
    Qwen3-VL's deepstack features are not rows)."""
    for name in ("pooler_output", "image_embeds", "audio_embeds", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            out = getattr(out, name)
            break
    if isinstance(out, (list, tuple)) and out and isinstance(out[0], (list, tuple)):
        out = out[0]
    tensors = [t for t in (out if isinstance(out, (list, tuple)) else [out])
               if isinstance(t, torch.Tensor)]
    if not tensors:
        raise ValueError("the tower returned no tensor")
    return sum(t.numel() // max(t.shape[-1], 1) for t in tensors)


def getter_of(model: nn.Module, name: str):
    """``model.<name>`` (or its inner ``model``'s), the method that runs one tower; for the
    audio getter of a model that runs its ``audio_tower`` inline in its forward (Qwen2-Audio),
    that tower's rows (its projector keeps them)."""
    fn = getattr(model, name, None) or getattr(getattr(model, "model", None), name, None)
    inline = inline_audio_owner(model) if name == "get_audio_features" else None
    if fn is None and inline is not None:
        def fn(input_features, **_constants):
            return inline.audio_tower(input_features).last_hidden_state
    return fn


def inline_audio_owner(model: nn.Module) -> nn.Module | None:
    """The module (``model`` or a model it wraps as ``.model``) holding an ``audio_tower`` but
    no ``get_audio_features``: its forward runs the tower inline (Qwen2-Audio); None if none."""
    obj: Any = model
    while isinstance(obj, nn.Module):
        if isinstance(getattr(obj, "audio_tower", None), nn.Module) \
                and getattr(obj, "get_audio_features", None) is None:
            return obj
        obj = getattr(obj, "model", None)
    return None


def placeholder_tokens(model: nn.Module, getter: str, inputs: dict[str, torch.Tensor],
                       constants: dict[str, Any]) -> int:
    """Feature rows ``model.<getter>`` returns for ``inputs`` (run once on meta tensors; where
    the tower reads a value computed from them, e.g. Idefics3's count of non-padding images
    ``.tolist()``, on fake tensors, whose shape checks then fix that value)."""
    from workloads.hf import as_if_traced
    fn = getter_of(model, getter)
    try:
        with as_if_traced(), torch.no_grad():
            return _feature_rows(fn(**_on_meta(inputs), **constants))
    except NotImplementedError as exc:
        if "meta tensor" not in str(exc):
            raise
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()), as_if_traced(), \
            torch.no_grad():
        return int(_feature_rows(fn(**_on_meta(inputs), **constants)))


def _on_meta(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (v.to("meta") if v.is_floating_point() else v) for k, v in tensors.items()}


def token_id(config, *names: str) -> int | None:
    """The placeholder token id a config names (in it or its text sub-config)."""
    for c in (config, getattr(config, "text_config", None)):
        for n in names:
            v = getattr(c, n, None) if c is not None else None
            if isinstance(v, int) and v >= 0:
                return v
    return None


#: ``transformers.vision_utils`` helpers whose tensors index or scale meta activations: their
#: results (those at the listed positions of a tuple; all when None) are moved to the meta
#: device; the rest, ``cu_seqlens`` and the like, stay on the CPU, where the model reads their
#: values as split sizes.
_TO_META = {"get_vision_position_ids": None, "get_vision_window_index": (0,),
            "get_vision_interpolation_indices_and_weights": None,
            "get_vision_bilinear_indices_and_weights": None,
            "get_vision_nearest_position_ids": None}


#: Audio helpers of the Qwen-Omni audio towers (module functions of their modeling files),
#: functions of the clip lengths only, run eagerly like :data:`_TO_META`'s: ``cu_seqlens``
#: stays a CPU constant (the attention splits by its values), the gather indices go to meta.
_AUDIO_HELPERS = {"get_audio_cu_seqlens": False, "get_valid_indices": None,
                  "get_pool_indices": None}


def _chunked(fn):
    """``chunk_and_pad_features(input_features, feature_lens, n_window)`` with the chunk
    lengths computed eagerly from the real clip lengths (a CPU constant), then the features
    split by those known ints and padded as transformers does; without known lengths, ``fn``."""
    def wrapped(input_features, feature_lens, n_window, kwargs=None):
        lens = _real(feature_lens)
        if not (isinstance(lens, torch.Tensor) and lens.device.type == "cpu"
                and not _is_fake(lens)) or (kwargs and "chunk_lengths" in kwargs):
            return fn(input_features, feature_lens, n_window, kwargs=kwargs)
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
        with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch.device("cpu"):
            _, lengths = fn(torch.zeros(1, input_features.shape[-1]), lens, n_window)
        chunks = input_features.T.split(lengths.tolist(), dim=0)
        padded = nn.utils.rnn.pad_sequence(chunks, batch_first=True).transpose(1, 2)
        return padded, _constant(lengths)
    return wrapped


def _real(value: Any) -> Any:
    """A fake tensor that carries its constant (a module-attribute constant under export) as
    that real tensor; anything else as is."""
    constant = getattr(value, "constant", None)
    return constant if isinstance(constant, torch.Tensor) else value


def _eager(fn, to_meta):
    """``fn`` computed on the real patch grid outside any tracing, so its outputs are
    constants of the capture (see :class:`vision_helpers_eager`)."""
    def wrapped(*args, **kwargs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
        args = [_real(a) for a in args]
        kwargs = {k: _real(v) for k, v in kwargs.items()}
        with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch.device("cpu"):
            out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.to("meta") if to_meta is not False else _constant(out)
        if isinstance(out, tuple):
            meta = lambda i: to_meta is None or (to_meta is not False and i in to_meta)
            return tuple((t.to("meta") if meta(i) else _constant(t))
                         if isinstance(t, torch.Tensor) else t for i, t in enumerate(out))
        return out
    return wrapped


def _constant(t: torch.Tensor) -> torch.Tensor:
    """``t`` (a CPU tensor) re-made by ``torch.tensor`` under the active tracing modes: an
    export's fake mode then keeps its values, and what the model computes from it (split
    lengths ``cu_seqlens[1:] - cu_seqlens[:-1]``, then ``.tolist()``) are known ints, not
    data-dependent symbols (Qwen2.5-VL's window attention splits by several lengths)."""
    return torch.tensor(t.tolist(), dtype=t.dtype, device="cpu")


_DEVICE_MISMATCH = ("is not on the expected device",
                    "Expected all tensors to be on the same device",
                    "expected to be in the same device")   # the last: index_add (Kimi-K2.5)


def _to_meta(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) and value.device.type == "cpu" \
        else value


def _python_values(data: Any) -> Any:
    """``data`` (Python numbers, nested lists of them) as Python numbers, a one-element
    tensor whose value is known (a CPU tensor, a fake tensor carrying its constant) as its
    value; None when any element has no known value."""
    if isinstance(data, (list, tuple)):
        out = [_python_values(x) for x in data]
        return None if any(x is None for x in out) else out
    if isinstance(data, torch.Tensor):
        data = _real(data)
        known = data.numel() == 1 and data.device.type == "cpu" and not _is_fake(data)
        return data.item() if known else None
    return data if isinstance(data, (int, float, bool)) else None


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake
    return is_fake(t)


class _ValuesOnCpu(torch.overrides.TorchFunctionMode):
    """Tensors a model builds from Python values (``torch.tensor(image_sizes, device=...)``)
    stay on the CPU, where their values are known (on the meta device they have none, and a
    later ``.tolist()`` fails); an op that then meets meta activations with such CPU tensors
    (or with the CPU constants of :class:`vision_helpers_eager`) runs on the meta device, the
    CPU operands moved there: the shapes, hence the work, are the same."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and args:
            values = _python_values(args[0])
            if values is not None:
                args, kwargs = (values, *args[1:]), {**kwargs, "device": "cpu"}
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:
            if not any(m in str(exc) for m in _DEVICE_MISMATCH):
                raise
        from torch.utils._pytree import tree_map
        return func(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs))


@contextlib.contextmanager
def masks_all_true() -> Iterator[None]:
    """Within the block, ``nonzero`` of a mask (``x[mask]``, ``torch.where(mask)``) on meta
    or fake tensors keeps every element, as it does for the inputs built here: images and
    clips without padding, so every patch / frame mask a tower derives is all true. Without
    it an eager probe on meta tensors cannot run and an export sees a data-dependent size.
    For multimodal forwards only (a text model's masks are not padding masks)."""
    from torch._subclasses import fake_impls
    from torch.fx.experimental import _config as fx_config
    op = torch.ops.aten.nonzero.default
    old = fx_config.meta_nonzero_assume_all_nonzero, fake_impls.op_implementations_dict[op]

    def every_element(fake_mode, func, arg):
        n = arg.numel()
        return arg.new_empty_strided((n, arg.dim()), (1, n), dtype=torch.int64)

    fx_config.meta_nonzero_assume_all_nonzero = True
    fake_impls.op_implementations_dict[op] = every_element
    try:
        yield
    finally:
        fx_config.meta_nonzero_assume_all_nonzero, fake_impls.op_implementations_dict[op] = old


#: The methods that run a multimodal model's towers (image, video, audio).
TOWER_GETTERS = ("get_image_features", "get_video_features", "get_audio_features")


@contextlib.contextmanager
def towers_masks_all_true(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s towers (its ``get_*_features`` methods, on it and on the
    models it wraps as ``.model``) run under :func:`masks_all_true`; the rest of its forward
    (where placeholder masks come from the token ids) does not."""
    patched = []
    obj: Any = model
    while isinstance(obj, nn.Module):
        for name in TOWER_GETTERS:
            fn = getattr(type(obj), name, None)
            if fn is not None and name not in obj.__dict__:
                obj.__dict__[name] = _with_full_masks(fn.__get__(obj))
                patched.append((obj, name))
        obj = getattr(obj, "model", None)
    inline = inline_audio_owner(model)
    if inline is not None and "forward" not in inline.__dict__:
        # its tower runs inside its forward, which keeps the audio rows by a mask of the clip
        # lengths (``audio_features[mask]``): the whole forward runs with full masks
        inline.__dict__["forward"] = _with_full_masks(type(inline).forward.__get__(inline))
        patched.append((inline, "forward"))
    try:
        yield
    finally:
        for o, name in patched:
            del o.__dict__[name]


def _with_full_masks(fn):
    def wrapped(*args, **kwargs):
        with masks_all_true():
            return fn(*args, **kwargs)
    return wrapped


#: Methods ``(module, class, method)`` that gather rows of their first argument by offsets
#: computed from a patch grid (their second): :func:`_gather_eager` finds those offsets on the
#: real grid, outside the trace.
_GATHERS = (("transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe",
             "Ernie4_5_VLMoeVariableResolutionResamplerModel", "_temporal_slicing"),)


def _gather_eager(method):
    """``method(self, rows, grid)`` that concatenates gathers of ``rows`` along the last
    dimension (ERNIE-4.5-VL's ``_temporal_slicing``: even / odd frames side by side), run once
    eagerly on a column of row numbers ``arange(n)[:, None]`` and the real grid: its output
    ``[m, k]`` holds the k row indices of each output row, which then gather the traced rows.
    The same gathers, as constants (computed in the trace, their offsets are unbacked ints)."""
    def wrapped(self, rows, grid, *args, **kwargs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
        with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch.device("cpu"):
            numbers = torch.arange(rows.shape[0])[:, None]
            index = method(self, numbers, _real(grid), *args, **kwargs)
        index = _constant(index).to(rows.device)
        return torch.cat([rows.index_select(0, index[:, k]) for k in range(index.shape[1])],
                         dim=-1)
    return wrapped


class vision_helpers_eager:
    """Within the block, the ``transformers.vision_utils`` helpers (``get_vision_*``: patch
    positions, ``cu_seqlens``, window indices, interpolation taps, all functions of the patch
    grid) that every loaded modeling module imported run eagerly on the real grid, so a
    capture sees their results as constants: a Qwen-VL-style vision tower then splits its
    attention by known lengths instead of data-dependent ones. Results the model combines with
    activations are moved to the meta device (:data:`_TO_META`); the rest are constants whose
    values an export's fake tensors keep (up to :data:`CONSTANT_ELEMENTS`), and tensors built
    from Python values stay on the CPU (:class:`_ValuesOnCpu`)."""

    def __enter__(self):
        import sys
        from torch._subclasses import fake_tensor
        # fake tensors carry constants of up to this many elements (torch's default: 1)
        self.limit = fake_tensor.CONSTANT_NUMEL_LIMIT
        fake_tensor.CONSTANT_NUMEL_LIMIT = max(self.limit, CONSTANT_ELEMENTS)
        self.patched = []
        self.mode = _ValuesOnCpu()
        self.mode.__enter__()
        try:
            from transformers import vision_utils
        except ImportError:
            return self
        from transformers.utils import generic
        originals = {name: getattr(vision_utils, name) for name in dir(vision_utils)
                     if name.startswith("get_vision_") and callable(getattr(vision_utils, name))}
        if callable(getattr(generic, "get_max_seqlen", None)):   # an int from cu_seqlens
            originals["get_max_seqlen"] = generic.get_max_seqlen
        for mod in [m for n, m in list(sys.modules.items())
                    if n.startswith("transformers.models.") and m is not None]:
            for name, fn in originals.items():
                if getattr(mod, name, None) is fn:
                    self.patched.append((mod, name, fn))
                    setattr(mod, name, _eager(fn, _TO_META.get(name, False)))
            for name in (*_AUDIO_HELPERS, "chunk_and_pad_features"):
                fn = getattr(mod, name, None)
                if callable(fn) and getattr(fn, "__module__", None) == mod.__name__:
                    self.patched.append((mod, name, fn))
                    setattr(mod, name, _chunked(fn) if name == "chunk_and_pad_features"
                            else _eager(fn, _AUDIO_HELPERS[name]))
        for modname, cls_name, method in _GATHERS:
            cls = getattr(sys.modules.get(modname), cls_name, None)
            if cls is not None and method in cls.__dict__:
                self.patched.append((cls, method, cls.__dict__[method]))
                setattr(cls, method, _gather_eager(cls.__dict__[method]))
        return self

    def __exit__(self, *exc):
        from torch._subclasses import fake_tensor
        fake_tensor.CONSTANT_NUMEL_LIMIT = self.limit
        self.mode.__exit__(*exc)
        for mod, name, fn in self.patched:
            setattr(mod, name, fn)


def tiled(model: nn.Module) -> bool:
    """A LLaVA-NeXT-style model: it cuts images into tiles (``image_size_to_num_patches``)."""
    import sys
    return hasattr(sys.modules.get(type(model).__module__), "image_size_to_num_patches")


def num_tiles(model: nn.Module, config, size: int) -> int:
    """Tiles a LLaVA-NeXT-style model cuts a ``size`` x ``size`` image into (its own
    ``image_size_to_num_patches``; 1 without one)."""
    import sys
    mod = sys.modules.get(type(model).__module__)
    fn = getattr(mod, "image_size_to_num_patches", None)
    pinpoints = getattr(config, "image_grid_pinpoints", None)
    vc = _sub(config, "vision_config") or config
    if fn is None or not pinpoints:
        return 1
    try:
        return int(fn(image_size=(size, size), grid_pinpoints=pinpoints,
                      patch_size=_int(getattr(vc, "image_size", None), size)))
    except Exception:
        return 1


#: model_type -> the image inputs its processor produces that no generic layout makes:
#: ``fn(config, batch, first, constants, image_size) -> (meta inputs, CPU constants)``, where
#: ``first`` and ``constants`` are :func:`image_part`'s.
FAMILY_LAYOUTS = {"granite_docling": _tiles_mask, "deepseek_vl_hybrid": _high_res,
                  "lfm2_vl": _naflex, "inkling2": _merged_blocks, "inkling2_loop": _merged_blocks,
                  "inkling_mm_model": _merged_blocks, "molmo2": _molmo2,
                  "ovis2": _ovis2_widths, "shieldgemma2": _gemma3_pooling}
