"""MLA families: kimi_k25 (MoonViT-style tower + DeepSeek-V3 MLA) and DeepSeek-V2 (text only).

The MLA cache holds the compressed form, exactly the paper's content | rope split:
``keys`` = c_KV (the latent after ``kv_a_layernorm``, [1, kv_lora_rank], content, never rotated)
and ``values`` = k_pe (the decoupled rotary key, [1, qk_rope_head_dim]). Per-head K/V exist only
inside attention. DeepSeek-V3 / kimi_k25 store k_pe in rotate-half layout (the interleaved
weights are de-interleaved when rotated); DeepSeek-V2 rotates interleaved pairs and stores them so.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from kamera.core import ChannelSpec
from kamera.models.base import Adapter


class MLAAdapter(Adapter):
    attention = "MLA"

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        c = self.text_config
        return (ChannelSpec("c_kv", 1, c.kv_lora_rank), ChannelSpec("k_pe", 1, c.qk_rope_head_dim, self.rotary()))


class DeepseekV2Adapter(MLAAdapter):
    """DeepSeek-V2 language model alone (text spans only); k_pe in interleaved layout."""

    family = "deepseek_v2"

    def _language_model(self) -> torch.nn.Module:
        return self.model.model

    def rotary_layout(self) -> str:
        return "interleaved"


class KimiK25Adapter(MLAAdapter):
    """kimi_k25: our CPU stand-in for Kimi-VL (same tower + MLA language model shape).

    The native image processor needs torchvision, which does not import beside the CPU torch
    wheel, so images are patchified here the way that processor lays them out: resized to a
    multiple of patch × merge (longest side ≤ ``max_side``), scaled to [-1, 1], cut into raster-
    order patches [gh·gw, 3, p, p] with ``grid_thw`` = (1, gh, gw).
    """

    family = "kimi_k25"
    max_side = 112

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        vc = self.model.config.vision_config
        p = int(vc.patch_size)
        kh, kw = (int(k) for k in vc.merge_kernel_size)
        step_h, step_w = p * kh, p * kw
        scale = min(1.0, self.max_side / max(image.size))
        w = max(step_w, round(image.width * scale / step_w) * step_w)
        h = max(step_h, round(image.height * scale / step_h) * step_h)
        arr = np.asarray(image.resize((w, h), Image.Resampling.BICUBIC), dtype=np.float32) / 127.5 - 1.0
        x = torch.from_numpy(arr).permute(2, 0, 1)  # [3, h, w]
        gh, gw = h // p, w // p
        patches = x.reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3, p, p)
        return {"pixel_values": patches.to(self.dtype), "image_grid_thw": torch.tensor([[1, gh, gw]])}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        return self.model.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"]).pooler_output[
            0
        ], None

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        cfg = self.model.config
        return [cfg.vision_start_token_id, *[cfg.image_token_id] * n, cfg.vision_end_token_id], [
            False,
            *[True] * n,
            False,
        ]
