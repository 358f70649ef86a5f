"""Which models the engine connector can splice into, and their cached channels (no vLLM needed).

The connector writes GQA / MHA pages (channels ``k`` rotary, ``v`` content) of decoders with default 1-D
RoPE in the ``"half"`` pair layout. Other families are refused here, in one line, before an engine starts:
MLA (vLLM's CPU backend serves it as ``CPU_MLA`` / ``AMX_MLA``, but the latent + k_pe page is not written
by this connector yet), M-RoPE (Qwen2.5-VL / Qwen3-VL: cached image tokens need their 3-D positions and the
vision encoder skipped), and scaled RoPE variants (R(δ) would not be a plain rotation of the stored keys).
"""

from __future__ import annotations

from typing import Any

import torch

from kamera.core import ChannelSpec, RotarySpec
from kamera.engine.store import gqa_specs

SERVED = ("qwen2", "llama", "mistral", "qwen3")  # GQA / MHA decoders with 1-D RoPE in "half" layout


class EngineError(ValueError):
    """A request or model the engine path cannot serve (raised before anything is recomputed)."""


# ----- the model: channels, rotary, preflight -------------------------------------------------------
def preflight(hf_config: Any) -> None:
    """Refuse a model the connector cannot splice into, in one line (MLA, M-RoPE, scaled RoPE, ...)."""
    text = getattr(hf_config, "text_config", None) or hf_config
    mtype = getattr(hf_config, "model_type", "?")
    if getattr(text, "kv_lora_rank", None) is not None:
        raise EngineError(f"model_type {mtype!r} is MLA: the engine connector writes GQA / MHA pages only "
                          "(vLLM's CPU backend serves MLA, the latent + k_pe page is not implemented here)")
    if mtype not in SERVED:
        raise EngineError(f"model_type {mtype!r} is not served by the engine connector; it serves {', '.join(SERVED)}")
    rope = dict(getattr(text, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default" or "mrope_section" in rope:
        raise EngineError(f"model_type {mtype!r} uses RoPE {rope.get('rope_type')!r}: the connector re-rotates "
                          "default 1-D RoPE only")


def preflight_model(name: str) -> None:
    """Refuse a registry model (``conf/model/<name>.yaml``) the connector cannot serve, from its entry alone
    (no checkpoint needed): MLA, and every family but the plain text decoders of :data:`SERVED`."""
    from kamera.models import entry

    e = entry(name)
    if e.attention == "MLA":
        raise EngineError(f"{name} ({e.family}) is MLA: the engine connector writes GQA / MHA pages only")
    if e.family not in SERVED:
        raise EngineError(f"{name} ({e.family}) is not served by the engine connector; it serves the text decoders "
                          f"{', '.join(SERVED)} (a multimodal family needs its M-RoPE positions and cached image tokens)")


def channels(hf_config: Any) -> tuple[ChannelSpec, ...]:
    """The ``k`` / ``v`` channels of the served model, with its rotary inverse frequencies (float64 → float32)."""
    preflight(hf_config)
    heads = int(hf_config.num_attention_heads)
    head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads)
    rope = dict(getattr(hf_config, "rope_parameters", None) or {})
    theta = float(rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))
    rot_dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    inv_freq = 1.0 / theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    rotary = RotarySpec("half", inv_freq.float(), rot_dim)
    return gqa_specs(int(getattr(hf_config, "num_key_value_heads", heads)), head_dim, rotary)


