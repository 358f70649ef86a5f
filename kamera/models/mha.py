"""1-D RoPE families whose image features replace a run of image tokens: LLaVA and DeepSeek-VL (MHA).

Cache: K (rotary, rotate-half) and V (content), [kv_heads, head_dim] each (kv_heads = heads: MHA).
"""

from __future__ import annotations

import torch
from PIL import Image

from kamera.core import ChannelSpec
from kamera.models.base import Adapter, kv_channels


class MHAAdapter(Adapter):
    attention = "MHA"

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())

    def _image_token_id(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "image_token_id", None) or cfg.image_token_index)

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        return {
            "pixel_values": self.image_processor(images=[image], return_tensors="pt")["pixel_values"].to(self.dtype)
        }

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        feats = self._image_features(pixels["pixel_values"])
        return (feats[0] if isinstance(feats, (list, tuple)) else feats.reshape(-1, feats.shape[-1])), None

    def _image_features(self, pixel_values: torch.Tensor):
        return self.model.model.get_image_features(pixel_values).pooler_output

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        return [self._image_token_id()] * n, [True] * n


class LlavaAdapter(MHAAdapter):
    family = "llava"

    def _image_features(self, pixel_values: torch.Tensor):
        cfg = self.model.config
        return self.model.model.get_image_features(
            pixel_values,
            vision_feature_layer=cfg.vision_feature_layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy,
        ).pooler_output


class DeepseekVLAdapter(MHAAdapter):
    family = "deepseek_vl"


class DeepseekVLHybridAdapter(MHAAdapter):
    """DeepSeek-VL-7B (``deepseek_vl_hybrid``): a low-resolution SigLIP tower (384 px) and a high-resolution
    SAM tower (1024 px) whose features an aligner fuses into one run of image tokens per image (576),
    in front of a Llama MHA decoder. Both towers' inputs come from the family's image processor."""

    family = "deepseek_vl_hybrid"

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        px = self.image_processor(images=[image], return_tensors="pt")
        return {
            "pixel_values": px["pixel_values"].to(self.dtype),
            "high_res_pixel_values": px["high_res_pixel_values"].to(self.dtype),
        }

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        out = self.model.model.get_image_features(pixels["pixel_values"], pixels["high_res_pixel_values"])
        return out.pooler_output.reshape(-1, out.pooler_output.shape[-1]), None
