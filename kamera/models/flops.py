"""The per-model FLOP vocabulary: a forward's shape (:class:`Forward`), an item's token shape (arm items
:class:`ItemShape`, window items :class:`WindowShape`) and a model's FLOPs per token (:class:`ModelFlops`) from
its full published config.

Model FLOPs come from the full published config (``kamera/models/shaped/configs/<model>.json``, the file the
shaped writer and the remote-code loaders read): per token, 2 × the decoder's active weights (attention projections,
MLA's low-rank ones included; dense MLP or the routed top-k experts, shared experts and router) plus the attention
scores over the context (QKᵀ and AV, 2 FLOPs per multiply-add each); for each image token the vision tower's 2 × weights
per patch (``merge²`` patches per token). The LM head runs once per forward. A Gated DeltaNet layer (Qwen3.5's
``linear_attention``) has no context term: its projections (q, k, v, the output gate z, β and the gate's a, the output)
and its recurrence, about 4 multiply-adds per token on each value head's d_k × d_v state, whatever the context. The
H100-hour estimate built on these is :mod:`kamera.sweep.cost`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple


class Forward(NamedTuple):
    """``count`` forwards of ``tokens`` new tokens attending ``context`` tokens on average (a fractional count
    is a partial forward through that share of the layers)."""

    tokens: float
    context: float
    count: float = 1.0


@dataclass(frozen=True)
class ItemShape:
    """Tokens of one arm item: the whole context ``n``, B's ``n_b``, the prefix, the query and image tokens."""

    n: int
    n_b: int
    prefix: int = 40
    query: int = 60
    image_tokens: int = 0

    def full(self, count: float = 1.0) -> Forward:
        """The full prefill [prefix · A · B · query] (also the 4D-mask oracle's shape)."""
        return Forward(self.n, self.n / 2, count)

    def solo(self, count: float = 1.0) -> Forward:
        """B's canonical prefill behind the prefix."""
        return Forward(self.n_b, self.prefix + self.n_b / 2, count)

    def query_over(self, count: float = 1.0) -> Forward:
        """A query forward over the whole item's cache."""
        return Forward(self.query, self.n, count)

    def b_alone(self, count: float = 1.0) -> Forward:
        """B prefilled with nothing before it."""
        return Forward(self.n_b, self.n_b / 2, count)

    def b_in_context(self, count: float = 1.0) -> Forward:
        """B's rows re-run over the full prefill's cache (``count`` < 1: through that share of the layers)."""
        return Forward(self.n_b, self.n, count)


@dataclass(frozen=True)
class WindowShape:
    """Tokens of one window item: ``chunk`` tokens per chunk (``image_tokens`` of them visual), the prefix and
    query, the window ``k``, the ``history`` chunks of the stream and the ``foreign`` chunks of another clip."""

    chunk: int
    window: int
    history: int
    foreign: int = 0
    prefix: int = 40
    query: int = 60
    image_tokens: int = 0

    def layout(self, chunks: int, count: float = 1.0) -> Forward:
        """The re-prefill of a layout of ``chunks`` chunks (target included): prefix · chunks · query."""
        n = self.prefix + chunks * self.chunk + self.query
        return Forward(n, n / 2, count)

    def query_over(self, chunks: int, count: float = 1.0) -> Forward:
        """A query forward over a spliced layout of ``chunks`` chunks."""
        return Forward(self.query, self.prefix + chunks * self.chunk, count)

    def canonical(self, count: float = 1.0) -> Forward:
        """A chunk's canonical prefill behind the prefix."""
        return Forward(self.chunk, self.prefix + self.chunk / 2, count)

    def rows(self, chunks: int, share: float) -> Forward:
        """The target's rows re-run through ``share`` of the layers over a layout of ``chunks`` chunks."""
        return Forward(self.chunk, self.prefix + chunks * self.chunk, share)


@dataclass(frozen=True)
class ModelFlops:
    """Per-token FLOPs of a model, read off its published config."""

    name: str
    decoder: float  # 2 × active decoder weights per token
    layers: int
    q_width: int  # half the attention-score FLOPs per token and context token, per layer: heads × (qk + v) / 2
    head: float  # 2 × hidden × vocabulary (one per forward)
    vision_per_token: float  # vision tower FLOPs per image token the language model sees
    sliding_layers: int = 0  # layers attending at most ``window`` tokens (Gemma-3n's sliding-window layers)
    window: int = 0
    linear_layers: int = 0  # recurrent (Gated DeltaNet) layers: no attention over the context

    def forward(self, tokens: float, context: float) -> float:
        """FLOPs of a forward over ``tokens`` new tokens attending ``context`` tokens on average (a sliding-window
        layer at most ``window`` of them)."""
        full = self.layers - self.sliding_layers - self.linear_layers
        spans = full * context + self.sliding_layers * min(context, self.window)
        return tokens * (self.decoder + 4 * self.q_width * spans) + self.head

    def forwards(self, forwards: list[Forward], image_tokens: float = 0.0) -> float:
        """FLOPs of a list of forwards plus ``image_tokens`` through the vision tower."""
        return sum(f.count * self.forward(f.tokens, f.context) for f in forwards) + image_tokens * self.vision_per_token


def _get(config: object, key: str, default: object = None) -> object:
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


def _mla(t: object) -> tuple[int, int, int]:
    """One MLA layer (``kv_lora_rank`` r, rotary width ρ, no-rope qk width d_n, value width d_v, H heads, hidden
    h): q h·H·(d_n + ρ), or r_q·(h + H·(d_n + ρ)) through its low-rank pair (``q_lora_rank`` r_q); the joint KV
    down-projection h·(r + ρ); its up-projection r·H·(d_n + d_v); o H·d_v·h. Its weights, q_width
    H·(d_n + ρ + d_v) / 2 and no K/V projection of its own (0)."""
    h, heads = t.hidden_size, t.num_attention_heads
    qk, v, rope = t.qk_nope_head_dim + t.qk_rope_head_dim, t.v_head_dim, t.qk_rope_head_dim
    q = h * heads * qk if not _get(t, "q_lora_rank") else t.q_lora_rank * (h + heads * qk)
    attn = q + h * (t.kv_lora_rank + rope) + t.kv_lora_rank * heads * (t.qk_nope_head_dim + v) + heads * v * h
    return attn, heads * (qk + v) // 2, 0


def _gqa(t: object) -> tuple[int, int, int]:
    """One multi-/grouped-query attention layer (H query heads, K KV heads of width d, hidden h): q and o h·H·d
    each (q twice as wide with ``attn_output_gate``), k and v h·K·d each. Its weights, q_width H·d and its K/V
    projections' weights 2·h·K·d (what a KV-shared layer lacks)."""
    h, heads = t.hidden_size, t.num_attention_heads
    head_dim = _get(t, "head_dim") or h // heads
    kv = _get(t, "num_key_value_heads", heads)
    gate = 1 if _get(t, "attn_output_gate", False) else 0
    kv_proj = 2 * h * kv * head_dim
    return (2 + gate) * h * heads * head_dim + kv_proj, heads * head_dim, kv_proj


def _gated_deltanet(t: object) -> int:
    """One Gated DeltaNet layer (h_k key and h_v value heads of widths d_k, d_v; c = 2·h_k·d_k + h_v·d_v): in_proj_qkv
    h·c, z h·h_v·d_v, b and a h·h_v each, out_proj h_v·d_v·h; the causal conv c·kernel; the state recurrence,
    about 4 multiply-adds per token on each value head's d_k × d_v state, 4·h_v·d_k·d_v, whatever the context."""
    h = t.hidden_size
    hk, hv = t.linear_num_key_heads, t.linear_num_value_heads
    dk, dv = t.linear_key_head_dim, t.linear_value_head_dim
    conv_dim = 2 * hk * dk + hv * dv
    return h * (conv_dim + hv * dv + 2 * hv) + hv * dv * h + conv_dim * t.linear_conv_kernel_dim + 4 * hv * dk * dv


def _attention_weights(t: object, types: list[str]) -> tuple[int, int, int]:
    """The decoder's attention weights a token passes through, its q_width and its number of linear layers: every
    attention layer's (:func:`_mla` or :func:`_gqa`; a KV-shared layer, ``num_kv_shared_layers``, without its K/V
    projections) and every Gated DeltaNet layer's (``layer_types`` "linear_attention", :func:`_gated_deltanet`)."""
    attn, q_width, kv_proj = _mla(t) if _get(t, "kv_lora_rank") else _gqa(t)
    linear = sum(1 for k in types if k == "linear_attention")
    total = (t.num_hidden_layers - linear) * attn - _get(t, "num_kv_shared_layers", 0) * kv_proj
    if linear:
        total += linear * _gated_deltanet(t)
    return total, q_width, linear


def _moe_layer(t: object, experts: int) -> int:
    """One MoE layer (hidden h, E routed experts of width I_e, k per token): the k routed experts 3·h·I_e each, the
    router h·E and the shared experts 3·h·I_s (``shared_expert_intermediate_size``, or ``n_shared_experts`` × I_e)."""
    h = t.hidden_size
    shared = _get(t, "shared_expert_intermediate_size", 0) or _get(t, "n_shared_experts", 0) * t.moe_intermediate_size
    return t.num_experts_per_tok * 3 * h * t.moe_intermediate_size + h * experts + 3 * h * shared


def _mlp_weights(t: object) -> int:
    """The decoder's MLP weights a token passes through: 3·h·I per dense layer (gate, up and down; Gemma-3n's I
    per layer), or the ``first_k_dense_replace`` dense layers and a :func:`_moe_layer` for each other one."""
    h, layers = t.hidden_size, t.num_hidden_layers
    inter = t.intermediate_size
    inter = list(inter) if isinstance(inter, (list, tuple)) else [inter] * layers
    experts = _get(t, "num_experts") or _get(t, "n_routed_experts")
    if not experts:
        return 3 * h * sum(inter)
    dense = _get(t, "first_k_dense_replace", 0)
    return dense * 3 * h * inter[0] + (layers - dense) * _moe_layer(t, experts)


def _gemma3n_weights(t: object) -> int:
    """Gemma-3n's weights beside attention and MLP (0 for other models), with L layers, per-layer input width p
    (``hidden_size_per_layer_input``), s AltUp streams and LAuReL rank r: the per-layer input projection h·L·p,
    each layer's gate and projection 2·h·p, AltUp in and out 2·(s − 1)·h², and per layer 2·h·r (LAuReL) + h·s."""
    h, layers = t.hidden_size, t.num_hidden_layers
    per_layer = _get(t, "hidden_size_per_layer_input", 0)
    if not per_layer:
        return 0
    streams = _get(t, "altup_num_inputs", 1)
    extra = h * layers * per_layer + layers * 2 * h * per_layer + 2 * (streams - 1) * h * h
    return extra + layers * (2 * h * _get(t, "laurel_rank", 0) + h * streams)


def _vision_per_token(parsed: object) -> float:
    """The vision tower's FLOPs per image token the language model sees: 2 × its weights per patch, per layer
    4·v² + 2·v·I_v (q, k, v and o; the MLP's two) at width v, times the patches the tower sees per token (merge²,
    the merge kernel, 1 / pixel-shuffle ratio², scale²). 0 without a tower, or for Gemma-3n's (timm, not served)."""
    v_cfg = getattr(parsed, "vision_config", None)
    if v_cfg is None or v_cfg.model_type == "gemma3n_vision":
        return 0.0
    vh = v_cfg.hidden_size
    vint = _get(v_cfg, "intermediate_size", 4 * vh)
    vlayers = _get(v_cfg, "depth") or v_cfg.num_hidden_layers
    kernel = _get(v_cfg, "merge_kernel_size")
    per_token = (kernel[0] * kernel[1] if kernel else None) or (
        _get(v_cfg, "spatial_merge_size")
        or _get(parsed, "scale_factor")
        or round(1 / _get(parsed, "downsample_ratio", 1.0))
    ) ** 2
    return 2.0 * vlayers * (4 * vh * vh + 2 * vh * vint) * per_token


def model_flops(name: str, config: dict) -> ModelFlops:
    """Per-token FLOPs from a published config, read through transformers' config classes (so values the
    file leaves at their defaults count too). MLA (``kv_lora_rank``) and DeepSeek-style MoE
    (``n_routed_experts``, shared experts, ``first_k_dense_replace`` dense layers) are counted as such; so are
    Gemma-3n's per-layer MLP widths, KV-shared layers (no K/V projections), sliding-window layers, per-layer inputs,
    AltUp and LAuReL projections (its vision tower is not served: no image FLOPs); and Qwen3.5's Gated DeltaNet layers
    (``layer_types`` "linear_attention": their projections and recurrence, no context term) and gated queries
    (``attn_output_gate``: q_proj twice as wide). decoder = 2 × (attention + MLP + Gemma-3n's extra weights)."""
    import transformers as tf

    parsed = tf.AutoConfig.for_model(**copy.deepcopy(config))  # config classes edit nested dicts in place
    parsed = getattr(parsed, "thinker_config", parsed)
    t = parsed.get_text_config(decoder=True)
    types = list(_get(t, "layer_types", []) or [])
    attn, q_width, linear = _attention_weights(t, types)
    sliding = sum(1 for k in types if k == "sliding_attention") if _get(t, "sliding_window") else 0
    return ModelFlops(
        name,
        2.0 * (attn + _mlp_weights(t) + _gemma3n_weights(t)),
        t.num_hidden_layers,
        q_width,
        2.0 * t.hidden_size * t.vocab_size,
        _vision_per_token(parsed),
        sliding,
        int(_get(t, "sliding_window", 0) or 0) if sliding else 0,
        linear,
    )


def published_config(name: str) -> dict:
    """A paper model's full published config, as transformers reads it: ``configs/<name>.json``, or
    for a remote-code config (``model_type`` transformers does not know, e.g. Kimi-VL's ``kimi_vl``) the native
    config its loader module maps it to (``native_config``). ValueError naming why not."""
    import importlib

    from transformers import CONFIG_MAPPING

    from kamera.models.registry import entry
    from kamera.models.shaped.writer import published_json

    try:
        config = published_json(name)
    except FileNotFoundError:
        raise ValueError(f"{name} has no published config (kamera/models/shaped/configs/{name}.json)") from None
    if config.get("model_type") in CONFIG_MAPPING:
        return config
    loader = entry(name).loader
    native = getattr(importlib.import_module(loader.split(":")[0]), "native_config", None) if loader else None
    if native is None:
        raise ValueError(
            f"{name}: its published config ({config.get('model_type')}) is remote code and its loader "
            "has no native_config mapping for transformers"
        )
    return native(config).to_dict()


@cache
def paper_model_flops(name: str) -> ModelFlops:
    """:func:`model_flops` of a paper model's :func:`published_config` (read once per process)."""
    return model_flops(name, published_config(name))
