"""Oracle top-p token recompute: the p·n_B tokens with the largest true deficit ‖Δ‖ (Fig. 6a, Table 8).

Source: the paper's oracle token selector (§3 "an oracle that selects tokens by true Δ-magnitude
needs p ≈ 0.5"; Fig. 6a sweeps p; Table 8 reports token η at p = 0.5). It is an oracle: it reads
Δ = KV(B|A) − R(δ)·KV(B|∅) from the conditioned forward, which a deployment would not have.

Choices: a token's score is ‖Δ_i‖² summed over every layer and channel in the model's own layout
(K and V, or MLA c_KV and k_pe), unnormalised, so the deep layers where Δ is large weigh most;
``ceil(p · n_B)`` tokens are taken (p > 0 recomputes at least one), ties to the earlier token.
Default p = 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import register
from kamera.arms.tokens import TokenArm, count_of, top_rows
from kamera.knobs import check_fraction
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import shared


def deficit_scores(ctx: ReuseContext) -> torch.Tensor:
    """Per B token, Σ over layers and channels of ‖Δ_i‖², [n_B] float64 (cached per context)."""

    def make() -> torch.Tensor:
        d = ctx.deficit
        return sum(t.double().pow(2).flatten(1).sum(1) for chans in d.layers for t in chans)

    return shared(ctx, "deficit_scores", make)


@register
@dataclass
class OracleTopPArm(TokenArm):
    name = "oracle_topp"
    needs = frozenset({"full", "relocated", "deficit"})
    p: float = 0.5

    def __post_init__(self) -> None:
        check_fraction(self.name, "p", self.p)

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        scores = deficit_scores(ctx)
        k = count_of(self.p, ctx.n_b)
        rows = top_rows(scores, k)
        return rows, {"delta_energy_covered": float(scores[rows].sum() / scores.sum().clamp_min(1e-300))}
