"""Recall: re-admit an evicted chunk behind a window that has turned over (§5 "Recall", Table 1, App. B).

Source: App. B "The recall sweep (Table 1) serves a bounded window of k chunks over a growing history
at turnover fractions τ ∈ {0, 0.2, …, 1.0}; 'stale' replays the patch frozen at eviction, 'fresh'
re-forms a rank-32 patch on the chunk's earlier (now fixed) context."

The stream (history ids, k = the item's window): ``old`` = 0 … k−1, the recalled chunk x = k, ``new`` =
k+1 … 2k. x was cached behind ``old``; its stale patch is the top-m SVD of KV(x|old) − R(δ)·KV(x|∅)
formed then. After n = τ·k slides the window in front of x is ``old[n:] + new[:n]``
(:func:`~kamera.window.ops.recall_window`), and x is re-admitted behind it. Variants, per τ:

- ``reprefill``: one forward over [prefix · window · x · query] (the reference).
- ``blind``: R(δ)·KV(x|∅), no patch.
- ``stale_patch``: the eviction-time patch, relocated to x's new position, replayed.
- ``stored_patch``: the patch as the paper's store holds it, formed before the recall exists: at the eviction,
  the rank-m patch of the conditioned KV x had then (on ``old``, the past it was conditioned on), relocated onto
  x's canonical positions and stored beside KV(x|∅); at the recall, relocated by R(δ) from there to x's
  position behind the window that has since turned over, and replayed. Nothing is paid at the recall (it reads
  the canonical and the eviction-time forward). A patch formed before the recall can only be conditioned on
  what existed then, so it is the stale patch by another route (two relocations, through the canonical frame,
  instead of one): their KLs agree to rounding at every τ, which is the measurement, not an assumption.
- ``fresh_exact``: the paper's fresh patch, "re-formed" on the window x is recalled behind (App. B; "the
  chunk's now-fixed earlier context"), formed at the recall: it pays the conditioned forward over
  [prefix · window · x] at the operation (the forward the re-prefill reference also runs, shared, counted once).

Choices: τ must be a multiple of 1/k (the paper's 0.2 steps are k = 5). The chunks other than x keep
the re-prefill's KV, so every variant differs from the reference in x's KV alone. At τ = 0 the
window is the eviction-time one and the stale patch is the fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.knobs import check_rank
from kamera.window.context import WindowContext
from kamera.window.ops import Layout, recall_window, turnover_count
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape

TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def recall_stream(k: int) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """(old window, recalled chunk, later chunks) of the recall stream in history ids, for a window of k."""
    return tuple(range(k)), k, tuple(range(k + 1, 2 * k + 1))


@register
@dataclass
class RecallProbe(WindowProbe):
    name = "recall"
    stream = "recall"
    version = 3  # 3: stored_patch formed at eviction, stored position-free (v2: fresh_patch, fresh_exact booked)
    taus: tuple[float, ...] = TAUS
    rank: int | None = 32

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        self.taus = tuple(float(t) for t in self.taus)
        if not self.taus or any(not 0 <= t <= 1 for t in self.taus):
            raise ValueError(f"{self.name}: taus must be turnover fractions in [0, 1], got {self.taus}")

    def problems(self, window: int | None = None) -> list[str]:
        """Every τ must be a multiple of 1/k for the benchmark's window of k chunks (:func:`turnover_count`)."""
        bad = [] if window is None else [t for t in self.taus if not _turns(t, window)]
        return [f"{self.name}: taus {bad} are not multiples of 1/k for the window of k = {window} chunks "
                f"(bench.kwargs.window)"] if bad else []

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). The
        eviction-time layout and each distinct turnover's layout (k + 1 chunks each), blind reuse per turnover layout
        and the stale, stored and exact patches' queries per τ, the target's canonical."""
        k = shape.window
        turned = {turnover_count(t, k) for t in self.taus}
        return [shape.layout(k + 1, len(turned | {0})), shape.query_over(k + 1, len(turned) + 3 * len(self.taus)),
                shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, 2 * k + 1)
        old, x, new = recall_stream(k)
        evicted = wctx.view(Layout(old, x))
        stale = self.at_rank(evicted.patch, wctx)  # frozen at eviction
        stored = evicted.store_patch(stale)  # kept beside KV(x|∅), in its frame, until x is recalled
        at_eviction = [evicted.canonical_key, evicted.full_key]  # what both read: no forward at the recall
        rows = []
        for tau in self.taus:
            view = wctx.view(Layout(recall_window(old, new, turnover_count(tau, k)), x))
            tag = {"setting": f"tau={tau:g}", "tau": tau}
            rows += self.reference_rows(view, **tag)
            for variant, patch in (("stale_patch", view.carry_patch(stale)),
                                   ("stored_patch", view.carry_patch(stored))):
                rows.append(self.row(view, variant, view.query_patch(patch, variant).logits, patch=patch,
                                     stored=at_eviction, **tag))
            fresh = self.at_rank(view.patch, wctx)
            rows.append(self.row(view, "fresh_exact", view.query_patch(fresh, "fresh_exact").logits, patch=fresh,
                                 paid=[view.full_key], stored=[view.canonical_key], **tag))
        return rows


def _turns(tau: float, k: int) -> bool:
    try:
        turnover_count(tau, k)
    except ValueError:
        return False
    return True
