"""InternVL (native ``internvl`` classes, e.g. InternVL3-8B-hf): InternViT + pixel-shuffle projector in front
of a Qwen2.5 GQA decoder with 1-D RoPE.

An image is cut into 448-px tiles (up to the processor's ``max_patches``, plus a thumbnail when there is
more than one) by its GotOcr2 image processor with ``crop_to_patches``, as ``InternVLProcessor`` asks;
each tile gives 256 features. In the token stream it is ``<img>`` + one ``<IMG_CONTEXT>`` per feature +
``</img>`` (``InternVLProcessor.replace_image_token``). Cache: K (rotary, rotate-half) and V.
"""

from __future__ import annotations

import torch
from PIL import Image

from kamera.core import ChannelSpec
from kamera.models.base import Adapter, kv_channels


class InternVLAdapter(Adapter):
    family = "internvl"
    attention = "GQA"

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        px = self.image_processor(images=[image], crop_to_patches=True, return_tensors="pt")
        return {"pixel_values": px["pixel_values"].to(self.dtype)}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        cfg = self.model.config
        out = self.model.model.get_image_features(
            pixels["pixel_values"], vision_feature_layer=cfg.vision_feature_layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy,
        ).pooler_output
        return out.reshape(-1, out.shape[-1]), None

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        start, end = self.tokenizer.convert_tokens_to_ids(["<img>", "</img>"])
        return [start, *[self.model.config.image_token_id] * n, end], [False, *[True] * n, False]
