"""The cheapest correct refresh after the antecedent changed (App. D "The cheapest correct refresh").

Source: App. D "Swapping d ∈ {0, 1, 2, 3} predecessor frames for distractors, a rank-32 patch update
tracks full rebuild ... at ∼ m/F of its bytes ... re-prefilling the deep three-quarters holds (≥ 0.90)
while a shallow-only refresh is unreliable (down to 0.37 at d = 3)".

A = history chunks 0 … K−1 in front of the target K; the cache holds the target's conditioned KV on A
(``stale``). Then the d oldest frames of A are swapped for the other clip's (foreign 0 … d−1): A′ =
foreign[:d] + A[d:] (the reference is the re-prefill behind A′). Refreshes of the cached KV:

- ``stale``: no refresh, the old conditioned KV carried to the target's positions.
- ``patch_update``: R(δ)·KV(c|∅) + a rank-m patch formed on A′ (one conditioned forward; m/F bytes).
- ``deep_refresh``: the bottom L − ⌈``deep_fraction`` · L⌉ layers keep the stale KV, the deep rest is
  re-prefilled in context (:func:`kamera.reuse.recompute.reuse_bottom` from the stale KV).
- ``shallow_refresh``: the shallow ⌈``shallow_fraction`` · L⌉ layers are recomputed in context, the
  deeper layers keep the stale KV (:func:`kamera.reuse.recompute.recompute`).
- ``reprefill``, ``blind``.

Choices: the oldest frames are swapped (as a slide turns them over); the shallow refresh's
``shallow_fraction`` (a quarter) is our reading of "shallow-only"; a partial refresh's bytes are the
KV rows it recomputes, its forwards the partial passes it runs (tag ``deep_refresh`` /
``shallow_refresh``, plus ``solo_hidden`` where it resumes mid-stack); rows carry ``n_layers`` beside the
partial refreshes' ``recomputed_layers``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.arms.budget import cell_bytes
from kamera.knobs import check_fraction, check_int, check_rank
from kamera.reuse.recompute import recompute, reuse_bottom
from kamera.window.context import WindowContext
from kamera.window.ops import Layout
from kamera.window.probes.base import ProbeRefusal, WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


@register
@dataclass
class RefreshProbe(WindowProbe):
    name = "refresh"
    stream = "refresh"
    n_chunks: int = 4
    swaps: tuple[int, ...] = (0, 1, 2, 3)
    rank: int | None = 32
    deep_fraction: float = 0.75
    shallow_fraction: float = 0.25

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        check_int(self.name, "n_chunks", self.n_chunks, 1)
        check_fraction(self.name, "deep_fraction", self.deep_fraction)
        check_fraction(self.name, "shallow_fraction", self.shallow_fraction)
        self.swaps = tuple(self.swaps)
        if not self.swaps or any(isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= self.n_chunks
                                 for d in self.swaps):
            raise ValueError(f"{self.name}: swaps must be ints in 0..n_chunks ({self.n_chunks}), got {self.swaps}")

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). The old layout
        and one per distinct swap (K + 1 chunks each); per swap five queries (blind, stale, patch update, deep and
        shallow refresh) and the target's rows re-run through the deep and the shallow layers."""
        k, swaps = self.n_chunks, len(self.swaps)
        deep = math.ceil(self.deep_fraction * n_layers) / n_layers
        shallow = math.ceil(self.shallow_fraction * n_layers) / n_layers
        return [shape.layout(k + 1, len(set(self.swaps) | {0})), shape.query_over(k + 1, 5 * swaps),
                shape.rows(k + 1, swaps * (deep + shallow)), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k, n_layers = self.n_chunks, wctx.adapter.n_layers
        self.need(wctx, k + 1, max(self.swaps))
        old = wctx.view(Layout(tuple(range(k)), k))
        reused = n_layers - math.ceil(self.deep_fraction * n_layers)
        shallow = range(math.ceil(self.shallow_fraction * n_layers))
        rows = []
        for d in self.swaps:
            view = wctx.view(Layout((*(wctx.item.foreign_id(j) for j in range(d)), *range(d, k)), k))
            stale = view.carry(old.conditioned)
            tag = {"setting": f"d={d}", "swapped": d, "n_layers": n_layers}
            rows += self.reference_rows(view, **tag)
            rows.append(self.row(view, "stale", view.query(stale, tag="stale").logits, bytes=0,
                                 stored=[old.full_key], **tag))
            update = self.at_rank(view.patch, wctx)
            rows.append(self.row(view, "patch_update", view.query_patch(update, "patch_update").logits,
                                 patch=update, paid=[view.full_key], stored=[view.canonical_key], **tag))
            for variant, redo in (
                ("deep_refresh", lambda v=view, s=stale: reuse_bottom(v, reused, s, tag="deep_refresh")),
                (
                    "shallow_refresh",
                    lambda v=view, s=stale: recompute(v, range(v.n_b), shallow, s, tag="shallow_refresh"),
                ),
            ):
                try:
                    rec = wctx.resource((variant, view.layout), redo)
                except NotImplementedError as why:  # an attention kernel or layer type the engine cannot drive
                    raise ProbeRefusal(f"{self.name}: {variant} cannot run here: {why}") from why
                rows.append(
                    self.row(
                        view,
                        variant,
                        view.query(rec.kv, tag=variant).logits,
                        bytes=rec.n_written_cells * cell_bytes(view),
                        paid=[(variant, view.layout)],
                        stored=[old.full_key, view.canonical_key],
                        recomputed_layers=sum(1 for w in rec.written if w.numel()),
                        **tag,
                    )
                )
        return rows
