"""Leverage-score Nyström token subset: recompute the k tokens with the largest leverage in B's KV (Table 4).

Source: the paper's "leverage-Nyström 64" row of Table 4 (a token-axis method at a small budget).
No recipe beyond the name is given, so the choices are ours:
- The matrix is what reuse has without the conditioned forward: B's canonical KV, one n_B × width
  matrix per layer and channel (R(δ) rotates every token by the same δ, an orthogonal map on the
  feature side, so relocated or not gives the same leverage).
- Rank-r leverage with r = min(k, n_B, width): ℓ_i = ‖U_{i,:r}‖², the column-subset (Nyström)
  leverage of a rank-k approximation; summed over layers and channels (each layer-channel's scores
  sum to its rank, so every layer weighs the same).
- The top k tokens are taken deterministically (not sampled), ties to the earlier token. Default
  k = 64 (Table 4); k ≥ n_B recomputes all of B.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import register
from kamera.arms.tokens import TokenArm, top_rows
from kamera.knobs import check_count
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import shared


def leverage_scores(ctx: ReuseContext, k: int) -> torch.Tensor:
    """Rank-k leverage of each B token in the canonical KV, summed over layers and channels; [n_B]."""

    def make() -> list[list[torch.Tensor]]:
        # full left singular vectors once per item; any k only slices them
        return [
            [torch.linalg.svd(t.double().flatten(1), full_matrices=False).U for t in chans]
            for chans in ctx.canonical.layers
        ]

    bases = shared(ctx, "canonical_left_singular", make)
    return sum(u[:, :k].pow(2).sum(1) for per_layer in bases for u in per_layer)


@register
@dataclass
class NystromArm(TokenArm):
    name = "nystrom"
    needs = frozenset({"full", "canonical", "relocated"})
    k: int = 64

    def __post_init__(self) -> None:
        check_count(self.name, "k", self.k)

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        k = min(self.k, ctx.n_b)
        return top_rows(leverage_scores(ctx, k), k), {"budget_tokens": k}
