"""The dtype the operator's and the metrics' arithmetic runs in: float64 as it is, anything narrower in float32.

One rule for R(δ) (:mod:`kamera.core.rope`), Δ (:func:`kamera.core.patch.deficit`) and the KL
(:func:`kamera.metrics.divergence.kl`): a float64 run keeps float64 end to end (the plugins' golden item runs in
float64 so its tolerance can be tight and honest on every CPU, docs/testing.md), and a float32 / bf16 / fp16 run
computes exactly as it always did, in float32.
"""

from __future__ import annotations

import torch


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64, float32 for every narrower floating dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def widen(t: torch.Tensor) -> torch.Tensor:
    """``t`` in :func:`work_dtype` of its dtype (``t`` itself when it is already there)."""
    return t.to(work_dtype(t.dtype))
