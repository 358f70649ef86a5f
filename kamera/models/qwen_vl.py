"""Qwen2.5-VL (GQA, sectioned M-RoPE), Qwen3-VL (deepstack, interleaved M-RoPE) and Qwen3-VL-MoE.

Cache: K (rotary, rotate-half over the whole head) and V (content), [kv_heads, head_dim] each.
Positions: M-RoPE t/h/w from the model's own ``get_rope_index`` on each span alone; a span placed
at start p gets its local positions + p on all three rows (chunks compose, see tests).
Deepstack (Qwen3-VL): the vision tower's intermediate features are added to the hidden states of
the first decoder layers at visual tokens, so a forward over any span subset carries the matching
rows of those features.
"""

from __future__ import annotations

import torch
from PIL import Image

from kamera.core import ChannelSpec
from kamera.models.base import Adapter, Placed, VisionPiece, kv_channels


class QwenVLAdapter(Adapter):
    family = "qwen2_5_vl"
    attention = "GQA"
    position_rows = 3

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        proc = self.image_processor(images=[image], return_tensors="pt")
        return {"pixel_values": proc["pixel_values"], "image_grid_thw": proc["image_grid_thw"]}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        out = self.model.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        deep = getattr(out, "deepstack_features", None)
        return out.pooler_output[0], ([d[0] for d in deep] if deep else None)

    def _image_ids(self, n: int) -> tuple[list[int], list[bool]]:
        cfg = self.model.config
        return [cfg.vision_start_token_id, *[cfg.image_token_id] * n, cfg.vision_end_token_id], [False, *[True] * n, False]

    def _local_positions(self, ids: torch.Tensor, pieces: list[VisionPiece]) -> torch.Tensor:
        if not pieces:
            return torch.arange(ids.numel(), device=ids.device)[None].expand(3, -1).clone()
        mm = (ids == self.model.config.image_token_id).int()
        grids = torch.stack([p.grid_thw for p in pieces])
        pos, _ = self.model.model.get_rope_index(ids[None], mm_token_type_ids=mm[None], image_grid_thw=grids)
        return pos[:, 0]

    def _forward_extras(self, placed: Placed) -> dict:
        deep = [s.deepstack for s, _ in placed if s.deepstack is not None]
        if not deep:
            return {}
        visual = torch.cat([s.visual for s, _ in placed])[None]
        layers = [torch.cat([d[k] for d in deep]) for k in range(len(deep[0]))]
        return {"visual_pos_masks": visual, "deepstack_visual_embeds": layers}


class Qwen3VLAdapter(QwenVLAdapter):
    family = "qwen3_vl"


class Qwen3VLMoeAdapter(QwenVLAdapter):
    family = "qwen3_vl_moe"
