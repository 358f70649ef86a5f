"""Divergent antecedents: the stored patch behind a drifted antecedent (App. D "Divergent antecedents").

Source: App. D "Perturbing A → A′ at matched positions (reorder; drop-and-duplicate a frame; replace one
or all predecessors with frames from a different clip), the stored patch transfers gracefully ... only
when all predecessors become a different clip (cosine divergence 0.43) does the stale patch turn
harmful (−3.5) while the exact patch still recovers (0.95)".

A = history chunks 0 … K−1 in front of the target K; the stored patch is rank m of Δ on A. The
perturbations (each gives A′, a layout whose re-prefill is the reference):

- ``reorder``: A reversed.
- ``drop_duplicate``: the frame at slot ⌊K/2⌋ dropped and its predecessor repeated in its slot.
- ``replace_one``: the frame at slot ⌊K/2⌋ replaced by the other clip's frame at that slot (foreign ⌊K/2⌋).
- ``replace_all``: every frame replaced by the other clip's (foreign 0 … K−1).

Variants: ``transfer`` (the stored patch, carried to the target's positions), ``exact`` (A′'s own patch:
one conditioned forward), ``reprefill``, ``blind``. Choices: the slot ⌊K/2⌋ (an interior frame); the
matched positions hold when frames have equal extents (video frames do), else the stored patch is
relocated by the target's shift. Extra column ``divergence`` = 1 − cos(a, a′), a the concatenation of
A's per-chunk mean input embeddings (chunk-aligned, so a reorder diverges too; the text does not say
how its cosine divergence pools, so this is our choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kamera.knobs import check_int, check_rank
from kamera.window.context import WindowContext
from kamera.window.ops import Layout, drop_duplicate, reorder, replace
from kamera.window.probes.base import ProbeRefusal, WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape

PERTURBATIONS = ("reorder", "drop_duplicate", "replace_one", "replace_all")


def divergence(wctx: WindowContext, a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """1 − cosine of the concatenated per-chunk mean input embeddings of two antecedents of equal length."""
    if len(a) != len(b):
        raise ValueError(f"divergence compares antecedents of equal length, got {len(a)} and {len(b)}")

    def pooled(ids: tuple[int, ...]) -> torch.Tensor:
        return torch.cat([wctx.chunks[c].embeds.double().mean(0) for c in ids])

    return 1.0 - float(torch.nn.functional.cosine_similarity(pooled(a), pooled(b), dim=0))


@register
@dataclass
class DivergentProbe(WindowProbe):
    name = "divergent"
    stream = "divergent"
    n_chunks: int = 3
    rank: int | None = 32
    perturbations: tuple[str, ...] = PERTURBATIONS

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        check_int(self.name, "n_chunks", self.n_chunks, 2)
        self.perturbations = tuple(self.perturbations)
        bad = [p for p in self.perturbations if p not in PERTURBATIONS]
        if bad or not self.perturbations:
            raise ValueError(f"{self.name}: perturbations must be among {PERTURBATIONS}, got {self.perturbations}")

    def perturb(self, wctx: WindowContext, base: Layout, kind: str) -> Layout:
        k, mid = self.n_chunks, self.n_chunks // 2
        if kind == "reorder":
            return reorder(base, tuple(reversed(range(k))))
        if kind == "drop_duplicate":
            return drop_duplicate(base, mid, mid - 1)
        if kind == "replace_one":
            return replace(base, mid, wctx.item.foreign_id(mid))
        return Layout(tuple(wctx.item.foreign_id(j) for j in range(k)), base.target)

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). The antecedent's
        layout and one per perturbation (K + 1 chunks each); per perturbation blind, transfer and exact queries."""
        n = len(self.perturbations)
        return [shape.layout(self.n_chunks + 1, 1 + n), shape.query_over(self.n_chunks + 1, 3 * n), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = self.n_chunks
        needs_foreign = any(p.startswith("replace") for p in self.perturbations)
        self.need(wctx, k + 1, k if needs_foreign else 0)
        base = Layout(tuple(range(k)), k)
        source = wctx.view(base)
        stored = self.at_rank(source.patch, wctx)
        rows = []
        for kind in self.perturbations:
            layout = self.perturb(wctx, base, kind)
            if layout == base:
                raise ProbeRefusal(f"{self.name}: {kind} leaves the antecedent unchanged at K = {k}")
            view = wctx.view(layout)
            tag = {"setting": kind, "perturbation": kind, "divergence": divergence(wctx, base.before, layout.before)}
            rows += self.reference_rows(view, **tag)
            moved = view.carry_patch(stored)
            rows.append(self.row(view, "transfer", view.query_patch(moved, "transfer").logits, patch=moved,
                                 stored=[view.canonical_key, source.full_key], **tag))
            exact = self.at_rank(view.patch, wctx)
            rows.append(self.row(view, "exact", view.query_patch(exact, "exact").logits, patch=exact,
                                 paid=[view.full_key], stored=[view.canonical_key], **tag))
        return rows
