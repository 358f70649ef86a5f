"""Distances in bf16 units in the last place: the unit of the paper's "within one bf16 unit of recompute" (Fig. 12)."""

from __future__ import annotations

import torch


def bf16_ulps(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|a − ref| in units of one bf16 ULP at ``ref`` (float64, elementwise): the paper's "within one bf16 ULP".

    The unit is the bf16 spacing of the reference value, 2^(⌊log2 |ref|⌋ − 7) (bf16 keeps 8 significant
    bits), floored at the smallest normal bf16 so exact zeros do not divide by zero. The same unit for
    float32 and bf16 runs, so the two dtypes read on one axis; 0 means equal.
    """
    r = ref.double().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    unit = torch.exp2(torch.floor(torch.log2(r)) - 7)
    return (a.double() - ref.double()).abs() / unit
