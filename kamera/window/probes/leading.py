"""Leading-segment reuse: the chunk at the front of the window needs nothing (Table 2's first operating point).

Source: App. B "free and exact when the chunk is leading (deficit 0, a radix hit)"; Table 2
"leading-segment reuse | truncate + relocate | free (deficit = 0) | all (causal)".

The window: history chunks 0 … k (k = the item's window; the target is chunk 0, the chunks 1 … k sit
behind it, so the query reads a whole window). A causal model's KV of the leading chunk depends on the
prefix and the chunk alone, so the stored canonical KV(c|∅), prefilled behind the same prefix, *is* its
conditioned KV: R(δ) with δ = 0, no patch. Variants: ``leading`` (the stored canonical, nothing paid),
``reprefill`` and ``blind`` (here the same KV as ``leading``). Extra column ``kv_rel_diff``: the worst
layer-channel relative difference between the canonical and the re-prefill's KV of the chunk (0 up to
the attention kernel's rounding over a longer sequence). With ``canonical_context=none`` the canonical
lacks the prefix, which is then an antecedent: the deficit is not 0 and the rows show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.core import max_rel_diff
from kamera.window.context import WindowContext
from kamera.window.ops import Layout
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


@register
@dataclass
class LeadingProbe(WindowProbe):
    name = "leading"
    stream = "recall"

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One layout of k
        + 1 chunks and blind reuse's query."""
        return [shape.layout(shape.window + 1), shape.query_over(shape.window + 1), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, k + 1)
        view = wctx.view(Layout((), 0, tuple(range(1, k + 1))))
        tag = {"setting": "lead", "kv_rel_diff": max(max_rel_diff(view.relocated, view.conditioned).values())}
        return [
            *self.reference_rows(view, **tag),
            self.row(view, "leading", view.blind.logits, bytes=0, stored=[view.canonical_key], **tag),
        ]
