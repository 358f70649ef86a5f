"""The Qwen2.5-Omni thinker: Qwen2.5-VL's decoder and vision tower (GQA, sectioned M-RoPE 16/24/24) plus a
Whisper-style audio tower, with audio spans encoded natively.

Cache and positions are Qwen2.5-VL's (:mod:`kamera.models.qwen_vl`): K rotary (rotate-half), V content; M-RoPE
t/h/w from the model's own rope index on each span alone, a span placed at p shifted by p on all three rows.

An :class:`~kamera.items.spans.Audio` part becomes what ``Qwen2_5OmniProcessor`` makes of one audio input
(transformers 5.24 ``models/qwen2_5_omni/processing_qwen2_5_omni.py``, read for the layout):

- features: the checkpoint's ``WhisperFeatureExtractor`` (``preprocessor_config.json``: 128 log-mel bins, hop
  160 at 16 kHz, so one frame per 10 ms, padded to its window) called with ``return_attention_mask``, as
  ``Qwen2_5OmniProcessor.audio_kwargs`` asks; the mask's sum is the audio's feature length L;
- tokens: ``<|audio_bos|>`` + n ``<|AUDIO|>`` + ``<|audio_eos|>`` with n = ((L − 1) // 2 + 1 − 2) // 2 + 1
  (``_get_feat_extract_output_lengths``: the stride-2 conv, then the tower's stride-2 average pool: one token
  per 40 ms);
- embeddings: ``Qwen2_5OmniThinkerModel.get_audio_features`` (the masked frames through ``audio_tower``, in
  windows of ``2 · n_window`` frames) scattered into the ``<|AUDIO|>`` slots, as the thinker's forward does;
- positions (TMRoPE): ``get_rope_index`` with ``audio_seqlens`` = [L, …] (modeling_qwen2_5_omni.py,
  ``Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index``). Audio tokens take consecutive
  positions on all three rows: at ``position_id_per_seconds`` = 25, one position is 40 ms, one audio token.
  With no image or video in the span the function takes its text branch (cumulative attention mask), which
  gives the same consecutive positions; it is always called with an all-ones mask.

An Audio must be at the feature extractor's rate (16 kHz: :func:`kamera.data.media.read_audio` resamples) and
no longer than its window (300 s for the published checkpoint); anything else is a one-line ValueError, never a
silent resample or truncation. Images and video are Qwen2.5-VL's path with Omni's rope index (video time scaled
by ``position_id_per_seconds``, from ``second_per_grids``); a checkpoint without ``video_preprocessor_config.json``
gets the processor's own per-frame video budget (``Qwen2_5OmniProcessor.videos_kwargs``: 128·28² .. 768·28²
pixels), not its image budget.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import torch
from transformers import WhisperFeatureExtractor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from kamera.items.spans import Audio
from kamera.models.base import VisionPiece
from kamera.models.qwen_vl import QwenVLAdapter

VIDEO_PIXELS = (128 * 28 * 28, 768 * 28 * 28)  # Qwen2_5OmniProcessor.videos_kwargs (min, max pixels per frame)


class Qwen25OmniAdapter(QwenVLAdapter):
    """The Qwen2.5-Omni thinker (``Qwen2_5OmniThinkerForConditionalGeneration``): text, images, video, audio."""

    family = "qwen2_5_omni"

    def _frame_size(self, n_frames: int, height: int, width: int) -> tuple[int, int]:
        """Qwen2.5-VL's per-frame resize, within the processor's video budget when the checkpoint states none."""
        if self.checkpoint is None or (Path(self.checkpoint) / "video_preprocessor_config.json").is_file():
            return super()._frame_size(n_frames, height, width)
        factor = self.image_processor.patch_size * self.image_processor.merge_size
        return smart_resize(height, width, factor=factor, min_pixels=VIDEO_PIXELS[0], max_pixels=VIDEO_PIXELS[1])

    @cached_property
    def feature_extractor(self) -> WhisperFeatureExtractor:
        """The checkpoint's feature extractor (its ``preprocessor_config.json``); a tiny model's is Whisper's
        defaults at its audio tower's number of mel bins."""
        if self.checkpoint is not None:
            return WhisperFeatureExtractor.from_pretrained(self.checkpoint)
        return WhisperFeatureExtractor(feature_size=int(self.model.config.audio_config.num_mel_bins))

    # ----- audio -------------------------------------------------------------------------------
    def _audio(self, audio: Audio) -> VisionPiece:
        fe = self.feature_extractor
        if audio.sampling_rate != fe.sampling_rate:
            raise ValueError(
                f"{self.name}: audio at {audio.sampling_rate} Hz, "
                f"but its feature extractor reads {fe.sampling_rate} Hz; "
                f"decode it at that rate (kamera.data.media.read_audio resamples)"
            )
        if audio.samples.size > fe.n_samples:
            raise ValueError(
                f"{self.name}: {audio.duration_s:.1f} s of audio exceeds the feature extractor's "
                f"{fe.n_samples / fe.sampling_rate:.0f} s window; cut the audio chunk shorter"
            )
        feats = fe(audio.samples, sampling_rate=fe.sampling_rate, return_attention_mask=True, return_tensors="pt")
        mask = feats["attention_mask"].to(self.device)
        length = int(mask.sum())
        _, n_tokens = self.model.model.audio_tower._get_feat_extract_output_lengths(torch.tensor(length))
        if int(n_tokens) < 1:
            raise ValueError(f"{self.name}: {audio.duration_s * 1000:.0f} ms of audio encodes to no audio token")
        out = self.model.model.get_audio_features(feats["input_features"].to(self.device), feature_attention_mask=mask)
        rows = out.last_hidden_state
        cfg = self.model.config
        n = int(rows.shape[0])
        ids = [cfg.audio_start_token_id, *[cfg.audio_token_id] * n, cfg.audio_end_token_id]
        return VisionPiece(ids, [False, *[True] * n, False], rows, kind="audio", feature_len=length)

    # ----- positions ---------------------------------------------------------------------------
    def _local_positions(self, ids: torch.Tensor, pieces: list[VisionPiece]) -> torch.Tensor:
        """The model's own rope index of the span with one text token appended (its position is the span's
        extent), given every image's and video's grid, every video's seconds per grid and every audio's
        feature length."""
        ids = torch.cat([ids, ids.new_zeros(1)])[None]
        images = [p.grid_thw for p in pieces if p.kind == "image"]
        videos = [p for p in pieces if p.kind == "video"]
        audios = [p.feature_len for p in pieces if p.kind == "audio"]
        pos = self._rope_index(
            ids,
            None,
            torch.stack(images) if images else None,
            torch.stack([p.grid_thw for p in videos]) if videos else None,
            torch.tensor([p.second_per_grid for p in videos]) if videos else None,
            audio_seqlens=torch.tensor(audios) if audios else None,
        )
        return pos[:, 0].to(ids.device)

    def _rope_index(self, ids, kinds, image_grid, video_grid, seconds, audio_seqlens=None) -> torch.Tensor:
        """The model's own TMRoPE index [3, 1, n] (token kinds are read off the ids; an all-ones mask)."""
        pos, _ = self.model.model.get_rope_index(
            ids,
            image_grid_thw=image_grid,
            video_grid_thw=video_grid,
            attention_mask=torch.ones_like(ids),
            audio_seqlens=audio_seqlens,
            second_per_grids=seconds,
        )
        return pos
