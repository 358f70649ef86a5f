"""Cross-mass selector: recompute the B tokens that put the most attention mass on A (Table 4, Fig. 4a).

Source: the paper's own selector ("token selector by cross-attention mass A→B", Table 4 at a 0.25
fraction; Fig. 4a: it recalls 0.70 of the true top-50% Δ tokens). No recipe beyond the name is
given, so the choices are ours:
- The attention is what B's tokens would pay A *at reuse time*, without the conditioned forward:
  at each layer ℓ, B's hidden states from its canonical forward (:func:`kamera.reuse.recompute.solo_hidden`)
  run through layer ℓ's attention on the spliced blind cache ``[prefix · A · R(δ)·KV(B|∅)]``.
  One eager probe pass per item (tag ``probe_cross``), shared by every fraction.
- A token's score is the attention mass on A's columns, averaged over heads, summed over layers.
- ``ceil(fraction · n_B)`` tokens are taken (ties to the earlier token). Default fraction 0.25.
- Items without an A span (nothing to attend) are refused at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import ArmRefusal, register
from kamera.arms.tokens import TokenArm, count_of, top_rows
from kamera.knobs import check_fraction
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import LayerDriver, attention_to, shared, solo_hidden


def a_columns(ctx: ReuseContext) -> tuple[int, int]:
    """[start, stop) of A's tokens in the native sequence (empty if there is no A)."""
    a0 = ctx.ranges[1][0] if ctx.has_prefix else 0
    return a0, ctx.ranges[ctx.b][0]


def cross_mass_scores(ctx: ReuseContext) -> torch.Tensor:
    """Per B token, its canonical queries' attention mass on A, head-mean, summed over layers; [n_B]."""

    def make() -> torch.Tensor:
        spans = ctx.enc.spans[: ctx.b + 1]
        driver = LayerDriver(ctx.adapter, spans, [*ctx.context_kv, ctx.relocated], "probe_cross")
        b0, b1 = ctx.ranges[ctx.b]
        rows = torch.arange(b0, b1, device=ctx.adapter.device)
        probs = attention_to(driver, rows, solo_hidden(ctx)[:-1], carry=False)
        a0, a1 = a_columns(ctx)
        return sum(p[:, :, a0:a1].sum(-1).mean(0).double() for p in probs)

    return shared(ctx, "cross_mass_scores", make)


@register
@dataclass
class CrossMassArm(TokenArm):
    name = "cross_mass"
    fraction: float = 0.25

    def __post_init__(self) -> None:
        check_fraction(self.name, "fraction", self.fraction)

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        a0, a1 = a_columns(ctx)
        if a1 <= a0:
            raise ArmRefusal("cross_mass: this item has no A span, so no cross-attention mass to rank by")
        return top_rows(cross_mass_scores(ctx), count_of(self.fraction, ctx.n_b)), {}
