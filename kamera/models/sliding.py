"""Decoders whose layers are of two types, sliding-window and global attention, each with its own RoPE base
(Gemma-3n, Gemma 3): what the adapter does the same way for both.

Read from transformers 5.24 ``cache_utils.py`` (``DynamicSlidingWindowLayer``) and the two families' modeling files:

- **Per-layer rotary frequencies.** ``rotary_emb`` holds ``<layer type>_inv_freq`` per layer type (Gemma 3: the
  local base ``rope_local_base_freq`` 10⁴ on sliding layers, ``rope_theta`` 10⁶ on global ones, which a
  ``rope_scaling`` such as 4B's linear ×8 divides), so the K channel's spec carries each layer's
  (``ChannelSpec.per_layer``) and R(δ) turns every layer by its own frequencies.
- **Caches keep every row.** A sliding layer attends the last ``sliding_window`` cache slots (the window counts
  slots, not positions), and transformers' own cache for it keeps the last window − 1 rows. The adapter's caches
  keep every row (``activate_past_recording``: the layer still hands attention only its last window − 1 rows plus
  the new ones, so what a forward computes is unchanged), so a chunk is read, relocated and patched whole at every
  layer and a spliced cache is exact.
- **4D masks.** A 4D mask given to the model is used as it is by every layer type, which would drop the window.
  Sliding layers get it restricted to the last ``window`` columns each row may attend (:meth:`_attention_mask`):
  for a causal mask that is the model's own window, and for the oracle's B ↛ A mask it is B's window as if A were
  absent.
- **The layer driver** (:mod:`kamera.reuse.recompute`) asks :meth:`layer_window` and :meth:`layer_rotary_embeddings`
  per layer, so a sliding layer's recomputed rows attend their own window (Gemma 3; Gemma-3n's AltUp and per-layer
  inputs keep it refused there).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from kamera.core import ChannelSpec, RotarySpec
from kamera.models.base import Adapter, additive_mask, kv_channels

SLIDING = "sliding_attention"


class SlidingWindowAdapter(Adapter):
    """An adapter whose decoder mixes sliding-window and global layers, each layer type with its own RoPE base."""

    @property
    def window(self) -> int:
        return int(self.text_config.sliding_window)

    def layer_types(self) -> list[str]:
        """Each cache-owning layer's type (``sliding_attention`` or ``full_attention``)."""
        return list(self.text_config.layer_types[: self.n_layers])

    def layer_window(self, layer: int) -> int | None:
        return self.window if self.text_config.layer_types[layer] == SLIDING else None

    def layer_rotary_embeddings(self, layer: int, hidden: torch.Tensor, position_ids: torch.Tensor):
        return self.lm.rotary_emb(hidden, position_ids, self.text_config.layer_types[layer])

    def layer_rotary(self, layer_type: str) -> RotarySpec:
        """The rotary spec of one layer type (``sliding_attention`` or ``full_attention``), from the model's own
        inverse frequencies."""
        inv_freq = getattr(self.lm.rotary_emb, f"{layer_type}_inv_freq").detach().float().cpu()
        return RotarySpec(self.rotary_layout(), inv_freq, 2 * inv_freq.numel())

    def rotary(self) -> RotarySpec:
        """The first layer's rotary spec (each layer's own: the K channel's ``per_layer``)."""
        return self.layer_rotary(self.text_config.layer_types[0])

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        specs = {t: self.layer_rotary(t) for t in set(self.text_config.layer_types)}
        per_layer = tuple(specs[t] for t in self.text_config.layer_types[: self.n_layers])
        k, v = kv_channels(self.text_config, per_layer[0])
        return ChannelSpec(k.name, k.heads, k.dim, k.rotary, per_layer), v

    def stop_ids(self) -> tuple[int, ...]:
        """The checkpoint's generation config's EOS ids (the -it checkpoints: <eos> 1 and <end_of_turn> 106); the
        text config loaded alone names only <eos>."""
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if eos is None:
            return super().stop_ids()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)

    def new_cache(self, data: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
        """A cache whose sliding-window layers keep every row (attention still reads only their window), filled
        with ``data`` for the first :attr:`n_layers` layers (later layers, e.g. KV-shared ones, stay empty)."""
        cache = DynamicCache(config=self.text_config)
        for layer in cache.layers:
            if getattr(layer, "is_sliding", False):
                layer.activate_past_recording()
        for layer, (k, v) in zip(cache.layers, data or (), strict=False):
            layer.update(k, v)
        return cache

    def _attention_mask(self, mask: torch.Tensor | None, cache: DynamicCache, n_new: int):
        """A 4D additive mask [1, 1, q, past + q] → per layer type: global layers take it as it is; sliding layers
        the last ``window`` columns each row may attend, cut to the columns their cache hands attention."""
        if mask is None:
            return None
        past = cache.get_seq_length()
        total = past + n_new
        if mask.shape[-2:] != (n_new, total):
            raise ValueError(f"4D mask of shape {tuple(mask.shape)} for {n_new} new tokens on a {past}-token cache")
        allow = mask[0, 0] > torch.finfo(mask.dtype).min / 2
        from_right = allow.flip(-1).cumsum(-1).flip(-1)  # allowed columns at or after each column, per row
        sliding = allow & (from_right <= self.window)
        visible = total if past < self.window else self.window - 1 + n_new  # DynamicSlidingWindowLayer.get_mask_sizes
        if bool(sliding[:, : total - visible].any()):
            raise ValueError(
                f"{self.name}: the 4D mask lets rows attend columns a sliding layer's cache no longer hands "
                f"attention (more than {self.window - 1} cached rows back)"
            )
        return {"full_attention": mask, SLIDING: additive_mask(sliding[:, total - visible :], mask.dtype)}
