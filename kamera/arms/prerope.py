"""Keys in the pre-RoPE frame, with the model's own cos / sin: what ShadowKV compresses and PRCR stores.

``rope_tables`` asks the model's rotary embedding for cos and sin at given positions (so M-RoPE sections are exact);
``unrope`` takes a cached key back to the frame before rotation, ``rope`` applies the rotation at new positions.
Both work on rotate-half keys ([n, heads, d], the leading ``rotary_dim`` dims rotating) in float64.
"""

from __future__ import annotations

import torch

from kamera.models.base import Adapter


def frame_refusal(name: str, adapter: Adapter) -> str | None:
    """Why arm ``name`` cannot take ``adapter``'s keys to the pre-RoPE frame here, or None: a rotary channel whose
    pairs are not rotate-half (DeepSeek-V2's interleaved k_pe), or layers rotated with different frequencies."""
    for s in adapter.specs:
        if s.rotary is None:
            continue
        if s.rotary.layout != "half":
            return f"{name} un-ropes rotate-half keys; {adapter.name}'s {s.name} is {s.rotary.layout!r}"
        if s.per_layer is not None:
            return (f"{name} un-ropes the keys with one rotary table; {adapter.name} rotates its layers with "
                    "different frequencies")
    return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_tables(adapter: Adapter, positions: torch.Tensor, rotary_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own cos, sin at ``positions`` [P, n], each [n, 1, rotary_dim] in float64."""
    probe = torch.zeros(1, positions.shape[-1], 1, dtype=adapter.dtype, device=adapter.device)
    cos, sin = adapter.lm.rotary_emb(probe, adapter.position_ids(positions))
    return cos[0, :, None, :rotary_dim].double(), sin[0, :, None, :rotary_dim].double()


def unrope(k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The pre-RoPE key of a rotated key ``k`` (float64): the inverse rotation at the angles of ``cos`` / ``sin``
    (divided by cos² + sin², which the model's tables hold to rounding, not exactly 1)."""
    d = cos.shape[-1]
    rot, rest = k[..., :d], k[..., d:]
    return torch.cat([(rot * cos - _rotate_half(rot) * sin) / (cos.pow(2) + sin.pow(2)), rest], dim=-1)


def rope(k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """A pre-RoPE key ``k`` (float64) rotated at the angles of ``cos`` / ``sin``, as the model rotates its keys."""
    d = cos.shape[-1]
    rot, rest = k[..., :d], k[..., d:]
    return torch.cat([rot * cos + _rotate_half(rot) * sin, rest], dim=-1)
