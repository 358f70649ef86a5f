"""Fig. 4(a): how well cheap token selectors find the tokens that carry the deficit.

The truth is the top ``fraction`` (0.5) of B's tokens by ‖Δ_i‖ (Σ over layers and channels of
‖Δ_i‖², :func:`kamera.arms.oracle_topp.deficit_scores`), ``ceil(fraction · n_B)`` tokens, ties to the
earlier token. Each selector picks the same number of tokens; its recall is |picked ∩ truth| / |truth|.
The selectors are the token arms' own (:meth:`select`), so the figure measures exactly what those
arms recompute:

    oracle      ``oracle_topp`` (the truth itself: recall 1 by construction, a check)
    cross_mass  ``cross_mass``: B's canonical queries' attention mass on A at reuse time
    first_k     ``first_k``: B's leading tokens
    k_norm      per token Σ_ℓ ‖K_i‖² of the canonical's rotary channel (K; MLA: k_pe, the only key
                part cached as such), largest first; R(δ) preserves norms, so canonical or relocated
                give the same ranking
    random      a uniform random subset (seeded); its expected recall is k / n_B ≈ fraction,
                averaged over ``draws`` subsets
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kamera.arms.cross_mass import CrossMassArm, a_columns
from kamera.arms.first_k import FirstKArm
from kamera.arms.oracle_topp import OracleTopPArm
from kamera.arms.tokens import count_of, top_rows
from kamera.diagnostics.records import RANDOM
from kamera.knobs import check_share
from kamera.reuse.context import ReuseContext


def recall(picked: torch.Tensor, truth: torch.Tensor) -> float:
    """|picked ∩ truth| / |truth| over token indices (each a 1-D tensor of distinct indices)."""
    if truth.numel() == 0:
        raise ValueError("recall of an empty true set is undefined")
    for name, t in (("picked", picked), ("truth", truth)):
        if t.dim() != 1 or torch.unique(t).numel() != t.numel():
            raise ValueError(f"{name} must be a 1-D tensor of distinct token indices")
    return float(torch.isin(picked.cpu(), truth.cpu()).sum()) / truth.numel()


def k_norm_scores(ctx: ReuseContext) -> torch.Tensor:
    """Per B token, Σ over layers of ‖K_i‖² of the canonical's rotary channel; [n_B] float64."""
    c = next(i for i, s in enumerate(ctx.canonical.specs) if s.rotary is not None)
    return sum(chans[c].double().pow(2).flatten(1).sum(1) for chans in ctx.canonical.layers)


def _cross_mass(ctx: ReuseContext, fraction: float) -> torch.Tensor:
    a0, a1 = a_columns(ctx)
    if a1 <= a0:
        raise ValueError("the cross_mass selector needs an A span before B; this item has none")
    return CrossMassArm(fraction=fraction).select(ctx)[0]


# name → (ctx, fraction) → the picked B-local rows (ceil(fraction · n_B) of them)
SELECTORS: dict[str, Callable[[ReuseContext, float], torch.Tensor]] = {
    "oracle": lambda ctx, f: OracleTopPArm(p=f).select(ctx)[0],
    "cross_mass": _cross_mass,
    "first_k": lambda ctx, f: FirstKArm(k=count_of(f, ctx.n_b)).select(ctx)[0],
    "k_norm": lambda ctx, f: top_rows(k_norm_scores(ctx), count_of(f, ctx.n_b)),
}
DEFAULT_SELECTORS = ("cross_mass", "first_k", "k_norm", RANDOM)


def check_selectors(selectors: Sequence[str], fraction: float, draws: int) -> None:
    """Known selector names (at least one), a fraction in (0, 1] and a positive number of random draws."""
    check_share("selectors", "fraction", fraction)
    if isinstance(selectors, str):
        raise ValueError(f"selectors must be a list of names, got the string {selectors!r}")
    unknown = sorted(set(selectors) - {*SELECTORS, RANDOM})
    if unknown or not selectors:
        raise ValueError(f"unknown selector(s) {unknown or '(none given)'}; known: {sorted({*SELECTORS, RANDOM})}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be a positive int, got {draws!r}")


def selector_recall(ctx: ReuseContext, selectors: Sequence[str] = DEFAULT_SELECTORS, fraction: float = 0.5,
                    seed: int = 0, draws: int = 32) -> list[dict]:
    """Recall of the true top-``fraction`` ‖Δ‖ tokens by each selector.

    Records: ``{selector, fraction, k, n_b, quantity: "recall", value}``; for ``random`` the value is
    the mean over ``draws`` seeded subsets."""
    check_selectors(selectors, fraction, draws)
    n = ctx.n_b
    k = count_of(fraction, n)
    truth = SELECTORS["oracle"](ctx, fraction)
    out = []
    for name in selectors:
        if name == RANDOM:
            gen = torch.Generator().manual_seed(seed)
            value = sum(recall(torch.randperm(n, generator=gen)[:k], truth) for _ in range(draws)) / draws
        else:
            value = recall(SELECTORS[name](ctx, fraction), truth)
        out.append({"selector": name, "fraction": fraction, "k": k, "n_b": n, "quantity": "recall", "value": value})
    return out
