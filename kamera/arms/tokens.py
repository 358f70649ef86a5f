"""The token-recompute arms' shared base: choose a set of B's rows, recompute them at every layer in context.

EPIC, MPIC, VLCache's proof of concept, first-k, the sink prosthesis, oracle top-p, Quest-style,
cross-mass and Nyström selectors differ only in *which* rows they pick; the recompute is the same
(:func:`kamera.reuse.recompute.recompute`): the chosen rows are recomputed at every layer from their input
embeddings, their queries attend the whole context (prefix and A as the full prefill left them, B's
other rows as blind reuse left them), their new K/V overwrite their slots, and the query then runs
on the result. This is the "strongest form" the paper compares against (Table 6 caption).

Budgets: every selector's budget is defined so that budget 0 selects no row (the arm *is* blind
reuse, bit for bit) and a full budget selects every row (the arm *is* re-prefill, to float noise).
Cost: a recomputed row costs one token-row of B's page on every layer, ``page_bytes / n_B``.
Row columns: the knobs, plus ``n_recomputed`` and ``recompute_fraction`` (of n_B) and whatever
the selector reports (scores' source, effective budget, …).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kamera.arms.base import Arm, ArmOutput, ArmRefusal
from kamera.arms.budget import cell_bytes, tokens_for
from kamera.knobs import check_count
from kamera.models.base import Adapter
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import recompute


def count_of(fraction: float, n: int, rounding: str = "ceil") -> int:
    """How many of n tokens a fraction selects: ``ceil`` (at least the fraction) or ``floor`` (``int()``)."""
    x = fraction * n
    k = math.ceil(x - 1e-9) if rounding == "ceil" else math.floor(x + 1e-9)
    return max(0, min(n, k))


def top_rows(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The k highest-scoring rows (ties broken by position, earlier first), sorted ascending."""
    order = torch.sort(-scores.double(), stable=True).indices
    return torch.sort(order[:k]).values


def visual_runs(ctx: ReuseContext) -> list[tuple[int, int]]:
    """[start, stop) of each maximal run of visual tokens in B (one run per image, B-local).

    Families that put no separator between adjacent images (LLaVA) merge back-to-back images into
    one run; our items always separate images by text."""
    vis = ctx.enc.spans[ctx.b].visual.tolist()
    runs, start = [], None
    for i, v in enumerate([*vis, False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    return runs


# ----- the base ------------------------------------------------------------------------------------
@dataclass
class TokenArm(Arm):
    """Base of the token arms: ``select(ctx)`` → (B-local rows [k], extra row columns)."""

    needs = frozenset({"full", "relocated"})
    drives_layers = True

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def run(self, ctx: ReuseContext) -> ArmOutput:
        reason = self.refuses(ctx.adapter)
        if reason:
            raise ArmRefusal(reason)
        rows, extra = self.select(ctx)
        rec = recompute(ctx, rows)
        out = ctx.query(rec.kv, tag=self.name)
        n = int(rows.numel())
        params = {**self.params(), **extra, "n_recomputed": n, "recompute_fraction": n / ctx.n_b}
        return ArmOutput(out, rec.n_written_cells * cell_bytes(ctx), params, recomputed_tokens=rec.cells)


@dataclass
class MatchedTokenArm(TokenArm):
    """A token arm whose budget can be given as a patch rank of equal bytes (``match_rank``, Table 6).

    ``match_rank`` set overrides the arm's own token budget with :func:`~kamera.arms.budget.tokens_for`
    on each item (so the budget follows n_B); ``budget_tokens`` in the row says what was used."""

    match_rank: int | None = None

    def __post_init__(self) -> None:
        check_count(self.name, "match_rank", self.match_rank, allow_none=True)

    def token_budget(self, ctx: ReuseContext, own: int) -> int:
        return min(ctx.n_b, own if self.match_rank is None else tokens_for(ctx, self.match_rank))


@dataclass
class ImageTokenArm(TokenArm):
    """Leading tokens of each image in B, plus (``text``) every non-visual token of B.

    MPIC and VLCache cache images and recompute the prompt's text because it was never cached; here
    B's own text (captions, vision start/end markers) sits in the cached chunk, so ``text`` decides
    whether it is recomputed too. Budget 0 ≡ blind needs ``text=False``; a full budget with
    ``text=True`` recomputes all of B (≡ re-prefill)."""

    text: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.text, bool):
            raise ValueError(f"{self.name}: text must be a bool, got {self.text!r}")

    def refuses(self, adapter: Adapter) -> str | None:
        if not adapter.reads_images:
            return f"{self.name} selects tokens per image; {adapter.family} is text-only (no image to select)"
        return super().refuses(adapter)

    def per_image(self, n_image: int) -> int:
        """How many leading tokens of an image of n_image visual tokens to recompute."""
        raise NotImplementedError

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        runs = visual_runs(ctx)
        if not runs:
            raise ArmRefusal(f"{self.name}: B has no image tokens on this item; the arm selects per image")
        per = [min(self.per_image(z - a), z - a) for a, z in runs]
        picked = [torch.arange(a, a + k) for (a, _), k in zip(runs, per, strict=True)]
        if self.text:
            picked.append(torch.nonzero(~ctx.enc.spans[ctx.b].visual.cpu()).flatten())
        rows = torch.unique(torch.cat(picked)).to(ctx.adapter.device)
        n_img = sum(z - a for a, z in runs)
        return rows, {"n_images": len(runs), "image_tokens": n_img, "image_recomputed": sum(per)}
