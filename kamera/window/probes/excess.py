"""Excess context: a stored {X, Y} patch served behind extra, irrelevant chunks (App. D "Excess context").

Source: App. D "Position-matched, the stale {X, Y} patch decays steadily as d distractor frames
accumulate (η_xy = 0.93 → 0.71 → 0.39 → 0.08 over d = 0–3 on Qwen2.5-VL) while a patch rebuilt with the
distractors present stays flat (≈ 0.92) ... Under a true superset (count growth plus relocation, MLA)
the stale patch turns actively harmful by d ≥ 2".

X, Y = history chunks 0 and 1, the target = chunk 2, the distractors = foreign chunks 0 … d−1 placed
in front of X and Y: the served window with d distractors is [prefix · D₁ … D_d · X · Y · target]
(its re-prefill is the reference). Variants per d ∈ 0 … ``distractors``:

- ``stale_matched``: the {X, Y} patch formed with X, Y and the target already at their positions in the
  d-distractor window, the distractors' positions left empty (a position gap): "position-matched".
- ``stale_superset``: the {X, Y} patch formed without distractors (X right after the prefix), relocated
  with the target by the distractors' extent: "count growth plus relocation".
- ``rebuilt``: the patch formed on the d-distractor window itself (one conditioned forward).
- ``reprefill``, ``blind``.

Choice: the distractors go in front of {X, Y}, so the target keeps its immediate neighbours and only
the excess material changes; each stale patch is formed in its own forward (stored state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.knobs import check_int, check_rank
from kamera.window.context import WindowContext
from kamera.window.ops import Layout, add_distractors
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


@register
@dataclass
class ExcessProbe(WindowProbe):
    name = "excess"
    stream = "excess"
    distractors: int = 3
    rank: int | None = 32

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        check_int(self.name, "distractors", self.distractors, 0)

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). The {X, Y}
        layout (3 chunks), per d distractors its layout (3 + d chunks) and, for d ≥ 1, the position-matched one (3
        chunks and a gap); per d blind and three patch queries."""
        d = range(self.distractors + 1)
        return [shape.layout(3, 1 + self.distractors), *(shape.layout(3 + i) for i in d),
                *(shape.query_over(3 + i, 4) for i in d), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        self.need(wctx, 3, self.distractors)
        xy = Layout((0, 1), 2)
        native = wctx.view(xy)
        rows = []
        for d in range(self.distractors + 1):
            ds = tuple(wctx.item.foreign_id(j) for j in range(d))
            view = wctx.view(add_distractors(xy, ds))
            matched = wctx.view(Layout(xy.before, xy.target, gap=sum(wctx.chunks[c].extent for c in ds)))
            tag = {"setting": f"d={d}", "distractors": d}
            rows += self.reference_rows(view, **tag)
            for variant, patch, paid, stored in (
                ("stale_matched", view.carry_patch(self.at_rank(matched.patch, wctx)), [], [matched.full_key]),
                ("stale_superset", view.carry_patch(self.at_rank(native.patch, wctx)), [], [native.full_key]),
                ("rebuilt", self.at_rank(view.patch, wctx), [view.full_key], []),
            ):
                rows.append(self.row(view, variant, view.query_patch(patch, variant).logits, patch=patch,
                                     paid=paid, stored=[view.canonical_key, *stored], **tag))
        return rows
