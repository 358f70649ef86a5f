"""Copy-on-write forks: one shared canonical, a patch per branch (App. E "Copy-on-write speculative forks").

Source: App. E "Because the canonical is shared, an agent can branch onto a context-clean fork while
keeping the conditioned overlay separate ... and pay to re-condition only on the branch it commits, at
the cost of a per-branch patch rather than a duplicated cache."

The branches are the recall stream's windows (:mod:`~kamera.window.probes.recall`): chunk x = k behind
the window after n = 0 … k slides, each a different context for the same cached chunk. Per branch:
``fork`` = the shared R(δ)·KV(x|∅) + the branch's rank-m patch (its bytes are the branch's cost);
``bytes_duplicated`` is what a duplicated cache stores for the chunk per branch (its page),
``bytes_shared`` the one canonical page all branches share, and ``shares_canonical`` whether the
branch's content channels are the canonical's own tensors (no copy made). Plus ``reprefill``, ``blind``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.knobs import check_rank
from kamera.window.context import WindowContext
from kamera.window.ops import Layout, recall_window
from kamera.window.probes.base import WindowProbe, register
from kamera.window.probes.recall import recall_stream

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


@register
@dataclass
class ForksProbe(WindowProbe):
    name = "forks"
    stream = "recall"
    rank: int | None = 32

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One recall
        layout per branch n = 0 … k (k + 1 chunks each); blind and the fork's patch query each."""
        k = shape.window
        return [shape.layout(k + 1, k + 1), shape.query_over(k + 1, 2 * (k + 1)), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, 2 * k + 1)
        old, x, new = recall_stream(k)
        canonical = wctx.canonical(x)
        content = [i for i, s in enumerate(canonical.specs) if s.rotary is None]
        rows = []
        for n in range(k + 1):
            view = wctx.view(Layout(recall_window(old, new, n), x))
            patch = self.at_rank(view.patch, wctx)
            shares = all(view.relocated.layers[l][c] is canonical.layers[l][c]
                         for l in range(canonical.n_layers) for c in content)
            tag = {"setting": f"branch={n}", "branch": n, "bytes_shared": canonical.nbytes(),
                   "bytes_duplicated": view.page_bytes(), "shares_canonical": shares}
            rows += self.reference_rows(view, **tag)
            rows.append(self.row(view, "fork", view.query_patch(patch, "fork").logits, patch=patch,
                                 paid=[view.full_key], stored=[view.canonical_key], **tag))
        return rows
