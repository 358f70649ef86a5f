"""R(δ): the exact RoPE re-rotation of cached keys by δ positions.

RoPE composes, R(δ)R(p) = R(p + δ), so moving a cached key from position p to p + δ is a rotation
of each rotary pair i by δ·θ_i, with θ_i the layer's inverse frequencies. This holds for 1-D RoPE
and for M-RoPE alike (sectioned Qwen2.5-VL or interleaved Qwen3-VL): a reuse shift adds the same
δ to the t, h and w coordinates, so every pair turns by δ·θ_i whichever coordinate it reads.

Two memory layouts of the pairs exist in the families we serve:
- ``"half"``: pair i is (x[i], x[i + d/2]) (Llama/Qwen ``rotate_half``; DeepSeek-V3 / Kimi k_pe).
- ``"interleaved"``: pair i is (x[2i], x[2i + 1]) (DeepSeek-V2 k_pe, complex multiply).
Angles are formed in float64 and the rotation is applied in float32 (or float64 for float64
inputs), then cast back, so relocation adds no error beyond the model's own rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[str, ...] = ("half", "interleaved")


@dataclass(frozen=True, eq=False)
class RotarySpec:
    """How one channel's trailing head dimension is rotated.

    ``inv_freq``: [rotary_dim / 2] per-pair angular frequency (as the model holds it).
    ``rotary_dim``: how many leading dims of each head rotate (partial RoPE); the rest pass through.
    """

    layout: Layout
    inv_freq: torch.Tensor
    rotary_dim: int

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown rotary layout {self.layout!r}; expected one of {LAYOUTS}")
        if self.rotary_dim % 2 or self.inv_freq.numel() * 2 != self.rotary_dim:
            raise ValueError(
                f"rotary_dim {self.rotary_dim} must be even and equal 2 × len(inv_freq) ({self.inv_freq.numel()})"
            )


def rotation_angles(delta: int | float, spec: RotarySpec) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of δ·θ_i in float64, each [rotary_dim / 2]."""
    angles = float(delta) * spec.inv_freq.detach().to(device="cpu", dtype=torch.float64)
    return torch.cos(angles), torch.sin(angles)


def rotate(x: torch.Tensor, delta: int | float, spec: RotarySpec) -> torch.Tensor:
    """Apply R(δ) to ``x`` [..., head_dim] along its last dim; returns a new tensor of x's dtype."""
    if delta == 0:
        return x.clone()
    d = spec.rotary_dim
    if x.shape[-1] < d:
        raise ValueError(f"tensor's last dim {x.shape[-1]} is smaller than rotary_dim {d}")
    cos, sin = rotation_angles(delta, spec)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = cos.to(x.device, work), sin.to(x.device, work)
    rot, rest = x[..., :d].to(work), x[..., d:]
    if spec.layout == "half":
        x1, x2 = rot[..., : d // 2], rot[..., d // 2 :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), rest], dim=-1)
