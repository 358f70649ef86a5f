"""The dtype the operator's and the metrics' arithmetic runs in: float64 as it is, anything narrower in float32.

One rule for R(δ) (:mod:`kamera.core.rope`), Δ (:func:`kamera.core.patch.deficit`) and the KL
(:func:`kamera.metrics.divergence.kl`): a float64 run keeps float64 end to end (the plugins' golden item runs in
float64 so its tolerance can be tight and honest on every CPU, docs/testing.md), and a float32 / bf16 / fp16 run
computes exactly as it always did, in float32.
"""

from __future__ import annotations

import torch

# model.dtype's spellings → the torch dtype: the one table jobs, loaders and rows read (a job's identity and rows
# use the canonical name, :func:`dtype_name`, so fp32 and float32 are one job)
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64, "fp64": torch.float64,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype a spelling of :data:`DTYPES` names (a dtype as it is); ValueError listing the spellings."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def dtype_name(dtype: str | torch.dtype) -> str:
    """The canonical name of a dtype spelling: "float32", "bfloat16", "float16" or "float64"."""
    return str(parse_dtype(dtype)).removeprefix("torch.")


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64, float32 for every narrower floating dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def widen(t: torch.Tensor) -> torch.Tensor:
    """``t`` in :func:`work_dtype` of its dtype (``t`` itself when it is already there)."""
    return t.to(work_dtype(t.dtype))
