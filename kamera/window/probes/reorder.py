"""Reorder: the same chunks in another order in front of a cached chunk (§5 "Reorder", Table 2's orbit patch).

Source: §5 "Permuting the predecessor set and comparing the stored canonical-order patch (transfer),
the ordering's own patch (exact), and a single patch averaged over the permutation orbit with the
test ordering held out (orbit) ... The raw deficit is not order-invariant (‖Δ_π − Δ_id‖/‖Δ_id‖ =
0.43–0.53) ... tested exhaustively over all orderings at K = 3 and K = 4 (3! and 4!), then sampled at
K = 6 (24 of 720)".

History chunks 0 … K−1 are the set, chunk K the target. The orbit O is every ordering of the set for
K ≤ ``exhaustive_up_to``, else the identity and ``samples`` − 1 distinct others drawn with ``seed``
(24 of 720 at K = 6). Every π ∈ O other than the identity is a test ordering (the identity's transfer
patch is its exact patch). Per test ordering (reference: the re-prefill of [prefix · set_π · target ·
query]):

- ``transfer``: the stored identity-order patch (its forward is stored state).
- ``exact``: π's own patch (one conditioned forward, shared with the reference).
- ``orbit``: the SVD of the mean Δ over O without π (:func:`orbit_patch`): formed from stored
  orderings, nothing paid at the reorder.

Permuting the set keeps its total extent, so the target's positions, and every Δ_π's frame, are the
same. Extra columns: ``order`` (π as digits), ``delta_rel`` = ‖Δ_π − Δ_id‖_F / ‖Δ_id‖_F over all layers and
channels, ``n_orderings`` and ``exhaustive``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.core import Patch, orbit_mean
from kamera.knobs import check_int, check_rank
from kamera.window.context import WindowContext, WindowView
from kamera.window.ops import Layout, reorder
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape

Ordering = tuple[int, ...]


def orderings(k: int, exhaustive_up_to: int, samples: int, seed: int) -> list[Ordering]:
    """The orbit: all k! orderings (identity first) when k ≤ ``exhaustive_up_to``, else the identity and
    ``samples`` − 1 distinct others drawn with ``seed``."""
    identity = tuple(range(k))
    if k <= exhaustive_up_to:
        return list(itertools.permutations(identity))
    chosen, rng = [identity], random.Random(seed)
    while len(chosen) < min(samples, math.factorial(k)):
        p = tuple(rng.sample(identity, k))
        if p not in chosen:
            chosen.append(p)
    return chosen


def orbit_patch(views: Sequence[WindowView]) -> Patch:
    """One full-rank patch from the mean deficit of ``views`` (the orderings of the orbit averaged over)."""
    return Patch.form(orbit_mean([v.deficit for v in views]), dtype=views[0].adapter.dtype)


def deficit_distance(a: WindowView, b: WindowView) -> float:
    """‖Δ_a − Δ_b‖_F / ‖Δ_b‖_F over every layer and channel."""
    num = sum(float((x - y).double().norm() ** 2) for la, lb in zip(a.deficit.layers, b.deficit.layers, strict=True)
              for x, y in zip(la, lb, strict=True))
    den = sum(float(y.double().norm() ** 2) for lb in b.deficit.layers for y in lb)
    return math.sqrt(num / den) if den > 0 else math.nan


@register
@dataclass
class ReorderProbe(WindowProbe):
    name = "reorder"
    stream = "reorder"
    n_chunks: int = 3
    rank: int | None = 16
    exhaustive_up_to: int = 4
    samples: int = 24
    seed: int = 0

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        check_int(self.name, "n_chunks", self.n_chunks, 2)
        check_int(self.name, "exhaustive_up_to", self.exhaustive_up_to, 0)
        check_int(self.name, "samples", self.samples, 2)
        check_int(self.name, "seed", self.seed, 0)

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One layout of K
        + 1 chunks per ordering of the orbit; per non-identity ordering blind, transfer, exact and orbit queries."""
        n = len(orderings(self.n_chunks, self.exhaustive_up_to, self.samples, self.seed))
        return [shape.layout(self.n_chunks + 1, n), shape.query_over(self.n_chunks + 1, 4 * (n - 1)), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = self.n_chunks
        self.need(wctx, k + 1)
        base = Layout(tuple(range(k)), k)
        orbit = orderings(k, self.exhaustive_up_to, self.samples, self.seed)
        views = {p: wctx.view(reorder(base, p)) for p in orbit}
        identity = views[orbit[0]]
        transfer = self.at_rank(identity.patch, wctx)
        rows = []
        for p in orbit[1:]:
            view = views[p]
            others = [views[o] for o in orbit if o != p]
            held_out = self.at_rank(orbit_patch(others), wctx)
            exact = self.at_rank(view.patch, wctx)
            order = "".join(map(str, p))
            tag = {"setting": f"K={k} order={order}", "order": order, "n_chunks": k, "n_orderings": len(orbit),
                   "exhaustive": len(orbit) == math.factorial(k), "delta_rel": deficit_distance(view, identity)}
            rows += self.reference_rows(view, **tag)
            for variant, patch, paid, stored in (
                ("transfer", view.carry_patch(transfer), [], [identity.full_key]),
                ("exact", exact, [view.full_key], []),
                ("orbit", held_out, [], [o.full_key for o in others]),
            ):
                logits = view.query_patch(patch, variant).logits
                rows.append(self.row(view, variant, logits, patch=patch, paid=paid,
                                     stored=[view.canonical_key, *stored], **tag))
        return rows


__all__ = ["ReorderProbe", "deficit_distance", "orbit_patch", "orderings"]
