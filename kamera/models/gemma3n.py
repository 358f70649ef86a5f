"""Gemma-3n (``google/gemma-3n-E4B-it``): text and images on transformers' native ``Gemma3nForConditionalGeneration``,
its vision tower kamera's own MobileNetV5.

What the adapter relies on, read from transformers 5.24 ``models/gemma3n/modeling_gemma3n.py``
(``Gemma3nModel``, ``Gemma3nTextModel``, ``Gemma3nTextAttention``, ``Gemma3nMultimodalEmbedder``),
``processing_gemma3n.py`` (``Gemma3nProcessor``) and ``cache_utils.py`` (``DynamicSlidingWindowLayer``):

- **Per-layer inputs.** Every decoder layer ℓ mixes a per-layer input [n, ℓ, 256] into its output.
  ``Gemma3nTextModel.project_per_layer_inputs`` forms it from a projection of the input embeddings and, added
  to it, ``get_per_layer_inputs(input_ids)``: rows of ``embed_tokens_per_layer``, a function of the token id
  alone. A forward from ``inputs_embeds`` drops that token-identity part unless it is passed, so every forward
  here passes the rows of exactly the spans it places, formed from each span's own ids (``_forward_extras``;
  decoded tokens: ``_token_extras``), as deepstack rows are carried per span: a span prefilled alone, behind
  the prefix or in context gets the same rows.
- **Sliding-window layers.** 4 of every 5 layers attend the last ``sliding_window`` (512) cache slots only
  (the window counts slots, not positions: transformers' ``sliding_window_overlay``), and transformers' own
  cache for them keeps the last 511 rows. The adapter's caches keep every row instead
  (``activate_past_recording``: the layer still hands attention only its last window − 1 rows plus the new
  ones, so what a forward computes is unchanged). So a B longer than the window is read, relocated and patched
  whole at every layer, and a spliced cache is exact. **What the operator does with the rows a sliding layer no
  longer reads:** nothing different. They stay in the chunk, relocated and patched like every row, and they
  count in a page's bytes; a query forward's sliding layers never read B's rows that lie window − 1 or more
  slots behind the query (tests/models/test_gemma3n.py corrupts them and the logits do not move), while the
  global layers, and the sliding layers of B's own later rows when they were computed, did read them.
- **KV-shared layers.** The last ``num_kv_shared_layers`` layers (15 of 35) have no K/V projections and no
  cache (``DummyLayer``): each reads, within the same forward, the K/V its source layer (the last earlier layer
  of its type: layer 18 for sliding, 19 for global) has just stored, cache included
  (``shared_kv_states``). A chunk's KV therefore holds the first L − num_kv_shared layers only
  (:attr:`n_layers`), and a shared layer's patch *is* its source layer's: a patched, relocated source row is
  what the shared layers attend.
- **Rotary frequencies per layer type.** Sliding layers rotate with θ = 10⁴, global ones with θ = 10⁶ (same
  rotate-half layout and head dim): the K channel's spec carries each layer's (``ChannelSpec.per_layer``), so
  R(δ) turns every layer by its own frequencies.
- **4D masks (the oracle).** A 4D mask given to the model is used as it is by every layer type, which would
  drop the window. Sliding layers get it restricted to the last ``window`` columns each row may attend
  (``_attention_mask``): for a causal mask that is the model's own window, and for the oracle's B ↛ A mask it is
  B's window as if A were absent, so the oracle equals blind reuse at native positions for any B length.
- **Embeddings and logits.** ``embed_tokens`` scales by √hidden (``Gemma3nTextScaledWordEmbedding``), so the
  base ``embed`` is the model's; final-logit soft-capping (30) is applied by :meth:`Adapter.logits`.
- **Images.** ``Gemma3nForConditionalGeneration`` builds its vision tower with
  ``AutoModel.from_config(vision_config)``, which transformers maps to ``TimmWrapperModel`` (timm, hence
  torchvision, which the harness does not install). Importing this module registers :class:`MobileNetV5Tower` for
  ``Gemma3nVisionConfig`` instead: it holds the native encoder (:mod:`kamera.models.mobilenetv5`) as ``timm_model``,
  so the checkpoint's ``model.vision_tower.timm_model.*`` tensors load into it by name. An image is resized to
  768 × 768 by SigLIP's PIL image processor (bilinear, rescaled to [0, 1], not normalised: the checkpoint's
  preprocessor config), encoded to a [2048, 16, 16] map, read as 256 soft tokens scaled by √2048 and embedded by
  ``embed_vision`` (``Gemma3nModel.get_image_features``). In the token stream it is laid out as
  ``Gemma3nProcessor.full_image_sequence``: ``\\n\\n<start_of_image>`` + 256 ``<image_soft_token>`` +
  ``<end_of_image>\\n\\n``. Ids from ``vocab_size_per_layer_input`` up are embedded as the model does it
  (``Gemma3nModel.forward``): the vision band (``<end_of_image>``, 262144) by ``embed_vision``'s hard embedding, the
  audio band by ``embed_audio``'s, and their per-layer-input rows are row 0.
- **Not served: audio.** The audio tower loads with the checkpoint, but kamera has no audio feature path for
  Gemma-3n (its 188-token audio spans: :data:`AUDIO_REASON`); text that holds soft-token ids is refused.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import transformers as tf
from PIL import Image
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from kamera.items.spans import Audio
from kamera.models.base import Placed, VisionPiece
from kamera.models.mobilenetv5 import ARCHITECTURES, MobileNetV5Encoder, cut_stages
from kamera.models.sliding import SlidingWindowAdapter

AUDIO_REASON = "kamera serves Gemma-3n's text and images; its audio tower's feature path is not wired"


class MobileNetV5Tower(PreTrainedModel):
    """What ``Gemma3nModel.vision_tower`` is here: the native MobileNetV5 (``timm_model``, timm's attribute name) in
    place of ``TimmWrapperModel``, called as ``get_image_features`` calls it.

    ``vision_config.architecture`` names the stages (:data:`kamera.models.mobilenetv5.ARCHITECTURES`), its
    ``hidden_size`` is the output width; ``model_args`` may set ``msfa_output_resolution`` (timm's name, default 16)
    and ``stage_depths`` (a shallower tower of the same blocks, :func:`cut_stages`: the shaped checkpoint's)."""

    config_class = tf.Gemma3nVisionConfig
    config: tf.Gemma3nVisionConfig
    main_input_name = "pixel_values"
    base_model_prefix = "timm_model"
    _supports_sdpa = True  # as TimmWrapperModel: the attention kernel the decoder is loaded with is not the tower's
    _supports_flash_attn = True
    _no_split_modules: ClassVar[list[str]] = ["MobileNetV5Tower"]  # device_map="auto" keeps the tower on one device
    input_modalities = ("image",)

    def __init__(self, config: tf.Gemma3nVisionConfig) -> None:
        super().__init__(config)
        if config.architecture not in ARCHITECTURES:
            raise ValueError(f"Gemma-3n vision architecture {config.architecture!r} is not one kamera builds "
                             f"({', '.join(ARCHITECTURES)})")
        args = dict(config.model_args or {})
        unknown = set(args) - {"msfa_output_resolution", "stage_depths"}
        if unknown:
            raise ValueError(f"Gemma-3n vision model_args {sorted(unknown)} are not ones kamera's MobileNetV5 takes")
        stages, stem = ARCHITECTURES[config.architecture]
        if "stage_depths" in args:
            stages = cut_stages(stages, args["stage_depths"])
        self.timm_model = MobileNetV5Encoder(
            stages, stem, config.hidden_size, int(args.get("msfa_output_resolution", 16))
        )
        self.post_init()

    def forward(
        self, pixel_values: torch.Tensor, do_pooling: bool = False, return_dict: bool = True, **kwargs
    ) -> BaseModelOutputWithPooling:
        """Pixels [B, 3, H, W] → ``last_hidden_state`` [B, hidden, r, r] (Gemma-3n never pools)."""
        if do_pooling:
            raise ValueError("Gemma-3n reads the MobileNetV5 map unpooled (do_pooling=False)")
        return BaseModelOutputWithPooling(last_hidden_state=self.timm_model(pixel_values))


tf.AutoModel.register(tf.Gemma3nVisionConfig, MobileNetV5Tower, exist_ok=True)


class Gemma3nAdapter(SlidingWindowAdapter):
    """Gemma-3n on the shared sliding-window adapter (:mod:`kamera.models.sliding`: per-layer RoPE bases, caches
    that keep every row, 4D masks per layer type); the per-layer inputs, KV sharing and towers are its own."""

    family = "gemma3n"
    attention = "GQA"

    @property
    def n_layers(self) -> int:
        """Layers that own a cache, the first L − ``num_kv_shared_layers``: a chunk's KV layers (the shared layers
        read their source layer's rows)."""
        c = self.text_config
        return int(c.num_hidden_layers) - int(c.num_kv_shared_layers or 0)

    # ----- text --------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        ids = super().tokenize(text)
        top = int(self.text_config.vocab_size_per_layer_input)
        if any(i >= top for i in ids):
            raise ValueError(
                f"{self.name}: text {text[:40]!r} holds token ids >= {top}, Gemma-3n's vision and audio "
                "soft tokens: an image is a part of its own (the adapter places its tokens), and audio is "
                f"not served ({AUDIO_REASON})"
            )
        return ids

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings as ``Gemma3nModel.forward`` forms them from ids: the scaled text table, except the vision
        band [vision offset, audio offset) through ``embed_vision``'s hard embedding and the audio band through
        ``embed_audio``'s."""
        ids = ids.to(self.device)
        out = super().embed(ids)
        for embedder, lo, hi in self._bands():
            band = (ids >= lo) & (ids < hi)
            if bool(band.any()):
                hard = embedder(input_ids=ids[band][None])[0]  # [n_band, hidden]
                out = out.masked_scatter(band[..., None], hard.to(out.dtype))
        return out

    def _bands(self) -> list[tuple[torch.nn.Module, int, int]]:
        m = self.model.model
        v, a = m.embed_vision, m.embed_audio
        return [(v, v.vocab_offset, a.vocab_offset), (a, a.vocab_offset, a.vocab_offset + a.vocab_size)]

    # ----- images ------------------------------------------------------------------------------
    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        px = self.image_processor(images=[image], return_tensors="pt")["pixel_values"]  # [1, 3, 768, 768]
        return {"pixel_values": px.to(next(self.model.model.vision_tower.parameters()).dtype)}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        out = self.model.model.get_image_features(pixels["pixel_values"]).pooler_output  # [1, 256, hidden]
        return out.reshape(-1, out.shape[-1]), None  # [256, hidden]

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        """``\\n\\n<start_of_image>`` + n soft tokens + ``<end_of_image>\\n\\n`` (``Gemma3nProcessor``), n the config's
        ``vision_soft_tokens_per_image``."""
        cfg = self.model.config
        if n != cfg.vision_soft_tokens_per_image:
            raise RuntimeError(
                f"{self.name}: the vision tower gave {n} soft tokens, the config lays out "
                f"{cfg.vision_soft_tokens_per_image}"
            )
        gap = self.tokenize("\n\n")
        ids = [*gap, cfg.boi_token_id, *[cfg.image_token_id] * n, cfg.eoi_token_id, *gap]
        return ids, [False] * (len(gap) + 1) + [True] * n + [False] * (len(gap) + 1)

    def _audio(self, audio: Audio) -> VisionPiece:
        raise NotImplementedError(f"{self.name} ({self.family}): audio chunks are refused ({AUDIO_REASON})")

    # ----- per-layer inputs --------------------------------------------------------------------
    def _token_extras(self, ids: torch.Tensor) -> dict:
        """The token-identity half of the per-layer inputs, [1, q, L, 256], from ids [1, q]."""
        return {"per_layer_inputs": self.lm.get_per_layer_inputs(ids.to(self.device)).to(self.dtype)}

    def _forward_extras(self, placed: Placed) -> dict:
        return self._token_extras(torch.cat([s.input_ids for s, _ in placed])[None])
