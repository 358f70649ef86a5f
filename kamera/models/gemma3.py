"""Gemma 3 text decoders (``Gemma3ForCausalLM``, model_type ``gemma3_text``: Gemma 3 270M and 1B, and the text
decoder of the 4B / 12B / 27B checkpoints), on transformers' native class.

What the adapter relies on, read from transformers 5.24 ``models/gemma3/modeling_gemma3.py`` (``Gemma3TextModel``,
``Gemma3Attention``, ``Gemma3RotaryEmbedding``) and ``configuration_gemma3.py`` (``Gemma3TextConfig``):

- **Layer types.** ``layer_types``: 5 sliding-window layers (``sliding_window`` slots: 512 on 270M / 1B, 1024 on 4B)
  for every global one (``(i + 1) % 6 == 0`` is global). Shared with Gemma-3n (:mod:`kamera.models.sliding`): each
  layer type rotates with its own base, ``rope_local_base_freq`` (10⁴) on sliding layers and ``rope_theta`` (10⁶,
  divided by 4B's linear ``rope_scaling`` factor 8) on global ones; caches keep every row; a 4D mask is cut to each
  sliding row's window.
- **One KV head** on 270M and 1B (4 query heads of 256): the cache is K and V of [1, 256] per token and layer (GQA,
  kv_heads 1). **QK-norm**: ``q_norm`` / ``k_norm`` act on the head before RoPE, so the cached key is R(p)·k̂ and
  R(δ) moves it exactly. ``query_pre_attn_scalar`` scales the scores (the model's own attention applies it;
  nothing in the cache depends on it).
- **Embeddings** are scaled by √hidden inside ``Gemma3TextScaledWordEmbedding``, so the base ``embed`` (the input
  embeddings module) is the model's. ``final_logit_softcapping`` is None on Gemma 3 (:meth:`Adapter.logits` applies a
  cap only when one is set).
- **The layer driver.** Unlike Gemma-3n, every layer is a plain pre/post-norm attention + MLP block taking
  ``position_embeddings`` of its own type and the 4D mask, so token- and layer-recompute arms (CacheBlend, EPIC,
  first-k, …) drive it: :mod:`kamera.reuse.recompute` masks a sliding layer's rows to their window
  (:meth:`layer_window`) and rotates with the layer's base (:meth:`layer_rotary_embeddings`).

What relocation and the patch mean on a sliding layer (docs/metrics.md, "Sliding-window layers"): R(δ) is exact per
layer with that layer's base (a chunk prefilled alone sees the same slots at any offset); Δ at a sliding layer is
what A changed in B's rows there, through the window's view of A's tail and through the global layers below; the
patch is formed and applied at every layer alike, and a query forward's sliding layers read only B's rows within
their window.
"""

from __future__ import annotations

import torch

from kamera.models.sliding import SlidingWindowAdapter


class Gemma3Adapter(SlidingWindowAdapter):
    family = "gemma3_text"
    attention = "GQA"

    def _language_model(self) -> torch.nn.Module:
        return self.model.model

    def refuses(self, need: str) -> str | None:
        """The layer driver serves Gemma 3's sliding layers (each row masked to its window); nothing else is
        refused."""
        return None if need == "layers" else super().refuses(need)
