"""Per layer and channel: Δ's top-k singular values and right singular vectors, for the shared basis (App. C.2, §4).

A basis pooled over items is a cross-item quantity, so the probe only records each item's summary and
``experiments/basis.py`` fits the basis on one split of the items and evaluates it on the rest: the Gram
Σ_items V_k diag(s_k²) V_kᵀ per layer-channel, its top-r eigenvectors W, and the share of a held-out item's
‖Δ‖² that Δ W Wᵀ keeps against its own rank-r SVD. Read from the item's full-rank layer patch (no extra
decomposition); ``s`` and ``v`` are JSON lists (the top-k σ, and the k unit rows of V_kᵀ over the
channel's heads·dim), ``energy`` is ‖Δ‖² over every singular value, not only the kept ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.knobs import check_int
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class DeficitBasisProbe(Probe):
    """``k``: the singular directions kept per layer-channel (the largest rank the basis can be read at)."""

    name = "deficit_basis"
    needs = frozenset({"patch"})
    k: int = 16

    def __post_init__(self) -> None:
        check_int("deficit_basis", "k", self.k, 1)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`): none."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        patch, out = ctx.patch, []
        for layer, chans in enumerate(patch.factors):
            for spec, blocks in zip(patch.specs, chans, strict=True):
                b = blocks[0]
                k = min(self.k, b.full_rank)
                out.append({"layer": layer, "channel": spec.name, "width": int(b.vt.shape[1]), "k": k,
                            "energy": float((b.s.double() ** 2).sum()),
                            "s": json.dumps([float(f"{float(x):.7g}") for x in b.s[:k]]),
                            "v": json.dumps([[round(float(x), 6) for x in row] for row in b.vt[:k].float()])})
        return out
