"""First-k "carve": recompute the leading k tokens of B in context (Fig. 6a, Table 6 "first-k").

Source: the paper's first-k baseline (§4 "a first-k carve is worse than nothing", Fig. 6a with
k = 8 and 32; Table 6 "first-k recompute (EPIC/MPIC-style)" at matched bytes). The leading tokens
are the ones EPIC (``DerekHJH/epic`` benchmarks_ours/evals/e2e/main.py) and MPIC (§4.2) pick.

Knobs: ``k`` tokens (default 8; k ≥ n_B recomputes all of B), or ``match_rank`` m: the token budget
of equal bytes to a rank-m patch on this item (Table 6), which overrides k.
Rows: B's rows 0 … k − 1, recomputed at every layer (:mod:`kamera.arms.tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import register
from kamera.arms.tokens import MatchedTokenArm
from kamera.knobs import check_count
from kamera.reuse.context import ReuseContext


@register
@dataclass
class FirstKArm(MatchedTokenArm):
    name = "first_k"
    k: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count(self.name, "k", self.k)

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        k = self.token_budget(ctx, self.k)
        return torch.arange(k, device=ctx.adapter.device), {"budget_tokens": k}
