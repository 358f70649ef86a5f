"""Per layer, channel and KV head: the energy ‖Δ_{l,c,h}‖²_F of the deficit (Fig. 6c, "not head-sparse").

Paper (App. C.3, "Wrong grouping"): "Δ is not head-sparse (90% of its energy needs ≈ 51% of
(layer×head) cells)". These records are the cells' energies; the figure's statistics (the fraction
of (layer × head) cells, taken by descending energy, that holds 90% of Δ's energy, against cells
taken in random order) are computed from them by ``experiments/fig6.py``. Δ = KV(B|A) − R(δ)·KV(B|∅)
in B's native frame, as every arm sees it. An MLA cache has no KV heads (the latent c_KV and the
decoupled k_pe are shared by every attention head), so its cells are its layers (head 0 of each
channel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class DeficitHeadsProbe(Probe):
    name = "deficit_heads"
    needs = frozenset({"deficit"})

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Nothing beyond
        the shared Δ."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        records = []
        for layer, chans in enumerate(ctx.deficit.layers):
            for spec, d in zip(ctx.deficit.specs, chans, strict=True):
                energy = d.double().pow(2).sum(dim=(0, 2))  # [heads]
                records += [{"layer": layer, "channel": spec.name, "head": h, "energy": float(e)}
                            for h, e in enumerate(energy)]
        return records
