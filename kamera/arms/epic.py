"""EPIC LegoLink-k (Hu et al., ICML 2025): recompute the first k tokens of every reused chunk.

Source: ``DerekHJH/epic`` at 3204410, benchmarks_ours/evals/e2e/main.py (the "kvlink-k" recompute set: the
first k tokens of each chunk after the system prompt, plus the whole final chunk), recomputed at
every layer with their K/V written into the reused cache (vllm/model_executor/models/llama.py,
vllm/attention/backends/xformers.py). Default k = 16 (``long_context/main.py`` uses kvlink-16).

Choices where the harness differs from EPIC's setting:
- Only B is a reused chunk here (prefix and A carry their full-prefill KV), so "every reused
  chunk" is B alone and EPIC selects B's first k tokens: on this harness it is the first-k carve
  (:class:`~kamera.arms.first_k.FirstKArm`) at EPIC's default k, kept as its own arm for its label,
  default and source.
- EPIC's "whole final chunk" is the question, which every arm recomputes (the query forward).
- EPIC prefills each chunk from position 0 with its own BOS, so its first k include that BOS (a sink); our
  canonical is prefilled behind the prefix (``ReuseContext`` default) with no BOS of its own and relocated
  exactly, the same for every arm. The selection itself is checked against EPIC's code in
  ``tests/arms/test_parity.py`` (docs/baselines.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import register
from kamera.arms.first_k import FirstKArm


@register
@dataclass
class EpicArm(FirstKArm):
    name = "epic"
    k: int = 16
