"""Deep-half patch: the patch on the deepest half of the layers only (§1 contributions, Table 2 "deep-half patch").

Source: §1 "Because the deficit is deep, a non-universal cheaper variant patches only the deep layers
at roughly half the bytes, with the depth budget model-dependent"; Table 2 "deep-half patch |
deepest ∼ n_L/2 only | half the bytes | all (∼ 95%)".

The operation is admitting a chunk behind a cached window: history chunks 0 … k−1 in front of chunk k
(k = the item's window). Variants: ``patch`` (rank m, every layer), ``patch_deep`` (rank m on the deepest
⌈``fraction`` · n_L⌉ layers, :func:`kamera.core.deepest`; the other layers keep R(δ)·KV(c|∅)), plus
``reprefill`` and ``blind``. Choice: "∼95%" is read as η_deep / η_full; the rows carry both η and
bytes so a renderer forms that ratio and the byte ratio. Both patches share one SVD and one
conditioned forward (the reference's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.core import deepest
from kamera.knobs import check_rank
from kamera.window.context import WindowContext
from kamera.window.ops import Layout
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


@register
@dataclass
class DeepHalfProbe(WindowProbe):
    name = "deep_half"
    stream = "recall"
    rank: int | None = 32
    fraction: float = 0.5

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        if not 0 < self.fraction <= 1:
            raise ValueError(f"{self.name}: fraction must be in (0, 1], got {self.fraction}")

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One layout of k
        + 1 chunks; blind, full and deep-half patch queries."""
        return [shape.layout(shape.window + 1), shape.query_over(shape.window + 1, 3), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, k + 1)
        view = wctx.view(Layout(tuple(range(k)), k))
        full = self.at_rank(view.patch, wctx)
        deep = full.restrict(deepest(full.n_layers, self.fraction))
        tag = {"setting": f"deep={self.fraction:g}"}
        rows = self.reference_rows(view, **tag)
        for variant, patch in (("patch", full), ("patch_deep", deep)):
            rows.append(self.row(view, variant, view.query_patch(patch, variant).logits, patch=patch,
                                 paid=[view.full_key], stored=[view.canonical_key],
                                 patched_layers=len(patch.patched_layers), **tag))
        return rows
