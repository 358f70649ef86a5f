"""Which models the engine connector can splice into, and their cached channels (no vLLM needed).

The connector writes two page kinds:

- **GQA / MHA** (``qwen2``, ``llama``, ``mistral``, ``qwen3``: default 1-D RoPE in the ``"half"`` pair
  layout): channels ``k`` (rotary) and ``v`` (content), [n, kv_heads, head_dim] each;
- **MLA** (``deepseek_v2``): the latent page vLLM keeps, channels ``c_kv`` (content: the latent after
  ``kv_a_layernorm``, [n, 1, kv_lora_rank], never rotated) and ``k_pe`` (rotary: the decoupled key,
  [n, 1, qk_rope_head_dim], rotated on ``"interleaved"`` pairs, as vLLM's DeepSeek-V2 does with
  ``is_neox_style=False``), so R(δ) turns k_pe alone.

Refused here, in one line, before an engine starts: other MLA families (DeepSeek-V3 / Kimi: k_pe in another
pair layout and, for Kimi-VL, image tokens), M-RoPE (Qwen2.5-VL / Qwen3-VL: cached image tokens need their 3-D
positions and the vision encoder skipped), and scaled RoPE variants (R(δ) would not be a plain rotation of the
stored keys; for MLA, DeepSeek's YaRN also rescales the softmax).
"""

from __future__ import annotations

from typing import Any

import torch

from kamera.core import ChannelSpec, RotarySpec
from kamera.engine.store import gqa_specs

GQA_SERVED = ("qwen2", "llama", "mistral", "qwen3")  # GQA / MHA decoders with 1-D RoPE in "half" layout
MLA_SERVED = ("deepseek_v2",)  # MLA decoders whose k_pe vLLM rotates on interleaved pairs
SERVED = GQA_SERVED + MLA_SERVED


class EngineError(ValueError):
    """A request or model the engine path cannot serve (raised before anything is recomputed)."""


# ----- the model: channels, rotary, preflight -------------------------------------------------------
def _text(hf_config: Any) -> Any:
    return getattr(hf_config, "text_config", None) or hf_config


def attention(hf_config: Any) -> str:
    """``"MLA"`` for a latent-cache model, ``"GQA"`` otherwise (the rank rule of :func:`kamera.core.family_rank_view`)."""
    return "MLA" if getattr(_text(hf_config), "kv_lora_rank", None) is not None else "GQA"


def preflight(hf_config: Any) -> None:
    """Refuse a model the connector cannot splice into, in one line (other MLA, M-RoPE, scaled RoPE, ...)."""
    text = _text(hf_config)
    mtype = getattr(hf_config, "model_type", "?")
    if attention(hf_config) == "MLA" and mtype not in MLA_SERVED:
        raise EngineError(f"model_type {mtype!r} is MLA but not DeepSeek-V2: the connector writes the latent + k_pe "
                          f"page of {', '.join(MLA_SERVED)} only (k_pe in interleaved pairs, text tokens)")
    if mtype not in SERVED:
        raise EngineError(f"model_type {mtype!r} is not served by the engine connector; it serves {', '.join(SERVED)}")
    rope = dict(getattr(text, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default" or "mrope_section" in rope:
        raise EngineError(f"model_type {mtype!r} uses RoPE {rope.get('rope_type')!r}: the connector re-rotates "
                          "default 1-D RoPE only")


def preflight_model(name: str) -> None:
    """Refuse a registry model (``conf/model/<name>.yaml``) the connector cannot serve, from its entry alone
    (no checkpoint needed): every family but the text decoders of :data:`SERVED`."""
    from kamera.models import entry

    e = entry(name)
    if e.attention == "MLA" and e.family not in MLA_SERVED:
        raise EngineError(f"{name} ({e.family}) is MLA but not DeepSeek-V2: the connector writes the latent + k_pe "
                          f"page of {', '.join(MLA_SERVED)} only")
    if e.family not in SERVED:
        raise EngineError(f"{name} ({e.family}) is not served by the engine connector; it serves the text decoders "
                          f"{', '.join(SERVED)} (a multimodal family needs its M-RoPE positions and cached image tokens)")


def _inv_freq(theta: float, rot_dim: int) -> torch.Tensor:
    return (1.0 / theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)).float()


def channels(hf_config: Any) -> tuple[ChannelSpec, ...]:
    """The served model's two channels with its rotary inverse frequencies (float64 → float32):
    ``k`` / ``v`` for GQA / MHA, ``c_kv`` / ``k_pe`` for MLA."""
    preflight(hf_config)
    text = _text(hf_config)
    rope = dict(getattr(text, "rope_parameters", None) or {})
    theta = float(rope.get("rope_theta", getattr(text, "rope_theta", 10000.0)))
    if attention(hf_config) == "MLA":
        rot_dim = int(text.qk_rope_head_dim)
        return (ChannelSpec("c_kv", 1, int(text.kv_lora_rank)),
                ChannelSpec("k_pe", 1, rot_dim, RotarySpec("interleaved", _inv_freq(theta, rot_dim), rot_dim)))
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    rot_dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    rotary = RotarySpec("half", _inv_freq(theta, rot_dim), rot_dim)
    return gqa_specs(int(getattr(text, "num_key_value_heads", heads)), head_dim, rotary)
