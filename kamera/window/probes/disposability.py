"""The disposability test: toggle a chunk's patch off and see whether the answer moves (App. E).

Source: App. E "To ask whether an antecedent is still load-bearing for a pending query, toggle its
patch off and decode on the canonical: if the answer is unchanged the context was not needed and can
be dropped, a check that costs one decode rather than a recompute."

The window: history chunks 0 … k−1 in front of chunk k, patched at rank m in the live cache. The
test decodes with the patch on, reverts the chunk to its canonical (:func:`~kamera.window.context.
overwrite`, the clean-view revert) and decodes again. The answer is the choice the query's first
token picks (multiple choice) or ``max_new_tokens`` greedy tokens (open answers). Rows ``patch_on``
and ``patch_off`` carry ``answer``, ``disposable`` (the two answers agree), ``load_bearing`` (blind
reuse flips the re-prefill decision: the truth the test estimates, exact at full rank),
``call_correct`` (the test's call matches it) and ``decode_forwards`` (what the decode cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.knobs import check_int, check_rank
from kamera.metrics import flipped
from kamera.models.flops import Forward, WindowShape
from kamera.window.context import WindowContext, WindowView, overwrite
from kamera.window.ops import Layout
from kamera.window.probes.base import WindowProbe, register
from kamera.window.probes.revert import query_live


@register
@dataclass
class DisposabilityProbe(WindowProbe):
    name = "disposability"
    stream = "recall"
    rank: int | None = 32
    max_new_tokens: int = 8

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        check_int(self.name, "max_new_tokens", self.max_new_tokens, 1)

    def decode(self, view: WindowView, live, tag: str) -> tuple[object, str, int]:
        """(query output, answer, forwards spent) on the live cache."""
        adapter, before = view.adapter, sum(view.adapter.forwards.values())
        out = query_live(view, live, tag)
        if view.wctx.choice_ids is not None:
            answer = view.wctx.answer_text(out.logits)
        else:
            answer = adapter.decode(adapter.greedy(out, self.max_new_tokens, adapter.stop_ids()))
        return out, answer, sum(adapter.forwards.values()) - before

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One layout of k
        + 1 chunks; blind and the patch-on / patch-off queries, each followed by up to ``max_new_tokens`` one-token
        decode steps on open answers (counted as if every item decodes)."""
        k = shape.window + 1
        decode = Forward(1, shape.prefix + k * shape.chunk, 2 * self.max_new_tokens)
        return [shape.layout(k), shape.query_over(k, 3), decode, shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, k + 1)
        view = wctx.view(Layout(tuple(range(k)), k))
        patch = self.at_rank(view.patch, wctx)
        live = view.splice(patch.apply(view.relocated))
        on, answer_on, cost_on = self.decode(view, live, "disposability_on")
        overwrite(wctx.adapter, live, view.ranges[view.b][0], view.relocated)
        off, answer_off, cost_off = self.decode(view, live, "disposability_off")
        load_bearing = flipped(view.blind.logits, view.reprefill_logits, wctx.choice_ids)
        tag = {"setting": f"rank={self.rank}", "disposable": answer_on == answer_off,
               "load_bearing": load_bearing, "call_correct": (answer_on == answer_off) != load_bearing}
        return [
            self.row(view, "patch_on", on.logits, patch=patch, paid=[view.full_key],
                     stored=[view.canonical_key], answer=answer_on, decode_forwards=cost_on, **tag),
            self.row(view, "patch_off", off.logits, bytes=0, stored=[view.canonical_key],
                     answer=answer_off, decode_forwards=cost_off, **tag),
        ]
