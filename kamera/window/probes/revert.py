"""Clean-view revert: conditioning as a switch on the live cache (App. E).

Source: App. E "Reverting to the context-clean view is free: overwrite the chunk's cache entries with
the stored canonical KV(B|∅), a copy with no arithmetic at all. Re-applying conditioning is a single
rank-m add, KV(B|∅) + U_m V_mᵀ. Both directions are exact and reversible."

The window: history chunks 0 … k−1 in front of chunk k. The live cache holds the target patched
(rank m); the revert copies the stored relocated canonical R(δ)·KV(c|∅) into the target's slots
(:func:`~kamera.window.context.overwrite`), the re-add copies the patched KV back. Variants:

- ``patch``: the query on the patched cache (conditioning on).
- ``revert``: the query on the live cache after the revert; ``exact_kv`` says whether the slots read
  back bit for bit as the stored canonical, ``exact_logits`` whether the query's logits are bit for
  bit blind reuse's (the same cache contents); ``bytes_written`` is the page copied, ``bytes`` 0
  (nothing is stored beyond the canonical).
- ``readd``: the query after writing the patched KV back (``exact_kv`` against it, ``exact_logits``
  against ``patch``).
- ``reprefill``, ``blind``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kamera.core import ChunkKV
from kamera.knobs import check_rank
from kamera.models.base import ForwardOut
from kamera.window.context import WindowContext, WindowView, fork, overwrite
from kamera.window.ops import Layout
from kamera.window.probes.base import WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape


def same(a: ChunkKV, b: ChunkKV) -> bool:
    """Every layer and channel bit for bit equal."""
    return all(
        torch.equal(x, y) for la, lb in zip(a.layers, b.layers, strict=True) for x, y in zip(la, lb, strict=True)
    )


def query_live(view: WindowView, live, tag: str) -> ForwardOut:
    """The query on (a fork of) a live cache of this layout: the cache itself is left as it was."""
    q = view.enc.spans[view.q]
    return view.adapter.forward([(q, view.start(view.q))], cache=fork(view.adapter, live), tag=tag)


@register
@dataclass
class RevertProbe(WindowProbe):
    name = "revert"
    stream = "recall"
    rank: int | None = 32

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One layout of k
        + 1 chunks; blind, patched, reverted and re-added queries."""
        return [shape.layout(shape.window + 1), shape.query_over(shape.window + 1, 4), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, k + 1)
        view = wctx.view(Layout(tuple(range(k)), k))
        patch = self.at_rank(view.patch, wctx)
        patched = patch.apply(view.relocated)
        on = view.query(patched, tag="patch")
        live = view.splice(patched)
        start, stop = view.ranges[view.b]
        positions = view.native_positions(view.b)
        tag = {"setting": f"rank={self.rank}"}
        rows = self.reference_rows(view, **tag)
        rows.append(
            self.row(view, "patch", on.logits, patch=patch, paid=[view.full_key], stored=[view.canonical_key], **tag)
        )
        for variant, kv, reference, applied in (
            ("revert", view.relocated, view.blind, None),
            ("readd", patched, on, patch),
        ):
            overwrite(wctx.adapter, live, start, kv)
            exact_kv = same(wctx.adapter.read(live, start, stop, positions), kv)
            out = query_live(view, live, variant)
            rows.append(
                self.row(
                    view,
                    variant,
                    out.logits,
                    bytes=0 if applied is None else None,
                    patch=applied,
                    stored=[view.canonical_key, view.full_key],
                    exact_kv=exact_kv,
                    exact_logits=torch.equal(out.logits, reference.logits),
                    bytes_written=kv.nbytes(),
                    **tag,
                )
            )
        return rows
