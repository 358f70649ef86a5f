"""SmolVLM / SmolVLM2 (native ``smolvlm`` classes): a SigLIP tower and a pixel-shuffle connector in front of a
Llama-style decoder (1-D RoPE; SmolVLM2-2.2B has as many KV heads as heads, so MHA).

Image splitting: the image processor resizes an image and cuts it into a grid of tiles plus one global
view; in the token stream each tile is ``<fake_token_around_image><row_r_col_c>`` + its image tokens,
rows end in a newline, and the global view follows as ``<fake_token_around_image><global-img>`` + its
tokens + ``<fake_token_around_image>`` — the layout ``SmolVLMProcessor`` builds
(``processing_smolvlm.get_image_prompt_string``, used here). Cache: K (rotary) and V.
"""

from __future__ import annotations

import torch
from PIL import Image
from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

from kamera.core import ChannelSpec
from kamera.models.base import Adapter, kv_channels


class SmolVLMAdapter(Adapter):
    family = "smolvlm"
    attention = "MHA"

    def _language_model(self) -> torch.nn.Module:
        return self.model.model.text_model

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())

    @property
    def image_seq_len(self) -> int:
        """Features per tile: (image_size / patch_size)² / scale_factor²."""
        vc = self.model.config.vision_config
        return (vc.image_size // vc.patch_size) ** 2 // self.model.config.scale_factor**2

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        px = self.image_processor(images=[[image]], return_row_col_info=True, return_tensors="pt")
        return {
            "pixel_values": px["pixel_values"].to(self.dtype),
            "pixel_attention_mask": px["pixel_attention_mask"],
            "grid": torch.tensor([px["rows"][0][0], px["cols"][0][0]]),
        }

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        out = self.model.model.get_image_features(pixels["pixel_values"], pixels["pixel_attention_mask"])
        return out.pooler_output[0], None

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        rows, cols = (int(x) for x in pixels["grid"])
        text = get_image_prompt_string(
            rows, cols, self.image_seq_len, fake_token_around_image="<fake_token_around_image>",
            image_token="<image>", global_image_token="<global-img>",
        )
        ids = self.tokenize(text)
        image_id = self.model.config.image_token_id
        return ids, [i == image_id for i in ids]
