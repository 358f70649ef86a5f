"""One engine request's result, the same for every engine session (vLLM's, SGLang's)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Output:
    """Next-token log-probs over the whole vocabulary (float64), the greedy token the engine sampled, how many prompt
    tokens it reports cached, and why a splice fell back to the engine's own prefill, if it did."""

    logprobs: torch.Tensor
    num_cached_tokens: int
    seconds: float
    fallback: str | None = None
    token: int | None = None
