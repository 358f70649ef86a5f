"""Plain decoder-only language models (Qwen2, Llama): text spans, 1-D RoPE, K (rotary) and V (content).

Used by the embedded toy binding model and by text-only controls.
"""

from __future__ import annotations

import torch

from kamera.core import ChannelSpec
from kamera.models.base import Adapter, kv_channels


class TextAdapter(Adapter):
    family = "text"
    attention = "GQA"

    def _language_model(self) -> torch.nn.Module:
        return self.model.model

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        return kv_channels(self.text_config, self.rotary())
