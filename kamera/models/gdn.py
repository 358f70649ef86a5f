"""Qwen3.5 (``qwen3_5``), the Gated DeltaNet linear-attention hybrid (registered as ``gdn_hybrid``).

Three of every four decoder layers are Gated DeltaNet (``layer_types`` "linear_attention"): they cache a
recurrent state and a conv state, no K/V. The rest are full attention (GQA, partial RoPE: 64 of 256 dims
rotate, interleaved M-RoPE) and take the operator as they are: their K/V is a :class:`ChunkKV` as for
Qwen3-VL, whose vision tower, image layout and rope index this family shares (no deepstack).

The GDN layers' reuse is :mod:`kamera.core.state`: a chunk's page (B's own contribution to the state:
T_B, S(B | 0), its first kernel − 1 tokens' raw inputs and its conv tail) is composed behind whatever
precedes it when a cache is built, so every arm works through :meth:`read` / :meth:`cache`:

- re-prefill: one forward (the model's own kernel);
- blind: B's canonical page (inputs from B's solo forward behind the prefix) composed behind A's state;
- patch: the same plus the rank-m per-head SVD of Δ_S = S(B | A) − compose(S_A, B's canonical page) on
  every GDN layer, and the KV patch on the attention layers (rank 0 = blind, full rank = S(B | A)).

The boundary choice: B's first kernel − 1 tokens are recomputed behind A at composition (their conv reads
A's last inputs), so composition is exact at the first layer and behind an unchanged context.

How the pages are read: forward hooks on each GDN layer's ``in_proj_qkv``, ``in_proj_b`` and ``in_proj_a``
record their outputs (the layer's per-token inputs) into the forward's :class:`RecordingCache`; a chunk's
page, and the state entering it, are computed from those by the recurrence in :mod:`kamera.core.state`
(the model's own ``torch_chunk_gated_delta_rule`` computes the same to float rounding; a test compares them).

A 4D mask cannot keep A out of B's recurrent state (the mask reaches only attention layers), so the
4D-mask oracle is refused with a one-line error; token-subset recompute is not defined for these layers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import DynamicCache

from kamera.core import ChunkKV
from kamera.core.state import Carry, ChunkState, DeltaRuleSpec, LayerInputs, compose, fold, page
from kamera.models.base import ForwardOut, Placed
from kamera.models.qwen_vl import Qwen3VLAdapter

_PROJECTIONS = ("in_proj_qkv", "in_proj_b", "in_proj_a")
ORACLE_REFUSAL = ("{name}: a 4D mask cannot keep A out of B's recurrent state (Gated DeltaNet layers ignore it); the "
                  "4D-mask oracle is not defined for this family")


class RecordingCache(DynamicCache):
    """A hybrid cache that also keeps its GDN layers' per-token inputs from ``start`` on (the adapter's hooks
    append them) and the carries at ``start`` (zero for a fresh cache; the composed state of a spliced one)."""

    def __init__(self, config, data=None, start: int = 0, base: list[Carry] | None = None) -> None:
        super().__init__(ddp_cache_data=data, config=config)
        self.start = start
        self.base = base
        self.calls: dict[int, list[list[torch.Tensor]]] = {}  # layer → per forward: [mixed, b, a], each [n, ·]
        self.carries: dict[int, list[Carry]] = {}  # memo: token → carries entering it

    def recorded(self, layer: int) -> LayerInputs:
        calls = self.calls.get(layer, [])
        if not calls:
            raise ValueError(f"GDN layer {layer}: this cache recorded no inputs (was it filled by the adapter?)")
        return LayerInputs(*(torch.cat([c[i] for c in calls]) for i in range(3)))


class GatedDeltaNetAdapter(Qwen3VLAdapter):
    family = "qwen3_5"
    attention = "GQA"  # the attention layers' KV; the rank rule of GQA (K and V at m)

    def __init__(self, model: torch.nn.Module, tokenizer, image_processor=None, name: str = "") -> None:
        super().__init__(model, tokenizer, image_processor, name)
        types = list(self.text_config.layer_types)
        self.attn_layers = [i for i, t in enumerate(types) if t == "full_attention"]
        self.gdn_layers = [i for i, t in enumerate(types) if t == "linear_attention"]
        if not self.attn_layers:
            raise ValueError(f"{self.name}: no full-attention layer in layer_types {types}")

    @property
    def state_specs(self) -> tuple[DeltaRuleSpec, ...]:
        """Each GDN layer's fixed parameters, read from the modules as they are now (a float32 upcast after
        loading replaces the parameters, so they are never cached here)."""
        out = []
        for l in self.gdn_layers:
            m = self.lm.layers[l].linear_attn
            out.append(DeltaRuleSpec(l, m.num_k_heads, m.num_v_heads, m.head_k_dim, m.head_v_dim,
                                     m.conv1d.weight.detach()[:, 0], m.A_log.detach(), m.dt_bias.detach()))
        return tuple(out)

    # ----- forwards ----------------------------------------------------------------------------
    def new_cache(self, data=None) -> RecordingCache:
        return RecordingCache(self.text_config, data)

    @contextmanager
    def _recording(self, cache: RecordingCache) -> Iterator[None]:
        """Record every GDN layer's projection outputs of the next forward into ``cache``."""
        handles, got = [], {l: {} for l in self.gdn_layers}
        for l in self.gdn_layers:
            mod = self.lm.layers[l].linear_attn
            for name in _PROJECTIONS:
                def hook(_m, _inp, out, l=l, name=name):
                    got[l][name] = out[0].detach()
                handles.append(getattr(mod, name).register_forward_hook(hook))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        for l, outs in got.items():
            if outs:
                cache.calls.setdefault(l, []).append([outs[n] for n in _PROJECTIONS])

    def refuses(self, need: str) -> str | None:
        """The 4D-mask oracle (and every plugin that reads it) is refused: see :meth:`forward`."""
        if need == "oracle":
            return ORACLE_REFUSAL.format(name=self.name)
        return super().refuses(need)

    @torch.no_grad()
    def forward(self, placed: Placed, cache: DynamicCache | None = None, mask: torch.Tensor | None = None,
                tag: str = "forward") -> ForwardOut:
        """The base forward, recording the GDN layers' inputs; a 4D mask is refused (it cannot reach the state)."""
        if mask is not None:
            raise ValueError(ORACLE_REFUSAL.format(name=self.name))
        cache = cache if cache is not None else self.new_cache()
        if not isinstance(cache, RecordingCache):
            raise TypeError(f"{self.name}: forward needs a cache from this adapter (new_cache / cache)")
        with self._recording(cache):
            return super().forward(placed, cache, None, tag)

    # ----- cache <-> ChunkKV -------------------------------------------------------------------
    def carry_at(self, cache: RecordingCache, token: int) -> list[Carry]:
        """The GDN carries entering token ``token`` of ``cache`` (composed from the nearest known token before it)."""
        if token < cache.start:
            raise ValueError(f"token {token} precedes what this cache recorded (from token {cache.start})")
        if token == cache.start:
            return cache.base or [Carry.zero(s, self.dtype, self.device) for s in self.state_specs]
        if token not in cache.carries:
            known = max((t for t in cache.carries if t < token), default=cache.start)
            prev = self.carry_at(cache, known)
            specs = self.state_specs
            cache.carries[token] = [
                compose(s, c, page(s, cache.recorded(s.layer).slice(known - cache.start, token - cache.start)))
                for s, c in zip(specs, prev, strict=True)
            ]
        return cache.carries[token]

    def read(self, cache: DynamicCache, start: int, stop: int, positions: torch.Tensor) -> ChunkKV:
        """Tokens [start, stop): the attention layers' K/V and the GDN layers' pages with the state entering them."""
        layers = []
        for l in self.attn_layers:
            layer = cache.layers[l]
            layers.append((layer.keys[0, :, start:stop].transpose(0, 1).contiguous(),
                           layer.values[0, :, start:stop].transpose(0, 1).contiguous()))
        before, specs = self.carry_at(cache, start), self.state_specs
        pages = [page(s, cache.recorded(s.layer).slice(start - cache.start, stop - cache.start)) for s in specs]
        if stop not in cache.carries:  # the carries leaving the chunk, for the next read
            cache.carries[stop] = [compose(s, c, p) for s, c, p in zip(specs, before, pages, strict=True)]
        return ChunkKV(self.specs, layers, positions.clone(), ChunkState(specs, pages, before))

    def cache(self, chunks: list[ChunkKV]) -> RecordingCache:
        """A fresh cache: the attention layers' K/V end to end, the GDN layers' state composed over the chunks."""
        if any(c.state is None for c in chunks):
            raise ValueError(f"{self.name}: every chunk needs its GDN state pages (read it with this adapter)")
        data: list[tuple] = [(None, None)] * self.n_layers
        for i, l in enumerate(self.attn_layers):
            k = torch.cat([c.layers[i][0] for c in chunks]).transpose(0, 1)[None]
            v = torch.cat([c.layers[i][1] for c in chunks]).transpose(0, 1)[None]
            data[l] = (k.contiguous(), v.contiguous())
        carries = fold([c.state for c in chunks], self.dtype, self.device)
        cache = RecordingCache(self.text_config, data, start=sum(c.n_tokens for c in chunks), base=carries)
        for s, c in zip(self.state_specs, carries, strict=True):
            conv = torch.cat([c.history[:1] * 0, c.history]).T[None]  # [1, conv_dim, K]: the last K inputs
            cache.layers[s.layer].update_conv_state(conv.contiguous())
            cache.layers[s.layer].update_recurrent_state(c.state[None].clone())
        return cache

    def decode_cache(self, cache: DynamicCache) -> DynamicCache:
        """A new cache over the attention layers' K/V and copies of the GDN states (decoding updates those in
        place); the recorded inputs are not carried (decoding reads no pages)."""
        data: list[tuple] = [(None, None)] * self.n_layers
        for l in self.attn_layers:
            data[l] = (cache.layers[l].keys, cache.layers[l].values)
        out = DynamicCache(ddp_cache_data=data, config=self.text_config)
        for l in self.gdn_layers:
            out.layers[l].update_conv_state(cache.layers[l].conv_states[0].clone())
            out.layers[l].update_recurrent_state(cache.layers[l].recurrent_states[0].clone())
        return out


def tiny_config():
    """The tiny twin's config (``tiny_gdn_hybrid``): the shared tiny decoder as Qwen3.5, layers GDN, GDN, GDN, full
    (the published 3-in-4 pattern), GDN heads 2 key / 4 value of 64 (state 64 × 64 per head), partial RoPE (16 of 64
    dims, interleaved M-RoPE), and Qwen3-VL's tiny vision tower without deepstack."""
    import transformers as tf

    from kamera.models.tiny import QWEN3_VISION, SPECIAL_IDS, TEXT

    rope = dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25, mrope_section=[3, 3, 2],
                mrope_interleaved=True)
    text = dict(TEXT, head_dim=64, rope_parameters=rope, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
                layer_types=["linear_attention"] * 3 + ["full_attention"])
    vision = {k: v for k, v in QWEN3_VISION.items() if k != "deepstack_visual_indexes"}
    return tf.Qwen3_5Config(text_config=text, vision_config=dict(vision, spatial_merge_size=2, temporal_patch_size=2),
                            **SPECIAL_IDS)
