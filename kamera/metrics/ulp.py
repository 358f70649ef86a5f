"""Distances in bf16 units in the last place: the unit of the paper's "within one bf16 unit of recompute" (Fig. 12).

Two scales for the unit. :func:`bf16_ulps` measures each element at its own reference value: the shares within one
ULP that Fig. 12's rows report. :func:`bf16_vector_ulps` measures each element at the largest reference magnitude of
its vector (the last dim, one token-head's K or V): its maximum is the worst error, which an element whose reference
is (near) zero cannot blow up, since that element has no ULP scale of its own.
"""

from __future__ import annotations

import torch


def _unit(magnitude: torch.Tensor) -> torch.Tensor:
    """One bf16 ULP at ``magnitude``: 2^(⌊log2 |x|⌋ − 7) (bf16 keeps 8 significant bits), float64, floored at the
    smallest normal bf16 so exact zeros do not divide by zero."""
    r = magnitude.double().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    return torch.exp2(torch.floor(torch.log2(r)) - 7)


def bf16_ulps(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|a − ref| in units of one bf16 ULP at ``ref`` (float64, elementwise): the paper's "within one bf16 ULP".

    The same unit for float32 and bf16 runs, so the two dtypes read on one axis; 0 means equal.
    """
    return (a.double() - ref.double()).abs() / _unit(ref)


def bf16_vector_ulps(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|a − ref| in units of one bf16 ULP at the largest |ref| of each vector along the last dim
    (float64, a's shape)."""
    return (a.double() - ref.double()).abs() / _unit(ref.double().abs().amax(-1, keepdim=True))
