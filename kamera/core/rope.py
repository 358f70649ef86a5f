"""R(δ): the exact RoPE re-rotation of cached keys by δ positions.

RoPE composes, R(δ)R(p) = R(p + δ), so moving a cached key from position p to p + δ is a rotation
of each rotary pair i by δ·θ_i, with θ_i the layer's inverse frequencies. This holds for 1-D RoPE
and for M-RoPE alike (sectioned Qwen2.5-VL or interleaved Qwen3-VL): a reuse shift adds the same
δ to the t, h and w coordinates, so every pair turns by δ·θ_i whichever coordinate it reads.

Two memory layouts of the pairs exist in the families we serve:
- ``"half"``: pair i is (x[i], x[i + d/2]) (Llama/Qwen ``rotate_half``; DeepSeek-V3 / Kimi k_pe).
- ``"interleaved"``: pair i is (x[2i], x[2i + 1]) (DeepSeek-V2 k_pe, complex multiply).

Precision and speed: the angles δ·θ_i and their cos / sin are formed once per (δ, spec) in float64
and cached in the working dtype; each call then rotates in float32 (float64 for float64 inputs) and
rounds once to the input's dtype, so relocation adds no error beyond the model's own rounding. A
float32 rotation writes straight into its output (a multiply and a multiply-add per half, no
temporaries); a bf16 / fp16 rotation computes into one float32 buffer and rounds it into the output.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

import torch

from kamera.core.precision import work_dtype

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[str, ...] = ("half", "interleaved")
_CACHED_SHIFTS = 256  # cos / sin tables kept per spec (one per δ, device and working dtype)


@dataclass(frozen=True, eq=False)
class RotarySpec:
    """How one channel's trailing head dimension is rotated.

    ``inv_freq``: [rotary_dim / 2] per-pair angular frequency (as the model holds it).
    ``rotary_dim``: how many leading dims of each head rotate (partial RoPE); the rest pass through.
    """

    layout: Layout
    inv_freq: torch.Tensor
    rotary_dim: int
    _tables: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown rotary layout {self.layout!r}; expected one of {LAYOUTS}")
        if self.rotary_dim % 2 or self.inv_freq.numel() * 2 != self.rotary_dim:
            raise ValueError(
                f"rotary_dim {self.rotary_dim} must be even and equal 2 × len(inv_freq) ({self.inv_freq.numel()})"
            )

    def cos_sin(
        self, delta: int | float, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of δ·θ_i, each [rotary_dim / 2] in ``dtype`` on ``device``, cached per (δ, device, dtype)."""
        key = (float(delta), torch.device(device), dtype)
        tables = self._tables.get(key)
        if tables is None:
            cos, sin = rotation_angles(delta, self)
            tables = (cos.to(device, dtype), sin.to(device, dtype))
            self._tables[key] = tables
            if len(self._tables) > _CACHED_SHIFTS:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return tables


def rotation_angles(delta: int | float, spec: RotarySpec) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of δ·θ_i in float64, each [rotary_dim / 2]."""
    angles = float(delta) * spec.inv_freq.detach().to(device="cpu", dtype=torch.float64)
    return torch.cos(angles), torch.sin(angles)


def _pairs(x: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members of every rotary pair of ``x`` [..., rotary_dim], as views."""
    if layout == "half":
        h = x.shape[-1] // 2
        return x[..., :h], x[..., h:]
    return x[..., 0::2], x[..., 1::2]


def _turn(x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> None:
    """out = R·x pairwise, (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin); ``out`` must not overlap ``x``."""
    x1, x2 = _pairs(x, layout)
    o1, o2 = _pairs(out, layout)
    torch.mul(x1, cos, out=o1)
    o1.addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=o2)
    o2.addcmul_(x1, sin)


def rotate(x: torch.Tensor, delta: int | float, spec: RotarySpec, out: torch.Tensor | None = None) -> torch.Tensor:
    """Apply R(δ) to ``x`` [..., head_dim] along its last dim into ``out`` (a new tensor of x's dtype by default).

    ``out``, when given, must have x's shape and dtype and must not overlap x.
    """
    d = spec.rotary_dim
    if x.shape[-1] < d:
        raise ValueError(f"tensor's last dim {x.shape[-1]} is smaller than rotary_dim {d}")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # contiguous whatever x's strides
    elif out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, x is {tuple(x.shape)} {x.dtype}")
    if delta == 0:
        return out.copy_(x)
    work = work_dtype(x.dtype)
    cos, sin = spec.cos_sin(delta, x.device, work)
    if x.dtype == work:
        _turn(x[..., :d], out[..., :d], cos, sin, spec.layout)
    else:  # bf16 / fp16: read x as it is, compute and hold the result in float32, round once into out
        rot = torch.empty((*x.shape[:-1], d), dtype=work, device=x.device)
        _turn(x[..., :d], rot, cos, sin, spec.layout)
        out[..., :d].copy_(rot)
    if d < x.shape[-1]:
        out[..., d:].copy_(x[..., d:])
    return out
