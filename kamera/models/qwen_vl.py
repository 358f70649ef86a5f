"""Qwen2.5-VL (GQA, sectioned M-RoPE), Qwen3-VL (deepstack, interleaved M-RoPE), Qwen3-VL-MoE and the
Qwen3-Omni thinker (MoE, M-RoPE with time in absolute seconds).

Cache: K (rotary, rotate-half over the whole head) and V (content), [kv_heads, head_dim] each.
Positions: M-RoPE t/h/w from the model's own ``get_rope_index`` on each span alone; a span placed
at start p gets its local positions + p on all three rows (chunks compose, see tests).
Deepstack (Qwen3-VL, Qwen3-Omni): the vision tower's intermediate features are added to the hidden
states of the first decoder layers at visual tokens, so a forward over any span subset carries the
matching rows of those features.

Video (a :class:`~kamera.items.spans.Clip`) is the model's own video input, built without torchvision the
way the families' video processors lay it out (``transformers`` ``Qwen2VLVideoProcessor`` /
``Qwen3VLVideoProcessor`` and ``Qwen3VLProcessor.replace_video_token``, read for the layout):

- frames padded to a multiple of ``temporal_patch_size`` by repeating the last one, all resized to one
  size (Qwen2.5-VL / Omni: per-frame ``smart_resize`` within the video pixel budget; Qwen3-VL: the
  budget spread over all frames), normalised like images;
- each group of ``temporal_patch_size`` consecutive frames is one temporal patch: its flattened
  patch vectors are channel-major, then time, then the patch pixels;
- Qwen2.5-VL / Omni: ``<|vision_start|>`` + video pads + ``<|vision_end|>``; the t row of M-RoPE
  advances by ``second_per_grid · tokens_per_second`` (Omni: ``position_id_per_seconds``) per patch;
- Qwen3-VL: per temporal patch, the text ``<{t:.1f} seconds>`` (t = mean time of its frames) then
  ``<|vision_start|>`` + its pads + ``<|vision_end|>``.

Resizing uses PIL bicubic where the video processors use torchvision's: pixel values may differ in
the last bits, token layout and positions do not.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as smart_resize_video

from kamera.core import ChannelSpec
from kamera.items.spans import Clip
from kamera.models.base import Adapter, Placed, VisionPiece, kv_channels

DEFAULT_FPS = 2.0  # the Qwen video processors' sampling rate; the time step of a one-frame clip


class QwenVLAdapter(Adapter):
    family = "qwen2_5_vl"
    attention = "GQA"
    position_rows = 3
    takes_video = True

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())

    # ----- images ------------------------------------------------------------------------------
    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        proc = self.image_processor(images=[image], return_tensors="pt")
        return {"pixel_values": proc["pixel_values"], "image_grid_thw": proc["image_grid_thw"]}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        out = self.model.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        deep = getattr(out, "deepstack_features", None)
        return out.pooler_output[0], ([d[0] for d in deep] if deep else None)

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        cfg = self.model.config
        return [cfg.vision_start_token_id, *[cfg.image_token_id] * n, cfg.vision_end_token_id], [
            False,
            *[True] * n,
            False,
        ]

    # ----- video -------------------------------------------------------------------------------
    @property
    def temporal_patch(self) -> int:
        return int(self.image_processor.temporal_patch_size)

    def _frame_size(self, n_frames: int, height: int, width: int) -> tuple[int, int]:
        """(height, width) every frame of a clip is resized to: per-frame budget (Qwen2-VL video processor)."""
        lo, hi = self.video_pixels or (
            self.image_processor.size["shortest_edge"],
            self.image_processor.size["longest_edge"],
        )
        factor = self.image_processor.patch_size * self.image_processor.merge_size
        return smart_resize(height, width, factor=factor, min_pixels=lo, max_pixels=hi)

    def _video_pixels(self, clip: Clip) -> tuple[dict[str, torch.Tensor], list[float]]:
        """``pixel_values_videos`` [grid_t·gh·gw, C·tp·p·p], ``video_grid_thw`` [1, 3], and the mean time of
        each temporal patch."""
        tp = self.temporal_patch
        frames, times = list(clip.frames), list(clip.timestamps)
        while len(frames) % tp:
            frames.append(frames[-1])
            times.append(times[-1])
        h, w = self._frame_size(len(frames), frames[0].height, frames[0].width)
        per_frame = []
        for f in frames:
            px = self.image_processor(
                images=[f.convert("RGB").resize((w, h), Image.Resampling.BICUBIC)], do_resize=False, return_tensors="pt"
            )
            grid = px["image_grid_thw"][0]
            p = self.image_processor.patch_size
            per_frame.append(px["pixel_values"].reshape(-1, 3, tp, p, p)[:, :, 0])  # [N, C, p, p]: one frame
        groups = [torch.stack(per_frame[g : g + tp], dim=2) for g in range(0, len(frames), tp)]  # [N, C, tp, p, p]
        pixel_values = torch.cat([x.reshape(x.shape[0], -1) for x in groups])
        grid_thw = torch.tensor([[len(groups), int(grid[1]), int(grid[2])]])
        patch_times = [float(np.mean(times[g : g + tp])) for g in range(0, len(times), tp)]
        return {"pixel_values_videos": pixel_values, "video_grid_thw": grid_thw}, patch_times

    def _video(self, clip: Clip) -> VisionPiece:
        pixels, patch_times = self._video_pixels(clip)
        pixels = {k: v.to(self.device) for k, v in pixels.items()}
        out = self.model.model.get_video_features(pixels["pixel_values_videos"], pixels["video_grid_thw"])
        feats = out.pooler_output[0]
        deep = getattr(out, "deepstack_features", None)
        ids, visual = self._video_ids(int(feats.shape[0]), patch_times)
        if sum(visual) != feats.shape[0]:
            raise RuntimeError(f"{self.name}: {sum(visual)} video slots for {feats.shape[0]} feature rows")
        step = (clip.timestamps[-1] - clip.timestamps[0]) / (len(clip) - 1) if len(clip) > 1 else 1.0 / DEFAULT_FPS
        return VisionPiece(
            ids,
            visual,
            feats,
            pixels["video_grid_thw"][0],
            [d[0] for d in deep] if deep else None,
            kind="video",
            second_per_grid=step * self.temporal_patch,
        )

    def _video_ids(self, n: int, patch_times: list[float]) -> tuple[list[int], list[bool]]:
        """One video: ``<|vision_start|>`` + n video pads + ``<|vision_end|>``."""
        cfg = self.model.config
        return [cfg.vision_start_token_id, *[cfg.video_token_id] * n, cfg.vision_end_token_id], [
            False,
            *[True] * n,
            False,
        ]

    # ----- positions ---------------------------------------------------------------------------
    def _local_positions(self, ids: torch.Tensor, pieces: list[VisionPiece]) -> torch.Tensor:
        """The model's own rope index of the span with one text token appended: its position is where the next
        span starts (after a video it is not max + 1: transformers 5.24 advances by the frame grid, not by
        the scaled time row)."""
        if not pieces:
            return torch.arange(ids.numel() + 1, device=ids.device)[None].expand(3, -1).clone()
        cfg = self.model.config
        ids = torch.cat([ids, ids.new_zeros(1)])
        kinds = (ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int()
        images = [p.grid_thw for p in pieces if p.kind == "image"]
        videos = [p for p in pieces if p.kind == "video"]
        pos = self._rope_index(
            ids[None],
            kinds[None],
            torch.stack(images) if images else None,
            torch.stack([p.grid_thw for p in videos]) if videos else None,
            torch.tensor([p.second_per_grid for p in videos]) if videos else None,
        )
        return pos[:, 0]

    def _rope_index(self, ids, kinds, image_grid, video_grid, seconds) -> torch.Tensor:
        """The model's own M-RoPE index [3, 1, n] of one span."""
        pos, _ = self.model.model.get_rope_index(
            ids,
            mm_token_type_ids=kinds,
            image_grid_thw=image_grid,
            video_grid_thw=video_grid,
            second_per_grid_ts=seconds,
        )
        return pos

    def _forward_extras(self, placed: Placed) -> dict:
        deep = [s.deepstack for s, _ in placed if s.deepstack is not None]
        if not deep:
            return {}
        visual = torch.cat([s.visual for s, _ in placed])[None]
        layers = [torch.cat([d[k] for d in deep]) for k in range(len(deep[0]))]
        return {"visual_pos_masks": visual, "deepstack_visual_embeds": layers}


class Qwen3VLAdapter(QwenVLAdapter):
    family = "qwen3_vl"

    def _frame_size(self, n_frames: int, height: int, width: int) -> tuple[int, int]:
        """The pixel budget spread over all frames of the clip (Qwen3-VL video processor)."""
        lo, hi = self.video_pixels or (
            self.image_processor.size["shortest_edge"],
            self.image_processor.size["longest_edge"],
        )
        factor = self.image_processor.patch_size * self.image_processor.merge_size
        return smart_resize_video(
            n_frames, height, width, temporal_factor=self.temporal_patch, factor=factor, min_pixels=lo, max_pixels=hi
        )

    def _video_ids(self, n: int, patch_times: list[float]) -> tuple[list[int], list[bool]]:
        """Per temporal patch: ``<{t:.1f} seconds>`` then ``<|vision_start|>`` + its pads + ``<|vision_end|>``."""
        cfg = self.model.config
        per = n // len(patch_times)
        ids: list[int] = []
        visual: list[bool] = []
        for t in patch_times:
            stamp = self.tokenize(f"<{t:.1f} seconds>")
            ids += [*stamp, cfg.vision_start_token_id, *[cfg.video_token_id] * per, cfg.vision_end_token_id]
            visual += [False] * (len(stamp) + 1) + [True] * per + [False]
        return ids, visual

    def _rope_index(self, ids, kinds, image_grid, video_grid, seconds) -> torch.Tensor:
        pos, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=kinds, image_grid_thw=image_grid, video_grid_thw=video_grid
        )
        return pos


class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    family = "qwen3_vl_moe"


class QwenOmniAdapter(QwenVLAdapter):
    """The Qwen3-Omni thinker (text, images, video; MoE decoder with deepstack). Audio is not read.

    Its rope index finds vision segments from ``<|vision_start|>`` and scales video time by
    ``position_id_per_seconds`` (absolute seconds), per
    ``Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index``.
    """

    family = "qwen3_omni_moe"

    def _rope_index(self, ids, kinds, image_grid, video_grid, seconds) -> torch.Tensor:
        pos, _ = self.model.model.get_rope_index(
            ids,
            image_grid_thw=image_grid,
            video_grid_thw=video_grid,
            attention_mask=torch.ones_like(ids),
            second_per_grids=seconds,
        )
        return pos
