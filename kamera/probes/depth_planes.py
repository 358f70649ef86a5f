"""Per layer and channel: |Δ| pooled to a token × feature grid, the planes of Fig. 8.

Wraps :func:`kamera.diagnostics.planes.depth_planes`; ``basis="components"`` reads the item's
full-rank patch (Δ in its singular basis). Records are per item (tokens × features cells per layer
and channel); a renderer averages the planes over items and normalises a figure to one maximum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.diagnostics.planes import check_planes, depth_planes
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class DepthPlanesProbe(Probe):
    """``tokens`` / ``features``: bins per axis; ``basis``: "features" (the cache's coordinates) or
    "components" (Δ's singular directions, decreasing σ; computes the full-rank patch)."""

    name = "depth_planes"
    needs = frozenset({"deficit"})
    tokens: int = 16
    features: int = 16
    basis: str = "features"

    def __post_init__(self) -> None:
        check_planes(self.tokens, self.features, self.basis)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Nothing beyond
        the shared Δ."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        return depth_planes(ctx, self.tokens, self.features, self.basis)
